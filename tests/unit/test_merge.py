"""The batch merge decision (pure) against the reference model: applying the planned writes
batch after batch gives the reference model's state, for any cut of the rows into batches and
any merge policy."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core import merge
from importer.core.models import Channel, ConflictStrategy, ContactRow, Detail
from importer.core.policy import DEFAULT_POLICY, MergePolicy, parse_policy
from importer.core.reference import ContactState, ReferenceModel
from tests.strategies import expected_rows, merge_documents, rows


class PlannedStore:
    """Applies BatchPlans to dicts, the way the PostgreSQL adapter applies them to tables; one
    import at a time (``job``), with the provenance a non-default policy reads."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.contacts: dict[str, merge.StoredContact] = {}
        self.details: dict[int, set[tuple[Channel, str]]] = {}
        self.custom: dict[tuple[int, str], str] = {}
        self.creator: dict[int, int] = {}  # contact id → the job that created it
        self.marks: set[tuple[int, int, str]] = set()  # (job, contact id, target)
        self.deleted: dict[tuple[int, int], set[tuple[int, str]]] = {}  # (job, id) → replaced
        self.job = 0

    def apply(
        self,
        batch: list[ContactRow],
        strategy: ConflictStrategy,
        policy: MergePolicy = DEFAULT_POLICY,
    ) -> int:
        folded = merge.fold_rows(batch, strategy, policy)
        stored = {k: self._stored(k) for k in folded if k in self.contacts}
        plan = merge.plan_batch(folded, strategy, stored, policy)
        for entry in plan.new_contacts:
            c = merge.merged(entry)
            contact = merge.StoredContact(next(self.ids), c.name, c.street_address)
            self.creator[contact.id] = self.job
            self.contacts[c.key] = contact
            self.details[contact.id] = set(c.details)
            for lower, (_, value) in c.custom_fields.items():
                self.custom[(contact.id, lower)] = value
        for cid, name, address in plan.contact_updates:
            key, old = next((k, c) for k, c in self.contacts.items() if c.id == cid)
            self.contacts[key] = merge.StoredContact(
                cid,
                old.name if name is None else name,
                old.street_address if address is None else address,
            )
        for cid, d in plan.detail_inserts:  # a plain insert: the unique index would refuse a repeat
            assert (d.channel, d.value) not in self.details[cid]
            # a value this import's replace deleted comes back as its own row (a revival)
            assert (d.channel, d.value) not in self.deleted.get((self.job, cid), set())
            self.details[cid].add((d.channel, d.value))
        for cid, name, value in plan.custom_inserts:
            assert (cid, name.lower()) not in self.custom
            self.custom[(cid, name.lower())] = value
        for cid, name, value in plan.custom_updates:  # only values that change
            assert self.custom[(cid, name.lower())] != value
            self.custom[(cid, name.lower())] = value
        self._apply_provenance(plan)
        return plan.new_keys

    def _apply_provenance(self, plan: merge.BatchPlan) -> None:
        for cid, target in plan.marks:  # a plain insert: the primary key would refuse a repeat
            assert (self.job, cid, target) not in self.marks
            self.marks.add((self.job, cid, target))
        for cid, channel, value in plan.detail_deletions:
            assert (self.job, cid, f"channel:{channel}") in self.marks
            self.details[cid].remove((Channel(channel), value))
            self.deleted.setdefault((self.job, cid), set()).add((channel, value))
        for cid, channel, value in plan.detail_revivals:
            self.deleted[(self.job, cid)].remove((channel, value))
            assert (channel, value) not in self.details[cid]
            self.details[cid].add((Channel(channel), value))

    def _stored(self, key: str) -> merge.StoredContact:
        c = self.contacts[key]
        custom = {f: v for (cid, f), v in self.custom.items() if cid == c.id}
        return merge.StoredContact(
            c.id,
            c.name,
            c.street_address,
            frozenset(self.details[c.id]),
            custom,
            self.creator[c.id] == self.job,
            frozenset(t for j, cid, t in self.marks if (j, cid) == (self.job, c.id)),
            frozenset(self.deleted.get((self.job, c.id), ())),
        )

    def state(self) -> dict[str, ContactState]:
        out = {}
        for key, c in self.contacts.items():
            custom = {f: v for (cid, f), v in self.custom.items() if cid == c.id}
            out[key] = ContactState(c.name, c.street_address, set(self.details[c.id]), custom)
        return out


