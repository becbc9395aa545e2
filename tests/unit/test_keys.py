"""Other dedupe keys (core.keys): the layout's ``"key"``, its row plans, the builders' key, the
folding of several keys of one contact, and the pipeline on the in-memory store against the
reference model for random e-mail-keyed files, chunkings and policies (preview = apply too)."""

from __future__ import annotations

import asyncio
import copy
import uuid
from dataclasses import asdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core import keys
from importer.core.config import PipelineConfig
from importer.core.errors import FileRejectedError, LayoutError
from importer.core.layout import parse_layout, plan_for_header, plan_for_keys
from importer.core.models import (
    Channel,
    ConflictStrategy,
    ContactRow,
    Detail,
    JobStatus,
    Limits,
    NewJob,
    Reason,
    Severity,
)
from importer.core.reference import InMemoryStore, ReferenceModel
from importer.core.rows import RowBuilder
from importer.pipeline.run import ImportRun
from tests.strategies import (
    EMAIL_LAYOUT,
    GeneratedRow,
    csv_bytes,
    email_csv_bytes,
    email_rows,
    expected_rows,
    keyed_merge_documents,
    rows,
)
from tests.support import BytesSource, model_contacts


def test_the_layout_names_the_key() -> None:
    assert parse_layout({}).key is keys.DedupeKey.CPF_CNPJ
    assert parse_layout({"key": "whatsapp"}).key.channel is Channel.WHATSAPP
    with pytest.raises(LayoutError, match=r"layout\.key must be one of"):
        parse_layout({"key": "cpf"})
    with pytest.raises(LayoutError, match="replace"):
        parse_layout({"key": "email", "merge": {"channels": "replace"}})
    assert keys.partitions_for({"key": "phone"}, 4) == 1
    assert keys.partitions_for({"key": "cpf_cnpj"}, 4) == 4
    assert keys.partitions_for(None, 4) == 4


@pytest.mark.parametrize(
    ("header", "reason", "text"),
    [
        (["nome", "cpf", "email"], Reason.INVALID_LAYOUT, "map it to 'ignore'"),
        (["nome", "email", "e-mail"], Reason.INVALID_LAYOUT, "all map to email"),
        (["nome", "email", "mail2"], Reason.INVALID_LAYOUT, "all map to email"),
        (["nome", "celular"], Reason.MISSING_REQUIRED_COLUMN, "no email column"),
    ],
)
def test_an_email_key_needs_one_email_column_and_no_cpf(
    header: list[str], reason: Reason, text: str
) -> None:
    layout = parse_layout({"key": "email", "columns": {"mail2": "email"}})
    with pytest.raises(FileRejectedError) as refused:
        plan_for_header(header, layout, 100)
    assert refused.value.reason is reason
    assert text in (refused.value.detail or "")


def test_a_jsonl_object_may_lack_the_key_column_but_not_have_two() -> None:
    layout = parse_layout({"key": "email", "columns": {"mail2": "email"}})
    assert plan_for_keys(["nome"], layout).key_channel is Channel.EMAIL
    with pytest.raises(FileRejectedError):
        plan_for_keys(["email", "mail2"], layout)


def test_the_row_key_is_the_key_columns_normalized_value_and_its_absence_invalid() -> None:
    plan = plan_for_header(["nome", "E-mail", "celular"], parse_layout(EMAIL_LAYOUT), 100)
    builder = RowBuilder(plan, international=False, max_value_chars=100)
    row, issues = builder.build(2, ["Ana", " ana@X.COM ", "123"])
    assert row is not None
    assert row.cpf_cnpj == "ana@x.com"
    assert [i.reason for i in issues] == [Reason.INVALID_PHONE]  # other channels still warn
    row, issues = builder.build(3, ["Ana", "nope", ""])
    assert row is None
    assert [(i.column, i.reason, i.severity) for i in issues] == [
        ("E-mail", Reason.INVALID_EMAIL, Severity.INVALID)
    ]
    row, issues = builder.build(4, ["Ana", "", "(11) 91234-5678"])
    assert row is None
    assert [(i.column, i.reason) for i in issues] == [("E-mail", Reason.MISSING_KEY)]


def _row(line: int, key: str, name: str) -> ContactRow:
    return ContactRow(line, key, name, None)


