"""Pure-Python engine: the reference twin and the typed interface of the engine.

This module *is* the specification of the sans-IO engine. The compiled twin
(`_engine_c.pyx` over `csrc/`) must expose the same public names, constructor
parameters, attributes and return shapes, and must produce the same frames for the same
bytes however they are chunked; `tests/test_engine_diff.py` enforces that.

What it does: turn bytes of line-delimited JSON-RPC 2.0 into *frames* and values back into
complete `\\n`-terminated lines.

Frames (every frame has an integer `kind`):

* [`Message`][acp_fast._engine_py.Message] -- `kind` is `REQUEST`, `NOTIFICATION` or `RESPONSE`;
* [`Batch`][acp_fast._engine_py.Batch] -- `kind` is `BATCH`; a non-empty JSON array, boundary kept, each
  entry a [`Message`][acp_fast._engine_py.Message] or a [`Malformed`][acp_fast._engine_py.Malformed];
* [`Malformed`][acp_fast._engine_py.Malformed] -- `kind` is `MALFORMED`; a line (or batch entry) that is not a
  valid message, kept as a value with the JSON-RPC code to answer with.

Decoding policies (identical in both twins, each pinned by a named test):

* JSON is RFC 8259 strict: `NaN`/`Infinity` are rejected, a number that overflows a
  double (`1e400`) is rejected, a UTF-8 BOM is rejected; integers of any size are decoded
  exactly (`int`). The strict reader itself is `acp_fast._strictjson`.
* Unpaired UTF-16 surrogate escapes (`"\\ud800"`, which JavaScript's `JSON.stringify`
  writes for a lone surrogate) are accepted as Python's `json` accepts them: the `str`
  holds the lone surrogate. The encoders write such a character back as the same
  `\\udxxx` escape, so they never emit invalid UTF-8 (`INTEROP.md`).
* Nesting deeper than `max_depth` containers (default 128, the same limit as
  serde_json's) is rejected as invalid JSON. `max_depth` can be raised up to
  `MAX_DEPTH_LIMIT` (512) and no further: both twins decode that deep without
  `RecursionError` and within a 256 KiB thread stack (the compiled twin's descent is
  recursive).
* A batch of more than `max_batch_size` entries (default
  `DEFAULT_MAX_BATCH_SIZE`, 1024) is one `Malformed` value (-32600,
  `"batch too large (more than N entries)"`), answered with one error, not one per entry.
* Duplicate *envelope* keys (`jsonrpc`, `id`, `method`, `params`, `result`,
  `error`) make the message an invalid envelope; duplicate keys anywhere else: the last
  one wins (as in `dict`).
* Empty and whitespace-only lines are skipped. (The Rust SDK answers them with -32700; a
  blank line carries no message, so acp_fast does not answer it.)
* A trailing `\\r` is stripped (CRLF framing is tolerated).

Envelope validation follows `notes/protocol.md` §1.2; checks run in this order and the
first failing one names the `reason` of the [`Malformed`][acp_fast._engine_py.Malformed] value:

1. `"invalid UTF-8"` / `"invalid JSON"` (code -32700);
2. top level: a JSON array is a batch (`"empty batch"` if empty, -32600); any other
   non-object is `"not an object"` (-32600; also for non-object batch entries);
3. `"duplicate envelope key"`; 4. `"invalid jsonrpc version"` (must be exactly
   `"2.0"`);
5. with `method`: `"invalid envelope"` if `result` or `error` is present, then
   `"invalid method"` (not a string), `"invalid id"` (not an int64, string or null),
   `"invalid params"` (not an object, array or null);
6. without `method`: `"invalid envelope"` unless exactly one of `result`/`error` and
   an `id` are present, then `"invalid id"`, then `"invalid error object"` (`error`
   must be an object with an int32 `code` and a string `message`).

A line longer than `max_line_size` bytes (counted before its `\\n`) is discarded as soon
as it crosses the limit -- at most `max_line_size` bytes of it are ever held
(`Decoder.buffered`), never joined into one line -- and the rest of it up to its
newline is dropped as it arrives. It surfaces once, as `Malformed(raw=b"", code=-32600,
reason="line too long")` at the point where it was detected; the next line decodes
normally.

[`Forwarder`][acp_fast._engine_py.Forwarder] is the conductor's forwarding core: per hop a lazy decoder whose
messages are routed, re-id'd and appended to the destination's output inside `feed`; only
what a handler claims comes back as frames (see its docstring for the exact rules).

Lazy mode decodes only the envelope: `params`/`result` stay raw JSON bytes, decoded on
first access and cached. The whole line is still validated, so lazy and eager modes always
classify a line the same way.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Generic, Iterable, Iterator, List, NoReturn, TypeVar, Union

from ._kinds import BATCH, MALFORMED, NOTIFICATION, REQUEST, RESPONSE
from ._kinds import check_batch_state, check_message_state
from ._rawjson import RawJson
from ._strictjson import MAX_DEPTH_LIMIT
from ._strictjson import ByteOffsets as _ByteOffsets
from ._strictjson import InvalidJson as _InvalidJson
from ._strictjson import Scanned as _Scanned
from ._strictjson import depth_exceeds as _depth_exceeds
from ._strictjson import loads_strict as _loads_strict
from ._strictjson import scan_array_spans as _scan_array_spans
from ._strictjson import scan_object as _scan_object
from ._strictjson import skip_ws as _skip_ws
from ._strictjson import utf8_json as _utf8_json
from .errors import (
    DEFAULT_MESSAGES,
    INVALID_REQUEST,
    PARSE_ERROR,
    DecoderClosedError,
    EncodeError,
    SendBufferFull,
)
from .jsontypes import Json, JsonObject, RequestId
from .protocol.facts import FORWARD_CLAIMED_METHODS, PROXY_SUCCESSOR, PROXY_SUCCESSOR_SPEC, SUCCESSOR_METHODS

__all__ = [
    "IMPLEMENTATION",
    "COMPILED",
    "REQUEST",
    "NOTIFICATION",
    "RESPONSE",
    "BATCH",
    "MALFORMED",
    "DEFAULT_MAX_LINE_SIZE",
    "DEFAULT_MAX_DEPTH",
    "MAX_DEPTH_LIMIT",
    "DEFAULT_MAX_BATCH_SIZE",
    "RawJson",
    "Message",
    "Batch",
    "Malformed",
    "Frame",
    "Decoder",
    "LineSplitter",
    "encode_request",
    "encode_notification",
    "encode_result",
    "encode_error",
    "encode_batch",
    "encode_value",
    "forward",
    "BatchReply",
    "error_reply",
    "Forwarder",
    "Outbox",
    "DEFAULT_MAX_WRITE_BUFFER",
    "DEFAULT_FLUSH_AT",
]

IMPLEMENTATION = "py"
#: capability flag: this twin is compiled (its encoders splice a `RawJson` inside a dict in one copy)
COMPILED = False

DEFAULT_MAX_LINE_SIZE = 64 * 1024 * 1024
DEFAULT_MAX_DEPTH = 128
DEFAULT_MAX_BATCH_SIZE = 1024
#: Forwarder: requests in flight per hop before the fast path leaves requests to Python.
DEFAULT_MAX_PENDING = 65536

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_UNSET: Any = object()
_WS_BYTES = b" \t\r\n"


# ---------------------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------------------


class Message:
    """One valid JSON-RPC message: a request, a notification or a response.

    Attributes:
        kind: `REQUEST`, `NOTIFICATION` or `RESPONSE`.
        id: the typed id (`int`, `str` or `None`); `1` and `"1"` differ. `None`
            for notifications and for `"id": null`.
        method: the method name (`None` for responses).
        error: the decoded error object of an error response, else `None`.

    `params` (calls) and `result` (success responses) are decoded on first access in
    lazy mode and cached; `params_raw`/`result_raw`/`raw` give the verbatim bytes as
    [`RawJson`][acp_fast._engine_py.RawJson] without decoding anything.
    """

    __slots__ = ("kind", "id", "method", "error", "_line", "_start", "_end", "_ids", "_ide",
                 "_ps", "_pe", "_value")

    kind: int
    id: int | str | None
    method: str | None
    error: JsonObject | None
    _line: bytes
    _start: int
    _end: int
    _ids: int
    _ide: int
    _ps: int
    _pe: int
    _value: Json

    # Spans are byte offsets into ``_line`` (the whole line the message came in); ``_ids``
    # is -1 when the message has no id key, ``_ps`` -1 when it has no payload (params
    # absent or null; error responses), and -2 while spans are not computed yet (eager
    # mode computes them only when first needed).

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Message values are made by a Decoder (Decoder.feed), not constructed")

    def __reduce__(self) -> tuple[Any, ...]:
        self._ensure_spans()
        unset = self._value is _UNSET
        return (_restore_message, (
            self.kind, self.id, self.method, self.error, self._line, self._start, self._end,
            self._ids, self._ide, self._ps, self._pe, None if unset else self._value, unset))

    def __repr__(self) -> str:
        name = {REQUEST: "request", NOTIFICATION: "notification", RESPONSE: "response"}[self.kind]
        parts = [name]
        if self.kind != NOTIFICATION:
            parts.append(f"id={self.id!r}")
        if self.method is not None:
            parts.append(f"method={self.method!r}")
        if self.error is not None:
            parts.append(f"error={self.error!r}")
        return f"<Message {' '.join(parts)}>"

    def _ensure_spans(self) -> None:
        if self._ps != -2:
            return
        # Eager mode decoded with json.loads; find the spans with the scanner now.
        line = self._line[self._start:self._end]
        text = line.decode("utf-8")
        scanned, _ = _scan_object(text, _skip_ws(text, 0))
        off = _ByteOffsets(text, len(line))
        base = self._start
        m = scanned.members
        ident = m.get("id")
        if ident is None:
            self._ids = self._ide = -1
        else:
            self._ids, self._ide = base + off(ident[1]), base + off(ident[2])
        key = "params" if self.kind != RESPONSE else "result"
        payload = m.get(key)
        if payload is None or (key == "params" and payload[0] is None):
            self._ps = self._pe = -1
        else:
            self._ps, self._pe = base + off(payload[1]), base + off(payload[2])

    def _payload(self) -> Json:
        value = self._value
        if value is _UNSET:
            if self._ps < 0:
                value = None
            else:
                value = _loads_strict(self._line[self._ps:self._pe].decode("utf-8"))
            self._value = value
        return value

    def _payload_raw(self) -> RawJson | None:
        self._ensure_spans()
        if self._ps < 0:
            return None
        return RawJson(self._line[self._ps:self._pe])

    @property
    def params(self) -> Json:
        """Decoded `params` (`None` when absent or null, and for responses)."""
        if self.kind == RESPONSE:
            return None
        return self._payload()

    @property
    def result(self) -> Json:
        """Decoded `result` of a success response (`None` otherwise)."""
        if self.kind != RESPONSE:
            return None
        return self._payload()

    @property
    def params_raw(self) -> RawJson | None:
        """Verbatim `params` bytes (`None` when absent or null, and for responses)."""
        if self.kind == RESPONSE:
            return None
        return self._payload_raw()

    @property
    def result_raw(self) -> RawJson | None:
        """Verbatim `result` bytes of a success response (`None` otherwise)."""
        if self.kind != RESPONSE:
            return None
        return self._payload_raw()

    @property
    def raw(self) -> RawJson:
        """The message exactly as received (without the line terminator)."""
        return RawJson(self._line[self._start:self._end])

    @property
    def is_error(self) -> bool:
        """True for an error response."""
        return self.error is not None


class Batch:
    """A non-empty JSON-RPC batch (one JSON array on one line), boundary kept.

    `entries` holds one [`Message`][acp_fast._engine_py.Message] or [`Malformed`][acp_fast._engine_py.Malformed] per array element, in
    source order; `raw` is the whole line.
    """

    __slots__ = ("entries", "_line")
    kind = BATCH

    entries: list[Message | Malformed]
    _line: bytes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Batch values are made by a Decoder (Decoder.feed), not constructed")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_batch, (self.entries, self._line, 0, len(self._line)))

    @property
    def raw(self) -> RawJson:
        """The whole batch line, verbatim (without its newline)."""
        return RawJson(self._line)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Message | Malformed]:
        return iter(self.entries)

    def __getitem__(self, i: int) -> Message | Malformed:
        return self.entries[i]

    def __repr__(self) -> str:
        return f"<Batch {self.entries!r}>"


class Malformed:
    """A line or batch entry that is not a valid message, kept as a value.

    Attributes:
        raw: the offending bytes (the line, or the entry's span inside a batch; empty for
            a line over `max_line_size`, which is never buffered).
        code: the JSON-RPC code to answer with: -32700 (invalid JSON, including invalid
            UTF-8 and over-deep nesting) or -32600 (invalid envelope, empty batch, line
            too long).
        reason: a short fixed phrase naming the first rule that failed.
        response_shaped: True for an object without `method` that has `result` or
            `error`: such a value must never be answered.
    """

    __slots__ = ("raw", "code", "reason", "response_shaped")
    kind = MALFORMED

    raw: bytes
    code: int
    reason: str
    response_shaped: bool

    def __init__(self, raw: bytes, code: int, reason: str, response_shaped: bool = False) -> None:
        self.raw = raw
        self.code = code
        self.reason = reason
        self.response_shaped = response_shaped

    def __repr__(self) -> str:
        shaped = " response-shaped" if self.response_shaped else ""
        return f"<Malformed {self.code} {self.reason!r}{shaped} raw={self.raw[:60]!r}>"


Frame = Union[Message, Batch, Malformed]


def _restore_message(kind: Any, id: Any, method: Any, error: Any, line: Any, start: Any,
                     end: Any, ids: Any, ide: Any, ps: Any, pe: Any, value: Any,
                     unset: Any) -> Message:
    """Unpickle a Message (see Message.__reduce__); refuses state no decoder makes."""
    check_message_state(kind, id, method, error, line, start, end, ids, ide, ps, pe)
    m = Message.__new__(Message)
    m.kind, m.id, m.method, m.error = kind, id, method, error
    m._line, m._start, m._end, m._ids, m._ide, m._ps, m._pe = line, start, end, ids, ide, ps, pe
    m._value = _UNSET if unset else value
    return m


def _restore_batch(entries: Any, line: Any, start: Any, end: Any) -> Batch:
    """Unpickle a Batch (see Batch.__reduce__); refuses state no decoder makes."""
    check_batch_state(entries, line, start, end, (Message, Malformed))
    if (start, end) != (0, len(line)):
        raise ValueError("Batch span out of range")
    b = Batch.__new__(Batch)
    b.entries = entries
    b._line = line
    return b


def _check_limits(max_line_size: Any, max_depth: Any, max_batch_size: Any) -> None:
    """The Decoder's argument checks (shared wording with the compiled twin)."""
    if max_line_size < 1:
        raise ValueError("max_line_size must be >= 1")
    if not 1 <= max_depth <= MAX_DEPTH_LIMIT:
        raise ValueError(f"max_depth must be between 1 and {MAX_DEPTH_LIMIT}")
    if max_batch_size < 1:
        raise ValueError("max_batch_size must be >= 1")


