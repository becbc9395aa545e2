"""A batch plan's payloads: the compiled ``encode_plan`` (straight from the folds) against the
reference ``copybin.encode_plan`` (the rows as tuples, then ``encode``) — same bytes, same
errors — on random batches folded and planned by ``core.merge`` under random merge policies."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from importer.adapters.postgres import copybin
from importer.core import merge
from importer.core.models import Channel, ConflictStrategy, ContactRow, Detail
from importer.core.policy import MergePolicy, Rule, parse_policy

_copybin = pytest.importorskip("importer.adapters.postgres._copybin")

JOB = uuid.UUID("6f1c1f4e-3a52-4c1b-9d64-0d6b1f0c2a11")
NAMES = ["Plano", "plano", "Cidade", "Segmento", "ÉTAPA", "étapa"]  # two pairs alike but for case
GOOD_TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["Ana", "José", "名前", "😀", ""]))
BAD_TEXT = st.sampled_from(["a\x00b", "\ud800"])  # NUL (refused), a lone surrogate (not UTF-8)
TEXT = GOOD_TEXT
OPTIONAL = st.one_of(st.none(), TEXT)
DETAILS = st.builds(
    Detail,
    st.sampled_from(list(Channel)),
    st.sampled_from(["a@x.com", "5511999990000", "j1", "é@x.com"]),  # few values: repeats
    st.sampled_from([None, 55, 1, -1]),
    st.sampled_from([None, "BR", "US"]),
)
CUSTOMS = st.tuples(st.sampled_from(NAMES), TEXT)
RULES = st.sampled_from([r.value for r in Rule])
POLICIES = st.builds(
    lambda scalars, customs, default, channels: parse_policy(
        {**scalars, **customs, "custom:*": default, "channels": channels}
    ),
    st.dictionaries(st.sampled_from(["name", "street_address"]), RULES),
    st.dictionaries(st.sampled_from([f"custom:{n}" for n in ("Plano", "Cidade", "étapa")]), RULES),
    RULES,
    st.sampled_from(["union", "replace"]),
)


@st.composite
def batches(draw: st.DrawFn) -> list[ContactRow]:
    keys = draw(st.lists(st.sampled_from(["k1", "k2", "k3", "k4", "k5", "ç6"]), max_size=12))
    return [
        ContactRow(
            line,
            key,
            draw(OPTIONAL),
            draw(OPTIONAL),
            tuple(draw(st.lists(DETAILS, max_size=4))),
            tuple(draw(st.lists(CUSTOMS, max_size=4))),
        )
        for line, key in enumerate(keys, start=2)
    ]


def poisoned(rows: list[ContactRow], data: st.DataObject) -> list[ContactRow]:
    """One value of one row made unencodable (NUL, a surrogate, an int past int4), or none."""
    if not rows or data.draw(st.integers(0, 3)):
        return rows
    i = data.draw(st.integers(0, len(rows) - 1))
    row, bad = rows[i], data.draw(BAD_TEXT)
    where = data.draw(st.sampled_from(["name", "detail", "country_code", "custom"]))
    if where == "name":
        row = dataclasses.replace(row, name=bad)
    elif where == "custom":
        row = dataclasses.replace(row, custom_fields=(*row.custom_fields, ("Cidade", bad)))
    else:
        detail = (
            Detail(Channel.PHONE, bad) if where == "detail" else Detail(Channel.EMAIL, "b@x", 2**31)
        )
        row = dataclasses.replace(row, details=(*row.details, detail))
    return [*rows[:i], row, *rows[i + 1 :]]


@st.composite
def stored_contacts(draw: st.DrawFn, keys: list[str]) -> dict[str, merge.StoredContact]:
    chosen = draw(st.lists(st.sampled_from(keys), unique=True)) if keys else []
    return {
        key: merge.StoredContact(
            100 + i,
            draw(OPTIONAL),
            draw(OPTIONAL),
            frozenset(draw(st.lists(st.tuples(st.sampled_from(list(Channel)), TEXT), max_size=2))),
            {n.lower(): v for n, v in draw(st.lists(CUSTOMS, max_size=2))},
            draw(st.booleans()),
            frozenset(draw(st.lists(st.sampled_from(["name", "custom:plano", "channel:3"])))),
        )
        for i, key in enumerate(chosen)
    }


def outcome(encode: copybin.EncodePlan, *args: object) -> object:
    try:
        return tuple(bytes(p) for p in encode(*args))  # type: ignore[arg-type]
    except Exception as exc:  # the errors are compared
        return (type(exc), str(exc))


@given(
    batch=batches(),
    data=st.data(),
    strategy=st.sampled_from(ConflictStrategy),
    client=st.sampled_from([1, 7] * 10 + [2**31]),  # 2**31: past int4
    missing=st.sampled_from([set()] * 10 + [{n.lower()} for n in NAMES]),
    id_shift=st.sampled_from([0] * 20 + [1, -1, 2**63]),  # a wrong count; an id past int8
    policy=st.one_of(st.just(MergePolicy()), POLICIES),
)
def test_compiled_plan_payloads_are_the_references(
    batch: list[ContactRow],
    data: st.DataObject,
    strategy: ConflictStrategy,
    client: int,
    missing: set[str],
    id_shift: int,
    policy: MergePolicy,
) -> None:
    folded = merge.fold_rows(poisoned(batch, data), strategy, policy)
    stored = data.draw(stored_contacts(sorted(folded)))
    plan = merge.plan_batch(folded, strategy, stored, policy)
    field_ids = {n.lower(): i for i, n in enumerate(NAMES, start=1) if n.lower() not in missing}
    count = len(plan.new_contacts)
    if id_shift in (1, -1):
        ids = list(range(1000, 1000 + max(0, count + id_shift)))
    else:
        ids = [1000 + i + (id_shift if i == 0 else 0) for i in range(count)]
    args = (plan, ids, client, JOB, field_ids)
    assert outcome(_copybin.encode_plan, *args) == outcome(copybin.encode_plan, *args)


def test_a_keys_single_row_stands_for_its_fold() -> None:
    row = ContactRow(2, "k", "Ana", None, (Detail(Channel.EMAIL, "a@x.com"),), (("Plano", "P"),))
    folded = merge.fold_rows([row], ConflictStrategy.MERGE)
    assert folded["k"] is row
    assert merge.merged(row) == merge.MergedContact(
        "k", "Ana", None, {(Channel.EMAIL, "a@x.com"): row.details[0]}, {"plano": ("Plano", "P")}
    )
    assert list(merge.channel_values(row)) == [(Channel.EMAIL, "a@x.com")]


def test_a_plan_of_new_contacts_decodes_to_its_rows() -> None:
    rows = [
        ContactRow(2, "k1", "Ana", "Rua A", (Detail(Channel.PHONE, "5511", 55, "BR"),), ()),
        ContactRow(3, "k2", None, None, (), (("Plano", "Ouro"), ("plano", "Prata"))),
        ContactRow(4, "k1", "Ana Maria", None, (Detail(Channel.EMAIL, "a@x.com"),), ()),
    ]
    plan = merge.plan_batch(
        merge.fold_rows(rows, ConflictStrategy.MERGE), ConflictStrategy.MERGE, {}
    )
    contacts, details, customs = _copybin.encode_plan(plan, [10, 11], 1, JOB, {"plano": 5})
    assert contacts[len(copybin.HEADER) :] != b""
    assert copybin.plan_rows(plan, [10, 11], 1, JOB, {"plano": 5}) == (
        [(10, 1, "k1", "Ana Maria", "Rua A", JOB), (11, 1, "k2", None, None, JOB)],
        [(10, 1, Channel.PHONE, "5511", 55, "BR"), (10, 1, Channel.EMAIL, "a@x.com", None, None)],
        [(11, 1, 5, "Prata")],  # one value per field, the last; at the first one's place
    )
    assert (bytes(contacts), bytes(details), bytes(customs)) == tuple(
        bytes(p) for p in copybin.encode_plan(plan, [10, 11], 1, JOB, {"plano": 5})
    )
