"""Chunk messages: a batch survives the round trip exactly; anything else is malformed."""

from __future__ import annotations

import uuid

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core import codec
from importer.core.errors import MalformedMessageError
from importer.core.models import Batch, Channel, ContactRow, Detail, Reason, RowIssue, Severity

texts = st.text(max_size=20)
details = st.builds(
    Detail,
    st.sampled_from(Channel),
    texts,
    st.none() | st.integers(1, 999),
    st.none() | st.text(max_size=2),
)
contact_rows = st.builds(
    ContactRow,
    st.integers(1, 10**9),
    st.text(min_size=1, max_size=14),
    st.none() | texts,
    st.none() | texts,
    st.lists(details, max_size=3).map(tuple),
    st.lists(st.tuples(texts, texts), max_size=3).map(tuple),
)
issues = st.builds(
    RowIssue,
    st.integers(1, 10**9),
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
    rows=st.lists(contact_rows, max_size=5).map(tuple),
    issues=st.lists(issues, max_size=3).map(tuple),
    invalid=st.integers(0, 100),
    end_line=st.integers(0, 10**9),
)


@settings(max_examples=200)
@given(batch=batches, owner=st.text(max_size=30))
def test_a_batch_round_trips_exactly(batch: Batch, owner: str) -> None:
    job_id = uuid.uuid4()
    decoded = codec.decode(codec.encode(job_id, owner, batch))
    assert decoded == codec.BatchMessage(job_id, owner, batch)
    assert decoded.message_id == f"{job_id}:{batch.chunk_no}:{batch.partition}"


def _valid() -> dict[str, object]:
    batch = Batch(3, 1, 10, 99, (ContactRow(10, "52998224725", "Ana", None),), end_line=11)
    doc: dict[str, object] = orjson.loads(codec.encode(uuid.uuid4(), "w1", batch))
    return doc


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\xff\xfe garbage",
        b"[]",
        b'{"v": 2}',
        orjson.dumps({**_valid(), "job": "not-a-uuid"}),
        orjson.dumps({**_valid(), "chunk": -1}),
        orjson.dumps({**_valid(), "chunk": True}),
        orjson.dumps({**_valid(), "rows": "x"}),
        orjson.dumps({**_valid(), "rows": [[1, "k"]]}),
        orjson.dumps({**_valid(), "rows": [[1, "k", None, None, [[99, "v", None, None]], []]]}),
        orjson.dumps({**_valid(), "issues": [[1, None, "no_such_reason", None, "invalid"]]}),
        orjson.dumps({k: v for k, v in _valid().items() if k != "owner"}),
    ],
)
def test_anything_else_is_malformed(body: bytes) -> None:
    with pytest.raises(MalformedMessageError):
        codec.decode(body)


def test_a_huge_message_is_refused_before_parsing() -> None:
    with pytest.raises(MalformedMessageError, match="bytes"):
        codec.decode(b" " * (codec.MAX_MESSAGE_BYTES + 1))
