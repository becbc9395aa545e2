"""``importer job undo JOB`` (issue 15 point 1) as a process: the JSON it prints, the exit 1 and
one line of an undo_conflict, and a crash at each failpoint of the undo (``kill -9`` at a
slice's commit, or between slices) resumed by running it again to the same end: the client's
live contact tables byte for byte as before the import."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from importer.core.failpoints import CRASH_EXIT_CODE
from tests.acceptance.test_cli import import_json, importer
from tests.support import cpf, fetch, live_checksum

pytestmark = pytest.mark.acceptance

CHUNK = "7"


def _files(tmp: Path) -> tuple[Path, Path]:
    pre = tmp / "pre.csv"
    pre.write_text(
        "nome,cpf,email,plano\n"
        + "".join(f"Old {i},{cpf(3000 + i)},o{i}@x.com,bronze\n" for i in range(20)),
        encoding="utf-8",
    )
    body = tmp / "body.csv"
    body.write_text(
        "nome,cpf,email,plano,cidade\n"
        + "".join(f"New {i},{cpf(3000 + i)},n{i}@x.com,gold,Recife\n" for i in range(0, 40, 2)),
        encoding="utf-8",
    )  # half of them stored (updated: values, a channel, a new custom field), half new
    return pre, body


def _undo(dsn: str, job_id: str, failpoints: str = "") -> tuple[int, str, str]:
    os.environ["IMPORTER_FAILPOINTS"] = failpoints
    try:
        done = importer(dsn, "job", "undo", job_id, "--json")
    finally:
        os.environ.pop("IMPORTER_FAILPOINTS", None)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    "spec", ["", "undo_slice_before_commit=crash@3", "undo_after_slice=crash@2"]
)
def test_an_undo_crashed_at_a_failpoint_resumes_to_the_state_before_the_import(
    db_dsn: str, tmp_path: Path, spec: str
) -> None:
    client = str(7100 + len(spec))
    pre, body = _files(tmp_path)
    assert import_json(db_dsn, pre, "--client-id", client)[0] == 0
    before = asyncio.run(live_checksum(db_dsn, int(client)))
    code, job = import_json(db_dsn, body, "--client-id", client, "--chunk-size", CHUNK)
    assert code == 0
    if spec:
        code, _, _ = _undo(db_dsn, str(job["job_id"]), spec)
        assert code == CRASH_EXIT_CODE
        status = asyncio.run(
            fetch(db_dsn, "SELECT status FROM import_job WHERE id::text = $1", job["job_id"])
        )
        assert status[0]["status"] == "undoing"  # stopped half-way: resumable
    code, out, err = _undo(db_dsn, str(job["job_id"]))
    assert code == 0, err
    assert json.loads(out)["status"] == "undone"
    assert asyncio.run(live_checksum(db_dsn, int(client))) == before


def test_an_undo_conflict_exits_1_with_one_line(db_dsn: str, tmp_path: Path) -> None:
    client = "7200"
    pre, body = _files(tmp_path)
    _, first = import_json(db_dsn, pre, "--client-id", client)
    import_json(db_dsn, body, "--client-id", client)
    code, out, err = _undo(db_dsn, str(first["job_id"]))
    assert (code, out) == (1, "")
    assert err.startswith("importer: ")
    assert err.count("\n") == 1
    assert "undo the later imports first" in err
