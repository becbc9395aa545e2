"""The completion webhooks' HTTP client (httpx) and the system resolver.

An attempt connects to an address the delivery checked (``services/webhooks.py``), not to
whatever the name resolves to a moment later (DNS rebinding): the URL's host goes in the Host
header and, for https, in TLS's SNI and the certificate check. Redirects are not followed (a
3xx is a failed attempt), no proxy or ``.netrc`` from the environment is used, and the
response body is never read.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

import httpx

from importer.core.errors import WebhookConnectError, WebhookSendError
from importer.core.webhooks import MAX_ERROR_CHARS

# A name that takes longer to resolve counts as not resolving (a create waits on it).
RESOLVE_TIMEOUT_S = 5.0


class SystemResolver:
    """The :class:`importer.ports.Resolver` of the operating system (getaddrinfo)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError, TimeoutError):
            return []
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


def pinned_url(url: str, address: str) -> tuple[str, str]:
    """``url`` with its host replaced by ``address``; and the Host header's value."""
    parts = urlsplit(url)
    netloc = f"[{address}]" if ":" in address else address
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), host


class HttpxWebhookSender:
    """The :class:`importer.ports.WebhookSender` on httpx (one client, its connections kept)."""

    def __init__(self, *, verify: ssl.SSLContext | bool = True) -> None:
        """``verify``: the certificates trusted (default: the system's; tests pass their own)."""
        self._client = httpx.AsyncClient(follow_redirects=False, trust_env=False, verify=verify)

    async def post(
        self,
        url: str,
        address: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> int:
        target, host = pinned_url(url, address)
        hostname = urlsplit(url).hostname or ""
        extensions = {"sni_hostname": hostname} if target.startswith("https:") else {}
        request = self._client.build_request(
            "POST",
            target,
            content=body,
            headers={**headers, "Host": host},
            timeout=timeout_s,
            extensions=extensions,
        )
        try:
            async with asyncio.timeout(timeout_s):  # the whole attempt, not each read
                response = await self._client.send(request, stream=True)
                await response.aclose()
        except TimeoutError as exc:
            raise WebhookSendError(f"timed out after {timeout_s:g} s") from exc
        except httpx.ConnectError as exc:
            raise WebhookConnectError(f"{address}: {exc}"[:MAX_ERROR_CHARS]) from exc
        except httpx.HTTPError as exc:
            raise WebhookSendError(f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]) from exc
        return response.status_code

    async def close(self) -> None:
        await self._client.aclose()
