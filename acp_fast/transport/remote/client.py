"""The remote client transport: :func:`connect_url` over Streamable HTTP or WebSocket.

``connect_url(url)`` returns a :class:`~acp_fast.transport.Stream` like every other transport
helper, so ``async with Client.v2().connect(connect_url("ws://127.0.0.1:8000/acp")) as cx``
works as it does over stdio. The scheme picks the wire (``notes``: remote.md): ``ws``/``wss``
a WebSocket (the ``websockets`` package), ``http``/``https`` Streamable HTTP (``httpx``, HTTP/2
where the server offers it over TLS). A bare base URL gets ``/acp`` appended.

Design: :func:`~acp_fast.transport.memory_pair` gives two connected streams; the caller gets
one, a *bridge* attaches to the other and moves bytes between it and the network. Lines the
connection writes arrive at the bridge in chunks; messages from the network are written to
the connection as single lines (:func:`~acp_fast.transport.remote._wire.one_line`), so the
connection's own engine decodes and validates them. The WebSocket bridge is the socket's
protocol itself (websockets' sans-I/O layer frames and parses; no task or queue per message;
through a proxy named by the environment, websockets' asyncio client instead); Streamable
HTTP POSTs and SSE GETs go over lean keep-alive HTTP/1.1 connections (:mod:`._plainhttp`)
unless HTTP/2 or a proxy is in play (httpx then).

Bounds and backpressure:

* Incoming: the bridge reads the network only while the connection reads what it was given
  (the stream's ``writing_paused``); the SSE parser and the WebSocket frame size are bounded
  by ``max_message_size``.
* Outgoing: messages wait in the bridge until the network takes them; above
  :data:`SEND_HIGH_WATER` queued bytes it stops reading from the connection (whose writers
  then wait) and resumes below :data:`SEND_LOW_WATER`. A message over ``max_message_size``
  ends the stream with an error instead (the server would refuse it anyway).

Resuming: every SSE stream (the connection's, each session's) remembers the ``id:`` of the
last event it delivered; when it drops or ends while the connection is open, it is opened
again with ``Last-Event-ID`` after each of :data:`RESUME_DELAYS` in turn, so the server
replays exactly what came after that event: none lost, none twice. A stream that drops
before its first event resumes from :data:`START_CURSOR` once another stream of the
connection has carried ids. A server that sends no ids is not resumed from (nothing would
say what was missed).

Ending: the network side ending is EOF on the stream, so the connection's pending requests
fail at once: the WebSocket closing; the connection's SSE stream ending without a cursor;
any SSE stream failing without one, or whose resume the server refuses (409: it cannot
resume from that event; 404: the connection is gone), or whose resume attempts all fail.
After a failure the connection's ``transport_error`` is a :class:`RemoteConnectionLost`
that names it. The connection closing its stream makes the bridge flush what is queued (at
most :data:`CLOSE_TIMEOUT` seconds), end the HTTP connection with ``DELETE`` or close the
WebSocket, and stop; the stream's ``wait_closed()`` returns only after that. WebSocket
compression is not offered: a compressed read could inflate to far more than its size.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

from ... import _version
from ..._kinds import BATCH, MALFORMED, REQUEST, RESPONSE
from ...engine import Decoder, encode_error
from ..memory import memory_pair
from ..stream import Stream, _DuplexProtocol
from ._wire import (
    BATCH_FRAMES_HEADER,
    CONNECTION_ID_HEADER,
    CONTENT_TYPE_JSON,
    CONTENT_TYPE_SSE,
    DEFAULT_MAX_BODY,
    DEFAULT_PATH,
    LAST_EVENT_ID_HEADER,
    SESSION_ID_HEADER,
    SseParser,
    one_line,
    require_extra,
)

if TYPE_CHECKING:
    import httpx
    from websockets.asyncio.client import ClientConnection

    from ...engine import Message
    from ...jsontypes import RequestId
    from ._plainhttp import Reply, StreamedReply

__all__ = [
    "CLOSE_TIMEOUT",
    "RESUME_DELAYS",
    "RESUME_STABLE",
    "RESUME_TIMEOUT",
    "SEND_HIGH_WATER",
    "SEND_LOW_WATER",
    "START_CURSOR",
    "RemoteConnectError",
    "RemoteConnectionLost",
    "connect_url",
    "resolve_url",
]

logger = logging.getLogger("acp_fast.transport.remote")

#: Bytes of outgoing messages not yet sent above which the bridge stops reading from the
#: connection (the connection's writers then wait) ...
SEND_HIGH_WATER = 256 * 1024
#: ... and below which it reads again.
SEND_LOW_WATER = 64 * 1024
#: Seconds that closing may take: flushing queued messages, then the ``DELETE`` or the
#: WebSocket closing handshake.
CLOSE_TIMEOUT = 3.0
#: Agent requests whose session is remembered so that the answer's POST names it.
MAX_ROUTES = 4096
#: Session SSE streams open at once (each is a long-lived request).
MAX_SESSION_STREAMS = 256
#: Bytes of a refused request's body quoted in the error delivered for it.
BODY_QUOTE = 512
#: Seconds before each attempt to resume a dropped SSE stream with ``Last-Event-ID``: one
#: attempt per entry, then the connection ends. A resumed stream that delivers an event (or
#: stays open :data:`RESUME_STABLE` seconds) earns the full set again.
RESUME_DELAYS = (0.05, 0.2, 0.5)
#: Seconds a resume attempt may take to connect and receive the response's head.
RESUME_TIMEOUT = 5.0
#: Seconds after which a resumed stream that delivered nothing counts as working again.
RESUME_STABLE = 5.0
#: ``Last-Event-ID`` for a stream that dropped before its first event, when the connection's
#: other streams carry ids: acp_fast's server numbers each stream's events from 1, so ``0``
#: asks for all of them (409 once they are no longer kept).
START_CURSOR = "0"
_INTERNAL_ERROR = -32603
_SCHEMES = {"http": "http", "https": "http", "ws": "websocket", "wss": "websocket"}

_T = TypeVar("_T")


class RemoteConnectError(ConnectionError):
    """The remote endpoint could not be reached, or refused the WebSocket handshake.

    Attributes:
        status: the HTTP status of a refused handshake (``401``, ``403``, ...), else ``None``.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RemoteConnectionLost(RemoteConnectError):
    """A remote connection ended on a failure, which the message names. Streamable HTTP: an
    SSE stream refused, or failed with no event id to resume from, or whose resume the server
    refused (409: it cannot resume from the last event seen; 404: the connection is gone),
    or whose resume attempts (:data:`RESUME_DELAYS`) all failed. WebSocket: the socket
    failed, or a ping got no pong within :data:`PING_TIMEOUT`. It is the connection's
    ``transport_error`` once the stream has ended.

    Attributes:
        status: the HTTP status that refused the resume, else ``None``.
    """


