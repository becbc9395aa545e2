"""The multi-instance protocol on an in-memory broker: any number of instances, deliveries in any
order, duplicates, transient failures and re-publishes give exactly the one-instance result; a
chunk that always fails is given up after its retries and dead-lettered."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import deque
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core import codec
from importer.core.config import PipelineConfig
from importer.core.errors import TransientStoreError
from importer.core.layout import parse_layout
from importer.core.models import (
    Batch,
    ConflictStrategy,
    ContactRow,
    Counters,
    Job,
    JobStatus,
    Limits,
    NewJob,
)
from importer.core.reference import InMemoryStore
from importer.pipeline.fanout import ChunkHandler, FanoutSettings
from importer.pipeline.run import ImportRun
from tests.support import cpf, model_contacts
from tests.unit.test_pipeline_stop import BytesSource


@dataclass
class Message:
    body: bytes
    attempts: int = 0
    deferrals: int = 0


@dataclass
class Broker:
    """A main queue, a retry queue (no TTL: a retried message comes back at once, at the end)
    and a dead-letter queue; publishing and acking are instantaneous."""

    rng: random.Random
    main: deque[Message] = field(default_factory=deque)
    dead: list[tuple[Message, str]] = field(default_factory=list)
    deliveries: int = 0
    duplicate_every: int = 0

    async def publish(self, job: Job, batch: Batch) -> None:
        assert job.lease_owner is not None
        body = codec.encode(job.id, job.lease_owner, batch)
        self.main.append(Message(body))
        if self.duplicate_every and self.rng.randrange(self.duplicate_every) == 0:
            self.main.append(Message(body))  # a publisher confirm lost: sent twice

    def take(self) -> Message | None:
        if not self.main:
            return None
        # Prefetch and several consumers: deliveries come out a little out of order.
        index = self.rng.randrange(min(len(self.main), 4))
        message = self.main[index]
        del self.main[index]
        self.deliveries += 1
        return message


@dataclass
class FakeDelivery:
    broker: Broker
    message: Message
    ending: str = ""

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def attempts(self) -> int:
        return self.message.attempts

    @property
    def deferrals(self) -> int:
        return self.message.deferrals

    def _end(self, ending: str) -> None:
        assert not self.ending, "a delivery ends once"
        self.ending = ending

    async def ack(self) -> None:
        self._end("ack")

    async def retry(self) -> None:
        self._end("retry")
        self.broker.main.append(Message(self.message.body, self.message.attempts + 1))

    async def defer(self) -> None:
        self._end("defer")
        m = self.message
        self.broker.main.append(Message(m.body, m.attempts, m.deferrals + 1))

    async def dead_letter(self, error: str) -> None:
        self._end("dead_letter")
        self.broker.dead.append((self.message, error))


class FlakyStore(InMemoryStore):
    """Fails a share of batch applies as a lost connection would; chunk ``poison`` always."""

    def __init__(self, rng: random.Random, failure_rate: float, poison: int | None = None):
        super().__init__()
        self.rng = rng
        self.failure_rate = failure_rate
        self.poison = poison

    async def apply_batch(self, job: Job, batch: Batch, *, lane: bool = False) -> Counters | None:
        if batch.chunk_no == self.poison or self.rng.random() < self.failure_rate:
            raise TransientStoreError("ConnectionDoesNotExistError: gone")
        return await super().apply_batch(job, batch, lane=lane)


ROWS = 240


def source(seed: int) -> BytesSource:
    rng = random.Random(seed)
    lines = ["nome,cpf,email,plano"]
    for i in range(ROWS):
        key = cpf(rng.randrange(90)) if rng.random() > 0.05 else "123"
        lines.append(f"N{i},{key},{'' if i % 3 else f'e{i}@x.com'},{rng.choice(['', 'a', 'b'])}")
    return BytesSource("c.csv", ("\n".join(lines) + "\n").encode())


# An e-mail-keyed file (layout "key": "email") over preloaded contacts, some holding two of
# its e-mails (one contact's rows in two partitions, were they hashed by the e-mail itself).
EMAIL_KEY: dict[str, object] = {"key": "email"}
EMAILS = 24


def keyed_source(seed: int) -> BytesSource:
    rng = random.Random(seed)
    lines = ["nome,email,plano"]
    for i in range(ROWS):
        email = f"e{rng.randrange(EMAILS)}@x.com" if rng.random() > 0.05 else ""
        lines.append(f"N{i},{email},{rng.choice(['', 'a', 'b'])}")
    return BytesSource("k.csv", ("\n".join(lines) + "\n").encode())


async def preload_keyed(store: InMemoryStore) -> None:
    """Six contacts hold e0 to e11, two each; six more e12 to e17, one each; e18 to e23 are new."""
    lines = ["nome,cpf,email"]
    lines += [f"P{k},{cpf(k)},e{2 * k}@x.com" for k in range(6)]
    lines += [f"P{k},{cpf(k)},e{2 * k + 1}@x.com" for k in range(6)]
    lines += [f"Q{k},{cpf(100 + k)},e{k}@x.com" for k in range(12, 18)]
    data = ("\n".join(lines) + "\n").encode()
    job = await new_job(store, ConflictStrategy.MERGE, 500)
    await ImportRun(job, BytesSource("p.csv", data), store, PipelineConfig(limits=Limits())).run()


async def new_job(
    store: InMemoryStore,
    strategy: ConflictStrategy,
    chunk: int,
    layout: dict[str, object] | None = None,
    partitions: int = 3,
) -> Job:
    job_id = uuid.uuid4()
    new = NewJob(job_id, 1, None, "c.csv", "csv", strategy.value, chunk, partitions, layout=layout)
    await store.create_job(new, JobStatus.QUEUED)
    return await store.get_job(job_id)


async def one_instance(
    seed: int, strategy: ConflictStrategy, chunk: int, *, keyed: bool = False
) -> InMemoryStore:
    """The reference: one instance, one partition when keyed (every row in line order)."""
    store = InMemoryStore()
    if keyed:
        await preload_keyed(store)
    job = await new_job(
        store, strategy, chunk, EMAIL_KEY if keyed else None, partitions=1 if keyed else 3
    )
    data = keyed_source(seed) if keyed else source(seed)
    await ImportRun(job, data, store, _config(keyed)).run()
    return store


def _config(keyed: bool, **options: float) -> PipelineConfig:
    layout = parse_layout(EMAIL_KEY) if keyed else None
    return PipelineConfig(limits=Limits(), layout=layout, **options)  # type: ignore[arg-type]


async def fanned_out(
    seed: int,
    strategy: ConflictStrategy,
    chunk: int,
    instances: int,
    store: FlakyStore,
    broker: Broker,
    max_retries: int = 3,
    *,
    keyed: bool = False,
) -> Job:
    if keyed:
        await preload_keyed(store)
    job = await new_job(store, strategy, chunk, EMAIL_KEY if keyed else None)
    leased = replace(job, lease_owner="coordinator")
    config = _config(keyed, publish_window=3, lane_poll_s=0.001)
    # Every other instance decodes with the pure codec (no compiled code there): the same.
    handlers = [
        ChunkHandler(
            store,
            FanoutSettings(max_retries=max_retries, lane_wait_s=0.0, compiled=i % 2 == 0),
        )
        for i in range(instances)
    ]
    data = keyed_source(seed) if keyed else source(seed)
    run = ImportRun(leased, data, store, config, publisher=broker)

    async def instance(handler: ChunkHandler) -> None:
        while True:
            message = broker.take()
            if message is None:
                await asyncio.sleep(0)
                continue
            await handler.handle(FakeDelivery(broker, message))

    consumers = [
        asyncio.create_task(instance(h), name=f"instance:{i}") for i, h in enumerate(handlers)
    ]
    try:
        await asyncio.wait_for(run.run(), 30)
    finally:
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)
    return await store.get_job(job.id)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    strategy=st.sampled_from(ConflictStrategy),
    chunk=st.integers(1, 40),
    instances=st.integers(1, 3),
    failure_rate=st.sampled_from([0.0, 0.1, 0.3]),
    duplicate_every=st.sampled_from([0, 3]),
    keyed=st.booleans(),
)
def test_any_instances_and_deliveries_give_the_one_instance_result(
    seed: int,
    strategy: ConflictStrategy,
    chunk: int,
    instances: int,
    failure_rate: float,
    duplicate_every: int,
    keyed: bool,
) -> None:
    """``keyed``: an e-mail-keyed file in three partitions against its one-partition run."""

    async def scenario() -> None:
        expected = await one_instance(seed, strategy, chunk, keyed=keyed)
        rng = random.Random(seed)
        store = FlakyStore(rng, failure_rate)
        broker = Broker(rng, duplicate_every=duplicate_every)
        # Retries enough that no chunk is given up at these failure rates.
        job = await fanned_out(
            seed, strategy, chunk, instances, store, broker, max_retries=50, keyed=keyed
        )
        assert job.status is JobStatus.COMPLETED_WITH_PLACEHOLDERS  # "plano" is new
        *_, reference = expected.jobs.values()
        assert job.counters == reference.counters
        assert job.counters.balanced
        got, want = store.model.client_state(1), expected.model.client_state(1)
        assert model_contacts(got) == model_contacts(want)  # created ones: any identity
        assert not broker.dead
        assert not broker.main  # nothing left behind

    asyncio.run(scenario())


async def test_a_chunk_that_always_fails_is_given_up_after_its_retries() -> None:
    rng = random.Random(5)
    store = FlakyStore(rng, 0.0, poison=2)
    broker = Broker(rng)
    job = await fanned_out(1, ConflictStrategy.MERGE, 20, 2, store, broker)
    assert job.status is JobStatus.COMPLETED_WITH_PLACEHOLDERS
    assert job.counters.balanced
    lost = sum(c.rows_read - c.invalid for (n, _, _), c in store.ledger[job.id].items() if n == 2)
    assert job.counters.error == lost > 0
    dead = [(codec.decode(m.body).batch.chunk_no, m.attempts) for m, _ in broker.dead]
    assert sorted(dead) == [(2, 3)] * 3  # each partition's batch: 3 retries, then dead-lettered
    assert all("gone" in error for _, error in broker.dead)


@pytest.mark.parametrize("body", [b"garbage", b"{}"])
async def test_an_unparseable_message_goes_straight_to_the_dead_letter_queue(body: bytes) -> None:
    broker = Broker(random.Random(1))
    delivery = FakeDelivery(broker, Message(body))
    await ChunkHandler(InMemoryStore()).handle(delivery)
    assert delivery.ending == "dead_letter"
    assert broker.dead[0][1].startswith("malformed")


async def test_a_message_of_an_unknown_import_is_dead_lettered_and_writes_nothing() -> None:
    store = InMemoryStore()
    batch = Batch(0, 0, 2, 10, ())
    broker = Broker(random.Random(1))
    delivery = FakeDelivery(broker, Message(codec.encode(uuid.uuid4(), "w", batch)))
    await ChunkHandler(store).handle(delivery)
    assert delivery.ending == "dead_letter"
    assert "unknown import" in broker.dead[0][1]


async def _given_up_batch(store: InMemoryStore) -> tuple[Job, Batch]:
    """A job whose chunk 0 (partition 0) was given up after its retries, lane moved past it."""
    job = replace(await new_job(store, ConflictStrategy.MERGE, 10), lease_owner="coordinator")
    await store.open_lanes(job.id, 1)
    rows = (ContactRow(2, cpf(1), "A", None), ContactRow(3, cpf(2), "B", None))
    batch = Batch(0, 0, 2, 10, rows)
    await store.discard_batch(job, batch, 4, "ConnectionDoesNotExistError: gone", lane=True)
    return job, batch


@pytest.mark.parametrize("finished", [False, True])
async def test_a_repeat_of_a_given_up_batch_goes_to_the_dead_letter_queue_again(
    finished: bool,
) -> None:
    """The process that gave the batch up died (or lost the broker) before its copy reached the
    dead-letter queue: the redelivered copy finds the batch given up and dead-letters it, whether
    or not the import has finished meanwhile."""
    store = InMemoryStore()
    job, batch = await _given_up_batch(store)
    if finished:
        await store.finalize(job.id, None)
    broker = Broker(random.Random(1))
    delivery = FakeDelivery(broker, Message(codec.encode(job.id, "coordinator", batch), 3))
    await ChunkHandler(store).handle(delivery)
    assert delivery.ending == "dead_letter"
    assert broker.dead[0][1] == "ConnectionDoesNotExistError: gone"
    assert store.ledger[job.id][batch.key].error == 2  # recorded once, not again


async def test_a_repeat_of_an_applied_batch_is_acked() -> None:
    store = InMemoryStore()
    job = replace(await new_job(store, ConflictStrategy.MERGE, 10), lease_owner="coordinator")
    await store.open_lanes(job.id, 1)
    batch = Batch(0, 0, 2, 10, (ContactRow(2, cpf(1), "A", None),))
    broker = Broker(random.Random(1))
    handler = ChunkHandler(store)
    endings = []
    for _ in range(2):
        delivery = FakeDelivery(broker, Message(codec.encode(job.id, "coordinator", batch)))
        await handler.handle(delivery)
        endings.append(delivery.ending)
    assert endings == ["ack", "ack"]
    assert not broker.dead
