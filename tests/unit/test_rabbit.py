"""The RabbitMQ adapter's pure parts: names, queue arguments, attempt counting, re-publish headers
(no broker)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import aio_pika
import orjson
import pytest

from importer.adapters.rabbit.broker import (
    ATTEMPTS_HEADER,
    FIRST_DEATH_HEADERS,
    Topology,
    attempts_of,
    over_redelivered,
    redeliveries_of,
    republish_headers,
)
from importer.core.errors import ConfigurationError
from importer.services.rounds import BACKOFF_MAX_S, backoff_s
from importer.settings import Settings
from importer.wiring import broker_topology

MAIN = "contact-import/insert"
RETRY = "contact-import/insert-retry"
FIRST = dt.datetime(2026, 1, 2, 3, 4, 5)  # pamqp decodes AMQP timestamps as naive UTC
LATER = dt.datetime(2026, 1, 2, 3, 4, 35)


def message(headers: dict[str, Any] | None = None) -> aio_pika.Message:
    return aio_pika.Message(b"{}", message_id="chunk:1", headers=headers or {})


def death(queue: str, reason: str, count: int, time: dt.datetime = FIRST) -> dict[str, Any]:
    return {
        "queue": queue,
        "reason": reason,
        "count": count,
        "time": time,
        "exchange": "",
        "routing-keys": [queue],
    }


# --- names and arguments ----------------------------------------------------------------------


def test_default_names_follow_seed_003() -> None:
    topology = Topology()
    assert (topology.main, topology.retry, topology.dead) == (
        MAIN,
        RETRY,
        "contact-import/insert-dead-letter",
    )
    assert topology.topics == {
        "notification": "contact-import/notification",
        "hsm/importing-intent": "hsm/importing-intent",
        "sms/firing-intent": "sms/firing-intent",
        "contact-import/stats-refresh": "contact-import/stats-refresh",
    }
    assert topology.retry_delay_ms == 30_000


def test_prefix_applies_to_every_queue_and_settings_reach_the_topology() -> None:
    settings = Settings.from_environ(
        {"IMPORTER_QUEUE_PREFIX": "t-1/", "IMPORTER_RETRY_DELAY_MS": "500"}
    )
    topology = broker_topology(settings)
    names = [
        topology.main,
        topology.retry,
        topology.dead,
        topology.wait,
        *topology.topics.values(),
    ]
    assert all(name.startswith("t-1/") for name in names)
    assert set(topology.queue_arguments()) == set(names)
    assert topology.queue_for("notification") == "t-1/contact-import/notification"
    assert topology.queue_for("sms/firing-intent") == "t-1/sms/firing-intent"
    assert topology.queue_for("no/such-topic") is None
    assert topology.retry_delay_ms == 500


def test_settings_defaults_and_broker_url() -> None:
    plain = Settings.from_environ({})
    assert (plain.rabbitmq_url, plain.retry_delay_ms, plain.queue_prefix, plain.max_retries) == (
        None,
        30_000,
        "",
        3,
    )
    url = "amqp://guest:guest@127.0.0.1:5672/"
    configured = Settings.from_environ({"RABBITMQ_URL": url, "IMPORTER_MAX_RETRIES": "5"})
    assert (configured.rabbitmq_url, configured.max_retries) == (url, 5)
    assert Settings.from_environ({"RABBITMQ_URL": ""}).rabbitmq_url is None
    with pytest.raises(ConfigurationError, match="IMPORTER_RETRY_DELAY_MS"):
        Settings.from_environ({"IMPORTER_RETRY_DELAY_MS": "soon"})


def test_the_retry_chain_loops_through_the_consumers_reject() -> None:
    topology = Topology.named("p/", retry_delay_ms=1000, delivery_limit=7)
    arguments = topology.queue_arguments()
    main, retry = arguments[topology.main], arguments[topology.retry]
    # main → retry on reject (or the delivery limit): never dropped by a quorum queue
    assert main["x-queue-type"] == "quorum"
    assert main["x-dead-letter-exchange"] == ""
    assert main["x-dead-letter-routing-key"] == topology.retry
    assert main["x-delivery-limit"] == 7
    # retry → main when the TTL expires; no consumer reads it
    assert retry["x-message-ttl"] == 1000
    assert retry["x-dead-letter-exchange"] == ""
    assert retry["x-dead-letter-routing-key"] == topology.main
    for queue in (main, retry):
        assert queue["x-dead-letter-strategy"] == "at-least-once"
        assert queue["x-overflow"] == "reject-publish"  # required by at-least-once
    for name in (topology.dead, *topology.topics.values()):
        assert arguments[name] == {"x-queue-type": "quorum"}


# --- attempts ---------------------------------------------------------------------------------


def test_a_first_delivery_has_no_attempts() -> None:
    assert attempts_of(message()) == 0
    assert attempts_of(message({ATTEMPTS_HEADER: "garbled"})) == 0


def test_attempts_count_the_main_queues_rejects_not_the_retry_expiries() -> None:
    # newest first: one entry per (queue, reason), with its count
    headers = {"x-death": [death(RETRY, "expired", 2, LATER), death(MAIN, "rejected", 2)]}
    assert attempts_of(message(headers)) == 2
    assert attempts_of(message(headers), queue=MAIN) == 2
    assert attempts_of(message(headers), queue="other") == 0


def test_a_delivery_limit_dead_lettering_is_a_failed_attempt() -> None:
    headers = {
        "x-death": [
            death(RETRY, "expired", 3, LATER),
            death(MAIN, "delivery_limit", 1, LATER),
            death(MAIN, "rejected", 2),
        ]
    }
    assert attempts_of(message(headers), queue=MAIN) == 3


def test_carried_attempts_add_to_the_brokers_count() -> None:
    headers = {ATTEMPTS_HEADER: 3, "x-death": [death(MAIN, "rejected", 1)]}
    assert attempts_of(message(headers), queue=MAIN) == 4
    assert attempts_of(message({ATTEMPTS_HEADER: b"2"})) == 2


def test_republish_headers_keep_counting_and_drop_the_brokers_death_headers() -> None:
    headers = {
        "x-death": [death(RETRY, "expired", 2, LATER), death(MAIN, "rejected", 2)],
        "x-first-death-queue": MAIN,
        "x-first-death-reason": "rejected",
        "x-last-death-queue": RETRY,
        "job_id": "j-1",
    }
    carried = republish_headers(message(headers), queue=MAIN)
    assert carried[ATTEMPTS_HEADER] == 2
    assert carried["job_id"] == "j-1"
    assert not any(k.startswith(("x-death", "x-first-death", "x-last-death")) for k in carried)
    queue, reason, time = (carried[k] for k in FIRST_DEATH_HEADERS)
    assert (queue, reason, time) == (MAIN, "rejected", "2026-01-02T03:04:05+00:00")
    orjson.dumps(carried)  # all strings and integers: a log line or a JSON body can carry them

    # the replayed message is rejected once more by the broker's loop (a fresh x-death entry)
    replayed = {**carried, "x-death": [death(MAIN, "rejected", 1, LATER)]}
    assert attempts_of(message(replayed), queue=MAIN) == 3
    again = republish_headers(message(replayed), queue=MAIN)
    assert again[ATTEMPTS_HEADER] == 3
    assert again[FIRST_DEATH_HEADERS[2]] == time  # the first death stays the first


def test_consumers_reject_a_crash_looping_message_before_the_brokers_limit() -> None:
    topology = Topology.named(delivery_limit=10)
    assert topology.redelivery_guard == 5
    assert redeliveries_of(message()) == 0
    assert not over_redelivered(message({"x-delivery-count": 4}), topology)
    assert over_redelivered(message({"x-delivery-count": 5}), topology)
    assert Topology.named(delivery_limit=1).redelivery_guard == 1
    assert "x-delivery-count" not in republish_headers(message({"x-delivery-count": 3}))


def test_relay_backoff_doubles_up_to_its_cap() -> None:
    waits = [backoff_s(n) for n in range(1, 10)]
    assert waits[:3] == [0.5, 1.0, 2.0]
    assert waits == sorted(waits)
    assert waits[-1] == BACKOFF_MAX_S
