"""The API's pure decisions: request options, file names and keys, progress, ETA, cursor."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from importer.core.errors import InvalidRequestError
from importer.core.history import parse_history_query
from importer.core.models import ConflictStrategy, Counters, InputFormat, JobStatus, JobView
from importer.core.objects import key_problem
from importer.core.options import (
    OPTION_FIELDS,
    ImportOptions,
    Problems,
    check_fields,
    object_key,
    parse_intent,
    parse_layout_body,
    parse_options,
    parse_sealed,
    parse_tags,
    sanitize_filename,
    tenant_key_problem,
)
from importer.core.principals import Permission, Principal
from importer.services.documents import decode_cursor, encode_cursor, job_document, percent_done
from importer.services.imports import can_see

NOW = dt.datetime(2026, 7, 1, 12, 0, tzinfo=dt.UTC)
BASE = {
    "conflict_strategy": "merge",
    "has_sensitive_data": "false",
    "has_underage_data": "false",
    "data_processing_purpose": "marketing",
    "lgpd_processing_hypothesis": "1",
}


def options(**changes: object) -> tuple[ImportOptions, list[tuple[str, str]]]:
    problems = Problems()
    raw = {**BASE, **changes}
    raw = {k: v for k, v in raw.items() if v is not None}
    return parse_options(raw, problems), problems.items


def test_form_strings_and_json_natives_give_the_same_options() -> None:
    from_form, form_problems = options(tags="a, b,a", has_internationalization="TRUE")
    from_json, json_problems = options(
        conflict_strategy="MERGE",
        has_sensitive_data=False,
        has_underage_data=False,
        lgpd_processing_hypothesis=1,
        tags=["a", "b"],
        has_internationalization=True,
    )
    assert form_problems == json_problems == []
    assert from_form == from_json
    assert from_form.tags == ("a", "b")


def test_ignore_is_discard_and_format_is_optional() -> None:
    parsed, _ = options(conflict_strategy="ignore", format="JSONL")
    assert parsed.conflict_strategy is ConflictStrategy.DISCARD
    assert parsed.input_format is InputFormat.JSONL


def test_every_problem_is_reported_at_once() -> None:
    parsed, problems = options(
        conflict_strategy="upsert",
        has_sensitive_data="maybe",
        data_processing_purpose=None,
        lgpd_processing_hypothesis="x",
        journey_id="0",
    )
    assert parsed is None
    fields = [name for name, _ in problems]
    assert fields == [
        "conflict_strategy",
        "has_sensitive_data",
        "data_processing_purpose",
        "lgpd_processing_hypothesis",
        "journey_id",
    ]


def test_journey_needs_auto_start() -> None:
    _, problems = options(journey_id="7")
    assert problems == [("auto_start_journey_mailing", "is required when journey_id is given")]
    parsed, problems = options(journey_id="7", auto_start_journey_mailing="false")
    assert problems == []
    assert parsed.journey_id == 7
    assert parsed.auto_start_journey_mailing is False


def test_layout_is_validated_like_the_cli_and_excludes_layout_id() -> None:
    parsed, problems = options(layout='{"columns": {"Doc": "cpf_cnpj"}, "delimiter": ";"}')
    assert problems == []
    assert parsed.layout == {"columns": {"Doc": "cpf_cnpj"}, "delimiter": ";"}
    _, problems = options(layout='{"columns": {"Doc": "nonsense"}}')
    assert problems[0][0] == "layout.columns.Doc"
    assert "nonsense" in problems[0][1]
    _, problems = options(layout='{"delimeter": ";"}')
    assert problems == [
        ("layout.delimeter", "unknown key 'delimeter' in layout (did you mean 'delimiter'?)")
    ]
    _, problems = options(layout="[1]")
    assert problems == [("layout", "must be a JSON object")]
    _, problems = options(layout="{", layout_id="1")
    assert problems[0][0] == "layout"
    _, problems = options(layout="{}", layout_id="1")
    assert problems == [("layout_id", "give layout or layout_id, not both")]


def test_unknown_fields_are_refused() -> None:
    problems = Problems()
    check_fields({"conflict_stategy": "merge", "tags": ""}, OPTION_FIELDS, problems)
    assert problems.items == [("conflict_stategy", "unknown field")]


def test_tags() -> None:
    assert parse_tags('["x", " y ", "x", ""]') == ("x", "y")
    assert parse_tags("vip,  new ,") == ("vip", "new")
    with pytest.raises(ValueError, match="list of strings"):
        parse_tags("[1, 2]")
    with pytest.raises(ValueError, match="at most"):
        parse_tags(",".join(str(i) for i in range(51)))


def test_sealed_values() -> None:
    problems = Problems()
    sealed = parse_sealed({"size": 10, "sha256": "A" * 64}, problems, max_bytes=100)
    assert (sealed.size, sealed.sha256, problems.items) == (10, "a" * 64, [])
    problems = Problems()
    parse_sealed({"size": 101, "sha256": "xyz"}, problems, max_bytes=100)
    assert [name for name, _ in problems.items] == ["size", "sha256"]
    problems = Problems()
    parse_sealed({}, problems, max_bytes=100)
    assert problems.items[0] == ("size", "is required")


def test_intent() -> None:
    intent = parse_intent('{"kind": "sms", "params": {"template_id": "t1"}}')
    assert (intent.kind, intent.params) == ("sms", {"template_id": "t1"})
    for bad in (
        '{"kind": "fax"}',
        '{"kind": "hsm", "params": []}',
        "[]",
        '{"kind": "hsm", "x": 1}',
    ):
        with pytest.raises((ValueError, TypeError)):
            parse_intent(bad)


def test_layout_body() -> None:
    name, document = parse_layout_body({"name": " Main ", "document": {"columns": []}})
    assert (name, document) == ("Main", {"columns": []})
    with pytest.raises(InvalidRequestError) as caught:
        parse_layout_body({"document": {"header": "yes"}, "extra": 1})
    assert [f for f, _ in caught.value.problems] == ["extra", "name", "document.header"]
    with pytest.raises(InvalidRequestError) as caught:
        parse_layout_body({"name": "x", "document": {"colums": {}}})
    assert [f for f, _ in caught.value.problems] == ["document.colums"]


# --- file names and keys ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("contacts.csv", "contacts.csv"),
        ("C:\\Users\\ana\\lista clientes.csv", "lista_clientes.csv"),
        ("../../etc/passwd", "passwd"),
        ("endereço.csv.gz", "endereco.csv.gz"),
        ("..", "upload"),
        (".hidden.csv", "hidden.csv"),
        ("名前.csv", "_.csv"),
        ("", "upload"),
        ("a\x00b\n.csv", "ab.csv"),
    ],
)
def test_sanitize_filename(given: str, expected: str) -> None:
    assert sanitize_filename(given) == expected


@given(st.text(max_size=400))
def test_any_name_makes_a_safe_key_under_the_tenant(name: str) -> None:
    job_id = uuid.uuid4()
    key = object_key(42, job_id, name)
    assert key_problem(key) is None
    assert key.startswith(f"42/{job_id}/")
    assert key.count("/") == 2
    assert tenant_key_problem(42, key) is None
    assert tenant_key_problem(4, key) is not None  # 4 is a prefix of 42, not its tenant


def test_key_outside_the_tenant_or_unsafe_is_refused() -> None:
    assert tenant_key_problem(7, "7/a.csv") is None
    assert "7/" in (tenant_key_problem(7, "8/a.csv") or "")
    assert "segment" in (tenant_key_problem(7, "7/../8/a.csv") or "")
    assert tenant_key_problem(7, 7) == "must be a string"


# --- progress, ETA, cursor --------------------------------------------------------------------


def view(**changes: object) -> JobView:
    fields: dict[str, object] = {
        "id": uuid.UUID(int=1),
        "client_id": 1,
        "user_id": "ana",
        "status": JobStatus.IMPORTING,
        "conflict_strategy": ConflictStrategy.MERGE,
        "input_format": InputFormat.CSV,
        "source": "1/x/a.csv",
        "filename": "a.csv",
        "source_size": 1000,
        "source_sha256": "0" * 64,
        "counters": Counters(rows_read=10, inserted=8, invalid=2),
        "rows_done": 10,
        "bytes_read": 250,
        "bytes_total": 1000,
        "fail_reason": None,
        "cancel_requested": False,
        "journey_id": None,
        "tags": ("x",),
        "last_operation_id": None,
        "created_at": NOW - dt.timedelta(seconds=20),
        "updated_at": NOW,
        "started_at": NOW - dt.timedelta(seconds=10),
        "finished_at": None,
    }
    fields.update(changes)
    return JobView(**fields)


def test_job_document() -> None:
    # 10 s into the run, 250 bytes and 10 rows committed in the window: 25 B/s, 750 to go.
    document = job_document(view(batches_done=True, recent_rows=10, recent_bytes=250), NOW)
    assert document["status"] == "importing"
    assert document["phase"] == "applying"
    assert document["queue_position"] is None
    assert document["counters"] == {
        "rows_read": 10,
        "inserted": 8,
        "updated": 0,
        "invalid": 2,
        "error": 0,
        "ignored": 0,
    }
    assert document["progress"] == {
        "rows": 10,
        "bytes": 250,
        "bytes_total": 1000,
        "percent": 25.0,
        "rows_per_s": 1.0,
    }
    assert document["eta_s"] == 30.0
    assert document["started_at"] == "2026-07-01T11:59:50+00:00"
    assert document["finished_at"] is None
    done = job_document(view(status=JobStatus.COMPLETED, finished_at=NOW), NOW)
    assert (done["eta_s"], done["phase"], done["queue_position"]) == (None, None, None)
    assert done["progress"]["percent"] == 100.0
    assert done["progress"]["rows_per_s"] is None


def test_the_rate_is_the_last_window_s_not_the_run_s() -> None:
    """An hour into the run, the last 10 s committed 500 rows and 100 bytes: 50 rows/s,
    10 B/s; the ETA goes by that rate, not the hour's average."""
    old = view(
        started_at=NOW - dt.timedelta(hours=1),
        batches_done=True,
        recent_rows=500,
        recent_bytes=100,
        bytes_read=900,
    )
    document = job_document(old, NOW)
    assert document["progress"]["rows_per_s"] == 50.0
    assert document["eta_s"] == 10.0
    stalled = job_document(replace(old, recent_rows=0, recent_bytes=0), NOW)
    assert stalled["progress"]["rows_per_s"] == 0.0
    assert stalled["eta_s"] is None  # no recent rate: unknown


