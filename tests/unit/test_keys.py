"""Other dedupe keys (core.keys): the layout's ``"key"``, its row plans, the builders' key, the
folding of several keys of one contact, and the pipeline on the in-memory store against the
reference model for random e-mail-keyed files, chunkings and policies (preview = apply too)."""

from __future__ import annotations

import asyncio
import copy
import uuid
import zlib
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


def test_the_values_of_a_stored_contact_share_its_smallest_values_partition() -> None:
    groups = keys.key_groups([(7, "b@x"), (7, "a@x"), (7, "c@x"), (9, "z@x"), (9, "y@x")])
    assert groups.canonical == {"b@x": "a@x", "c@x": "a@x", "z@x": "y@x"}
    assert not groups.whole
    for n in (1, 2, 3, 7):
        assert {groups.partition(v, n) for v in ("a@x", "b@x", "c@x")} == {
            keys.NO_GROUPS.partition("a@x", n)
        }
        assert groups.partition("new@x", n) == keys.NO_GROUPS.partition("new@x", n)
    # A value two multi-valued contacts share (its rows are ambiguous_key): the smaller group.
    shared = keys.key_groups([(1, "m@x"), (1, "s@x"), (2, "a@x"), (2, "s@x")])
    assert shared.canonical == {"s@x": "a@x"}


def test_the_partition_of_a_key_is_crc32_modulo_the_partitions() -> None:
    assert keys.NO_GROUPS.partition("52998224725", 4) == zlib.crc32(b"52998224725") % 4


def test_too_many_grouped_values_put_every_row_in_one_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keys, "MAX_GROUPED_VALUES", 3)
    assert keys.key_groups([(1, "a"), (1, "b"), (2, "c")]).whole is False
    groups = keys.key_groups([(1, "a"), (1, "b"), (2, "c"), (2, "d")])
    assert groups.whole
    assert {groups.partition(k, 4) for k in ("a", "c", "q", "zz", "m@x")} == {0}


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
    max_invalid: str | None = None,
    partitions: int = 3,
) -> uuid.UUID:
    new_job = NewJob(
        uuid.uuid4(), 1, None, "b.csv", "csv", strategy.value, chunk_size, partitions,
        preview=preview, layout=layout, max_invalid=max_invalid,
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
    partitions=st.integers(1, 4),
    yields=st.lists(st.integers(0, 12), min_size=4, max_size=4),
)
def test_email_keyed_runs_equal_the_reference_model_and_their_previews(
    pre: list[GeneratedRow],
    body: list[GeneratedRow],
    strategy: ConflictStrategy,
    document: dict[str, str],
    chunk_size: int,
    partitions: int,
    yields: list[int],
) -> None:
    """Whatever order the partitions' consumers apply in (``yields``), the rows of one stored
    contact (several of its e-mails among the keys: a@ and B@ hash apart in 2 and 4 partitions)
    meet in one partition in line order."""
    layout: dict[str, object] = {**EMAIL_LAYOUT, "merge": document}
    pre_rows, _ = expected_rows(pre)
    body_rows, invalid = expected_rows(body)

    async def check() -> None:
        model = ReferenceModel()
        model.apply(1, pre_rows, ConflictStrategy.MERGE)
        expected = model.apply(
            1, body_rows, strategy, parse_layout(layout).merge, key_channel=Channel.EMAIL
        )
        store = InMemoryStore(yields)
        await _run(store, csv_bytes(pre), ConflictStrategy.MERGE, None, 500)
        before = copy.deepcopy(store.model.contacts)
        data = email_csv_bytes(body)
        preview_id = await _run(store, data, strategy, layout, chunk_size, preview=True)
        assert store.model.contacts == before
        job_id = await _run(store, data, strategy, layout, chunk_size, partitions=partitions)
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


def test_the_threshold_counts_the_ambiguous_keys_before_any_contact_is_written() -> None:
    """A channel key's ambiguous rows are known before the batches apply (the client's turn
    holds the stored contacts still): ``max_invalid`` counts them with the file's invalid rows."""
    pre = b"nome,cpf,email\nA,52998224725,a@x.com\nB,11144477735,a@x.com\n"
    body = b"nome,email\nC,a@x.com\nD,\nE,e@x.com\n"  # 1 ambiguous, 1 missing_key, 1 valid

    async def check() -> None:
        for limit, status in (("2", JobStatus.COMPLETED), ("1", JobStatus.FAILED)):
            store = InMemoryStore()
            await _run(store, pre, ConflictStrategy.MERGE, None, 500)
            before = copy.deepcopy(store.model.contacts)
            job_id = await _run(
                store, body, ConflictStrategy.MERGE, EMAIL_LAYOUT, 1, max_invalid=limit
            )
            job = store.jobs[job_id]
            assert job.status is status, limit
            assert job.counters.invalid == 2
            reasons = sorted([i.reason.value async for i in store.row_issues(job_id)])
            assert reasons == ["ambiguous_key", "missing_key"]
            if status is JobStatus.FAILED:
                assert job.fail_reason == Reason.TOO_MANY_INVALID_ROWS
                assert store.model.contacts == before

    asyncio.run(check())


@pytest.mark.parametrize("yields", [(0, 0), (0, 5), (5, 0)])
def test_the_e_mails_of_one_stored_contact_apply_in_line_order_across_partitions(
    yields: tuple[int, int],
) -> None:
    """B@ and a@ hash to different partitions of two; both are one stored contact's, so the
    rows of either go by its group (B@'s: the smaller) and the later row's name wins, whichever
    consumer runs ahead."""
    pre = b"nome,cpf,email\nA,52998224725,a@x.com.br\nA,52998224725,B@x.com.br\n"
    body = b"nome,email\nN1,B@x.com.br\nN2,a@x.com.br\n"
    assert zlib.crc32(b"a@x.com.br") % 2 != zlib.crc32(b"B@x.com.br") % 2

    async def check() -> None:
        store = InMemoryStore(yields)
        await _run(store, pre, ConflictStrategy.MERGE, None, 500)
        job_id = await _run(store, body, ConflictStrategy.MERGE, EMAIL_LAYOUT, 1, partitions=2)
        assert {k: s.name for k, s in store.model.client_state(1).items()} == {"52998224725": "N2"}
        assert store.groups[job_id].canonical == {"a@x.com.br": "B@x.com.br"}

    asyncio.run(check())
