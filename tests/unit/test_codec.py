"""Chunk messages: a batch survives the round trip exactly; anything else is malformed.

Both codecs, the pure one (the specification) and the compiled one (``_codec.pyx``, when it is
built), write the same bytes and decode every input alike: the same message, or both
MalformedMessageError — never another exception, whatever the bytes.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from importer.core import codec
from importer.core.errors import MalformedMessageError
from importer.core.models import (
    Batch,
    Channel,
    ContactRow,
    Detail,
    Limits,
    Reason,
    RowIssue,
    Severity,
)

PURE = codec.PURE
COMPILED = codec.implementation(compiled=True)
IMPLEMENTATIONS = [PURE] + ([COMPILED] if COMPILED.compiled else [])
compiled_only = pytest.mark.skipif(not COMPILED.compiled, reason="_codec is not built")

texts = st.text(max_size=20)  # unicode, the empty text included
details = st.builds(
    Detail,
    st.sampled_from(Channel),
    texts,
    st.none() | st.integers(0, 999),
    st.none() | st.text(max_size=2),
)
# Custom field names from a small set: rows of a batch share them, as a file's rows do.
field_names = st.sampled_from(["plano", "cidade", "Segmento", "ç", ""]) | texts
contact_rows = st.builds(
    ContactRow,
    st.integers(0, 2**63 - 1),
    st.text(min_size=1, max_size=14),
    st.none() | texts,
    st.none() | texts,
    st.lists(details, max_size=4).map(tuple),
    st.lists(st.tuples(field_names, texts), max_size=4).map(tuple),
)
issues = st.builds(
    RowIssue,
    st.integers(0, 10**12),
    st.none() | texts,
    st.sampled_from(Reason),
    st.none() | texts,
    st.sampled_from(Severity),
)
batches = st.builds(
    Batch,
    chunk_no=st.integers(0, 10**6),
    partition=st.integers(0, 64),
    first_line=st.integers(1, 10**9),
    end_offset=st.integers(0, 10**12),
    rows=st.lists(contact_rows, max_size=6).map(tuple),
    issues=st.lists(issues, max_size=4).map(tuple),
    invalid=st.integers(0, 100),
    part=st.integers(1, 2**20),  # a split piece too (heap numbering)
    end_line=st.integers(0, 10**9),
)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda i: str(i.compiled))
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batches, owner=st.text(max_size=30))
def test_a_batch_round_trips_exactly(
    implementation: codec.Implementation, batch: Batch, owner: str
) -> None:
    job_id = uuid.uuid4()
    decoded = implementation.decode(implementation.encode(job_id, owner, batch))
    assert decoded == codec.BatchMessage(job_id, owner, batch)
    assert decoded.message_id == f"{job_id}:{batch.chunk_no}:{batch.partition}"
    names = dict.fromkeys(name for row in batch.rows for name, _ in row.custom_fields)
    assert decoded.field_names() == tuple(names)
    assert codec.BatchMessage(job_id, owner, batch).field_names() == tuple(names)


@compiled_only
@settings(max_examples=300)
@given(batch=batches, owner=st.text(max_size=30))
def test_both_codecs_write_the_same_bytes(batch: Batch, owner: str) -> None:
    job_id = uuid.uuid4()
    assert COMPILED.encode(job_id, owner, batch) == PURE.encode(job_id, owner, batch)


def _v1(job_id: uuid.UUID, owner: str, batch: Batch) -> bytes:
    """A version 1 message, as the previous version wrote it."""
    rows = [
        [
            r.line,
            r.cpf_cnpj,
            r.name,
            r.street_address,
            [[int(d.channel), d.value, d.country_code, d.country] for d in r.details],
            [[name, value] for name, value in r.custom_fields],
        ]
        for r in batch.rows
    ]
    issues = [[i.line, i.column, i.reason.value, i.value, i.severity.value] for i in batch.issues]
    return orjson.dumps(
        {
            "v": 1,
            "job": str(job_id),
            "owner": owner,
            "chunk": batch.chunk_no,
            "partition": batch.partition,
            "first_line": batch.first_line,
            "end_offset": batch.end_offset,
            "end_line": batch.end_line,
            "invalid": batch.invalid,
            "rows": rows,
            "issues": issues,
        }
    )


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda i: str(i.compiled))
@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batches.map(lambda b: Batch(**{**_fields(b), "part": 1})), owner=texts)
def test_a_version_1_message_is_still_decoded(
    implementation: codec.Implementation, batch: Batch, owner: str
) -> None:
    job_id = uuid.uuid4()
    decoded = implementation.decode(_v1(job_id, owner, batch))
    assert decoded == codec.BatchMessage(job_id, owner, batch)


def _fields(batch: Batch) -> dict[str, Any]:
    return {name: getattr(batch, name) for name in Batch.__dataclass_fields__}


ROW = ContactRow(
    10,
    "52998224725",
    "Ana",
    None,
    (Detail(Channel.EMAIL, "ana@x.br"), Detail(Channel.PHONE, "+5511987654321", 55, "BR")),
    (("plano", "Gold"), ("cidade", "Recife")),
)
ISSUE = RowIssue(11, "cpf", Reason.INVALID_CPF, "123", Severity.INVALID)


def _valid() -> dict[str, Any]:
    batch = Batch(3, 1, 10, 99, (ROW, ROW), (ISSUE,), invalid=1, end_line=12)
    doc: dict[str, Any] = orjson.loads(codec.encode(uuid.uuid4(), "w1", batch))
    return doc


def _with(path: str, value: object) -> bytes:
    """The valid message with the value at ``path`` (``rows.line``, ``chunk``) replaced."""
    doc = _valid()
    *tables, key = path.split(".")
    node = doc
    for table in tables:
        node = node[table]
    node[key] = value
    return orjson.dumps(doc)


def _without(path: str) -> bytes:
    doc = _valid()
    *tables, key = path.split(".")
    node = doc
    for table in tables:
        node = node[table]
    del node[key]
    return orjson.dumps(doc)


MALFORMED = [
    b"",
    b"\xff\xfe garbage",
    b"[]",
    b'{"v": 2}',
    b'{"v": 3}',
    b'{"v": true}',
    b'{"v": 1, "job": "x"}',
    _with("v", 2.0),
    _with("job", "not-a-uuid"),
    _with("owner", None),
    _with("chunk", -1),
    _with("chunk", True),
    _with("chunk", 1.5),
    _with("chunk", 2**63),
    _with("part", 0),
    _with("extra", 1),
    _without("owner"),
    _without("rows.custom"),
    _with("rows", "x"),
    _with("rows", [[1, "k"]]),
    _with("rows.line", [10, "11"]),
    _with("rows.line", [10, -1]),
    _with("rows.line", [10, False]),
    _with("rows.line", [10]),  # columns of unequal length
    _with("rows.key", ["52998224725", None]),
    _with("rows.name", ["Ana", 1]),
    _with("rows.details", [2, 1]),  # counts that do not add up
    _with("rows.details", [2, 3]),
    _with("rows.details", [-2, 6]),
    _with("rows.custom", [2, 1]),
    _with("rows.extra", []),
    _with("details.channel", [3, 1, 3, 99]),
    _with("details.channel", [3, 1, 3, 0]),
    _with("details.channel", [3, 1, 3, True]),
    _with("details.country_code", [None, 55, None, -55]),
    _with("details.country", [None, "BR", None, 7]),
    _with("custom.name", [0, 1, 0, 2]),  # an index out of range
    _with("custom.name", [0, 0, 0, 0]),  # a name never used
    _with("custom.names", ["plano", "plano"]),  # a name twice
    _with("custom.names", ["plano"]),
    _with("custom.value", ["Gold", "Recife", "Gold", None]),
    _with("issues.reason", ["no_such_reason"]),
    _with("issues.severity", ["fatal"]),
    _with("issues.line", []),
    _with("issues", {"line": [11]}),
]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda i: str(i.compiled))
@pytest.mark.parametrize("body", MALFORMED)
def test_anything_else_is_malformed(implementation: codec.Implementation, body: bytes) -> None:
    assert PURE.decode(orjson.dumps(_valid())).batch.rows == (ROW, ROW)  # the base is valid
    with pytest.raises(MalformedMessageError):
        implementation.decode(body)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda i: str(i.compiled))
def test_texts_are_bounded_by_the_limits(implementation: codec.Implementation) -> None:
    limits = Limits(max_field_chars=2000)
    long = "x" * 2001
    for path in ("rows.name", "rows.key", "details.value", "custom.value", "issues.value"):
        doc = _valid()
        table, key = path.split(".")
        doc[table][key][0] = long
        with pytest.raises(MalformedMessageError):
            implementation.decode(orjson.dumps(doc), limits)
    doc = _valid()
    doc["rows"]["name"][0] = "x" * 2000
    assert implementation.decode(orjson.dumps(doc), limits).batch.rows[0].name == "x" * 2000
    # never under MIN_TEXT_CHARS: an issue's report value is cut to 1024 characters
    doc = _valid()
    doc["issues"]["value"][0] = "y" * codec.MIN_TEXT_CHARS
    assert implementation.decode(orjson.dumps(doc), Limits(max_field_chars=10)).batch.issues


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda i: str(i.compiled))
def test_rows_per_message_are_bounded(implementation: codec.Implementation) -> None:
    n = codec.MAX_BATCH_ROWS + 1
    doc = _valid()
    doc["issues"] = {
        "line": [1] * n,
        "column": [None] * n,
        "reason": ["invalid_cpf"] * n,
        "value": [None] * n,
        "severity": ["invalid"] * n,
    }
    with pytest.raises(MalformedMessageError, match="over"):
        implementation.decode(orjson.dumps(doc))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda i: str(i.compiled))
def test_a_huge_message_is_refused_before_parsing(implementation: codec.Implementation) -> None:
    with pytest.raises(MalformedMessageError, match="bytes"):
        implementation.decode(b" " * (codec.MAX_MESSAGE_BYTES + 1))


def test_the_pure_codec_is_chosen_when_asked_for() -> None:
    assert codec.implementation(compiled=False) is codec.PURE


# ----------------------------------------------------------------- hostile bytes, both codecs

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=8,
)


def _outcome(implementation: codec.Implementation, body: bytes) -> codec.BatchMessage | str:
    """The decoded message, or "malformed"; any other exception fails the test."""
    try:
        return implementation.decode(body, Limits(max_field_chars=30))
    except MalformedMessageError:
        return "malformed"


def _same_outcome(body: bytes) -> None:
    outcomes = [_outcome(i, body) for i in IMPLEMENTATIONS]
    assert all(o == outcomes[0] for o in outcomes), outcomes
    if not isinstance(outcomes[0], str) and len(outcomes) > 1:
        assert outcomes[0].field_names() == outcomes[1].field_names()  # type: ignore[union-attr]


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON document (dict keys and list indexes)."""
    found = [path]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _nodes(value, (*path, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += _nodes(value, (*path, index))
    return found


@settings(max_examples=400)
@given(batch=batches, data=st.data())
def test_a_mutated_message_is_malformed_or_a_batch(batch: Batch, data: st.DataObject) -> None:
    """Replace, drop or add one node of a valid message's document: either codec gives the same
    batch or MalformedMessageError."""
    doc = orjson.loads(PURE.encode(uuid.uuid4(), "owner", batch))
    path = data.draw(st.sampled_from(_nodes(doc)[1:]))
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    action = data.draw(st.sampled_from(["replace", "drop", "add"]))
    if action == "replace":
        parent[path[-1]] = data.draw(json_values)
    elif action == "drop":
        del parent[path[-1]]
    elif isinstance(parent, list):
        parent.insert(path[-1], data.draw(json_values))
    else:
        parent[data.draw(texts)] = data.draw(json_values)
    _same_outcome(orjson.dumps(doc))


@settings(max_examples=300)
@given(batch=batches, data=st.data())
def test_mutated_bytes_are_malformed_or_a_batch(batch: Batch, data: st.DataObject) -> None:
    body = bytearray(PURE.encode(uuid.uuid4(), "owner", batch))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at : at + data.draw(st.integers(0, 3))] = data.draw(st.binary(max_size=3))
    _same_outcome(bytes(body))


@settings(max_examples=300)
@given(body=st.binary(max_size=200) | json_values.map(orjson.dumps))
def test_random_bytes_are_malformed_or_a_batch(body: bytes) -> None:
    _same_outcome(body)
