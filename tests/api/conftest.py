"""The API tier: the real server (`importer serve`) as a subprocess.

One server per session on a fresh migrated database with moto's S3 for storage, and one on its
own database with a local storage directory (the self-hosted upload URL). Each is started with
JWT_SECRET set, awaited on /readyz, and stopped with SIGTERM at the end: it must drain and exit 0
within a bound.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.api.support import MAX_UPLOAD_BYTES, SECRET
from tests.conftest import _admin, _free_loopback_port, dsn_for

IMPORTER = Path(sys.executable).with_name("importer")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Server:
    url: str
    dsn: str
    process: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str]

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def start_server(dsn: str, log: Path, **env: str) -> Server:
    port = _free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    full_env = {
        **os.environ,
        "DATABASE_URL": dsn,
        "JWT_SECRET": SECRET,
        "IMPORTER_PUBLIC_URL": url,
        "IMPORTER_MAX_UPLOAD_BYTES": str(MAX_UPLOAD_BYTES),
        "IMPORTER_CHUNK_SIZE": "2",
        "IMPORTER_CONCURRENCY": "2",
        "IMPORTER_WORKERS": "2",
        "IMPORTER_MAX_IMPORTS_PER_CLIENT": "2",
        "IMPORTER_LEASE_SECONDS": "3",  # heartbeats (which carry cancels) every second
        "IMPORTER_LOG_LEVEL": "warning",
        **env,
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(IMPORTER), "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(url, dsn, process, log, full_env)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _ready(url):  # readiness has no event to await: poll with a deadline
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"importer serve did not become ready:\n{server.output()}")
        time.sleep(0.05)
    return server


def stop_server(server: Server) -> None:
    """SIGTERM: the server drains and exits 0 within the bound."""
    server.process.send_signal(signal.SIGTERM)
    try:
        code = server.process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
        pytest.fail(f"importer serve did not stop on SIGTERM:\n{server.output()}")
    assert code == 0, server.output()


async def _database(template_db: str) -> str:
    name = f"importer_api_{uuid.uuid4().hex[:10]}"
    await _admin(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    return name


@pytest.fixture(scope="session")
async def api_db(template_db: str) -> AsyncIterator[str]:
    name = await _database(template_db)
    yield dsn_for(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
async def local_db(template_db: str) -> AsyncIterator[str]:
    name = await _database(template_db)
    yield dsn_for(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def server(
    api_db: str, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The server on S3 (moto): presigned uploads."""
    log = tmp_path_factory.mktemp("api") / "serve.log"
    running = start_server(
        api_db,
        log,
        S3_ENDPOINT_URL=s3_endpoint,
        IMPORTER_BUCKET=f"api-{uuid.uuid4().hex[:8]}",
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_REGION="us-east-1",
    )
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture(scope="session")
def local_server(local_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The server on a local directory: its own upload URL."""
    base = tmp_path_factory.mktemp("api-local")
    running = start_server(local_db, base / "serve.log", IMPORTER_STORAGE_DIR=str(base / "objects"))
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture
async def http(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        yield client
