"""The remote wire profile shared by the server and the client (`notes`: Streamable HTTP and
WebSocket, after the ACP RFD "Streamable HTTP & WebSocket transport").

Names, header spellings, content types, the session-scoped method list, Server-Sent Events
encoding and an incremental SSE parser, and the check that the `remote` extra is installed.
Nothing here does I/O.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from typing import Any

from ..protocol.facts import EXTRA_SESSION_SCOPED_METHODS, SESSION_SCOPED_METHODS, SUCCESSOR_METHODS

__all__ = [
    "CONNECTION_ID_HEADER",
    "CONTENT_TYPE_JSON",
    "CONTENT_TYPE_SSE",
    "DEFAULT_MAX_BODY",
    "DEFAULT_PATH",
    "EXTRA_HINT",
    "EXTRA_SESSION_SCOPED_METHODS",
    "HEALTH_PATH",
    "KEEPALIVE_SECONDS",
    "BATCH_FRAMES_HEADER",
    "LAST_EVENT_ID_HEADER",
    "MissingExtraError",
    "SESSION_ID_HEADER",
    "SESSION_SCOPED_METHODS",
    "SseParser",
    "SUCCESSOR_METHODS",
    "URL_SCHEMES",
    "id_key",
    "is_url",
    "one_line",
    "params_session",
    "require_extra",
    "sse_events",
]

#: The endpoint path the server answers on and that a client appends to a bare base URL.
DEFAULT_PATH = "/acp"
#: Liveness probe answered 200 by the server.
HEALTH_PATH = "/health"
#: Server-chosen connection id: on the ``initialize`` response and on the WebSocket upgrade.
CONNECTION_ID_HEADER = "Acp-Connection-Id"
#: Names the session a POST or an SSE GET belongs to.
SESSION_ID_HEADER = "Acp-Session-Id"
#: Frame batching (an acp_fast extension, opt-in): a client that sends ``Acp-Batch-Frames: 1``
#: on the WebSocket upgrade accepts frames that carry a JSON-RPC batch of the agent's
#: notifications and responses (the RFD's "one text frame = one message or one batch"); the
#: server confirms with the same header on the 101 and then sends what the agent wrote in one
#: turn as one frame instead of one frame each. Requests still go out alone, so no batch ever
#: asks the client for a batched reply. Without the header nothing changes.
BATCH_FRAMES_HEADER = "Acp-Batch-Frames"
#: The largest batch frame the server builds, in bytes (a longer message goes alone).
BATCH_FRAME_BYTES = 256 * 1024
#: A reconnecting SSE reader names the last event it saw (resumable streams).
LAST_EVENT_ID_HEADER = "Last-Event-ID"
CONTENT_TYPE_JSON = "application/json"
CONTENT_TYPE_SSE = "text/event-stream"
#: The largest POST body or WebSocket text frame accepted (bigger: HTTP 413 / close 1009).
DEFAULT_MAX_BODY = 16 * 1024 * 1024
#: An SSE comment line is sent this often on an idle stream so proxies keep it open.
KEEPALIVE_SECONDS = 15.0

# EXTRA_SESSION_SCOPED_METHODS, SESSION_SCOPED_METHODS (a POST's session scope) and
# SUCCESSOR_METHODS (a `$/` method inside a successor envelope is connection-scoped like a bare
# one) are protocol facts, imported from `acp_fast.protocol.facts` and re-exported here.


def id_key(ident: object) -> tuple[bool, object]:
    """A JSON-RPC id as a dict key, the same on both sides: `1` and `"1"` differ."""
    return isinstance(ident, str), ident


#: The URL schemes of the remote client transport (``connect_url``).
URL_SCHEMES = ("ws://", "wss://", "http://", "https://")


def is_url(spec: object) -> bool:
    """True when `spec` is a string naming a remote agent (`ws(s)://` or `http(s)://`)."""
    return isinstance(spec, str) and spec.strip().lower().startswith(URL_SCHEMES)


#: What to install for the remote transports.
EXTRA_HINT = "pip install 'acp-fast[remote]'"


class MissingExtraError(ImportError):
    """A remote transport was used without the `remote` extra's packages installed."""