def check_planned_writes(pre, body, cuts, strategy, document) -> None:
    policy = parse_policy(document)
    pre_rows, _ = expected_rows(pre)
    body_rows, _ = expected_rows(body)
    model, store = ReferenceModel(), PlannedStore()
    model.apply(1, pre_rows, ConflictStrategy.MERGE)
    store.apply(pre_rows, ConflictStrategy.MERGE)
    expected = model.apply(1, body_rows, strategy, policy)
    store.job += 1
    new_keys, start = 0, 0
    for size in itertools.cycle(cuts):
        if start >= len(body_rows):
            break
        new_keys += store.apply(body_rows[start : start + size], strategy, policy)
        start += size
    assert new_keys == expected.inserted
    assert store.state() == model.client_state(1)


@given(
    pre=st.lists(rows(), max_size=8),
    body=st.lists(rows(), max_size=30),
    cuts=st.lists(st.integers(1, 7), min_size=1, max_size=30),
    strategy=st.sampled_from(ConflictStrategy),
)
def test_planned_writes_equal_the_reference_model(pre, body, cuts, strategy) -> None:
    check_planned_writes(pre, body, cuts, strategy, {})


@settings(max_examples=400)
@given(
    pre=st.lists(rows(key_count=3), max_size=4),
    body=st.lists(rows(key_count=3), min_size=2, max_size=16),
    cuts=st.lists(st.integers(1, 4), min_size=1, max_size=8),
    document=merge_documents(),
)
def test_any_policy_is_independent_of_the_batches(pre, body, cuts, document) -> None:
    """Few keys, many rows each, cut anywhere: every rule meets its own earlier batches."""
    check_planned_writes(pre, body, cuts, ConflictStrategy.MERGE, document)


def test_discard_keeps_the_first_row_only() -> None:
    batch = [ContactRow(2, "k", "first", None), ContactRow(3, "k", "second", "addr")]
    folded = merge.fold_rows(batch, ConflictStrategy.DISCARD)
    assert folded["k"] is batch[0]
    folded = merge.fold_rows(batch, ConflictStrategy.MERGE)
    assert (folded["k"].name, folded["k"].street_address) == ("second", "addr")


def _stored(**kwargs: object) -> merge.StoredContact:
    values: dict[str, object] = {"id": 9, "name": "Old", "street_address": None} | kwargs
    return merge.StoredContact(**values)  # type: ignore[arg-type]


def test_first_non_empty_folds_the_first_value_and_replaces_once() -> None:
    policy = parse_policy({"name": "first_non_empty", "custom:plano": "first_non_empty"})
    rows = [
        ContactRow(2, "k", None, None, (), (("Plano", "p1"),)),
        ContactRow(3, "k", "Ana", None, (), (("plano", "p2"), ("cidade", "x"))),
        ContactRow(4, "k", "Bia", None, (), (("cidade", "y"),)),
    ]
    folded = merge.merged(merge.fold_rows(rows, ConflictStrategy.MERGE, policy)["k"])
    assert folded.name == "Ana"
    assert folded.custom_fields == {"plano": ("Plano", "p1"), "cidade": ("cidade", "y")}
    plan = merge.plan_batch({"k": folded}, ConflictStrategy.MERGE, {"k": _stored()}, policy)
    assert plan.contact_updates == [(9, "Ana", None)]
    assert sorted(plan.marks) == [(9, "custom:plano"), (9, "name")]
    marked = _stored(marks=frozenset({"name"}))
    plan = merge.plan_batch({"k": folded}, ConflictStrategy.MERGE, {"k": marked}, policy)
    assert plan.contact_updates == []  # an earlier batch of the import had the first name


