"""A redis-server of one test: its own loopback port, killed and restarted at will, always
stopped at the end. The shared server on 6379 is never touched."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import _free_loopback_port

START_TIMEOUT_S = 10.0


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisServer:
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        command = [
            binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--daemonize", "no", "--dir", str(self.directory),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(self.port):  # a server has no event to await: poll with a deadline
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: Redis lost at once, with whatever it held."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def shutdown(self) -> None:
        """``redis-cli shutdown nosave`` (the catalog's way for T09), then the process is gone."""
        subprocess.run(
            ["redis-cli", "-p", str(self.port), "shutdown", "nosave"],
            capture_output=True,
            check=False,  # the server closes the connection instead of answering
            timeout=10,
        )
        if self.process is not None:
            self.process.wait(timeout=10)
        self.process = None

    def command(self, *args: str) -> bytes:
        """One command through redis-cli (for assertions: the service's client is under test)."""
        return subprocess.run(
            ["redis-cli", "-p", str(self.port), *args], capture_output=True, check=True, timeout=10
        ).stdout


@contextlib.contextmanager
def redis_server(directory: Path, *, started: bool = True) -> Iterator[RedisServer]:
    """A redis-server on a free loopback port (``started=False``: the port only, Redis down)."""
    server = RedisServer(_free_loopback_port(), directory)
    if started:
        server.start()
    try:
        yield server
    finally:
        server.kill()
