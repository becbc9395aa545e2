"""Shared fixtures: a real PostgreSQL with one template database per session.

Each test that needs a database gets a fresh copy of the migrated template
(``CREATE DATABASE … TEMPLATE``), as procrastinate's tests do.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from importer.adapters.postgres import migrate

ADMIN_DSN = os.environ.get(
    "IMPORTER_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def dsn_for(database: str) -> str:
    base, _, _ = ADMIN_DSN.rpartition("/")
    return f"{base}/{database}"


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(ADMIN_DSN)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
async def template_db() -> AsyncIterator[str]:
    name = f"importer_tpl_{uuid.uuid4().hex[:10]}"
    await _admin(f'CREATE DATABASE "{name}"')
    await migrate(dsn_for(name))
    yield name
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def db_dsn(template_db: str) -> AsyncIterator[str]:
    """A fresh, migrated database for this test only."""
    name = f"importer_t_{uuid.uuid4().hex[:10]}"
    await _admin(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield dsn_for(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_client_ids = itertools.count(1000)


@pytest.fixture
def client_ids() -> Iterator[int]:
    """Fresh tenant ids: tests that share a database never share a tenant."""
    return _client_ids
