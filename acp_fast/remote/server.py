"""The remote ACP server: an ASGI 3 application speaking Streamable HTTP and WebSocket.

One ACP connection per `Acp-Connection-Id`; each connection gets its own agent side from an
*opener* (an in-process builder, router or conductor on an in-memory stream pair, or a child
process for the gateway) and the server moves JSON lines between that stream and the network:

* `POST /acp` carries client→agent messages. The first one, `initialize` without a
  connection id, is answered 200 with the response as the body and the new
  `Acp-Connection-Id` header; every later POST names its connection and gets 202 while its
  replies go out on SSE.
* `GET /acp` with `Accept: text/event-stream` opens the connection stream, or a session's
  stream with `Acp-Session-Id`; events carry `id:` cursors and a reader that reconnects
  with `Last-Event-ID` is replayed what it missed, within a bounded window (409 outside).
* `DELETE /acp` ends the connection (its child is killed); a WebSocket upgrade on the same
  path is a connection for the socket's lifetime, one text frame per message or batch.
* `GET /health` answers 200.

Every message the server reads from the network goes through the engine's decoder: POST bodies
here (to route them and check their session), WebSocket frames in the agent connection's own
engine; malformed input is answered with a JSON-RPC error. An in-process agent (`asgi_app`)
gets a POST's frames as decoded here, not its bytes to decode again, wherever they are what
its own decoder would make of the line (same twin and limits; a line the server rewrote goes
as bytes). Lines the agent writes arrive in
coalesced chunks and leave as one SSE body chunk per stream per turn.

Security defaults ([`ServerPolicy`][acp_fast.remote.policy.ServerPolicy]; the access rules are checked by
its ASGI middleware, [`AccessGuard`][acp_fast.remote.policy.AccessGuard], which every [`AcpApp`][acp_fast.remote.server.AcpApp]
puts in front of itself): only loopback `Host` names (421 otherwise, the DNS-rebinding
guard) and no `Origin` (403 for any browser origin not listed), on every request and on the
upgrade; an optional bearer token (401, compared in constant time); a body
limit (413); a connection cap (503); bounded queues that pause the agent instead of growing or
dropping; an idle timeout for HTTP connections nobody reads; ids from `secrets.token_urlsafe`;
error bodies are fixed texts, never an agent's stderr or a traceback. No CORS headers are sent.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, Union, cast

from .. import _kinds
from .. import engine as _default_engine
from ..engine import Engine, encode_error
from ..errors import INTERNAL_ERROR
from ..tracing import Tracing, call_attributes, set_error, with_context
from ..tracing import parent_context as tracing_parent
from ..transport.child import ChildStream
from ..transport.memory import memory_pair
from ..transport.stream import Stream
from ._asgi import Endpoint, Receive, Scope, Send, WsLines, deny, error_body, respond
from ._outlet import Outlet, sse_chunk, ws_frames
from ._wire import (
    BATCH_FRAMES_HEADER,
    CONNECTION_ID_HEADER,
    CONTENT_TYPE_SSE,
    DEFAULT_MAX_BODY,
    DEFAULT_PATH,
    KEEPALIVE_SECONDS,
    id_key,
    params_session,
)
from ._requests import SSE_HEAD, checked_post, initialize_frame, post_line
from ._requests import disconnected as _disconnected
from .logs import EVENTS_LOGGER, short_id
from .policy import AccessGuard, ServerPolicy

if TYPE_CHECKING:
    from ..conductor.trace import Tracer
    from ..roles.streams import EngineChoice
    from .metrics import ServerMetrics

__all__ = [
    "AcpApp",
    "StreamOpener",
    "Servable",
    "asgi_app",
    "servable_opener",
]

logger = logging.getLogger("acp_fast.remote")
_events = logging.getLogger(EVENTS_LOGGER)

#: Opens the agent side of one new connection: a stream that reads and writes JSON lines.
StreamOpener = Callable[[], Awaitable[Stream]]


class Servable(Protocol):
    """Anything that serves one ACP connection on a stream: builders, routers, a `Conductor`."""

    def serve(self, transport: Stream, /) -> Awaitable[None]:
        """Serve one connection on `transport` until it closes."""
        ...


# -- one ACP connection -------------------------------------------------------------------------


_MALFORMED = _kinds.MALFORMED
_BATCHABLE = _kinds.BATCHABLE
_ZERO = itertools.repeat(0)
_ALONE = itertools.repeat(False)
_NO_ROUTE: tuple[None, None] = (None, None)
#: the frame kinds that hold no response (as bytes, to be deleted from a chunk's kinds)
_NOT_ANSWERS = bytes((_kinds.REQUEST, _kinds.NOTIFICATION, _kinds.MALFORMED))
#: how the engines start a call (a request or a notification)
_CALL = b'{"jsonrpc":"2.0","method":'
#: the start of a request, and of a response, as the engines write them: the id (a number
#: without fraction or exponent, or a string without escapes) and the method, or which member
_REQUEST_HEAD = re.compile(rb'\{"jsonrpc":"2\.0","id":(-?\d{1,15}|"[^"\\]*"),"method":"([^"\\]*)"')
_RESPONSE_HEAD = re.compile(rb'\{"jsonrpc":"2\.0","id":(-?\d{1,15}|"[^"\\]*"),"(result|error)":')


def _head_key(raw: bytes) -> tuple[bool, object]:
    """`id_key` of an id read by `_REQUEST_HEAD` or `_RESPONSE_HEAD`."""
    if raw[:1] == b'"':
        return True, raw[1:-1].decode("utf-8", "surrogateescape")
    return False, int(raw)


class _Connection:
    """One ACP connection: the agent's stream and what the network side has in flight."""

    #: a WebSocket's line splitter counts the calls among its lines (`LineSplitter.calls`)
    counts_calls = False

    def __init__(self, app: AcpApp, cid: str, stream: Stream, websocket: bool,
                 on_closed: Callable[[_Connection], None] | None = None, ws_batches: bool = False) -> None:
        #: called once the connection ends (the app forgets it)
        self.on_closed = on_closed
        self.id = cid
        self.stream = stream
        self.websocket = websocket
        self.policy = app.policy
        self.engine: Engine = app.engine
        self.closed = False
        self.agent_gone = False
        #: who ended the connection (see `close`), once it ended
        self.cause: str | None = None
        self.last_active = time.monotonic()
        # the agent's lines through the engine's decoder, each to its outlet (a WebSocket has
        # one: ``streams[None]``; HTTP routes by session to its SSE streams)
        self.max_line = limit = max(self.policy.max_body, 1 << 20)
        #: a WebSocket without batch frames sends each line alone, decoded or not: it only cuts
        #: lines (a splitter); every other outlet decodes them (a decoder)
        self.lines: Any = None
        self.decoder: Any = None
        if websocket and not ws_batches:
            self.lines = app.engine.LineSplitter(max_line_size=limit, count_calls=self.counts_calls)
        else:
            self.decoder = app.engine.Decoder(lazy=True, max_line_size=limit)
        self.routes: dict[tuple[bool, object], tuple[str | None, str | None]] = {}
        self.streams: dict[str | None, Outlet] = {None: Outlet(None)}
        self.sessions: set[str] = set()
        self.init_id: tuple[bool, object] | None = None
        self.sid_prefix: bytes | None = None  # the start of the last call whose session was read
        self.sid: object = None  # ... and that session
        self.init_reply: asyncio.Future[bytes] | None = None
        # an in-process agent that takes frames: its decoder, and the one POSTs decode with
        self.frame_sink: Any = None
        self.post_decoder: Any = None
        self.queued = 0
        self.paused = False
        self._ws_batches = ws_batches
        self.writable = asyncio.Event()
        self.writable.set()
        self.done = asyncio.Event()
        stream.attach(self._on_data, self._on_eof, self._on_writable)

    @property
    def ws_batches(self) -> bool:
        """The WebSocket client asked for batch frames (fixed when the connection opens)."""
        return self._ws_batches

    # agent side ----------------------------------------------------------------------------

    def _on_writable(self, ok: bool) -> None:
        if ok:
            self.writable.set()
        else:
            self.writable.clear()

    def _on_eof(self, exc: BaseException | None) -> None:
        self.agent_gone = True
        if self.cause is None:
            self.cause = "agent"
        if self.init_reply is not None and not self.init_reply.done():
            self.init_reply.set_exception(ConnectionError("the agent closed before answering initialize"))
        self.writable.set()
        for s in self.streams.values():
            s.end()
        self.done.set()
        if self.on_closed is not None:
            self.on_closed(self)

    def _on_data(self, data: bytes) -> None:
        """Queue the agent's lines on their outlets: over HTTP each message on its stream
        (`_route`), over a WebSocket all on the socket's; a notification or a response
        may share a batch frame with its neighbours (`grouped`)."""
        if self.websocket:
            self._ws_data(data)
            return
        size = 0
        socket = self.streams[None]
        for frame in self.decoder.feed(data):
            kind = frame.kind
            if kind == _MALFORMED:
                if frame.raw:
                    size += self._not_jsonrpc(frame.raw)
                else:  # a line over the size limit: never buffered, nothing to send
                    self._too_long()
                continue
            try:
                size += self._route(frame, kind)
            except ValueError:  # a payload that does not decode: still delivered, unrouted
                logger.warning("connection %s: agent message with an undecodable payload", self.id[:8])
                size += socket.put(frame.raw)
        if size:
            self._count(size)

    def _ws_data(self, data: bytes) -> None:
        """Queue the agent's lines on the socket's outlet, one pass per chunk: over batch
        frames each marked batchable by its kind, else each alone, undecoded. A line that is
        not JSON-RPC is never batchable, so it goes alone (`_not_jsonrpc`'s rule).
        A chunk of one line (a round trip's reply) builds no lists."""
        splitter = self.lines
        if splitter is not None:
            lines = splitter.feed(data)
            if len(lines) != 1:
                self._ws_queue(lines, None)
                return
            line = lines[0]
            batchable = False
        else:
            frames = self.decoder.feed(data)
            if len(frames) != 1:
                self._ws_queue([frame.raw for frame in frames], [_BATCHABLE[frame.kind] for frame in frames])
                return
            frame = frames[0]
            line = frame.raw
            batchable = _BATCHABLE[frame.kind]
        if line:
            self._count(self.streams[None].put(line, batchable))
        else:  # a line over the size limit: never buffered, nothing to send
            self._too_long()

    def _ws_queue(self, lines: list[bytes], flags: list[bool] | None) -> None:
        """Queue several lines (`flags`: each one batchable; `None`: none is) at once."""
        if not lines:
            return
        if not all(lines):  # a line over the size limit: never buffered, nothing to send
            self._too_long()
            keep = [i for i, line in enumerate(lines) if line]
            lines = [lines[i] for i in keep]
            if flags is not None:
                flags = [flags[i] for i in keep]
        size = sum(map(len, lines))
        if size:
            self.streams[None].extend(zip(_ZERO, lines, _ALONE if flags is None else flags), size)
            self._count(size)

    def _too_long(self) -> None:
        """Log an agent line over the size limit, which is dropped."""
        logger.warning("connection %s: agent line over %d bytes dropped", self.id[:8], self.max_line)

    def _not_jsonrpc(self, line: bytes) -> int:
        """The one rule, on every outlet, for a line of the agent that is not JSON-RPC: the
        client gets it as a pipe would give it, alone (never inside a batch), on the
        connection's own channel (the connection stream; the socket), so the client's engine
        answers it as on stdio (-32700 back to the agent; a malformed response is logged).
        Only what the outlet's text cannot carry changes: invalid UTF-8 in a text frame
        becomes U+FFFD, a CR in an event stream a tab. A line over the size limit is dropped
        (logged): its bytes were never kept. Returns the bytes queued."""
        return self.streams[None].put(line)

    def _route(self, frame: Any, kind: int) -> int:
        """Queue one message of the agent on its stream; returns the bytes queued."""
        line = frame.raw
        if kind == _kinds.BATCH:
            for entry in frame:
                if entry.kind == _kinds.RESPONSE:
                    self._answered(entry, id_key(entry.id))
            return self.streams[None].put(line)
        if kind == _kinds.RESPONSE:
            k = id_key(frame.id)
            if k == self.init_id and self.init_reply is not None:
                self.init_id = None
                if not self.init_reply.done():
                    self.init_reply.set_result(line)
                return 0
            route, method = self._answered(frame, k)
            if method is not None and method.startswith("session/") and frame.error is None:
                result = frame.result
                if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
                    self.sessions.add(result["sessionId"])
            return self._reply_stream(route).put(line, True)
        notification = kind == _kinds.NOTIFICATION
        prefix = self.sid_prefix
        if prefix is not None and line.startswith(prefix) and line.count(b'"sessionId"') == 1:
            sid: object = self.sid  # the same start as the last call's (a turn's updates)
        else:
            sid, self.sid_prefix = params_session(frame, line)
            self.sid = sid
        if isinstance(sid, str):
            self.sessions.add(sid)
            return self._stream_for(sid).put(line, notification)
        return self.streams[None].put(line, notification)

    def _answered(self, response: Any, key: tuple[bool, object]) -> tuple[str | None, str | None]:
        """The route and method of the client's request that `response` (its id `key`)
        answers, which is forgotten; `(None, None)` for an unknown id."""
        return self.routes.pop(key, _NO_ROUTE)

    # Every reply reaches a stream the client can read: a client may open a session's
    # stream once the agent has named the session or while a request naming it is in
    # flight (``may_open``); a reply goes to its request's session stream when the agent
    # named the session or a reader opened that stream, else to the connection stream (the
    # error for a session that does not exist: its stream never could be opened).

    def may_open(self, session: str | None) -> bool:
        """Whether a client may open `session`'s stream (`None`: the connection stream)."""
        return session is None or session in self.sessions or any(
            route == session for route, _ in self.routes.values())

    def _reply_stream(self, route: str | None) -> Outlet:
        """The stream of a reply to a request routed to `route` (see `may_open`)."""
        if route is not None and route not in self.sessions and route not in self.streams:
            route = None
        return self._stream_for(route)

    def _stream_for(self, session: str | None) -> Outlet:
        """The stream of `session` (made on first use: it queues until a reader opens it).

        Every message of a session goes to that session's stream, so its order is the
        agent's order whenever the reader opens it (a session's messages never split over
        two streams, which a client reads concurrently).
        """
        s = self.streams.get(session)
        if s is None:
            s = self.streams[session] = Outlet(session)
        return s

    def _count(self, size: int) -> None:
        self.queued += size
        if not self.paused and self.queued > self.policy.queue_high:
            self._pause()

    def sent(self, size: int) -> None:
        """`size` bytes left for the network: resume the agent below the low-water mark."""
        self.queued -= size
        self.last_active = time.monotonic()
        if self.paused and self.queued <= self.policy.queue_high // 4:
            self._resume()

    def _pause(self) -> None:
        """Pause the agent: the network side fell behind (`queue_high` queued)."""
        self.paused = True
        self.stream.pause_reading()

    def _resume(self) -> None:
        """Resume the agent: the network side caught up."""
        self.paused = False
        self.stream.resume_reading()

    def replied_in_body(self, key: tuple[bool, object], reply: bytes, failed: bool) -> None:
        """The agent's answer `reply` to `initialize` (id `key`; an error when `failed`) left
        as a POST's body."""

    # network side --------------------------------------------------------------------------

    async def write(self, lines: Iterable[bytes], frames: tuple[list[Any], object] | None = None) -> None:
        """Hand lines to the agent; waits while the agent is not reading (backpressure).

        With `frames` (the frames of the lines, and the in-process agent's decoder that
        makes them): the agent's connection gets those instead of decoding the bytes again."""
        self.last_active = time.monotonic()
        data = b"".join(lines)
        if data and not self.agent_gone:
            if frames is None:
                self.stream.write(data)
            else:
                self.stream.write_frames(data, *frames)
        if not self.writable.is_set():
            await self.writable.wait()

    def close(self, cause: str = "client") -> None:
        """End the connection: the agent's stream is closed (a child is killed), readers end.

        `cause` names who ended it (a metric's and a log's label): `client` (DELETE, the
        socket closed), `idle`, `init_failed` (its `initialize` failed), `too_big` (a WebSocket frame over
        the limit) or `shutdown`; an agent that ended first is `agent`."""
        if self.closed:
            return
        self.closed = True
        if self.cause is None:
            self.cause = cause
        for s in self.streams.values():
            s.end()
        self.writable.set()
        self.stream.close()
        if self.on_closed is not None:
            self.on_closed(self)


