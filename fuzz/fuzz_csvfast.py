"""Fuzz target: the compiled CSV reader (importer.read._csvfast) against the pure CsvReader.

The fuzz bytes choose the encoding, the delimiter, the caps, the resume point and the cuts into
blocks; both readers read the same blocks and must give the same records feed by feed, the same
error and the same state at the end. Any difference raises.

Run: python fuzz/fuzz_csvfast.py [corpus dir] (atheris; the extension built, with
IMPORTER_SANITIZE=address for AddressSanitizer). Not run by CI.
"""

from __future__ import annotations

import sys
from typing import Any

import atheris

with atheris.instrument_imports():
    from importer.read._csvfast import FastCsvReader
    from importer.read.csvfile import CsvReader
    from importer.read.records import Sniffed

ENCODINGS = ["utf-8", "cp1252", "utf-16-le", "utf-16-be", "utf-32-le", "iso8859-15"]
DELIMITERS = [",", ";", "\t", "|", "x", " "]


def read(
    cls: type[CsvReader], blocks: list[bytes], sniffed: Sniffed, options: dict[str, int]
) -> Any:
    steps: list[Any] = []
    try:
        reader = cls(sniffed, **options)
        for block in blocks:
            steps.append(reader.feed(block))
            steps.append((reader.buffered_chars, reader._line, reader._offset, reader._skip))
        steps.append(reader.finish())
    except Exception as error:  # noqa: BLE001 - the same error is the expected answer
        return steps, type(error), str(error)
    state = (reader.buffered_chars, reader.mojibake, reader.encoding, reader._line)
    return steps, state, (reader._offset, reader._buf, reader._dirty, reader._skip)


def TestOneInput(data: bytes) -> None:  # noqa: N802 - atheris' name
    fdp = atheris.FuzzedDataProvider(data)
    encoding = ENCODINGS[fdp.ConsumeIntInRange(0, len(ENCODINGS) - 1)]
    sniffed = Sniffed(
        encoding,
        DELIMITERS[fdp.ConsumeIntInRange(0, len(DELIMITERS) - 1)],
        fdp.ConsumeIntInRange(0, 4),
    )
    options = {
        "max_field_chars": fdp.ConsumeIntInRange(1, 300),
        "max_record_chars": fdp.ConsumeIntInRange(1, 600),
        "start_line": fdp.ConsumeIntInRange(1, 9),
        "start_offset": fdp.ConsumeIntInRange(0, 3) * 7,
    }
    blocks = []
    while fdp.remaining_bytes():
        blocks.append(fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 600)))
    pure = read(CsvReader, blocks, sniffed, options)
    fast = read(FastCsvReader, blocks, sniffed, options)
    if fast != pure:
        raise AssertionError(f"compiled != pure\n{blocks!r}\n{sniffed} {options}\n{fast}\n{pure}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
