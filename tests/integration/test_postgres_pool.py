"""The batch pool's connections keep their session settings for every batch."""

from __future__ import annotations

import pytest

from importer.adapters.postgres.pool import SESSION_SETTINGS, connect_pool

pytestmark = pytest.mark.integration


async def test_every_acquire_sees_the_batch_settings(db_dsn: str) -> None:
    # asyncpg's default reset on release (RESET ALL) used to drop settings made by an init
    # query after the first batch: only the first transaction committed asynchronously.
    pool = await connect_pool(db_dsn, 1)
    try:
        for _ in range(3):
            async with pool.acquire() as conn, conn.transaction():
                settings = {
                    name: await conn.fetchval(f"SHOW {name}")
                    for name in ("synchronous_commit", "enable_seqscan", "application_name")
                }
                assert settings == SESSION_SETTINGS
                await conn.execute("SET LOCAL synchronous_commit = on")  # the finalization's
    finally:
        await pool.close()


async def test_a_release_rolls_back_an_open_transaction(db_dsn: str) -> None:
    pool = await connect_pool(db_dsn, 1)
    try:
        async with pool.acquire() as conn:
            await conn.execute("BEGIN; CREATE TABLE left_open (x int)")
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT to_regclass('left_open')") is None
            assert not conn.is_in_transaction()
    finally:
        await pool.close()