class _MeteredConnection(_Connection):
    """A connection of an app with metrics: the same paths, counting as they go (plain
    integers, read when scraped: [`Metered`][acp_fast.remote.metrics.Metered]).

    Messages out are the outlets' own event counters (plus what leaves several at a time on
    a socket, and the `initialize` answer). A client's request is remembered with its start
    time as it goes to the agent; its response is found where the server routes it (HTTP),
    or, on a WebSocket, while requests are in flight, among the lines the socket's splitter
    makes of a chunk: a chunk whose lines all start as the engines start a call
    (`{"jsonrpc":"2.0","method":`, which no response does; the splitter counts them as it
    splits) is not looked at, and in another such a line is skipped, any other decoded (with
    batch frames, the decoder's frames say their kind)."""

    counts_calls = True

    def __init__(self, app: AcpApp, cid: str, stream: Stream, websocket: bool, metrics: ServerMetrics,
                 on_closed: Callable[[_Connection], None] | None = None, ws_batches: bool = False) -> None:
        self.transport = "websocket" if websocket else "http"
        self.in_messages = self.in_bytes = self.out_bytes = self.pauses = 0
        self.paused_seconds = 0.0
        self.paused_since: float | None = None
        self.metrics = metrics
        #: the client's requests in flight: their method and start time, by id
        self.pending: dict[tuple[bool, object], tuple[str, float]] = {}
        self._more = 0  # messages out that no outlet counted (several at once on a socket; initialize's answer)
        super().__init__(app, cid, stream, websocket, on_closed, ws_batches)
        self._peek = app.engine.Decoder(lazy=True, max_line_size=self.max_line)
        if websocket and self.lines is not None:  # split once, and watched for responses
            self.lines = _ResponseWatch(self.lines, self)

    @property
    def out_messages(self) -> int:
        """Messages from the agent to the client (a batch is one)."""
        return sum(s.next_id for s in self.streams.values()) - len(self.streams) + self._more

    async def write(self, lines: Iterable[bytes], frames: tuple[list[Any], object] | None = None) -> None:
        data = b"".join(lines)
        self.in_messages += 1
        self.in_bytes += len(data) - 1  # without the line end
        head = _REQUEST_HEAD.match(data)
        if head is not None:  # a request as the engines write it: read from its start
            self.pending[_head_key(head.group(1))] = (head.group(2).decode("utf-8", "replace"), time.monotonic())
        elif b'"method"' in data:
            now = time.monotonic()
            for frame in self._peek.feed(data):
                for entry in (frame if frame.kind == _kinds.BATCH else (frame,)):
                    if entry.kind == _kinds.REQUEST:
                        self.pending[id_key(entry.id)] = (entry.method, now)
        await super().write((data,), frames)

    def _done(self, key: tuple[bool, object], failed: bool) -> None:
        """The request `key` was answered (with an error when `failed`), if it was pending."""
        start = self.pending.pop(key, None)
        if start is not None:
            self.metrics.request(start[0], "error" if failed else "ok", time.monotonic() - start[1])

    def _answered(self, response: Any, key: tuple[bool, object]) -> tuple[str | None, str | None]:
        self._done(key, response.error is not None)
        return super()._answered(response, key)

    def replied_in_body(self, key: tuple[bool, object], reply: bytes, failed: bool) -> None:
        self._more += 1
        self.out_bytes += len(reply)
        self._done(key, failed)

    def _ws_data(self, data: bytes) -> None:
        if self.lines is not None or not self.pending:
            super()._ws_data(data)
            return
        # batch frames with requests in flight: each frame's kind read once, for the
        # responses among them and for the outlet (the same queueing as the base's)
        frames = self.decoder.feed(data)
        kinds = [frame.kind for frame in frames]
        if bytes(kinds).translate(None, _NOT_ANSWERS):  # a response or a batch among them
            self._frames_done(frames)
        self._ws_queue([frame.raw for frame in frames], [_BATCHABLE[kind] for kind in kinds])

    def found(self, out: list[bytes]) -> None:
        """Record the responses to pending requests among the lines the WebSocket's splitter
        made of a chunk of the agent's output (`_ResponseWatch`)."""
        for line in out:
            if not line or line.startswith(_CALL):
                continue
            head = _RESPONSE_HEAD.match(line)
            if head is not None:  # a response as the engines write it: read from its start
                self._done(_head_key(head.group(1)), head.group(2) == b"error")
            else:
                self._frames_done(self._peek.feed(line + b"\n"))

    def _frames_done(self, frames: list[Any]) -> None:
        """Record the responses among `frames` (batches looked into)."""
        for frame in frames:
            for entry in (frame if frame.kind == _kinds.BATCH else (frame,)):
                if entry.kind == _kinds.RESPONSE:
                    self._done(id_key(entry.id), entry.error is not None)

    def _ws_queue(self, lines: list[bytes], flags: list[bool] | None) -> None:
        self._more += len(lines) if all(lines) else len(lines) - lines.count(b"")
        super()._ws_queue(lines, flags)

    def sent(self, size: int) -> None:
        self.out_bytes += size
        super().sent(size)

    def _pause(self) -> None:
        self.pauses += 1
        self.paused_since = time.monotonic()
        super()._pause()

    def _resume(self) -> None:
        if self.paused_since is not None:
            self.paused_seconds += time.monotonic() - self.paused_since
            self.paused_since = None
        super()._resume()


