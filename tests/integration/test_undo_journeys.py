"""Undo and journeys (issue 25 §3) on the real PostgreSQL: the undo of an import that fed a
journey takes back the links it made with the channels they point to and cancels its
classification; a started (ACTIVE) classification refuses the undo and keeps everything; a
failing undo step ends the job ``failed`` with the reason, and the owner's retry finishes it;
``contact_amount`` counts distinct contacts; an import whose every batch failed ends ``failed``."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.undo import PostgresUndo
from importer.core.errors import JourneyStartedError, LeaseLostError, UndoFailedError
from importer.services.undo import undo_import
from tests.journey_support import classification, import_into_journey, journey_links, new_journey
from tests.support import cpf, fetch, import_file, live_checksum, write_csv

pytestmark = pytest.mark.integration

_clients = itertools.count(75_000)
HEADER = ("nome", "cpf", "jornada")


async def _undo(dsn: str, job_id: object, client: int | None = None) -> None:
    pool = await connect_pool(dsn, 4)
    try:
        await undo_import(PostgresUndo(pool), PostgresJobQueue(pool), client, job_id)  # type: ignore[arg-type]
    finally:
        await pool.close()


async def _job(dsn: str, job_id: object) -> tuple[str, str | None]:
    (row,) = await fetch(dsn, "SELECT status, fail_reason FROM import_job WHERE id = $1", job_id)
    return row["status"], row["fail_reason"]


async def _execute(dsn: str, sql: str, *args: object) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


def test_undo_of_a_merge_that_gave_a_stored_contact_a_journey_channel(
    db_dsn: str, tmp_path: Path
) -> None:
    """The issue's case: a MERGE import with a journey gave a stored contact a journey channel
    (and created another contact with one). The undo removes both links and the channels they
    point to, ends ``undone``, and the classification ends CANCELED with no contact."""

    async def run() -> None:
        client = next(_clients)
        journey = await new_journey(db_dsn, client)
        pre = write_csv(tmp_path / "pre.csv", HEADER, [("Ana", cpf(1), "")])
        await import_file(db_dsn, pre, client)
        before = await live_checksum(db_dsn, client)
        rows = [("Ana", cpf(1), "onb-a"), ("Bia", cpf(2), "onb-b")]
        path = write_csv(tmp_path / "j.csv", HEADER, rows)
        outcome = await import_into_journey(db_dsn, path, client, journey)
        assert len(await journey_links(db_dsn, client)) == 2
        assert (await classification(db_dsn, outcome.job_id))["status"] == "PAUSED"
        await _undo(db_dsn, outcome.job_id, client)
        assert await _job(db_dsn, outcome.job_id) == ("undone", None)
        assert await journey_links(db_dsn, client) == []
        assert await live_checksum(db_dsn, client) == before
        found = await classification(db_dsn, outcome.job_id)
        assert (found["status"], found["contact_amount"]) == ("CANCELED", 0)

    asyncio.run(run())


def test_a_started_classification_refuses_the_undo_and_keeps_its_links(
    db_dsn: str, tmp_path: Path
) -> None:
    """An ACTIVE classification (auto start: the journey is processing its contacts) is not
    taken back: the undo refuses, nothing changes; once the journey is paused, it undoes."""

    async def run() -> None:
        client = next(_clients)
        journey = await new_journey(db_dsn, client)
        before = await live_checksum(db_dsn, client)
        path = write_csv(tmp_path / "j.csv", HEADER, [("Ana", cpf(1), "onb-a")])
        outcome = await import_into_journey(db_dsn, path, client, journey, auto_start=True)
        found = await classification(db_dsn, outcome.job_id)
        assert found["status"] == "ACTIVE"
        after = await live_checksum(db_dsn, client)
        links = await journey_links(db_dsn, client)
        with pytest.raises(JourneyStartedError, match="ACTIVE"):
            await _undo(db_dsn, outcome.job_id, client)
        assert (await _job(db_dsn, outcome.job_id))[0] == "completed"
        assert await journey_links(db_dsn, client) == links
        assert await live_checksum(db_dsn, client) == after
        assert (await classification(db_dsn, outcome.job_id))["status"] == "ACTIVE"
        await _execute(
            db_dsn,
            "UPDATE journey_classification_contact SET status = 'PAUSED' WHERE id = $1",
            found["id"],
        )
        await _undo(db_dsn, outcome.job_id, client)
        assert await journey_links(db_dsn, client) == []
        assert await live_checksum(db_dsn, client) == before
        assert (await classification(db_dsn, outcome.job_id))["status"] == "CANCELED"

    asyncio.run(run())


def test_replace_that_soft_deletes_a_linked_channel_undoes_consistently(
    db_dsn: str, tmp_path: Path
) -> None:
    """An earlier journey import linked Ana's journey channel X; a later one with a ``replace``
    channel policy drops X for Y and links Y. X's link is the earlier journey's and stays; the
    undo of the later import removes Y and its link, X is live again, its link untouched."""

    async def run() -> None:
        client = next(_clients)
        journey = await new_journey(db_dsn, client)
        first = write_csv(tmp_path / "a.csv", HEADER, [("Ana", cpf(1), "x")])
        earlier = await import_into_journey(db_dsn, first, client, journey)
        before = await live_checksum(db_dsn, client)
        links_before = await journey_links(db_dsn, client)
        second = write_csv(tmp_path / "b.csv", HEADER, [("Ana", cpf(1), "y")])
        layout: dict[str, object] = {"merge": {"channels": "replace"}}
        later = await import_into_journey(db_dsn, second, client, journey, layout_document=layout)
        links = await journey_links(db_dsn, client)
        assert [(value, live) for *_, value, live in links] == [("x", False), ("y", True)]
        await _undo(db_dsn, later.job_id, client)
        assert await _job(db_dsn, later.job_id) == ("undone", None)
        assert await journey_links(db_dsn, client) == links_before
        assert await live_checksum(db_dsn, client) == before
        assert (await classification(db_dsn, earlier.job_id))["status"] == "PAUSED"

    asyncio.run(run())


def test_contact_amount_counts_distinct_contacts(db_dsn: str, tmp_path: Path) -> None:
    """Two rows (two journey values) of one contact and a contact without a journey channel:
    one contact in the classification."""

    async def run() -> None:
        client = next(_clients)
        journey = await new_journey(db_dsn, client)
        rows = [("Ana", cpf(1), "x"), ("Ana", cpf(1), "y"), ("Bia", cpf(2), "")]
        path = write_csv(tmp_path / "j.csv", HEADER, rows)
        outcome = await import_into_journey(db_dsn, path, client, journey, chunk_size=1)
        assert len(await journey_links(db_dsn, client)) == 2
        assert (await classification(db_dsn, outcome.job_id))["contact_amount"] == 1

    asyncio.run(run())


def test_an_undo_step_that_fails_ends_the_job_failed_and_the_owner_retries(
    db_dsn: str, tmp_path: Path
) -> None:
    """A table the platform added references a channel the import added: the undo's step fails
    on the foreign key. The job ends ``failed`` with the reason (not ``undoing``); once the
    reference is gone, the owner's undo finishes it."""

    async def run() -> None:
        client = next(_clients)
        pre = write_csv(tmp_path / "pre.csv", ("nome", "cpf", "email"), [("Ana", cpf(1), "")])
        await import_file(db_dsn, pre, client)
        before = await live_checksum(db_dsn, client)
        body = write_csv(
            tmp_path / "b.csv", ("nome", "cpf", "email"), [("Ana", cpf(1), "ana@x.com")]
        )
        outcome = await import_file(db_dsn, body, client)
        await _execute(
            db_dsn, "CREATE TABLE platform_opt_in (detail_id bigint REFERENCES contact_details)"
        )
        await _execute(
            db_dsn,
            "INSERT INTO platform_opt_in SELECT id FROM contact_details WHERE client_id = $1",
            client,
        )
        with pytest.raises(UndoFailedError, match="platform_opt_in"):
            await _undo(db_dsn, outcome.job_id, client)
        status, reason = await _job(db_dsn, outcome.job_id)
        assert status == "failed"
        assert reason is not None
        assert reason.startswith("undo_failed")
        assert "platform_opt_in" in reason
        await _execute(db_dsn, "DELETE FROM platform_opt_in")
        await _undo(db_dsn, outcome.job_id)  # the owner's command line
        assert (await _job(db_dsn, outcome.job_id))[0] == "undone"
        assert await live_checksum(db_dsn, client) == before

    asyncio.run(run())


