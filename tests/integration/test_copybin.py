"""The binary COPY payloads on the real PostgreSQL: what ``copybin`` (pure and compiled) sends
is stored exactly as asyncpg's ``copy_records_to_table`` stores the same rows, odd text too;
and a NUL is refused with the error the server gives asyncpg's COPY."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from importer.adapters.postgres import copybin
from importer.adapters.postgres.copybin import Kind
from importer.core.models import Channel

pytestmark = pytest.mark.integration

ODD = [
    "",
    "Conceição Gonçalves",
    "😀 𝄞 astral",
    "tab\tnewline\nreturn\r",
    "\\N",
    "back\\slash",
    "'quote\" ,;|",
    "\u200b\ufeff zero width",
    "x" * 100_000,
    "é" * 30_000,
]
JOB = uuid.uuid4()
TABLES: list[tuple[str, tuple[str, ...], tuple[Kind, ...], list[tuple[object, ...]]]] = [
    (
        "contact",
        ("id", "client_id", "cpf_cnpj", "name", "street_address", "import_job_id"),
        copybin.CONTACT,
        [
            (2**63 - 1 - i, -(2**31) + i, t, t[::-1], None if i % 3 else t, JOB)
            for i, t in enumerate(ODD)
        ]
        + [(1, 2**31 - 1, None, None, None, None)],
    ),
    (
        "contact_details",
        ("contact_id", "client_id", "channel_id", "value", "country_code", "country"),
        copybin.DETAIL,
        [
            (-(2**63) + i, i, list(Channel)[i % 4], t, None if i % 2 else 55, t or None)
            for i, t in enumerate(ODD)
        ]
        + [(0, 0, 2**15 - 1, "x", 2**31 - 1, None), (0, 0, -(2**15), "y", -(2**31), "")],
    ),
    (
        "contact_custom_fields",
        ("contact_id", "client_id", "custom_field_id", "value"),
        copybin.CUSTOM,
        [(i, i, i, t) for i, t in enumerate(ODD)],
    ),
    (
        "import_row_error",
        ("job_id", "line", "column_name", "reason", "severity", "value"),
        copybin.ROW_ERROR,
        [(JOB, i, t or None, "invalid_email", "invalid", t) for i, t in enumerate(ODD)],
    ),
]


@pytest.fixture
async def conn(db_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(db_dsn)
    try:
        yield connection
    finally:
        await connection.close()


async def copy_binary(
    conn: asyncpg.Connection, table: str, columns: tuple[str, ...], payload: bytearray
) -> None:
    await conn.copy_to_table(table, source=memoryview(payload), columns=columns, format="binary")


async def contents(conn: asyncpg.Connection, table: str, columns: tuple[str, ...]) -> list[tuple]:
    cols = ", ".join(f"{c}::text, convert_to({c}::text, 'UTF8')" for c in columns)
    rows = await conn.fetch(f"SELECT {cols} FROM {table} ORDER BY {', '.join(columns)}")
    return [tuple(r) for r in rows]


@pytest.mark.parametrize(("table", "columns", "kinds", "rows"), TABLES, ids=[t[0] for t in TABLES])
@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
async def test_copybin_stores_what_copy_records_stores(
    conn: asyncpg.Connection,
    table: str,
    columns: tuple[str, ...],
    kinds: tuple[Kind, ...],
    rows: list[tuple[object, ...]],
    compiled: bool,
) -> None:
    if compiled:
        pytest.importorskip("importer.adapters.postgres._copybin")
    for name in ("by_asyncpg", "by_copybin"):  # no keys: any ids, any job
        await conn.execute(f"CREATE TEMP TABLE {name} (LIKE {table} INCLUDING DEFAULTS)")
    await conn.copy_records_to_table("by_asyncpg", records=rows, columns=columns)
    await copy_binary(conn, "by_copybin", columns, copybin.encoder(compiled)(kinds, rows))
    stored = await contents(conn, "by_copybin", columns)
    assert stored == await contents(conn, "by_asyncpg", columns)
    assert len(stored) == len(rows)


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
async def test_a_nul_is_refused_as_the_server_refuses_it(
    conn: asyncpg.Connection, compiled: bool
) -> None:
    _, columns, kinds, _ = TABLES[2]
    await conn.execute("CREATE TEMP TABLE t (LIKE contact_custom_fields)")
    row = [(1, 2, 3, "before\x00after")]
    with pytest.raises(asyncpg.PostgresError) as by_server:
        await conn.copy_records_to_table("t", records=row, columns=columns)
    with pytest.raises(asyncpg.PostgresError) as by_encoder:
        copybin.encoder(compiled)(kinds, row)
    assert type(by_encoder.value) is type(by_server.value)
    assert str(by_encoder.value) == str(by_server.value)
    assert by_encoder.value.sqlstate == by_server.value.sqlstate == "22021"
