"""Shared helpers of the role/session tests (not a test module).

* :func:`run` runs one async test body under ``asyncio.run`` with a hang guard (a hang is
  reported as a failure, never measured);
* :func:`open_agent` connects to an agent of ``tests/helpers/roles_agent.py`` over an
  in-memory pair (served in this process) or over a real child process on stdio;
* :class:`RawPeer` reads and writes raw lines on a stream, for wire-level assertions.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from acp_fast.transport import Stream, memory_pair, spawn
from package_path import pythonpath

HELPERS = Path(__file__).resolve().parent
REPO = HELPERS.parent.parent
AGENT_SCRIPT = HELPERS / "roles_agent.py"
HANG_GUARD = 30.0  # seconds; only turns a hang into a failure


def run(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(fn(*args), HANG_GUARD)

    return asyncio.run(guarded())


def agent_env(engine: ModuleType) -> dict[str, str]:
    return {"PYTHONPATH": pythonpath(), "ACP_FAST_TEST_ENGINE": engine.IMPLEMENTATION}


_SERVERS: set[asyncio.Task[Any]] = set()


def serve_in_memory(agent: Any, engine: ModuleType) -> Stream:
    """Serve ``agent`` on one end of a memory pair; returns the other end."""
    a, b = memory_pair()
    task = asyncio.ensure_future(agent.serve(a, engine=engine))
    _SERVERS.add(task)
    task.add_done_callback(_SERVERS.discard)
    return b


async def open_agent(kind: str, mode: str, engine: ModuleType,
                     record: dict[str, Any] | None = None) -> Stream:
    """A stream to a ``roles_agent`` agent of ``mode`` over ``kind`` (memory | child)."""
    if kind == "memory":
        import roles_agent  # type: ignore[import-not-found]

        return serve_in_memory(roles_agent.build(mode, record), engine)
    return await spawn([sys.executable, str(AGENT_SCRIPT), mode], env=agent_env(engine))


class RawPeer:
    """The far end of a stream, speaking raw JSON lines (for wire-level tests)."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self._buf = b""
        self.lines: asyncio.Queue[Any] = asyncio.Queue()
        self.eof = asyncio.get_running_loop().create_future()
        stream.attach(self._data, self._eof, lambda writable: None)

    def _data(self, data: bytes) -> None:
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            if line.strip():
                self.lines.put_nowait(json.loads(line))

    def _eof(self, exc: Any) -> None:
        if not self.eof.done():
            self.eof.set_result(exc)
        self.lines.put_nowait(EOFError)

    def send(self, obj: Any) -> None:
        self.stream.write(json.dumps(obj).encode() + b"\n")

    def send_raw(self, line: bytes) -> None:
        self.stream.write(line + b"\n")

    async def recv(self) -> Any:
        item = await self.lines.get()
        if item is EOFError:
            raise EOFError("peer closed the stream")
        return item

    async def request(self, rid: Any, method: str, params: Any = None) -> Any:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return await self.recv()

    def notify(self, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    async def closed(self) -> None:
        """Wait for EOF from the other side (after any remaining lines)."""
        await self.eof


def v2_init(version: int = 2, **extra: Any) -> dict[str, Any]:
    return {"protocolVersion": version, "info": {"name": "raw-client", "version": "0"}, **extra}


def v1_init(version: int = 1, **extra: Any) -> dict[str, Any]:
    return {"protocolVersion": version, "clientInfo": {"name": "raw-client", "version": "0"}, **extra}
