"""OpenTelemetry traces of ACP connections, opt-in: [`Tracing`][acp_fast.tracing.Tracing].

Off by default, and then nothing here runs: a builder decides once per connection, as it
binds one, whether to trace it (`builder.with_tracing()`, or the environment variable
`ACP_FAST_OTEL=1`). A traced connection's JSON-RPC connection becomes a
[`TracedConnection`][acp_fast.tracing.TracedConnection]; an untraced one is left exactly as it
was (no check on any message's path).

What a traced connection records (the OpenTelemetry JSON-RPC semantic conventions):

* a span per request it sends (kind `CLIENT`) and per request it receives (kind `SERVER`),
  named after the method (a proxy's `_proxy/successor` envelope after the method inside it),
  with `rpc.system` = `"jsonrpc"`, `rpc.method`, `rpc.jsonrpc.request_id`, `acp.session.id` (the params' `sessionId`) and, when the answer
  is an error, `rpc.jsonrpc.error_code` / `rpc.jsonrpc.error_message` and an error status;
  a sent span ends when its answer arrives, a received one when its answer is written;
* a prompt turn: on an agent, the span of a received `session/prompt` is its turn's span
  (from the request until its answer; `acp.prompt_turn` = true, `acp.session.id`,
  `acp.stop_reason`), and what the agent sends during the turn (a permission request) is
  its child; the client's span of the same request carries the stop reason too (no span
  of its own per turn: a span costs the OpenTelemetry SDK about as much as a round trip
  costs acp_fast);
* no span per notification, unless asked (`notifications=True`: a span per received
  notification, named after its method, kind `CONSUMER`).

Trace context travels in the message itself, as W3C Trace Context strings in the params'
`_meta`: `params._meta.traceparent` (and `params._meta.tracestate` when the state is not
empty). The keys follow ACP's extensibility rules: the root `_meta` keys `traceparent`,
`tracestate` and `baggage` SHOULD be reserved for W3C trace context (so that MCP
implementations and OpenTelemetry tooling interoperate), and the schemas say that
implementations MUST NOT assign meaning to `_meta` keys they do not recognize, so a peer
that does not trace is not affected. (`baggage` is neither written nor read.) A sent request gets its span's context
(the params are copied; the caller's object is never changed); a received request's span
continues the context its `_meta` carries, and its handler runs with that span current, so
whatever the handler sends (a permission request, a proxy's forwarding to its successor) is
its child. A `traceparent` that is not a valid W3C version-00 value (or one whose trace or
span id is all zeros) is ignored: the span then starts a trace of its own. A received
request's parent is only ever the context in its `_meta`, never the receiving task's.

Sampling is the tracer's: a span its sampler drops is not recorded, but its context (with the
sampled flag off) still goes into what is sent, so the next hop can follow the decision; a
no-op tracer (the OpenTelemetry API without an SDK) gives spans without a context, and then
nothing is added to `_meta` at all.

Through a conductor chain the context rides inside `_proxy/successor` envelopes (the inner
params' `_meta`, which the conductor preserves end to end); `acp-fast serve --otel` opens a span
per request it relays and puts its own context into the relayed request
([`acp_fast.remote.server.AcpApp`][acp_fast.remote.server.AcpApp]).

Example:

```python
from opentelemetry.sdk.trace import TracerProvider

provider = TracerProvider()  # with the exporters of your choice
agent = Agent.v2().with_tracing(provider.get_tracer("my-agent"))
```
"""

from __future__ import annotations

import json
import os
import re
from types import ModuleType
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ._rawjson import RawJson
from .errors import INTERNAL_ERROR, JsonRpcError
from .jsonrpc import Connection, PendingRequest, RequestContext
from .jsontypes import Json
from .protocol.facts import SESSION_PROMPT, SUCCESSOR_METHODS

__all__ = ["ENV_VAR", "MissingOtelError", "TracedConnection", "Tracing", "call_attributes", "context_meta", "env_tracing",
           "instrument", "parent_context", "set_error", "with_context",
           "parse_traceparent"]

#: the environment variable that turns tracing on for every builder (`1`, `true`, `yes`, `on`)
ENV_VAR = "ACP_FAST_OTEL"
#: the `_meta` keys of W3C trace context
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\Z")
#: the common case, a version-00 value of exactly 55 characters (its fields at fixed places)
_TRACEPARENT_00 = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
#: an error response as the engines write it: its code
_ERROR_HEAD = re.compile(rb'\{"jsonrpc":"2\.0","id":(?:-?\d+|"[^"\\]*"|null),"error":\{"code":(-?\d+)')
_ERROR_ANY = re.compile(rb'"error":\s*\{[^{}]*?"code":\s*(-?\d+)')
_STOP_REASON = re.compile(rb'"stopReason":\s*"([^"\\]{1,64})"')
_TRUE = ("1", "true", "yes", "on")


