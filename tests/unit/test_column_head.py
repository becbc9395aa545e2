"""The columns step reads a file's head only (issue 29): the header and the first rows, with the
import's own readers (encoding, delimiter, gzip, JSON Lines), and never a whole big file."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from importer.adapters.storage.local import LocalObjectStore
from importer.core.columns import ClientColumns
from importer.core.errors import FileRejectedError
from importer.core.models import InputFormat
from importer.services.columns import (
    HEAD_MAX_BYTES,
    FileHead,
    columns_step,
    read_head,
    transient_job,
)
from importer.services.runs import ObjectSource, job_config
from importer.settings import Settings
from tests.xlsx_support import write_workbook

ROWS = 50


async def head_of(
    path: Path, input_format: InputFormat, layout: dict[str, object] | None = None
) -> FileHead:
    job = transient_job(path.name, input_format, layout)
    source = ObjectSource(LocalObjectStore(path.parent), path.name, size=None, pinned=None)
    return await read_head(source, job, job_config(Settings(), job), ROWS)


async def test_a_csv_head_in_its_encoding_and_delimiter(tmp_path: Path) -> None:
    lines = ["Nome;Endereço;Obs"] + [f"Zé {i};Rua {i};x" for i in range(200)]
    path = tmp_path / "c.csv"
    path.write_bytes("\n".join(lines).encode("cp1252"))
    head = await head_of(path, InputFormat.CSV)
    assert head.headers == ("Nome", "Endereço", "Obs")
    assert len(head.rows) == ROWS
    assert head.rows[0] == ("Zé 0", "Rua 0", "x")


async def test_gzip_json_lines_and_a_headerless_layout(tmp_path: Path) -> None:
    objects = [
        {"nome": f"P{i}", "cpf": str(i)} | ({"zap": "1"} if i == 3 else {}) for i in range(9)
    ]
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n".join(orjson.dumps(o) for o in objects)))
    head = await head_of(path, InputFormat.JSONL)
    assert head.headers == ("nome", "cpf", "zap")
    assert head.rows[3] == ("P3", "3", "1")
    assert head.rows[0] == ("P0", "0", "")

    bare = tmp_path / "bare.csv"
    bare.write_text("Ana,52998224725\nBia,11144477735\n", encoding="utf-8")
    layout = {"header": False, "columns": [{"column": 1, "target": "cpf_cnpj"}]}
    headless = await head_of(bare, InputFormat.CSV, layout)
    assert headless.headers == ("", "")
    assert headless.rows == (("Ana", "52998224725"), ("Bia", "11144477735"))
    step = columns_step(headless, ClientColumns(), layout)
    assert step.mapped
    assert [v.suggestion.target.kind.value for v in step.columns] == ["ignore", "cpf_cnpj"]


class Counted:
    """A source that counts the bytes it hands out."""

    def __init__(self, source: ObjectSource) -> None:
        self.name = source.name
        self._source = source
        self.read = 0

    async def blocks(self, block_size: int) -> AsyncIterator[bytes]:
        async for block in self._source.blocks(block_size):
            self.read += len(block)
            yield block


async def test_a_file_without_a_line_break_is_not_read_to_its_end(tmp_path: Path) -> None:
    path = tmp_path / "one-line.csv"
    with path.open("wb") as out:
        for _ in range(40):
            out.write(b"a" * (1024 * 1024))  # 40 MiB, one unfinished record
    job = transient_job(path.name, InputFormat.CSV, None)
    source = Counted(ObjectSource(LocalObjectStore(tmp_path), path.name, size=None, pinned=None))
    with pytest.raises(FileRejectedError):
        await read_head(source, job, job_config(Settings(), job), ROWS)
    assert source.read <= HEAD_MAX_BYTES + Settings().read_block_bytes


async def test_a_workbook_head_from_its_sheet(tmp_path: Path) -> None:
    rows = [["Nome", "CPF", "Celular"], *[[f"P{i}", "52998224725", 11987654321] for i in range(80)]]
    path = write_workbook(tmp_path / "c.xlsx", rows)
    head = await head_of(path, InputFormat.XLSX)
    assert head.headers == ("Nome", "CPF", "Celular")
    assert len(head.rows) == ROWS
    assert head.rows[0] == ("P0", "52998224725", "11987654321")
