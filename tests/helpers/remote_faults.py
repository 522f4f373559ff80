"""Network faults for the remote transport's tests, made deterministic.

* :class:`CutSse` — ASGI middleware around an :class:`~acp_fast.remote.AcpApp` that
  cuts the first SSE response of a session stream in the middle of an event, after a given
  number of whole events: the bytes up to there reach the client, then the response stops
  without its end (the client sees a broken chunked body, as when a network path is lost).
  The app's own sender sees the failure first (an ``OSError`` from ``send``, which it treats
  as the reader gone), so the stream has no reader any more before the client can notice.
* :class:`TcpProxy` — a TCP forwarder on 127.0.0.1 whose :meth:`TcpProxy.kill` drops every
  connection and stops listening: the server is gone for the client, at a chosen moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_EVENT_END = re.compile(rb"\n\n")
_ID_LINE = re.compile(rb"(?m)^id: ?([^\r\n]*)$")


class CutSse:
    """Cut the first SSE GET of a session stream after ``after`` whole events, inside the next.

    Attributes:
        gets: the headers (lower-case names) of every SSE GET, in order.
        cut_after: the ``id:`` of the last whole event sent before the cut (``None``: no id
            had been sent on that stream yet, or no cut yet).
        cut: set once the cut happened.
    """

    def __init__(self, app: Any, *, after: int, batches: bool = False) -> None:
        self.app = app
        #: ``False``: the client's ``Acp-Batch-Frames`` opt-in is taken off the GETs, so the
        #: server sends one event per message and ``after`` counts messages too.
        self.batches = batches
        self.path = app.path
        self.after = after
        self.gets: list[dict[str, str]] = []
        self.cut_after: str | None = None
        self.cut = asyncio.Event()
        self._armed = True

    def session_gets(self) -> list[dict[str, str]]:
        """The headers of the SSE GETs of session streams."""
        return [h for h in self.gets if "acp-session-id" in h]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        if "text/event-stream" not in headers.get("accept", ""):
            await self.app(scope, receive, send)
            return
        self.gets.append(headers)
        if not self.batches:
            scope = {**scope, "headers": [(k, v) for k, v in scope.get("headers", ())
                                          if k.lower() != b"acp-batch-frames"]}
        if not self._armed or "acp-session-id" not in headers:
            await self.app(scope, receive, send)
            return
        self._armed = False
        await self.app(scope, receive, self._cutting(send))

    def _cutting(self, send: Send) -> Send:
        whole = 0  # whole events passed on

        async def cutting(message: dict[str, Any]) -> None:
            nonlocal whole
            body = message.get("body", b"") if message["type"] == "http.response.body" else b""
            if self.cut.is_set():
                raise OSError("cut by the test")
            ends = [m.end() for m in _EVENT_END.finditer(body)]
            if whole + len(ends) <= self.after:
                whole += len(ends)
                self._note_ids(body)
                await send(message)
                return
            keep = ends[self.after - whole - 1] if self.after > whole else 0
            data_at = body.index(b"\ndata: ", keep)  # inside the next event: its id line is sent
            partial = body[:data_at + 10]
            assert len(partial) < ends[self.after - whole], "the cut must fall inside an event"
            self._note_ids(body[:keep])
            await send({"type": "http.response.body", "body": partial, "more_body": True})
            self.cut.set()
            raise OSError("cut by the test")  # the app's sender: the reader is gone

        return cutting

    def _note_ids(self, data: bytes) -> None:
        ids = _ID_LINE.findall(data)
        if ids:
            self.cut_after = ids[-1].decode()


class TcpProxy:
    """Forward connections to ``127.0.0.1:target``; :meth:`kill` makes the server gone."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> TcpProxy:
        """Listen on a free port of 127.0.0.1 (:attr:`port`)."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def url(self, path: str = "/acp") -> str:
        """The proxy's ``http://`` URL."""
        return f"http://127.0.0.1:{self.port}{path}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        await asyncio.gather(_pipe(reader, up_writer, self), _pipe(up_reader, writer, self), return_exceptions=True)

    #: Set by :meth:`freeze`: bytes are read and dropped, connections stay open (a network
    #: path that died silently).
    frozen = False

    def freeze(self) -> None:
        """Stop forwarding anything, keeping every connection open."""
        self.frozen = True

    def kill(self) -> None:
        """Stop listening (new connections are refused) and abort every open connection."""
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    async def aclose(self) -> None:
        """Kill, then wait until the listening socket is closed."""
        self.kill()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)


class ConnectProxy(TcpProxy):
    """An HTTP ``CONNECT`` proxy on 127.0.0.1 that tunnels to 127.0.0.1 only; records the
    targets it was asked for (:attr:`asked`)."""

    def __init__(self) -> None:
        super().__init__(0)
        self.asked: list[str] = []

    def url(self, path: str = "") -> str:
        """The proxy's address, as a ``*_proxy`` environment variable names it."""
        return f"http://127.0.0.1:{self.port}{path}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        head = await reader.readuntil(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        host, _, port = target.rpartition(":")
        if method != "CONNECT" or host != "127.0.0.1":
            writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
            writer.close()
            return
        self.asked.append(target)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", int(port))
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(_pipe(reader, up_writer, self), _pipe(up_reader, writer, self), return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, proxy: TcpProxy | None = None) -> None:
    try:
        while data := await reader.read(65536):
            if proxy is not None and proxy.frozen:
                continue
            writer.write(data)
            await writer.drain()
    finally:
        writer.transport.abort()
