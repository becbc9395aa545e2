"""API latency under import: multipart creates of a 1 MB file while a 1M-row import runs.

The target (the issue): a create with a 1 MB file answers 202 with p99 <= 50 ms at 20 concurrent
clients while a 1M-row import runs in the same process.

1. A fresh database (``benchmarks.run.fresh_database``: created and migrated); ``importer serve``
   as a subprocess with one worker, files in a temporary directory.
2. The 1M-row file (``benchmarks/generate.py``'s, generated if missing) is uploaded through the
   API, streamed from disk; we wait until the job is ``importing``.
3. ``--clients`` clients (one ``httpx.AsyncClient`` each, its own connection) each send one
   unmeasured create, then ``--requests-per-client`` measured ones, back to back: a multipart
   create of the same 1 MB CSV (the big file's first rows). Latency is from the request's start
   to the 202 as the client sees it (the client runs on the same two cores).
4. Every create is of the import's own tenant, and the server runs one worker with
   ``IMPORTER_MAX_IMPORTS_PER_CLIENT=1``: they stay ``queued`` behind the import, are cancelled
   after the measurement, and no extra import runs.
5. The import must still be ``importing`` after the last create: it ran during the whole
   measurement. The server's own view of the same requests (the ``/metrics`` histogram) is
   printed beside the client's. SIGTERM stops the server.

Usage: .venv/bin/python benchmarks/bench_api.py [--rows 1000000] [--requests-per-client 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.generate import generate
from benchmarks.run import fresh_database
from importer.core.principals import Permission, Principal
from importer.http.auth import mint_token

HERE = Path(__file__).resolve().parent
IMPORTER = HERE.parent / ".venv/bin/importer"
DATABASE = "importer_bench_api"
CLIENT = 1
SECRET = "bench-api-secret-" + "x" * 32
SMALL_FILE_BYTES = 1024 * 1024
TARGET_P99_S = 0.050
READY_TIMEOUT_S = 60.0
IMPORTING_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
FORM = {
    "conflict_strategy": "merge",
    "has_sensitive_data": "false",
    "has_underage_data": "false",
    "data_processing_purpose": "marketing",
    "lgpd_processing_hypothesis": "1",
}
BEFORE_IMPORTING = ("uploaded", "queued", "normalizing", "ready")
CREATE_ROUTE = 'method="POST",route="/v1/imports"'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def data_file(rows: int) -> Path:
    path = HERE / "data" / f"contacts_{rows}_1.csv"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        generate(rows, 1, path)
    return path


def small_csv(big: Path) -> bytes:
    """The big file's first ~1 MB, cut at a line end: a header and about 6,000 rows."""
    with big.open("rb") as handle:
        head = handle.read(SMALL_FILE_BYTES)
    return head[: head.rindex(b"\n") + 1]


@contextlib.contextmanager
def running_server(dsn: str, storage: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": dsn,
        "JWT_SECRET": SECRET,
        "IMPORTER_STORAGE_DIR": str(storage / "objects"),
        "IMPORTER_PUBLIC_URL": url,
        "IMPORTER_WORKERS": "1",
        "IMPORTER_MAX_IMPORTS_PER_CLIENT": "1",
    }
    env.pop("S3_ENDPOINT_URL", None)
    log = (storage / "serve.log").open("wb")
    server = subprocess.Popen(
        [str(IMPORTER), "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_ready(url, server)
        print(f"server pid {server.pid}, log {storage / 'serve.log'}", flush=True)
        yield url, server
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=STOP_TIMEOUT_S)
            print(f"server stopped on SIGTERM: exit {code}")
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
            print("server did not stop on SIGTERM: killed")
        log.close()


def wait_ready(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"importer serve exited with {server.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise SystemExit("importer serve did not become ready")


async def file_blocks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as handle:
        while block := await asyncio.to_thread(handle.read, 1024 * 1024):
            yield block


async def start_big_import(http: httpx.AsyncClient, path: Path) -> str:
    """The big file as a multipart body streamed from disk (never read whole)."""
    boundary = "bench-api-boundary"
    head = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
        for k, v in FORM.items()
    )
    head += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        f'filename="{path.name}"\r\nContent-Type: text/csv\r\n\r\n'
    )
    tail = f"\r\n--{boundary}--\r\n".encode()

    async def body() -> AsyncIterator[bytes]:
        yield head.encode()
        async for block in file_blocks(path):
            yield block
        yield tail

    length = len(head.encode()) + path.stat().st_size + len(tail)
    headers = {
        "Content-Type": f"multipart/form-data; boundary={boundary}",
        "Content-Length": str(length),
    }
    started = time.perf_counter()
    response = await http.post("/v1/imports", content=body(), headers=headers, timeout=300)
    if response.status_code != 202:
        raise SystemExit(f"big upload: {response.status_code} {response.text}")
    print(
        f"uploaded {path.name} ({length / 2**20:.0f} MiB) in {time.perf_counter() - started:.1f} s"
    )
    return str(response.json()["id"])


