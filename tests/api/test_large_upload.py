"""A ~200 MB multipart upload goes to storage a block at a time: the server's memory stays flat.

The client streams the body from a generator (a hand-built multipart envelope around CSV rows
repeated), so neither side ever holds the file. A thread samples the server's RSS every 50 ms
while the request is in flight; the kernel's own high-water mark (``VmHWM``, reset just before
through ``/proc/<pid>/clear_refs``) gives the exact peak between two samples too. The session
servers allow 64 KiB uploads, so this module starts its own (local storage, 256 MiB limit) with
the same helpers.

The bound, 32 MiB over the RSS before the upload, is a sixth of the file: a server that spooled
the body or the file in memory would exceed it several times over, while the streaming path
holds one 64 KiB socket read (uvicorn pauses reading above it), python-multipart's events for
that block, and the local store's 1 MiB write buffer — a few MiB, with the rest as slack for the
allocator. A small upload first, imported to its end, warms what the process sets up once
(python-multipart, the thread pool, the worker's pipeline) so the figure is what the size costs.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from tests.api.conftest import Server, _database, start_server, stop_server
from tests.api.support import LGPD, auth, csv_bytes, token, upload, wait_terminal
from tests.conftest import _admin, dsn_for
from tests.support import cpf

pytestmark = pytest.mark.api

FILE_BYTES = 200 * 1024 * 1024
MAX_UPLOAD_BYTES = 256 * 1024 * 1024
RSS_GROWTH_BOUND = 32 * 1024 * 1024
SAMPLE_EVERY_S = 0.05
SEND_BLOCK_BYTES = 256 * 1024
UPLOAD_TIMEOUT_S = 120.0
HEADER = ("nome", "cpf")


@pytest.fixture(scope="module")
async def big_db(template_db: str) -> AsyncIterator[str]:
    name = await _database(template_db)
    yield dsn_for(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def big_server(big_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One worker, small chunks: should it start on the big file before the answer reaches
    us, its pipeline holds a few rows, not megabytes."""
    base = tmp_path_factory.mktemp("api-large")
    running = start_server(
        big_db,
        base / "serve.log",
        IMPORTER_STORAGE_DIR=str(base / "objects"),
        IMPORTER_MAX_UPLOAD_BYTES=str(MAX_UPLOAD_BYTES),
        IMPORTER_WORKERS="1",
    )
    try:
        yield running
    finally:
        stop_server(running)


def reset_peak_rss(pid: int) -> None:
    """Linux: set the process's VmHWM to its current RSS."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


@dataclass
class RssSampler:
    """The RSS of one process, sampled on a thread until stopped (the test's loop is busy
    sending)."""

    pid: int
    samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._process = psutil.Process(self.pid)
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def rss(self) -> int:
        return int(self._process.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.rss())
            self._stop.wait(SAMPLE_EVERY_S)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(self.rss())


@dataclass
class MultipartBody:
    """A multipart/form-data body with the LGPD fields and one CSV file part, produced block by
    block: the file is a header and a block of rows repeated up to ``file_bytes``."""

    file_bytes: int
    boundary: str = field(default_factory=lambda: f"bound-{uuid.uuid4().hex}")
    sent_sha256: str = ""

    def __post_init__(self) -> None:
        fields = {"conflict_strategy": "discard", **LGPD}
        parts = [
            f'--{self.boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
            for name, value in fields.items()
        ]
        parts.append(
            f"--{self.boundary}\r\n"
            'Content-Disposition: form-data; name="file"; filename="big.csv"\r\n'
            "Content-Type: text/csv\r\n\r\n"
        )
        self._head = "".join(parts).encode()
        self._tail = f"\r\n--{self.boundary}--\r\n".encode()
        rows = [(f"Pessoa {i}", cpf(20_000 + i)) for i in range(4000)]
        self._header = csv_bytes(HEADER, [])
        self._rows = csv_bytes(HEADER, rows)[len(self._header) :]

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    @property
    def content_length(self) -> int:
        return len(self._head) + self.file_bytes + len(self._tail)

    def _file_blocks(self) -> Iterator[bytes]:
        yield self._header
        left = self.file_bytes - len(self._header)
        while left > 0:
            block = self._rows[:left]
            left -= len(block)
            yield block

    async def blocks(self) -> AsyncIterator[bytes]:
        digest = hashlib.sha256()
        yield self._head
        for block in self._file_blocks():
            digest.update(block)
            for start in range(0, len(block), SEND_BLOCK_BYTES):
                yield block[start : start + SEND_BLOCK_BYTES]
        self.sent_sha256 = digest.hexdigest()
        yield self._tail


def file_sha256(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while block := handle.read(1024 * 1024):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


async def test_a_200_mb_upload_is_streamed_in_bounded_memory(
    big_server: Server, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    bearer = token(client)
    storage = Path(big_server.env["IMPORTER_STORAGE_DIR"])
    async with httpx.AsyncClient(base_url=big_server.url, timeout=UPLOAD_TIMEOUT_S) as http:
        warm = await upload(http, bearer, csv_bytes(HEADER, [("Ana", cpf(1))] * 50))
        assert warm.status_code == 202, warm.text
        assert (await wait_terminal(http, bearer, warm.json()["id"]))["status"] == "completed"

        body = MultipartBody(FILE_BYTES)
        headers = {
            **auth(bearer),
            "Content-Type": body.content_type,
            "Content-Length": str(body.content_length),  # as curl -F sends it: not chunked
        }
        pid = big_server.process.pid
        started = time.monotonic()
        with RssSampler(pid) as sampler:
            reset_peak_rss(pid)
            before = sampler.rss()
            response = await http.post("/v1/imports", content=body.blocks(), headers=headers)
        seconds = time.monotonic() - started
        kernel_peak = peak_rss(pid)
        assert response.status_code == 202, response.text
        job = response.json()
        cancelled = await http.post(f"/v1/imports/{job['id']}/cancel", headers=auth(bearer))
        assert cancelled.status_code == 202, cancelled.text

        sampled_peak = max(sampler.samples)
        print(
            f"\n200 MB upload in {seconds:.1f} s: RSS before {before / 2**20:.1f} MiB, "
            f"sampled peak {sampled_peak / 2**20:.1f} MiB ({len(sampler.samples)} samples), "
            f"VmHWM {kernel_peak / 2**20:.1f} MiB"
        )
        assert len(sampler.samples) >= 3, "the upload ended before RSS could be sampled"
        for peak in (sampled_peak, kernel_peak):
            growth = peak - before
            assert growth < RSS_GROWTH_BOUND, f"RSS grew by {growth / 2**20:.1f} MiB"

        assert (job["size"], job["sha256"]) == (FILE_BYTES, body.sent_sha256)
        stored = list((storage / str(client) / job["id"]).iterdir())
        try:
            assert [path.name for path in stored] == ["big.csv"]  # no temporary part left
            assert file_sha256(stored[0]) == (FILE_BYTES, body.sent_sha256)
            ended = await wait_terminal(http, bearer, job["id"])
            assert ended["status"] == "cancelled", ended
        finally:
            for path in stored:  # 200 MB: not left for pytest's kept temporary directories
                path.unlink()