def resolve_url(url: str) -> tuple[str, str]:
    """``(kind, url)`` for an endpoint URL: kind ``"http"`` or ``"websocket"``; a bare base
    URL (empty path or ``/``) gets ``/acp`` appended.

    Raises:
        ValueError: a scheme other than ``http``, ``https``, ``ws``, ``wss``, or no host.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    kind = _SCHEMES.get(scheme)
    if kind is None:
        raise ValueError(f"unsupported URL scheme {parts.scheme!r} in {url!r}: use http, https, ws or wss")
    if not parts.hostname:
        raise ValueError(f"no host in {url!r}")
    path = parts.path if parts.path not in ("", "/") else DEFAULT_PATH
    return kind, urlunsplit((scheme, parts.netloc, path, parts.query, ""))


async def connect_url(url: str, *, headers: Mapping[str, str] | None = None, token: str | None = None,
                      http2: bool = True, max_message_size: int = DEFAULT_MAX_BODY,
                      connect_timeout: float = 10.0) -> Stream:
    """Open an ACP client transport to a remote agent; returns the stream to connect on.

    Args:
        url: ``ws://``/``wss://`` for a WebSocket, ``http://``/``https://`` for Streamable
            HTTP; ``/acp`` is appended to a bare base URL.
        headers: extra headers for every request (and the WebSocket handshake).
        token: sent as ``Authorization: Bearer <token>`` on every request and the handshake.
        http2: let httpx speak HTTP/2 where the server offers it (over TLS).
        max_message_size: the largest message either way, in bytes (an SSE event, a
            response body, a WebSocket frame, an outgoing line).
        connect_timeout: seconds to establish a network connection (the WebSocket
            handshake included); once connected, reads have no timeout.

    A WebSocket is opened before this returns. Streamable HTTP does no I/O until the
    connection sends ``initialize``, its first message: an HTTP refusal of it (401, 404,
    ...) fails that ``initialize`` call with a -32603 error naming the status.

    Raises:
        ValueError: an unsupported scheme, or no host.
        MissingExtraError: ``httpx`` (with ``h2`` when ``http2``) or ``websockets`` is not
            installed (``pip install 'acp-fast[remote]'``).
        RemoteConnectError: the WebSocket could not be opened (refused, timed out, the
            handshake answered with an HTTP status).
    """
    kind, target = resolve_url(url)
    if max_message_size <= 0:
        raise ValueError("max_message_size must be positive")
    hdrs = dict(headers or {})
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    if kind == "websocket":
        require_extra("websockets")
        hdrs = {**hdrs, BATCH_FRAMES_HEADER: "1"}
        if _ws_proxied(target):
            return await _ProxiedWebSocketBridge.open(target, hdrs, max_message_size, connect_timeout)
        return await _WebSocketLink.open(target, hdrs, max_message_size, connect_timeout)
    require_extra("httpx", "h11", *(("h2",) if http2 else ()))
    return _HttpBridge(target, hdrs, http2, max_message_size, connect_timeout).start()


# ---------------------------------------------------------------------------------------
# The bridge: one end of a memory pair on one side, the network on the other
# ---------------------------------------------------------------------------------------


class _Lane(Generic[_T]):
    """Outgoing items sent in order by one task; ``busy`` while the head is being sent."""

    __slots__ = ("items", "ready", "busy")

    def __init__(self) -> None:
        self.items: collections.deque[tuple[_T, int]] = collections.deque()
        self.ready = asyncio.Event()
        self.busy = False


class _RemoteStream(Stream):
    """The caller's end of the pair (a :class:`Stream` whose class is switched to this one):
    closing it reaches the bridge even while the bridge is not reading, and ``wait_closed()``
    returns once the bridge has ended its network side too."""

    bridge: _Bridge

    def close(self) -> None:
        super().close()
        self.bridge.caller_closed()

    async def wait_closed(self) -> None:
        await super().wait_closed()
        await asyncio.shield(self.bridge.done)

    def set_extra(self, name: str, value: Any) -> None:
        """Answer ``get_extra_info(name)`` with ``value``."""
        self._extra[name] = value

    def _eof(self, exc: BaseException | None) -> None:
        # The memory pair ends without an error; the bridge knows why the network side ended.
        super()._eof(exc if exc is not None else self.bridge.failure)


class _Bridge:
    """What both wires share: the memory pair, backpressure both ways, the tasks, closing."""

    def __init__(self, kind: str, url: str, max_message_size: int) -> None:
        self._url = url
        self._max = max_message_size
        a, self._b = memory_pair()
        a.__class__ = _RemoteStream
        self._a = cast(_RemoteStream, a)
        self._a.bridge = self
        self._a.set_extra("url", url)
        self._a.set_extra("transport", kind)
        #: Set once the bridge has ended (its tasks and its network side).
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._draining = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._lanes: list[_Lane[Any]] = []
        self._queued = 0
        self._paused = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closer: asyncio.Task[None] | None = None
        #: Why the network side failed (set before the EOF it causes), else ``None``.
        self.failure: RemoteConnectionLost | None = None

    def start(self) -> Stream:
        """Attach to the bridge's end of the pair; returns the caller's end."""
        self._b.attach(self._on_data, self._on_eof, self._on_writable)
        return self._a

    # -- the connection's side ----------------------------------------------------------

    def _on_data(self, data: bytes) -> None:
        raise NotImplementedError

    def _on_eof(self, exc: BaseException | None) -> None:
        self._shutdown("the connection closed the stream", flush=True)

    def caller_closed(self) -> None:
        """The caller closed its end: read what it wrote before (reading again if the
        network's backlog had paused it); its EOF follows that and starts the closing."""
        self._draining = True
        if self._paused:
            self._paused = False
            self._b.resume_reading()

    def _on_writable(self, writable: bool) -> None:
        if writable:
            self._writable.set()
        else:
            self._writable.clear()

    async def _until_writable(self) -> None:
        """Wait while the connection is not reading what the bridge gave it."""
        if not self._writable.is_set():
            await self._writable.wait()

    def _deliver(self, data: bytes) -> None:
        """Give bytes (whole lines) to the connection."""
        self._b.write(data)

    # -- outgoing queue -----------------------------------------------------------------

    def _enqueue(self, lane: _Lane[_T], item: _T, size: int) -> None:
        lane.items.append((item, size))
        lane.ready.set()
        self._idle.clear()
        self._queued += size
        if not self._paused and not self._draining and self._queued > SEND_HIGH_WATER:
            self._paused = True
            self._b.pause_reading()

    async def _drain(self, lane: _Lane[_T], send: Callable[[_T], Awaitable[None]]) -> None:
        """Send ``lane``'s items in order with ``await send(item)``, forever."""
        while True:
            while not lane.items:
                lane.ready.clear()
                if not any(other.items or other.busy for other in self._lanes):
                    self._idle.set()
                await lane.ready.wait()
            item, size = lane.items[0]
            lane.busy = True
            try:
                await send(item)
            finally:
                lane.busy = False
                lane.items.popleft()
                self._queued -= size
                if self._paused and self._queued <= SEND_LOW_WATER:
                    self._paused = False
                    self._b.resume_reading()

    # -- tasks and closing --------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            logger.error("remote transport task failed (%s)", self._url, exc_info=exc)
            self._lost(f"failed: {exc!r}")

    def _lost(self, reason: str) -> None:
        """The network side ended: EOF to the connection now, then close."""
        if self._closer is None:
            logger.info("remote ACP connection to %s ended: %s", self._url, reason)
        self._b.close()
        self._shutdown(reason, flush=False)

    def _fatal(self, reason: str) -> None:
        logger.error("remote ACP connection to %s: %s", self._url, reason)
        self._lost(reason)

    def _shutdown(self, reason: str, *, flush: bool) -> None:
        if self._closer is None:
            self._closer = asyncio.get_running_loop().create_task(self._close(flush))

    async def _close(self, flush: bool) -> None:
        try:
            flushed = True
            if flush and self._lanes:
                try:
                    await asyncio.wait_for(self._idle.wait(), CLOSE_TIMEOUT)
                except asyncio.TimeoutError:
                    flushed = False
                    logger.warning("remote ACP connection to %s: closing with unsent messages", self._url)
            self._b.close()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            try:
                await asyncio.wait_for(self._close_network(flushed), CLOSE_TIMEOUT + 1.0)
            except (asyncio.TimeoutError, Exception) as exc:  # best effort: the peer may be gone
                logger.debug("remote ACP connection to %s: closing the network side: %r", self._url, exc)
        finally:
            self._b.close()
            if not self.done.done():
                self.done.set_result(None)

    async def _close_network(self, flushed: bool) -> None:
        """End the network side (``flushed``: everything queued was sent)."""
        raise NotImplementedError


# ---------------------------------------------------------------------------------------
# WebSocket
# ---------------------------------------------------------------------------------------


def _whole_lines(partial: bytes, data: bytes, limit: int) -> tuple[list[bytes], bytes, str | None]:
    """Split what the connection wrote into its whole non-empty lines (``partial`` is the
    unfinished line of the last write); returns the lines, the new unfinished line, and why
    the stream must end (a line over ``limit`` bytes; only the lines before it are returned)."""
    if partial:
        data = partial + data
    lines = data.split(b"\n")
    tail = lines.pop()
    for i, line in enumerate(lines):
        if len(line) > limit:
            return [x for x in lines[:i] if x], b"", \
                f"an outgoing message of {len(line)} bytes is over max_message_size ({limit})"
    if len(tail) > limit:
        return [x for x in lines if x], b"", f"an outgoing message is over max_message_size ({limit})"
    return [x for x in lines if x], tail, None


#: Seconds between the client's pings on a quiet WebSocket, and that a pong may take before
#: the connection counts as lost (a network path that died silently).
PING_INTERVAL = 20.0
PING_TIMEOUT = 20.0


def _ws_proxied(url: str) -> bool:
    """Whether the environment names a proxy for ``url`` (websockets ≥ 15 would use it)."""
    try:
        from websockets.proxy import get_proxy
        from websockets.uri import parse_uri
    except ImportError:  # an older websockets: no proxy support either way
        return False
    return get_proxy(parse_uri(url)) is not None


class _WebSocketLink(asyncio.Protocol):
    """A WebSocket as the stream's own transport: websockets' sans-I/O protocol frames and
    parses inside the socket's callbacks, with no memory pair, task or queue in between.

    To the socket it is the protocol; to the :class:`~acp_fast.transport.Stream` it is the
    transport (``write``, ``pause_reading``, ``close``, ...). Outgoing: each line the
    connection writes becomes a text frame, the frames of one write leave in one socket
    write, and the socket's buffer limits are the stream's (the connection is told when it
    fills). Incoming: the text messages of one read reach the connection as one chunk of
    lines (a batch frame stays one line); binary frames are ignored; pausing the stream
    pauses the socket. The client pings a quiet socket every :data:`PING_INTERVAL` seconds;
    no pong within :data:`PING_TIMEOUT` ends it with a :class:`RemoteConnectionLost`.
    Closing sends a close frame and waits up to :data:`CLOSE_TIMEOUT` for the server's.
    """

    def __init__(self, url: str, max_message_size: int, headers: dict[str, str], stream: Stream) -> None:
        from websockets.client import ClientProtocol
        from websockets.uri import parse_uri

        loop = asyncio.get_running_loop()
        self._loop = loop
        self._url = url
        self._max = max_message_size
        self._headers = headers
        self._stream = stream
        self._glue = _DuplexProtocol(stream)
        self._proto = ClientProtocol(parse_uri(url), max_size=max_message_size)
        self._socket: asyncio.Transport | None = None
        self._handshake: asyncio.Future[None] = loop.create_future()
        self._opened = False  # the stream has this link as its transport
        self._early: list[bytes] = []  # lines that came with the handshake's response
        self._partial = b""
        self._fragments: list[bytes] | None = None  # a fragmented text message being joined
        self._closing = False
        self._closer: asyncio.TimerHandle | None = None
        self._heard = 0.0  # loop time of the last bytes from the server
        self._ping: asyncio.TimerHandle | None = None
        self._ping_sent: float | None = None
        self._failure: RemoteConnectionLost | None = None

    @classmethod
    async def open(cls, url: str, headers: dict[str, str], max_message_size: int,
                   connect_timeout: float) -> Stream:
        import ssl

        from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI
        from websockets.uri import parse_uri

        try:
            uri = parse_uri(url)
        except InvalidURI as exc:
            raise ValueError(f"invalid WebSocket URL {url!r}: {exc}") from exc
        loop = asyncio.get_running_loop()
        stream = Stream(loop)
        link = cls(url, max_message_size, headers, stream)
        context = ssl.create_default_context() if uri.secure else None

        async def opening() -> None:
            await loop.create_connection(lambda: link, uri.host, uri.port, ssl=context,
                                         server_hostname=uri.host if context is not None else None)
            await link._handshake

        try:
            await asyncio.wait_for(opening(), connect_timeout)
        except InvalidStatus as exc:
            link._abort()
            status = exc.response.status_code
            raise RemoteConnectError(
                f"the WebSocket handshake with {url} was refused: HTTP {status} {exc.response.reason_phrase}",
                status) from exc
        except (OSError, asyncio.TimeoutError, InvalidHandshake) as exc:
            link._abort()
            raise RemoteConnectError(f"cannot open a WebSocket to {url}: {exc or type(exc).__name__}") from exc
        except BaseException:
            link._abort()
            raise
        stream._extra.update(url=url, transport="websocket")
        link._opened = True
        link._glue.connection_made(link)  # type: ignore[arg-type]  # the stream's transport
        if link._early:
            early, link._early = link._early, []
            link._glue.data_received(b"".join(early))
        link._arm_ping()
        return stream

    def _abort(self) -> None:
        if self._socket is not None:
            self._socket.abort()

    # -- the socket's protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._socket = cast(asyncio.Transport, transport)
        request = self._proto.connect()
        request.headers["User-Agent"] = f"acp-fast/{_version.__version__}"
        for name, value in self._headers.items():
            request.headers[name] = value
        self._proto.send_request(request)
        self._flush()

    def data_received(self, data: bytes) -> None:
        from websockets.frames import Frame, Opcode
        from websockets.http11 import Response

        self._heard = self._loop.time()
        self._ping_sent = None
        proto = self._proto
        proto.receive_data(data)
        lines: list[bytes] = []
        for event in proto.events_received():
            if type(event) is Response:
                self._answered(event)
                continue
            frame = cast(Frame, event)
            opcode = frame.opcode
            if opcode is Opcode.TEXT:
                if frame.fin:
                    self._line(bytes(frame.data), lines)
                else:
                    self._fragments = [bytes(frame.data)]
            elif opcode is Opcode.CONT:
                if self._fragments is not None:
                    self._fragments.append(bytes(frame.data))
                    if frame.fin:
                        self._line(b"".join(self._fragments), lines)
                        self._fragments = None
            elif opcode is Opcode.BINARY:
                self._fragments = None  # binary messages carry no ACP messages
        self._flush()  # pongs, the answer to a close frame
        if lines:
            lines.append(b"")
            chunk = b"\n".join(lines)
            if self._opened:
                self._glue.data_received(chunk)
            else:
                self._early.append(chunk)
        if proto.close_rcvd is not None and self._socket is not None and proto.state.name == "CLOSED":
            self._socket.close()

    @staticmethod
    def _line(payload: bytes, lines: list[bytes]) -> None:
        line = one_line(payload)
        if line:
            lines.append(line)

    def _answered(self, response: Any) -> None:
        if self._handshake.done():
            return
        exc = self._proto.handshake_exc
        if exc is not None:
            self._handshake.set_exception(exc)
            return
        conn_id = response.headers.get(CONNECTION_ID_HEADER)
        if conn_id:
            self._stream._extra["acp_connection_id"] = conn_id
        self._handshake.set_result(None)

    def eof_received(self) -> bool:
        self._proto.receive_eof()
        self._flush()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._handshake.done():
            self._handshake.set_exception(exc or ConnectionError("the server closed the connection"))
        for timer in (self._ping, self._closer):
            if timer is not None:
                timer.cancel()
        if exc is not None and self._failure is None:
            self._failure = RemoteConnectionLost(f"the WebSocket to {self._url} failed: {exc!r}")
        frame = self._proto.close_rcvd
        if self._failure is None and not self._closing:
            text = f"code {frame.code}{': ' + frame.reason if frame.reason else ''}" if frame else "no close frame"
            logger.info("remote ACP connection to %s ended: the WebSocket closed (%s)", self._url, text)
        if self._opened:
            self._glue.connection_lost(self._failure)

    def pause_writing(self) -> None:
        if self._opened:
            self._glue.pause_writing()

    def resume_writing(self) -> None:
        if self._opened:
            self._glue.resume_writing()

    def _flush(self) -> None:
        out = self._proto.data_to_send()
        socket = self._socket
        if out and socket is not None and not socket.is_closing():
            data = b"".join(out)
            if data:
                socket.write(data)
            elif socket.can_write_eof():  # b"": the protocol asks for a half-close
                socket.write_eof()

    # -- keepalive ----------------------------------------------------------------------

    def _arm_ping(self) -> None:
        self._ping = self._loop.call_later(PING_INTERVAL, self._on_ping_timer)

    def _on_ping_timer(self) -> None:
        now = self._loop.time()
        socket = self._socket
        if self._closing or socket is None or socket.is_closing():
            return
        if self._ping_sent is not None and now - self._ping_sent >= PING_TIMEOUT:
            self._failure = RemoteConnectionLost(
                f"the WebSocket to {self._url} failed: no pong within {PING_TIMEOUT:g} s")
            logger.error("remote ACP connection to %s: %s", self._url, self._failure)
            socket.abort()
            return
        if self._ping_sent is None and now - self._heard >= PING_INTERVAL:
            self._proto.send_ping(b"acp")
            self._flush()
            self._ping_sent = now
        self._ping = self._loop.call_later(PING_TIMEOUT if self._ping_sent is not None else PING_INTERVAL,
                                           self._on_ping_timer)

    # -- the stream's transport ---------------------------------------------------------

    def write(self, data: bytes) -> None:
        lines, self._partial, refusal = _whole_lines(self._partial, data, self._max)
        proto = self._proto
        for line in lines:
            proto.send_text(line)
        if refusal is not None:
            self._fail(refusal)
            return
        self._flush()

    def _fail(self, reason: str) -> None:
        logger.error("remote ACP connection to %s: %s", self._url, reason)
        self._failure = RemoteConnectionLost(reason)
        if self._socket is not None:
            self._socket.abort()

    def is_closing(self) -> bool:
        return self._closing or self._socket is None or self._socket.is_closing()

    def pause_reading(self) -> None:
        if self._socket is not None and not self._socket.is_closing():
            self._socket.pause_reading()

    def resume_reading(self) -> None:
        if self._socket is not None and not self._socket.is_closing():
            self._socket.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self._socket is not None and not self._socket.is_closing():
            self._socket.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return 0 if self._socket is None else self._socket.get_write_buffer_size()

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default if self._socket is None else self._socket.get_extra_info(name, default)

    def close(self) -> None:
        """The closing handshake: a close frame after what is queued; the socket is dropped
        if the server has not ended it within :data:`CLOSE_TIMEOUT` seconds."""
        if self._closing:
            return
        self._closing = True
        socket = self._socket
        if socket is None or socket.is_closing():
            return
        if self._proto.state.name == "OPEN":
            if socket.get_write_buffer_size():
                logger.debug("remote ACP connection to %s: closing after %d queued bytes", self._url,
                             socket.get_write_buffer_size())
            self._proto.send_close(1000)
            self._flush()
            socket.resume_reading()  # the server's close frame must be read
        self._closer = self._loop.call_later(CLOSE_TIMEOUT, self._give_up)

    def _give_up(self) -> None:
        if self._socket is not None:
            if self._socket.get_write_buffer_size():
                logger.warning("remote ACP connection to %s: closing with unsent messages", self._url)
            self._socket.abort()


class _ProxiedWebSocketBridge(_Bridge):
    """Through a proxy named by the environment: websockets' asyncio client (which speaks
    to proxies). One text frame per outgoing line; one incoming text frame, one line; binary
    ignored."""

    def __init__(self, url: str, ws: ClientConnection, max_message_size: int) -> None:
        super().__init__("websocket", url, max_message_size)
        self._ws = ws
        self._partial = b""
        self._out: _Lane[bytes] = _Lane()
        self._lanes.append(self._out)
        conn_id = ws.response.headers.get(CONNECTION_ID_HEADER) if ws.response is not None else None
        if conn_id:
            self._a.set_extra("acp_connection_id", conn_id)
        self._spawn(self._drain(self._out, self._send))
        self._spawn(self._receive())

    @classmethod
    async def open(cls, url: str, headers: dict[str, str], max_message_size: int,
                   connect_timeout: float) -> Stream:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

        try:
            ws = await connect(url, additional_headers=headers or None, max_size=max_message_size,
                               open_timeout=connect_timeout, close_timeout=CLOSE_TIMEOUT, compression=None)
        except InvalidStatus as exc:
            status = exc.response.status_code
            raise RemoteConnectError(
                f"the WebSocket handshake with {url} was refused: HTTP {status} {exc.response.reason_phrase}",
                status) from exc
        except InvalidURI as exc:
            raise ValueError(f"invalid WebSocket URL {url!r}: {exc}") from exc
        except (OSError, asyncio.TimeoutError, InvalidHandshake) as exc:
            raise RemoteConnectError(f"cannot open a WebSocket to {url}: {exc or type(exc).__name__}") from exc
        return cls(url, ws, max_message_size).start()

    def _on_data(self, data: bytes) -> None:
        lines, self._partial, refusal = _whole_lines(self._partial, data, self._max)
        for line in lines:
            self._enqueue(self._out, line, len(line))
        if refusal is not None:
            self._fatal(refusal)

    async def _send(self, line: bytes) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self._ws.send(line.decode("utf-8", "replace"))
        except ConnectionClosed as exc:
            self._lost(f"the WebSocket closed ({_close_text(exc)})")

    async def _receive(self) -> None:
        from websockets.exceptions import ConnectionClosed

        ws = self._ws
        reason = "the WebSocket closed"
        try:
            while True:
                await self._until_writable()
                message = await ws.recv()
                if isinstance(message, str):  # binary frames carry no ACP messages
                    line = one_line(message.encode("utf-8"))
                    if line:
                        self._deliver(line + b"\n")
        except ConnectionClosed as exc:
            reason = f"the WebSocket closed ({_close_text(exc)})"
        except OSError as exc:
            reason = f"the WebSocket failed: {exc!r}"
        finally:
            self._lost(reason)

    async def _close_network(self, flushed: bool) -> None:
        try:
            if flushed:  # else the peer is not reading: no closing handshake can get through
                await asyncio.wait_for(self._ws.close(), CLOSE_TIMEOUT)
        finally:
            self._ws.transport.abort()  # nothing after a completed handshake


def _close_text(exc: Any) -> str:
    frame = getattr(exc, "rcvd", None)
    if frame is None:
        return "no close frame"
    return f"code {frame.code}{': ' + frame.reason if frame.reason else ''}"


# ---------------------------------------------------------------------------------------
# Streamable HTTP
# ---------------------------------------------------------------------------------------


class _HttpBridge(_Bridge):
    """POSTs out (``initialize`` first, its reply in the body), SSE streams in.

    Two ordered send lanes: calls (requests and notifications) and answers (responses to the
    agent's requests), so that an answer the agent waits for never queues behind a request
    POST that the server holds (a server may hold a POST until its client reads more).
    """

    def __init__(self, url: str, headers: dict[str, str], http2: bool, max_message_size: int,
                 connect_timeout: float) -> None:
        import h11
        import httpx

        from ._plainhttp import PlainHttp, Reply, plain_http_applies

        super().__init__("http", url, max_message_size)
        self._httpx = httpx
        self._h11 = h11
        self._reply = Reply
        self._client = httpx.AsyncClient(
            http2=http2,
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=MAX_SESSION_STREAMS),
        )
        self._headers = headers
        #: POSTs and DELETEs go over lean keep-alive HTTP/1.1 connections where httpx would
        #: speak HTTP/1.1 directly anyway (see :mod:`._plainhttp`); SSE GETs stay on httpx.
        self._plain = PlainHttp(url, self._client.cookies, connect_timeout=connect_timeout,
                                max_body=max_message_size, user_agent=f"acp-fast/{_version.__version__}"
                                ) if plain_http_applies(url, http2) else None
        self._out = Decoder(lazy=True, max_line_size=max_message_size)
        self._inspect = Decoder(lazy=True, max_line_size=max_message_size + 1)
        self._calls: _Lane[Any] = _Lane()
        self._answers: _Lane[Any] = _Lane()
        self._lanes += [self._calls, self._answers]
        self._conn_id: str | None = None
        self._sessions: dict[str, asyncio.Task[Any]] = {}
        self._refused: set[str] = set()
        self._parsers: dict[str | None, SseParser] = {}  # each open SSE stream's, for its cursor
        self._cursored = False  # some stream carried an event id: the server resumes streams
        self._routes: collections.OrderedDict[tuple[bool, Any], str] = collections.OrderedDict()
        self._spawn(self._drain(self._calls, self._post))
        self._spawn(self._drain(self._answers, self._post))

    # -- outgoing -----------------------------------------------------------------------

    def _on_data(self, data: bytes) -> None:
        frames: list[Any] = self._out.feed(data)
        for frame in frames:
            if frame.kind == MALFORMED:
                if frame.reason.startswith("line too long"):
                    self._fatal(f"an outgoing message is over max_message_size ({self._max})")
                    return
                logger.warning("remote transport: dropping an invalid outgoing line: %r", frame)
                continue
            raw = frame.raw
            lane = self._answers if frame.kind == RESPONSE else self._calls
            self._enqueue(lane, frame, len(raw))

    async def _post(self, frame: Any) -> None:
        if self._conn_id is None:
            if frame.kind == REQUEST and frame.method == "initialize":
                await self._initialize(frame)
            else:
                self._refuse(frame, "no Streamable HTTP connection yet: the first message must be the "
                                    "initialize request")
            return
        headers = {**self._headers, "Content-Type": CONTENT_TYPE_JSON, CONNECTION_ID_HEADER: self._conn_id}
        session = self._session_of(frame)
        if session is not None:
            headers[SESSION_ID_HEADER] = session
        try:
            response, body = await self._exchange("POST", headers, bytes(frame.raw))
        except Exception as exc:  # noqa: BLE001 - any failure of the POST fails its requests
            self._refuse(frame, f"POST to {self._url} failed: {exc!r}")
            return
        status = response.status_code
        if 200 <= status < 300:
            if session is not None:
                # Opened once the POST is accepted: a server lets a session's stream open while
                # a request naming it is in flight, and queues its events until a reader
                # comes; a request asks again for a stream refused before (a session loaded
                # or resumed since), a notification or a response does not.
                self._open_session(session, confirmed=frame.kind in (REQUEST, BATCH))
            if body.strip():  # a server may answer in the body
                self._incoming([body], None)
            return
        self._refuse(frame, f"HTTP {status} {response.reason_phrase} from {self._url}", status, body)

    async def _initialize(self, frame: Any) -> None:
        headers = {**self._headers, "Content-Type": CONTENT_TYPE_JSON, "Accept": CONTENT_TYPE_JSON}
        try:
            response, body = await self._exchange("POST", headers, bytes(frame.raw))
        except Exception as exc:  # noqa: BLE001 - any failure of the POST fails initialize
            self._refuse(frame, f"initialize POST to {self._url} failed: {exc!r}")
            return
        status = response.status_code
        conn_id = response.headers.get(CONNECTION_ID_HEADER)
        reply = self._reply_to(body, frame.id)
        if reply is not None and reply.error is not None:
            self._deliver(one_line(body) + b"\n")  # the agent's own refusal, whatever the status
            if conn_id:  # a server that kept the refused connection: end it
                self._spawn(self._delete(conn_id))
            return
        if status != 200 or reply is None:
            self._refuse(frame, f"HTTP {status} {response.reason_phrase} from {self._url}: initialize refused",
                         status, body)
            return
        if not conn_id:
            self._refuse(frame, f"{self._url} answered initialize without an {CONNECTION_ID_HEADER} header")
            return
        self._conn_id = conn_id
        self._a.set_extra("acp_connection_id", conn_id)
        self._deliver(one_line(body) + b"\n")
        self._spawn(self._sse(None))

    async def _exchange(self, method: str, headers: dict[str, str], content: bytes | None = None
                        ) -> tuple[Reply, bytes]:
        """One request; the response and its body (at most ``max_message_size`` bytes).

        Raises:
            httpx.HTTPError: the request failed.
            ValueError: the body is over ``max_message_size``.
        """
        if self._plain is not None:
            return await self._plain.request(method, headers, content or b"")
        async with self._client.stream(method, self._url, headers=headers, content=content) as response:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self._max:
                    raise ValueError(f"response body over max_message_size ({self._max})")
                chunks.append(chunk)
            return self._reply(response.status_code, response.reason_phrase, response.headers), b"".join(chunks)

    def _reply_to(self, body: bytes, ident: RequestId | None) -> Message | None:
        """``body`` decoded, when it is one JSON-RPC response with id ``ident``."""
        line = one_line(body)
        if not line or b"\n" in line:
            return None
        frames: list[Any] = Decoder(lazy=True, max_line_size=self._max + 1).feed(line + b"\n")
        if len(frames) != 1:
            return None
        reply = frames[0]
        if reply.kind != RESPONSE or reply.id != ident or type(reply.id) is not type(ident):
            return None
        return reply  # type: ignore[no-any-return]  # a Message: its kind was checked

    def _refuse(self, frame: Any, message: str, status: int | None = None, body: bytes = b"") -> None:
        """A POST failed: every request in it gets an error response (-32603) now."""
        data: dict[str, Any] = {"url": self._url}
        if status is not None:
            data["status"] = status
        if body:
            data["body"] = body[:BODY_QUOTE].decode("utf-8", "replace")
        entries = frame.entries if frame.kind == BATCH else [frame]
        out = []
        for entry in entries:
            if entry.kind == REQUEST:
                out.append(encode_error(entry.id, _INTERNAL_ERROR, f"{message} ({entry.method})",
                                        {**data, "method": entry.method}))
            elif entry.kind != MALFORMED:
                logger.warning("remote transport: %s; a %s was not delivered", message,
                               "response" if entry.kind == RESPONSE else f"notification {entry.method!r}")
        if out:
            self._deliver(b"".join(out))

    def _session_of(self, frame: Any) -> str | None:
        """The ``Acp-Session-Id`` for a POST: ``params.sessionId`` of a call (not ``$/``
        methods), the session an answered agent request came on; for a batch, the one
        session its entries agree on."""
        if frame.kind == BATCH:
            found = {s for e in frame.entries if e.kind != MALFORMED for s in [self._session_of(e)] if s}
            return found.pop() if len(found) == 1 else None
        if frame.kind == MALFORMED:
            return None
        if frame.kind == RESPONSE:
            return self._routes.pop(_id_key(frame.id), None)
        method = frame.method or ""
        if method.startswith("$/") or b'"sessionId"' not in frame.raw:
            return None
        params = frame.params
        if isinstance(params, dict):
            session = params.get("sessionId")
            if isinstance(session, str):
                return session
        return None

    # -- incoming -----------------------------------------------------------------------

    async def _sse(self, session: str | None) -> None:
        """Read one SSE stream (the connection's, or ``session``'s) into the connection,
        resuming it with ``Last-Event-ID`` when it drops (see :data:`RESUME_DELAYS`).

        The connection ends when the connection's stream ends for good, or when any stream
        fails without being resumed; a session stream that the server refuses at first, or
        that ends without a cursor (a server without resumable streams), just ends.
        """
        assert self._conn_id is not None
        headers = {**self._headers, "Accept": CONTENT_TYPE_SSE, CONNECTION_ID_HEADER: self._conn_id,
                   BATCH_FRAMES_HEADER: "1"}
        if session is not None:
            headers[SESSION_ID_HEADER] = session
        what = "the connection's SSE stream" if session is None else f"the SSE stream of session {session!r}"
        loop = asyncio.get_running_loop()
        cursor: str | None = None  # the id of the last event delivered: where a resume starts
        attempts = 0  # resume attempts since the stream last made progress
        why = ""  # how the last attempt ended
        failed: str | None = None  # the connection ends on this failure
        status: int | None = None  # ... refused with this HTTP status
        ended = False  # the stream ended for good without a failure
        gone: str | None = None  # the server closed the connection: it ends without a failure
        clean = False  # the last attempt ended with the end of its response
        try:
            while True:
                if attempts:
                    await asyncio.sleep(RESUME_DELAYS[attempts - 1])
                    if self._closer is not None:
                        return
                    assert cursor is not None
                    headers[LAST_EVENT_ID_HEADER] = cursor
                    logger.info("remote transport: resuming %s after event %s (attempt %d of %d): %s",
                                what, cursor, attempts, len(RESUME_DELAYS), why)
                parser = SseParser(self._max)
                opened: float | None = None
                was_clean, clean = clean, False
                try:
                    sending = self._open_sse(headers)
                    response = await (asyncio.wait_for(sending, RESUME_TIMEOUT) if attempts else sending)
                    try:
                        if response.status_code != 200:
                            refusal = f"HTTP {response.status_code} {response.reason_phrase}"
                            if not attempts:  # the first open: the server does not serve this stream
                                if session is None:
                                    failed = f"{what} was refused: {refusal}"
                                else:
                                    self._refused.add(session)
                                    logger.warning("remote transport: %s was refused: %s", what, refusal)
                                    ended = True
                                return
                            if response.status_code == 404 and was_clean:
                                gone = f"{what} ended, and the connection is gone (HTTP 404 on resuming it)"
                                return
                            if response.status_code in (404, 409):
                                status = response.status_code
                                cause = ("the connection is gone" if status == 404
                                         else "the server cannot resume from that event")
                                quote = (await _head_of(response)).decode("utf-8", "replace")
                                failed = f"{what} dropped ({why}); resuming it after event {cursor} was refused " \
                                         f"with {refusal}, {cause}{': ' + quote if quote else ''}"
                                return
                            why = f"resume refused: {refusal}"
                        else:
                            opened = loop.time()
                            self._parsers[session] = parser
                            async for chunk in response.aiter_bytes():
                                events = parser.feed(chunk)
                                if events:
                                    self._incoming(events, session)
                                await self._until_writable()
                            why = "the server ended it"
                            clean = True
                    finally:
                        await response.aclose()
                except ValueError as exc:  # an event over the limit: resuming would meet it again
                    failed = f"{what} failed: {exc!r}"
                    return
                except (self._httpx.HTTPError, OSError, asyncio.TimeoutError, self._h11.ProtocolError) as exc:
                    why = repr(exc)
                # The stream ended or dropped while the connection is open: resume it.
                seen = parser.last_event_id
                if seen is not None and seen != cursor:
                    attempts = 0  # it delivered events: progress
                    cursor = seen or None  # an empty id resets the cursor (the SSE rules)
                    self._cursored = True
                elif opened is not None and loop.time() - opened >= RESUME_STABLE:
                    attempts = 0
                if cursor is None and self._cursors_seen():
                    cursor = START_CURSOR
                if cursor is None:  # a server without resumable streams: as it ended
                    if clean:
                        ended = True
                    else:
                        failed = f"{what} failed: {why} (no event id to resume from)"
                    return
                if self._closer is not None:
                    return
                if attempts >= len(RESUME_DELAYS):
                    failed = f"{what} dropped and could not be resumed after event {cursor}: " \
                             f"{attempts} attempts failed (last: {why})"
                    return
                attempts += 1
        finally:
            self._parsers.pop(session, None)
            if failed is not None:
                self.failure = RemoteConnectionLost(failed, status)
                self._fatal(failed)
            elif gone is not None:
                self._lost(gone)
            elif session is None:
                self._lost(f"{what} ended")
            else:
                self._sessions.pop(session, None)
                if ended:
                    logger.debug("remote transport: %s ended", what)

    def _open_sse(self, headers: dict[str, str]) -> Awaitable[httpx.Response | StreamedReply]:
        """Send an SSE GET; the response once its head arrived (its body read as it comes)."""
        if self._plain is not None:
            return self._plain.stream("GET", headers)
        return self._client.send(self._client.build_request("GET", self._url, headers=headers), stream=True)

    def _cursors_seen(self) -> bool:
        """True once some SSE stream of the connection has carried an event id."""
        if not self._cursored:
            self._cursored = any(p.last_event_id for p in self._parsers.values())
        return self._cursored

    def _incoming(self, payloads: list[bytes], session: str | None) -> None:
        lines = []
        for payload in payloads:
            line = one_line(payload)
            if line:
                self._inspect_incoming(line, session)
                lines.append(line)
        if lines:
            lines.append(b"")
            self._deliver(b"\n".join(lines))

    def _inspect_incoming(self, line: bytes, session: str | None) -> None:
        """Note what routing needs: the session of an agent request that came on a session
        stream (its answer's POST names it), and session ids not streamed yet (a response's
        ``result.sessionId``; on the connection stream also a call's ``params.sessionId``).

        Only lines that can hold such a thing are decoded: a quoted key cannot appear inside
        a JSON string (its quotes would be escaped), so plain byte tests rule out the rest,
        such as every ``session/update`` on a session stream.
        """
        if session is None:
            if b'"sessionId"' not in line:
                return
        elif not ((b'"method"' in line and b'"id"' in line) or (b'"result"' in line and b'"sessionId"' in line)):
            return
        frames: list[Any] = self._inspect.feed(line + b"\n")
        for frame in frames:
            entries: list[Any] = frame.entries if frame.kind == BATCH else [frame]
            for m in entries:
                if m.kind == MALFORMED:
                    continue
                if m.kind == RESPONSE:
                    found, confirmed = m.result, True
                elif session is not None:
                    if m.kind == REQUEST:
                        self._remember_route(m.id, session)
                    continue
                else:
                    found, confirmed = m.params, False
                sid = found.get("sessionId") if isinstance(found, dict) else None
                if isinstance(sid, str):
                    self._open_session(sid, confirmed=confirmed)

    def _remember_route(self, ident: Any, session: str) -> None:
        routes = self._routes
        routes[_id_key(ident)] = session
        while len(routes) > MAX_ROUTES:
            routes.popitem(last=False)

    def _open_session(self, session: str, *, confirmed: bool) -> None:
        """Open ``session``'s SSE stream unless it is open. One the server refused is asked
        for again only when a response names the session (``confirmed``)."""
        if session in self._sessions or self._closer is not None or self._conn_id is None:
            return
        if session in self._refused:
            if not confirmed:
                return
            self._refused.discard(session)
        if len(self._sessions) >= MAX_SESSION_STREAMS:
            logger.warning("remote transport: %d session streams open; not opening one for %r",
                           len(self._sessions), session)
            return
        if len(self._refused) > MAX_ROUTES:
            self._refused.clear()
        self._sessions[session] = self._spawn(self._sse(session))

    # -- closing ------------------------------------------------------------------------

    async def _delete(self, conn_id: str) -> None:
        """End the server's connection ``conn_id`` (best effort, bounded)."""
        headers = {**self._headers, CONNECTION_ID_HEADER: conn_id}
        try:
            await asyncio.wait_for(self._exchange("DELETE", headers), CLOSE_TIMEOUT)
        except (asyncio.TimeoutError, self._httpx.HTTPError, OSError, ValueError, self._h11.ProtocolError) as exc:
            logger.debug("remote transport: DELETE of connection %s failed: %r", conn_id, exc)

    async def _close_network(self, flushed: bool) -> None:
        try:
            if self._conn_id is not None:
                await self._delete(self._conn_id)
        finally:
            if self._plain is not None:
                self._plain.close()
            await self._client.aclose()


async def _head_of(response: httpx.Response | StreamedReply) -> bytes:
    """The first :data:`BODY_QUOTE` bytes of a refusal's body, stripped (the rest unread)."""
    head = b""
    try:
        async for chunk in response.aiter_bytes():
            head += chunk
            if len(head) >= BODY_QUOTE:
                break
    except Exception:  # noqa: BLE001 - only a quote for an error message
        pass
    return head[:BODY_QUOTE].strip()


def _id_key(ident: Any) -> tuple[bool, Any]:
    """A JSON-RPC id as a dict key: ``1`` and ``"1"`` differ."""
    return isinstance(ident, str), ident
