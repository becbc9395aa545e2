"""Completion webhooks, the pure side: the signature, the retry schedule and bound, the target
checks (a table of addresses), the notify_url option and the settings."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import uuid
from typing import Any, cast

import pytest

from importer.adapters.webhooks import pinned_url
from importer.core.errors import ConfigurationError, InvalidRequestError, WebhookConnectError
from importer.core.options import Problems, parse_options
from importer.core.webhooks import (
    AttemptResult,
    DueDelivery,
    Outcome,
    RetryPolicy,
    address_problem,
    addresses_problem,
    headers,
    next_step,
    parse_notify_url,
    retry_delay_s,
    schedule,
    signature,
    signature_matches,
    target_problem,
)
from importer.services.webhooks import WebhookDelivery, check_target
from importer.services.webhooks import target_problem as resolved_problem
from importer.settings import Settings

BODY = b'{"job_id":"j","status":"completed"}'
SECRET = "s3cr3t-s3cr3t-s3cr3t"


def test_signature_is_hex_hmac_sha256_of_the_exact_body() -> None:
    expected = hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()
    assert signature(BODY, SECRET) == f"sha256={expected}"
    assert signature_matches(BODY, SECRET, f"sha256={expected}")
    assert not signature_matches(BODY + b" ", SECRET, f"sha256={expected}")
    assert not signature_matches(BODY, SECRET + "x", f"sha256={expected}")


def test_headers_carry_the_delivery_id_and_event() -> None:
    due = DueDelivery(
        "notification:j:2", uuid.uuid4(), 7, "import_done", "https://x", None, 3, 1.0, SECRET
    )
    sent = headers(due, BODY, SECRET)
    assert sent == {
        "Content-Type": "application/json",
        "X-Importer-Signature": signature(BODY, SECRET),
        "X-Importer-Delivery": "notification:j:2",
        "X-Importer-Event": "import_done",
        "User-Agent": "importer-webhooks/1",
    }


def test_the_default_schedule_doubles_from_30_s() -> None:
    policy = RetryPolicy()
    assert [retry_delay_s(a, policy) for a in range(1, 9)] == [
        30,
        60,
        120,
        240,
        480,
        960,
        1920,
        3600,
    ]
    assert schedule(policy) == [30, 60, 120, 240, 480, 960, 1920]  # 8 attempts, ~63 min


def test_the_age_bound_cuts_the_schedule() -> None:
    policy = RetryPolicy(max_attempts=20, max_age_s=400, first_delay_s=30)
    assert schedule(policy) == [30, 60, 120]  # 30 + 60 + 120 + 240 > 400


FAILED = AttemptResult(500, None, 3)
TIMED_OUT = AttemptResult(None, "timed out after 10 s", 10_000)


@pytest.mark.parametrize(
    ("result", "attempt", "age_s", "outcome"),
    [
        (AttemptResult(200, None, 1), 1, 0.0, Outcome.DELIVERED),
        (AttemptResult(204, None, 1), 8, 99_999.0, Outcome.DELIVERED),  # a late success counts
        (AttemptResult(301, None, 1), 1, 0.0, Outcome.RETRY),  # redirects are not followed
        (FAILED, 1, 0.0, Outcome.RETRY),
        (TIMED_OUT, 7, 0.0, Outcome.RETRY),
        (FAILED, 8, 0.0, Outcome.GAVE_UP),  # the attempts bound
        (FAILED, 2, 86_400.0 - 59.0, Outcome.GAVE_UP),  # the next wait would pass the age bound
        (FAILED, 2, 86_400.0 - 60.0, Outcome.RETRY),
    ],
)
def test_next_step(result: AttemptResult, attempt: int, age_s: float, outcome: Outcome) -> None:
    assert next_step(result, attempt, age_s, RetryPolicy()) is outcome


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("93.184.216.34", None),
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("100.64.0.1", "not public"),  # carrier-grade NAT
        ("192.0.2.1", "private"),  # documentation
        ("198.18.0.1", "private"),  # benchmarking
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:8.8.8.8", None),
        ("64:ff9b::7f00:1", "address"),  # NAT64 of 127.0.0.1 (its kind varies by Python)
        ("2001:db8::1", "private"),  # documentation
    ],
)
def test_address_table(address: str, refused: str | None) -> None:
    problem = address_problem(ipaddress.ip_address(address))
    if refused is None:
        assert problem is None
    else:
        assert problem is not None
        assert refused in problem, problem


def test_every_address_of_a_host_is_checked() -> None:
    assert addresses_problem(["8.8.8.8", "1.1.1.1"], allow_private=False) is None
    problem = addresses_problem(["8.8.8.8", "10.0.0.1"], allow_private=False)
    assert problem is not None
    assert "private" in problem
    assert addresses_problem([], allow_private=False) == "does not resolve"
    assert addresses_problem(["10.0.0.1"], allow_private=True) is None
    assert addresses_problem([], allow_private=True) == "does not resolve"
    assert addresses_problem(["fe80::1%eth0"], allow_private=False) is not None


@pytest.mark.parametrize(
    ("url", "allow_private", "problem"),
    [
        ("https://hooks.example.com/x", False, None),
        ("https://hooks.example.com:8443/x?a=1", False, None),
        ("http://hooks.example.com/x", False, "must be an https URL"),
        ("http://hooks.example.com/x", True, None),
        ("ftp://hooks.example.com/x", True, "must be an https URL"),
        ("https://127.0.0.1/x", False, "loopback"),
        ("https://[::1]/x", False, "loopback"),
        ("https://169.254.169.254/latest", False, "link-local"),
        ("http://127.0.0.1:9/x", True, None),
        ("https://user:pw@hooks.example.com/", False, "credentials"),
        ("https:///x", False, "must name a host"),
        ("https://hooks.example.com/#frag", False, "fragment"),
        ("https://hooks.example.com:99999/", False, "valid URL"),
    ],
)
def test_target_problem(url: str, allow_private: bool, problem: str | None) -> None:
    found = target_problem(url, allow_private=allow_private)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found, found


class Resolving:
    def __init__(self, *addresses: str) -> None:
        self.addresses = list(addresses)
        self.asked: list[tuple[str, int]] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        return self.addresses


async def test_a_name_is_resolved_and_every_address_checked() -> None:
    public = Resolving("93.184.216.34", "2606:2800:220:1::1")
    assert (
        await resolved_problem("https://hooks.example.com/x", public, allow_private=False) is None
    )
    assert public.asked == [("hooks.example.com", 443)]
    rebinding = Resolving("93.184.216.34", "127.0.0.1")
    problem = await resolved_problem("https://evil.example/x", rebinding, allow_private=False)
    assert problem is not None
    assert "loopback" in problem
    with pytest.raises(InvalidRequestError) as refused:
        await check_target("https://evil.example/x", rebinding, allow_private=False)
    assert refused.value.problems[0][0] == "notify_url"
    await check_target("http://localhost:8080/x", Resolving("127.0.0.1"), allow_private=True)


REQUIRED = {
    "conflict_strategy": "merge",
    "has_sensitive_data": "false",
    "has_underage_data": "false",
    "data_processing_purpose": "crm",
    "lgpd_processing_hypothesis": "1",
}


@pytest.mark.parametrize("value", ["https://hooks.example.com/x", " https://h.example/x "])
def test_notify_url_option(value: str) -> None:
    problems = Problems()
    options = parse_options({**REQUIRED, "notify_url": value}, problems)
    assert problems.items == []
    assert options is not None
    assert options.notify_url == value.strip()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not a url", "spaces"),
        ("mailto:a@b.c", "https"),
        ("https://", "host"),
        ("https://h.example/" + "a" * 2048, "at most 2048"),
        (42, "must be a URL"),
        ("https://h.example/\x00", "control"),
    ],
)
def test_notify_url_option_refused(value: object, message: str) -> None:
    problems = Problems()
    assert parse_options({**REQUIRED, "notify_url": value}, problems) is None
    [(field, found)] = problems.items
    assert field == "notify_url"
    assert message in found


def test_notify_url_absent_or_empty_is_none() -> None:
    for raw in (REQUIRED, {**REQUIRED, "notify_url": ""}):
        options = parse_options(raw, Problems())
        assert options is not None
        assert options.notify_url is None
    assert parse_notify_url("https://h.example/x") == "https://h.example/x"


def test_settings() -> None:
    default = Settings.from_environ({})
    assert default.webhook_policy == RetryPolicy(8, 86_400.0, 30.0)
    assert (default.webhook_timeout_s, default.webhook_allow_private) == (10.0, False)
    tuned = Settings.from_environ(
        {
            "IMPORTER_WEBHOOK_MAX_ATTEMPTS": "3",
            "IMPORTER_WEBHOOK_MAX_AGE_S": "60",
            "IMPORTER_WEBHOOK_RETRY_DELAY_S": "0.1",
            "IMPORTER_WEBHOOK_TIMEOUT_S": "0.5",
            "IMPORTER_WEBHOOK_ALLOW_PRIVATE": "1",
        }
    )
    assert tuned.webhook_policy == RetryPolicy(3, 60.0, 0.1)
    assert (tuned.webhook_timeout_s, tuned.webhook_allow_private) == (0.5, True)
    with pytest.raises(ConfigurationError):
        Settings.from_environ({"IMPORTER_WEBHOOK_MAX_ATTEMPTS": "0"})


@pytest.mark.parametrize(
    ("url", "address", "pinned", "host"),
    [
        ("https://h.example/x?a=1", "93.184.216.34", "https://93.184.216.34/x?a=1", "h.example"),
        (
            "https://h.example:8443/x",
            "2606:2800::1",
            "https://[2606:2800::1]:8443/x",
            "h.example:8443",
        ),
        ("http://localhost:9000", "127.0.0.1", "http://127.0.0.1:9000/", "localhost:9000"),
    ],
)
def test_an_attempt_connects_to_the_checked_address(
    url: str, address: str, pinned: str, host: str
) -> None:
    assert pinned_url(url, address) == (pinned, host)


class RecordingSender:
    """Refuses the addresses in ``unreachable``; answers ``status`` from the others."""

    def __init__(self, unreachable: set[str], status: int = 200) -> None:
        self.unreachable = unreachable
        self.status = status
        self.tried: list[str] = []

    async def post(
        self, url: str, address: str, body: bytes, headers: object, timeout_s: float
    ) -> int:
        self.tried.append(address)
        if address in self.unreachable:
            raise WebhookConnectError(f"{address}: unreachable")
        return self.status

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("unreachable", "tried", "status", "error"),
    [
        (set(), ["2606:2800::1"], 200, None),
        ({"2606:2800::1"}, ["2606:2800::1", "93.184.216.34"], 200, None),
        (
            {"2606:2800::1", "93.184.216.34"},
            ["2606:2800::1", "93.184.216.34"],
            None,
            "93.184.216.34: unreachable",
        ),
    ],
)
async def test_an_attempt_tries_the_next_address_only_when_one_is_unreachable(
    unreachable: set[str], tried: list[str], status: int | None, error: str | None
) -> None:
    sender = RecordingSender(unreachable)
    delivery = WebhookDelivery(
        cast(Any, None),
        sender,
        Resolving("2606:2800::1", "93.184.216.34"),
        RetryPolicy(),
        timeout_s=1.0,
    )
    due = DueDelivery(
        "notification:j",
        uuid.uuid4(),
        7,
        "import_done",
        "https://h.example/x",
        BODY,
        1,
        0.0,
        SECRET,
    )
    result = await delivery._attempt(due, BODY, SECRET, 0.0)
    assert sender.tried == tried
    assert (result.status_code, result.error) == (status, error)