async def job_status(http: httpx.AsyncClient, job_id: str) -> dict[str, object]:
    response = await http.get(f"/v1/imports/{job_id}")
    response.raise_for_status()
    job: dict[str, object] = response.json()
    return job


async def wait_importing(http: httpx.AsyncClient, job_id: str) -> None:
    deadline = time.monotonic() + IMPORTING_TIMEOUT_S
    while (status := (await job_status(http, job_id))["status"]) != "importing":
        if status not in BEFORE_IMPORTING or time.monotonic() > deadline:
            raise SystemExit(f"the big import is {status}, not importing")
        await asyncio.sleep(0.1)


async def create(http: httpx.AsyncClient, content: bytes) -> tuple[float, str]:
    started = time.perf_counter()
    response = await http.post(
        "/v1/imports", data=FORM, files={"file": ("small.csv", content, "text/csv")}
    )
    seconds = time.perf_counter() - started
    if response.status_code != 202:
        raise SystemExit(f"create: {response.status_code} {response.text}")
    return seconds, str(response.json()["id"])


async def one_client(
    url: str, headers: dict[str, str], content: bytes, requests: int, start: asyncio.Barrier
) -> tuple[list[float], list[str]]:
    latencies: list[float] = []
    jobs: list[str] = []
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
        _, warm = await create(http, content)  # connection set-up: not measured
        jobs.append(warm)
        await start.wait()  # every client warmed up: the measurement starts together
        for _ in range(requests):
            seconds, job_id = await create(http, content)
            latencies.append(seconds)
            jobs.append(job_id)
    return latencies, jobs


async def measure(
    url: str, headers: dict[str, str], content: bytes, clients: int, requests: int
) -> tuple[list[float], list[str], float]:
    start = asyncio.Barrier(clients + 1)
    tasks = [
        asyncio.create_task(one_client(url, headers, content, requests, start), name=f"client-{i}")
        for i in range(clients)
    ]
    await start.wait()
    started = time.perf_counter()
    results = await asyncio.gather(*tasks)
    wall = time.perf_counter() - started
    latencies = [s for found, _ in results for s in found]
    jobs = [j for _, found in results for j in found]
    return latencies, jobs, wall


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile: the smallest value with ``fraction`` of them at or below it."""
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


async def server_histogram(http: httpx.AsyncClient) -> dict[str, float]:
    """The create route's cumulative latency buckets (and count) from /metrics."""
    text = (await http.get("/metrics")).text
    buckets: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("importer_http_request_duration_seconds_") and CREATE_ROUTE in line:
            name, value = line.rsplit(" ", 1)
            key = name.split('le="')[1].split('"')[0] if 'le="' in name else name.split("{")[0]
            buckets[key] = float(value)
    return buckets


async def cancel_all(http: httpx.AsyncClient, jobs: list[str]) -> dict[str, int]:
    statuses: dict[str, int] = {}
    for index in range(0, len(jobs), 20):
        answers = await asyncio.gather(
            *(http.post(f"/v1/imports/{job}/cancel") for job in jobs[index : index + 20])
        )
        for answer in answers:
            status = str(answer.json()["status"])
            statuses[status] = statuses.get(status, 0) + 1
    return statuses


