"""Fixtures of the acceptance tier."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aio_pika
import pytest

from benchmarks.generate import generate
from importer.adapters.rabbit import Topology

ROWS = 5000
SEED = 20_261_129
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"


@dataclass(frozen=True)
class Contacts:
    path: Path
    rows: int


@pytest.fixture(scope="module")
def contacts(tmp_path_factory: pytest.TempPathFactory) -> Contacts:
    """A generated contacts file (seeded: the same every run)."""
    path = tmp_path_factory.mktemp("contacts") / "contacts.csv"
    stats = generate(ROWS, SEED, path, write_meta=False)
    return Contacts(path, stats.rows)


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