def _batch_too_large(limit: int) -> str:
    return f"batch too large (more than {limit} entries)"


def _invalid(raw: bytes, reason: str, response_shaped: bool = False) -> Malformed:
    return Malformed(raw, INVALID_REQUEST, reason, response_shaped)


def _valid_id(value: Any) -> bool:
    t = type(value)
    if t is int:
        return bool(_INT64_MIN <= value <= _INT64_MAX)
    return t is str or value is None


def _classify(obj: dict[str, Any], raw: bytes) -> Message | Malformed:
    """Validate a decoded envelope (after the duplicate-key check); see module docs."""
    if obj.get("jsonrpc", _UNSET) != "2.0" or type(obj["jsonrpc"]) is not str:
        return _invalid(raw, "invalid jsonrpc version", _response_shaped(obj))
    msg = Message.__new__(Message)
    if "method" in obj:
        if "result" in obj or "error" in obj:
            return _invalid(raw, "invalid envelope")
        method = obj["method"]
        if type(method) is not str:
            return _invalid(raw, "invalid method")
        if "id" in obj:
            ident = obj["id"]
            if not _valid_id(ident):
                return _invalid(raw, "invalid id")
            msg.kind = REQUEST
            msg.id = ident
        else:
            msg.kind = NOTIFICATION
            msg.id = None
        params = obj.get("params")
        if params is not None and type(params) is not dict and type(params) is not list:
            return _invalid(raw, "invalid params")
        msg.method = method
        msg.error = None
        msg._value = params
        return msg
    has_result = "result" in obj
    has_error = "error" in obj
    if has_result == has_error or "id" not in obj:
        return _invalid(raw, "invalid envelope", has_result or has_error)
    ident = obj["id"]
    if not _valid_id(ident):
        return _invalid(raw, "invalid id", True)
    msg.kind = RESPONSE
    msg.id = ident
    msg.method = None
    if has_error:
        error = obj["error"]
        if (
            type(error) is not dict
            or type(error.get("code")) is not int
            or not _INT32_MIN <= error["code"] <= _INT32_MAX
            or type(error.get("message")) is not str
        ):
            return _invalid(raw, "invalid error object", True)
        msg.error = error
        msg._value = None
    else:
        msg.error = None
        msg._value = obj["result"]
    return msg