def test_an_import_whose_every_batch_failed_ends_failed(db_dsn: str, tmp_path: Path) -> None:
    """A constraint the platform added refuses every row: each is rejected alone, none is
    written, and the job ends ``failed`` (``all_batches_failed``), not ``completed``."""

    async def run() -> None:
        client = next(_clients)
        await _execute(
            db_dsn,
            f"ALTER TABLE contact ADD CONSTRAINT platform_no_{client}"
            f" CHECK (client_id <> {client}) NOT VALID",
        )
        rows = [("Ana", cpf(1), ""), ("Bia", cpf(2), ""), ("Caio", cpf(3), "")]
        path = write_csv(tmp_path / "a.csv", HEADER, rows)
        outcome = await import_file(db_dsn, path, client, chunk_size=2)
        assert outcome.counters.error == 3
        assert await _job(db_dsn, outcome.job_id) == ("failed", "all_batches_failed")
        other = next(_clients)  # another client's rows go in: its job completes
        done = await import_file(db_dsn, path, other, chunk_size=2)
        assert (await _job(db_dsn, done.job_id))[0] == "completed"

    asyncio.run(run())


def test_an_undo_whose_process_stopped_is_failed_once_its_lease_expires(
    db_dsn: str, tmp_path: Path
) -> None:
    """An undo holds the job's lease while it runs. Its process dies after a slice: the job is
    ``undoing`` under a live lease, which the sweep leaves alone; once the lease expired, the
    sweep fails it (no job rests in ``undoing`` without a live lease), and the owner's undo
    resumes it to the state before the import."""

    async def run() -> None:
        client = next(_clients)
        pre = write_csv(tmp_path / "pre.csv", HEADER, [("Ana", cpf(1), "")])
        await import_file(db_dsn, pre, client)
        before = await live_checksum(db_dsn, client)
        rows = [("Ana B", cpf(1), ""), ("Bia", cpf(2), ""), ("Caio", cpf(3), "")]
        body = await import_file(
            db_dsn, write_csv(tmp_path / "b.csv", HEADER, rows), client, chunk_size=1
        )
        pool = await connect_pool(db_dsn, 2)
        try:
            dying = PostgresUndo(pool)
            await dying.begin_undo(client, body.job_id)
            assert await dying.undo_slice(body.job_id)  # then its process dies
            queue = PostgresJobQueue(pool)
            (lease,) = await fetch(
                db_dsn,
                "SELECT status, lease_expires_at > now() AS live FROM import_job WHERE id = $1",
                body.job_id,
            )
            assert (lease["status"], lease["live"]) == ("undoing", True)
            assert await queue.fail_stale_undos() == 0
            await _execute(  # its lease's time passes
                db_dsn,
                "UPDATE import_job SET lease_expires_at = now() - interval '1 second'"
                " WHERE id = $1",
                body.job_id,
            )
            assert await queue.fail_stale_undos() == 1
            status, reason = await _job(db_dsn, body.job_id)
            assert status == "failed"
            assert reason is not None
            assert reason.startswith("undo_failed: interrupted")
            with pytest.raises(LeaseLostError):
                await dying.undo_slice(body.job_id)  # a survivor writes nothing more
        finally:
            await pool.close()
        await _undo(db_dsn, body.job_id)
        assert await _job(db_dsn, body.job_id) == ("undone", None)
        assert await live_checksum(db_dsn, client) == before

    asyncio.run(run())