@pytest.mark.parametrize(
    ("status", "changes", "phase", "position"),
    [
        (JobStatus.QUEUED, {"queue_position": 3}, None, 3),
        (JobStatus.NORMALIZING, {}, "reading", None),
        (JobStatus.IMPORTING, {}, "reading", None),
        (JobStatus.IMPORTING, {"batches_done": True}, "applying", None),
        (JobStatus.IMPORTING, {"batches_done": True, "read_to_end": True}, "finalizing", None),
        (JobStatus.IMPORTING, {"read_to_end": True}, "finalizing", None),
        (JobStatus.CANCELLED, {"batches_done": True, "queue_position": 2}, None, None),
        (JobStatus.UPLOADED, {}, None, None),
    ],
)
def test_phase_and_queue_position(
    status: JobStatus, changes: dict[str, object], phase: str | None, position: int | None
) -> None:
    document = job_document(view(status=status, **changes), NOW)
    assert (document["phase"], document["queue_position"]) == (phase, position)


def test_percent_unknown_without_a_size() -> None:
    assert percent_done(view(bytes_total=None)) is None


@given(st.datetimes(timezones=st.just(dt.UTC)), st.uuids())
def test_cursor_round_trip(moment: dt.datetime, job_id: uuid.UUID) -> None:
    cursor = encode_cursor(moment, job_id)
    assert "=" not in cursor
    assert decode_cursor(cursor) == (moment, job_id)


