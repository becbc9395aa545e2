"""The compiled normalizers and row builder (``importer.core._rows``) against the pure ones.

The pure modules are the specification: on random hostile keys, phones, e-mails and records,
the compiled functions must return equal values (the same Reason for a rejection) and the
compiled builder equal rows and issues, in the same order.
"""

from __future__ import annotations

import functools
import re
import string
import sys
import uuid
from collections.abc import Sequence

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from importer.core import digitdfa, normalize, rows
from importer.core.config import PipelineConfig
from importer.core.layout import Column, RowPlan, Target
from importer.core.models import (
    Attribute,
    Batch,
    Channel,
    ConflictStrategy,
    ContactRow,
    InputFormat,
    Job,
    JobStatus,
    Limits,
    Phone,
    RowIssue,
)
from importer.read.blocks import BlockParser
from tests.strategies import HEADER, GeneratedRow, csv_bytes
from tests.strategies import rows as generated_rows
from tests.unit.test_normalize import (
    br_shaped_phones,
    email_like,
    key_like,
    phone_like,
    valid_keys,
    with_formatting,
)

compiled = pytest.importorskip("importer.core._rows", reason="the extension is not built")

MANY = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------

UNICODE_KEY_CHARS = "\u0660\u0661\u0669\uff10\uff11\u00b2\u2070\u00a0\u2003\u3000\u0085ﬀß"
hostile_keys = st.one_of(
    key_like,
    valid_keys(),
    valid_keys().flatmap(with_formatting),
    valid_keys().map(str.lower),
    valid_keys().map(lambda k: k.lstrip("0")),
    valid_keys().map(lambda k: k + k[-1]),  # overlong
    st.text(string.digits + ".-/ \t\n\x0b\x0c\r\x1c\x1f" + UNICODE_KEY_CHARS, max_size=20),
    st.text(string.printable, max_size=20),
    st.text(max_size=20),
)


@MANY
@given(hostile_keys)
@example("529.982.247-25")
@example("12.ABC.345/01DE-35")
@example("00000000000")
@example("0")
@example("\x1c52998224725\x1f")
@example("\u0665\u0662\u0669\u0669\u0668\u0662\u0662\u0664\u0667\u0662\u0665")  # Arabic digits
@example("ﬀ0000000000000")
def test_keys(raw: str) -> None:
    result = compiled.normalize_cpf_cnpj(raw)
    expected = normalize.normalize_cpf_cnpj(raw)
    assert result == expected
    assert type(result) is type(expected)


# --------------------------------------------------------------------------------------
# Phones
# --------------------------------------------------------------------------------------

INTERNATIONAL = ["+1 650 253 0000", "+44 20 7946 0958", "+351 21 234 5678", "+54 9 11 1234 5678"]
hostile_phones = st.one_of(
    phone_like,
    br_shaped_phones().map(lambda p: "+55 " + p),
    st.sampled_from(INTERNATIONAL),
    st.text(string.digits + " ()-.+", min_size=60, max_size=70),  # around the 64 bound
    st.text(string.digits + "\uff10\uff11\u0661 ()-.+\uff0b\u00a0", max_size=20),
)


@MANY
@given(hostile_phones, st.booleans())
@example("(11) 91234-5678", False)
@example("+55 11 91234-5678", True)
@example("5511912345678", False)
@example("011 91234-5678", False)
@example("+", False)
@example("", False)
@example("1" * 64, False)
@example("1" * 65, False)
def test_phones(raw: str, international: bool) -> None:
    result = compiled.normalize_phone_parts(raw, international=international)
    assert result == normalize.normalize_phone_parts(raw, international=international)
    phone = compiled.normalize_phone(raw, international=international)
    assert phone == normalize.normalize_phone(raw, international=international)


# --------------------------------------------------------------------------------------
# E-mails
# --------------------------------------------------------------------------------------

