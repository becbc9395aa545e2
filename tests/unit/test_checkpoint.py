"""Checkpoint resume: a reader restarted at a chunk's (byte offset, line) yields exactly the
batches an uninterrupted read yields after that chunk — whatever the encoding, the line breaks,
quoted newlines, blank lines, gzip or the block size."""

from __future__ import annotations

import codecs
import gzip
import uuid

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from importer.core import lifecycle
from importer.core.config import PipelineConfig
from importer.core.errors import FileRejectedError
from importer.core.models import (
    Batch,
    Checkpoint,
    ConflictStrategy,
    InputFormat,
    Job,
    JobStatus,
    Limits,
)
from importer.read.blocks import BlockParser
from tests.strategies import csv_bytes, rows

CONFIG = PipelineConfig(limits=Limits(max_field_chars=40, max_record_chars=200))


def job(input_format: InputFormat, chunk_size: int, partitions: int) -> Job:
    return Job(
        uuid.uuid4(),
        1,
        JobStatus.IMPORTING,
        ConflictStrategy.MERGE,
        "f",
        input_format,
        chunk_size,
        partitions,
    )


def parse(
    the_job: Job, name: str, data: bytes, block: int, checkpoint: Checkpoint | None = None
) -> list[Batch]:
    parser = BlockParser(the_job, name, CONFIG, checkpoint)
    batches: list[Batch] = []
    for start in range(0, len(data), block):
        parser.push(data[start : start + block])
        while (pulled := parser.pull()) is not None:
            batches += pulled
    return batches + parser.finish()


def checkpoint_after(batches: list[Batch], chunk_no: int) -> Checkpoint:
    last = next(b for b in batches if b.chunk_no == chunk_no)
    return Checkpoint(chunk_no, last.end_offset, last.end_line)


def test_checkpoint_is_the_end_of_the_whole_prefix() -> None:
    positions = {
        (0, 0): (10, 3),
        (0, 1): (10, 3),
        (1, 0): (20, 5),
        (2, 0): (30, 7),
        (2, 1): (30, 7),
    }
    assert lifecycle.checkpoint(positions, 2) == Checkpoint(0, 10, 3)  # chunk 1 lacks partition 1
    positions[(1, 1)] = (20, 5)
    assert lifecycle.checkpoint(positions, 2) == Checkpoint(2, 30, 7)
    assert lifecycle.checkpoint({(1, 0): (20, 5)}, 1) is None  # chunk 0 missing: no prefix
    assert lifecycle.checkpoint({}, 3) is None


def _encoded(text: str, encoding: str) -> bytes:
    if encoding == "utf-16":
        return codecs.BOM_UTF16_LE + text.encode("utf-16-le")
    return text.encode(encoding)


@settings(max_examples=60, deadline=None)
@given(
    generated=st.lists(rows(), min_size=1, max_size=40),
    encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "cp1252"]),
    newline=st.sampled_from(["\r\n", "\n"]),
    extras=st.sampled_from(["", "blank", "multiline", "long"]),
    compress=st.booleans(),
    chunk_size=st.integers(1, 7),
    partitions=st.integers(1, 3),
    block=st.integers(1, 300),
    data=st.data(),
)
def test_a_resumed_csv_read_continues_exactly(
    generated: list,  # type: ignore[type-arg]
    encoding: str,
    newline: str,
    extras: str,
    compress: bool,
    chunk_size: int,
    partitions: int,
    block: int,
    data: st.DataObject,
) -> None:
    text = csv_bytes(generated).decode().replace("\r\n", newline)
    lines = text.split(newline)
    if extras == "blank":  # blank lines are not records but count as lines
        lines = [lines[0]] + [x for line in lines[1:] for x in (line, "")]
    elif extras == "multiline":  # quoted newlines: one record over several lines
        lines = [lines[0]] + [
            f'"{line}{newline}x",{line}' if i % 3 == 0 else line for i, line in enumerate(lines[1:])
        ]
    elif extras == "long":  # a record over the cap (field_too_long), skipped to its end
        lines.insert(len(lines) // 2, '"' + "y" * 250 + newline + 'z",1')
    raw = _encoded(newline.join(lines), encoding)
    name = "f.csv"
    if compress:
        raw, name = gzip.compress(raw), "f.csv.gz"
    the_job = job(InputFormat.CSV, chunk_size, partitions)
    whole = parse(the_job, name, raw, block)
    chunks = sorted({b.chunk_no for b in whole})
    after = data.draw(st.sampled_from(chunks))
    resumed = parse(
        the_job, name, raw, data.draw(st.integers(1, 300)), checkpoint_after(whole, after)
    )
    assert resumed == [b for b in whole if b.chunk_no > after]


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(
        st.sampled_from(['{"cpf": "%s", "nome": "A"}', "not json", "", "[1]"]),
        min_size=1,
        max_size=30,
    ),
    chunk_size=st.integers(1, 5),
    block=st.integers(1, 100),
    data=st.data(),
)
def test_a_resumed_jsonl_read_continues_exactly(
    values: list[str], chunk_size: int, block: int, data: st.DataObject
) -> None:
    keys = ["52998224725", "11144477735", "39053344705"]
    lines = [v % keys[i % 3] if "%s" in v else v for i, v in enumerate(values)]
    assume(any(lines))  # an empty file is rejected, not resumed
    raw = ("\n".join(lines) + "\n").encode()
    the_job = job(InputFormat.JSONL, chunk_size, 2)
    whole = parse(the_job, "f.jsonl", raw, block)
    if not whole:
        return
    after = data.draw(st.sampled_from(sorted({b.chunk_no for b in whole})))
    resumed = parse(the_job, "f.jsonl", raw, block, checkpoint_after(whole, after))
    assert resumed == [b for b in whole if b.chunk_no > after]


def test_a_resume_without_a_readable_header_reads_the_file_again() -> None:
    """No usable first record in the head: the resume falls back to reading from the start,
    which meets the unreadable header as the first run did (never a plan-less resume)."""
    raw = (",".join(["nome", "cpf", "x" * 300]) + "\nAna,52998224725,1\n").encode()
    the_job = job(InputFormat.CSV, 1, 1)
    with pytest.raises(FileRejectedError, match="header on line 1"):
        parse(the_job, "f.csv", raw, 4096, Checkpoint(0, len(raw), 3))


@pytest.mark.parametrize("compress", [False, True])
def test_a_resume_past_the_head_skips_to_the_offset(compress: bool) -> None:
    """Checkpoints beyond the 64 KiB head: the bytes up to them are dropped across blocks."""
    lines = ["nome;cpf;plano"] + [
        f'"N{i}\r\nx";{52998224725 if i % 2 else 11144477735};p{i % 7}' for i in range(6000)
    ]
    raw = ("\r\n".join(lines) + "\r\n").encode("utf-8-sig")
    name = "f.csv"
    if compress:
        raw, name = gzip.compress(raw), "f.csv.gz"
    the_job = job(InputFormat.CSV, 250, 3)
    whole = parse(the_job, name, raw, 4096)
    assert whole[-1].end_offset > 2 * 64 * 1024
    for after in (0, 7, 22):
        resumed = parse(the_job, name, raw, 10_000, checkpoint_after(whole, after))
        assert resumed == [b for b in whole if b.chunk_no > after]
        assert resumed[0].first_line == 2 * (after + 1) * 250 + 2  # two lines per record
