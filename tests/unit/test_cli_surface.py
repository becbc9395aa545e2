"""The command line's surface without services: help texts, ``--version``, s3:// URLs, the
status table's fields, masked URLs and first-contact messages, the log level per command."""

from __future__ import annotations

import argparse
import importlib.metadata
import urllib.parse
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from importer.cli import main
from importer.cli.output import flat_fields, history_row
from importer.cli.parser import build_parser
from importer.core.errors import (
    BrokerError,
    BrokerUnreachableError,
    ConfigurationError,
    DatabaseUnreachableError,
    StorageError,
    StorageUnreachableError,
    TransientStoreError,
)
from importer.core.unreachable import MASK, explain, mask_url
from importer.services.local import S3Location, parse_s3_url
from importer.services.runs import format_for
from importer.settings import Settings, log_level_for


def parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from parsers(child)


def test_every_option_of_every_command_has_a_help_text() -> None:
    missing = [
        f"{prog} {action.option_strings or action.dest}"
        for prog, parser in parsers(build_parser(Settings()))
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        and not action.help
    ]
    assert missing == []


def test_the_commands_spec_promises_exist() -> None:
    progs = {prog for prog, _ in parsers(build_parser(Settings()))}
    assert {"importer status", "importer history", "importer import"} <= progs


def test_version_prints_the_installed_distributions_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"importer {importlib.metadata.version('importer')}\n"


def test_import_help_states_its_defaults() -> None:
    settings = Settings(chunk_size=1234, concurrency=3)
    imp = dict(parsers(build_parser(settings)))["importer import"]
    text = " ".join(imp.format_help().split())
    for said in (
        "default merge",
        "default 1234",
        "default 3",
        "IMPORTER_CHUNK_SIZE",
        "s3://BUCKET/KEY",
        "default: from the name",
        "exit status: 0",
    ):
        assert said in text, said


def test_s3_urls() -> None:
    location = parse_s3_url("s3://my-bucket/lists/2026/c.jsonl.gz")
    assert location == S3Location("my-bucket", "lists/2026/c.jsonl.gz")
    assert location.url == "s3://my-bucket/lists/2026/c.jsonl.gz"
    assert format_for(location.name).value == "jsonl"
    for bad in ("s3://", "s3://b", "s3://Bad_Bucket/k", "s3://bucket/", "s3://bucket/a//b", "x"):
        with pytest.raises(ConfigurationError):
            parse_s3_url(bad)
    args = build_parser(Settings()).parse_args(["import", "s3://bkt/k.csv", "--client-id", "1"])
    assert args.path == S3Location("bkt", "k.csv")
    with pytest.raises(SystemExit):
        build_parser(Settings()).parse_args(["import", "s3://B/k.csv", "--client-id", "1"])


def test_flat_fields_show_whatever_the_document_holds() -> None:
    document = {
        "id": "j",
        "counters": {"rows_read": 1234, "invalid": 0},
        "progress": {"percent": 12.5, "bytes_total": None},
        "warnings": ["suspect encoding"],
        "tags": [],
        "fail_reason": None,
        "cancel_requested": False,
        "phase": "importing",  # a field another change adds: shown without any change here
    }
    assert flat_fields(document) == [
        ("id", "j"),
        ("counters.rows_read", "1,234"),
        ("counters.invalid", "0"),
        ("progress.percent", "12.5"),
        ("warnings", "suspect encoding"),
        ("cancel_requested", "no"),
        ("phase", "importing"),
    ]
    row = history_row(
        {"id": "j", "counters": {"rows_read": 5}, "created_at": "2026-01-02T03:04:05+00:00"}
    )
    assert row[0] == "j"
    assert row[5] == "5"
    assert row[-1] == "2026-01-02 03:04"


def test_mask_url_examples() -> None:
    assert (
        mask_url("postgresql://postgres@127.0.0.1:5432/db")
        == "postgresql://postgres@127.0.0.1:5432/db"
    )
    assert (
        mask_url("postgresql://u:p%40ss@h:1/db?sslmode=require")
        == "postgresql://u:***@h:1/db?sslmode=require"
    )
    assert mask_url("amqp://guest:guest@h:5672/") == "amqp://guest:***@h:5672/"
    assert mask_url("redis://:secret@h:6379/0") == "redis://:***@h:6379/0"
    assert mask_url("http://127.0.0.1:9000") == "http://127.0.0.1:9000"
    assert mask_url("host=h password=secret dbname=x") == "host=h password=*** dbname=x"
    assert mask_url("host=h password='a b' user=u") == "host=h password=*** user=u"
    assert mask_url("postgresql://u:secret@h:bad/db") == "postgresql://***@h:bad/db"


safe = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.~", min_size=1, max_size=12)


@given(
    scheme=st.sampled_from(["postgresql", "amqp", "redis", "http"]),
    user=st.one_of(st.just(""), safe),
    password=st.text(min_size=4, max_size=20).filter(lambda p: p.strip()),
    host=safe,
    port=st.integers(1, 65535),
)
def test_mask_url_never_shows_the_password(
    scheme: str, user: str, password: str, host: str, port: int
) -> None:
    quoted = urllib.parse.quote(password, safe="")
    url = f"{scheme}://{user}:{quoted}@{host}:{port}/x"
    masked = mask_url(url)
    assert masked == f"{scheme}://{user}:{MASK}@{host}:{port}/x"


def test_first_contact_messages() -> None:
    message = explain("PostgreSQL", "postgresql://u:pw@h:1/db", "ConnectionRefusedError: no")
    lines = message.splitlines()
    assert lines[0] == "cannot reach PostgreSQL at postgresql://u:***@h:1/db (DATABASE_URL)"
    assert lines[1] == "  cause: ConnectionRefusedError: no"
    assert lines[2].startswith("  to do: point DATABASE_URL")
    assert "pw" not in message
    # each service's error keeps the kind the retry logic catches
    assert isinstance(DatabaseUnreachableError("postgresql://h/db", "x"), TransientStoreError)
    assert isinstance(BrokerUnreachableError("amqp://h/", "x"), BrokerError)
    assert isinstance(StorageUnreachableError("http://h", "x"), StorageError)
    error = BrokerUnreachableError("amqp://guest:pw@h/", "refused")
    assert "pw" not in str(error)
    assert error.explained().startswith("cannot reach RabbitMQ at amqp://guest:***@h/")


def test_log_level_per_command() -> None:
    assert log_level_for("serve", None) == "info"
    assert log_level_for("worker", None) == "info"
    for command in ("import", "status", "history", "job", "dlq", "db", "token"):
        assert log_level_for(command, None) == "warning"
    assert log_level_for("serve", "warning") == "warning"
    assert log_level_for("import", "debug") == "debug"
    assert Settings.from_environ({}).log_level is None
    assert Settings.from_environ({"IMPORTER_LOG_LEVEL": "error"}).log_level == "error"


def test_the_chunk_size_is_bounded_like_a_chunk_message() -> None:
    parser = build_parser(Settings())
    ok = parser.parse_args(["import", "f.csv", "--client-id", "1", "--chunk-size", "1000000"])
    assert ok.chunk_size == 1_000_000
    with pytest.raises(SystemExit):
        parser.parse_args(["import", "f.csv", "--client-id", "1", "--chunk-size", "1000001"])