hostile_emails = st.one_of(
    email_like(),
    st.emails().map(str),
    st.emails().map(str.upper),
    st.text(string.ascii_letters + string.digits + "@.-_+ \t\x1c", max_size=40),
    st.text(max_size=30),
)


@MANY
@given(hostile_emails)
@example("Foo.Bar@Example.COM")
@example("a" * 64 + "@example.com")
@example("a" * 65 + "@example.com")
@example("x@" + "a" * 59 + ".com")
@example("x@" + "a" * 60 + ".com")
@example("x@a--b.com")
@example("x@xn--bcher-kva.de")
@example("x@a.TEST")
@example("x@test")
@example(" \x1cx@y.com\x1f ")
@example("\u00a0x@y.com")
@example("x@y.c0m")
@example("x@-y.com")
@example("x@y-.com")
@example(".x@y.com")
@example("x.@y.com")
def test_emails(raw: str) -> None:
    assert compiled.normalize_email(raw) == normalize.normalize_email(raw)


# --------------------------------------------------------------------------------------
# The row builder
# --------------------------------------------------------------------------------------

TARGETS = [
    Target(attribute=Attribute.CPF_CNPJ),
    Target(attribute=Attribute.NAME),
    Target(attribute=Attribute.STREET_ADDRESS),
    Target(channel=Channel.PHONE),
    Target(channel=Channel.WHATSAPP),
    Target(channel=Channel.EMAIL),
    Target(channel=Channel.JOURNEY),
    Target(custom="Plano"),
    Target(custom="Origem"),
]


@st.composite
def plans(draw: st.DrawFn) -> RowPlan:
    """A plan of up to 8 columns at distinct positions, maybe with holes and no key."""
    count = draw(st.integers(0, 8))
    positions = draw(st.lists(st.integers(0, 10), min_size=count, max_size=count, unique=True))
    targets = draw(st.lists(st.sampled_from(TARGETS), min_size=count, max_size=count))
    if draw(st.booleans()) and not any(t.attribute is Attribute.CPF_CNPJ for t in targets):
        positions.append(max(positions, default=-1) + 1)
        targets.append(TARGETS[0])
    columns = tuple(
        Column(index, f"col{index}", target)
        for index, target in sorted(zip(positions, targets, strict=True))
    )
    has_key = any(c.target.attribute is Attribute.CPF_CNPJ for c in columns)
    # A channel key (core.keys) where one column of the channel and no CPF column are drawn.
    keyable = [c.target.channel for c in columns if c.target.channel in _KEY_CHANNELS]
    once = [k for k in keyable if keyable.count(k) == 1]
    key_channel = (
        draw(st.sampled_from(once)) if once and not has_key and draw(st.booleans()) else None
    )
    width = max((c.index + 1 for c in columns), default=0)
    keyed = has_key or key_channel is not None
    field_count = width + draw(st.integers(0, 2)) if keyed and draw(st.booleans()) else None
    return RowPlan(columns, field_count, key_channel)


_KEY_CHANNELS = (Channel.EMAIL, Channel.PHONE, Channel.WHATSAPP)


field_values = st.one_of(
    st.just(""),
    st.just("   "),
    hostile_keys,
    hostile_phones,
    hostile_emails,
    st.text(max_size=12),
    st.text(string.ascii_letters + " ", min_size=0, max_size=30).map(lambda s: f" {s}\t"),
)


@st.composite
def records(draw: st.DrawFn, plan: RowPlan) -> list[str]:
    """Fields for the plan: mostly the expected count, sometimes fewer or more."""
    width = plan.field_count or max((c.index + 1 for c in plan.columns), default=0)
    size = draw(st.sampled_from([width, width, width, max(width - 1, 0), width + 1, 0]))
    values = draw(st.lists(field_values, min_size=size, max_size=size))
    if len(values) >= 2 and draw(st.booleans()):
        values[-1] = values[-2]  # whatsapp repeating the phone column
    return values