def test_fill_empty_and_keep_existing_against_stored_and_own_contacts() -> None:
    policy = parse_policy({"name": "keep_existing", "street_address": "fill_empty"})
    row = ContactRow(2, "k", "New", "Rua 1")
    folded = merge.fold_rows([row], ConflictStrategy.MERGE, policy)
    plan = merge.plan_batch(folded, ConflictStrategy.MERGE, {"k": _stored()}, policy)
    assert plan.contact_updates == [(9, None, "Rua 1")]
    assert plan.marks == [(9, "street_address")]
    filled = _stored(street_address="Rua 0")
    plan = merge.plan_batch(folded, ConflictStrategy.MERGE, {"k": filled}, policy)
    assert (plan.contact_updates, plan.marks) == ([], [])
    own = _stored(street_address="Rua 0", own=True)  # created by an earlier batch of the import
    plan = merge.plan_batch(folded, ConflictStrategy.MERGE, {"k": own}, policy)
    assert (plan.contact_updates, plan.marks) == ([(9, "New", "Rua 1")], [])


def test_replace_deletes_then_later_batches_add_and_revive() -> None:
    policy = parse_policy({"channels": "replace"})
    stored = _stored(details=frozenset({(Channel.EMAIL, "a@x.com"), (Channel.PHONE, "+1")}))
    row = ContactRow(2, "k", None, None, (Detail(Channel.EMAIL, "b@x.com"),))
    folded = merge.fold_rows([row], ConflictStrategy.MERGE, policy)
    plan = merge.plan_batch(folded, ConflictStrategy.MERGE, {"k": stored}, policy)
    assert plan.detail_deletions == [(9, Channel.EMAIL, "a@x.com")]  # the phone is untouched
    assert plan.detail_inserts == [(9, Detail(Channel.EMAIL, "b@x.com"))]
    assert plan.marks == [(9, "channel:3")]
    later = _stored(
        details=frozenset({(Channel.EMAIL, "b@x.com"), (Channel.PHONE, "+1")}),
        marks=frozenset({"channel:3"}),
        revivable=frozenset({(Channel.EMAIL, "a@x.com")}),
    )
    row = ContactRow(3, "k", None, None, (Detail(Channel.EMAIL, "a@x.com"),))
    folded = merge.fold_rows([row], ConflictStrategy.MERGE, policy)
    plan = merge.plan_batch(folded, ConflictStrategy.MERGE, {"k": later}, policy)
    assert (plan.detail_deletions, plan.detail_inserts) == ([], [])
    assert plan.detail_revivals == [(9, Channel.EMAIL, "a@x.com")]


def test_discard_ignores_the_policy() -> None:
    policy = parse_policy({"name": "first_non_empty", "channels": "replace"})
    rows = [ContactRow(2, "k", None, None), ContactRow(3, "k", "Ana", None)]
    folded = merge.fold_rows(rows, ConflictStrategy.DISCARD, policy)
    assert folded["k"] is rows[0]
    plan = merge.plan_batch(folded, ConflictStrategy.DISCARD, {"k": _stored()}, policy)
    assert plan == merge.BatchPlan()


@pytest.mark.parametrize("rule", ["keep_existing", "fill_empty", "first_non_empty"])
def test_an_empty_value_never_erases_nor_marks(rule: str) -> None:
    policy = parse_policy({"name": rule})
    folded = merge.fold_rows([ContactRow(2, "k", None, None)], ConflictStrategy.MERGE, policy)
    plan = merge.plan_batch(folded, ConflictStrategy.MERGE, {"k": _stored()}, policy)
    assert plan == merge.BatchPlan()