@pytest.mark.parametrize("bad", ["", "!!!", "bm90IGpzb24", "WzFd", "WyIyMDI2LTAxLTAxIiwgIngiXQ"])
def test_foreign_cursors_are_400(bad: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_cursor(bad)
    assert caught.value.problems[0][0] == "cursor"


def test_history_query() -> None:
    query = parse_history_query(None, ["queued", "failed", "queued"], None, "5")
    assert query.statuses == (JobStatus.QUEUED, JobStatus.FAILED)
    assert query.limit == 5
    with pytest.raises(InvalidRequestError) as caught:
        parse_history_query(None, ["done"], None, "101")
    assert [f for f, _ in caught.value.problems] == ["status", "limit"]


def test_visibility() -> None:
    mine = view(user_id="ana")
    ana = Principal("ana", 1, frozenset({Permission.CONTACT_IMPORT_CREATE}))
    bob = Principal("bob", 1, frozenset({Permission.CONTACT_IMPORT_CREATE}))
    admin = Principal("root", 1, frozenset({Permission.IMPORT_ADMIN}))
    assert can_see(ana, mine)
    assert not can_see(bob, mine)
    assert can_see(admin, mine)


def test_the_duplicate_report_is_on_unless_refused() -> None:
    assert options()[0].duplicates_report is True
    for refused in ("false", False, "0"):
        parsed, problems = options(duplicates_report=refused)
        assert problems == []
        assert parsed is not None
        assert parsed.duplicates_report is False
    assert options(duplicates_report="maybe")[1][0][0] == "duplicates_report"