# ---------------------------------------------------------------------------------------
# Decoder
# ---------------------------------------------------------------------------------------


_T = TypeVar("_T")


class _Framing(Generic[_T]):
    """Line framing shared by [`Decoder`][acp_fast._engine_py.Decoder] and [`LineSplitter`][acp_fast._engine_py.LineSplitter]: a line is the bytes
    before `\\n`; a line over `max_line_size` is discarded up to its newline without being
    buffered, and stands as `_too_long` in the output; every other non-empty line goes
    to `_line`."""

    __slots__ = ("_max_line_size", "_buf", "_discarding", "_closed")

    _max_line_size: int
    _buf: bytearray
    _discarding: bool
    _closed: bool

    @property
    def max_line_size(self) -> int:
        """The longest line buffered, in bytes before the newline."""
        return self._max_line_size

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete line held until its newline arrives."""
        return len(self._buf)

    @property
    def closed(self) -> bool:
        """True after `feed_eof`."""
        return self._closed

    def feed(self, data: bytes | bytearray | memoryview) -> list[_T]:
        """Feed a chunk; returns, in order, what every line it completes gives: frames for a
        [`Decoder`][acp_fast._engine_py.Decoder], lines for a [`LineSplitter`][acp_fast._engine_py.LineSplitter].

        A partial last line is kept for the next call.

        Raises:
            DecoderClosedError: after `feed_eof`.
        """
        if self._closed:
            raise DecoderClosedError("feed() after feed_eof()")
        if not isinstance(data, bytes):
            data = bytes(data)
        out: list[_T] = []
        if not data:
            return out
        max_size = self._max_line_size
        start = 0
        if self._discarding:
            nl = data.find(b"\n")
            if nl < 0:
                return out
            self._discarding = False
            start = nl + 1
        buf = self._buf
        if buf:
            nl = data.find(b"\n", start)
            if nl < 0:
                if len(buf) + len(data) - start > max_size:
                    self._overflow(out)
                else:
                    buf += data[start:] if start else data
                return out
            if len(buf) + nl - start > max_size:
                # Checked before joining: the over-long line is never copied.
                buf.clear()
                out.append(self._too_long())
            else:
                line = bytes(buf) + data[start:nl]
                buf.clear()
                self._line(line, out)
            start = nl + 1
        parts = data[start:].split(b"\n") if start else data.split(b"\n")
        tail = parts.pop()
        for line in parts:
            if len(line) > max_size:
                out.append(self._too_long())
            elif line:
                self._line(line, out)
        if tail:
            if len(tail) > max_size:
                self._overflow(out)
            else:
                buf += tail
        return out

    def feed_eof(self) -> list[_T]:
        """Signal end of input; returns what a final unterminated line gives, if anything.

        Raises:
            DecoderClosedError: when called twice.
        """
        if self._closed:
            raise DecoderClosedError("feed_eof() called twice")
        self._closed = True
        out: list[_T] = []
        if self._buf:
            line = bytes(self._buf)
            self._buf.clear()
            self._line(line, out)
        self._discarding = False
        return out

    def _overflow(self, out: list[_T]) -> None:
        self._buf.clear()
        self._discarding = True
        out.append(self._too_long())

    def _too_long(self) -> _T:
        raise NotImplementedError

    def _line(self, line: bytes, out: list[_T]) -> None:
        raise NotImplementedError


class Decoder(_Framing[Frame]):
    """Sans-IO decoder: bytes of line-delimited JSON-RPC in, frames out.

    Args:
        lazy: keep `params`/`result` as raw JSON, decoded on first access.
        max_line_size: the longest line (bytes before `\\n`) that is buffered; a longer
            one is discarded up to its newline and reported as a `Malformed` frame.
        max_depth: the deepest container nesting accepted (deeper is invalid JSON); at most
            `MAX_DEPTH_LIMIT` (512), a depth both twins decode on any thread's stack.
        max_batch_size: the most entries a batch may have; a longer batch is one
            `Malformed` frame (-32600, reason `"batch too large (more than N entries)"`)
            instead of one entry per element, so that neither the frame nor its reply grow
            with the peer's array.

    `feed` never raises for bad input: every problem of the peer's bytes comes back as a
    [`Malformed`][acp_fast._engine_py.Malformed] frame in its place, and decoding goes on with the next line. The
    only errors it raises are local ones ([`DecoderClosedError`][acp_fast.errors.DecoderClosedError],
    `TypeError` for a non-bytes argument).
    """

    __slots__ = ("_lazy", "_max_depth", "_max_batch_size")

    def __init__(
        self,
        *,
        lazy: bool = False,
        max_line_size: int = DEFAULT_MAX_LINE_SIZE,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    ) -> None:
        _check_limits(max_line_size, max_depth, max_batch_size)
        self._lazy = bool(lazy)
        self._max_line_size = int(max_line_size)
        self._max_depth = int(max_depth)
        self._max_batch_size = int(max_batch_size)
        self._buf = bytearray()
        self._discarding = False
        self._closed = False

    @property
    def lazy(self) -> bool:
        """True when `params`/`result` stay raw JSON until first accessed."""
        return self._lazy

    @property
    def max_line_size(self) -> int:
        """The longest line buffered, in bytes before the newline; longer lines are `Malformed`."""
        return self._max_line_size

    @property
    def max_depth(self) -> int:
        """The deepest container nesting accepted; deeper lines are -32700."""
        return self._max_depth

    @property
    def max_batch_size(self) -> int:
        """The most entries a batch may have; a longer one is a single -32600 `Malformed`."""
        return self._max_batch_size

    def _too_long(self) -> Frame:
        return _invalid(b"", "line too long")

    def _line(self, line: bytes, frames: list[Frame]) -> None:
        if line[-1] == 0x0D:  # CRLF
            line = line[:-1]
            if not line:
                return
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            frames.append(Malformed(line, PARSE_ERROR, "invalid UTF-8"))
            return
        if (line[0] in _WS_BYTES or line[-1] in _WS_BYTES) and not line.strip(_WS_BYTES):
            return  # whitespace-only line: skipped
        if _depth_exceeds(line, self._max_depth):
            frames.append(Malformed(line, PARSE_ERROR, "invalid JSON"))
            return
        first = text[_skip_ws(text, 0)] if text else ""
        try:
            if first == "[" or self._lazy or first != "{":
                frame = self._line_scanned(line, text)
            else:
                frame = self._line_eager(line, text)
        except _InvalidJson:
            frame = Malformed(line, PARSE_ERROR, "invalid JSON")
        frames.append(frame)

    def _line_eager(self, line: bytes, text: str) -> Frame:
        obj = _loads_strict(text)
        if _maybe_duplicate_envelope(line):
            # Counting says an envelope key may repeat: decide with the exact scanner.
            scanned, _ = _scan_object(text, _skip_ws(text, 0))
            if scanned.duplicate:
                return _invalid(line, "duplicate envelope key", _response_shaped(obj))
        msg = _classify(obj, line)
        if type(msg) is Message:
            msg._line = line
            msg._start = 0
            msg._end = len(line)
            msg._ps = -2
        return msg

    def _line_scanned(self, line: bytes, text: str) -> Frame:
        pos = _skip_ws(text, 0)
        if text.startswith("{", pos):
            scanned, end = _scan_object(text, pos)
            if _skip_ws(text, end) != len(text):
                raise _InvalidJson("extra data")
            return self._message_from_scan(scanned, line, 0, len(line), _ByteOffsets(text, len(line)))
        if text.startswith("[", pos):
            limit = self._max_batch_size
            items, count, end = _scan_array_spans(text, pos, limit)
            if _skip_ws(text, end) != len(text):
                raise _InvalidJson("extra data")
            if not count:
                return _invalid(line, "empty batch")
            if count > limit:
                return _invalid(line, _batch_too_large(limit))
            off = _ByteOffsets(text, len(line))
            batch = Batch.__new__(Batch)
            batch._line = line
            entries: list[Message | Malformed] = []
            for value, s, e in items:
                bs, be = off(s), off(e)
                if type(value) is not dict:
                    entries.append(_invalid(line[bs:be], "not an object"))
                    continue
                sub_text = text[s:e]
                scanned, _ = _scan_object(sub_text, 0)
                sub_off = _ByteOffsets(sub_text, be - bs)
                entries.append(self._message_from_scan(scanned, line, bs, be, sub_off))
            batch.entries = entries
            return batch
        _loads_strict(text)  # validates; any other JSON value is not an object
        return _invalid(line, "not an object")

    def _message_from_scan(
        self, scanned: _Scanned, line: bytes, start: int, end: int, off: _ByteOffsets
    ) -> Message | Malformed:
        members = scanned.members
        raw = line[start:end]
        obj = {k: v[0] for k, v in members.items()}
        if scanned.duplicate:
            return _invalid(raw, "duplicate envelope key", _response_shaped(obj))
        msg = _classify(obj, raw)
        if type(msg) is not Message:
            return msg
        msg._line = line
        msg._start = start
        msg._end = end
        ident = members.get("id")
        if ident is None:
            msg._ids = msg._ide = -1
        else:
            msg._ids, msg._ide = start + off(ident[1]), start + off(ident[2])
        payload = members.get("params" if msg.kind != RESPONSE else "result")
        if payload is None or msg.error is not None or (msg.kind != RESPONSE and payload[0] is None):
            msg._ps = msg._pe = -1
        else:
            msg._ps, msg._pe = start + off(payload[1]), start + off(payload[2])
        return msg


#: How the engines begin every request and notification they write (no response begins so).
_CALL_HEAD = b'{"jsonrpc":"2.0","method":'


class LineSplitter(_Framing[bytes]):
    """Sans-IO framing without decoding: bytes in, the lines a [`Decoder`][acp_fast._engine_py.Decoder] would frame out.

    For a consumer that forwards every line as it is and so needs no decoding (a WebSocket
    sending each line of an agent in its own frame). `feed` returns, in order, exactly the
    `raw` of the frames a `Decoder` with the same `max_line_size` gives for the same
    bytes, as `bytes`: one trailing CR dropped, empty and whitespace-only lines skipped, and
    `b""` in place of a line over `max_line_size`, which is discarded up to its newline
    without being buffered (the `Decoder`'s `Malformed` frame for it has an empty
    `raw` too). Whether a line is JSON is not looked at.

    Args:
        max_line_size: the longest line (bytes before `\\n`) that is buffered.
        count_calls: count the lines that begin as the engines begin a call (`calls`).
    """

    __slots__ = ("_calls", "_counting")

    def __init__(self, *, max_line_size: int = DEFAULT_MAX_LINE_SIZE, count_calls: bool = False) -> None:
        if max_line_size < 1:
            raise ValueError("max_line_size must be >= 1")
        self._max_line_size = int(max_line_size)
        self._buf = bytearray()
        self._discarding = False
        self._closed = False
        self._calls = 0
        self._counting = bool(count_calls)

    @property
    def calls(self) -> int:
        """With `count_calls`: how many of the lines the last `feed` (or `feed_eof`)
        returned begin as the engines begin a call, `{"jsonrpc":"2.0","method":` (a request
        or a notification: no response begins so), equal to their number when every one of
        them is such a call; without it, 0."""
        return self._calls

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Split a chunk; returns every line completed by it, in order (see the class).

        A partial last line is kept for the next call.

        Raises:
            DecoderClosedError: after `feed_eof`.
        """
        self._calls = 0
        return super().feed(data)

    def feed_eof(self) -> list[bytes]:
        """Signal end of input; returns a final unterminated line, if any.

        Raises:
            DecoderClosedError: when called twice.
        """
        self._calls = 0
        return super().feed_eof()

    def _too_long(self) -> bytes:
        return b""

    def _line(self, line: bytes, out: list[bytes]) -> None:
        if line[-1] == 0x0D:  # CRLF
            line = line[:-1]
            if not line:
                return
        if (line[0] in _WS_BYTES or line[-1] in _WS_BYTES) and not line.strip(_WS_BYTES):
            return  # whitespace-only line: skipped
        if self._counting and line.startswith(_CALL_HEAD):
            self._calls += 1
        out.append(line)