class _ResponseWatch:
    """A WebSocket connection's line splitter, whose output its metered connection looks
    through for responses while requests are in flight."""

    __slots__ = ("inner", "conn")

    def __init__(self, inner: Any, conn: _MeteredConnection) -> None:
        self.inner = inner
        self.conn = conn

    def feed(self, data: bytes) -> list[bytes]:
        """What the inner splitter makes of `data`."""
        out: list[bytes] = self.inner.feed(data)
        if self.conn.pending and self.inner.calls != len(out):
            self.conn.found(out)  # (the splitter counts the calls it made: none else, no response)
        return out


class _TracedConnection(_Connection):
    """A connection whose messages are written to a trace file in the conductor's format
    ([`acp_fast.conductor.trace`][acp_fast.conductor.trace]: `Client` and `Agent`), one file
    per connection; every message is decoded for it, so it costs what the forwarding
    otherwise avoids (a debugging aid). Combines with the metrics (`_TracedMeteredConnection`)."""

    tracer: Tracer
    _in_decoder: Any
    _out_decoder: Any

    def start_trace(self, tracer: Tracer) -> None:
        """Write this connection's messages with `tracer` from now on."""
        self.tracer = tracer
        self._in_decoder = self.engine.Decoder(lazy=True, max_line_size=self.max_line)
        self._out_decoder = self.engine.Decoder(lazy=True, max_line_size=self.max_line)

    def _traced(self, frames: list[Any], src: str, dst: str) -> None:
        tracer = self.tracer
        for frame in frames:
            for entry in (frame if frame.kind == _kinds.BATCH else (frame,)):
                kind = entry.kind
                if kind == _kinds.REQUEST or kind == _kinds.NOTIFICATION:
                    tracer.call(src, dst, entry.id if kind == _kinds.REQUEST else None, entry.method,
                                entry.params, kind == _kinds.REQUEST)
                elif kind == _kinds.RESPONSE:
                    tracer.response(src, dst, entry.id, entry.error, entry.result)

    async def write(self, lines: Iterable[bytes], frames: tuple[list[Any], object] | None = None) -> None:
        data = b"".join(lines)
        self._traced(self._in_decoder.feed(data), "Client", "Agent")
        await super().write((data,), frames)

    def _on_data(self, data: bytes) -> None:
        self._traced(self._out_decoder.feed(data), "Agent", "Client")
        super()._on_data(data)


