"""What the remote server and the fleet's fronts check of a request, the same for both.

The rules of a client message's session scope (`checked`, `checked_body`; a later POST's
checks as a whole: `checked_post`), the answer to a malformed
POST body (`malformed_reply`), reading a POST's body as one line (`post_line`,
`read_body`), the check of a first POST (`initialize_frame`), the head of an SSE
response (`SSE_HEAD`) and waiting for the client to go away (`disconnected`).
Nothing here keeps state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import _kinds
from ..engine import Engine, encode_error
from ..errors import INVALID_PARAMS, INVALID_REQUEST
from ..protocol.facts import INITIALIZE
from ._asgi import Receive, Send, error_body, respond
from ._wire import CONNECTION_ID_HEADER, CONTENT_TYPE_JSON, SESSION_SCOPED_METHODS, SUCCESSOR_METHODS, one_line

__all__ = ["SSE_HEAD", "checked", "checked_body", "checked_post", "disconnected", "initialize_frame", "malformed_reply", "post_line", "read_body"]

#: The head of an SSE response (no caching, no proxy buffering).
SSE_HEAD = ((b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform"),
            (b"x-accel-buffering", b"no"))


async def post_line(headers: Mapping[bytes, bytes], receive: Receive, send: Send, max_body: int) -> bytes | None:
    """A POST's JSON body as one line, or `None` once the refusal is sent (415 for another
    content type, 413 for a body over `max_body`)."""
    ctype = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
    if ctype != CONTENT_TYPE_JSON.encode():
        await respond(send, 415, error_body(415, f"Content-Type must be {CONTENT_TYPE_JSON}"))
        return None
    body = await read_body(headers, receive, max_body)
    if body is None:
        await respond(send, 413, error_body(413, f"body over {max_body} bytes"))
        return None
    return one_line(body)


async def initialize_frame(line: bytes, engine: Engine, max_body: int, send: Send) -> Any:
    """The `initialize` request a POST without a connection id must be, decoded, or `None`
    once the 400 is sent."""
    frames = engine.Decoder(lazy=True, max_line_size=max_body + 1).feed(line + b"\n")
    frame = frames[0] if frames else None
    if frame is not None and frame.kind == _kinds.MALFORMED:
        await respond(send, 400, malformed_reply(engine, frame))
        return None
    if frame is None or frame.kind != _kinds.REQUEST or frame.method != INITIALIZE:
        await respond(send, 400, error_body(400, f"a POST without {CONNECTION_ID_HEADER} must be an initialize request"))
        return None
    return frame


def checked(entry: Any, session: str | None, engine: Engine) -> tuple[str | None, bytes | None] | str:
    """The route of one client message and its rewritten line (or `None`), or why it is refused."""
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


async def checked_post(frames: list[Any], headers: Mapping[bytes, bytes], engine: Engine,
                       send: Send) -> tuple[bytes, bool, list[tuple[Any, str | None]]] | None:
    """The checks of a later POST once its body is decoded: one message (or batch), JSON-RPC,
    and `checked_body` against its `Acp-Session-Id`. Returns `checked_body`'s result, or
    `None` once the POST was answered 400 (the engine's JSON-RPC error for a malformed body)."""
    if len(frames) != 1:
        await respond(send, 400, error_body(400, "empty body", INVALID_REQUEST))
        return None
    frame = frames[0]
    if frame.kind == _kinds.MALFORMED:
        await respond(send, 400, malformed_reply(engine, frame))
        return None
    raw_session = headers.get(b"acp-session-id")
    session = raw_session.decode("utf-8", "replace") if raw_session is not None else None
    verdict = checked_body(frame, session, engine)
    if isinstance(verdict, str):
        await respond(send, 400, error_body(400, verdict, INVALID_PARAMS))
        return None
    return verdict


def checked_body(frame: Any, session: str | None,
                 engine: Engine) -> tuple[bytes, bool, list[tuple[Any, str | None]]] | str:
    """A POST's decoded body checked against its session header (`checked`, each entry
    of a batch): the line to queue for the agent, whether it was rewritten, and each request
    with its route; or why it is refused (400). A malformed entry goes as it is: the agent
    answers it, in its place."""
    batch = frame.kind == _kinds.BATCH
    parts: list[bytes] = []
    requests: list[tuple[Any, str | None]] = []
    rewritten = False
    for entry in (list(frame) if batch else [frame]):
        if entry.kind == _kinds.MALFORMED:
            parts.append(entry.raw)
            continue
        verdict = checked(entry, session, engine)
        if isinstance(verdict, str):
            return verdict
        route, line_out = verdict
        if entry.kind == _kinds.REQUEST:
            requests.append((entry, route))
        if line_out is not None:
            rewritten = True
            parts.append(line_out)
        else:
            parts.append(entry.raw)
    if not rewritten:
        return frame.raw, False, requests
    return (b"[" + b",".join(parts) + b"]" if batch else parts[0]), True, requests


def malformed_reply(engine: Engine, frame: Any) -> bytes:
    """The answer to a malformed POST body: what the engine answers the same line with on
    stdio (-32700 echoing the line, -32600 with the reason, id `null`); a malformed
    response, which stdio leaves unanswered, still gets its code and reason with its 400."""
    reply: bytes | None = engine.error_reply(frame)
    return reply if reply is not None else encode_error(None, frame.code, None, frame.reason)


def _inner_is_dollar(params: Any) -> bool:
    """Whether a successor envelope (`{"method", "params"}`) wraps a `$/` method."""
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
