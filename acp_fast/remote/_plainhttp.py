"""Small HTTP/1.1 requests over keep-alive connections, each request in one write.

The Streamable HTTP client POSTs every message on its own request and reads a short reply
(`202` and an empty body, or `initialize`'s answer). Through httpx each of them costs the
client about a millisecond of CPU on this kind of machine: its layers (client, pool, anyio
stream) and two socket writes, the head and then the body. Here h11 (httpx's own HTTP/1.1
parser and serializer) frames the request and parses the reply, and the head and the body
leave in one write on an asyncio connection kept open for the next request.

Used by the HTTP client (`acp_fast.remote.client._http`) for `http://` URLs and for
`https://` ones when HTTP/2 is off; SSE GETs, HTTP/2 and proxied URLs stay on httpx.
Cookies live in the httpx client's jar, shared both ways.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import h11

if TYPE_CHECKING:
    import httpx

__all__ = ["PlainHttp", "Reply", "StreamedReply", "plain_http_applies"]

#: A streamed body buffered beyond this many bytes pauses reading the socket (resumed below
#: a quarter of it): a consumer that does not read never makes memory grow.
STREAM_HIGH_WATER = 1024 * 1024


@dataclass(frozen=True)
class Reply:
    """A response: status, reason, headers (case-insensitive `get`)."""

    status_code: int
    reason_phrase: str
    headers: httpx.Headers


def plain_http_applies(url: str, http2: bool) -> bool:
    """Whether `PlainHttp` may carry requests to `url`: plain `http`, or `https`
    without HTTP/2, and no proxy from the environment for it (httpx would use one)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or (parts.scheme == "https" and http2):
        return False
    proxies = getproxies()
    if parts.scheme in proxies or "all" in proxies:
        return bool(parts.hostname) and proxy_bypass(parts.hostname or "")
    return True