def build_both(
    plan: RowPlan, fields: Sequence[str], international: bool, max_value: int
) -> tuple[tuple[ContactRow | None, list[RowIssue]], tuple[ContactRow | None, list[RowIssue]]]:
    pure = rows.RowBuilder(plan, international=international, max_value_chars=max_value)
    fast = compiled.FastRowBuilder(plan, international=international, max_value_chars=max_value)
    assert fast.plan is plan
    return pure.build(7, fields), fast.build(7, fields)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plans().flatmap(lambda plan: st.tuples(st.just(plan), records(plan))),
    st.booleans(),
    st.sampled_from([0, 3, 16, 4096]),
)
def test_builder(case: tuple[RowPlan, list[str]], international: bool, max_value: int) -> None:
    plan, fields = case
    expected, result = build_both(plan, fields, international, max_value)
    assert result == expected
    row, _ = result
    if row is not None:
        assert type(row) is ContactRow
        assert all(type(detail.channel) is Channel for detail in row.details)


def test_builder_takes_tuples_and_long_values() -> None:
    plan = RowPlan(
        (
            Column(0, "cpf", TARGETS[0]),
            Column(1, "email", TARGETS[5]),
            Column(2, "nome", TARGETS[1]),
            Column(3, "jornada", TARGETS[6]),
        ),
        4,
    )
    key = "529.982.247-25"
    for fields in [
        (key, "a@b.com", "Ana", "x"),
        [key, "a" * 400 + "@b.com", "n" * 5000, "j" * 321],
        [key, " A@B.COM ", "\u00a0Ana\u3000", "é" * 2000],
    ]:
        expected, result = build_both(plan, fields, False, 4096)
        assert result == expected


# --------------------------------------------------------------------------------------
# The pipeline's choice
# --------------------------------------------------------------------------------------


def _parse(data: bytes, block: int, *, compiled_path: bool, jsonl: bool = False) -> list[Batch]:
    config = PipelineConfig(limits=Limits(), compiled=compiled_path)
    the_job = Job(
        uuid.uuid4(),
        1,
        JobStatus.IMPORTING,
        ConflictStrategy.MERGE,
        "f",
        InputFormat.JSONL if jsonl else InputFormat.CSV,
        4,
        2,
    )
    parser = BlockParser(the_job, "f.jsonl" if jsonl else "f.csv", config, None)
    batches: list[Batch] = []
    for start in range(0, len(data), block):
        parser.push(data[start : start + block])
        while (pulled := parser.pull()) is not None:
            batches += pulled
    return batches + parser.finish()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(generated_rows(), min_size=1, max_size=12), st.sampled_from([1, 3, 500]))
def test_the_pipeline_batches_are_the_same_compiled_or_pure(
    generated: list[GeneratedRow], block: int
) -> None:
    data = csv_bytes(generated)
    assert _parse(data, block, compiled_path=True) == _parse(data, block, compiled_path=False)
    lines = [orjson.dumps(dict(zip(HEADER, row.cells, strict=True))) for row in generated]
    jsonl = b"\n".join(lines) + b"\n"
    assert _parse(jsonl, block, compiled_path=True, jsonl=True) == _parse(
        jsonl, block, compiled_path=False, jsonl=True
    )


def test_the_chunker_builds_with_the_compiled_builder_unless_told_not_to() -> None:
    data = b"cpf,email\r\n529.982.247-25,a@b.com\r\n"
    for compiled_path, expected in ((True, compiled.FastRowBuilder), (False, rows.RowBuilder)):
        config = PipelineConfig(limits=Limits(), compiled=compiled_path)
        the_job = Job(
            uuid.uuid4(),
            1,
            JobStatus.IMPORTING,
            ConflictStrategy.MERGE,
            "f",
            InputFormat.CSV,
            4,
            1,
        )
        parser = BlockParser(the_job, "f.csv", config, None)
        parser.push(data)
        while parser.pull() is not None:
            pass
        parser.finish()
        assert type(parser.chunker._csv_builder) is expected


