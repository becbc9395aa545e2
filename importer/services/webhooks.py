"""Completion webhooks: the deliveries finalization writes, POSTed at least once.

Finalization writes a ``webhook_delivery`` row (its id: the event's outbox message id,
``notification:<job>[:<run>]``) in the transaction that finalizes the job, so a kill -9 loses
none. :class:`WebhookDelivery` runs in every ``importer serve`` and ``importer worker``, with or
without a broker, as a named task of the supervisor. Each round it claims the due deliveries
(``FOR UPDATE SKIP LOCKED``, committed at once: an attempt is a lease, so a crashed attempt is
due again after it), and for each: freezes the body (the job document) at the first attempt,
checks the target again (scheme, every resolved address), POSTs to a checked address, records
the attempt and moves the delivery on (:func:`importer.core.webhooks.next_step`: delivered,
retried after a doubling wait, or given up after the bound). One log line per attempt.

No driver here: the store, the sender and the resolver are ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import orjson
import structlog

from importer.core import webhooks
from importer.core.errors import (
    InvalidRequestError,
    JobNotFoundError,
    StoreError,
    WebhookConnectError,
    WebhookSendError,
)
from importer.core.options import Problems, check_fields
from importer.core.webhooks import (
    AttemptResult,
    ClientWebhook,
    DueDelivery,
    Outcome,
    RetryPolicy,
)
from importer.ports import CatalogStore, ClientWebhooks, Resolver, WebhookSender, WebhookStore
from importer.services.documents import job_document
from importer.services.rounds import backoff_s, wait_or_stop
from importer.settings import Settings

log = structlog.get_logger(__name__)

# Deliveries claimed (and attempted concurrently) per round.
BATCH_SIZE = 16
# An idle loop looks for due deliveries this often (retries come due without a notification).
POLL_S = 1.0
# A claim holds a delivery this much longer than the attempt's timeout (which bounds the whole
# attempt), time enough to record it; then it is due again (its process died mid-attempt).
LEASE_MARGIN_S = 5.0
# Addresses of one host an attempt tries at most (each only when the one before is unreachable).
MAX_ADDRESSES = 4
# A client's secret: at least this long (schema.sql checks it too); a generated one has 64 hex.
MIN_SECRET_CHARS = 16
# A notify_url for a client without a webhook secret: nothing to sign with. (A message, not a
# secret: S105 matches the name.)
NO_SECRET = "the client has no webhook secret: the owner sets one (importer client webhook)"  # noqa: S105

# Called once per attempt with its outcome and, when the receiver answered, its status code.
AttemptObserver = Callable[[Outcome, int | None], None]


async def target_problem(url: str, resolver: Resolver, *, allow_private: bool) -> str | None:
    """Why ``url`` may not be a webhook's target now: its scheme, or any address of its host."""
    problem = webhooks.target_problem(url, allow_private=allow_private)
    if problem is not None:
        return problem
    target = webhooks.parse_target(url)
    addresses = await resolver.resolve(target.host, target.port)
    return webhooks.addresses_problem(addresses, allow_private=allow_private)


async def check_target(url: str, resolver: Resolver, *, allow_private: bool) -> None:
    """A ``notify_url`` the owner or a create gives: a 400 on ``notify_url`` when refused."""
    problem = await target_problem(url, resolver, allow_private=allow_private)
    if problem is not None:
        raise InvalidRequestError([("notify_url", problem)])


async def check_notify_url(
    url: str, resolver: Resolver | None, catalog: CatalogStore, client_id: int, settings: Settings
) -> None:
    """A create's ``notify_url``: the target must pass the SSRF checks now (and again at every
    attempt), and the client must have a secret to sign with."""
    if resolver is None:
        raise InvalidRequestError([("notify_url", "webhooks are not available here")])
    await check_target(url, resolver, allow_private=settings.webhook_allow_private)
    if await catalog.client_webhook(client_id) is None:
        raise InvalidRequestError([("notify_url", NO_SECRET)])


async def set_client_webhook(
    settings_store: ClientWebhooks,
    resolver: Resolver,
    settings: Settings,
    client_id: int,
    *,
    notify_url: str | None,
    secret: str | None,
    new_secret: bool = False,
) -> ClientWebhook:
    """The owner's ``importer client webhook``: the client's default target (None: none) and
    its secret (given; or a new random one with ``new_secret`` or when it has none; else kept)."""
    if notify_url is not None:
        try:
            notify_url = webhooks.parse_notify_url(notify_url)
        except (TypeError, ValueError) as exc:
            raise InvalidRequestError([("notify_url", str(exc))]) from None
        await check_target(notify_url, resolver, allow_private=settings.webhook_allow_private)
    if secret is not None and len(secret) < MIN_SECRET_CHARS:
        raise InvalidRequestError([("secret", f"must be at least {MIN_SECRET_CHARS} characters")])
    generated = secrets.token_hex(32)
    return await settings_store.set(
        client_id, generated if new_secret else secret, notify_url, generated
    )


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """What the owner asks of a client's webhook (``PUT /v1/admin/webhook``)."""

    notify_url: str | None
    secret: str | None
    new_secret: bool


