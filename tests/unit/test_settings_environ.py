"""Settings come from an injected mapping; unset or empty variables keep their defaults."""

from __future__ import annotations

import pytest

from importer.core.errors import ConfigurationError
from importer.settings import DEFAULT_DATA_DIR, Settings


def test_an_empty_environment_gives_the_local_defaults() -> None:
    settings = Settings.from_environ({})
    assert settings == Settings()
    assert settings.embedded  # no DATABASE_URL: the embedded PostgreSQL
    assert (settings.database_url, settings.data_dir) == ("", DEFAULT_DATA_DIR)
    assert settings.s3_endpoint_url is None  # the local directory store


def test_database_url_or_the_embedded_servers_directory() -> None:
    own = Settings.from_environ({"DATABASE_URL": "postgresql://u@db/x", "IMPORTER_DATA_DIR": "d"})
    assert not own.embedded
    embedded = Settings.from_environ({"DATABASE_URL": "", "IMPORTER_DATA_DIR": "/srv/pg"})
    assert embedded.embedded
    assert embedded.data_dir == "/srv/pg"


def test_variables_override_the_defaults() -> None:
    settings = Settings.from_environ(
        {
            "DATABASE_URL": "postgresql://u@db:5432/x",
            "IMPORTER_CHUNK_SIZE": "1",
            "IMPORTER_CONCURRENCY": "6",
            "IMPORTER_QUEUE_DEPTH": "3",
            "IMPORTER_MAX_VALUE_CHARS": "10",
            "S3_ENDPOINT_URL": "http://127.0.0.1:9000",
            "IMPORTER_BUCKET": "b",
        }
    )
    assert settings.database_url == "postgresql://u@db:5432/x"
    assert (settings.chunk_size, settings.concurrency, settings.queue_depth) == (1, 6, 3)
    assert settings.limits.max_value_chars == 10
    assert (settings.s3_endpoint_url, settings.bucket) == ("http://127.0.0.1:9000", "b")


def test_an_empty_value_is_unset() -> None:
    settings = Settings.from_environ({"IMPORTER_CHUNK_SIZE": "", "S3_ENDPOINT_URL": ""})
    assert settings.chunk_size == Settings().chunk_size
    assert settings.s3_endpoint_url is None


@pytest.mark.parametrize("raw", ["abc", "1.5", "0", "-3"])
def test_a_bad_integer_is_a_configuration_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="IMPORTER_QUEUE_DEPTH"):
        Settings.from_environ({"IMPORTER_QUEUE_DEPTH": raw})


def test_worker_settings() -> None:
    defaults = Settings.from_environ({})
    assert (defaults.lease_seconds, defaults.max_imports_per_client) == (30.0, 2)
    settings = Settings.from_environ(
        {"IMPORTER_LEASE_SECONDS": "2.5", "IMPORTER_MAX_IMPORTS_PER_CLIENT": "5"}
    )
    assert (settings.lease_seconds, settings.max_imports_per_client) == (2.5, 5)


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "nan", "inf"])
def test_a_bad_lease_is_a_configuration_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="IMPORTER_LEASE_SECONDS"):
        Settings.from_environ({"IMPORTER_LEASE_SECONDS": raw})


def test_a_bad_max_imports_per_client_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="IMPORTER_MAX_IMPORTS_PER_CLIENT"):
        Settings.from_environ({"IMPORTER_MAX_IMPORTS_PER_CLIENT": "0"})


@pytest.mark.parametrize(
    ("raw", "compiled"),
    [(None, True), ("", True), ("0", True), ("no", True), ("1", False), ("TRUE", False)],
)
def test_importer_pure_selects_the_pure_reference(raw: str | None, compiled: bool) -> None:
    environ = {} if raw is None else {"IMPORTER_PURE": raw}
    assert Settings.from_environ(environ).compiled is compiled


def test_a_bad_importer_pure_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="IMPORTER_PURE"):
        Settings.from_environ({"IMPORTER_PURE": "maybe"})


def test_a_chunk_size_over_what_a_chunk_message_carries_is_refused() -> None:
    assert Settings.from_environ({"IMPORTER_CHUNK_SIZE": "1000000"}).chunk_size == 1_000_000
    with pytest.raises(ConfigurationError, match="IMPORTER_CHUNK_SIZE must be at most 1000000"):
        Settings.from_environ({"IMPORTER_CHUNK_SIZE": "1000001"})


def test_bounded_tables_settings() -> None:
    """Issue 26: the outbox's and the webhook deliveries' days and the error report's cap."""
    defaults = Settings.from_environ({})
    assert (
        defaults.outbox_retention_days,
        defaults.webhook_retention_days,
        defaults.max_row_errors,
    ) == (7, 30, 100_000)
    settings = Settings.from_environ(
        {
            "IMPORTER_OUTBOX_RETENTION_DAYS": "2",
            "IMPORTER_WEBHOOK_RETENTION_DAYS": "3",
            "IMPORTER_MAX_ROW_ERRORS": "50",
        }
    )
    assert (
        settings.outbox_retention_days,
        settings.webhook_retention_days,
        settings.max_row_errors,
    ) == (2, 3, 50)
    with pytest.raises(ConfigurationError, match="IMPORTER_MAX_ROW_ERRORS"):
        Settings.from_environ({"IMPORTER_MAX_ROW_ERRORS": "0"})
