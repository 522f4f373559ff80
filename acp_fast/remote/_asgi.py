"""ASGI plumbing the remote server's parts share: the callable types, refusals, the endpoint path.

Refusal bodies are JSON-RPC error objects (id `null`) naming the HTTP status, so a client that
reads only JSON-RPC still learns why; their texts are fixed, never an agent's output.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..engine import encode_error
from ..errors import INVALID_REQUEST

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
