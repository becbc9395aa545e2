"""systemd readiness (``Type=notify``): datagrams received on a real Unix socket."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from importer.server import ApiServer, sd_notify


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5)
        yield sock, path


def test_sends_the_state_to_the_socket(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    assert sd_notify("READY=1", {"NOTIFY_SOCKET": path})
    assert sock.recv(64) == b"READY=1"


def test_abstract_socket_address() -> None:
    name = f"importer-test-{id(object())}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert sd_notify("STOPPING=1", {"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(64) == b"STOPPING=1"


@pytest.mark.parametrize("environ", [{}, {"NOTIFY_SOCKET": ""}, {"NOTIFY_SOCKET": "relative"}])
def test_without_systemd_it_does_nothing(environ: dict[str, str]) -> None:
    assert not sd_notify("READY=1", environ)


def test_a_socket_nobody_listens_on_is_not_an_error(tmp_path: Path) -> None:
    assert not sd_notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "gone")})


async def _app(scope: object, receive: object, send: object) -> None:  # pragma: no cover
    raise AssertionError("no request is made")


async def test_server_says_ready_once_listening_and_stopping_on_a_signal(
    notify_socket: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, path = notify_socket
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    drains: list[None] = []
    config = uvicorn.Config(_app, host="127.0.0.1", port=0, lifespan="off", log_config=None)
    server = ApiServer(config, on_exit=lambda: drains.append(None))
    config.load()  # what uvicorn's Server._serve does before startup()
    server.lifespan = config.lifespan_class(config)
    await server.startup()
    try:
        assert server.started
        assert sock.recv(64) == b"READY=1"
        server.handle_exit(15, None)
        assert sock.recv(64) == b"STOPPING=1"
        assert drains == [None]
    finally:
        await server.shutdown()
