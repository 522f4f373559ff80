"""A real ``redis-server`` for the fleet tests, on a free loopback port (not a test module).

:func:`start` runs Debian's ``redis-server`` (``scripts/install_peers.sh`` installs it) bound to
127.0.0.1 on a free port, without persistence, and waits a bounded time until it answers
``PING``; a missing binary, or one older than Redis 7, goes through ``peer_rule.missing`` (a
skip on a developer's machine, a failure where the peers are required). The tests can kill it
(``kill -9``), freeze it (``SIGSTOP``: it accepts connections and never answers) and start it
again on the same port.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from peer_rule import missing

#: Seconds the server may take to answer its first PING.
START_TIMEOUT = 10.0


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ping(port: int, timeout: float = 0.5) -> bytes:
    """One ``PING`` on a fresh connection: the reply's first line (``b"+PONG"``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(64).split(b"\r\n", 1)[0]


def require() -> str:
    """The ``redis-server`` executable (Redis >= 7), or :func:`peer_rule.missing`."""
    exe = shutil.which("redis-server")
    if exe is None:
        missing("redis-server", "redis-server is not on PATH")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    version = out.split(" v=", 1)[1].split()[0] if " v=" in out else "0"
    if int(version.split(".")[0]) < 7:
        missing("redis-server", f"redis-server {version} is older than 7 (Streams with explicit trimming)")
    return exe


@dataclass
class RedisServer:
    """One ``redis-server`` process on 127.0.0.1:``port``."""

    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The redis-py URL of database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start the server (again, on the same port) and wait until it answers ``PING``."""
        exe = require()
        self.process = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "yes", "--daemonize", "no", "--loglevel", "warning", "--dir", "/tmp"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(f"redis-server on port {self.port} exited {self.process.returncode}: {err}")
            try:
                if ping(self.port) == b"+PONG":
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server on port {self.port} did not answer PING in {START_TIMEOUT} s")
            time.sleep(0.02)

    def kill(self) -> None:
        """``kill -9`` the server and reap it (nothing if it is not running)."""
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a frozen process dies as well, but be sure it is reaped
            process.kill()
            process.wait(timeout=10)
        if process is not None and process.stderr:
            process.stderr.close()

    def freeze(self) -> None:
        """``SIGSTOP``: the port stays open, connections are accepted, nothing is answered."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """``SIGCONT`` after :meth:`freeze`."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """A server for the test module (import this fixture into it); killed at its end."""
    running = RedisServer().start()
    try:
        yield running
    finally:
        running.kill()


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server of the test's own, for the tests that kill or freeze it (import this fixture)."""
    running = RedisServer().start()
    try:
        yield running
    finally:
        running.kill()
