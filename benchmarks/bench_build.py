#!/usr/bin/env python3
"""CPU cost of ``RowBuilder.build`` per record on a generated contact file.

    .venv/bin/python benchmarks/bench_build.py [--rows 200000] [--seed 1] [--repeats 3]
        [--components]

The file comes from ``benchmarks/generate.py`` (kept under ``benchmarks/data/`` and reused
while rows and seed stay the same) and is parsed once with ``importer.read.csvfile.CsvReader``,
untimed. Only ``builder.build(rec.line, rec.fields)`` over every record is timed, in process
CPU time (other processes' time is not counted, but a busy machine still slows this one:
measure on a quiet one); the best of ``--repeats`` passes is reported in µs per record.
Target: <= 8 µs/record. ``--components`` also times the normalizers alone on the same
file's key, e-mail and phone values (per call, and per record: times the share of records
with a value).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.generate import generate
from importer.core.layout import plan_for_header
from importer.core.normalize import normalize_cpf_cnpj, normalize_email, normalize_phone_parts
from importer.core.rows import RowBuilder
from importer.read.csvfile import CsvReader
from importer.read.records import RawRecord
from importer.read.sniff import sniff

DATA_DIR = Path(__file__).resolve().parent / "data"
BLOCK = 1 << 20


def bench_file(rows: int, seed: int) -> Path:
    """The generated file for (rows, seed), written on first use."""
    path = DATA_DIR / f"bench_build_{rows}_{seed}.csv"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        generate(rows, seed, path, write_meta=False)
    return path


def read_records(path: Path) -> tuple[list[str], list[RawRecord]]:
    """(header, data records) of a CSV file, parsed as the pipeline does."""
    data = path.read_bytes()
    reader = CsvReader(sniff(data[:65536]))
    records: list[RawRecord] = []
    for start in range(0, len(data), BLOCK):
        records += reader.feed(data[start : start + BLOCK])
    records += reader.finish()
    if not records or records[0].fields is None:
        sys.exit(f"{path}: no header record")
    header, body = records[0].fields, records[1:]
    if any(r.fields is None for r in body):
        sys.exit(f"{path}: the reader rejected some records")
    return header, body


def time_build(builder: RowBuilder, records: Sequence[RawRecord], repeats: int) -> float:
    """Best of ``repeats`` passes, in µs per record (process CPU time)."""
    build = builder.build
    pairs = [(r.line, r.fields or []) for r in records]
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.process_time_ns()
        for line, fields in pairs:
            build(line, fields)
        best = min(best, time.process_time_ns() - start)
    return best / len(pairs) / 1000


def time_calls(fn: Callable[[str], object], values: Sequence[str], repeats: int) -> float:
    """Best of ``repeats`` passes of ``fn`` over ``values``, in µs per call."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.process_time_ns()
        for value in values:
            fn(value)
        best = min(best, time.process_time_ns() - start)
    return best / max(len(values), 1) / 1000


def components(header: Sequence[str], records: Sequence[RawRecord], repeats: int) -> None:
    """The normalizers alone, on the non-empty stripped values of their columns."""

    def column(name: str) -> list[str]:
        index = header.index(name)
        values = (r.fields[index].strip() for r in records if r.fields is not None)
        return [v for v in values if v]

    def phone(raw: str) -> object:
        return normalize_phone_parts(raw, international=False)

    n = len(records)
    cases: list[tuple[str, Callable[[str], object], list[str]]] = [
        ("normalize_cpf_cnpj (cpf)", normalize_cpf_cnpj, column("cpf")),
        ("normalize_email (email)", normalize_email, column("email")),
        ("normalize_phone_parts (celular)", phone, column("celular")),
        ("normalize_phone_parts (whatsapp)", phone, column("whatsapp")),
    ]
    for name, fn, values in cases:
        per_call = time_calls(fn, values, repeats)
        per_record = per_call * len(values) / n
        print(f"  {name:<34} {per_call:6.2f} µs/call  {per_record:6.2f} µs/record")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--components", action="store_true")
    args = parser.parse_args(argv)
    header, records = read_records(bench_file(args.rows, args.seed))
    plan = plan_for_header(header, None, 512)
    builder = RowBuilder(plan, international=False, max_value_chars=4096)
    us = time_build(builder, records, args.repeats)
    print(f"RowBuilder.build: {us:.2f} µs/record ({len(records)} records, best of {args.repeats})")
    try:
        from importer.core._rows import FastRowBuilder
    except ImportError:
        print("FastRowBuilder.build: not built (python setup.py build_ext --inplace)")
    else:
        fast = FastRowBuilder(plan, international=False, max_value_chars=4096)
        fast_us = time_build(fast, records, args.repeats)  # type: ignore[arg-type]
        print(f"FastRowBuilder.build (compiled): {fast_us:.2f} µs/record ({us / fast_us:.1f}x)")
    if args.components:
        components(header, records, args.repeats)


if __name__ == "__main__":
    main()
