"""`importer serve` as deploy/importer.service runs it: Type=notify and MemoryDenyWriteExecute.

systemd is not PID 1 here, so the two are reproduced by hand: a real Unix datagram socket in
``NOTIFY_SOCKET``, and the kernel's ``PR_SET_MDWE`` (Linux 6.3+; what systemd 253+ applies for
``MemoryDenyWriteExecute=yes``: no writable+executable mapping, no mapping made executable). The
server must say READY=1, import a file through the API (uvloop, httptools, asyncpg, orjson,
PyJWT all loaded), say STOPPING=1 on SIGTERM and exit 0.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.support import SECRET, auth, counters, token, upload, wait_terminal
from tests.conftest import _free_loopback_port

pytestmark = pytest.mark.acceptance

SAMPLE = Path(__file__).parents[2] / "samples" / "contacts.csv"
NOTIFY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
# prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN), then the CLI in the same process.
SET_MDWE = """
import ctypes, sys
if ctypes.CDLL(None, use_errno=True).prctl(65, 1, 0, 0, 0) != 0:
    sys.exit(f"PR_SET_MDWE failed: errno {ctypes.get_errno()}")
"""
MDWE_THEN_IMPORTER = SET_MDWE + "from importer.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def _mdwe_supported() -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", SET_MDWE],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.setblocking(False)
        yield sock, path


async def _next_state(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.sock_recv(sock, 256), NOTIFY_TIMEOUT_S)


@pytest.mark.skipif(sys.platform != "linux" or not _mdwe_supported(), reason="needs PR_SET_MDWE")
async def test_serve_notifies_systemd_and_runs_under_memory_deny_write_execute(
    db_dsn: str, tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, path = notify_socket
    port = _free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": db_dsn,
        "JWT_SECRET": SECRET,
        "IMPORTER_STORAGE_DIR": str(tmp_path / "objects"),
        "IMPORTER_PUBLIC_URL": url,
        "NOTIFY_SOCKET": path,
    }
    env.pop("S3_ENDPOINT_URL", None)
    log = tmp_path / "serve.log"
    argv = ["serve", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-c", MDWE_THEN_IMPORTER, *argv, env=env, stderr=out, stdout=out
        )
    try:
        assert await _next_state(sock) == b"READY=1", log.read_text()
        bearer = token(4242)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            assert (await http.get("/readyz")).status_code == 200
            created = await upload(http, bearer, SAMPLE.read_bytes())
            assert created.status_code == 202, created.text
            job = await wait_terminal(http, bearer, created.json()["id"])
            assert job["status"] in {"completed", "completed_with_placeholders"}, job
            assert counters(job)["rows_read"] > 0
            assert (await http.get("/v1/imports", headers=auth(bearer))).status_code == 200
        server.send_signal(signal.SIGTERM)
        assert await _next_state(sock) == b"STOPPING=1"
        assert await asyncio.wait_for(server.wait(), STOP_TIMEOUT_S) == 0, log.read_text()
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
