"""Fuzz target: the pure CsvReader/JsonlReader (importer/read/) on hostile bytes.

The pure readers read hostile input too (and are the oracle of the compiled ones), so they must
never fail other than by the documented rejection (FileRejected from sniff) and must keep their
promises on any input:
- the same records whatever the block size (1, 3, 500 bytes or the whole input at once);
- records in order: lines increasing, end offsets within the input and not decreasing;
- a record is either its fields/values or a reason, and its raw text is at most RAW_CHARS;
- no field longer than the field cap, and at most record cap + one block held between feeds.

The first input byte picks the format, the block size and the caps; the rest is the file.
Run by ``scripts/fuzz`` (ASan build, leak checks); alone: ``python fuzz/fuzz_reader_pure.py``.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["importer"]):
    from importer.read.csvfile import CsvReader
    from importer.read.jsonl import JsonlReader
    from importer.read.records import RAW_CHARS, FileRejected, JsonRecord, RawRecord
    from importer.read.sniff import sniff

BLOCK_SIZES = (1, 3, 500, 0)  # 0: the whole input in one block
FIELD_CAPS = (8, 64, 65536)
SNIFF_BYTES = 65536
MAX_FEEDS = 512  # small blocks on a long input: bigger blocks, to keep the runs fast

Record = RawRecord | JsonRecord


def read(
    data: bytes, jsonl: bool, block: int, max_field: int, max_record: int
) -> list[Record] | None:
    """Every record of data fed in blocks of `block` bytes; None when sniff rejects the file."""
    try:
        sniffed = sniff(data[:SNIFF_BYTES])
    except FileRejected:
        return None
    kind = JsonlReader if jsonl else CsvReader
    reader = kind(sniffed, max_field_chars=max_field, max_record_chars=max_record)
    out: list[Record] = []
    step = block or max(len(data), 1)
    for start in range(0, len(data), step):
        out.extend(reader.feed(data[start : start + step]))
        held = reader.buffered_chars
        if held > max_record + step + 2:  # + the state prefix of a skipped record
            raise AssertionError(f"{held} chars held between feeds (cap {max_record}, {step=})")
    out.extend(reader.finish())
    return out


def check(records: list[Record], size: int, jsonl: bool, max_field: int) -> None:
    line, offset = 0, 0
    for record in records:
        if record.line <= line or record.end_line < record.line:
            raise AssertionError(f"lines out of order: {record!r} after line {line}")
        if not offset <= record.end_offset <= size:
            raise AssertionError(f"offset {record.end_offset} after {offset}, size {size}")
        line, offset = record.line, record.end_offset
        if len(record.raw) > RAW_CHARS:
            raise AssertionError(f"raw text of {len(record.raw)} chars")
        content = record.values if isinstance(record, JsonRecord) else record.fields
        if (content is None) == (record.reason is None):
            raise AssertionError(f"content and reason both set or both missing: {record!r}")
        if not jsonl and isinstance(record, RawRecord) and record.fields is not None:
            longest = max((len(field) for field in record.fields), default=0)
            if longest > max_field:
                raise AssertionError(f"a field of {longest} chars over the cap {max_field}")


def TestOneInput(data: bytes) -> None:  # noqa: N802 - the name atheris calls
    if not data:
        return
    control, body = data[0], data[1:]
    jsonl = bool(control & 1)
    block = BLOCK_SIZES[(control >> 1) & 3]
    if block:
        block = max(block, len(body) // MAX_FEEDS)
    max_field = FIELD_CAPS[(control >> 3) % len(FIELD_CAPS)]
    max_record = max_field * 4
    records = read(body, jsonl, block, max_field, max_record)
    if records is None:
        return
    check(records, len(body), jsonl, max_field)
    if block != 0:
        whole = read(body, jsonl, 0, max_field, max_record)
        if whole != records:
            raise AssertionError(f"block size {block} gives other records than one block")


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