def _maybe_duplicate_envelope(line: bytes) -> bool:
    # Envelope keys are ASCII letters: an escaped spelling ("i\u0064") needs "\u00".
    return (
        b"\\u00" in line
        or line.count(b'"id"') > 1
        or line.count(b'"method"') > 1
        or line.count(b'"params"') > 1
        or line.count(b'"result"') > 1
        or line.count(b'"error"') > 1
        or line.count(b'"jsonrpc"') > 1
    )


def _response_shaped(obj: Any) -> bool:
    return type(obj) is dict and "method" not in obj and ("result" in obj or "error" in obj)


# ---------------------------------------------------------------------------------------
# Encoders
# ---------------------------------------------------------------------------------------


class _HasRaw(Exception):
    pass


def _default_strict(o: object) -> NoReturn:
    if isinstance(o, RawJson):
        raise _HasRaw
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


_dumps_fast = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_default_strict
).encode


def _dumps_with_raw(obj: Json) -> bytes:
    """Slow path: splice `RawJson` values found inside `obj` through unique markers."""
    nonce = os.urandom(8).hex()
    raws: list[bytes] = []

    def default(o: object) -> str:
        if isinstance(o, RawJson):
            _check_raw(o)
            raws.append(bytes(o))
            return f"\x00{nonce}:{len(raws) - 1}"
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    text = json.JSONEncoder(
        separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=default
    ).encode(obj)
    out = _utf8_json(text)
    for i, raw in enumerate(raws):
        out = out.replace(f'"\\u0000{nonce}:{i}"'.encode(), raw, 1)
    return out