WEBHOOK_FIELDS = ("notify_url", "secret", "new_secret")


def parse_webhook_settings(raw: Mapping[str, object]) -> WebhookSettings:
    """A JSON body's settings, every problem at once (a 400 list)."""
    problems = Problems()
    check_fields(raw, WEBHOOK_FIELDS, problems)
    notify_url, secret = raw.get("notify_url"), raw.get("secret")
    new_secret = raw.get("new_secret", False)
    if notify_url is not None and not isinstance(notify_url, str):
        problems.add("notify_url", "must be a URL or null")
    if secret is not None and not isinstance(secret, str):
        problems.add("secret", "must be a string or null")
    if not isinstance(new_secret, bool):
        problems.add("new_secret", "must be true or false")
    elif new_secret and secret is not None:
        problems.add("new_secret", "give secret or new_secret, not both")
    problems.raise_any()
    return WebhookSettings(
        notify_url if isinstance(notify_url, str) else None,
        secret if isinstance(secret, str) else None,
        new_secret is True,
    )


def webhook_document(webhook: ClientWebhook | None, client_id: int) -> dict[str, object]:
    """A client's settings as GET shows them: never the secret, only whether one is set."""
    return {
        "client_id": client_id,
        "notify_url": webhook.notify_url if webhook is not None else None,
        "secret_set": webhook is not None,
    }