def test_keys_of_one_stored_contact_fold_under_the_smallest() -> None:
    file = [_row(2, "d@x", "a"), _row(3, "c@x", "b"), _row(4, "e@x", "c"), _row(5, "f@x", "d")]
    unified = keys.unify(file, {"c@x": 7, "d@x": 7, "f@x": 8})
    assert [(r.line, r.cpf_cnpj) for r in unified] == [
        (2, "c@x"),
        (3, "c@x"),
        (4, "e@x"),
        (5, "f@x"),
    ]
    assert keys.unify(file, {"c@x": 7}) == file


def test_the_reference_model_refuses_a_key_two_contacts_share() -> None:
    model = ReferenceModel()
    model.apply(1, [ContactRow(1, "k1", "A", None, (_email("a@x"),))], ConflictStrategy.MERGE)
    model.apply(1, [ContactRow(1, "k2", "B", None, (_email("a@x"),))], ConflictStrategy.MERGE)
    refused: list[ContactRow] = []
    counters = model.apply(
        1,
        [_keyed(2, "a@x", "C"), _keyed(3, "b@x", "D"), _keyed(4, "b@x", "E")],
        ConflictStrategy.MERGE,
        key_channel=Channel.EMAIL,
        refused=refused,
    )
    assert (counters.invalid, counters.inserted, counters.updated) == (1, 1, 1)
    assert [r.line for r in refused] == [2]
    assert model.contacts[(1, "#1")].name == "E"


def _email(value: str) -> Detail:
    return Detail(Channel.EMAIL, value)


def _keyed(line: int, email: str, name: str) -> ContactRow:
    return ContactRow(line, email, name, None, (_email(email),))


async def _run(
    store: InMemoryStore,
    data: bytes,
    strategy: ConflictStrategy,
    layout: dict[str, object] | None,
    chunk_size: int,
    *,
    preview: bool = False,
) -> uuid.UUID:
    partitions = keys.partitions_for(layout, 3)
    new_job = NewJob(
        uuid.uuid4(), 1, None, "b.csv", "csv", strategy.value, chunk_size, partitions,
        preview=preview, layout=layout,
    )  # fmt: skip
    job = await store.create_job(new_job, JobStatus.QUEUED)
    parsed = None if layout is None else parse_layout(layout)
    config = PipelineConfig(limits=Limits(), read_block_bytes=97, layout=parsed)
    await ImportRun(job, BytesSource("b.csv", data), store, config).run()
    return job.id


@settings(max_examples=80, deadline=None)
@given(
    pre=st.lists(rows(key_count=4), min_size=1, max_size=6),
    body=st.lists(email_rows(), min_size=1, max_size=20),
    strategy=st.sampled_from(ConflictStrategy),
    document=keyed_merge_documents(),
    chunk_size=st.integers(1, 6),
)
def test_email_keyed_runs_equal_the_reference_model_and_their_previews(
    pre: list[GeneratedRow],
    body: list[GeneratedRow],
    strategy: ConflictStrategy,
    document: dict[str, str],
    chunk_size: int,
) -> None:
    layout: dict[str, object] = {**EMAIL_LAYOUT, "merge": document}
    pre_rows, _ = expected_rows(pre)
    body_rows, invalid = expected_rows(body)

    async def check() -> None:
        model = ReferenceModel()
        model.apply(1, pre_rows, ConflictStrategy.MERGE)
        expected = model.apply(
            1, body_rows, strategy, parse_layout(layout).merge, key_channel=Channel.EMAIL
        )
        store = InMemoryStore()
        await _run(store, csv_bytes(pre), ConflictStrategy.MERGE, None, 500)
        before = copy.deepcopy(store.model.contacts)
        data = email_csv_bytes(body)
        preview_id = await _run(store, data, strategy, layout, chunk_size, preview=True)
        assert store.model.contacts == before
        job_id = await _run(store, data, strategy, layout, chunk_size)
        job = store.jobs[job_id]
        got = job.counters
        assert got.invalid == invalid + expected.invalid
        assert (got.inserted, got.updated, got.ignored) == (
            expected.inserted,
            expected.updated,
            expected.ignored,
        )
        assert model_contacts(store.model.client_state(1)) == model_contacts(model.client_state(1))
        preview = store.jobs[preview_id].preview
        assert preview is not None
        assert preview["counters"] == asdict(got)
        reasons = [i.reason async for i in store.row_issues(job_id)]
        assert reasons.count(Reason.AMBIGUOUS_KEY) == expected.invalid

    asyncio.run(check())
