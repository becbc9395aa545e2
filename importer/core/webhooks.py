"""Completion webhooks, the pure side: the signature, the retry schedule, the target checks.

A finalized import (and, later, an undone one) with a ``notify_url`` gets its job document
POSTed there by the workers (``services/webhooks.py``), at least once: every attempt carries the
same delivery id and the same body, signed ``sha256=<hex HMAC-SHA256(body, client secret)>``.
Which targets are refused (SSRF): anything not ``https``, and any host with an address that is
not globally routable (private, loopback, link-local, multicast, reserved, unspecified, shared,
an IPv4-mapped IPv6 of those) — unless the deployment allows private targets (tests, on-prem).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

SIGNATURE_HEADER = "X-Importer-Signature"
DELIVERY_HEADER = "X-Importer-Delivery"  # the event's id: the receiver's dedupe key
EVENT_HEADER = "X-Importer-Event"  # import_done, import_partial, import_failed, import_cancelled
USER_AGENT = "importer-webhooks/1"
SIGNATURE_PREFIX = "sha256="
# A URL longer than this is refused (no real receiver needs more; it is stored on the job).
MAX_URL_CHARS = 2048
# Retries wait first_delay_s, doubling, at most this long.
MAX_RETRY_DELAY_S = 3600.0
# What a receiver's status or error keeps in the attempt's record.
MAX_ERROR_CHARS = 500

_FORBIDDEN_URL_CHARS = re.compile(r"[\x00-\x20\x7f]")


class Outcome(enum.StrEnum):
    """What an attempt leaves its delivery in (``record_webhook_attempt``'s values)."""

    DELIVERED = "delivered"
    RETRY = "retry"
    GAVE_UP = "gave_up"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The bound of a delivery: so many attempts within so long (whichever comes first)."""

    max_attempts: int = 8
    max_age_s: float = 24 * 3600.0
    first_delay_s: float = 30.0
    max_delay_s: float = MAX_RETRY_DELAY_S


@dataclass(frozen=True, slots=True)
class DueDelivery:
    """A delivery claimed for one attempt (``attempt``: its number, 1 for the first)."""

    delivery_id: str
    job_id: uuid.UUID
    client_id: int
    event: str
    url: str
    body: bytes | None  # frozen at the first attempt; None until then
    attempt: int
    age_s: float  # since the event
    secret: str | None  # the client's webhook secret (None: removed since)


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one attempt got: the receiver's status code, or the error that stopped it."""

    status_code: int | None
    error: str | None
    duration_ms: int

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


@dataclass(frozen=True, slots=True)
class ClientWebhook:
    """A client's webhook settings: the signing secret and its imports' default target."""

    client_id: int
    secret: str
    notify_url: str | None


def signature(body: bytes, secret: str) -> str:
    """The ``X-Importer-Signature`` value of ``body``: ``sha256=`` and the hex HMAC-SHA256."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def signature_matches(body: bytes, secret: str, header: str) -> bool:
    """The receiver's check, in constant time (documented in docs/API.md)."""
    return hmac.compare_digest(signature(body, secret), header)


def headers(delivery: DueDelivery, body: bytes, secret: str) -> dict[str, str]:
    """The request headers of one attempt (the same on every attempt of a delivery)."""
    return {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(body, secret),
        DELIVERY_HEADER: delivery.delivery_id,
        EVENT_HEADER: delivery.event,
        "User-Agent": USER_AGENT,
    }


def retry_delay_s(attempt: int, policy: RetryPolicy) -> float:
    """The wait after failed attempt ``attempt`` (1: the first): doubling, capped."""
    return float(min(policy.first_delay_s * 2 ** max(attempt - 1, 0), policy.max_delay_s))


def next_step(result: AttemptResult, attempt: int, age_s: float, policy: RetryPolicy) -> Outcome:
    """Delivered on a 2xx; else retry while the bound allows another attempt, else give up."""
    if result.succeeded:
        return Outcome.DELIVERED
    if attempt >= policy.max_attempts:
        return Outcome.GAVE_UP
    if age_s + retry_delay_s(attempt, policy) > policy.max_age_s:
        return Outcome.GAVE_UP
    return Outcome.RETRY


def schedule(policy: RetryPolicy) -> list[float]:
    """Every wait of a delivery that always fails, in order (what the docs tabulate)."""
    waits: list[float] = []
    elapsed = 0.0
    for attempt in range(1, policy.max_attempts):
        delay = retry_delay_s(attempt, policy)
        if elapsed + delay > policy.max_age_s:
            break
        waits.append(delay)
        elapsed += delay
    return waits


@dataclass(frozen=True, slots=True)
class Target:
    """A checked URL's parts: where to connect and what to ask for."""

    scheme: str
    host: str  # without brackets for an IPv6 literal
    port: int


def parse_notify_url(value: object) -> str:
    """A create option's ``notify_url``: an absolute http(s) URL with a host, no credentials,
    no fragment, no spaces or control characters, at most MAX_URL_CHARS. The policy (https,
    public addresses) is :func:`target_problem`'s and the resolution's."""
    if not isinstance(value, str):
        raise TypeError("must be a URL")
    url = value.strip()
    if len(url) > MAX_URL_CHARS:
        raise ValueError(f"must be at most {MAX_URL_CHARS} characters")
    if _FORBIDDEN_URL_CHARS.search(url):
        raise ValueError("must not contain spaces or control characters")
    parse_target(url)
    return url


def parse_target(url: str) -> Target:
    """The scheme, host and port of ``url``; ValueError when it is no usable http(s) URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError("must be a valid URL") from None
    if parts.scheme not in {"http", "https"}:
        raise ValueError("must be an https URL")
    if not parts.hostname:
        raise ValueError("must name a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry credentials")
    if parts.fragment:
        raise ValueError("must not have a fragment")
    default = 443 if parts.scheme == "https" else 80
    return Target(parts.scheme, parts.hostname, port or default)


def target_problem(url: str, *, allow_private: bool) -> str | None:
    """Why ``url`` may not be a target before any resolution: its scheme, an IP literal host."""
    try:
        target = parse_target(url)
    except ValueError as exc:
        return str(exc)
    if target.scheme != "https" and not allow_private:
        return "must be an https URL"
    if allow_private:
        return None
    try:
        literal = ipaddress.ip_address(target.host)
    except ValueError:
        return None
    return address_problem(literal)


def address_problem(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why a target may not have ``address`` (None: a public unicast address)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address_problem(address.ipv4_mapped)
    for kind, flagged in (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("unspecified", address.is_unspecified),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
    ):
        if flagged:
            return f"resolves to a {kind} address ({address})"
    if not address.is_global:  # shared (100.64/10), documentation, benchmarking ranges
        return f"resolves to an address that is not public ({address})"
    return None


def addresses_problem(addresses: Sequence[str], *, allow_private: bool) -> str | None:
    """Every address the host resolves to must be public (a host with one private address of
    several could be made to connect there)."""
    if not addresses:
        return "does not resolve"
    if allow_private:
        return None
    for text in addresses:
        problem = address_problem(ipaddress.ip_address(text.split("%", 1)[0]))
        if problem is not None:
            return problem
    return None
