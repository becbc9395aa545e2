"""The undo journal's arrays (adapters/postgres/journal.journal_arrays): what a batch plan
changes of the contacts that existed before the import, with their values before it, taken
from the stored contacts the batch planned against — nothing of a contact the import created."""

from __future__ import annotations

import datetime as dt
import uuid

from importer.adapters.postgres.journal import journal_arrays
from importer.core.merge import BatchPlan, StoredContact
from importer.core.models import Channel, ConflictStrategy, Detail, InputFormat, Job, JobStatus

JOB = Job(
    uuid.uuid4(), 1, JobStatus.IMPORTING, ConflictStrategy.MERGE, "f.csv", InputFormat.CSV, 500, 2
)
THEN = dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)
OLD = StoredContact(7, "Ana", "Rua A", custom_fields={"plano": "p1"}, updated_at=THEN)
OURS = StoredContact(9, "Bia", None, updated_at=THEN, import_job_id=JOB.id)  # an earlier batch's
OTHER = StoredContact(8, None, None, updated_at=THEN, import_job_id=uuid.uuid4())


def test_the_before_images_are_the_stored_values_and_skip_the_imports_own_contacts() -> None:
    plan = BatchPlan(
        contact_updates=[(9, "Bia B", None), (7, "Ana A", None), (8, "Caio", None)],
        custom_updates=[(7, "Plano", "p2"), (9, "Plano", "p3")],
        custom_inserts=[(8, "Cidade", "Recife")],
        detail_inserts=[(7, Detail(Channel.EMAIL, "a@x.com")), (9, Detail(Channel.PHONE, "1"))],
    )
    contacts, customs, details = journal_arrays(
        JOB, plan, [OLD, OURS, OTHER], {"plano": 3, "cidade": 4}
    )
    assert [list(c) for c in contacts] == [[7, 8], ["Ana", None], ["Rua A", None], [THEN, THEN]]
    assert [list(c) for c in customs] == [[8, 7], [4, 3], [None, "p1"], ["Recife", "p2"]]
    assert [list(c) for c in details] == [[7], [int(Channel.EMAIL)], ["a@x.com"]]


def test_a_plan_that_changes_no_stored_contact_journals_nothing() -> None:
    contacts, customs, details = journal_arrays(JOB, BatchPlan(), [OLD], {})
    assert contacts == [()] * 4
    assert customs == [()] * 4
    assert details == [()] * 3