class _TracedMeteredConnection(_TracedConnection, _MeteredConnection):
    """A connection with both a trace and metrics."""


class _OtelConnection(_Connection):
    """A connection that opens an OpenTelemetry span per request it relays to the agent
    (`acp-fast serve --otel`; see [`acp_fast.tracing`][acp_fast.tracing]).

    The span continues the context in the request's `params._meta` (when it is a valid
    W3C `traceparent`) and the request goes on to the agent with the span's own context in
    its `_meta` instead, re-encoded (a request inside a batch gets a span but goes on as it
    came); the span ends when the agent's answer passes (its error code, if any, recorded),
    or when the connection closes. Notifications pass untouched and get no span. Every
    line each way is split and its kind read for this (no params decoded but a request's),
    so this costs what the forwarding otherwise avoids: it is chosen per app, once.
    Combines with the metrics and the trace file (the class is made per combination)."""

    otel: Tracing
    _otel_in: Any
    _otel_out: Any
    _otel_spans: dict[tuple[bool, object], Any]

    def start_otel(self, tracing: Tracing) -> None:
        """Open spans with `tracing` from now on."""
        self.otel = tracing
        self._otel_spans = {}
        self._otel_in = self.engine.Decoder(lazy=True, max_line_size=self.max_line)
        self._otel_out = self.engine.Decoder(lazy=True, max_line_size=self.max_line)

    def _relayed(self, frame: Any) -> bytes:
        """Open the span of one request frame; the line to hand on (with the span's context)."""
        from opentelemetry.trace import SpanKind

        try:
            params = frame.params
        except ValueError:
            return bytes(frame.raw)
        method = frame.method
        span = self.otel.tracer.start_span(method, context=tracing_parent(params), kind=SpanKind.SERVER,
                                           attributes=call_attributes(method, frame.id, params))
        span.set_attribute("acp.connection.id", short_id(self.id))
        self._otel_spans[id_key(frame.id)] = span
        new = with_context(params, span)
        if new is params:
            return bytes(frame.raw)
        return json.dumps({"jsonrpc": "2.0", "id": frame.id, "method": method, "params": new},
                          separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")

    async def write(self, lines: Iterable[bytes], frames: tuple[list[Any], object] | None = None) -> None:
        data = b"".join(lines)
        out: list[bytes] = []
        changed = False
        for frame in self._otel_in.feed(data):
            kind = frame.kind
            if kind == _kinds.REQUEST:
                line = self._relayed(frame)
                changed = changed or line != frame.raw
                out.append(line)
                continue
            if kind == _kinds.BATCH:
                for entry in frame:
                    if entry.kind == _kinds.REQUEST:
                        self._relayed(entry)
            out.append(bytes(frame.raw))
        if changed:
            data = b"\n".join(out) + b"\n"
            frames = None  # an in-process agent decodes the new bytes
        await super().write((data,), frames)

    def _on_data(self, data: bytes) -> None:
        spans = self._otel_spans
        for frame in self._otel_out.feed(data):
            for entry in (frame if frame.kind == _kinds.BATCH else (frame,)):
                if entry.kind == _kinds.RESPONSE and spans:
                    span = spans.pop(id_key(entry.id), None)
                    if span is not None:
                        error = entry.error
                        if isinstance(error, dict) and isinstance(error.get("code"), int):
                            set_error(span, error["code"], error.get("message"))
                        span.end()
        super()._on_data(data)

    def end_spans(self) -> None:
        """End the spans of requests still unanswered (the connection closed)."""
        spans, self._otel_spans = self._otel_spans, {}
        for span in spans.values():
            set_error(span, INTERNAL_ERROR, "connection closed before the answer")
            span.end()


_OTEL_CLASSES: dict[type[_Connection], type[_OtelConnection]] = {}


def _with_otel(base: type[_Connection]) -> type[_OtelConnection]:
    """`base` with `_OtelConnection`'s spans (one class per base, made once)."""
    cls = _OTEL_CLASSES.get(base)
    if cls is None:
        cls = _OTEL_CLASSES[base] = cast("type[_OtelConnection]",
                                         type(f"_Otel{base.__name__.lstrip('_')}", (_OtelConnection, base), {}))
    return cls


# -- the application ----------------------------------------------------------------------------


class AcpApp(Endpoint):
    """An ASGI 3 application serving ACP over Streamable HTTP and WebSocket.

    Args:
        opener: opens the agent side of each new connection (see [`asgi_app`][acp_fast.remote.server.asgi_app] for a
            builder, router or conductor, and [`acp_fast.remote.gateway_app`][acp_fast.remote.gateway_app]
            for a command).
        path: the endpoint path (`/acp`); `/health` answers beside it.
        policy: limits and access rules ([`ServerPolicy`][acp_fast.remote.server.ServerPolicy]; secure defaults).
        engine: the engine module that decodes POST bodies and the agent's output (the
            active twin by default; tests pass each twin).
        metrics: where to count what the server does
            ([`ServerMetrics`][acp_fast.remote.metrics.ServerMetrics]; `None`, the default,
            counts nothing and costs nothing).
        otel: OpenTelemetry tracing of the relayed requests ([`Tracing`][acp_fast.tracing.Tracing]:
            a span per request, its context passed on in the request's `_meta`; `None`, the
            default, traces nothing and costs nothing).
        trace_dir: a directory where each connection's messages are written, one file per
            connection (`<opened>-<short id>.jsonl`, UTC), in the conductor's trace format
            (`acp-fast trace view FILE`); `None` (the default) traces nothing. Every message
            is then decoded: a debugging aid, not for production load.

    Connection events (open, close, refusal, agent exit, resume) are logged on the
    `acp_fast.remote.events` logger at INFO ([`acp_fast.remote.logs`][acp_fast.remote.logs]) when
    that level is enabled as the app is made.

    Mount it in Starlette or FastAPI (`app.mount("/agents", acp)`, then the endpoint is
    `/agents/acp`) or serve it directly with uvicorn or hypercorn.
    """

    def __init__(self, opener: StreamOpener, *, path: str = DEFAULT_PATH, policy: ServerPolicy | None = None,
                 engine: Engine | None = None, metrics: ServerMetrics | None = None,
                 trace_dir: str | os.PathLike[str] | None = None, otel: Tracing | None = None) -> None:
        if not path.startswith("/"):
            raise ValueError(f"path must start with '/': {path!r}")
        self.opener = opener
        self.path = path.rstrip("/") or "/"
        self.policy = policy if policy is not None else ServerPolicy()
        #: The engine twin that decodes what the network sends and what the agent writes.
        self.engine: Engine = engine if engine is not None else cast(Engine, _default_engine)
        self._conns: dict[str, _Connection] = {}
        self._opening = 0
        self._reaper: asyncio.Task[None] | None = None
        #: where the server counts what it does (`None`: nowhere)
        self.metrics = metrics
        #: where each connection's trace is written (`None`: nowhere)
        self.trace_dir = None if trace_dir is None else os.fspath(trace_dir)
        #: how relayed requests are traced with OpenTelemetry (`None`: not at all)
        self.otel = otel
        # refusals and agent exits are watched for the metrics or the event log
        self._observed = metrics is not None or _events.isEnabledFor(logging.INFO)
        self._watchers: set[asyncio.Task[None]] = set()
        self._guarded = AccessGuard(self.dispatch, self.policy, paths=(self.path,),
                                    on_refusal=self._refused if self._observed else None)

    @property
    def connections(self) -> int:
        """How many ACP connections are open."""
        return len(self._conns)

    def _forget(self, conn: _Connection) -> None:
        if self._conns.get(conn.id) is conn:
            del self._conns[conn.id]
            if not conn.closed:
                conn.close()
            cause = conn.cause or "client"
            if isinstance(conn, _MeteredConnection):
                for method, _ in conn.pending.values():
                    conn.metrics.request(method, "unanswered", None)
                conn.pending.clear()
                conn.metrics.closed(conn, cause)
            if isinstance(conn, _TracedConnection):
                conn.tracer.close()
            if isinstance(conn, _OtelConnection):
                conn.end_spans()
            _event("close", conn.id, "connection closed", cause=cause)

    def _refused(self, status: int, why: str, cid: str | None = None) -> None:
        """Count and log a request answered with an HTTP error status."""
        if self.metrics is not None:
            self.metrics.refused(status)
        _event("refusal", cid, f"refused with {status}", status=status, reason=why)

    async def _watch_child(self, conn: _Connection, child: ChildStream) -> None:
        """Count and log how the agent child of `conn` ended, with its stderr tail."""
        status = await child.wait_exit()
        if conn.cause not in (None, "agent"):
            cause = "stopped"
        elif status is not None and status < 0:
            cause = "signal"
        else:
            cause = "failed" if status else "exited"
        if self.metrics is not None:
            self.metrics.agent_exited(cause)
        _event("agent_exit", conn.id, f"agent process {child.pid} ended: {cause}", cause=cause, status=status,
               stderr_tail=child.stderr_tail.decode("utf-8", "replace"))

    async def aclose(self) -> None:
        """Close every connection (and its agent)."""
        conns = list(self._conns.values())
        for c in conns:
            c.close("shutdown")
        for c in conns:
            try:
                await asyncio.wait_for(c.stream.wait_closed(), 5.0)
            except (asyncio.TimeoutError, Exception):  # noqa: PERF203 - shutdown, best effort
                pass
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None

    async def _open(self, websocket: bool, ws_batches: bool = False) -> _Connection | None:
        if len(self._conns) + self._opening >= self.policy.max_connections:
            return None
        self._opening += 1
        try:
            stream = await self.opener()
        finally:
            self._opening -= 1
        cid = secrets.token_urlsafe(24)
        conn: _Connection
        if self.metrics is not None:
            metered: type[_MeteredConnection] = (_MeteredConnection if self.trace_dir is None
                                                 else _TracedMeteredConnection)
            if self.otel is not None:
                metered = cast("type[_MeteredConnection]", _with_otel(metered))
            conn = metered(self, cid, stream, websocket, self.metrics, on_closed=self._forget, ws_batches=ws_batches)
            self.metrics.opened(conn)
        else:
            plain: type[_Connection] = _Connection if self.trace_dir is None else _TracedConnection
            if self.otel is not None:
                plain = _with_otel(plain)
            conn = plain(self, cid, stream, websocket, on_closed=self._forget, ws_batches=ws_batches)
        if isinstance(conn, _OtelConnection) and self.otel is not None:
            conn.start_otel(self.otel)
        if isinstance(conn, _TracedConnection):
            from ..conductor.trace import Tracer

            opened = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            conn.start_trace(Tracer(os.path.join(self.trace_dir or ".", f"{opened}-{short_id(cid)}.jsonl")))
        self._conns[cid] = conn
        if self._observed and isinstance(stream, ChildStream):
            watcher = asyncio.ensure_future(self._watch_child(conn, stream))
            self._watchers.add(watcher)
            watcher.add_done_callback(self._watchers.discard)
        _event("open", cid, "connection opened", transport="websocket" if websocket else "http")
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())
        return conn

    async def _reap(self) -> None:
        timeout = self.policy.idle_timeout
        while self._conns:
            await asyncio.sleep(min(timeout / 4, 30.0))
            now = time.monotonic()
            for c in list(self._conns.values()):
                if c.websocket:
                    continue
                if any(s.reader is not None for s in c.streams.values()):
                    c.last_active = now
                elif now - c.last_active > timeout:
                    logger.info("connection %s idle for %.0f s: closed", c.id[:8], timeout)
                    c.close("idle")

    # ASGI entry -----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._guarded(scope, receive, send)

    async def http(self, method: str, headers: Mapping[bytes, bytes], receive: Receive, send: Send) -> None:
        # behind the access guard (dispatch): what reaches here passed the policy's rules
        if self._observed:
            send = _StatusTap(send, self._refused, method, headers.get(CONNECTION_ID_HEADER.lower().encode()))
        if method == "POST":
            await self._post(headers, receive, send)
        elif method == "GET":
            await self._get(headers, receive, send)
        elif method == "DELETE":
            conn = await self._named(headers, send)
            if conn is not None:
                conn.close("client")
                await respond(send, 202, b"")
        else:
            await respond(send, 405, error_body(405, "method not allowed"),
                           extra=[(b"allow", b"GET, POST, DELETE")])

    async def _named(self, headers: Mapping[bytes, bytes], send: Send, *,
                     streamable: bool = False) -> _Connection | None:
        """The connection a request names, or `None` once the refusal is sent (400 without an
        id, 404 for an unknown one; with `streamable`, 400 for a WebSocket connection)."""
        raw = headers.get(CONNECTION_ID_HEADER.lower().encode())
        if raw is None:
            await respond(send, 400, error_body(400, f"missing {CONNECTION_ID_HEADER} header"))
            return None
        conn = self._conns.get(raw.decode("latin-1"))
        if conn is None:
            await respond(send, 404, error_body(
                404, f"unknown {CONNECTION_ID_HEADER}: closed, expired, or owned by another server "
                     f"process (route requests by {CONNECTION_ID_HEADER})"))
            return None
        if streamable and conn.websocket:
            await respond(send, 400, error_body(400, "this connection is a WebSocket"))
            return None
        return conn

    # POST -----------------------------------------------------------------------------------

    async def _post(self, headers: Mapping[bytes, bytes], receive: Receive, send: Send) -> None:
        line = await post_line(headers, receive, send, self.policy.max_body)
        if line is None:
            return
        cid = headers.get(CONNECTION_ID_HEADER.lower().encode())
        if cid is None:
            await self._initialize(line, send)
            return
        conn = await self._named(headers, send, streamable=True)
        if conn is None:
            return
        decoder, sink = self._post_decoder(conn)
        frames = decoder.feed(line + b"\n")
        checked = await checked_post(frames, headers, self.engine, send)
        if checked is None:
            return
        out, rewritten, requests = checked
        for entry, route in requests:
            conn.routes[id_key(entry.id)] = (route, entry.method)
        if sink is not None and not rewritten and len(out) <= sink.max_line_size:
            await conn.write((out, b"\n"), (frames, sink))  # the agent's decoder would make these
        else:
            await conn.write((out, b"\n"))
        await respond(send, 202, b"")

    def _post_decoder(self, conn: _Connection) -> tuple[Any, Any]:
        """The decoder of one POST body, and the in-process agent's decoder that its frames
        may go to undecoded again (`None`: the agent gets the bytes).

        Frames go only where they are what the agent's own decoder would make of the line:
        the agent takes frames ([`Stream.accept_frames`][acp_fast.transport.Stream.accept_frames]) with a decoder of this twin and
        the same depth and batch limits; the body is then decoded as that decoder decodes
        (eager or lazy); the line limit stays the POST's, and a line over the agent's own
        goes as bytes (see `_post`). Found once per connection: should the agent's
        consumer change later, the stream hands it the bytes (`Stream.write_frames`)."""
        if conn.frame_sink is not None:
            return conn.post_decoder, conn.frame_sink
        engine = self.engine
        limit = self.policy.max_body + 1
        sink = conn.stream.peer_frame_decoder
        decoder_type: Any = engine.Decoder  # each twin's own class (the seam types it as a factory)
        if isinstance(sink, decoder_type):
            decoder = engine.Decoder(lazy=sink.lazy, max_line_size=limit)
            if decoder.max_depth == sink.max_depth and decoder.max_batch_size == sink.max_batch_size:
                conn.frame_sink, conn.post_decoder = sink, decoder  # whole lines only: reusable
                return decoder, sink
        return engine.Decoder(lazy=True, max_line_size=limit), None

    async def _initialize(self, line: bytes, send: Send) -> None:
        frame = await initialize_frame(line, self.engine, self.policy.max_body, send)
        if frame is None:
            return
        conn = await self._open(websocket=False)
        if conn is None:
            await respond(send, 503, error_body(503, "too many connections"))
            return
        conn.init_id = id_key(frame.id)
        conn.init_reply = asyncio.get_running_loop().create_future()
        await conn.write([line + b"\n"])
        try:
            reply = await asyncio.wait_for(conn.init_reply, self.policy.initialize_timeout)
        except asyncio.TimeoutError:
            conn.close("init_failed")
            await respond(send, 504, error_body(504, "the agent did not answer initialize in time"))
            return
        except ConnectionError:
            conn.close("init_failed")
            await respond(send, 200, encode_error(frame.id, INTERNAL_ERROR, "the agent closed before answering"))
            return
        failed = b'"error"' in reply and self.engine.Decoder(lazy=True).feed(reply + b"\n")[0].error is not None
        conn.replied_in_body(id_key(frame.id), reply, failed)
        if failed:
            conn.close("init_failed")
            await respond(send, 200, reply + b"\n")
            return
        await respond(send, 200, reply + b"\n", extra=[(CONNECTION_ID_HEADER.lower().encode(), conn.id.encode())])

    # GET (SSE) ------------------------------------------------------------------------------

    async def _get(self, headers: Mapping[bytes, bytes], receive: Receive, send: Send) -> None:
        if CONTENT_TYPE_SSE.encode() not in headers.get(b"accept", b""):
            await respond(send, 406, error_body(406, f"Accept must include {CONTENT_TYPE_SSE}"))
            return
        conn = await self._named(headers, send, streamable=True)
        if conn is None:
            return
        raw_session = headers.get(b"acp-session-id")
        key = raw_session.decode("utf-8", "replace") if raw_session is not None else None
        if not conn.may_open(key):
            await respond(send, 404, error_body(404, "unknown session"))
            return
        events = conn.streams.get(key)
        if events is None:
            events = conn.streams[key] = Outlet(key)
        last = headers.get(b"last-event-id")
        if events.reader is not None and last is None:
            await respond(send, 409, error_body(409, "this stream already has a reader"))
            return
        # a reader that resumes takes the stream over from one still attached: after a silent
        # network loss the old response has not failed yet (it ends at its next turn)
        if last is not None:
            try:
                ok = self.policy.replay_window > 0 and events.rewind(int(last))
            except ValueError:
                ok = False
            if self.metrics is not None:
                self.metrics.resumed(ok)
            _event("resume", conn.id, "SSE reader resumed" if ok else "SSE resume refused", served=ok,
                   session=key is not None)
            if not ok:
                await respond(send, 409, error_body(409, "cannot resume from that Last-Event-ID"))
                return
        token = object()
        events.reader = token
        events.wake.set()  # a reader taken over sees it at once
        try:
            await self._stream(conn, events, token, receive, _StatusTap.untapped(send),
                               headers.get(BATCH_FRAMES_HEADER.lower().encode()) == b"1")
        finally:
            if events.reader is token:
                events.reader = None
            conn.last_active = time.monotonic()

    async def _stream(self, conn: _Connection, events: Outlet, token: object, receive: Receive,
                      send: Send, batches: bool) -> None:
        head = list(SSE_HEAD)
        if batches:
            head.append((BATCH_FRAMES_HEADER.lower().encode(), b"1"))
        await send({"type": "http.response.start", "status": 200, "headers": head})
        gone = asyncio.ensure_future(_disconnected(receive))
        window = self.policy.replay_window
        keepalive = self.policy.keepalive
        try:
            while True:
                if events.reader is not token:
                    break  # taken over by a reader that resumed
                if events.queue:
                    items, size = events.take(window)
                    chunk = sse_chunk(items, bool(window), batches)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    conn.sent(size)
                    continue
                if events.ended or gone.done():
                    break
                events.wake.clear()
                waker = asyncio.ensure_future(events.wake.wait())
                done, _ = await asyncio.wait({waker, gone}, timeout=keepalive, return_when=asyncio.FIRST_COMPLETED)
                if waker not in done:
                    waker.cancel()
                if not done:
                    await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})
            if not gone.done():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass
        finally:
            gone.cancel()

    # WebSocket ------------------------------------------------------------------------------

    async def websocket(self, scope: Scope, headers: Mapping[bytes, bytes], path: str, receive: Receive,
                        send: Send) -> None:
        first = await receive()
        if first["type"] != "websocket.connect":
            return
        if path != self.path:
            if self._observed:
                self._refused(404, "not found")
            await deny(scope, send, 404, "not found")
            return
        batches = headers.get(BATCH_FRAMES_HEADER.lower().encode()) == b"1"
        conn = await self._open(websocket=True, ws_batches=batches)
        if conn is None:
            if self._observed:
                self._refused(503, "too many connections")
            await deny(scope, send, 503, "too many connections")
            return
        accept = [(CONNECTION_ID_HEADER.lower().encode(), conn.id.encode())]
        if batches:
            accept.append((BATCH_FRAMES_HEADER.lower().encode(), b"1"))
        await send({"type": "websocket.accept", "headers": accept})
        sender = asyncio.ensure_future(self._ws_send(conn, send))
        lines = WsLines(receive, self.policy.max_body)
        try:
            while (line := await lines.next()) is not None:
                await conn.write((line, b"\n"))
                if conn.closed:
                    break
        finally:
            code = lines.code
            conn.close("too_big" if code == 1009 else "client")
            if code == 1009 and self._observed:
                self._refused(413, "WebSocket frame over the limit", conn.id)
            try:
                await asyncio.wait_for(sender, 10.0)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - the socket is gone
                sender.cancel()
            if code != 1000:
                try:
                    await send({"type": "websocket.close", "code": code})
                except Exception:  # noqa: BLE001 - already closed
                    pass

    async def _ws_send(self, conn: _Connection, send: Send) -> None:
        outlet = conn.streams[None]
        try:
            while True:
                if outlet.queue:
                    items, size = outlet.take(0)
                    for text in ws_frames(items, conn.ws_batches):
                        await send({"type": "websocket.send", "text": text})
                    conn.sent(size)
                    continue
                if outlet.ended:
                    break
                outlet.wake.clear()
                await outlet.wake.wait()
            if conn.agent_gone:  # the agent ended the connection: tell the client at once
                await send({"type": "websocket.close", "code": 1011, "reason": "agent closed"})
        except Exception:  # noqa: BLE001 - the client went away; the receiver ends the connection
            pass


