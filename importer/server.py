"""``importer serve``: the API and the job workers in one uvicorn process (uvloop).

SIGTERM or SIGINT drains: the workers stop taking jobs at once (in-flight batches finish and
leases are released), event streams end, uvicorn stops accepting connections and waits for the
open ones, then the lifespan closes the workers, the pool and the object store. The exit status
is 0 after a clean drain, 1 when the server could not start or a worker died.

Under systemd (``Type=notify``, ``deploy/importer.service``) it sends ``READY=1`` once the
lifespan has started and the socket listens, and ``STOPPING=1`` when the drain begins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI

from importer.core.errors import ServiceUnreachableError
from importer.http.app import begin_drain, create_app
from importer.http.auth import TokenVerifier
from importer.settings import Settings

# Seconds uvicorn waits for open requests after a signal before cancelling them; uploads in
# flight get this long to finish.
GRACEFUL_SHUTDOWN_S = 30
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def sd_notify(state: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Send ``state`` to systemd's ``$NOTIFY_SOCKET`` (sd_notify(3), no libsystemd needed).

    False when not started by systemd with a notify socket, or when the send fails: the
    service runs the same either way.
    """
    address = environ.get("NOTIFY_SOCKET", "")
    if not address.startswith(("/", "@")):
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # a Linux abstract socket
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode(), address)
    except OSError:
        return False
    return True


class ApiServer(uvicorn.Server):
    """uvicorn's server, with signals handled on the event loop and a drain hook.

    uvicorn re-raises a captured signal after its shutdown, which would end the process with
    the signal's default status; here a drained shutdown exits 0.
    """

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in _SIGNALS:
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in _SIGNALS:
                loop.remove_signal_handler(sig)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            sd_notify("READY=1")

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        sd_notify("STOPPING=1")
        self._on_exit()
        super().handle_exit(sig, frame)


# How long a thread may hold the GIL while another waits for it. The import's parser runs in a
# thread of this process and is always runnable: at CPython's default (5 ms) every wake-up of the
# event loop (a request's next body chunk, a database reply) could wait that long for the GIL.
GIL_SWITCH_INTERVAL_S = 0.001


class StartupFailure(logging.Filter):
    """A service that did not answer while the lifespan started, kept out of uvicorn's log (a
    traceback, then "Application startup failed"): the command line's edge says it plainly
    instead (what was tried, why, what to do)."""

    def __init__(self) -> None:
        super().__init__()
        self.unreachable: ServiceUnreachableError | None = None

    def guard(self, app: FastAPI) -> None:
        """Wrap ``app``'s lifespan to note the failure before starlette reports it."""
        started = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[Any]:
            try:
                async with started(app) as state:
                    yield state
            except ServiceUnreachableError as exc:
                self.unreachable = exc
                raise

        app.router.lifespan_context = lifespan

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: ARG002 (logging's signature)
        return self.unreachable is None


def run_server(settings: Settings, host: str, port: int) -> int:
    """Serve until a signal; the process's exit status. A service that does not answer at
    start-up is raised (:class:`ServiceUnreachableError`) once the server has given up."""
    TokenVerifier.from_settings(settings)  # a missing or bad key is a usage error, said plainly
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    servers: list[ApiServer] = []

    def stop_after_fatal() -> None:
        for server in servers:
            server.handle_exit(signal.SIGTERM, None)

    app = create_app(settings, on_fatal=stop_after_fatal)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",  # the C parser; h11 (pure Python) costs ~1 ms per 1 MB upload
        lifespan="on",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    server = ApiServer(config, on_exit=lambda: begin_drain(app))
    servers.append(server)
    startup = StartupFailure()
    startup.guard(app)
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addFilter(startup)
    try:
        server.run()
    except SystemExit:  # uvicorn's exit after a failed start-up
        if startup.unreachable is not None:
            raise startup.unreachable from None
        raise
    finally:
        uvicorn_log.removeFilter(startup)
    resources = getattr(app.state, "resources", None)
    if not server.started or (resources is not None and resources.workers.failure is not None):
        return 1
    return 0