class MissingOtelError(ImportError):
    """Tracing was asked for without `opentelemetry-api` installed (the `otel` extra)."""


# opentelemetry's modules and the names a traced message's path uses, bound by the first
# Tracing made (a traced connection exists only after that)
_trace: Any = None
_context: Any = None
_EMPTY: Any = None  # an empty context (immutable: shared)
_SERVER: Any = None
_CLIENT: Any = None
_set_span: Any = None  # trace.set_span_in_context
_attach: Any = None  # context.attach
_detach: Any = None  # context.detach
_span_context: Any = None  # trace.SpanContext
_trace_flags: Any = None  # trace.TraceFlags
_non_recording: Any = None  # trace.NonRecordingSpan
_status_error: Any = None  # (trace.Status, StatusCode.ERROR)


def _otel() -> ModuleType:
    """opentelemetry's `trace` module, its modules bound on the first call.

    Raises:
        MissingOtelError: `opentelemetry-api` is not installed.
    """
    global _trace, _context, _EMPTY, _SERVER, _CLIENT, _set_span, _attach, _detach
    global _span_context, _trace_flags, _non_recording, _status_error
    if _trace is None:
        try:
            from opentelemetry import context, trace
        except ImportError as exc:
            raise MissingOtelError("tracing needs opentelemetry-api, which is not installed: "
                                   "pip install 'acp-fast[otel]'") from exc
        _context, _EMPTY, _SERVER, _CLIENT = context, context.Context(), trace.SpanKind.SERVER, trace.SpanKind.CLIENT
        _set_span, _attach, _detach = trace.set_span_in_context, context.attach, context.detach
        _span_context, _trace_flags, _non_recording = trace.SpanContext, trace.TraceFlags, trace.NonRecordingSpan
        _status_error = (trace.Status, trace.StatusCode.ERROR)
        _trace = trace
    module: ModuleType = _trace
    return module


@dataclass(frozen=True)
class Tracing:
    """What a traced connection records with (see the module docstring).

    Attributes:
        tracer: the OpenTelemetry `Tracer` spans are started on.
        notifications: also open a span per received notification (default: none).
    """

    tracer: Any
    notifications: bool = False

    @classmethod
    def make(cls, tracer: Any = None, *, notifications: bool = False) -> Tracing:
        """Tracing with `tracer` (default: the global tracer provider's `acp_fast` tracer).

        Raises:
            MissingOtelError: `opentelemetry-api` is not installed.
        """
        trace = _otel()
        return cls(tracer if tracer is not None else trace.get_tracer("acp_fast"), notifications)


_ENV: list[Tracing | None] = []


def env_tracing() -> Tracing | None:
    """The tracing `ACP_FAST_OTEL` asks for (read once per process), else `None`.

    Raises:
        MissingOtelError: the variable is set but `opentelemetry-api` is not installed.
    """
    if not _ENV:
        on = os.environ.get(ENV_VAR, "").strip().lower() in _TRUE
        _ENV.append(Tracing.make() if on else None)
    return _ENV[0]


def parse_traceparent(value: object) -> tuple[int, int, int] | None:
    """`(trace_id, span_id, flags)` of a W3C `traceparent`, or `None` when it is not one.

    Version 00 must have exactly four fields; a later version may add more (read as 00);
    version `ff`, an all-zero trace id or span id, or anything else malformed is `None`.
    """
    if type(value) is not str:
        return None
    if len(value) == 55 and _TRACEPARENT_00.match(value) is not None:  # version 00: fields at fixed places
        trace_id, span_id = int(value[3:35], 16), int(value[36:52], 16)
        return (trace_id, span_id, int(value[53:], 16)) if trace_id and span_id else None
    if len(value) > 512:
        return None
    m = _TRACEPARENT.match(value)
    if m is None:
        return None
    version, trace_hex, span_hex, flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, int(flags, 16)


def parent_context(params: Json) -> object:
    """The OpenTelemetry context that `params._meta` carries (an empty one without a valid one)."""
    if _trace is None:
        _otel()
    meta = params.get("_meta") if type(params) is dict else None
    parsed = parse_traceparent(meta.get(TRACEPARENT)) if type(meta) is dict else None
    if parsed is None:
        return _EMPTY
    assert type(meta) is dict
    state = meta.get(TRACESTATE)
    trace_state = None
    if type(state) is str and len(state) <= 512:
        try:
            trace_state = _trace.TraceState.from_header([state])
        except Exception:  # noqa: BLE001 - a bad tracestate drops only the state
            trace_state = None
    span_context = _span_context(parsed[0], parsed[1], True, _trace_flags(parsed[2] & 0xFF), trace_state)
    return _set_span(_non_recording(span_context), _EMPTY)