class WebhookDelivery:
    """Delivers the due webhooks until ``stop`` is set (see the module's docstring)."""

    def __init__(
        self,
        store: WebhookStore,
        sender: WebhookSender,
        resolver: Resolver,
        policy: RetryPolicy,
        *,
        timeout_s: float,
        allow_private: bool = False,
        stop: asyncio.Event | None = None,
        on_attempt: AttemptObserver | None = None,
        batch_size: int = BATCH_SIZE,
        poll_s: float = POLL_S,
    ) -> None:
        self._store = store
        self._sender = sender
        self._resolver = resolver
        self._policy = policy
        self._timeout_s = timeout_s
        self._allow_private = allow_private
        self._stop = stop or asyncio.Event()
        self._on_attempt = on_attempt
        self._batch_size = batch_size
        self._poll_s = poll_s
        self._failures = 0
        # The attempts run concurrently, their statements one at a time: the delivery's share
        # of the pool is one connection (wiring.pool_size), the workers keep theirs.
        self._database = asyncio.Semaphore(1)
        self.attempts = 0  # attempts made since the start

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """End :meth:`run` after the round in progress (its attempts are recorded)."""
        self._stop.set()

    async def run(self) -> None:
        log.info("webhook_delivery_started")
        try:
            while not self._stop.is_set():
                await self._round()
        finally:
            with contextlib.suppress(StoreError):
                await self._store.close()
            await self._sender.close()
            log.info("webhook_delivery_stopped", attempts=self.attempts)

    async def deliver_once(self, max_rounds: int = 100) -> int:
        """``importer maintenance``: attempt every delivery due now (at most ``max_rounds``
        batches), then close; how many attempts. A database failure raises."""
        attempts = self.attempts
        try:
            for _ in range(max_rounds):
                if await self._deliver_due() < self._batch_size:
                    break
        finally:
            with contextlib.suppress(StoreError):
                await self._store.close()
            await self._sender.close()
        return self.attempts - attempts

    async def _round(self) -> None:
        try:
            claimed = await self._deliver_due()
        except StoreError as exc:
            await self._failed(exc)
            return
        self._recovered()
        if claimed < self._batch_size:
            await self._wait(self._store.wait_for_deliveries(self._poll_s))

    async def _deliver_due(self) -> int:
        """Claim the due deliveries and attempt them concurrently (a named task each); the
        number claimed. A database failure of any is the round's (the others are recorded)."""
        due = await self._store.claim_due(self._batch_size, self._timeout_s + LEASE_MARGIN_S)
        failure: StoreError | None = None
        try:
            async with asyncio.TaskGroup() as group:
                for delivery in due:
                    group.create_task(
                        self._deliver(delivery), name=f"webhook:{delivery.delivery_id}"
                    )
        except* StoreError as failures:
            error = failures.exceptions[0]
            assert isinstance(error, StoreError)
            failure = error
        if failure is not None:
            raise failure
        return len(due)

    async def _deliver(self, delivery: DueDelivery) -> None:
        try:
            body = delivery.body or await self._freeze_body(delivery)
        except JobNotFoundError:  # deleted since the claim: its delivery went with it
            return
        started = time.monotonic()
        if delivery.secret is None:
            result = AttemptResult(None, "the client has no webhook secret", 0)
            outcome = Outcome.GAVE_UP
        else:
            result = await self._attempt(delivery, body, delivery.secret, started)
            outcome = webhooks.next_step(result, delivery.attempt, delivery.age_s, self._policy)
        retry_in_s = webhooks.retry_delay_s(delivery.attempt, self._policy)
        async with self._database:
            await self._store.record(delivery, result, outcome, retry_in_s)
        self.attempts += 1
        self._log(delivery, result, outcome, retry_in_s)
        if self._on_attempt is not None:
            self._on_attempt(outcome, result.status_code)

    async def _freeze_body(self, delivery: DueDelivery) -> bytes:
        """The job document as GET /v1/imports/{id} shows it, stored at the first attempt."""
        async with self._database:
            view = await self._store.job_view(delivery.job_id)
            body = orjson.dumps(job_document(view, _utcnow()))
            return await self._store.job_document_body(delivery, body)

    async def _attempt(
        self, delivery: DueDelivery, body: bytes, secret: str, started: float
    ) -> AttemptResult:
        """Check the target again (it may resolve elsewhere now), then POST to a checked address."""
        try:
            async with asyncio.timeout(self._timeout_s):  # every address within the one bound
                status = await self._post(delivery, body, secret)
        except TimeoutError:
            error = f"timed out after {self._timeout_s:g} s"
            return AttemptResult(None, error, _ms(started))
        except WebhookSendError as exc:
            return AttemptResult(None, str(exc)[: webhooks.MAX_ERROR_CHARS], _ms(started))
        return AttemptResult(status, None, _ms(started))

    async def _post(self, delivery: DueDelivery, body: bytes, secret: str) -> int:
        """To the host's checked addresses in the resolver's order, the next one only when an
        address cannot be reached (a receiver that answered, even badly, has answered)."""
        headers = webhooks.headers(delivery, body, secret)
        addresses = await self._checked_addresses(delivery.url)
        for address in addresses[:-1]:
            with contextlib.suppress(WebhookConnectError):
                return await self._sender.post(
                    delivery.url, address, body, headers, self._timeout_s
                )
        return await self._sender.post(delivery.url, addresses[-1], body, headers, self._timeout_s)

    async def _checked_addresses(self, url: str) -> list[str]:
        problem = webhooks.target_problem(url, allow_private=self._allow_private)
        if problem is not None:
            raise WebhookSendError(f"target refused: {problem}")
        target = webhooks.parse_target(url)
        addresses = await self._resolver.resolve(target.host, target.port)
        problem = webhooks.addresses_problem(addresses, allow_private=self._allow_private)
        if problem is not None:
            raise WebhookSendError(f"target refused: {problem}")
        return addresses[:MAX_ADDRESSES]

    def _log(
        self, delivery: DueDelivery, result: AttemptResult, outcome: Outcome, retry_in_s: float
    ) -> None:
        fields: dict[str, object] = {
            "delivery_id": delivery.delivery_id,
            "job_id": str(delivery.job_id),
            "client_id": delivery.client_id,
            "event_type": delivery.event,  # `event` is the log line's own name
            "attempt": delivery.attempt,
            "status_code": result.status_code,
            "error": result.error,
            "ms": result.duration_ms,
            "outcome": outcome.value,
        }
        if outcome is Outcome.RETRY:
            log.info("webhook_attempt", retry_in_s=retry_in_s, **fields)
        elif outcome is Outcome.GAVE_UP:
            log.warning("webhook_attempt", **fields)
        else:
            log.info("webhook_attempt", **fields)

    async def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        if self._failures == 1:
            log.warning("webhook_delivery_failing", error=str(exc), kind=type(exc).__name__)
        await self._wait(asyncio.sleep(backoff_s(self._failures)))

    def _recovered(self) -> None:
        if self._failures:
            log.info("webhook_delivery_recovered", failures=self._failures)
        self._failures = 0

    async def _wait(self, waiting: Awaitable[None]) -> None:
        """Until ``waiting`` ends or ``stop`` is set; a failed wait is a failed round."""
        error = await wait_or_stop(waiting, self._stop, "webhook-delivery-stop")
        if isinstance(error, StoreError):
            await self._failed(error)
        elif isinstance(error, Exception):
            raise error


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
