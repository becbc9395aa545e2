"""The duplicate-resolution report (pure): each competition's winner is the value the batch's
plan leaves on the contact, every non-empty value that lost is named, and the competitions of a
key over several batches combine into one row whose winner is the import's final value."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core import merge
from importer.core.duplicates import (
    SOURCE_RULE,
    Competition,
    batch_competitions,
    batch_sources,
    combine,
    combined,
    losing_cell,
    report_document,
    winner_cell,
)
from importer.core.models import Channel, ConflictStrategy, ContactRow, Detail
from importer.core.policy import DEFAULT_POLICY, MergePolicy, parse_policy
from importer.core.reference import ContactState, ReferenceModel
from tests.strategies import expected_rows, merge_documents, rows
from tests.unit.test_merge import PlannedStore


def _value(state: ContactState, field: str) -> str | None:
    if field == "name":
        return state.name
    if field == "street_address":
        return state.street_address
    assert field.startswith("custom:")
    return state.custom_fields.get(field.removeprefix("custom:").lower())


def _row_value(row: ContactRow, field: str) -> str | None:
    if field in ("name", "street_address"):
        value: str | None = getattr(row, field)
        return value
    found = None
    for name, value in row.custom_fields:
        if f"custom:{name.lower()}" == field.lower():
            found = value
    return found


def _fields(row: ContactRow) -> Iterator[str]:
    if row.name is not None:
        yield "name"
    if row.street_address is not None:
        yield "street_address"
    yield from {f"custom:{name.lower()}" for name, _ in row.custom_fields}


def _cut(body: list[ContactRow], cuts: list[int]) -> Iterator[list[ContactRow]]:
    start = 0
    for size in itertools.cycle(cuts):
        if start >= len(body):
            return
        yield body[start : start + size]
        start += size


def check_report(pre, body, cuts, strategy, document) -> None:
    policy = parse_policy(document) if strategy is ConflictStrategy.MERGE else DEFAULT_POLICY
    pre_rows, _ = expected_rows(pre)
    body_rows, _ = expected_rows(body)
    store, model = PlannedStore(), ReferenceModel()
    store.apply(pre_rows, ConflictStrategy.MERGE)
    model.apply(1, pre_rows, ConflictStrategy.MERGE)
    store.job += 1
    every: list[tuple[int, Competition]] = []
    for batch_no, batch in enumerate(_cut(body_rows, cuts)):
        folded = merge.fold_rows(batch, strategy, policy)
        stored = {k: store._stored(k) for k in folded if k in store.contacts}
        found = [
            Competition(*c) for c in batch_competitions(batch, folded, stored, strategy, policy)
        ]
        store.apply(batch, strategy, policy)
        state = store.state()
        lines = {row.line: row for row in batch}
        named = {(c.key, c.field.lower()): c for c in found if not c.field.startswith("channel:")}
        assert len(named) == len([c for c in found if not c.field.startswith("channel:")])
        for c in found:
            if c.field.startswith("channel:"):
                channel = Channel[c.field.removeprefix("channel:").upper()]
                assert c.winner_value is not None
                kept = {v for ch, v in state[c.key].details if ch is channel}
                assert set(c.winner_value.split(" ")) <= kept
                continue
            assert c.winner_value == _value(state[c.key], c.field), c  # what the plan wrote
            if c.winner_line is not None:
                assert _row_value(lines[c.winner_line], c.field) == c.winner_value
            for line in c.losing_lines:
                assert _row_value(lines[line], c.field) not in (None, c.winner_value)
            assert c.losing_lines or c.loser_stored
        for row in batch:  # every value that lost is reported
            for field in _fields(row):
                if _row_value(row, field) != _value(state[row.cpf_cnpj], field):
                    assert row.line in named[(row.cpf_cnpj, field)].losing_lines
        every.extend((batch_no, c) for c in found)
    model.apply(1, body_rows, strategy, policy)
    final = model.client_state(1)
    assert store.state() == final
    ordered = sorted(every, key=lambda bc: (bc[1].key, bc[1].field.lower(), bc[0]))
    body_lines = {row.line: row for row in body_rows}
    for row in combined(c for _, c in ordered):
        if row.field.startswith("channel:"):
            continue
        assert row.winner_value == _value(final[row.key], row.field)  # the import's end
        if row.winner_line is not None:
            assert _row_value(body_lines[row.winner_line], row.field) == row.winner_value
            assert row.winner_line not in row.losing_lines


@given(
    pre=st.lists(rows(), max_size=8),
    body=st.lists(rows(), max_size=30),
    cuts=st.lists(st.integers(1, 7), min_size=1, max_size=30),
    strategy=st.sampled_from(ConflictStrategy),
)
def test_winners_are_the_reference_models_values(pre, body, cuts, strategy) -> None:
    check_report(pre, body, cuts, strategy, {})


@settings(max_examples=400)
@given(
    pre=st.lists(rows(key_count=3), max_size=4),
    body=st.lists(rows(key_count=3), min_size=2, max_size=16),
    cuts=st.lists(st.integers(1, 4), min_size=1, max_size=8),
    strategy=st.sampled_from(ConflictStrategy),
    document=merge_documents(),
)
def test_winners_hold_for_any_policy_and_cut(pre, body, cuts, strategy, document) -> None:
    check_report(pre, body, cuts, strategy, document)


def _competitions(
    rows: list[ContactRow],
    stored: dict[str, merge.StoredContact] | None = None,
    strategy: ConflictStrategy = ConflictStrategy.MERGE,
    policy: MergePolicy = DEFAULT_POLICY,
) -> list[Competition]:
    folded = merge.fold_rows(rows, strategy, policy)
    return [
        Competition(*c) for c in batch_competitions(rows, folded, stored or {}, strategy, policy)
    ]


def test_a_key_seen_once_and_new_costs_nothing() -> None:
    rows = [ContactRow(2, "a", "Ana", None), ContactRow(3, "b", "Bia", None)]
    assert _competitions(rows) == []


def test_several_rows_of_a_key_the_last_value_wins() -> None:
    rows = [
        ContactRow(2, "k", "Ana", "Rua 1", (), (("Plano", "p1"),)),
        ContactRow(3, "k", "Ana", None, (), (("plano", "p2"),)),
        ContactRow(4, "k", "Bia", "Rua 1"),
    ]
    assert _competitions(rows) == [
        Competition("k", "name", "Bia", 4, (2, 3), False, "last_non_empty"),
        Competition("k", "custom:Plano", "p2", 3, (2,), False, "last_non_empty"),
    ]


def test_the_stored_contact_competes_and_keep_existing_keeps_it() -> None:
    stored = {"k": merge.StoredContact(9, "Old", "Rua 0", custom_fields={"plano": "p0"})}
    rows = [ContactRow(2, "k", "New", "Rua 0", (), (("plano", "p1"),))]
    assert _competitions(rows, stored) == [
        Competition("k", "name", "New", 2, (), True, "last_non_empty"),
        Competition("k", "custom:plano", "p1", 2, (), True, "last_non_empty"),
    ]
    policy = parse_policy({"name": "keep_existing", "custom:*": "fill_empty"})
    assert _competitions(rows, stored, policy=policy) == [
        Competition("k", "name", "Old", None, (2,), False, "keep_existing"),
        Competition("k", "custom:plano", "p0", None, (2,), False, "fill_empty"),
    ]


def test_discard_the_first_row_or_the_stored_contact_wins_every_field() -> None:
    rows = [ContactRow(2, "k", None, "Rua 1"), ContactRow(3, "k", "Bia", "Rua 2")]
    discard = ConflictStrategy.DISCARD
    assert _competitions(rows, strategy=discard) == [
        Competition("k", "name", None, 2, (3,), False, "discard"),
        Competition("k", "street_address", "Rua 1", 2, (3,), False, "discard"),
    ]
    stored = {"k": merge.StoredContact(9, "Old", "Rua 1")}
    assert _competitions(rows, stored, discard) == [
        Competition("k", "name", "Old", None, (3,), False, "discard"),
        Competition("k", "street_address", "Rua 1", None, (3,), False, "discard"),
    ]


def test_replace_reports_the_channels_whose_stored_values_it_drops() -> None:
    policy = parse_policy({"channels": "replace"})
    details = frozenset({(int(Channel.EMAIL), "a@x.com"), (int(Channel.PHONE), "+1")})
    stored = {"k": merge.StoredContact(9, None, None, details)}
    rows = [
        ContactRow(2, "k", None, None, (Detail(Channel.EMAIL, "b@x.com"),)),
        ContactRow(3, "k", None, None, (Detail(Channel.PHONE, "+1"),)),
    ]
    assert _competitions(rows, stored, policy=policy) == [
        Competition("k", "channel:email", "b@x.com", 2, (), True, "replace"),
    ]
    marked = {"k": merge.StoredContact(9, None, None, details, marks=frozenset({"channel:3"}))}
    assert _competitions(rows, marked, policy=policy) == []  # a later batch only adds
    assert _competitions(rows, stored) == []  # union: nothing competes


def test_combine_names_an_earlier_batchs_line_for_a_later_stored() -> None:
    first = Competition("k", "name", "Bia", 3, (2,), True, "last_non_empty")
    kept = Competition("k", "name", "Bia", None, (7,), False, "fill_empty")
    later = Competition("k", "name", "Caio", 9, (8,), True, "last_non_empty")
    assert combine([first, kept]) == Competition("k", "name", "Bia", 3, (2, 7), True, "fill_empty")
    assert combine([first, kept, later]) == Competition(
        "k", "name", "Caio", 9, (2, 3, 7, 8), True, "last_non_empty"
    )
    other = Competition("k", "street_address", "R", 4, (5,), False, "last_non_empty")
    assert list(combined([first, later, other])) == [
        Competition("k", "name", "Caio", 9, (2, 3, 8), True, "last_non_empty"),
        other,
    ]


def _sources(
    rows: list[ContactRow],
    stored: dict[str, merge.StoredContact] | None = None,
    strategy: ConflictStrategy = ConflictStrategy.MERGE,
    policy: MergePolicy = DEFAULT_POLICY,
) -> list[tuple[str, int, tuple[str, ...]]]:
    folded = merge.fold_rows(rows, strategy, policy)
    found = batch_competitions(rows, folded, stored or {}, strategy, policy)
    return sorted(batch_sources(rows, folded, stored or {}, strategy, policy, found))


def test_sources_are_the_lines_that_wrote_without_a_competition() -> None:
    """Issue 25 §4: a new key's row; the fields a row changed on a stored contact (an equal
    value is no change, a competing one names its line already); DISCARD writes new keys only;
    a key's repeated rows give each field its rule's line."""
    new = ContactRow(2, "n", "Ana", None, (), (("Plano", "p1"),))
    assert _sources([new]) == [("n", 2, ())]  # a new key's row: every field it has
    stored = {"s": merge.StoredContact(9, None, "Rua", frozenset(), {"plano": "p1"})}
    fills = ContactRow(3, "s", "Bia", "Rua", (), (("plano", "p1"),))
    assert _sources([fills], stored) == [("s", 3, ("name",))]
    assert _sources([new, fills], stored, ConflictStrategy.DISCARD) == [("n", 2, ())]
    again = ContactRow(4, "n", None, None, (), (("Plano", "p2"),))
    assert _sources([new, again]) == [("n", 2, ("name",))]  # plano competes: 4 won over 2
    first = parse_policy({"name": "first_non_empty"})
    later = ContactRow(5, "n", "Ana", None, ())
    assert _sources([new, later], policy=first) == [("n", 2, ("name", "custom:Plano"))]
    assert _sources([new, later]) == [("n", 2, ("custom:Plano",)), ("n", 5, ("name",))]


def test_combine_names_an_earlier_batchs_source_not_stored() -> None:
    source = Competition("k", "name", None, 2, (), False, SOURCE_RULE)
    lost = Competition("k", "name", "Bia", 5, (), True, "last_non_empty")
    kept = Competition("k", "name", "Ana", None, (5,), False, "keep_existing")
    assert combine([source, lost]) == Competition(
        "k", "name", "Bia", 5, (2,), False, "last_non_empty"
    )
    assert combine([source, kept]) == Competition(
        "k", "name", "Ana", 2, (5,), False, "keep_existing"
    )
    other = Competition("k", "street_address", None, 3, (), False, SOURCE_RULE)
    assert list(combined([source, lost, other])) == [  # a source alone is no report row
        Competition("k", "name", "Bia", 5, (2,), False, "last_non_empty")
    ]


def test_report_cells() -> None:
    row = Competition("k", "name", "=1+1", None, (2, 3), True, "keep_existing")
    assert (winner_cell(row), losing_cell(row)) == ("stored", "2 3 stored")
    assert report_document(row)["winner_line"] is None