def _check_raw(raw: bytes) -> None:
    if b"\n" in raw:
        raise EncodeError("RawJson value contains a newline")
    if not raw.strip(_WS_BYTES):
        raise EncodeError("RawJson value is empty")


def encode_value(obj: Json) -> bytes:
    """Compact UTF-8 JSON for `obj` (no newline), splicing [`RawJson`][acp_fast._engine_py.RawJson] verbatim.

    Output is byte-identical to `json.dumps(obj, separators=(",", ":"),
    ensure_ascii=False, allow_nan=False)` encoded as UTF-8 when `obj` holds no
    `RawJson` and no lone surrogate; a lone surrogate (`"\\ud800"`), which UTF-8 cannot
    carry, is written as its `\\udxxx` escape (what `json.dumps` writes with
    `ensure_ascii=True`), so the output is always valid UTF-8.

    Raises:
        EncodeError: unsupported type, NaN/Infinity, circular or too deep structure,
            `RawJson` with a newline.
    """
    if type(obj) is RawJson:
        _check_raw(obj)
        return bytes(obj)
    try:
        return _utf8_json(_dumps_fast(obj))
    except _HasRaw:
        pass
    except (TypeError, ValueError, RecursionError) as exc:
        raise EncodeError(str(exc)) from None
    try:
        return _dumps_with_raw(obj)
    except EncodeError:
        raise
    except (TypeError, ValueError, RecursionError) as exc:
        raise EncodeError(str(exc)) from None


def _encode_id(ident: Any) -> bytes:
    t = type(ident)
    if t is int:
        if not _INT64_MIN <= ident <= _INT64_MAX:
            raise EncodeError(f"request id {ident} does not fit in 64 bits")
        return str(ident).encode()
    if t is str:
        return encode_value(ident)
    if ident is None:
        return b"null"
    raise EncodeError(f"request id must be int, str or None, not {t.__name__}")


def _encode_method(method: Any) -> bytes:
    if type(method) is not str:
        raise EncodeError(f"method must be str, not {type(method).__name__}")
    return encode_value(method)


def _check_params(params: Any) -> None:
    """JSON-RPC `params` must be an object or an array (protocol.md §1.2 rule 15)."""
    if isinstance(params, RawJson):
        if params.lstrip(_WS_BYTES)[:1] not in (b"{", b"["):
            raise EncodeError("params must be a JSON object or array; RawJson holds neither")
    elif not isinstance(params, (dict, list, tuple)):
        raise EncodeError(f"params must be a JSON object or array, not {type(params).__name__}")


def encode_request(id: RequestId | None, method: str, params: Json = None) -> bytes:
    """`{"jsonrpc":"2.0","id":…,"method":…,"params":…}\\n` (params omitted when None).

    Raises:
        EncodeError: an invalid id or method, `params` that is not a dict, list, tuple or
            `RawJson` object/array, or a value [`encode_value`][acp_fast._engine_py.encode_value] rejects.
    """
    head = b'{"jsonrpc":"2.0","id":' + _encode_id(id) + b',"method":' + _encode_method(method)
    if params is None:
        return head + b"}\n"
    _check_params(params)
    return head + b',"params":' + encode_value(params) + b"}\n"


def encode_notification(method: str, params: Json = None) -> bytes:
    """`{"jsonrpc":"2.0","method":…,"params":…}\\n` (params omitted when None).

    Raises:
        EncodeError: as [`encode_request`][acp_fast._engine_py.encode_request].
    """
    head = b'{"jsonrpc":"2.0","method":' + _encode_method(method)
    if params is None:
        return head + b"}\n"
    _check_params(params)
    return head + b',"params":' + encode_value(params) + b"}\n"


def encode_result(id: RequestId | None, result: Json) -> bytes:
    """`{"jsonrpc":"2.0","id":…,"result":…}\\n` (`None` becomes `null`)."""
    return b'{"jsonrpc":"2.0","id":' + _encode_id(id) + b',"result":' + encode_value(result) + b"}\n"


def encode_error(id: RequestId | None, code: int, message: str | None = None, data: Json = _UNSET) -> bytes:
    """`{"jsonrpc":"2.0","id":…,"error":{"code","message","data"?}}\\n`.

    `message` defaults to the standard text for `code`; `data` is omitted unless given.
    """
    if type(code) is not int or not _INT32_MIN <= code <= _INT32_MAX:
        raise EncodeError(f"error code must be a 32-bit int, not {code!r}")
    if message is None:
        message = DEFAULT_MESSAGES.get(code, "Error")
    elif type(message) is not str:
        raise EncodeError(f"error message must be str, not {type(message).__name__}")
    out = (
        b'{"jsonrpc":"2.0","id":' + _encode_id(id) + b',"error":{"code":' + str(code).encode()
        + b',"message":' + encode_value(message)
    )
    if data is not _UNSET:
        out += b',"data":' + encode_value(data)
    return out + b"}}\n"


def encode_batch(lines: Iterable[bytes]) -> bytes:
    """Join encoded lines (each `\\n`-terminated) into one batch array line.

    Raises:
        EncodeError: for no lines (JSON-RPC never sends an empty array) or a line that does
            not end with exactly one newline.
    """
    parts: List[bytes] = []
    for line in lines:
        if not line.endswith(b"\n") or b"\n" in line[:-1]:
            raise EncodeError("batch parts must be single encoded lines ending with a newline")
        parts.append(line[:-1])
    if not parts:
        raise EncodeError("a batch reply is never an empty array")
    return b"[" + b",".join(parts) + b"]\n"


_KEEP: Any = object()


def forward(message: Message, id: RequestId | None = _KEEP) -> bytes:
    """Re-emit `message` as a line, with `id` spliced in place of its own id.

    Nothing but the id's bytes changes; `params`/`result` are never re-encoded.
    Without `id` the message is re-emitted verbatim.

    Raises:
        EncodeError: `id` is given for a notification (it has no id to replace), or is
            not a valid id.
    """
    message._ensure_spans()
    line = message._line
    if id is _KEEP:
        return line[message._start:message._end] + b"\n"
    if message._ids < 0:
        raise EncodeError("cannot give an id to a notification")
    return line[message._start:message._ids] + _encode_id(id) + line[message._ide:message._end] + b"\n"


# ---------------------------------------------------------------------------------------
# Forwarder: the conductor's pass-through path
# ---------------------------------------------------------------------------------------

#: 1: never forwarded by the fast path (a handler claims it); 2: a successor envelope.
_FWD_METHODS = {**dict.fromkeys(sorted(FORWARD_CLAIMED_METHODS), 1), **dict.fromkeys(sorted(SUCCESSOR_METHODS), 2)}
_SUCCESSOR_NAMES = (PROXY_SUCCESSOR, PROXY_SUCCESSOR_SPEC)
_CLAIMED_TOKENS = frozenset(b'"' + name.encode() + b'"' for name, v in _FWD_METHODS.items() if v == 1)
_TOO_LONG = "line too long"