def report(latencies: list[float], wall: float, clients: int) -> None:
    ordered = sorted(latencies)
    ms = {
        name: percentile(ordered, fraction) * 1000
        for name, fraction in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
    }
    print(
        f"{len(ordered)} creates (1 MB each) by {clients} clients in {wall:.1f} s "
        f"({len(ordered) / wall:.1f}/s): p50 {ms['p50']:.1f} ms, p95 {ms['p95']:.1f} ms, "
        f"p99 {ms['p99']:.1f} ms, max {ordered[-1] * 1000:.1f} ms, "
        f"min {ordered[0] * 1000:.1f} ms"
    )
    verdict = "met" if ms["p99"] <= TARGET_P99_S * 1000 else "NOT met"
    print(f"target p99 <= {TARGET_P99_S * 1000:.0f} ms: {verdict}")


def report_server_side(before: dict[str, float], after: dict[str, float]) -> None:
    count = after["importer_http_request_duration_seconds_count"] - before.get(
        "importer_http_request_duration_seconds_count", 0
    )
    shares = []
    for le in ("0.025", "0.05", "0.1", "0.25"):
        within = after[le] - before.get(le, 0)
        shares.append(f"<= {float(le) * 1000:.0f} ms {within / count:.0%}")
    total = after["importer_http_request_duration_seconds_sum"] - before.get(
        "importer_http_request_duration_seconds_sum", 0
    )
    print(
        f"server-side (/metrics, {count:.0f} creates incl. warm-ups): mean "
        f"{total / count * 1000:.1f} ms; " + ", ".join(shares)
    )


async def run(rows: int, clients: int, requests: int, *, with_import: bool) -> None:
    big = data_file(rows)
    content = small_csv(big)
    dsn = await fresh_database(DATABASE)
    principal = Principal(
        "bench", CLIENT, frozenset({Permission.CONTACT_IMPORT_CREATE, Permission.IMPORT_ADMIN})
    )
    headers = {"Authorization": f"Bearer {mint_token(principal, ttl_s=3600, secret=SECRET)}"}
    with (
        tempfile.TemporaryDirectory(prefix="bench-api-") as temp,
        running_server(dsn, Path(temp)) as (url, _),
    ):
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
            big_job = None
            if with_import:
                big_job = await start_big_import(http, big)
                await wait_importing(http, big_job)
            else:
                await hold_the_tenants_slot(http, dsn)
            print("measuring", flush=True)
            before = await server_histogram(http)
            latencies, jobs, wall = await measure(url, headers, content, clients, requests)
            after = await server_histogram(http)
            if big_job is not None:
                await report_import(http, big_job, rows)
            else:
                print("no import running (--without-import): the baseline")
            report(latencies, wall, clients)
            report_server_side(before, after)
            print(f"created jobs cancelled (status they ended in): {await cancel_all(http, jobs)}")
            if big_job is not None:
                await http.post(f"/v1/imports/{big_job}/cancel")


async def hold_the_tenants_slot(http: httpx.AsyncClient, dsn: str) -> None:
    """The baseline's stand-in for the running import: a job of the tenant marked ``importing``
    under a lease that never expires, so the tenant's one slot is taken and the creates stay
    queued exactly as behind the real import, but nothing runs."""
    announced = await http.post(
        "/v1/uploads",
        json={**FORM, "filename": "hold.csv", "size": 1, "sha256": "0" * 64},
    )
    announced.raise_for_status()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "UPDATE import_job SET status = 'importing', lease_owner = 'bench-hold', "
            "lease_expires_at = 'infinity' WHERE id = $1",
            uuid.UUID(announced.json()["job"]["id"]),
        )
    finally:
        await conn.close()


async def report_import(http: httpx.AsyncClient, job_id: str, rows: int) -> None:
    job = await job_status(http, job_id)
    progress = job["progress"]
    assert isinstance(progress, dict)
    print(
        f"the {rows:,}-row import after the measurement: {job['status']} "
        f"({progress['percent']}%, {progress['rows']:,} rows); "
        f"it ran during the whole measurement: {job['status'] == 'importing'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the running import")
    parser.add_argument("--requests-per-client", type=int, default=20)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument(
        "--without-import", action="store_true", help="the same creates with no import running"
    )
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; {args.clients} clients x {args.requests_per_client} creates")
    asyncio.run(
        run(
            args.rows,
            args.clients,
            args.requests_per_client,
            with_import=not args.without_import,
        )
    )


if __name__ == "__main__":
    main()