def _event(name: str, cid: str | None, message: str, **fields: object) -> None:
    """Log one connection event (see [`acp_fast.remote.logs`][acp_fast.remote.logs])."""
    if _events.isEnabledFor(logging.INFO):
        _events.info(message, extra={"event": name, "connection": short_id(cid) if cid else None, **fields})


class _StatusTap:
    """An ASGI `send` that reports an HTTP error status (>= 400) as it starts the response."""

    __slots__ = ("inner", "report", "method", "cid")

    def __init__(self, inner: Send, report: Callable[[int, str, str | None], None], method: str,
                 cid: bytes | None) -> None:
        self.inner = inner
        self.report = report
        self.method = method
        self.cid = cid

    def __call__(self, message: dict[str, Any]) -> Awaitable[None]:
        if message["type"] == "http.response.start" and message["status"] >= 400:
            self.report(message["status"], f"{self.method} answered {message['status']}",
                        None if self.cid is None else self.cid.decode("latin-1"))
        return self.inner(message)  # the inner send's own awaitable: no coroutine of the tap's

    @staticmethod
    def untapped(send: Send) -> Send:
        """`send` itself, or the one a tap wraps (a stream's body chunks pass no tap)."""
        return send.inner if isinstance(send, _StatusTap) else send


# -- building apps --------------------------------------------------------------------------------


