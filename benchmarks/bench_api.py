"""API latency under import: creates of a 1 MB file arriving at a fixed rate while an import runs.

The target (the issue): a create with a 1 MB file answers 202 with p99 <= 50 ms while a 1M-row
import runs in the same ``importer serve`` process.

Open loop (the default): creates arrive as a Poisson process (``--rate`` per second for
``--duration`` seconds, seeded), each sent at its arrival time whatever the earlier ones are
doing, so a slow server is not hidden by clients that wait for it (no coordinated omission).

1. The import alone (unless ``--skip-alone``): a fresh database (``benchmarks.run.fresh_database``)
   and ``importer serve`` (one worker, files in a temporary directory, 127.0.0.1 only); the big
   file (``benchmarks/generate.py``'s, generated if missing) is uploaded through the API, streamed
   from disk; once the job is ``importing`` and ``SETTLE_S`` have passed, its committed rows are
   read at the start and the end of a ``--duration`` window: its rows/s with nothing else running.
   The job is then cancelled.
2. The same with the load: a fresh database and server, the same upload, the same settle time
   (a few unmeasured creates open the client's connections), then the Poisson creates of the
   same 1 MB CSV (the big file's first rows) during the same window, and the import's rows/s
   over it. Latency is from a create's *scheduled* arrival to its 202 as the client sees it (the
   client runs on the same cores); a create is *late* when that exceeds ``--target-ms``, *failed*
   when it answers anything but 202, times out, or finds ``--max-in-flight`` creates already
   open (dropped, never queued: the client's memory and the run's time stay bounded).
3. Every create is of the import's own tenant, and the server runs one worker with
   ``IMPORTER_MAX_IMPORTS_PER_CLIENT=1``: they stay ``queued`` behind the import and are
   cancelled after the window; no extra import runs. The import must still be ``importing`` at
   the window's end (it ran during the whole load). The server's own view of the creates (the
   ``/metrics`` histogram) is printed beside the client's. SIGTERM stops each server.

``--without-import``: the same open-loop creates with the tenant's slot held and nothing running
(the baseline). ``--closed-loop``: the earlier measurement, ``--clients`` clients each sending
``--requests-per-client`` creates back to back.

Usage: .venv/bin/python benchmarks/bench_api.py [--rows 1000000] [--rate 10] [--duration 60]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.generate import generate
from benchmarks.run import fresh_database, importer_command
from importer.core.principals import Permission, Principal
from importer.http.auth import mint_token

HERE = Path(__file__).resolve().parent
DATABASE = "importer_bench_api"
CLIENT = 1
SECRET = "bench-api-secret-" + "x" * 32
SMALL_FILE_BYTES = 1024 * 1024
TARGET_P99_S = 0.050
READY_TIMEOUT_S = 60.0
IMPORTING_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
SETTLE_S = 3.0  # from `importing` to the window's start, in both phases
SEND_LATE_S = 0.005  # a create sent this much after its arrival time: the client fell behind
WARM_CREATES = 4  # unmeasured creates that open the client's connections
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
        [importer_command(), "serve", "--host", "127.0.0.1", "--port", str(port)],
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


def report_server_side(
    before: dict[str, float], after: dict[str, float], what: str = "creates incl. warm-ups"
) -> None:
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
        f"server-side (/metrics, {count:.0f} {what}): mean "
        f"{total / count * 1000:.1f} ms; " + ", ".join(shares)
    )


async def run_closed_loop(rows: int, clients: int, requests: int, *, with_import: bool) -> None:
    """The closed loop: ``clients`` clients each sending ``requests`` creates back to back."""
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


async def committed_rows(http: httpx.AsyncClient, job_id: str) -> tuple[float, int, str]:
    """When, how many rows the job has committed, and its status."""
    job = await job_status(http, job_id)
    progress = job["progress"]
    assert isinstance(progress, dict)
    return time.perf_counter(), int(progress["rows"]), str(job["status"])


@dataclass
class ImportRate:
    rows: int
    seconds: float
    status_after: str

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


@dataclass
class OpenLoop:
    """What the open-loop creates saw: latencies from the scheduled arrival (seconds)."""

    scheduled: int = 0
    latencies: list[float] = field(default_factory=list)
    service: list[float] = field(default_factory=list)  # from the request's actual start
    sent_late: int = 0
    send_lag_max: float = 0.0  # the most a create was sent after its arrival time
    failed: dict[str, int] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)
    wall: float = 0.0

    def fail(self, reason: str) -> None:
        self.failed[reason] = self.failed.get(reason, 0) + 1


def multipart(content: bytes) -> tuple[bytes, dict[str, str]]:
    """The create's multipart body, encoded once: the open loop's client only sends bytes."""
    request = httpx.Request(
        "POST", "http://127.0.0.1/", data=FORM, files={"file": ("small.csv", content, "text/csv")}
    )
    return request.read(), {"Content-Type": request.headers["Content-Type"]}


async def create_at(
    http: httpx.AsyncClient,
    body: tuple[bytes, dict[str, str]],
    due: float,
    result: OpenLoop,
    timeout_s: float,
) -> None:
    """One create scheduled at ``due`` (perf_counter); its outcome goes into ``result``."""
    sent = time.perf_counter()
    try:
        response = await http.post(
            "/v1/imports", content=body[0], headers=body[1], timeout=timeout_s
        )
    except httpx.TimeoutException:
        result.fail("timeout")
        return
    except httpx.HTTPError as exc:
        result.fail(type(exc).__name__)
        return
    done = time.perf_counter()
    if response.status_code != 202:
        result.fail(f"HTTP {response.status_code}")
        return
    result.latencies.append(done - due)
    result.service.append(done - sent)
    result.jobs.append(str(response.json()["id"]))


async def open_loop(
    http: httpx.AsyncClient,
    content: bytes,
    *,
    rate: float,
    duration: float,
    seed: int,
    max_in_flight: int,
    timeout_s: float,
) -> OpenLoop:
    """Poisson arrivals at ``rate``/s for ``duration`` s; each create sent at its arrival time.
    At most ``max_in_flight`` open at once (an arrival beyond it is dropped, counted failed);
    the window ends at ``duration`` and the open creates are then awaited (each bounded)."""
    arrivals = random.Random(seed)
    body = multipart(content)
    result = OpenLoop()
    in_flight: set[asyncio.Task[None]] = set()
    started = time.perf_counter()
    due = started + arrivals.expovariate(rate)
    while due < started + duration:
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        result.scheduled += 1
        lag = time.perf_counter() - due
        result.send_lag_max = max(result.send_lag_max, lag)
        if lag > SEND_LATE_S:
            result.sent_late += 1
        if len(in_flight) >= max_in_flight:
            result.fail("dropped (max in flight)")
        else:
            task = asyncio.create_task(create_at(http, body, due, result, timeout_s))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        due += arrivals.expovariate(rate)
    if in_flight:
        await asyncio.wait(in_flight)
    result.wall = time.perf_counter() - started
    return result


def report_open_loop(result: OpenLoop, rate: float, duration: float, target_ms: float) -> None:
    answered = len(result.latencies)
    failed = sum(result.failed.values())
    print(
        f"open loop: {result.scheduled} creates (1 MB each) scheduled at {rate:g}/s (Poisson) "
        f"over {duration:g} s; {answered} answered 202, {failed} failed"
        f"{' ' + str(result.failed) if result.failed else ''}; "
        f"{result.sent_late} sent > {SEND_LATE_S * 1000:.0f} ms after their arrival time "
        f"(at most {result.send_lag_max * 1000:.0f} ms: the client shares the cores)"
    )
    if not answered:
        return
    ordered = sorted(result.latencies)
    service = sorted(result.service)
    late = sum(1 for s in ordered if s * 1000 > target_ms)
    ms = {name: percentile(ordered, f) * 1000 for name, f in (("p50", 0.5), ("p99", 0.99))}
    print(
        f"create -> 202 from the arrival: p50 {ms['p50']:.1f} ms, "
        f"p95 {percentile(ordered, 0.95) * 1000:.1f} ms, p99 {ms['p99']:.1f} ms, "
        f"max {ordered[-1] * 1000:.1f} ms (from the request's start: p50 "
        f"{percentile(service, 0.5) * 1000:.1f}, p99 {percentile(service, 0.99) * 1000:.1f} ms); "
        f"late (> {target_ms:g} ms): {late} of {answered} ({late / answered:.0%})"
    )
    verdict = "met" if ms["p99"] <= target_ms and not failed else "NOT met"
    print(f"target p99 <= {target_ms:g} ms, none failed: {verdict}")


async def import_window(
    http: httpx.AsyncClient, job_id: str, during: asyncio.Future[object] | None, duration: float
) -> ImportRate:
    """The job's committed rows over the window: ``during`` (the load) or ``duration`` s."""
    t0, rows0, _ = await committed_rows(http, job_id)
    if during is None:
        await asyncio.sleep(duration)
    else:
        await during
    t1, rows1, status = await committed_rows(http, job_id)
    return ImportRate(rows1 - rows0, t1 - t0, status)


