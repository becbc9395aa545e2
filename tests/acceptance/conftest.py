"""Fixtures of the acceptance tier."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aio_pika
import pytest

from benchmarks.generate import GenerationStats, generate
from importer.adapters.rabbit import Topology

ROWS = 100_000  # the catalog's size for its fault tests (T02-T17, T26, T30-T34: 100k-200k)
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
