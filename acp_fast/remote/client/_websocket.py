"""The remote client over WebSocket: the socket's own protocol as the bridge.

websockets' sans-I/O layer frames and parses; no task or queue per message. Through a proxy
named by the environment, websockets' asyncio client instead (`ProxiedWebSocketBridge`).
One text frame carries one message or one batch; the client asks for batch frames. A ping
every `PING_INTERVAL` seconds on a quiet socket finds a path that died silently.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast

from ... import _version
from ...transport.stream import Stream
from .._wire import CONNECTION_ID_HEADER, one_line
from . import _bridge  # _bridge.CLOSE_TIMEOUT read at use, where tests set it
from ._bridge import Bridge, Lane, RemoteConnectError, RemoteConnectionLost

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

__all__ = ["PING_INTERVAL", "PING_TIMEOUT", "RESUME_HEADER", "ProxiedWebSocketBridge", "WebSocketLink", "whole_lines",
           "ws_proxied"]

logger = logging.getLogger("acp_fast.remote")

def whole_lines(partial: bytes, data: bytes, limit: int) -> tuple[list[bytes], bytes, str | None]:
    """Split what the connection wrote into its whole non-empty lines (`partial` is the
    unfinished line of the last write); returns the lines, the new unfinished line, and why
    the stream must end (a line over `limit` bytes; only the lines before it are returned)."""
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


#: acp_fast's own WebSocket resume header (acp_fast client to acp_fast fleet front; no other peer
#: sends or reads it). On the upgrade of a new connection, `new`: the server then follows each
#: agent flush's text frames with a binary frame holding its cursor (an entry of the fleet's
#: output stream; frames never span two). On the upgrade that resumes a connection whose socket
#: failed, `<connection id> <cursor> <frames>`: the last cursor received and the text frames
#: received after it; the server goes on from there (404: the connection is gone; 409: the
#: cursor left the replay window). Binary frames carry no ACP message: a peer ignores them.
RESUME_HEADER = "Acp-Fast-Resume"

#: Seconds between the client's pings on a quiet WebSocket, and that a pong may take before
#: the connection counts as lost (a network path that died silently).
PING_INTERVAL = 20.0
PING_TIMEOUT = 20.0


def ws_proxied(url: str) -> bool:
    """Whether the environment names a proxy for `url` (websockets ≥ 15 would use it)."""
    try:
        from websockets.proxy import get_proxy
        from websockets.uri import parse_uri
    except ImportError:  # an older websockets: no proxy support either way
        return False
    return get_proxy(parse_uri(url)) is not None


class WebSocketLink(asyncio.Protocol):
    """A WebSocket as the stream's own transport: websockets' sans-I/O protocol frames and
    parses inside the socket's callbacks, with no memory pair, task or queue in between.

    To the socket it is the protocol; to the [`Stream`][acp_fast.transport.Stream] it is the
    transport (`write`, `pause_reading`, `close`, ...). Outgoing: each line the
    connection writes becomes a text frame, the frames of one write leave in one socket
    write, and the socket's buffer limits are the stream's (the connection is told when it
    fills). Incoming: the text messages of one read reach the connection as one chunk of
    lines (a batch frame stays one line); binary frames are ignored; pausing the stream
    pauses the socket. The client pings a quiet socket every `PING_INTERVAL` seconds;
    no pong within `PING_TIMEOUT` ends it with a [`RemoteConnectionLost`][acp_fast.remote.client._websocket.RemoteConnectionLost].
    Closing sends a close frame and waits up to `CLOSE_TIMEOUT` for the server's.
    """

    def __init__(self, url: str, max_message_size: int, headers: dict[str, str], stream: Stream,
                 failover: tuple[str, ...] = ()) -> None:
        from websockets.client import ClientProtocol
        from websockets.uri import parse_uri

        loop = asyncio.get_running_loop()
        self._loop = loop
        self._url = url
        self._max = max_message_size
        self._headers = headers
        self._stream = stream
        self._glue = stream.protocol()
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
        #: the endpoints in turn (`url`, then `failover`); with more than one the socket is
        #: resumable (`RESUME_HEADER`): the last cursor, the text frames since, the connection
        self._endpoints = (url, *failover)
        self._cursor = "0-0"
        self._since = 0
        self._conn_id: str | None = None
        self._resuming: list[bytes] | None = None  # lines written while a new socket is being opened
        self._timeout = 10.0  # seconds to open a socket (establish's)
        self._resumer: asyncio.Task[None] | None = None
        if len(self._endpoints) > 1:
            headers[RESUME_HEADER] = "new"

    @classmethod
    async def open(cls, url: str, headers: dict[str, str], max_message_size: int,
                   connect_timeout: float, failover: tuple[str, ...] = ()) -> Stream:
        from websockets.exceptions import InvalidURI
        from websockets.uri import parse_uri

        for each in (url, *failover):
            try:
                parse_uri(each)
            except InvalidURI as exc:
                raise ValueError(f"invalid WebSocket URL {each!r}: {exc}") from exc
        stream = Stream(asyncio.get_running_loop())
        link = cls(url, max_message_size, headers, stream, failover)
        await link.establish(connect_timeout)
        return stream

    async def establish(self, connect_timeout: float) -> None:
        """Connect and shake hands (within `connect_timeout`), then become the stream's
        transport; [`RemoteConnectError`][acp_fast.remote.client._websocket.RemoteConnectError] when either fails."""
        from websockets.exceptions import InvalidHandshake, InvalidStatus

        url = self._url
        self._timeout = connect_timeout
        try:
            await asyncio.wait_for(self._opening(), connect_timeout)
        except InvalidStatus as exc:
            self._abort()
            status = exc.response.status_code
            raise RemoteConnectError(
                f"the WebSocket handshake with {url} was refused: HTTP {status} {exc.response.reason_phrase}",
                status) from exc
        except (OSError, asyncio.TimeoutError, InvalidHandshake) as exc:
            self._abort()
            raise RemoteConnectError(f"cannot open a WebSocket to {url}: {exc or type(exc).__name__}") from exc
        except BaseException:
            self._abort()
            raise
        self._stream.set_extra_info("url", url)
        self._stream.set_extra_info("transport", "websocket")
        self._opened = True
        self._glue.connection_made(self)  # type: ignore[arg-type]  # the stream's transport
        if self._early:
            early, self._early = self._early, []
            self._glue.data_received(b"".join(early))
        self._arm_ping()

    async def _opening(self) -> None:
        """Connect to `_url` and send the handshake; returns once the server answered it."""
        import ssl

        from websockets.uri import parse_uri

        uri = parse_uri(self._url)
        context = ssl.create_default_context() if uri.secure else None
        await self._loop.create_connection(lambda: self, uri.host, uri.port, ssl=context,
                                           server_hostname=uri.host if context is not None else None)
        await self._handshake

    def _resumable(self) -> bool:
        """Whether a failed socket is opened again on the next endpoint (see `RESUME_HEADER`):
        failover endpoints were given, the socket was up, nobody closed it, the server sent no
        close frame, and no failure of ours (a message too big) ended it."""
        return (len(self._endpoints) > 1 and self._opened and not self._closing and self._failure is None
                and self._conn_id is not None and self._proto.close_rcvd is None)

    async def _resume(self, why: str) -> None:
        """Open a socket on each endpoint in turn (the next first) that takes the connection
        up where the last one left it; the stream ends when none does."""
        from websockets.client import ClientProtocol
        from websockets.uri import parse_uri

        start = self._endpoints.index(self._url) if self._url in self._endpoints else 0
        order = [self._endpoints[(start + i) % len(self._endpoints)] for i in range(1, len(self._endpoints) + 1)]
        for url in order:
            self._url = url
            self._headers[RESUME_HEADER] = f"{self._conn_id} {self._cursor} {self._since}"
            self._proto = ClientProtocol(parse_uri(url), max_size=self._max)
            self._handshake = self._loop.create_future()
            self._socket = None
            try:
                await asyncio.wait_for(self._opening(), self._timeout)
            except Exception as exc:  # noqa: BLE001 - this endpoint failed: the next one
                self._abort()
                why = f"{url}: {exc!r}"
                continue
            logger.warning("remote ACP connection: the WebSocket resumed on %s after cursor %s", url, self._cursor)
            waiting, self._resuming = self._resuming or [], None
            self._resumer = None
            for line in waiting:
                self._proto.send_text(line)
            self._flush()
            self._arm_ping()
            return
        self._resuming = None
        self._resumer = None
        self._failure = RemoteConnectionLost(
            f"the WebSocket failed and could not be resumed on any of {', '.join(self._endpoints)} (last: {why})")
        logger.error("remote ACP connection: %s", self._failure)
        self._glue.connection_lost(self._failure)

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
                    self._since += 1
                else:
                    self._fragments = [bytes(frame.data)]
            elif opcode is Opcode.CONT:
                if self._fragments is not None:
                    self._fragments.append(bytes(frame.data))
                    if frame.fin:
                        self._line(b"".join(self._fragments), lines)
                        self._fragments = None
                        self._since += 1
            elif opcode is Opcode.BINARY:
                self._fragments = None  # binary messages carry no ACP messages ...
                if frame.fin and len(frame.data) <= 64:  # ... but a resume cursor (RESUME_HEADER)
                    self._cursor = bytes(frame.data).decode("ascii", "replace")
                    self._since = 0
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
            self._conn_id = conn_id
            self._stream.set_extra_info("acp_connection_id", conn_id)
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
        if self._resuming is not None:
            return  # a socket of the resume that failed: _resume tries the next endpoint
        if self._resumable():
            self._resuming = []
            why = repr(exc) if exc is not None else "closed without a close frame"
            logger.warning("remote ACP connection to %s: the WebSocket failed (%s); resuming", self._url, why)
            self._resumer = self._loop.create_task(self._resume(why))
            return
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
        lines, self._partial, refusal = whole_lines(self._partial, data, self._max)
        if self._resuming is not None and refusal is None:
            self._resuming.extend(lines)
            return
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
        if the server has not ended it within `CLOSE_TIMEOUT` seconds."""
        if self._closing:
            return
        self._closing = True
        if self._resumer is not None:  # closed while a new socket was being opened: no more
            self._resumer.cancel()
            self._resumer = None
            self._resuming = None
            self._abort()
            self._glue.connection_lost(None)
            return
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
        self._closer = self._loop.call_later(_bridge.CLOSE_TIMEOUT, self._give_up)

    def _give_up(self) -> None:
        if self._socket is not None:
            if self._socket.get_write_buffer_size():
                logger.warning("remote ACP connection to %s: closing with unsent messages", self._url)
            self._socket.abort()