def _entries(sc: Any) -> dict[str, str]:
    """The `_meta` entries of a valid span context `sc`."""
    meta = {TRACEPARENT: "00-%032x-%016x-%02x" % (sc.trace_id, sc.span_id, sc.trace_flags)}  # (% is cheaper than f"")
    state = sc.trace_state
    if state:
        header = state.to_header()
        if header:
            meta[TRACESTATE] = header
    return meta


def context_meta(span: Any) -> dict[str, str]:
    """The `_meta` entries that carry `span`'s context (`traceparent`, `tracestate`; none
    for a span without a valid context: a no-op tracer's)."""
    sc = span.get_span_context()
    return _entries(sc) if sc.is_valid else {}


def _with_entries(params: Json, entries: dict[str, str]) -> Json:
    """`params` with `entries` in its `_meta` (a copy; the caller's objects are never
    changed): an object, `None` (then `{"_meta": entries}`) or raw JSON (an object written
    without a `_meta` anywhere in it gets the entries spliced in, as bytes; another is
    decoded first); an array or anything else unchanged."""
    if type(params) is dict:
        meta = params.get("_meta")
        return {**params, "_meta": {**meta, **entries} if type(meta) is dict else entries}
    if params is None:
        return {"_meta": entries}
    if type(params) is RawJson:
        # a key may be written with escapes (`"\u005fmeta"`): with any `\u`, or `_meta`
        # anywhere, the value is decoded instead
        if params[:1] == b"{" and params.find(b"_meta") < 0 and params.find(b"\\u") < 0:
            head = b'{"_meta":' + json.dumps(entries, separators=(",", ":")).encode()
            return RawJson(head + b"}" if params[1:].strip() == b"}" else head + b"," + params[1:])
        try:
            decoded = params.decode_json()
        except ValueError:
            return params
        return _with_entries(decoded, entries) if type(decoded) is dict else params
    return params


def with_context(params: Json, span: Any) -> Json:
    """`params` (an object, or `None`) with `span`'s context in its `_meta` (a copy); an
    array or anything else unchanged (it has no `_meta`). Raw JSON params are decoded (the
    result is plain JSON values)."""
    if type(params) is RawJson:
        try:
            params = params.decode_json()
        except ValueError:
            return params
    sc = span.get_span_context()
    if not sc.is_valid:
        return {} if params is None else params
    return _with_entries(params, _entries(sc))


def _decoded(params: Any) -> Json:
    if type(params) is RawJson:
        try:
            return params.decode_json()
        except ValueError:
            return None
    return params


def call_attributes(method: str, rid: object, params: Json) -> dict[str, Any]:
    """The span attributes of a call (the JSON-RPC semantic conventions, and the session)."""
    attrs: dict[str, Any] = {"rpc.system": "jsonrpc", "rpc.method": method}
    if rid is not None:
        attrs["rpc.jsonrpc.request_id"] = str(rid)
    if type(params) is dict:
        sid = params.get("sessionId")
        if type(sid) is str:
            attrs["acp.session.id"] = sid
    return attrs


def _unwrap(method: str, params: Json) -> tuple[str, Json]:
    """A `_proxy/successor` envelope's inner method and params (others: as they are)."""
    if method in SUCCESSOR_METHODS and type(params) is dict:
        inner = params.get("method")
        if type(inner) is str:
            return inner, _decoded(params.get("params"))
    return method, params


def set_error(span: Any, code: int, message: str | None) -> None:
    """Mark `span` failed with the JSON-RPC error `code`."""
    if _status_error is None:
        _otel()
    status, error = _status_error
    span.set_attribute("rpc.jsonrpc.error_code", code)
    if message:
        span.set_attribute("rpc.jsonrpc.error_message", message)
    span.set_status(status(error, message or str(code)))


def end_with_line(span: Any, line: bytes, turn: bool) -> None:
    """End a received request's `span` with what the encoded answer `line` says (`turn`:
    a prompt turn's, whose stop reason is recorded)."""
    if b'"error"' in line:
        head = _ERROR_HEAD.match(line) or _ERROR_ANY.search(line)
        if head is not None:
            set_error(span, int(head.group(1)), None)
            span.end()
            return
    if turn:
        at = line.find(b'"stopReason":')
        stop = (_STOP_REASON.match(line, at) or _STOP_REASON.search(line, at + 1)) if at >= 0 else None
        if stop is not None:
            span.set_attribute("acp.stop_reason", stop.group(1).decode("utf-8", "replace"))
    span.end()