def require_extra(*modules: str) -> None:
    """Raise [`MissingExtraError`][acp_fast.remote._wire.MissingExtraError] naming the extra when one of `modules` is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtraError(
            f"the remote ACP transport needs {', '.join(missing)}, which is not installed: {EXTRA_HINT}")


def one_line(payload: bytes) -> bytes:
    """One JSON text (a POST body, an SSE `data` payload, a WebSocket text frame) as one line.

    Outer whitespace is dropped and every newline inside becomes a tab: outside a string both
    are JSON whitespace, inside one both are control characters that no JSON string may hold
    raw, so the line is valid JSON exactly when the text is, with the same meaning, and a
    text that is not valid stays one malformed line that the engine answers once (on stdio a
    newline would have made it two). Nothing is parsed here: any bytes cost one scan. The
    result has no newline; the caller appends the one that ends it.
    """
    return payload.strip().replace(b"\n", b"\t")  # no newline: the same object back, no copy


def sse_events(lines: Iterable[bytes], first_id: int | None = None) -> bytes:
    """Server-Sent Events for JSON lines, one event each (`data: <line>`), as one chunk.

    With `first_id` every event carries an `id:` cursor, counting up from it.
    """
    if first_id is None:
        return b"".join([b"data: " + line + b"\n\n" for line in lines])
    out = []
    n = first_id
    for line in lines:
        out.append(b"id: %d\ndata: %s\n\n" % (n, line))
        n += 1
    return b"".join(out)


class SseParser:
    """An incremental Server-Sent Events parser (the WHATWG event-stream rules).

    `feed(chunk)` returns the `data` of every event completed by the chunk, as bytes
    (multi-line data joined with `\\n`, as the rules say); comments, `event:` and
    `retry:` lines are skipped. `last_event_id` is the id of the last event
    completed (an `id:` line takes effect when its event ends, as the rules say), so a
    reader that resumes from it with `Last-Event-ID` has every event up to it.
    A line longer than `max_event` bytes (or an event's data over it) raises
    `ValueError`: memory stays bounded whatever the server sends.
    """

    __slots__ = ("_buf", "_data", "_size", "_id", "last_event_id", "max_event")

    def __init__(self, max_event: int = DEFAULT_MAX_BODY) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._size = 0
        self._id: str | None = None  # the last event ID buffer: set by ``id:``, kept across events
        self.last_event_id: str | None = None
        self.max_event = max_event

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk if self._buf else chunk
        events: list[bytes] = []
        start = 0
        n = len(buf)
        while start < n:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            end = nl - 1 if nl > start and buf[nl - 1] == 13 else nl  # CRLF
            line = buf[start:end]
            start = nl + 1
            if not line:
                self.last_event_id = self._id
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
                    self._size = 0
                continue
            if line[0] == 58:  # ":" comment (keep-alive)
                continue
            colon = line.find(b":")
            if colon < 0:
                field, value = line, b""
            else:
                field = line[:colon]
                value = line[colon + 1:]
                if value[:1] == b" ":
                    value = value[1:]
            if field == b"data":
                self._size += len(value)
                if self._size > self.max_event:
                    raise ValueError(f"SSE event over {self.max_event} bytes")
                self._data.append(value)
            elif field == b"id" and b"\0" not in value:
                self._id = value.decode("utf-8", "replace")
        rest = buf[start:]
        if len(rest) > self.max_event:
            raise ValueError(f"SSE line over {self.max_event} bytes")
        self._buf = rest
        return events


#: The start of a call as the engines write it, up to its ``params.sessionId`` when that is
#: the first key and its value has no escape (the group).
SESSION_FIRST = re.compile(rb'\{"jsonrpc":"2\.0",(?:"id":[^,"]*,|"id":"[^"\\]*",)?"method":"[^"\\]*",'
                            rb'"params":\{"sessionId":"([^"\\]*)"')


def params_session(frame: Any, line: bytes) -> tuple[object, bytes | None]:
    """`params.sessionId` of a call (`None` without one), and the line's start up to the
    end of that value when it was read from the bytes (`None` when decoded).

    Read from the line's bytes when the call starts as the engines write it and `"sessionId"`
    occurs in it once (the key itself); anything else is decoded. Any line that starts with
    the returned prefix and holds `"sessionId"` once has the same session."""
    found = SESSION_FIRST.match(line)
    if found is not None and line.count(b'"sessionId"') == 1:
        return found.group(1).decode("utf-8", "surrogateescape"), found.group(0)
    params = frame.params
    return (params.get("sessionId") if isinstance(params, dict) else None), None