def _string_end(b: bytes, i: int) -> int:
    """`b[i] == '"'`: the index after the closing quote (validated JSON)."""
    n = len(b)
    i += 1
    while i < n:
        j = b.find(b'"', i)
        if j < 0:
            return n
        k = j
        while k > i and b[k - 1] == 0x5C:  # backslashes right before the quote
            k -= 1
        if (j - k) % 2 == 0:
            return j + 1
        i = j + 1
    return n


def _value_end(b: bytes, i: int) -> int:
    """The index after the (validated) JSON value starting at `b[i]`."""
    n = len(b)
    c = b[i]
    if c == 0x22:
        return _string_end(b, i)
    if c == 0x7B or c == 0x5B:
        depth = 0
        while i < n:
            c = b[i]
            if c == 0x22:
                i = _string_end(b, i)
                continue
            if c == 0x7B or c == 0x5B:
                depth += 1
            elif c == 0x7D or c == 0x5D:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return n
    while i < n and b[i] not in b' \t\r\n,}]':
        i += 1
    return i


def _skip_ws_b(b: bytes, i: int) -> int:
    n = len(b)
    while i < n and b[i] in _WS_BYTES:
        i += 1
    return i


def _unwrap_envelope(b: bytes) -> tuple[bytes, bytes | None] | None:
    """The inner `(method token, params bytes or None)` of a successor envelope's params
    `b` (a validated JSON object), or `None` when the fast path must leave it to the
    Python path: see [`Forwarder`][acp_fast._engine_py.Forwarder] for the exact rule (`csrc/acp_forward.cpp` is
    the compiled twin of this function)."""
    n = len(b)
    method: bytes | None = None
    params: bytes | None = None
    have_params = False
    i = _skip_ws_b(b, 0)
    if i >= n or b[i] != 0x7B:
        return None
    i = _skip_ws_b(b, i + 1)
    if i < n and b[i] == 0x7D:
        return None
    while i < n:
        if b[i] != 0x22:
            return None
        ke = _string_end(b, i)
        key = b[i + 1:ke - 1]
        if b"\\" in key:
            return None
        i = _skip_ws_b(b, ke)
        if i >= n or b[i] != 0x3A:
            return None
        vs = _skip_ws_b(b, i + 1)
        if vs >= n:
            return None
        ve = _value_end(b, vs)
        if key == b"method":
            if method is not None or b[vs] != 0x22 or b"\\" in b[vs:ve]:
                return None
            method = b[vs:ve]
        elif key == b"params":
            if have_params:
                return None
            have_params = True
            c = b[vs]
            if c == 0x7B or c == 0x5B:
                params = b[vs:ve]
            elif c != 0x6E:
                return None
        elif key in (b"jsonrpc", b"id", b"result", b"error"):
            return None
        i = _skip_ws_b(b, ve)
        if i < n and b[i] == 0x2C:
            i = _skip_ws_b(b, i + 1)
            continue
        if i < n and b[i] == 0x7D and method is not None:
            return method, params
        return None
    return None


# ---------------------------------------------------------------------------------------
# Outbox: a connection's queued output
# ---------------------------------------------------------------------------------------

#: Bytes queued for a peer that is not reading above which :meth:`Outbox.notify` refuses.
DEFAULT_MAX_WRITE_BUFFER = 8 * 1024 * 1024
#: Queued bytes handed to the transport at once, without waiting for the scheduled flush.
DEFAULT_FLUSH_AT = 256 * 1024


class Outbox:
    """A connection's outgoing lines: encode, queue and flush scheduling in one call each.

    Sans-IO: the caller gives the three ways out. Every line queued between two flushes goes
    out in one `write` call, in the order queued. The first line queued after a flush asks
    `schedule(flush)` once (one transport write per loop turn with `loop.call_soon`),
    unless `holding` is set (the caller flushes at the end of its batch of work, see
    [`release`][acp_fast._engine_py.Outbox.release]); more than `flush_at` queued bytes are flushed at once.

    Args:
        write: takes the bytes of one flush (the transport's `write`).
        schedule: `schedule(fn)` runs `fn()` soon (`loop.call_soon`).
        buffered: `buffered()` is the bytes the transport itself still holds (asked only
            while `paused` or over `max_buffer`).
        max_buffer: bytes queued here plus held by the transport above which
            [`notify`][acp_fast._engine_py.Outbox.notify] and [`check_room`][acp_fast._engine_py.Outbox.check_room] raise
            [`SendBufferFull`][acp_fast.errors.SendBufferFull], once the transport paused writing or
            this queue alone is over the limit.
        flush_at: queued bytes flushed at once.

    Attributes:
        paused: the transport's write side is paused (set by the caller).
        holding: no flush is scheduled while set; the caller flushes ([`release`][acp_fast._engine_py.Outbox.release]).
    """

    __slots__ = ("_buffered", "_closed", "_flush_at", "_max", "_out", "_scheduled", "_schedule", "_size",
                 "_write", "holding", "paused")

    def __init__(self, write: Callable[[bytes], object], schedule: Callable[[Callable[[], None]], object],
                 buffered: Callable[[], int], *, max_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
                 flush_at: int = DEFAULT_FLUSH_AT) -> None:
        if type(max_buffer) is not int or max_buffer < 0:
            raise ValueError("max_buffer must be an int >= 0")
        if type(flush_at) is not int or flush_at < 0:
            raise ValueError("flush_at must be an int >= 0")
        self._write = write
        self._schedule = schedule
        self._buffered = buffered
        self._max = max_buffer
        self._flush_at = flush_at
        self._out: list[bytes] = []
        self._size = 0
        self._scheduled = False
        self._closed = False
        self.paused = False
        self.holding = False

    @property
    def size(self) -> int:
        """Bytes queued (not yet handed to `write`)."""
        return self._size

    @property
    def closed(self) -> bool:
        """True after [`close`][acp_fast._engine_py.Outbox.close]: nothing more is queued."""
        return self._closed

    @property
    def max_buffer(self) -> int:
        """The `max_buffer` the outbox was made with."""
        return self._max

    @property
    def flush_at(self) -> int:
        """The `flush_at` the outbox was made with."""
        return self._flush_at

    def check_room(self) -> None:
        """Raise `SendBufferFull` when a send must wait (see `max_buffer`).

        Raises:
            SendBufferFull: more than `max_buffer` bytes wait for the peer.
        """
        size = self._size
        if self.paused or size > self._max:
            total = size + self._buffered()
            if total > self._max:
                raise SendBufferFull(total, self._max)

    def notify(self, method: str, params: Json = None) -> bool:
        """Queue a notification; False (nothing queued) after [`close`][acp_fast._engine_py.Outbox.close].

        Raises:
            SendBufferFull: see `max_buffer` (nothing of the message is queued).
            EncodeError: as [`encode_notification`][acp_fast._engine_py.encode_notification] (nothing is queued).
        """
        if self._closed:
            return False
        self.check_room()
        self._queue(encode_notification(method, params))
        return True

    def request(self, id: RequestId | None, method: str, params: Json = None) -> bool:
        """Queue a request (no room check: see [`check_room`][acp_fast._engine_py.Outbox.check_room]); False after [`close`][acp_fast._engine_py.Outbox.close].

        Raises:
            EncodeError: as [`encode_request`][acp_fast._engine_py.encode_request] (nothing is queued).
        """
        if self._closed:
            return False
        self._queue(encode_request(id, method, params))
        return True

    def write(self, line: bytes) -> bool:
        """Queue an encoded line (`\\n`-terminated; no room check); False after [`close`][acp_fast._engine_py.Outbox.close]."""
        if type(line) is not bytes:
            raise TypeError("line must be bytes")
        if self._closed:
            return False
        self._queue(line)
        return True

    def _queue(self, line: bytes) -> None:
        self._out.append(line)
        self._size += len(line)
        if self._size > self._flush_at:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            if not self.holding:
                self._schedule(self.flush)

    def flush(self) -> None:
        """Hand everything queued to `write` in one call (nothing when empty)."""
        self._scheduled = False
        out = self._out
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            self._out = []
            self._size = 0
            self._write(data)

    def release(self) -> None:
        """End `holding` and flush what was queued meanwhile."""
        self.holding = False
        if self._size:
            self.flush()

    def close(self) -> None:
        """Queue nothing more (what is queued can still be flushed)."""
        self._closed = True


