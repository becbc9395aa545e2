"""Requests first: an import in the API's process gives way to the requests in flight.

The import's consumers and its parser share the event loop and the GIL with the HTTP API. Before
each batch and each parse step the import asks for its turn; while requests are being served it
waits for them to finish, but never longer than ``max_wait_s``, so an import slows down under a
storm of requests and never stops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

# How long an import's step waits for the requests in flight: bounds the import's slowdown.
MAX_WAIT_S = 0.1

# Long-lived or trivial routes that must not hold imports back: event streams last as long as an
# import, reports stream for a while, probes and scrapes are cheap.
_EXEMPT_SUFFIXES = ("/events", "/errors", "/healthz", "/readyz", "/metrics")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class RequestPriority:
    """Counts the requests in flight; imports wait (boundedly) for none to be."""

    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self._in_flight = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._max_wait_s = max_wait_s

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Hold the turn while a request is served."""
        self._in_flight += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._quiet.set()

    async def wait_turn(self) -> None:
        """Return once no request is in flight, or after ``max_wait_s``."""
        if self._quiet.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._quiet.wait(), self._max_wait_s)


def holds_turn(path: str) -> bool:
    """Whether a request to this path holds imports back while it is served."""
    return not path.endswith(_EXEMPT_SUFFIXES)


class PriorityMiddleware:
    """ASGI middleware: every non-exempt HTTP request holds the turn until its response ends."""

    def __init__(self, app: ASGIApp, priority: RequestPriority) -> None:
        self.app = app
        self.priority = priority

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not holds_turn(scope["path"]):
            await self.app(scope, receive, send)
            return
        with self.priority.request():
            await self.app(scope, receive, send)
