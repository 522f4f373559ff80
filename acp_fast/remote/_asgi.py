"""ASGI plumbing the remote server's parts share: the callable types, refusals, the endpoint path.

Refusal bodies are JSON-RPC error objects (id `null`) naming the HTTP status, so a client that
reads only JSON-RPC still learns why; their texts are fixed, never an agent's output.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..engine import encode_error
from ..errors import INVALID_REQUEST
from ._wire import HEALTH_PATH, one_line

#: An ASGI connection scope, and the receive and send callables of ASGI 3.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
#: An ASGI 3 application.
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def error_body(status: int, message: str, code: int = INVALID_REQUEST) -> bytes:
    """The JSON-RPC error body of an HTTP refusal."""
    return encode_error(None, code, f"HTTP {status}: {message}")


def endpoint_path(scope: Scope) -> str:
    """The request path below the mount point (`root_path`), without a trailing slash."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):]
    return path.rstrip("/") or "/"


def lower_headers(scope: Scope) -> dict[bytes, bytes]:
    """The request headers by lower-cased name (the last of repeated names wins)."""
    return {k.lower(): v for k, v in scope.get("headers", ())}


async def respond(send: Send, status: int, body: bytes, *, extra: Sequence[tuple[bytes, bytes]] = (),
                  www_auth: bool = False) -> None:
    """Send a whole `application/json` response."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if www_auth:
        headers.append((b"www-authenticate", b"Bearer"))
    headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def ws_line(message: Mapping[str, Any], limit: int) -> bytes | int | None:
    """The ACP line of a `websocket.receive` message: its text as one line; `None` for a
    binary frame (it carries no ACP message: ignored); the close code 1009 for a message
    over `limit` bytes."""
    text = message.get("text")
    data = text.encode("utf-8", "surrogatepass") if text is not None else message.get("bytes") or b""
    if len(data) > limit:
        return 1009
    if text is None:
        return None
    return one_line(data)


class WsLines:
    """The ACP lines of a WebSocket's text messages, in order, until the socket is done.

    `next()` gives each line (binary frames are skipped), then `None`: the client closed
    (`client_code` is its close code) or a message was over `limit` bytes (`code` is 1009,
    the close code to send; 1000 otherwise).
    """

    __slots__ = ("_receive", "_limit", "code", "client_code")

    def __init__(self, receive: Receive, limit: int) -> None:
        self._receive = receive
        self._limit = limit
        self.code = 1000
        self.client_code: int | None = None

    async def next(self) -> bytes | None:
        """The next line, or `None` when the socket is done."""
        while True:
            message = await self._receive()
            t = message["type"]
            if t == "websocket.receive":
                line = ws_line(message, self._limit)
                if line is None:
                    continue
                if isinstance(line, int):
                    self.code = line
                    return None
                return line
            if t == "websocket.disconnect":
                self.client_code = int(message.get("code", 1000))
                return None


async def deny(scope: Scope, send: Send, status: int, message: str) -> None:
    """Refuse a WebSocket upgrade: an HTTP status where the server supports it, else close."""
    extensions: Mapping[str, object] = scope.get("extensions", {}) or {}
    if "websocket.http.response" in extensions:
        body = error_body(status, message)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})


class Endpoint:
    """The ASGI skeleton of an ACP endpoint, shared by the server and a fleet's front.

    Lifespan (shutdown calls `aclose`), `GET /health` (200), 404 off `path`, a
    WebSocket to `websocket`, an HTTP request on `path` to `http`. Access
    rules are the subclass's business (it puts an `AccessGuard` in front of `dispatch`).
    """

    #: the endpoint path, without a trailing slash (``/`` alone stays)
    path: str

    async def aclose(self) -> None:
        """Release what the endpoint holds (at lifespan shutdown)."""

    async def websocket(self, scope: Scope, headers: Mapping[bytes, bytes], path: str, receive: Receive,
                        send: Send) -> None:
        """Serve one WebSocket (any path: a subclass refuses the others)."""
        raise NotImplementedError

    async def http(self, method: str, headers: Mapping[bytes, bytes], receive: Receive, send: Send) -> None:
        """Serve one HTTP request on `path`."""
        raise NotImplementedError

    async def dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Route one ASGI scope (see the class docstring)."""
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        path = endpoint_path(scope)
        headers = lower_headers(scope)
        if kind == "websocket":
            await self.websocket(scope, headers, path, receive, send)
            return
        if kind != "http":
            return
        method = scope["method"]
        if path == HEALTH_PATH.rstrip("/") and method in ("GET", "HEAD"):
            await respond(send, 200, b'{"status":"ok"}')
            return
        if path != self.path:
            await respond(send, 404, error_body(404, "not found"))
            return
        await self.http(method, headers, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return
