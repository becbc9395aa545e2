"""Shared fixtures: a real PostgreSQL with one template database per session, and moto's S3.

Each test that needs a database gets a fresh copy of the migrated template
(``CREATE DATABASE … TEMPLATE``), as procrastinate's tests do. Tests of the S3 store talk to
moto's server, started once per session on a free loopback port.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from hypothesis import HealthCheck, settings

from importer.adapters.postgres.pool import migrate

# Hypothesis judges its input generation by the wall clock; scripts/test runs the unit tier at a
# lower priority beside the service tiers on two cores, where a second of starvation says nothing
# about the strategy. The properties and their example counts are unchanged.
settings.register_profile(
    "shared-cores", suppress_health_check=[HealthCheck.too_slow], deadline=None
)
settings.load_profile("shared-cores")

ADMIN_DSN = os.environ.get(
    "IMPORTER_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def dsn_for(database: str) -> str:
    """ADMIN_DSN with another database (its host, port, user and query, such as an embedded
    server's ``?host=/socket/dir``, kept)."""
    parts = urllib.parse.urlsplit(ADMIN_DSN)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))


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


@pytest.fixture
async def pre_key_form_db(template_db: str) -> AsyncIterator[str]:
    """A fresh migrated database without ``contact_client_key_form_key``: one migrated before
    the index existed (or one whose legacy rows block it)."""
    name = f"importer_t_{uuid.uuid4().hex[:10]}"
    await _admin(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    conn = await asyncpg.connect(dsn_for(name))
    try:
        await conn.execute("DROP INDEX contact_client_key_form_key")
    finally:
        await conn.close()
    yield dsn_for(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_client_ids = itertools.count(1000)


@pytest.fixture
def client_ids() -> Iterator[int]:
    """Fresh tenant ids: tests that share a database never share a tenant."""
    return _client_ids


# --- object storage: moto's S3 server ---------------------------------------------------------

MOTO_SERVER = Path(sys.executable).with_name("moto_server")
_MOTO_START_TIMEOUT_S = 30.0


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _wait_until_answers(endpoint: str, server: subprocess.Popen[bytes], log: Path) -> None:
    """Poll moto's own API until it answers (readiness has no event to await)."""
    deadline = time.monotonic() + _MOTO_START_TIMEOUT_S
    while not _answers(endpoint):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"moto_server did not start:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An S3 endpoint: S3_TEST_ENDPOINT_URL if set, else moto's server on a free loopback port,
    started for this session and stopped at its end."""
    configured = os.environ.get("S3_TEST_ENDPOINT_URL")
    if configured:
        yield configured.rstrip("/")
        return
    port = _free_loopback_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("moto") / "moto_server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out
        )
    try:
        _wait_until_answers(endpoint, server, log)
        yield endpoint
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
