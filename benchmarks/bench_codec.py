#!/usr/bin/env python3
"""CPU cost of the chunk-message codec (``importer/core/codec.py``) per row.

    .venv/bin/python benchmarks/bench_codec.py [--rows 100000] [--seed 1] [--repeats 5]

The file comes from ``benchmarks/generate.py`` (kept under ``benchmarks/data/``) and goes
through the pipeline's own reader and chunker (``BlockParser``: chunks of 5000, 4 partitions),
untimed. Then ``codec.encode`` of every batch and ``codec.decode`` of every message are timed
(process CPU time, best of ``--repeats``, the worker's cyclic-GC tuning: frozen start-up
objects, young threshold 500k) and reported in µs per row read, with the bytes per row of the
messages.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.generate import generate
from importer.core import codec
from importer.core.config import PipelineConfig
from importer.core.models import (
    Batch,
    ConflictStrategy,
    InputFormat,
    Job,
    JobStatus,
    Limits,
)
from importer.read.blocks import BlockParser

DATA_DIR = Path(__file__).resolve().parent / "data"
BLOCK = 256 * 1024


def batches_of(rows: int, seed: int) -> list[Batch]:
    """The batches the pipeline cuts from the generated file (rows, seed)."""
    path = DATA_DIR / f"bench_codec_{rows}_{seed}.csv"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        generate(rows, seed, path, write_meta=False)
    job = Job(
        id=uuid.uuid4(),
        client_id=1,
        status=JobStatus.IMPORTING,
        strategy=ConflictStrategy.MERGE,
        source=path.name,
        input_format=InputFormat.CSV,
        chunk_size=5000,
        partitions=4,
    )
    parser = BlockParser(job, path.name, PipelineConfig(Limits()))
    found: list[Batch] = []
    with path.open("rb") as handle:
        while block := handle.read(BLOCK):
            parser.push(block)
            while (batches := parser.pull()) is not None:
                found += batches
    found += parser.finish()
    parser.close()
    return found


def best_of(repeats: int, work: Callable[[], object]) -> float:
    """Best of ``repeats`` runs of ``work``, in process CPU seconds."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    batches = batches_of(args.rows, args.seed)
    rows = sum(b.rows_read for b in batches)
    job_id = uuid.uuid4()
    gc.freeze()  # as `importer worker` does (cli.commands._tune_gc)
    gc.set_threshold(500_000, 20, 20)
    print(f"codec v{codec.VERSION}: {len(batches)} batches, {rows} rows read; us/row")
    print("| codec | encode | decode | total | bytes/row |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for compiled in (False, True):
        implementation = codec.implementation(compiled)
        if implementation.compiled != compiled:
            print("| compiled | (not built: python setup.py build_ext --inplace) | | | |")
            continue
        encode, decode = implementation.encode, implementation.decode
        bodies = [encode(job_id, "bench-owner", b) for b in batches]
        assert [decode(body).batch for body in bodies] == batches
        encode_s = best_of(args.repeats, lambda: [encode(job_id, "w", b) for b in batches])  # noqa: B023
        decode_s = best_of(args.repeats, lambda: [decode(body) for body in bodies])  # noqa: B023
        size = sum(map(len, bodies))
        print(
            f"| {'compiled' if compiled else 'pure'} | {encode_s / rows * 1e6:.2f}"
            f" | {decode_s / rows * 1e6:.2f} | {(encode_s + decode_s) / rows * 1e6:.2f}"
            f" | {size / rows:.0f} |"
        )


if __name__ == "__main__":
    main()
