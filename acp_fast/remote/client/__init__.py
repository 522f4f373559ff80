"""The remote client transport: [`connect_url`][acp_fast.remote.client.connect_url] over Streamable HTTP or WebSocket.

`connect_url(url)` returns a [`Stream`][acp_fast.transport.Stream] like every other transport
helper, so `async with Client.v2().connect(connect_url("ws://127.0.0.1:8000/acp")) as cx`
works as it does over stdio. The scheme picks the wire (`notes`: remote.md): `ws`/`wss`
a WebSocket (the `websockets` package), `http`/`https` Streamable HTTP (`httpx`, HTTP/2
where the server offers it over TLS). A bare base URL gets `/acp` appended.

Design: [`memory_pair`][acp_fast.transport.memory_pair] gives two connected streams; the caller gets
one, a *bridge* attaches to the other and moves bytes between it and the network. Lines the
connection writes arrive at the bridge in chunks; messages from the network are written to
the connection as single lines (`one_line`), so the
connection's own engine decodes and validates them. The WebSocket bridge is the socket's
protocol itself (websockets' sans-I/O layer frames and parses; no task or queue per message;
through a proxy named by the environment, websockets' asyncio client instead); Streamable
HTTP POSTs and SSE GETs go over lean keep-alive HTTP/1.1 connections (`_plainhttp`)
unless HTTP/2 or a proxy is in play (httpx then).

Bounds and backpressure:

* Incoming: the bridge reads the network only while the connection reads what it was given
  (the stream's `writing_paused`); the SSE parser and the WebSocket frame size are bounded
  by `max_message_size`.
* Outgoing: messages wait in the bridge until the network takes them; above
  `SEND_HIGH_WATER` queued bytes it stops reading from the connection (whose writers
  then wait) and resumes below `SEND_LOW_WATER`. A message over `max_message_size`
  ends the stream with an error instead (the server would refuse it anyway).

Resuming: every SSE stream (the connection's, each session's) remembers the `id:` of the
last event it delivered; when it drops or ends while the connection is open, it is opened
again with `Last-Event-ID` after each of `RESUME_DELAYS` in turn, so the server
replays exactly what came after that event: none lost, none twice. A stream that drops
before its first event resumes from `START_CURSOR` once another stream of the
connection has carried ids. A server that sends no ids is not resumed from (nothing would
say what was missed).

Ending: the network side ending is EOF on the stream, so the connection's pending requests
fail at once: the WebSocket closing; the connection's SSE stream ending without a cursor;
any SSE stream failing without one, or whose resume the server refuses (409: it cannot
resume from that event; 404: the connection is gone), or whose resume attempts all fail.
After a failure the connection's `transport_error` is a [`RemoteConnectionLost`][acp_fast.remote.client.RemoteConnectionLost]
that names it. The connection closing its stream makes the bridge flush what is queued (at
most `CLOSE_TIMEOUT` seconds), end the HTTP connection with `DELETE` or close the
WebSocket, and stop; the stream's `wait_closed()` returns only after that. WebSocket
compression is not offered: a compressed read could inflate to far more than its size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

from ...transport.stream import Stream
from .._wire import BATCH_FRAMES_HEADER, DEFAULT_MAX_BODY, DEFAULT_PATH, require_extra
from ._bridge import CLOSE_TIMEOUT, SEND_HIGH_WATER, SEND_LOW_WATER, RemoteConnectError, RemoteConnectionLost
from ._http import RESUME_DELAYS, RESUME_STABLE, RESUME_TIMEOUT, START_CURSOR, HttpBridge
from ._websocket import RESUME_HEADER, ProxiedWebSocketBridge, WebSocketLink, ws_proxied

__all__ = [
    "CLOSE_TIMEOUT",
    "RESUME_DELAYS",
    "RESUME_HEADER",
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

_SCHEMES = {"http": "http", "https": "http", "ws": "websocket", "wss": "websocket"}

def resolve_url(url: str) -> tuple[str, str]:
    """`(kind, url)` for an endpoint URL: kind `"http"` or `"websocket"`; a bare base
    URL (empty path or `/`) gets `/acp` appended.

    Raises:
        ValueError: a scheme other than `http`, `https`, `ws`, `wss`, or no host.
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
                      connect_timeout: float = 10.0, failover: Sequence[str] = ()) -> Stream:
    """Open an ACP client transport to a remote agent; returns the stream to connect on.

    Args:
        url: `ws://`/`wss://` for a WebSocket, `http://`/`https://` for Streamable
            HTTP; `/acp` is appended to a bare base URL.
        headers: extra headers for every request (and the WebSocket handshake).
        token: sent as `Authorization: Bearer <token>` on every request and the handshake.
        http2: let httpx speak HTTP/2 where the server offers it (over TLS).
        max_message_size: the largest message either way, in bytes (an SSE event, a
            response body, a WebSocket frame, an outgoing line).
        connect_timeout: seconds to establish a network connection (the WebSocket
            handshake included); once connected, reads have no timeout.
        failover: other endpoints serving the same connections (the fronts of a fleet,
            `acp-fast serve --redis`), of the same scheme as `url`, tried in turn when the
            one in use cannot be reached (refused, unroutable): Streamable HTTP resumes its SSE
            streams there with `Last-Event-ID` and sends its later requests there; a WebSocket
            opened with failover asks the server for resume points (the `Acp-Fast-Resume`
            header, acp_fast's own: see `RESUME_HEADER`) and, when the socket fails, opens
            a new one on the next endpoint that takes the connection up where it was (not
            through a proxy named by the environment). Nothing
            is lost or repeated while the server's replay window holds what was missed; a
            request that was on its way when the endpoint died fails as before.

    A WebSocket is opened before this returns. Streamable HTTP does no I/O until the
    connection sends `initialize`, its first message: an HTTP refusal of it (401, 404,
    ...) fails that `initialize` call with a -32603 error naming the status.

    Raises:
        ValueError: an unsupported scheme, or no host.
        MissingExtraError: `httpx` (with `h2` when `http2`) or `websockets` is not
            installed (`pip install 'acp-fast[remote]'`).
        RemoteConnectError: the WebSocket could not be opened (refused, timed out, the
            handshake answered with an HTTP status).
    """
    kind, target = resolve_url(url)
    others = tuple(resolve_url(u) for u in failover)
    if any(k != kind for k, _ in others):
        raise ValueError(f"failover endpoints must be of the same kind as {url!r} (all ws/wss or all http/https)")
    if max_message_size <= 0:
        raise ValueError("max_message_size must be positive")
    hdrs = dict(headers or {})
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    if kind == "websocket":
        require_extra("websockets")
        hdrs = {**hdrs, BATCH_FRAMES_HEADER: "1"}
        if ws_proxied(target):
            return await ProxiedWebSocketBridge.open(target, hdrs, max_message_size, connect_timeout)
        return await WebSocketLink.open(target, hdrs, max_message_size, connect_timeout, tuple(u for _, u in others))
    require_extra("httpx", "h11", *(("h2",) if http2 else ()))
    return HttpBridge(target, hdrs, http2, max_message_size, connect_timeout, tuple(u for _, u in others)).start()
