"""MERGE and DISCARD outcomes on the real PostgreSQL, checked against the reference model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from importer.core.models import Channel, ConflictStrategy, JobStatus
from importer.core.reference import ContactState
from tests.support import bad_cpf, cpf, db_state, fetch, finalization_counts, import_file, write_csv

pytestmark = pytest.mark.integration

HEADER = ["nome", "cpf", "email", "celular", "plano"]
A, B, C = cpf(1), cpf(2), cpf(3)


def rows_with_repeats() -> list[list[str]]:
    return [
        ["Ana", A, "ana@example.com.br", "(11) 91234-5678", "gold"],
        ["Bruno", B, "", "", ""],
        ["", A, "ana2@example.com.br", "", ""],  # empty name never erases
        ["Carla", bad_cpf(3), "c@example.com.br", "", ""],  # invalid key
        ["Ana Maria", f"{A[:3]}.{A[3:6]}.{A[6:9]}-{A[9:]}", "", "11912345678", "platinum"],
        ["Bruno B", B, "not-an-email", "", "silver"],  # bad email: warning, row imports
    ]


async def test_merge_last_non_empty_wins_and_channels_union(db_dsn: str, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "m.csv", HEADER, rows_with_repeats())
    outcome = await import_file(db_dsn, path, 7, ConflictStrategy.MERGE, chunk_size=2)
    assert outcome.status is JobStatus.COMPLETED_WITH_PLACEHOLDERS  # "plano" became a field
    c = outcome.counters
    assert (c.rows_read, c.inserted, c.updated, c.invalid, c.error, c.ignored) == (6, 2, 3, 1, 0, 0)
    state = await db_state(db_dsn, 7)
    assert state[A] == ContactState(
        "Ana Maria",
        None,
        {
            (Channel.EMAIL, "ana@example.com.br"),
            (Channel.EMAIL, "ana2@example.com.br"),
            (Channel.PHONE, "+5511912345678"),
        },
        {"plano": "platinum"},
    )
    assert state[B] == ContactState("Bruno B", None, set(), {"plano": "silver"})
    assert C not in state


async def test_discard_first_valid_row_wins(db_dsn: str, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "d.csv", HEADER, rows_with_repeats())
    outcome = await import_file(db_dsn, path, 8, ConflictStrategy.DISCARD, chunk_size=1)
    c = outcome.counters
    assert (c.rows_read, c.inserted, c.updated, c.invalid, c.error, c.ignored) == (6, 2, 0, 1, 0, 3)
    state = await db_state(db_dsn, 8)
    assert state[A] == ContactState(
        "Ana",
        None,
        {(Channel.EMAIL, "ana@example.com.br"), (Channel.PHONE, "+5511912345678")},
        {"plano": "gold"},
    )
    assert state[B] == ContactState("Bruno", None, set(), {})


async def test_existing_keys_updated_or_ignored(db_dsn: str, tmp_path: Path) -> None:
    first = write_csv(tmp_path / "1.csv", HEADER, [["Old", A, "old@example.com.br", "", "bronze"]])
    await import_file(db_dsn, first, 9)
    second = write_csv(tmp_path / "2.csv", HEADER, [["", A, "new@example.com.br", "", ""]])
    merged = await import_file(db_dsn, second, 9, ConflictStrategy.MERGE)
    assert (merged.counters.inserted, merged.counters.updated) == (0, 1)
    assert merged.status is JobStatus.COMPLETED  # no new custom field this time
    state = await db_state(db_dsn, 9)
    assert state[A].name == "Old"
    assert state[A].custom_fields == {"plano": "bronze"}
    assert state[A].details == {
        (Channel.EMAIL, "old@example.com.br"),
        (Channel.EMAIL, "new@example.com.br"),
    }
    discarded = await import_file(db_dsn, second, 9, ConflictStrategy.DISCARD)
    assert (discarded.counters.inserted, discarded.counters.ignored) == (0, 1)


async def test_row_errors_carry_physical_lines(db_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "lines.csv"
    path.write_text(
        "nome,cpf,email\n"
        f'"Multi\nline name",{A},a@example.com.br\n'  # lines 2-3
        f"Bad,{bad_cpf(5)},\n"  # line 4
        "\n"  # blank: skipped, not counted
        ",,\n"  # all empty: skipped
        f"Ragged,{B}\n"  # line 7: too few fields
        f"Mail,{C},nope\n",  # line 8: warning
        encoding="utf-8",
    )
    out = await import_file(db_dsn, path, 10)
    assert out.counters.rows_read == 4
    assert out.counters.invalid == 2
    errors = await fetch(
        db_dsn,
        "SELECT line, column_name, reason, severity FROM import_row_error"
        " WHERE job_id = $1 ORDER BY line",
        out.job_id,
    )
    assert [(e["line"], e["reason"], e["severity"]) for e in errors] == [
        (4, "invalid_cpf", "invalid"),
        (7, "too_few_fields", "invalid"),
        (8, "invalid_email", "warning"),
    ]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("", "empty_file"),
        ("nome,email\nAna,a@b.com\n", "missing_required_column"),
        ("cpf,nome,Nome\n1,2,3\n", "duplicate_column"),
    ],
)
async def test_file_level_failures_fail_the_job_once(
    db_dsn: str, tmp_path: Path, content: str, reason: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content, encoding="utf-8")
    outcome = await import_file(db_dsn, path, 11)
    assert outcome.status is JobStatus.FAILED
    assert outcome.fail_reason == reason
    assert await finalization_counts(db_dsn, outcome.job_id) == (1, 1)


async def test_finalization_writes_one_row_and_one_notification(
    db_dsn: str, tmp_path: Path
) -> None:
    path = write_csv(tmp_path / "ok.csv", HEADER, rows_with_repeats())
    outcome = await import_file(db_dsn, path, 12, chunk_size=1, concurrency=4)
    assert await finalization_counts(db_dsn, outcome.job_id) == (1, 1)
    note = await fetch(
        db_dsn,
        "SELECT payload FROM outbox WHERE topic = 'notification' AND payload->>'job_id' = $1",
        str(outcome.job_id),
    )
    assert '"import_partial"' in note[0]["payload"]  # one invalid row
    follow_up = await fetch(
        db_dsn,
        "SELECT message_id, payload FROM outbox"
        " WHERE topic = 'contact-import/stats-refresh' AND payload->>'job_id' = $1",
        str(outcome.job_id),
    )
    assert [r["message_id"] for r in follow_up] == [f"stats-refresh:{outcome.job_id}"]
    assert '"client_id": 12' in follow_up[0]["payload"]


async def test_two_concurrent_imports_of_one_client_never_duplicate(
    db_dsn: str, tmp_path: Path
) -> None:
    keys = [cpf(100 + i) for i in range(400)]
    first = write_csv(
        tmp_path / "a.csv", HEADER, [[f"A{i}", k, "", "", "x"] for i, k in enumerate(keys[:300])]
    )
    second = write_csv(
        tmp_path / "b.csv", HEADER, [[f"B{i}", k, "", "", "y"] for i, k in enumerate(keys[100:])]
    )
    out_a, out_b = await asyncio.gather(
        import_file(db_dsn, first, 13, chunk_size=7, concurrency=3),
        import_file(db_dsn, second, 13, chunk_size=11, concurrency=2),
    )
    assert out_a.counters.inserted + out_b.counters.inserted == 400
    assert out_a.counters.updated + out_b.counters.updated == 200
    dupes = await fetch(
        db_dsn, "SELECT cpf_cnpj FROM contact WHERE client_id = 13 GROUP BY 1 HAVING count(*) > 1"
    )
    assert dupes == []
    state = await db_state(db_dsn, 13)
    assert len(state) == 400
    for key in keys[100:300]:  # per key, the later of the two writes wins
        assert state[key].name in {f"A{keys.index(key)}", f"B{keys.index(key) - 100}"}