async def run_open_loop(args: argparse.Namespace) -> None:
    big = data_file(args.rows)
    content = small_csv(big)
    principal = Principal(
        "bench", CLIENT, frozenset({Permission.CONTACT_IMPORT_CREATE, Permission.IMPORT_ADMIN})
    )
    headers = {"Authorization": f"Bearer {mint_token(principal, ttl_s=3600, secret=SECRET)}"}
    alone: ImportRate | None = None
    if not args.skip_alone and not args.without_import:
        print(f"1. the {args.rows:,}-row import alone, {args.duration:g} s window", flush=True)
        alone = await phase(args, big, content, headers, load=False)
    print(
        f"2. {'the creates, no import running' if args.without_import else 'the same with the load'}",
        flush=True,
    )
    loaded = await phase(args, big, content, headers, load=True)
    if alone is not None and loaded is not None:
        print(
            f"the import: alone {alone.rows_per_s:,.0f} rows/s ({alone.rows:,} rows in "
            f"{alone.seconds:.1f} s), under the load {loaded.rows_per_s:,.0f} rows/s "
            f"({loaded.rows:,} rows in {loaded.seconds:.1f} s): slowdown "
            f"{alone.rows_per_s / loaded.rows_per_s if loaded.rows_per_s else math.inf:.2f}x"
        )


