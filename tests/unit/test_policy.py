"""The layout's merge policy: parsing (every refusal names the entry at fault) and the decision
of a batch's value against a stored contact."""

from __future__ import annotations

import itertools

import pytest

from importer.core.errors import LayoutError
from importer.core.layout import LAYOUT_KEYS, parse_layout
from importer.core.policy import (
    DEFAULT_POLICY,
    ChannelRule,
    MergePolicy,
    Rule,
    decide,
    parse_policy,
    policy_of,
)


def test_the_issue_example_parses() -> None:
    layout = parse_layout(
        {
            "merge": {
                "name": "keep_existing",
                "street_address": "fill_empty",
                "custom:Plano": "first_non_empty",
                "custom:*": "fill_empty",
                "channels": "replace",
            }
        }
    )
    assert layout.merge == MergePolicy(
        Rule.KEEP_EXISTING,
        Rule.FILL_EMPTY,
        {"plano": Rule.FIRST_NON_EMPTY},
        Rule.FILL_EMPTY,
        ChannelRule.REPLACE,
    )
    assert layout.merge.custom_rule("PLANO") is Rule.FILL_EMPTY  # the caller lowers the name
    assert layout.merge.custom_rule("plano") is Rule.FIRST_NON_EMPTY
    assert layout.merge.custom_rule("cidade") is Rule.FILL_EMPTY
    assert not layout.merge.is_default
    assert layout.merge.takes_first
    assert "merge" in LAYOUT_KEYS


def test_no_merge_or_an_explicit_default_is_the_default() -> None:
    assert parse_layout({}).merge is DEFAULT_POLICY
    explicit = parse_policy(
        {"Name": "LAST_NON_EMPTY", "custom:x": "last_non_empty", "channels": " Union "}
    )
    assert explicit.is_default
    assert not explicit.takes_first
    assert policy_of(None) is DEFAULT_POLICY
    assert policy_of({"merge": {"name": "fill_empty"}}).name is Rule.FILL_EMPTY


@pytest.mark.parametrize(
    ("merge", "field", "message"),
    [
        ([], "layout.merge", "must be an object"),
        ({"name": 1}, "layout.merge.name", '"field": "rule"'),
        ({"nmae": "fill_empty"}, "layout.merge.nmae", "did you mean 'name'"),
        ({"phone": "union"}, "layout.merge.phone", "unknown layout.merge field"),
        ({"custom:": "fill_empty"}, "layout.merge.custom:", "unknown layout.merge field"),
        ({"name": "fil_empty"}, "layout.merge.name", "did you mean 'fill_empty'"),
        ({"name": "replace"}, "layout.merge.name", "not a rule for name"),
        ({"custom:Plano": "union"}, "layout.merge.custom:Plano", "not a rule for custom:Plano"),
        ({"channels": "fill_empty"}, "layout.merge.channels", "not a rule for channels"),
        ({"channels": "merge"}, "layout.merge.channels", "unknown merge rule"),
        (
            {"custom:Plano": "fill_empty", "custom:plano": "keep_existing"},
            "layout.merge.custom:plano",
            "two rules",
        ),
        ({"name": "fill_empty", "NAME": "fill_empty"}, "layout.merge.NAME", "two rules"),
    ],
)
def test_a_bad_merge_entry_is_refused_by_name(merge: object, field: str, message: str) -> None:
    with pytest.raises(LayoutError, match=message) as caught:
        parse_layout({"merge": merge})
    assert caught.value.field == field


def test_merge_misspelled_as_a_layout_key_is_refused() -> None:
    with pytest.raises(LayoutError, match="did you mean 'merge'"):
        parse_layout({"marge": {}})


# (rule, stored empty, own, marked) → (lands, marks): the table of core.policy's docstring.
DECISIONS = {
    Rule.LAST_NON_EMPTY: lambda empty, own, marked: (True, False),
    # ours: an earlier batch had the first value (if the field has one); else the pre-import one
    Rule.FIRST_NON_EMPTY: lambda empty, own, marked: (
        (empty, False) if own or marked else (True, True)
    ),
    Rule.FILL_EMPTY: lambda empty, own, marked: (True, False) if own or marked else (empty, empty),
    Rule.KEEP_EXISTING: lambda empty, own, marked: (own, False),
}


@pytest.mark.parametrize(
    ("rule", "empty", "own", "marked"),
    list(itertools.product(Rule, (False, True), (False, True), (False, True))),
)
def test_decide(rule: Rule, empty: bool, own: bool, marked: bool) -> None:
    assert decide(rule, empty, own, marked) == DECISIONS[rule](empty, own, marked)


def test_first_non_empty_overwrites_a_pre_import_value_once() -> None:
    assert decide(Rule.FIRST_NON_EMPTY, False, False, False) == (True, True)
    assert decide(Rule.FIRST_NON_EMPTY, False, False, True) == (False, False)
