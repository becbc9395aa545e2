"""Fixtures of the acceptance tier."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aio_pika
import pytest

from benchmarks.generate import GenerationStats, generate
from importer.adapters.rabbit.broker import Topology

# The size of the generated file of the catalog's fault tests (T02-T17, T26, T30-T36). The
# catalog asks 100k-200k rows: `IMPORTER_CATALOG_ROWS=100000 ./scripts/test tests/acceptance`
# runs it so (figures in docs/RELIABILITY.md). The default run (CI, under 12 minutes on two
# cores) uses 20,000: every fault still strikes mid-import, at the same share of the batches.
ROWS = int(os.environ.get("IMPORTER_CATALOG_ROWS", "20000"))


def catalog_chunk_size(rows: int) -> int:
    """About 20 chunks whatever the size: seeded kill points fall at the same share of a file."""
    return max(rows // 20, 10)


CHUNK_SIZE = catalog_chunk_size(ROWS)
SEED = 20_261_129
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"


@dataclass(frozen=True)
class Contacts:
    path: Path
    rows: int
    stats: GenerationStats  # what the generator knows about the file (the oracle's counters)


@pytest.fixture(scope="session")
def contacts(tmp_path_factory: pytest.TempPathFactory) -> Contacts:
    """A generated contacts file of ROWS rows (seeded: the same every run), one per session."""
    path = tmp_path_factory.mktemp("contacts") / "contacts.csv"
    stats = generate(ROWS, SEED, path, write_meta=False)
    return Contacts(path, stats.rows, stats)


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A queue prefix (IMPORTER_QUEUE_PREFIX) of this test only; its queues deleted at the end."""
    name = f"test-{uuid.uuid4().hex[:12]}/"
    yield name
    connection = await aio_pika.connect(RABBITMQ_URL)
    async with connection:
        channel = await connection.channel()
        for queue in Topology.named(name).queue_arguments():
            await channel.queue_delete(queue)
