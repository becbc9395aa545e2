"""What the background loops share (the outbox relay, the webhook delivery): the backoff after
failed rounds, and a wait that ends early when the loop's ``stop`` is set."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

# Waits after a failure: doubling from the first to the last.
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 15.0


def backoff_s(failures: int) -> float:
    """The wait after ``failures`` consecutive failed rounds (1 → the first wait)."""
    return float(min(BACKOFF_FIRST_S * 2 ** max(failures - 1, 0), BACKOFF_MAX_S))


async def wait_or_stop(waiting: Awaitable[None], stop: asyncio.Event, name: str) -> object:
    """Until ``waiting`` ends or ``stop`` is set (both then cancelled); what ``waiting`` ended
    with: its result, or the exception it raised (the caller decides what a failure is)."""
    waiter = asyncio.ensure_future(waiting)
    stopped = asyncio.create_task(stop.wait(), name=name)
    try:
        await asyncio.wait([waiter, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, stopped):
            task.cancel()
        results = await asyncio.gather(waiter, stopped, return_exceptions=True)
    return results[0]
