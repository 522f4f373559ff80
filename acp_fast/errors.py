"""The one exception hierarchy of acp_fast, shared by both engine twins.

Both the pure-Python engine (`_engine_py`) and the compiled engine (`_engine_c`)
import their errors from here, so `except acp_fast.errors.EncodeError` works the same
whichever twin is active. Every error that a peer could be told about carries the JSON-RPC
`code` the connection layer answers with.

Split (as in h11): *remote* problems (the peer sent bad bytes) are never raised out of
`Decoder.feed`; they come back as [`Malformed`][acp_fast._engine_py.Malformed] frames carrying
one of the codes below. *Local* problems (the caller misused the API, e.g. fed a closed
decoder or asked to encode a value JSON cannot represent) raise.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "PARSE_ERROR",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "INVALID_PARAMS",
    "INTERNAL_ERROR",
    "REQUEST_CANCELLED",
    "AUTH_REQUIRED",
    "RESOURCE_NOT_FOUND",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "DEFAULT_MESSAGES",
    "AcpFastError",
    "JsonRpcError",
    "SendBufferFull",
    "DecoderClosedError",
    "EncodeError",
]

#: Invalid JSON (including invalid UTF-8 and over-deep nesting).
PARSE_ERROR = -32700
#: Valid JSON that is not a valid JSON-RPC envelope; empty or over-large batch; over-long line.
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
AUTH_REQUIRED = -32000
RESOURCE_NOT_FOUND = -32002
UNSUPPORTED_PROTOCOL_VERSION = -32022

#: Default ``message`` strings, exactly as the ACP schema crates spell them.
DEFAULT_MESSAGES: dict[int, str] = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    REQUEST_CANCELLED: "Request cancelled",
    AUTH_REQUIRED: "Authentication required",
    RESOURCE_NOT_FOUND: "Resource not found",
    UNSUPPORTED_PROTOCOL_VERSION: "Unsupported protocol version",
}

_MISSING: Any = object()


class AcpFastError(Exception):
    """Base class of every error acp_fast raises on purpose."""


class JsonRpcError(AcpFastError):
    """A JSON-RPC error object: `code`, `message` and optional `data`.

    Raise it from a request handler to answer with that error; the connection layer also
    uses it to fail pending requests. Any integer code is accepted (unknown codes round-trip
    unchanged); the factories below give the codes acp_fast itself produces.
    """

    def __init__(self, code: int, message: str | None = None, data: Any = _MISSING) -> None:
        if message is None:
            message = DEFAULT_MESSAGES.get(code, "Error")
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.data = data

    @property
    def has_data(self) -> bool:
        """Whether `data` was given (`None` is a valid `data` value)."""
        return self.data is not _MISSING

    def to_dict(self) -> dict[str, Any]:
        """The wire form `{"code", "message", "data"?}` (`data` omitted when absent)."""
        d: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not _MISSING:
            d["data"] = self.data
        return d

    @classmethod
    def from_dict(cls, error: dict[str, Any]) -> JsonRpcError:
        """Build from a decoded error object (as found in `Message.error`)."""
        return cls(error["code"], error["message"], error.get("data", _MISSING))

    def __str__(self) -> str:
        if self.data is _MISSING:
            return f"{self.message} ({self.code})"
        return f"{self.message} ({self.code}): {self.data!r}"

    def __repr__(self) -> str:
        extra = "" if self.data is _MISSING else f", data={self.data!r}"
        return f"{type(self).__name__}({self.code}, {self.message!r}{extra})"

    # -- factories for the codes acp_fast answers with (protocol.md §1.3) --------------

    @classmethod
    def parse_error(cls, line: str | None = None) -> JsonRpcError:
        """-32700 Parse error: invalid JSON; `line` (if given) goes in `data` as `{"line": line}`."""
        return cls(PARSE_ERROR, data={"line": line} if line is not None else _MISSING)

    @classmethod
    def invalid_request(cls, data: Any = _MISSING) -> JsonRpcError:
        """-32600 Invalid request: valid JSON that is not a valid JSON-RPC envelope."""
        return cls(INVALID_REQUEST, data=data)

    @classmethod
    def method_not_found(cls, method: str) -> JsonRpcError:
        """-32601 Method not found, with the method name as `data`."""
        return cls(METHOD_NOT_FOUND, data=method)

    @classmethod
    def invalid_params(cls, data: Any = _MISSING) -> JsonRpcError:
        """-32602 Invalid params."""
        return cls(INVALID_PARAMS, data=data)

    @classmethod
    def internal_error(cls, data: Any = _MISSING, message: str | None = None) -> JsonRpcError:
        """-32603 Internal error (`message` defaults to `"Internal error"`)."""
        return cls(INTERNAL_ERROR, message, data)

    @classmethod
    def request_cancelled(cls, data: Any = _MISSING) -> JsonRpcError:
        """-32800 Request cancelled: the answer to a request cancelled by `$/cancel_request`."""
        return cls(REQUEST_CANCELLED, data=data)

    @classmethod
    def unsupported_protocol_version(cls, requested: int, supported: list[int]) -> JsonRpcError:
        """-32022 Unsupported protocol version, `data` `{"requested": N, "supported": [...]}`."""
        return cls(
            UNSUPPORTED_PROTOCOL_VERSION,
            data={"requested": requested, "supported": list(supported)},
        )


class DecoderClosedError(AcpFastError):
    """Local misuse: `feed`/`feed_eof` called after `feed_eof`."""


class EncodeError(AcpFastError, TypeError, ValueError):
    """Local misuse: a value JSON cannot represent was given to an encoder.

    Raised for unsupported types, NaN/Infinity, nesting beyond the encoder's depth limit,
    and `RawJson` values that contain a newline (a lone surrogate in a `str` is not an
    error: it is written as its `\\udxxx` escape). It is both a `TypeError` and a
    `ValueError` so code written against `json.dumps` keeps catching it.
    """


class SendBufferFull(AcpFastError):
    """A send was refused because the connection's write buffer is over its limit.

    The peer is not reading what we send fast enough. Await
    [`acp_fast.jsonrpc.Connection.drain`][acp_fast.jsonrpc.Connection.drain] (`await cx.drain()` in a handler) in send
    loops; nothing of the refused message was queued, so it may be sent again after the
    drain. Answers to the peer's requests are never refused (reading pauses instead).

    Attributes:
        buffered: bytes waiting to be written when the send was refused.
        limit: the connection's `max_write_buffer`.
    """

    def __init__(self, buffered: int, limit: int) -> None:
        super().__init__(
            f"write buffer full ({buffered} bytes queued, limit {limit}): "
            "the peer is not reading; await drain() before sending more")
        self.buffered = buffered
        self.limit = limit