def end_with_result(span: Any, fut: Any) -> None:
    """End a sent request's `span` once its handle `fut` is done."""
    if fut.cancelled():
        set_error(span, -32800, "cancelled")
    else:
        exc = fut.exception()
        if isinstance(exc, JsonRpcError):
            set_error(span, exc.code, exc.message)
        elif exc is not None:
            set_error(span, INTERNAL_ERROR, type(exc).__name__)
        else:
            result = fut.result()
            if type(result) is dict:
                stop = result.get("stopReason")
                if type(stop) is str:
                    span.set_attribute("acp.stop_reason", stop)
    span.end()


class _NotificationSpans(dict):  # type: ignore[type-arg]
    """A connection's notification handler table whose handlers run in a span each."""

    tracer: Any

    def get(self, method: str, default: Any = None) -> object:
        fn = dict.get(self, method, default)
        if fn is None:
            return None
        tracer = self.tracer

        def traced(msg: Any) -> object:
            return _in_span(tracer, msg, fn)

        return traced


def _in_span(tracer: Any, msg: Any, fn: Callable[[Any], object]) -> object:
    try:
        params = msg.params
    except ValueError:
        params = None
    method, inner = _unwrap(msg.method, params)
    span = tracer.start_span(method, context=parent_context(inner), kind=_trace.SpanKind.CONSUMER,
                             attributes=call_attributes(method, None, inner))
    token = _context.attach(_trace.set_span_in_context(span))
    try:
        result = fn(msg)
    except BaseException:
        span.end()
        raise
    finally:
        _context.detach(token)
    if result is not None and hasattr(result, "__await__"):
        return _end_after(result, span)
    span.end()
    return result


async def _end_after(aw: Awaitable[object], span: Any) -> object:
    try:
        return await aw
    finally:
        span.end()


def _key(rid: object) -> object:
    """A received request's id as a key (`1` and `"1"` apart)."""
    return rid if type(rid) is int else (True, rid)


class _TracedPending(PendingRequest):
    """A traced connection's handle of a sent request whose span is recorded: the span (in
    the connection's `_otel_sent`, by id) ends as the handle is settled, by the answer or
    otherwise (failed, timed out, cancelled, detached), without a callback on the loop.

    A handle becomes one by a change of class (the same slots: nothing added)."""

    __slots__ = ()

    def _resolve(self, msg: Any) -> None:
        super()._resolve(msg)
        _end_sent(self)

    def _fail(self, exc: JsonRpcError) -> None:
        super()._fail(exc)
        _end_sent(self)

    def _abandon(self) -> None:  # the awaiting task cancelled, or the timeout expired
        super()._abandon()
        _end_sent(self)

    def detach(self) -> None:
        super().detach()
        _end_sent(self)


def _end_sent(handle: PendingRequest) -> None:
    """End the span of the sent request `handle` once it is settled (once: it leaves the table)."""
    fut = handle._fut
    if fut.done():
        span = handle._conn._otel_sent.pop(handle.id, None)  # type: ignore[attr-defined]
        if span is not None:
            end_with_result(span, fut)


