"""Issue 11 point 1 on the real PostgreSQL: a damaged UTF-8 file imports its good names
byte-exact (its bad records reported ``invalid_encoding``), and a file read as Windows-1252
that holds UTF-8 sequences carries the ``suspect_encoding`` warning everywhere it is shown."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.store import PostgresStore
from importer.core.layout import Layout
from importer.core.models import JobStatus, JobWarning, Reason, RowIssue, Severity
from importer.core.report import write_csv_report
from importer.http.streams import jsonl_report
from tests.support import cpf, fetch, import_file

pytestmark = pytest.mark.integration

GOOD = ["Conceição Gonçalves", "😀 Zé", "Müller Ñandú", "São João", "André"]


def damaged_csv(path: Path) -> tuple[dict[str, bytes], list[int]]:
    """Three good accented names for every five corrupt records (lone Latin-1 byte, truncated
    sequence, overlong encoding...): the names expected per key, and the bad lines."""
    corrupt = [b"Jo\xe3o", b"Concei\xc3", b"Sl\xc0\xafsh", b"Ana \xe9", b"\xff\xfe"]
    lines, expected, bad = [b"nome,cpf"], {}, []
    for i in range(40):
        key = cpf(100 + i)
        if i % 8 < 5:
            name = corrupt[i % len(corrupt)]
            bad.append(len(lines) + 1)
        else:
            name = GOOD[i % len(GOOD)].encode()
            expected[key] = name
        lines.append(name + b"," + key.encode())
    path.write_bytes(b"\n".join(lines) + b"\n")
    return expected, bad


async def stored_names(dsn: str, client_id: int) -> dict[str, bytes]:
    rows = await fetch(
        dsn,
        "SELECT cpf_cnpj, convert_to(name, 'UTF8') AS name FROM contact WHERE client_id = $1",
        client_id,
    )
    return {r["cpf_cnpj"]: bytes(r["name"]) for r in rows}


async def report_of(dsn: str, job_id: uuid.UUID) -> list[RowIssue]:
    pool = await connect_pool(dsn, 2)
    try:
        return [issue async for issue in PostgresStore(pool).row_issues(job_id)]
    finally:
        await pool.close()


async def test_damaged_utf8_file_stores_its_good_names_byte_exact(
    db_dsn: str, tmp_path: Path
) -> None:
    expected, bad = damaged_csv(tmp_path / "damaged.csv")
    outcome = await import_file(db_dsn, tmp_path / "damaged.csv", 31, chunk_size=7)
    assert outcome.counters.inserted == len(expected)
    assert outcome.counters.invalid == len(bad)
    assert await stored_names(db_dsn, 31) == expected
    issues = await report_of(db_dsn, outcome.job_id)
    assert [(i.line, i.reason) for i in issues] == [(line, Reason.INVALID_ENCODING) for line in bad]
    assert outcome.warnings == ()


async def test_real_cp1252_file_imports_without_a_warning(db_dsn: str, tmp_path: Path) -> None:
    names = ["João", "Conceição", "Ângela Müller"]
    text = "nome;cpf\n" + "".join(f"{n};{cpf(200 + i)}\n" for i, n in enumerate(names))
    path = tmp_path / "cp1252.csv"
    path.write_bytes(text.encode("cp1252"))
    outcome = await import_file(db_dsn, path, 32)
    assert outcome.status is JobStatus.COMPLETED
    assert sorted((await stored_names(db_dsn, 32)).values()) == sorted(n.encode() for n in names)
    assert outcome.warnings == ()


async def test_utf8_read_as_cp1252_carries_the_suspect_encoding_warning(
    db_dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "mislabelled.csv"
    path.write_bytes(f"nome;cpf\nConceição;{cpf(300)}\nAna;{cpf(301)}\n".encode())
    outcome = await import_file(db_dsn, path, 33, layout=Layout(encoding="cp1252"))
    assert outcome.status is JobStatus.COMPLETED  # it imports: a person looks
    (warning,) = outcome.warnings
    assert warning.code is Reason.SUSPECT_ENCODING
    assert "Ã§" in warning.message
    # the status document's source (import_job.warnings, through the progress view)
    (row,) = await fetch(
        db_dsn, "SELECT warnings FROM import_job_progress WHERE id = $1", outcome.job_id
    )
    assert json.loads(row["warnings"]) == [{"code": "suspect_encoding", "message": warning.message}]
    # the error report: the warning first, line 0, severity warning
    issues = await report_of(db_dsn, outcome.job_id)
    assert issues[0] == RowIssue(
        0, None, Reason.SUSPECT_ENCODING, warning.message, Severity.WARNING
    )
    out = io.StringIO()
    await write_csv_report(_aiter(issues), out)
    assert out.getvalue().splitlines()[1].startswith("0,,suspect_encoding,warning,")
    first = b"".join([chunk async for chunk in jsonl_report(_aiter(issues))]).splitlines()[0]
    assert json.loads(first)["reason"] == "suspect_encoding"


async def test_a_warning_is_recorded_once_per_code(db_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "once.csv"
    path.write_bytes(f"nome;cpf\nConceição;{cpf(400)}\n".encode())
    outcome = await import_file(db_dsn, path, 34, layout=Layout(encoding="cp1252"))
    pool = await connect_pool(db_dsn, 2)
    try:
        store = PostgresStore(pool)
        again = JobWarning(Reason.SUSPECT_ENCODING, "found again by a resumed run")
        await store.add_warning(outcome.job_id, again)
        job = await store.get_job(outcome.job_id)
    finally:
        await pool.close()
    assert job.warnings == outcome.warnings
    assert len(job.warnings) == 1


async def _aiter(issues: list[RowIssue]) -> AsyncIterator[RowIssue]:
    for issue in issues:
        yield issue
