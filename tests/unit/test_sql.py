"""The SQL files: named blocks parse, every block is parameterized."""

from __future__ import annotations

from importer.sql import parse_queries, queries, schema


def test_named_blocks() -> None:
    parsed = parse_queries("-- name: a\nSELECT 1;\n-- name: b\nSELECT $1;\n")
    assert parsed == {"a": "SELECT 1;", "b": "SELECT $1;"}


def test_shipped_queries_load() -> None:
    names = set(queries())
    assert {
        "find_contacts",
        "record_batch",
        "finalize_job",
        "transition_job",
    } <= names
    assert "CREATE TABLE IF NOT EXISTS contact" in schema()


def test_schema_is_idempotent_by_construction() -> None:
    dropped_views: set[str] = set()
    for line in schema().splitlines():
        stripped = line.strip().upper()
        if stripped.startswith("DROP VIEW IF EXISTS "):
            dropped_views.add(stripped.removeprefix("DROP VIEW IF EXISTS ").rstrip(";"))
        if stripped.startswith("CREATE VIEW "):  # recreated: dropped just before
            assert stripped.split()[2] in dropped_views, line
        elif stripped.startswith("CREATE OR REPLACE "):  # functions and triggers: replaced
            pass
        elif stripped.startswith("CREATE "):  # ALTER SEQUENCE … CACHE is idempotent by nature
            assert "IF NOT EXISTS" in stripped, line
        if stripped.startswith("ALTER TABLE") and " ADD COLUMN " in stripped:
            assert "ADD COLUMN IF NOT EXISTS" in stripped, line
        if stripped.startswith("DROP "):
            assert "IF EXISTS" in stripped, line


def test_job_queries_ship() -> None:
    assert {
        "record_batch_fenced",
        "claim_job",
        "renew_lease",
        "release_lease",
        "start_job",
        "view_job",
        "list_jobs",
        "list_user_jobs",
    } <= set(queries())
