"""The suspect_encoding warning through the pipeline, the status document and the CLI summary,
and one encoding decision per file whatever the block size or a resume (issue 11, point 1)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from rich.console import Console

from importer.cli.output import outcome_document, summary_table
from importer.core.config import PipelineConfig
from importer.core.layout import Layout
from importer.core.models import (
    Batch,
    Counters,
    Job,
    JobStatus,
    JobWarning,
    Limits,
    Reason,
    Severity,
)
from importer.core.reference import InMemoryStore
from importer.http.openapi import JobBody
from importer.pipeline.run import ImportRun
from importer.read.blocks import BlockParser
from importer.services.local import ImportOutcome
from tests.support import cpf
from tests.unit.test_imports import NOW, view
from tests.unit.test_pipeline_stop import BytesSource, StopAfterRows, new_job

WARNING = JobWarning(Reason.SUSPECT_ENCODING, "the file was read as cp1252 but ...")
CP1252 = PipelineConfig(limits=Limits(), read_block_bytes=512, layout=Layout(encoding="cp1252"))


def utf8_file(mojibake_row: int, rows: int = 600) -> BytesSource:
    names = [("Conceição" if i == mojibake_row else f"N{i}") for i in range(rows)]
    lines = ["nome,cpf"] + [f"{name},{cpf(i)}" for i, name in enumerate(names)]
    return BytesSource("c.csv", ("\n".join(lines) + "\n").encode())


async def test_a_utf8_file_read_as_cp1252_warns_once_and_imports() -> None:
    store = InMemoryStore()
    job_id = await new_job(store)
    finalized = await ImportRun(await store.get_job(job_id), utf8_file(300), store, CP1252).run()
    assert finalized is not None
    assert finalized.status is JobStatus.COMPLETED
    (warning,) = (await store.get_job(job_id)).warnings
    assert warning.code is Reason.SUSPECT_ENCODING
    assert "cp1252" in warning.message
    assert "Ã§" in warning.message
    issues = [issue async for issue in store.row_issues(job_id)]
    first = issues[0]
    assert (first.line, first.column, first.reason, first.severity) == (
        0,
        None,
        Reason.SUSPECT_ENCODING,
        Severity.WARNING,
    )


@pytest.mark.parametrize("mojibake_row", [5, 550], ids=["before-the-stop", "after-the-stop"])
async def test_a_resumed_run_has_the_same_one_warning(mojibake_row: int) -> None:
    store = InMemoryStore()
    job_id = await new_job(store)
    stop = asyncio.Event()
    first = ImportRun(
        await store.get_job(job_id),
        utf8_file(mojibake_row),
        store,
        CP1252,
        StopAfterRows(stop, 200),
        stop,
    )
    assert await first.run() is None
    second = ImportRun(await store.get_job(job_id), utf8_file(mojibake_row), store, CP1252)
    assert await second.run() is not None
    assert [w.code for w in (await store.get_job(job_id)).warnings] == [Reason.SUSPECT_ENCODING]


async def test_a_clean_utf8_file_has_no_warning() -> None:
    store = InMemoryStore()
    job_id = await new_job(store)
    config = PipelineConfig(limits=Limits(), read_block_bytes=512)
    await ImportRun(await store.get_job(job_id), utf8_file(300), store, config).run()
    assert (await store.get_job(job_id)).warnings == ()


def test_the_encoding_decision_does_not_depend_on_the_block_size() -> None:
    # 64 KiB of lone Latin-1 bytes, then valid UTF-8: a head of 256 KiB used to read as UTF-8,
    # a head of 64 KiB as cp1252 (a resumed run with another block size decided otherwise)
    head = b"nome,cpf\n" + b"".join(b"Jo\xe3o %d,%s\n" % (i, cpf(i).encode()) for i in range(3500))
    tail = "".join(f"Conceição {i},{cpf(i)}\n" for i in range(8000)).encode()
    data = head + tail
    assert len(head) > 64 * 1024
    job = asyncio.run(_job())
    results: list[list[tuple[int, str | None]]] = []
    for block in (1000, 256 * 1024):
        parser = BlockParser(job, "c.csv", PipelineConfig(limits=Limits()))
        batches: list[Batch] = []
        for start in range(0, len(data), block):
            parser.push(data[start : start + block])
            while (pulled := parser.pull()) is not None:
                batches += pulled
        batches += parser.finish()
        results.append([(row.line, row.name) for b in batches for row in b.rows])
    assert results[0] == results[1]


async def _job() -> Job:
    store = InMemoryStore()
    return await store.get_job(await new_job(store))


def test_the_status_document_lists_the_warnings() -> None:
    document = job_document_with(WARNING)
    assert document["warnings"] == [{"code": "suspect_encoding", "message": WARNING.message}]
    assert JobBody.model_validate(document).warnings[0].code == "suspect_encoding"
    assert job_document_with()["warnings"] == []


def job_document_with(*warnings: JobWarning) -> dict[str, object]:
    from importer.services.documents import job_document

    return job_document(view(warnings=warnings), NOW)


def test_the_cli_summary_shows_the_warning() -> None:
    outcome = ImportOutcome(
        uuid.UUID(int=1), JobStatus.COMPLETED, Counters(rows_read=1, inserted=1), None, 1.0,
        warnings=(WARNING,),
    )  # fmt: skip
    assert outcome_document(outcome)["warnings"] == [
        {"code": "suspect_encoding", "message": WARNING.message}
    ]
    console = Console(record=True, width=200)
    console.print(summary_table(outcome))
    assert "warning: suspect_encoding" in console.export_text()
    quiet = ImportOutcome(uuid.UUID(int=1), JobStatus.COMPLETED, Counters(), None, 1.0)
    assert "warnings" not in outcome_document(quiet)
