"""The batch merge decision (pure) against the reference model: applying the planned writes
batch after batch gives the reference model's state, for any cut of the rows into batches."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from importer.core import merge
from importer.core.models import Channel, ConflictStrategy, ContactRow
from importer.core.reference import ContactState, ReferenceModel
from tests.strategies import expected_rows, rows


class PlannedStore:
    """Applies BatchPlans to dicts, the way the PostgreSQL adapter applies them to tables."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.contacts: dict[str, merge.StoredContact] = {}
        self.details: dict[int, set[tuple[Channel, str]]] = {}
        self.custom: dict[tuple[int, str], str] = {}

    def apply(self, batch: list[ContactRow], strategy: ConflictStrategy) -> int:
        folded = merge.fold_rows(batch, strategy)
        stored = {k: self._stored(k) for k in folded if k in self.contacts}
        plan = merge.plan_batch(folded, strategy, stored)
        for entry in plan.new_contacts:
            c = merge.merged(entry)
            contact = merge.StoredContact(next(self.ids), c.name, c.street_address)
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
            self.details[cid].add((d.channel, d.value))
        for cid, name, value in plan.custom_inserts:
            assert (cid, name.lower()) not in self.custom
            self.custom[(cid, name.lower())] = value
        for cid, name, value in plan.custom_updates:  # only values that change
            assert self.custom[(cid, name.lower())] != value
            self.custom[(cid, name.lower())] = value
        return plan.new_keys

    def _stored(self, key: str) -> merge.StoredContact:
        c = self.contacts[key]
        custom = {f: v for (cid, f), v in self.custom.items() if cid == c.id}
        return merge.StoredContact(
            c.id, c.name, c.street_address, frozenset(self.details[c.id]), custom
        )

    def state(self) -> dict[str, ContactState]:
        out = {}
        for key, c in self.contacts.items():
            custom = {f: v for (cid, f), v in self.custom.items() if cid == c.id}
            out[key] = ContactState(c.name, c.street_address, set(self.details[c.id]), custom)
        return out


@given(
    pre=st.lists(rows(), max_size=8),
    body=st.lists(rows(), max_size=30),
    cuts=st.lists(st.integers(1, 7), min_size=1, max_size=30),
    strategy=st.sampled_from(ConflictStrategy),
)
def test_planned_writes_equal_the_reference_model(pre, body, cuts, strategy) -> None:
    pre_rows, _ = expected_rows(pre)
    body_rows, _ = expected_rows(body)
    model, store = ReferenceModel(), PlannedStore()
    model.apply(1, pre_rows, ConflictStrategy.MERGE)
    store.apply(pre_rows, ConflictStrategy.MERGE)
    expected = model.apply(1, body_rows, strategy)
    new_keys, start = 0, 0
    for size in itertools.cycle(cuts):
        if start >= len(body_rows):
            break
        new_keys += store.apply(body_rows[start : start + size], strategy)
        start += size
    assert new_keys == expected.inserted
    assert store.state() == model.client_state(1)


def test_discard_keeps_the_first_row_only() -> None:
    batch = [ContactRow(2, "k", "first", None), ContactRow(3, "k", "second", "addr")]
    folded = merge.fold_rows(batch, ConflictStrategy.DISCARD)
    assert folded["k"] is batch[0]
    folded = merge.fold_rows(batch, ConflictStrategy.MERGE)
    assert (folded["k"].name, folded["k"].street_address) == ("second", "addr")