class TracedConnection(Connection):
    """A JSON-RPC [`Connection`][acp_fast.jsonrpc.Connection] that opens spans (see the module
    docstring); a connection becomes one through [`instrument`][acp_fast.tracing.instrument].

    The class of an existing connection is changed rather than the connection rebuilt, so a
    builder can trace a connection it is handed; the overrides are the only difference, and
    they exist only on traced connections.
    """

    _otel: Tracing
    _otel_tracer: Any
    _otel_turns: bool
    #: received requests' spans until answered, by id: the span, and whether it is a turn's
    _otel_spans: dict[object, tuple[Any, bool]]
    #: sent requests' recorded spans until their handles are settled, by id
    _otel_sent: dict[int, Any]

    def _start_tracing(self, tracing: Tracing, prompt_turns: bool) -> None:
        _otel()
        self._otel = tracing
        self._otel_tracer = tracing.tracer
        self._otel_turns = prompt_turns
        self._otel_spans = {}
        self._otel_sent = {}
        if tracing.notifications:
            table = _NotificationSpans(self._notifications)
            table.tracer = tracing.tracer
            self._notifications = table
        self.closed.add_done_callback(self._end_open_spans)

    def _end_open_spans(self, _fut: object) -> None:
        spans, self._otel_spans = self._otel_spans, {}
        for span, _turn in spans.values():
            set_error(span, INTERNAL_ERROR, "connection closed before the answer")
            span.end()

    # -- sent requests ------------------------------------------------------------------

    def request(self, method: str, params: Json = None, *, timeout: float | None = None,
                raw: bool = False) -> PendingRequest:
        if method in SUCCESSOR_METHODS:
            outer = _decoded(params)
            inner_method, inner = _unwrap(method, outer)
        else:
            inner_method, inner = method, params
        span = self._otel_tracer.start_span(inner_method, kind=_CLIENT, attributes=call_attributes(
            inner_method, self._next_id + 1, inner))
        sc = span.get_span_context()
        if sc.is_valid:  # a no-op tracer's spans have none: then nothing is added
            entries = _entries(sc)
            if inner_method is not method:  # an envelope: the context goes into the inner params
                assert type(outer) is dict
                params = {**outer, "params": _with_entries(outer.get("params"), entries)}
            else:
                params = _with_entries(params, entries)
        if not span.is_recording():  # not sampled (or a no-op tracer): the context travels, no more
            return super().request(method, params, timeout=timeout, raw=raw)
        try:
            handle = super().request(method, params, timeout=timeout, raw=raw)
        except BaseException:
            span.end()
            raise
        if handle.done():  # failed at once (the connection is closed)
            end_with_result(span, handle._fut)
        elif type(handle) is PendingRequest:
            self._otel_sent[handle.id] = span
            handle.__class__ = _TracedPending
        else:  # pragma: no cover - a handle of another class: followed by a callback
            handle.add_done_callback(lambda fut: end_with_result(span, fut))
        return handle

    # -- received requests --------------------------------------------------------------

    def _request(self, msg: Any, batch: Any, slot: int) -> None:
        try:
            params = msg.params
        except ValueError:
            params = None
        method = msg.method
        if method in SUCCESSOR_METHODS:
            method, params = _unwrap(method, params)
        rid = msg.id
        attrs = call_attributes(method, rid, params)
        turn = self._otel_turns and method == SESSION_PROMPT
        if turn:
            attrs["acp.prompt_turn"] = True
        span = self._otel_tracer.start_span(method, context=parent_context(params), kind=_SERVER, attributes=attrs)
        if not span.is_recording():  # not sampled: its context is current for the handler, no more
            if not span.get_span_context().is_valid:  # a no-op tracer's
                super()._request(msg, batch, slot)
                return
            token = _attach(_set_span(span))
            try:
                super()._request(msg, batch, slot)
            finally:
                _detach(token)
            return
        key = rid if type(rid) is int else (True, rid)
        spans = self._otel_spans
        older = spans.get(key)
        if older is not None:  # a reused id: the older request's answer is no longer told apart
            older[0].end()
        spans[key] = entry = (span, turn)
        unhandled = msg.method not in self._requests and self._request_fallback is None
        token = _attach(_set_span(span))  # the handler runs with its span current
        try:
            super()._request(msg, batch, slot)
        finally:
            _detach(token)
        spans = self._otel_spans  # (a new table if the connection closed meanwhile)
        if unhandled and spans.get(key) is entry:
            del spans[key]
            set_error(span, -32601, "method not found")
            span.end()

    def _complete(self, ctx: RequestContext, line: bytes) -> None:
        super()._complete(ctx, line)
        if self._otel_spans:
            rid = ctx.message.id
            entry = self._otel_spans.pop(rid if type(rid) is int else (True, rid), None)
            if entry is not None:
                end_with_line(entry[0], line, entry[1])

    def _dropped(self, ctx: RequestContext) -> None:
        super()._dropped(ctx)
        entry = self._otel_spans.pop(_key(ctx.message.id), None)
        if entry is not None:
            set_error(entry[0], INTERNAL_ERROR, "request handler dropped its responder")
            entry[0].end()


def instrument(conn: Connection, tracing: Tracing, *, prompt_turns: bool = True) -> Connection:
    """Trace `conn` from now on (idempotent; see the module docstring); returns it.

    Call it before the connection's first message (the builders do, as they bind one).
    `prompt_turns`: a received `session/prompt`'s span is marked a prompt turn's (an agent's
    connection; a proxy only forwards the turn).
    """
    if not isinstance(conn, TracedConnection):
        conn.__class__ = TracedConnection
        assert isinstance(conn, TracedConnection)
        conn._start_tracing(tracing, prompt_turns)
    return conn
