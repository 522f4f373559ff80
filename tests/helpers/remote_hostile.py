"""Agents and servers for the remote layer's hostile-input tests (not a test module).

* :class:`RawAgents` — an :class:`~acp_fast.remote.AcpApp` opener whose agents are
  the test itself: each connection's agent side (:class:`RawAgent`) records the lines it is
  given, answers ``initialize`` and writes whatever the test tells it to.
* :class:`HostileServer` — an ASGI app that speaks just enough Streamable HTTP and WebSocket
  for our client (``initialize`` answered, ``_test/echo`` answered on the stream) and sends
  the client the hostile events or frames it was given first; it records every POST body
  and text frame the client sends.
* :class:`HostileHttp` — a raw HTTP/1.1 server whose replies to POSTs are broken bytes.
* :func:`gateway_children` — the gateway's live ``testy`` children of a process.
* :func:`log_trap` — the fuzz script's :class:`LogTrap` (records with a traceback or at
  ERROR), attached while a ``with`` block runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from raw_http import ACCEPTED, SSE_HEAD, RawHttp, initialize_reply, sse_event

from acp_fast.transport.memory import memory_pair
from acp_fast.transport.stream import Stream

REPO = Path(__file__).resolve().parent.parent.parent

__all__ = ["HostileHttp", "HostileServer", "RawAgent", "RawAgents", "fuzz_script", "log_trap", "gateway_children"]


def gateway_children(pid: int) -> list[int]:
    """The live child processes of ``pid`` running ``testy`` (the gateway's agents)."""
    import psutil

    found = []
    for p in psutil.Process(pid).children():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "testy" in p.cmdline():
                found.append(p.pid)
        except psutil.Error:
            pass
    return found


def fuzz_script() -> ModuleType:
    """``scripts/fuzz_remote.py``, imported by path."""
    spec = importlib.util.spec_from_file_location("_script_fuzz_remote", REPO / "scripts" / "fuzz_remote.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def log_trap() -> Iterator[list[str]]:
    """The records with a traceback or at ERROR logged while the block runs (attach it once
    the ASGI server runs: uvicorn configures its loggers when it starts)."""
    trap = fuzz_script().LogTrap()
    trap.attach()
    try:
        yield trap.bad
    finally:
        trap.detach()


class RawAgent:
    """One connection's agent side: :attr:`lines` holds every line it was given."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.lines: list[bytes] = []
        self._buf = b""
        self._new = asyncio.Event()
        #: Set when the server closed the agent's stream.
        self.eof = asyncio.Event()
        stream.attach(self._on_data, lambda exc: self.eof.set(), lambda ok: None)

    def _on_data(self, data: bytes) -> None:
        *lines, self._buf = (self._buf + data).split(b"\n")
        for line in lines:
            self.lines.append(line)
            if b'"initialize"' in line:
                ident = json.loads(line)["id"]
                self.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": {"protocolVersion": 1}}).encode())
        self._new.set()

    def write(self, *lines: bytes) -> None:
        """Write ``lines`` as the agent, in one chunk."""
        self.stream.write(b"".join(line + b"\n" for line in lines))

    async def until(self, pred: Callable[[bytes], bool]) -> bytes:
        """The first line given to the agent that ``pred`` accepts (waiting for it)."""
        while True:
            for line in self.lines:
                if pred(line):
                    return line
            self._new.clear()
            await self._new.wait()


class RawAgents:
    """An opener for :class:`~acp_fast.remote.AcpApp`: :attr:`agents` gets each
    connection's :class:`RawAgent`."""

    def __init__(self) -> None:
        self.agents: asyncio.Queue[RawAgent] = asyncio.Queue()

    async def __call__(self) -> Stream:
        ours, theirs = memory_pair()
        self.agents.put_nowait(RawAgent(theirs))
        return ours


class HostileServer:
    """A server that sends our client ``hostile`` (raw SSE ``data`` payloads, or WebSocket
    messages: ``bytes`` go as binary frames) right after ``initialize``, then answers every
    ``_test/echo`` with its params. :attr:`received` holds what the client sent after
    ``initialize`` (POST bodies, text frames)."""

    path = "/acp"

    def __init__(self, hostile: list[Any]) -> None:
        self.hostile = hostile
        self.received: list[bytes] = []
        self._sse: asyncio.Queue[bytes] = asyncio.Queue()

    def _answer(self, body: bytes) -> bytes | None:
        m = json.loads(body)
        if isinstance(m, dict) and m.get("method") == "_test/echo":
            return json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": m.get("params", {})}).encode()
        return None

    @staticmethod
    def _init_reply(body: bytes) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": json.loads(body)["id"],
                           "result": {"protocolVersion": 1}}).encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await self._websocket(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _websocket(self, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept", "headers": [(b"acp-connection-id", b"hostile")]})
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return
            body = message["text"].encode()
            if b'"initialize"' in body:
                await send({"type": "websocket.send", "text": self._init_reply(body).decode()})
                for item in self.hostile:
                    key = "bytes" if isinstance(item, bytes) else "text"
                    await send({"type": "websocket.send", key: item})
                continue
            self.received.append(body)
            reply = self._answer(body)
            if reply is not None:
                await send({"type": "websocket.send", "text": reply.decode()})

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        method = scope["method"]
        if method == "GET":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            for item in self.hostile:
                await send({"type": "http.response.body", "body": b"data: " + item + b"\n\n", "more_body": True})
            while True:
                line = await self._sse.get()
                await send({"type": "http.response.body", "body": b"data: " + line + b"\n\n", "more_body": True})
        if method == "POST" and b'"initialize"' in body:
            reply = self._init_reply(body)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"), (b"acp-connection-id", b"hostile")]})
            await send({"type": "http.response.body", "body": reply})
            return
        if method == "POST":
            self.received.append(body)
            answer = self._answer(body)
            if answer is not None:
                self._sse.put_nowait(answer)
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})


class HostileHttp(RawHttp):
    """A raw HTTP/1.1 server for one Streamable HTTP connection whose POST replies are the
    given raw bytes, one per POST after ``initialize`` (each on a connection it then closes),
    and then well-formed: 202, with the answer to a ``_test/echo`` sent on the SSE stream.
    Serve it with ``asyncio.start_server(server.handle, "127.0.0.1", 0)``."""

    def __init__(self, replies: list[bytes]) -> None:
        self.replies = list(replies)
        self._sse: asyncio.Queue[bytes] = asyncio.Queue()

    async def answer(self, method: str, headers: dict[str, str], body: bytes, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> bool:
        if method == "GET":
            writer.write(SSE_HEAD)
            while True:
                writer.write(sse_event(await self._sse.get()))
                await writer.drain()
        if method == "POST" and b'"initialize"' in body:
            initialize_reply(writer, HostileServer._init_reply(body))
        elif method == "POST" and self.replies:
            writer.write(self.replies.pop(0))
            await writer.drain()
            return False
        else:
            m = json.loads(body) if body else {}
            if m.get("method") == "_test/echo":
                self._sse.put_nowait(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {}}).encode())
            writer.write(ACCEPTED)
        return True