# --------------------------------------------------------------------------------------
# Phone patterns as DFA tables (importer.core.digitdfa)
# --------------------------------------------------------------------------------------

BR_PATTERNS = (normalize._BR.plain_valid, normalize._BR.plus_valid)
digit_strings = st.one_of(
    st.text(string.digits, max_size=18),
    st.tuples(
        st.sampled_from(["", "55", "0", "00", "90", "0055", "5590", "550", "11", "21", "99"]),
        st.sampled_from(["", "9", "2", "3", "4", "7", "8", "800", "300", "4004", "900"]),
        st.text(string.digits, min_size=5, max_size=10),
    ).map("".join),
)


def test_the_br_phone_patterns_run_as_tables() -> None:
    assert compiled.compiled_tables() == {"plain_valid": True, "plus_valid": True}


@functools.cache
def dfa(pattern: re.Pattern[bytes]) -> digitdfa.DigitDFA:
    return digitdfa.compile_digits(pattern)


@settings(max_examples=5000, deadline=None)
@given(digit_strings)
def test_the_tables_match_what_the_regexes_match(digits: str) -> None:
    raw = digits.encode("ascii")
    for pattern in BR_PATTERNS:
        assert dfa(pattern).fullmatch(raw) == (pattern.fullmatch(raw) is not None)


@pytest.mark.parametrize(
    "pattern",
    [
        rb"(?!0)\d{2,3}",
        rb"(?=1\d*\Z)(?:12|1[3-5]\d|19?)",
        rb"(?!(?:0|90)(?:(1[245])(\d{2,3}))?)(?:\d{1,4}|5+)",
        rb"[^3-7]\d?|(?:(?=\d{3}\Z)(?:[0-9]{2}8)|(?=\d{2}\Z)(?:.\D?4))",
        rb"(?:12)*?3{0,2}",
        rb"1(?=2)\d|(?!\d*5)\d*",
    ],
)
@given(st.text("0123456789", max_size=7))
def test_lookaheads_complements_and_repeats(pattern: bytes, digits: str) -> None:
    regex = re.compile(pattern)
    raw = digits.encode("ascii")
    assert dfa(regex).fullmatch(raw) == (regex.fullmatch(raw) is not None)


@pytest.mark.parametrize(
    "pattern",
    [rb"(\d)\1", rb"(?<=1)2", rb"(1(?=2))\d", rb"\d++", rb"(?>12)", rb"^1", rb"1\Z2", rb"(?i:1)"],
)
def test_what_the_tables_do_not_translate(pattern: bytes) -> None:
    with pytest.raises(digitdfa.UnsupportedPatternError):
        digitdfa.compile_digits(re.compile(pattern))
    with pytest.raises(digitdfa.UnsupportedPatternError):
        digitdfa.compile_digits(re.compile("1"))  # type: ignore[arg-type]


def test_the_builder_owns_what_it_makes_once() -> None:
    """The compiled builder allocates rows, details and issues itself: one reference each."""
    plan = RowPlan(
        (
            Column(0, "cpf", TARGETS[0]),
            Column(1, "email", TARGETS[5]),
            Column(2, "fone", TARGETS[3]),
            Column(3, "plano", TARGETS[7]),
        ),
        4,
    )
    fast = compiled.FastRowBuilder(plan, international=False, max_value_chars=8)
    row, issues = fast.build(3, ["529.982.247-25", "a@b.com", "(11) 91234-5678", "x" * 9])
    assert row is not None
    assert sys.getrefcount(row) == 2  # the name and getrefcount's argument
    assert [sys.getrefcount(d) for d in row.details] == [3, 3]  # + the tuple
    assert [sys.getrefcount(i) for i in issues] == [3]  # + the list
    invalid, issues = fast.build(4, ["1", "bad", "", ""])
    assert invalid is None
    assert [sys.getrefcount(i) for i in issues] == [3, 3]
    phone = compiled.normalize_phone("(11) 91234-5678")
    assert type(phone) is Phone
    assert sys.getrefcount(phone) == 2
