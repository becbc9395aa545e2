"""Throughput against the number of instances: one import, shared by 1, 2, 3 `importer worker`
processes over RabbitMQ (multi-instance mode), next to one process without a broker.

For each setting: a fresh database, the generated file uploaded to a local store, N workers
started and ready, then the job queued and timed until it is terminal. CPU seconds of the
PostgreSQL processes, of the workers and of the broker are read from /proc around the run, so
the table shows where the two cores go; ``py us/row`` is the workers' CPU per row (each
worker's CPU seconds in brackets) and ``x in-process py`` its ratio to the one process without
a broker (issue 13: at most 1.15). Loopback only; every process is stopped at the end.
``IMPORTER_PURE=1`` in the environment runs the workers without the compiled code.

Usage: .venv/bin/python benchmarks/bench_instances.py --rows 200000 [--instances 1,2,3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import aio_pika
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.generate import generate
from benchmarks.run import cpu_seconds, fresh_database, postgres_cpu_seconds
from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.store import PostgresStore
from importer.adapters.postgres.views import PostgresJobViews
from importer.adapters.rabbit.broker import Topology
from importer.adapters.storage.local import LocalObjectStore
from importer.core.models import JobStatus, NewJob

HERE = Path(__file__).resolve().parent
RABBITMQ_URL = os.environ.get("BENCH_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
CLIENT = 1
CHUNK_SIZE = 5000
PARTITIONS = 4


@dataclass
class Result:
    setting: str
    seconds: float
    rows: int
    db_cpu: float
    workers_cpu: float
    broker_cpu: float
    worker_cpus: tuple[float, ...] = ()


async def upload(dsn: str, storage: Path, path: Path) -> uuid.UUID:
    objects = LocalObjectStore(storage)
    await objects.ensure_bucket()

    async def blocks():  # type: ignore[no-untyped-def]
        with path.open("rb") as handle:
            while block := handle.read(1 << 20):
                yield block

    job_id = uuid.uuid4()
    key = f"{CLIENT}/{job_id}/{path.name}"
    stored = await objects.put_stream(key, blocks(), 1 << 40)
    pool = await connect_pool(dsn, 2)
    try:
        await PostgresStore(pool).create_job(
            NewJob(
                id=job_id,
                client_id=CLIENT,
                user_id="bench",
                source=key,
                input_format="csv",
                strategy="merge",
                chunk_size=CHUNK_SIZE,
                partitions=PARTITIONS,
                bytes_total=stored.size,
                source_size=stored.size,
                source_sha256=stored.sha256,
                filename=path.name,
            ),
            JobStatus.UPLOADED,
        )
    finally:
        await pool.close()
    return job_id


async def run_setting(path: Path, rows: int, instances: int, broker: bool) -> Result:
    name = f"importer_bench_instances_{instances}_{int(broker)}"
    dsn = await fresh_database(name)
    storage = HERE / "results" / f"objects-{name}"
    job_id = await upload(dsn, storage, path)
    prefix = f"bench-{uuid.uuid4().hex[:8]}/"
    env = {
        **os.environ,
        "DATABASE_URL": dsn,
        "IMPORTER_STORAGE_DIR": str(storage),
        "IMPORTER_CONCURRENCY": str(PARTITIONS),
        "IMPORTER_LOG_LEVEL": "warning",
    }
    env.pop("S3_ENDPOINT_URL", None)
    if broker:
        env |= {"RABBITMQ_URL": RABBITMQ_URL, "IMPORTER_QUEUE_PREFIX": prefix}
    workers = [
        await asyncio.create_subprocess_exec(sys.executable, "-m", "importer", "worker", env=env)
        for _ in range(instances)
    ]
    pids = {w.pid for w in workers}
    await asyncio.sleep(3)  # started, connected, consuming
    conn = await asyncpg.connect(dsn)
    try:
        db0 = postgres_cpu_seconds()
        py0 = cpu_seconds(pids=pids)
        each0 = [cpu_seconds(pids={w.pid}) for w in workers]
        mq0 = cpu_seconds(("beam.smp",))
        started = time.perf_counter()
        await start(dsn, job_id)
        while True:
            status = await conn.fetchval("SELECT status FROM import_job WHERE id = $1", job_id)
            if status in ("completed", "completed_with_placeholders", "failed"):
                break
            await asyncio.sleep(0.05)
        seconds = time.perf_counter() - started
        each = tuple(cpu_seconds(pids={w.pid}) - c for w, c in zip(workers, each0, strict=True))
        result = Result(
            f"{instances} worker{'s' if instances > 1 else ''}"
            + (" + RabbitMQ" if broker else ", in-process"),
            seconds,
            rows,
            postgres_cpu_seconds() - db0,
            cpu_seconds(pids=pids) - py0,
            cpu_seconds(("beam.smp",)) - mq0 if broker else 0.0,
            each,
        )
        assert status != "failed", await conn.fetchval(
            "SELECT fail_reason FROM import_job WHERE id = $1", job_id
        )
    finally:
        await conn.close()
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            await worker.wait()
        if broker:
            await delete_queues(prefix)
        admin = await asyncpg.connect(dsn.rpartition("/")[0] + "/postgres")
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
    return result


async def start(dsn: str, job_id: uuid.UUID) -> None:
    pool = await connect_pool(dsn, 1)
    try:
        await PostgresJobViews(pool).start_job(CLIENT, job_id, "bench")
    finally:
        await pool.close()


async def delete_queues(prefix: str) -> None:
    connection = await aio_pika.connect(RABBITMQ_URL)
    async with connection:
        channel = await connection.channel()
        for queue in Topology.named(prefix).queue_arguments():
            await channel.queue_delete(queue)


def report(results: list[Result]) -> None:
    print(
        "| setting | seconds | rows/s | x one process | db cpu s | workers cpu s |"
        " broker cpu s | cpu s / wall s | py us/row | x in-process py |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = results[0].seconds
    base_py = results[0].workers_cpu / results[0].rows
    for r in results:
        busy = (r.db_cpu + r.workers_cpu + r.broker_cpu) / r.seconds
        each = " + ".join(f"{c:.2f}" for c in r.worker_cpus)
        py = r.workers_cpu / r.rows
        print(
            f"| {r.setting} | {r.seconds:.2f} | {r.rows / r.seconds:,.0f} | {base / r.seconds:.2f}"
            f" | {r.db_cpu:.1f} | {r.workers_cpu:.2f} ({each}) | {r.broker_cpu:.1f} | {busy:.2f}"
            f" | {py * 1e6:.1f} | {py / base_py:.2f} |"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--instances", default="1,2,3")
    args = parser.parse_args()
    path = HERE / "results" / f"instances-{args.rows}.csv"
    path.parent.mkdir(exist_ok=True)
    stats = generate(args.rows, args.seed, path, write_meta=False)
    results = [await run_setting(path, stats.rows, 1, broker=False)]
    for n in (int(x) for x in args.instances.split(",")):
        results.append(await run_setting(path, stats.rows, n, broker=True))  # noqa: PERF401
    report(results)


if __name__ == "__main__":
    asyncio.run(main())
