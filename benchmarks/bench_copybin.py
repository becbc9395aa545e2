#!/usr/bin/env python3
"""Cost of the batches' binary COPY payloads per input row: ``copybin``'s pure encoder, its
compiled twin, and asyncpg's ``copy_records_to_table`` (which encodes the records itself).

    .venv/bin/python benchmarks/bench_copybin.py [--rows 100000] [--batch 5000] [--repeats 3]
        [--dsn postgresql://127.0.0.1/postgres]

Rows are synthetic, shaped as ``PostgresBatches._write_plan`` builds them from a generated
file: per input row one ``contact`` row, ~3.4 ``contact_details`` rows (phones in E.164 with
their country, e-mails) and ~2.6 ``contact_custom_fields`` rows, accented text included.

1. encode: process CPU time of encoding every batch's three payloads (best of ``--repeats``),
   pure and compiled, in µs per input row.
2. COPY: every batch COPYed into three temporary tables of the same columns (no index), once
   per method, in one transaction per batch: wall time and this process's CPU time (the
   server's work is the same for the three; the client's is what differs), µs per input row.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from importer.adapters.postgres import copybin
from importer.core.models import Channel

Row = tuple[Any, ...]
Batch = list[tuple[str, tuple[str, ...], tuple[copybin.Kind, ...], list[Row]]]

CONTACT = ("id", "client_id", "cpf_cnpj", "name", "street_address", "import_job_id")
DETAIL = ("contact_id", "client_id", "channel_id", "value", "country_code", "country")
CUSTOM = ("contact_id", "client_id", "custom_field_id", "value")
TABLES = {
    "b_contact": "id bigint, client_id integer, cpf_cnpj text, name text, "
    "street_address text, import_job_id uuid",
    "b_details": "contact_id bigint, client_id integer, channel_id smallint, value text, "
    "country_code integer, country text",
    "b_custom": "contact_id bigint, client_id integer, custom_field_id integer, value text",
}
MESSAGE = 1 << 19  # bytes per CopyData message, as batches.py sends them
NAMES = ["Conceição Gonçalves", "João da Silva", "Müller Ñandú", "André Luís", "Maria Souza"]


def batches(rows: int, size: int) -> list[Batch]:
    """Synthetic batches: 5 input rows → 5 contacts, 17 details, 13 custom values."""
    job, client = uuid.uuid4(), 1000
    out: list[Batch] = []
    for start in range(0, rows, size):
        contacts: list[Row] = []
        details: list[Row] = []
        custom: list[Row] = []
        for i in range(start, min(start + size, rows)):
            cid = 10_000_000 + i
            name = f"{NAMES[i % 5]} {i}"
            contacts.append((cid, client, f"{i:011d}", name, f"Rua {name}, {i % 999}", job))
            details.append((cid, client, Channel.PHONE, f"+55119{i:08d}", 55, "BR"))
            details.append((cid, client, Channel.WHATSAPP, f"+55219{i:08d}", 55, "BR"))
            details.append((cid, client, Channel.EMAIL, f"contato.{i}@example.com.br", None, None))
            if i % 5 < 2:
                details.append((cid, client, Channel.PHONE, f"+35191{i:07d}", 351, "PT"))
            custom += [
                (cid, client, 7 + f, f"valor {f} ç {i % 97}") for f in range(2 + (i % 5 < 3))
            ]
        out.append(
            [
                ("b_contact", CONTACT, copybin.CONTACT, contacts),
                ("b_details", DETAIL, copybin.DETAIL, details),
                ("b_custom", CUSTOM, copybin.CUSTOM, custom),
            ]
        )
    return out


def fresh(rows: int, size: int) -> list[Batch]:
    """New batches (new str objects: no UTF-8 cached by an earlier encoding), GC frozen."""
    gc.unfreeze()
    work = batches(rows, size)
    gc.collect()
    gc.freeze()  # the collector's passes over the batches are not the encoder's cost
    return work


def encode_cost(count: int, size: int, encode: copybin.Encode, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        work = fresh(count, size)
        start = time.process_time()
        for batch in work:
            for _, _, kinds, rows in batch:
                encode(kinds, rows)
        best = min(best, time.process_time() - start)
    return best


Copy = Callable[
    [asyncpg.Connection, str, tuple[str, ...], tuple[copybin.Kind, ...], list[Row]],
    Awaitable[object],
]


async def _offsets(size: int) -> AsyncIterator[int]:
    for start in range(0, size, MESSAGE):
        yield start


def by_encoder(encode: copybin.Encode) -> Copy:
    async def copy(
        conn: asyncpg.Connection,
        table: str,
        columns: tuple[str, ...],
        kinds: tuple[copybin.Kind, ...],
        rows: list[Row],
    ) -> object:
        payload = memoryview(encode(kinds, rows))  # sent as PostgresBatches._copy sends it
        messages = (payload[i : i + MESSAGE] async for i in _offsets(len(payload)))
        return await conn.copy_to_table(table, source=messages, columns=columns, format="binary")

    return copy


async def by_asyncpg(
    conn: asyncpg.Connection,
    table: str,
    columns: tuple[str, ...],
    kinds: tuple[copybin.Kind, ...],  # noqa: ARG001 - a Copy
    rows: list[Row],
) -> object:
    return await conn.copy_records_to_table(table, records=rows, columns=columns)


async def copy_cost(dsn: str, rows: int, size: int, copy: Copy) -> tuple[float, float]:
    work = fresh(rows, size)
    conn = await asyncpg.connect(dsn)
    try:
        for name, columns in TABLES.items():
            await conn.execute(f"CREATE TEMP TABLE {name} ({columns})")
        # One warm-up batch (statement caches, table files), then truncated.
        async with conn.transaction():
            for table, columns, kinds, rows in work[0]:
                await copy(conn, table, columns, kinds, rows)
        await conn.execute("TRUNCATE " + ", ".join(TABLES))
        wall, cpu = time.perf_counter(), time.process_time()
        for batch in work:
            async with conn.transaction():
                for table, columns, kinds, rows in batch:
                    await copy(conn, table, columns, kinds, rows)
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dsn", default="postgresql://127.0.0.1/postgres")
    args = parser.parse_args()
    table_rows = sum(len(rows) for batch in batches(args.rows, args.batch) for *_, rows in batch)
    print(f"{args.rows} input rows, {table_rows} table rows, batches of {args.batch}")
    compiled = copybin.encoder(True)
    if compiled is copybin.encode:
        sys.exit("the compiled encoder is not built (setup.py build_ext --inplace)")
    per_row = 1e6 / args.rows
    print("encode (process CPU, best of repeats), µs per input row:")
    for name, encode in (("pure", copybin.encode), ("compiled", compiled)):
        print(
            f"  {name:9} {encode_cost(args.rows, args.batch, encode, args.repeats) * per_row:7.2f}"
        )
    print("COPY into temporary tables (best of repeats), µs per input row:  wall   py cpu")
    methods: list[tuple[str, Copy]] = [
        ("asyncpg copy_records_to_table", by_asyncpg),
        ("copybin pure", by_encoder(copybin.encode)),
        ("copybin compiled", by_encoder(compiled)),
    ]
    for name, copy in methods:
        runs = [await copy_cost(args.dsn, args.rows, args.batch, copy) for _ in range(args.repeats)]
        wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
        print(f"  {name:30} {wall * per_row:7.2f} {cpu * per_row:7.2f}")


if __name__ == "__main__":
    asyncio.run(main())
