"""Client values the database or orjson cannot hold are refused by validation, not by them.

Regression (found by the schemathesis run, tests/api/test_schemathesis.py): U+0000 in a layout's
document reached PostgreSQL, whose text and jsonb refuse it, and the API answered 503
``database_unavailable`` — a retry that can never succeed. A document nested past orjson's 254
levels passed validation and failed when written: a 500.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from importer.core.errors import InvalidRequestError
from importer.core.history import parse_history_query
from importer.core.options import (
    MAX_JSON_DEPTH,
    NUL_MESSAGE,
    Problems,
    json_value_problem,
    parse_intent,
    parse_layout_body,
    parse_options,
    parse_tags,
    parse_text,
)

LGPD = {
    "conflict_strategy": "merge",
    "has_sensitive_data": False,
    "has_underage_data": False,
    "data_processing_purpose": "marketing",
    "lgpd_processing_hypothesis": 1,
}


def nested(depth: int) -> dict[str, object]:
    """An object whose containers nest ``depth`` levels deep (the object itself is one)."""
    value: object = []
    for _ in range(depth - 2):
        value = [value]
    return {"a": value}


def test_nul_anywhere_in_a_json_value_is_found() -> None:
    assert json_value_problem({"a": ["b", {"c": "ok"}]}) is None
    assert json_value_problem({"a": ["b", {"c": "d\x00"}]}) == NUL_MESSAGE
    assert json_value_problem({"a": {"k\x00": 1}}) == NUL_MESSAGE
    assert json_value_problem("\x00") == NUL_MESSAGE


def test_depth_is_bounded_without_recursion() -> None:
    assert json_value_problem(nested(MAX_JSON_DEPTH)) is None
    assert json_value_problem(nested(MAX_JSON_DEPTH + 1)) is not None
    assert json_value_problem(nested(5000)) is not None  # past Python's recursion limit too


_TEXT = st.text(st.characters(exclude_characters="\x00"))


@given(
    st.recursive(
        _TEXT, lambda inner: st.lists(inner) | st.dictionaries(_TEXT, inner), max_leaves=20
    )
)
def test_a_shallow_value_without_nul_is_accepted(value: object) -> None:
    assert json_value_problem(value) is None  # 20 leaves nest at most 20 levels


def test_text_and_tags_with_nul_are_refused() -> None:
    with pytest.raises(ValueError, match="NUL"):
        parse_text("a\x00b", 100)
    with pytest.raises(ValueError, match="NUL"):
        parse_tags(["ok", "a\x00"])
    with pytest.raises(ValueError, match="NUL"):
        parse_tags("ok,a\x00")


def test_options_report_nul_per_field() -> None:
    problems = Problems()
    raw = {
        **LGPD,
        "data_processing_purpose": "x\x00",
        "tags": ["t\x00"],
        "layout": {"columns": {"nome": "name"}, "note": "\x00"},
    }
    assert parse_options(raw, problems) is None
    assert sorted(field for field, _ in problems.items) == [
        "data_processing_purpose",
        "layout",
        "tags",
    ]
    assert all(message == NUL_MESSAGE for _, message in problems.items)


def test_layout_resource_with_nul_or_too_deep_is_refused() -> None:
    for raw in (
        {"name": "n\x00", "document": {}},
        {"name": "n", "document": {"x\x00": 1}},
        {"name": "n", "document": nested(300)},
    ):
        with pytest.raises(InvalidRequestError):
            parse_layout_body(raw)


def test_intent_params_with_nul_or_too_deep_are_refused() -> None:
    with pytest.raises(ValueError, match="params must not contain NUL"):
        parse_intent({"kind": "hsm", "params": {"a": "\x00"}})
    with pytest.raises(ValueError, match="params must not nest"):
        parse_intent({"kind": "hsm", "params": nested(300)})
    assert parse_intent({"kind": "sms", "params": nested(MAX_JSON_DEPTH)}).kind == "sms"


def test_history_user_with_nul_is_refused() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        parse_history_query("a\x00", [], None, None)
    assert refused.value.problems == [("user_id", NUL_MESSAGE)]