class Forwarder:
    """The conductor's forwarding core: frames, validates, classifies and re-ids whole
    chunks of pass-through traffic and appends them to each destination's output buffer.

    Hops: `0` is upstream (the client, or a parent conductor in proxy mode); hops `1 ..
    proxies` are the proxies in chain order; with `agent=True` hop `proxies + 1` is the
    agent. A hop on the *fast path* ([`set_fast`][acp_fast._engine_py.Forwarder.set_fast]) has every line routed here, unless it
    is *claimed*: returned by [`feed`][acp_fast._engine_py.Forwarder.feed] as the frame a lazy [`Decoder`][acp_fast._engine_py.Decoder] would give,
    for the caller (Python) to handle. Once a line of a chunk is claimed, every later line
    of that chunk is claimed too, so whatever the caller writes in reply ([`write`][acp_fast._engine_py.Forwarder.write])
    keeps its place in each output. (A line over `max_line_size` is reported in place as
    its `Malformed` frame and does not stop the fast path.) A hop off the fast path has
    every frame returned.

    What the fast path handles (protocol.md §8.4):

    * a request or notification whose method is not claimed is sent on: from upstream to
      the first component; from a proxy (plain) to its predecessor, wrapped in a successor
      envelope unless that is upstream; from the agent to the last proxy wrapped (or
      upstream plain without proxies); a successor envelope from proxy *i* is unwrapped and
      its inner message sent plain to component *i + 1*, or wrapped upstream from the last
      proxy of a proxy-mode chain. A request gets the destination's next integer id and a
      pending entry (destination, new id) → (source hop, original id);
    * a response whose integer id is pending on its hop goes to the source hop with the
      original id spliced in; a response whose id is not pending there is dropped (counted
      in [`dropped`][acp_fast._engine_py.Forwarder.dropped]); one for a closed hop ([`close`][acp_fast._engine_py.Forwarder.close]) is consumed and dropped.

    Claimed (returned): `initialize`, `$/cancel_request`, both proxy initialize
    spellings (plain or inside an envelope); successor envelopes from upstream in agent
    mode or from the agent (misplaced), and envelopes the byte scanner leaves to the full
    rules: params that are not an object, an inner `method` that is missing, not a string
    or holds a backslash escape, a key with an escape, a repeated `method`/`params`, a
    member named `jsonrpc`/`id`/`result`/`error`, inner params not an object, array
    or null; responses whose pending entry carries a `check` ([`add_pending`][acp_fast._engine_py.Forwarder.add_pending]);
    batches and malformed lines.

    Bytes: a plain message keeps its bytes, only the id's bytes change (notifications are
    copied verbatim); an unwrapped or wrapped message is rebuilt as
    `{"jsonrpc":"2.0","id":N,"method":M,"params":P}` with the inner `params` bytes
    verbatim (envelope members other than `method`/`params`, e.g. `_meta`, are
    dropped; the inner `params._meta` is kept since it is inside `P`). The spelling of
    the envelope written to a hop is [`successor`][acp_fast._engine_py.Forwarder.successor] (the one that hop last used).

    Validation: every line is fully validated by the lazy decoder before it is routed
    (UTF-8, JSON syntax and depth, envelope rules); nothing is checked against the ACP
    schema. Memory: the output of a hop grows until [`take`][acp_fast._engine_py.Forwarder.take] (the caller takes it once
    per read); a pending table holds one entry per request in flight, and once a hop has
    `max_pending` of them, requests to it are claimed instead (the caller refuses them).
    """

    __slots__ = ("_agent", "_closed", "_decoders", "_dropped", "_fast", "_hops", "_max_pending",
                 "_next", "_out", "_owed", "_pending", "_proxies", "_seq", "_succ")

    def __init__(self, proxies: int, *, agent: bool = True, successor: str = PROXY_SUCCESSOR,
                 max_line_size: int = DEFAULT_MAX_LINE_SIZE, max_depth: int = DEFAULT_MAX_DEPTH,
                 max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                 max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if type(proxies) is not int or proxies < 0:
            raise ValueError("proxies must be an int >= 0")
        if type(max_pending) is not int or max_pending < 1:
            raise ValueError("max_pending must be an int >= 1")
        if successor not in _SUCCESSOR_NAMES:
            raise ValueError(f"successor must be one of {_SUCCESSOR_NAMES}, not {successor!r}")
        hops = 1 + proxies + (1 if agent else 0)
        self._decoders = [Decoder(lazy=True, max_line_size=max_line_size, max_depth=max_depth,
                                  max_batch_size=max_batch_size) for _ in range(hops)]
        self._hops = hops
        self._proxies = proxies
        self._agent = bool(agent)
        # per hop: new id -> [source hop, original id, check, sequence number]
        self._pending: list[dict[int, tuple[int, Any, int, int]]] = [{} for _ in range(hops)]
        self._next = [1] * hops
        self._owed = [0] * hops
        self._fast = [False] * hops
        self._closed = [False] * hops
        self._succ = [successor] * hops
        self._out: list[list[bytes]] = [[] for _ in range(hops)]
        self._seq = 0
        self._dropped = 0
        self._max_pending = max_pending

    def _hop(self, hop: Any) -> int:
        if type(hop) is not int or not 0 <= hop < self._hops:
            raise IndexError(f"hop must be an int in [0, {self._hops}), not {hop!r}")
        return int(hop)

    @property
    def hops(self) -> int:
        """Number of hops: upstream, the proxies, and the agent when there is one."""
        return self._hops

    @property
    def proxies(self) -> int:
        """Number of proxies in the chain (hops `1 .. proxies`)."""
        return self._proxies

    @property
    def agent(self) -> bool:
        """True when the last hop is the agent (agent mode); False in proxy mode."""
        return self._agent

    @property
    def dropped(self) -> int:
        """Responses the fast path dropped (an id no request on that hop has)."""
        return self._dropped

    @property
    def max_pending(self) -> int:
        """Requests in flight per hop before requests to it are claimed (left to Python)."""
        return self._max_pending

    # -- the fast path --------------------------------------------------------------------

    def feed(self, hop: int, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Route the complete lines of a chunk from `hop`; returns the claimed frames."""
        h = self._hop(hop)
        return self._claimed(h, self._decoders[h].feed(data))

    def feed_eof(self, hop: int) -> list[Frame]:
        """End of `hop`'s input: routes a final unterminated line (see [`feed`][acp_fast._engine_py.Forwarder.feed])."""
        h = self._hop(hop)
        return self._claimed(h, self._decoders[h].feed_eof())

    def _claimed(self, hop: int, frames: list[Frame]) -> list[Frame]:
        if not frames or not self._fast[hop]:
            return frames
        claimed: list[Frame] = []
        claiming = False
        route = self._route
        for f in frames:
            if claiming:
                claimed.append(f)
                continue
            if type(f) is Message:
                if route(hop, f):
                    continue
            elif type(f) is Malformed and f.reason == _TOO_LONG:
                claimed.append(f)
                continue
            claiming = True
            claimed.append(f)
        return claimed

    def _route(self, hop: int, m: Message) -> bool:
        """True: forwarded (or dropped); False: claimed."""
        kind = m.kind
        if kind == RESPONSE:
            ident = m.id
            table = self._pending[hop]
            entry = table.get(ident) if type(ident) is int else None
            if entry is None:
                self._dropped += 1
                return True
            src, sid, check, _ = entry
            if check:
                return False
            del table[ident]  # type: ignore[arg-type]
            self._owed[src] -= 1
            if not self._closed[src]:
                self._out[src].append(forward(m, sid))
            return True
        method = m.method
        special = _FWD_METHODS.get(method)  # type: ignore[arg-type]
        if special == 1:
            return False
        env = special == 2
        n = self._proxies
        if hop == 0:
            if env:
                if self._agent or n == 0:
                    return False
                dst, wrap = n, True
            else:
                if self._hops < 2:
                    return False
                dst, wrap = 1, False
        else:
            i = hop - 1
            if self._agent and i == n:
                if env:
                    return False
                dst, wrap = (n, True) if n > 0 else (0, False)
            elif env:
                dst, wrap = (0, True) if (i + 1 == n and not self._agent) else (i + 2, False)
            elif i == 0:
                dst, wrap = 0, False
            else:
                dst, wrap = i, True
        line = m._line
        params: bytes | None = line[m._ps:m._pe] if m._ps >= 0 else None
        token: bytes
        if env:
            if params is None:
                return False
            inner = _unwrap_envelope(params)
            if inner is None or inner[0] in _CLAIMED_TOKENS:
                return False
            self._succ[hop] = method  # type: ignore[assignment]
            token, params = inner
        else:
            token = encode_value(method)
        is_req = kind == REQUEST
        if is_req and len(self._pending[dst]) >= self._max_pending:
            return False
        new = self._next[dst]
        if not env and not wrap:
            out = forward(m, new) if is_req else forward(m)
        else:
            head = b'{"jsonrpc":"2.0","id":' + str(new).encode() + b',"method":' if is_req \
                else b'{"jsonrpc":"2.0","method":'
            if wrap:
                body = b'{"method":' + token
                if params is not None:
                    body += b',"params":' + params
                out = head + encode_value(self._succ[dst]) + b',"params":' + body + b"}}\n"
            else:
                out = head + token + (b',"params":' + params if params is not None else b"") + b"}\n"
        self._out[dst].append(out)
        if is_req:
            self._add(dst, hop, m.id, 0)
        return True

    def _add(self, dst: int, src: int, sid: Any, check: int) -> int:
        new = self._next[dst]
        self._seq += 1
        self._pending[dst][new] = (src, sid, check, self._seq)
        self._next[dst] = new + 1
        self._owed[src] += 1
        return new

    # -- output ---------------------------------------------------------------------------

    def write(self, hop: int, line: bytes) -> None:
        """Append an encoded line (`\\n`-terminated) to `hop`'s output, in order."""
        h = self._hop(hop)
        if type(line) is not bytes:
            raise TypeError("line must be bytes")
        self._out[h].append(line)

    def take(self, hop: int) -> bytes | None:
        """The output gathered for `hop` since the last take (`None` when there is none)."""
        h = self._hop(hop)
        out = self._out[h]
        if not out:
            return None
        data = b"".join(out)
        out.clear()
        return data or None

    def take_all(self) -> list[tuple[int, bytes]]:
        """`[(hop, bytes), ...]` for every hop with output, in hop order (then cleared)."""
        result = []
        for h, out in enumerate(self._out):
            if out:
                data = b"".join(out)
                out.clear()
                if data:
                    result.append((h, data))
        return result

    # -- hop state ------------------------------------------------------------------------

    def set_fast(self, hop: int, on: bool) -> None:
        """Route `hop`'s lines here (`True`) or return every frame (`False`)."""
        self._fast[self._hop(hop)] = bool(on)

    def fast(self, hop: int) -> bool:
        """True when `hop`'s lines are routed here (see [`set_fast`][acp_fast._engine_py.Forwarder.set_fast])."""
        return self._fast[self._hop(hop)]

    def close(self, hop: int) -> None:
        """`hop` has ended: responses owed to it are consumed and dropped."""
        self._closed[self._hop(hop)] = True

    def closed(self, hop: int) -> bool:
        """True once [`close`][acp_fast._engine_py.Forwarder.close] was called for `hop`."""
        return self._closed[self._hop(hop)]

    def successor(self, hop: int) -> str:
        """The successor-envelope method written to `hop` (the spelling it last used)."""
        return self._succ[self._hop(hop)]

    def set_successor(self, hop: int, name: str) -> None:
        """Write successor envelopes to `hop` as `name` (`"_proxy/successor"` or `"proxy/successor"`).

        Raises:
            ValueError: `name` is neither spelling.
        """
        h = self._hop(hop)
        if name not in _SUCCESSOR_NAMES:
            raise ValueError(f"successor must be one of {_SUCCESSOR_NAMES}, not {name!r}")
        self._succ[h] = name

    # -- pending tables -------------------------------------------------------------------

    def add_pending(self, dst: int, src: int, sid: int | str | None, check: int = 0) -> int:
        """Record a request sent to `dst` for `(src, sid)`; returns its new id on `dst`.

        A non-zero `check` makes the fast path claim the response instead of routing it.
        """
        d, s = self._hop(dst), self._hop(src)
        if not (type(sid) is int or type(sid) is str or sid is None):
            raise TypeError(f"request id must be int, str or None, not {type(sid).__name__}")
        if type(check) is not int or not 0 <= check <= 0x7FFFFFFF:
            raise ValueError("check must be an int >= 0")
        return self._add(d, s, sid, check)

    def pop_pending(self, hop: int, id: Any) -> tuple[int, Any, int] | None:
        """Remove the entry of the response `id` on `hop`: `(src, sid, check)` or None."""
        h = self._hop(hop)
        if type(id) is not int or not _INT64_MIN <= id <= _INT64_MAX:
            return None
        entry = self._pending[h].pop(id, None)
        if entry is None:
            return None
        self._owed[entry[0]] -= 1
        return entry[0], entry[1], entry[2]

    def find_pending(self, src: int, sid: Any) -> tuple[int, int] | None:
        """`(dst, new id)` of the latest request from `(src, sid)` in flight, or None."""
        s = self._hop(src)
        best: tuple[int, int] | None = None
        best_seq = -1
        t = type(sid)
        for h, table in enumerate(self._pending):
            for new, (esrc, esid, _, seq) in table.items():
                if esrc == s and seq > best_seq and type(esid) is t and esid == sid:
                    best, best_seq = (h, new), seq
        return best

    def drain_pending(self, hop: int) -> list[tuple[int, Any]]:
        """Remove every request in flight on `hop`: `[(src, sid), ...]` by new id."""
        h = self._hop(hop)
        table = self._pending[h]
        rows = sorted(table.items())
        table.clear()
        for _, entry in rows:
            self._owed[entry[0]] -= 1
        return [(entry[0], entry[1]) for _, entry in rows]

    def drain_from(self, src: int) -> list[Any]:
        """Remove every request in flight that `src` sent: its ids, oldest first."""
        s = self._hop(src)
        rows = []
        for table in self._pending:
            for new in [k for k, v in table.items() if v[0] == s]:
                entry = table.pop(new)
                rows.append((entry[3], entry[1]))
                self._owed[s] -= 1
        rows.sort(key=lambda r: r[0])
        return [sid for _, sid in rows]

    def owed(self, src: int) -> int:
        """Requests from `src` still in flight."""
        return self._owed[self._hop(src)]

    def pending(self, hop: int) -> int:
        """Requests in flight on `hop` (entries of its pending table)."""
        return len(self._pending[self._hop(hop)])


from ._replies import BatchReply, error_reply  # noqa: E402  (shared by both twins)
