"""What the remote server and the fleet's fronts check of a request, the same for both.

The rules of a client message's session scope (:func:`checked`), the answer to a malformed
POST body (:func:`malformed_reply`), reading a bounded body (:func:`read_body`) and waiting
for the client to go away (:func:`disconnected`). Nothing here keeps state.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

from .. import _kinds
from ..engine import encode_error
from ._asgi import Receive
from ._wire import SESSION_SCOPED_METHODS, SUCCESSOR_METHODS

__all__ = ["checked", "disconnected", "malformed_reply", "read_body"]


def checked(entry: Any, session: str | None, engine: types.ModuleType) -> tuple[str | None, bytes | None] | str:
    """The route of one client message and its rewritten line (or ``None``), or why it is refused."""
    kind = entry.kind
    if kind == _kinds.RESPONSE:
        return None, None
    method: str = entry.method
    if method.startswith("$/") or (method in SUCCESSOR_METHODS and _inner_is_dollar(entry.params)):
        return None, None  # connection-scoped: never takes the session header
    scoped = method in SESSION_SCOPED_METHODS
    if session is None and not scoped:
        return None, None
    params = entry.params
    if isinstance(params, list):
        return "params must be an object for a session-scoped message"
    sid = params.get("sessionId") if isinstance(params, dict) else None
    if session is None:
        if not isinstance(sid, str):
            return f"{method} needs Acp-Session-Id or params.sessionId"
        return sid, None
    if sid is None:
        filled = dict(params) if isinstance(params, dict) else {}
        filled["sessionId"] = session
        if kind == _kinds.REQUEST:
            return session, engine.encode_request(entry.id, method, filled).rstrip(b"\n")
        return session, engine.encode_notification(method, filled).rstrip(b"\n")
    if sid != session:
        return "Acp-Session-Id and params.sessionId differ"
    return session, None


def malformed_reply(engine: types.ModuleType, frame: Any) -> bytes:
    """The answer to a malformed POST body: what the engine answers the same line with on
    stdio (-32700 echoing the line, -32600 with the reason, id ``null``); a malformed
    response, which stdio leaves unanswered, still gets its code and reason with its 400."""
    reply: bytes | None = engine.error_reply(frame)
    return reply if reply is not None else encode_error(None, frame.code, None, frame.reason)


def _inner_is_dollar(params: Any) -> bool:
    """Whether a successor envelope (``{"method", "params"}``) wraps a ``$/`` method."""
    m = params.get("method") if isinstance(params, dict) else None
    return isinstance(m, str) and m.startswith("$/")


async def read_body(headers: Mapping[bytes, bytes], receive: Receive, limit: int) -> bytes | None:
    length = headers.get(b"content-length")
    if length is not None:
        try:
            if int(length) > limit:
                return None
        except ValueError:
            return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
