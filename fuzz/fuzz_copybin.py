"""Fuzz target: the compiled binary COPY encoder (``_copybin.encode``) against the pure
reference (``copybin.encode``): the same bytes or the same error on rows decoded from the
fuzzer's bytes (any kinds, ints past their bounds, any code points, NUL, lone surrogates,
rows of the wrong width).

    python setup.py build_ext --inplace   # IMPORTER_SANITIZE=address for an ASan build
    python fuzz/fuzz_copybin.py -max_total_time=60
"""

from __future__ import annotations

import sys
import uuid

import atheris

with atheris.instrument_imports():
    from importer.adapters.postgres import _copybin, copybin
    from importer.adapters.postgres.copybin import Kind
    from importer.core.models import Channel

TABLES = (copybin.CONTACT, copybin.DETAIL, copybin.CUSTOM, copybin.ROW_ERROR)
KINDS = list(Kind)


def kinds_of(fdp: atheris.FuzzedDataProvider) -> tuple[Kind, ...]:
    choice = fdp.ConsumeIntInRange(0, len(TABLES))
    if choice < len(TABLES):
        return TABLES[choice]
    return tuple(fdp.PickValueInList(KINDS) for _ in range(fdp.ConsumeIntInRange(1, 8)))


def integer(fdp: atheris.FuzzedDataProvider) -> object:
    shape = fdp.ConsumeIntInRange(0, 5)
    if shape == 0:
        return fdp.PickValueInList(list(Channel))
    if shape == 1:
        return fdp.ConsumeFloat()  # truncated, or refused (inf, nan)
    if shape == 2:
        return fdp.ConsumeBool()
    return fdp.ConsumeInt(fdp.ConsumeIntInRange(1, 10))  # up to 80 bits: past every bound


def text(fdp: atheris.FuzzedDataProvider) -> object:
    size = fdp.ConsumeIntInRange(0, 64)
    shape = fdp.ConsumeIntInRange(0, 3)
    if shape == 0:
        return fdp.ConsumeUnicode(size)  # any code point, surrogates too
    if shape == 1:
        return fdp.ConsumeUnicodeNoSurrogates(size)
    if shape == 2:
        return fdp.ConsumeBytes(size).decode("latin-1") * fdp.ConsumeIntInRange(1, 300)
    return fdp.ConsumeBytes(size)  # not a str: refused


def an_uuid(fdp: atheris.FuzzedDataProvider) -> object:
    shape = fdp.ConsumeIntInRange(0, 2)
    raw = fdp.ConsumeBytes(16).ljust(16, b"\x00")
    if shape == 0:
        return uuid.UUID(bytes=raw)
    if shape == 1:
        return str(uuid.UUID(bytes=raw))
    return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 40))  # not a uuid (mostly)


def value(fdp: atheris.FuzzedDataProvider, kind: Kind) -> object:
    if fdp.ConsumeIntInRange(0, 7) == 0:
        return None
    if kind is Kind.TEXT:
        return text(fdp)
    if kind is Kind.UUID:
        return an_uuid(fdp)
    return integer(fdp)


def rows_of(fdp: atheris.FuzzedDataProvider, kinds: tuple[Kind, ...]) -> list[tuple[object, ...]]:
    rows = []
    for _ in range(fdp.ConsumeIntInRange(0, 20)):
        width = len(kinds) if fdp.ConsumeIntInRange(0, 15) else fdp.ConsumeIntInRange(0, 9)
        row = tuple(value(fdp, kinds[i % len(kinds)]) for i in range(width))
        rows.append(row)
    return rows


def outcome(encode: copybin.Encode, kinds: tuple[Kind, ...], rows: list) -> object:
    try:
        return bytes(encode(kinds, rows))
    except Exception as exc:  # noqa: BLE001 - the errors are compared
        return (type(exc), str(exc))


def TestOneInput(data: bytes) -> None:  # noqa: N802 - atheris' name
    fdp = atheris.FuzzedDataProvider(data)
    kinds = kinds_of(fdp)
    rows = rows_of(fdp, kinds)
    compiled, pure = outcome(_copybin.encode, kinds, rows), outcome(copybin.encode, kinds, rows)
    if compiled != pure:
        raise AssertionError(f"compiled {compiled!r} != pure {pure!r} for {kinds!r} {rows!r}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