class ProxiedWebSocketBridge(Bridge):
    """Through a proxy named by the environment: websockets' asyncio client (which speaks
    to proxies). One text frame per outgoing line; one incoming text frame, one line; binary
    ignored."""

    def __init__(self, url: str, ws: ClientConnection, max_message_size: int) -> None:
        super().__init__("websocket", url, max_message_size)
        self._ws = ws
        self._partial = b""
        self._out: Lane[bytes] = Lane()
        self._lanes.append(self._out)
        conn_id = ws.response.headers.get(CONNECTION_ID_HEADER) if ws.response is not None else None
        if conn_id:
            self._a.set_extra_info("acp_connection_id", conn_id)
        self._spawn(self._drain(self._out, self._send))
        self._spawn(self._receive())

    @classmethod
    async def open(cls, url: str, headers: dict[str, str], max_message_size: int,
                   connect_timeout: float) -> Stream:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

        try:
            ws = await connect(url, additional_headers=headers or None, max_size=max_message_size,
                               open_timeout=connect_timeout, close_timeout=_bridge.CLOSE_TIMEOUT, compression=None)
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
        lines, self._partial, refusal = whole_lines(self._partial, data, self._max)
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
                await asyncio.wait_for(self._ws.close(), _bridge.CLOSE_TIMEOUT)
        finally:
            self._ws.transport.abort()  # nothing after a completed handshake


def _close_text(exc: Any) -> str:
    frame = getattr(exc, "rcvd", None)
    if frame is None:
        return "no close frame"
    return f"code {frame.code}{': ' + frame.reason if frame.reason else ''}"
