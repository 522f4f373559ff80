"""The official SDKs' remote (Streamable HTTP + WebSocket) servers, started for tests.

``peers/pysdk/remote_server.py`` (the Python SDK's ASGI app on uvicorn; ``pysdk-connection``:
the same program run by ``peers/pysdk/dropin.py connection``, so its app is acp_fast's) and
``peers/ts/remote_server.mjs`` (the TypeScript SDK's ``AcpServer`` on ``node:http``), each
bound to 127.0.0.1 on a free port that it prints. :func:`start` waits a bounded time for the
port; :meth:`RemotePeer.stop` kills the process. A missing peer goes through
``peer_rule.missing`` (a skip on a developer's machine, a failure where peers are required).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from peer_rule import missing, require_pysdk, require_ts_sdk

REPO = Path(__file__).resolve().parent.parent.parent
PEERS = REPO / "peers"
#: Seconds a server may take to print its port.
START_TIMEOUT = 30.0
KINDS = ("pysdk", "ts")


def require(kind: str) -> list[str]:
    """The command that runs ``kind``'s server, or a skip/failure naming what is missing."""
    if kind == "pysdk":
        require_pysdk()
        for module in ("uvicorn", "websockets"):
            try:
                __import__(module)
            except ImportError:
                missing("acp", f"{module} (the Python SDK's [http] extra and uvicorn) is not installed")
        return [sys.executable, str(PEERS / "pysdk" / "remote_server.py")]
    if kind == "pysdk-connection":  # the same program, run unchanged on the connection drop-in
        return [sys.executable, str(PEERS / "pysdk" / "dropin.py"), "connection", *require("pysdk")[1:]]
    if kind == "ts":
        return [require_ts_sdk(PEERS / "ts"), str(PEERS / "ts" / "remote_server.mjs")]
    raise ValueError(f"unknown peer {kind!r}")


@dataclass
class RemotePeer:
    """A running peer server: its ``port``; :meth:`kill` / :meth:`stop` end it."""

    kind: str
    proc: subprocess.Popen[bytes]
    port: int
    log: IO[bytes]
    token: str | None = None
    args: list[str] = field(default_factory=list)

    def base(self, scheme: str) -> str:
        """The bare base URL (the client appends ``/acp``)."""
        return f"{scheme}://127.0.0.1:{self.port}"

    def stderr(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-4000:]

    def kill(self) -> None:
        """SIGKILL now (a crash, as the client sees it)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


def start(kind: str, *args: str, token: str | None = None, env: dict[str, str] | None = None) -> RemotePeer:
    """Start ``kind``'s server (``--number``, and ``--token`` when given) and wait for its port."""
    cmd = require(kind) + ["--number", *args]
    if token is not None:
        cmd += ["--token", token]
    full_env = {**os.environ, "ACP_CHUNK": "10", **(env or {})}
    log = tempfile.TemporaryFile()
    cwd = PEERS / "ts" if kind == "ts" else REPO
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, cwd=cwd,
                            env=full_env)
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            break
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
        if ready:
            byte = os.read(proc.stdout.fileno(), 1)
            if not byte:
                break
            line += byte
    if not line.strip().isdigit():
        peer = RemotePeer(kind, proc, 0, log)
        text = peer.stderr()
        peer.stop()
        raise RuntimeError(f"the {kind} remote server did not print its port (got {line!r}); stderr:\n{text}")
    return RemotePeer(kind, proc, int(line), log, token, list(args))
