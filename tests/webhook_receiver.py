"""A real HTTP receiver for the webhook tests: a plain asyncio server on 127.0.0.1.

It reads each request whole (request line, headers, a Content-Length body), records it, and
answers as its script says, one step per request in order (then the last step again): a status
code, or ``HANG`` (read the request, never answer: the sender's timeout, or a kill mid-delivery).
Each connection is closed after its answer. Tests await :meth:`Receiver.requests_at_least`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

HANG = -1
_READ_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Received:
    method: str
    target: str
    headers: dict[str, str]  # lower-cased names
    body: bytes


class Receiver:
    def __init__(self, script: Sequence[int], tls: ssl.SSLContext | None = None) -> None:
        self.script = list(script)
        self._tls = tls
        self.received: list[Received] = []
        self._changed = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self._hung: list[asyncio.StreamWriter] = []

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def url(self, path: str = "/hooks/import", host: str = "127.0.0.1") -> str:
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._tls)

    async def close(self) -> None:
        for writer in self._hung:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def requests_at_least(self, count: int, timeout_s: float = 30.0) -> list[Received]:
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: len(self.received) >= count)
            return list(self.received)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                request = await _read_request(reader)
        except (
            TimeoutError,
            asyncio.IncompleteReadError,
            ConnectionError,
            ValueError,
            ssl.SSLError,
        ):
            writer.close()
            return
        async with self._changed:
            step = self.script[min(len(self.received), len(self.script) - 1)]
            self.received.append(request)
            self._changed.notify_all()
        if step == HANG:
            self._hung.append(writer)  # never answered; closed with the receiver
            return
        writer.write(
            f"HTTP/1.1 {step} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".encode()
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()


async def _read_request(reader: asyncio.StreamReader) -> Received:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Received(method, target, headers, body)


@contextlib.asynccontextmanager
async def receiving(
    script: Sequence[int], tls: ssl.SSLContext | None = None
) -> AsyncIterator[Receiver]:
    receiver = Receiver(script, tls)
    await receiver.start()
    try:
        yield receiver
    finally:
        await receiver.close()