async def phase(
    args: argparse.Namespace, big: Path, content: bytes, headers: dict[str, str], *, load: bool
) -> ImportRate | None:
    """One fresh database and server: the import (unless --without-import) for the window,
    with the open-loop creates when ``load``. Returns the import's rate over the window."""
    dsn = await fresh_database(DATABASE)
    limits = httpx.Limits(max_connections=args.max_in_flight, max_keepalive_connections=64)
    with (
        tempfile.TemporaryDirectory(prefix="bench-api-") as temp,
        running_server(dsn, Path(temp)) as (url, _),
    ):
        async with httpx.AsyncClient(
            base_url=url, headers=headers, timeout=60, limits=limits
        ) as http:
            big_job = None
            if args.without_import:
                await hold_the_tenants_slot(http, dsn)
            else:
                big_job = await start_big_import(http, big)
                await wait_importing(http, big_job)
            settled = asyncio.create_task(asyncio.sleep(SETTLE_S))
            warm: list[str] = []
            if load:  # open the client's connections: unmeasured
                answers = await asyncio.gather(
                    *(create(http, content) for _ in range(WARM_CREATES))
                )
                warm = [job for _, job in answers]
            await settled
            rate: ImportRate | None = None
            result = OpenLoop()
            before = await server_histogram(http)
            if load:
                print("measuring", flush=True)
                loop_task = asyncio.create_task(
                    open_loop(
                        http,
                        content,
                        rate=args.rate,
                        duration=args.duration,
                        seed=args.seed,
                        max_in_flight=args.max_in_flight,
                        timeout_s=args.timeout,
                    )
                )
                if big_job is not None:
                    rate = await import_window(http, big_job, loop_task, args.duration)
                result = await loop_task
            elif big_job is not None:
                rate = await import_window(http, big_job, None, args.duration)
            after = await server_histogram(http)
            if rate is not None:
                print(
                    f"the import over the window: {rate.rows:,} rows in {rate.seconds:.1f} s, "
                    f"{rate.rows_per_s:,.0f} rows/s; status after it: {rate.status_after} "
                    f"(ran during the whole window: {rate.status_after == 'importing'})"
                )
            if load:
                report_open_loop(result, args.rate, args.duration, args.target_ms)
                if after:
                    report_server_side(before, after, "creates")
                statuses = await cancel_all(http, warm + result.jobs)
                print(f"created jobs cancelled (status they ended in): {statuses}")
            if big_job is not None:
                await http.post(f"/v1/imports/{big_job}/cancel")
    return rate


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
    parser.add_argument("--rate", type=float, default=10.0, help="creates per second (Poisson)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of the load window")
    parser.add_argument("--seed", type=int, default=1, help="the arrival times' seed")
    parser.add_argument("--target-ms", type=float, default=TARGET_P99_S * 1000)
    parser.add_argument(
        "--max-in-flight", type=int, default=200, help="open creates at most; beyond: dropped"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per create")
    parser.add_argument(
        "--skip-alone", action="store_true", help="no run of the import alone first"
    )
    parser.add_argument(
        "--without-import", action="store_true", help="the same creates with no import running"
    )
    parser.add_argument(
        "--closed-loop", action="store_true", help="clients sending back to back instead"
    )
    parser.add_argument("--requests-per-client", type=int, default=20, help="--closed-loop")
    parser.add_argument("--clients", type=int, default=20, help="--closed-loop")
    args = parser.parse_args()
    if args.closed_loop:
        print(
            f"{os.cpu_count()} cores; {args.clients} clients x {args.requests_per_client} creates"
        )
        asyncio.run(
            run_closed_loop(
                args.rows,
                args.clients,
                args.requests_per_client,
                with_import=not args.without_import,
            )
        )
        return
    print(
        f"{os.cpu_count()} cores; open loop: {args.rate:g} creates/s for {args.duration:g} s, "
        f"{args.rows:,}-row import"
    )
    asyncio.run(run_open_loop(args))


if __name__ == "__main__":
    main()