JOURNEY_VALUES = ["", "", "x", "y"]


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pre=st.lists(st.tuples(st.integers(1, 4), st.sampled_from(JOURNEY_VALUES)), max_size=4),
    body=st.lists(
        st.tuples(
            st.integers(1, 4),
            st.sampled_from(["Ana", "Bia", ""]),
            st.sampled_from(JOURNEY_VALUES),
        ),
        min_size=1,
        max_size=8,
    ),
    channels=st.sampled_from(["union", "replace"]),
    chunk_size=st.sampled_from([1, 3, 500]),
)
def test_a_journey_import_then_its_undo_leaves_contacts_and_links_as_before(
    db_dsn: str,
    tmp_path: Path,
    pre: list[tuple[int, str]],
    body: list[tuple[int, str, str]],
    channels: str,
    chunk_size: int,
) -> None:
    """The invariant: import (with a journey, MERGE, either channel policy) + undo = before —
    the live contact tables byte for byte and every journey link (an earlier journey import's
    included); the classification ends CANCELED."""

    async def run() -> None:
        client = next(_clients)
        journey = await new_journey(db_dsn, client)
        if pre:
            earlier = [(f"P{k}", cpf(k), value) for k, value in pre]
            path = write_csv(tmp_path / "pre.csv", HEADER, earlier)
            await import_into_journey(db_dsn, path, client, journey)
        before = (await live_checksum(db_dsn, client), await journey_links(db_dsn, client))
        rows = [(name, cpf(k), value) for k, name, value in body]
        layout: dict[str, object] = {"merge": {"channels": channels}}
        outcome = await import_into_journey(
            db_dsn,
            write_csv(tmp_path / "body.csv", HEADER, rows),
            client,
            journey,
            chunk_size=chunk_size,
            layout_document=layout,
        )
        await _undo(db_dsn, outcome.job_id, client)
        assert await _job(db_dsn, outcome.job_id) == ("undone", None)
        after = (await live_checksum(db_dsn, client), await journey_links(db_dsn, client))
        assert after == before
        assert (await classification(db_dsn, outcome.job_id))["status"] == "CANCELED"

    asyncio.run(run())
