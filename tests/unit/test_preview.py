"""The preview (pure): fed key by key, its counters are the reference model's for the same
import, and its tallies and sample describe the state the import ends with."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core import merge
from importer.core.models import Channel, ConflictStrategy, ContactRow, Counters, Detail
from importer.core.policy import DEFAULT_POLICY, MergePolicy, parse_policy
from importer.core.preview import SAMPLE, PreviewBuilder, tallied
from importer.core.reference import ContactState, ReferenceModel
from tests.strategies import expected_rows, merge_documents, rows


def stored_of(key: str, state: ContactState, ids: itertools.count[int]) -> merge.StoredContact:
    return merge.StoredContact(
        next(ids),
        state.name,
        state.street_address,
        frozenset(state.details),
        dict(state.custom_fields),
    )


def preview(
    body: list[ContactRow],
    model: ReferenceModel,
    strategy: ConflictStrategy,
    policy: MergePolicy = DEFAULT_POLICY,
) -> PreviewBuilder:
    by_key: dict[str, list[ContactRow]] = defaultdict(list)
    for row in body:
        by_key[row.cpf_cnpj].append(row)
    builder, ids = PreviewBuilder(strategy, policy), itertools.count(1)
    state = model.client_state(1)
    for key in sorted(by_key):
        stored = stored_of(key, state[key], ids) if key in state else None
        builder.add(by_key[key], stored)
    return builder


def values(state: ContactState) -> dict[str, object]:
    out: dict[str, object] = {}
    if state.name is not None:
        out["name"] = state.name
    if state.street_address is not None:
        out["street_address"] = state.street_address
    out |= {f"custom:{k}": v for k, v in state.custom_fields.items()}
    for channel in Channel:
        found = sorted(v for c, v in state.details if c == channel)
        if found:
            out[f"channel:{channel.name.lower()}"] = found
    return out


@settings(max_examples=300)
@given(
    pre=st.lists(rows(), max_size=8),
    body=st.lists(rows(), max_size=30),
    strategy=st.sampled_from(ConflictStrategy),
    document=st.one_of(st.just({}), merge_documents()),
)
def test_the_preview_is_what_the_reference_model_does(pre, body, strategy, document) -> None:
    """Whatever the merge policy: the preview's sample and tallies are the import's result."""
    policy = parse_policy(document)
    pre_rows, _ = expected_rows(pre)
    body_rows, _ = expected_rows(body)
    model = ReferenceModel()
    model.apply(1, pre_rows, ConflictStrategy.MERGE)
    before = {k: values(s) for k, s in model.client_state(1).items()}
    builder = preview(body_rows, model, strategy, policy)
    expected = model.apply(1, body_rows, strategy, policy)
    assert builder.counters == expected
    after = {k: values(s) for k, s in model.client_state(1).items()}
    named = {r.cpf_cnpj for r in body_rows}
    tallies: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for key in named:
        was, will = before.get(key, {}), after[key]
        for name in was.keys() | will.keys():
            t = tallies[name]
            if will.get(name) == was.get(name):
                t[2] += was.get(name) is not None
            elif name not in was:
                t[0] += 1
            else:
                t[1] += 1
    document = builder.document([])
    assert (
        document["fields"]
        == {
            n: {"first": f, "changed": c, "kept": k}
            for n, (f, c, k) in tallies.items()
            if f or c or k
        }
        or not named
    )
    for entry in builder.sample:
        key = entry["key"]
        for name, change in entry["fields"].items():  # type: ignore[attr-defined]
            assert change == {"before": before.get(key, {}).get(name), "after": after[key][name]}


def test_the_document_counts_invalid_rows_and_bounds_the_sample() -> None:
    builder = PreviewBuilder(ConflictStrategy.MERGE)
    for i in range(SAMPLE + 5):
        builder.add([ContactRow(i + 2, f"k{i:03}", "Ana", None)], None)
    builder.add_invalid(3)
    document = builder.document(["Plano", "cidade"])
    assert document["counters"] == {
        "rows_read": SAMPLE + 8,
        "inserted": SAMPLE + 5,
        "updated": 0,
        "invalid": 3,
        "error": 0,
        "ignored": 0,
    }
    assert len(builder.sample) == SAMPLE
    assert document["new_custom_fields"] == ["cidade", "Plano"]
    assert document["fields"] == {"name": {"first": SAMPLE + 5, "changed": 0, "kept": 0}}


def test_a_stored_contact_under_discard_keeps_everything() -> None:
    stored = merge.StoredContact(7, "Old", None, frozenset({(Channel.EMAIL, "a@x.com")}))
    builder = PreviewBuilder(ConflictStrategy.DISCARD)
    row = ContactRow(2, "k", "New", "Rua", (Detail(Channel.EMAIL, "b@x.com"),))
    builder.add([row, row], stored)
    assert builder.counters == Counters(rows_read=2, ignored=2)
    assert builder.document([])["fields"] == {
        "name": {"first": 0, "changed": 0, "kept": 1},
        "channel:email": {"first": 0, "changed": 0, "kept": 1},
    }
    assert builder.sample == []


def test_keys_must_come_in_order() -> None:
    builder = PreviewBuilder(ConflictStrategy.MERGE)
    builder.add([ContactRow(2, "b", None, None)], None)
    with pytest.raises(ValueError, match="out of order"):
        builder.add([ContactRow(3, "a", None, None)], None)


@settings(max_examples=200)
@given(
    pre=st.lists(rows(), max_size=8),
    body=st.lists(rows(), max_size=30),
    strategy=st.sampled_from(ConflictStrategy),
)
def test_a_tally_summed_elsewhere_makes_the_builders_document(pre, body, strategy) -> None:
    """tallied (the database's set-based sums) from the builder's own tallies, key and row
    counts and sample: the same counters and document as the builder fed key by key."""
    pre_rows, _ = expected_rows(pre)
    body_rows, _ = expected_rows(body)
    model = ReferenceModel()
    model.apply(1, pre_rows, ConflictStrategy.MERGE)
    builder = preview(body_rows, model, strategy)
    stored = model.client_state(1)
    new_keys = len({r.cpf_cnpj for r in body_rows} - set(stored))
    summed = tallied(strategy, len(body_rows), new_keys, builder.fields, builder.sample)
    builder.add_invalid(3)
    summed.add_invalid(3)
    assert summed.counters == builder.counters
    assert summed.document(["Plano"]) == builder.document(["Plano"])