Target = Union[Servable, Callable[[Stream], Awaitable[None]]]


def asgi_app(target: Target, *, path: str = DEFAULT_PATH, policy: ServerPolicy | None = None,
             engine: EngineChoice = None, metrics: ServerMetrics | None = None,
             trace_dir: str | os.PathLike[str] | None = None, otel: Tracing | None = None) -> AcpApp:
    """An ASGI app serving `target` to remote clients, one in-process connection each.

    Args:
        target: an agent builder (`Agent.v2()…`), a router (`Agent.protocol_router()…`), a
            `Conductor`, or a coroutine function `serve(stream)`; each remote connection
            runs it on its own in-memory stream.
        path: the endpoint path.
        policy: limits and access rules ([`ServerPolicy`][acp_fast.remote.server.ServerPolicy]).
        engine: the engine twin for builders and routers (`"c"`, `"py"`, an engine module,
            or `None` for the selected one); the server decodes with the same twin.
        metrics: where to count what the server does (`None`: nowhere; see
            [`ServerMetrics`][acp_fast.remote.metrics.ServerMetrics]).
        trace_dir: where to write each connection's trace (see [`AcpApp`][acp_fast.remote.server.AcpApp]).
        otel: OpenTelemetry spans of the relayed requests (see [`AcpApp`][acp_fast.remote.server.AcpApp]).

    Raises:
        ValueError: `engine` is none of those.
        TypeError: `target` is neither something with `serve` nor a function.

    Example:

    ```python
    from acp_fast.remote import asgi_app
    app = asgi_app(agent)          # uvicorn module:app
    ```
    """
    opener, twin = servable_opener(target, engine)
    return AcpApp(opener, path=path, policy=policy, engine=twin, metrics=metrics, trace_dir=trace_dir, otel=otel)