class _Conn(asyncio.Protocol):
    """One keep-alive connection: one request at a time, its reply parsed by h11."""

    def __init__(self, max_body: int) -> None:
        self.h11 = h11.Connection(h11.CLIENT)
        self.transport: asyncio.Transport | None = None
        self.max_body = max_body
        self.waiter: asyncio.Future[tuple[h11.Response, bytes]] | None = None
        self.response: h11.Response | None = None
        self.body: list[bytes] = []
        self.size = 0
        self.lost = False
        # a streamed reply: its head resolves ``waiter``; its body goes to ``chunks``
        self.streaming = False
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.paused = False
        self.finished = False
        self.error: BaseException | None = None
        self.wake: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.h11.receive_data(data)
        except h11.RemoteProtocolError as exc:
            self._fail(exc)
            return
        self._pump()

    def eof_received(self) -> bool:
        try:
            self.h11.receive_data(b"")
        except h11.RemoteProtocolError as exc:
            self._fail(exc)
            return False
        self._pump()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._fail(exc or ConnectionError("the server closed the connection before its reply"))

    def _fail(self, exc: BaseException) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        if self.streaming and self.error is None and not self.finished:
            self.error = exc
            self._wake()
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _pump(self) -> None:
        waiter = self.waiter
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._fail(exc)
                return
            kind = type(event)
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if kind is h11.Response:
                self.response = event  # type: ignore[assignment]
                if self.streaming and waiter is not None and not waiter.done():
                    waiter.set_result((event, b""))  # type: ignore[arg-type]
            elif kind is h11.Data:
                data = bytes(event.data)  # type: ignore[union-attr]
                if self.streaming:
                    self.chunks.append(data)
                    self.buffered += len(data)
                    if self.buffered > STREAM_HIGH_WATER and not self.paused and self.transport is not None:
                        self.paused = True
                        self.transport.pause_reading()
                    self._wake()
                    continue
                self.size += len(data)
                if self.size > self.max_body:
                    self._fail(ValueError(f"response body over max_message_size ({self.max_body})"))
                    return
                self.body.append(data)
            elif kind is h11.EndOfMessage:
                if self.streaming:
                    self.finished = True
                    self._wake()
                elif waiter is not None and not waiter.done() and self.response is not None:
                    waiter.set_result((self.response, b"".join(self.body)))
                return
            elif kind is h11.ConnectionClosed:
                self._fail(ConnectionError("the server closed the connection before its reply"))
                return
            # InformationalResponse (1xx): wait for the final one

    async def exchange(self, method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]],
                       body: bytes) -> tuple[h11.Response, bytes]:
        if self.lost or self.transport is None or self.transport.is_closing():
            raise ConnectionError("the connection is closed")
        self.response = None
        self.body = []
        self.size = 0
        out = self.h11.send(h11.Request(method=method, target=target, headers=list(headers)))
        if body:
            out += self.h11.send(h11.Data(data=body)) or b""
        out += self.h11.send(h11.EndOfMessage()) or b""
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(out or b"")
        try:
            return await self.waiter
        finally:
            self.waiter = None

    async def next_chunk(self) -> bytes | None:
        """The next piece of a streamed body; `None` at its end.

        Raises: what ended the connection before the body's end."""
        while not self.chunks:
            if self.error is not None:
                raise self.error
            if self.finished:
                return None
            self.wake = asyncio.get_running_loop().create_future()
            try:
                await self.wake
            finally:
                self.wake = None
        chunk = self.chunks.popleft()
        self.buffered -= len(chunk)
        if self.paused and self.buffered <= STREAM_HIGH_WATER // 4 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return chunk

    def reusable(self) -> bool:
        """Ready for the next request (both sides done, the connection open)."""
        if self.lost or self.transport is None or self.transport.is_closing():
            return False
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
            return True
        return False

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class PlainHttp:
    """Requests to one URL over keep-alive HTTP/1.1 connections (see the module's text).

    Args:
        url: `http://` or `https://` URL; every request goes to its path.
        cookies: the httpx client's jar: sent with and updated from every request.
        connect_timeout: seconds to open a connection (TLS included).
        max_body: the largest response body read (bigger: `ValueError`).
        user_agent: the `User-Agent` header.
    """

    def __init__(self, url: str, cookies: httpx.Cookies, *, connect_timeout: float, max_body: int,
                 user_agent: str) -> None:
        import httpx

        self._httpx = httpx
        self._url = url
        parts = urlsplit(url)
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = httpx.create_ssl_context() if parts.scheme == "https" else None
        host = parts.netloc.rpartition("@")[2]
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._target = target.encode("ascii")
        self._base = [(b"host", host.encode("idna" if not host.isascii() else "ascii")),
                      (b"user-agent", user_agent.encode()), (b"accept", b"*/*")]
        self._cookies = cookies
        self._timeout = connect_timeout
        self._max = max_body
        self._idle: list[_Conn] = []
        self._busy: set[_Conn] = set()
        self._closed = False

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: _Conn(self._max), self._host, self._port, ssl=self._ssl,
                                   server_hostname=self._host if self._ssl is not None else None),
            self._timeout)
        return conn

    async def request(self, method: str, headers: dict[str, str], body: bytes = b"") -> tuple[Reply, bytes]:
        """One request; the reply and its body.

        Raises:
            OSError, asyncio.TimeoutError: connecting failed.
            ConnectionError, h11.ProtocolError: the connection failed or the reply is not
                HTTP/1.1.
            ValueError: the reply's body is over `max_body`.
        """
        conn = await self._take()
        head, request = self._head(method, headers, body)
        self._busy.add(conn)
        try:
            response, data = await conn.exchange(method.encode("ascii"), self._target, head, body)
        except BaseException:
            conn.close()
            raise
        finally:
            self._busy.discard(conn)
        if not self._closed and conn.reusable():
            self._idle.append(conn)
        else:
            conn.close()
        return self._reply(method, response, request), data

    async def stream(self, method: str, headers: dict[str, str]) -> StreamedReply:
        """A request whose reply is read as it comes (an SSE stream): returns once its head
        arrived; read the body with `StreamedReply.aiter_bytes`, then `aclose()`.
        The connection is its own, closed with the reply."""
        conn = await self._connect()
        conn.streaming = True
        head, request = self._head(method, headers, b"")
        self._busy.add(conn)
        try:
            response, _ = await conn.exchange(method.encode("ascii"), self._target, head, b"")
        except BaseException:
            self._busy.discard(conn)
            conn.close()
            raise
        reply = self._reply(method, response, request)
        return StreamedReply(reply.status_code, reply.reason_phrase, reply.headers, conn, self._busy)

    async def _take(self) -> _Conn:
        if self._closed:
            raise ConnectionError("the client is closed")
        while self._idle:
            conn = self._idle.pop()
            if not conn.lost and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return await self._connect()

    def _head(self, method: str, headers: dict[str, str], body: bytes) -> tuple[list[tuple[bytes, bytes]], Any]:
        request: Any = None
        head = list(self._base)
        for name, value in headers.items():
            head.append((name.encode("latin-1"), value.encode("latin-1")))
        if self._cookies:
            request = self._httpx.Request(method, self._url)
            self._cookies.set_cookie_header(request)
            cookie = request.headers.get("cookie")
            if cookie:
                head.append((b"cookie", cookie.encode("latin-1")))
        if body or method in ("POST", "PUT", "PATCH"):
            head.append((b"content-length", b"%d" % len(body)))
        return head, request

    def _reply(self, method: str, response: h11.Response, request: Any) -> Reply:
        headers = self._httpx.Headers(list(response.headers))
        if any(name == b"set-cookie" for name, _ in response.headers):
            if request is None:
                request = self._httpx.Request(method, self._url)
            self._cookies.extract_cookies(self._httpx.Response(response.status_code, headers=headers,
                                                               request=request))
        return Reply(response.status_code, response.reason.decode("latin-1", "replace"), headers)

    def close(self) -> None:
        """Close every connection (a request in flight fails)."""
        self._closed = True
        for conn in [*self._idle, *self._busy]:
            conn.close()
        self._idle.clear()


class StreamedReply:
    """A reply whose body is read as it arrives (see `PlainHttp.stream`)."""

    def __init__(self, status_code: int, reason_phrase: str, headers: httpx.Headers, conn: _Conn,
                 busy: set[_Conn]) -> None:
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.headers = headers
        self._conn = conn
        self._busy = busy

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body's pieces as they arrive.

        Raises: `ConnectionError` (or `h11.ProtocolError`) when the connection fails
        before the body's end."""
        while True:
            chunk = await self._conn.next_chunk()
            if chunk is None:
                return
            yield chunk

    async def aclose(self) -> None:
        """Close the connection (the rest of the body unread)."""
        self._busy.discard(self._conn)
        self._conn.close()