def servable_opener(target: Target, engine: EngineChoice = None) -> tuple[StreamOpener, Engine | None]:
    """The opener that runs `target` in-process on a new in-memory stream pair per call, and
    the engine twin it serves with (what [`asgi_app`][acp_fast.remote.server.asgi_app] serves; an agent host too).

    Raises:
        ValueError: `engine` is not an engine choice.
        TypeError: `target` is neither something with `serve` nor a function.
    """
    from ..roles.streams import engine_twin  # the roles load with what they serve, not before

    twin = None if engine is None else engine_twin(engine)
    serve = getattr(target, "serve", None)
    run: Callable[[Stream], Awaitable[None]]
    if serve is not None:
        if engine is not None:
            run = lambda s: serve(s, engine=engine)  # noqa: E731
        else:
            run = serve
    elif callable(target):
        run = target
    else:
        raise TypeError(f"asgi_app needs a builder, router, conductor or serve(stream) function, not {target!r}")
    tasks: set[asyncio.Task[None]] = set()

    async def opener() -> Stream:
        agent_side, server_side = memory_pair()
        task = asyncio.ensure_future(_serve_logged(run, agent_side))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return server_side

    return opener, twin


async def _serve_logged(run: Callable[[Stream], Awaitable[None]], stream: Stream) -> None:
    try:
        await run(stream)
    except Exception:
        logger.exception("the in-process agent of a remote connection failed")
    finally:
        stream.close()
