"""The official Python SDK on acp_fast's connection: the connection drop-in.

The SDK's public API, as its user sees it, dispatched on [`acp_fast.jsonrpc.Connection`][acp_fast.jsonrpc.Connection]
instead of the SDK's `acp.connection.Connection`. The switch is one import line:

```python
# before
from acp import run_agent, connect_to_agent, spawn_agent_process
# after
from acp_fast.compat.acp_sdk.fast import run_agent, connect_to_agent, spawn_agent_process
```

Everything else stays the SDK's: its `Agent`/`Client` interfaces, its pydantic models
(`acp.schema`), its helpers (`acp.text_block` ...), `RequestError`. The names here:

* [`run_agent`][acp_fast.compat.acp_sdk.fast.run_agent], [`connect_to_agent`][acp_fast.compat.acp_sdk.fast.connect_to_agent], [`spawn_agent_process`][acp_fast.compat.acp_sdk.fast.spawn_agent_process],
  [`spawn_client_process`][acp_fast.compat.acp_sdk.fast.spawn_client_process] with the SDK's parameters;
* [`AgentSideConnection`][acp_fast.compat.acp_sdk.fast.AgentSideConnection] / [`ClientSideConnection`][acp_fast.compat.acp_sdk.fast.ClientSideConnection]: subclasses of the SDK's
  (`isinstance` checks keep working) with the same typed methods returning the same
  pydantic models;
* [`Connection`][acp_fast.compat.acp_sdk.fast.Connection]: the SDK's low-level `Connection(handler, ...)` surface
  (`send_request`, `send_notification`, `add_observer`, `main_loop`, `close`).

They accept what the SDK accepts: an asyncio `StreamWriter`/`StreamReader` pair
(`connect_to_agent(client, proc.stdin, proc.stdout)`), no stream at all (`run_agent`:
this process's stdio), and, in place of the SDK's message `Transport`, an acp_fast
[`Stream`][acp_fast.transport.Stream] or a [`StreamTransport`][acp_fast.compat.acp_sdk.StreamTransport]
(its stream is used directly). Any other `Transport` (the SDK's HTTP/WebSocket ones) gets
the stock SDK connection, unchanged.

How a message travels: the engine decodes each read (batches included) and the connection
calls the SDK's own router (`acp.agent.router` / `acp.client.router`: the same
`model_validate` of every inbound request and notification, the same
`RequestError`/`ValidationError` mapping) without a Task per notification: a
notification's handler coroutine is awaited by the connection's single FIFO runner (at most
one Task at a time, draining everything queued behind it), requests run as Tasks as in the
SDK (counted in the connection's backlog: reading pauses past `max_backlog` running
handlers), responses resolve their waiter at once. Lines written in one loop turn go out in
one write; a request alone in flight, and the answer of the only running handler, are
written at once. On the client side `session/update` goes straight from
`SessionNotification.model_validate` to your `session_update` (no per-update future).

Validation: kept everywhere it is in the SDK. Measured here, validating an inbound
`session/update` (`SessionNotification.model_validate`, a discriminated union) costs
about 4-6 µs, while building the same objects without validation (`model_construct`) costs
more (8 µs), and a lazily validated proxy would hand the user's handler objects of other
types; so there is nothing to gain by skipping it, and nothing changes for the user. The
outbound `session_update` skips only the intermediate `SessionNotification` object when
the update is one of the SDK's update models (exact type) and no `_meta` is given: the
params are then `{"sessionId": ..., "update": update.model_dump(...)}` with the SDK's dump
options, the same JSON the SDK sends (tested against `serialize_params`); a plain text
chunk is dumped by an exact shortcut (`_models`, 0.5 µs instead of 1.6 µs).

Differences from the stock SDK
------------------------------

1. Wire handling is acp_fast's (as in the transport drop-in): lines are bounded
   (`max_line_size`, default 64 MiB) and never raise `LimitOverrunError`; a line that
   is not JSON-RPC is answered with -32700/-32600 (skipped, logged, on a child's stdout);
   a JSON-RPC batch is dispatched entry by entry and answered with one array;
   `"params": null` is omitted when a method has no params.
2. Ordering: incoming notifications are delivered strictly in arrival order, each handler
   finishing before the next starts (the SDK runs each in its own Task, concurrently). A
   notification handler that waits for a *later* incoming request or notification
   therefore waits forever; awaiting your own request to the peer is fine (responses are
   never queued). Requests still run concurrently, as Tasks.
3. `ClientSideConnection.prompt` returns after the handlers of every notification
   received before its response finished (the FIFO barrier
   [`acp_fast.jsonrpc.Connection.settled`][acp_fast.jsonrpc.Connection.settled]), instead of the SDK's per-session tracker;
   the same guarantee for a well-behaved agent, no per-update future.
4. Errors of a request we sent: an error response raises `RequestError(code, message,
   data)` as in the SDK; end of input and `close()` raise `ConnectionError("Connection
   closed")` as in the SDK.
5. Cancelling a task that awaits `send_request` (any typed method) sends
   `$/cancel_request` for it (the SDK sends nothing); an incoming `$/cancel_request` is
   consumed by the connection (the SDK logs a -32601 for it); the SDK's handlers are not
   interrupted by it, as in the SDK.
6. Outgoing request ids are integers from 0, as in the SDK; responses are matched by
   `dict` lookup as in the SDK.
7. `receive_timeout=` is accepted and ignored (the SDK honours it only on its byte-stream
   form, by failing its receive loop); use the SDK's `asyncio.wait_for` around calls.
8. Observers (`observers=`, `add_observer`) receive every message as a fresh `dict`
   (the SDK passes a deep copy of its own dict): incoming ones parsed from the bytes read
   (batches entry by entry), outgoing requests, notifications and answers to the handler
   as sent (`params` absent where the SDK would show `None`); the connection's own
   replies (-32700/-32600 for bad lines, the guard's -32600) are not shown.
9. Handler failures are logged by the `acp_fast.jsonrpc` / `acp_fast.compat.acp_sdk`
   loggers rather than the root logger, with the same answers on the wire.
10. With `listening=False` (as `run_agent` uses) nothing is read until
    [`Connection.main_loop`][acp_fast.compat.acp_sdk.fast.Connection.main_loop] (`listen()`), as in the SDK; `main_loop` returns at end
    of input. Closing the connection cancels running handlers, as in the SDK.
11. `run_agent(stdio_buffer_limit_bytes=)` is accepted and is not a bound (in the SDK it
    is a read-buffer size that longer lines pass anyway); the line bound is
    `max_line_size=` (default 64 MiB). `spawn_agent_process(transport_kwargs={"limit":
    ...})` becomes `max_line_size`, as in the transport drop-in; `"stderr"` is ignored
    (the child's stderr is drained, see `ChildProcess.stderr_tail`), and the child process
    handle is acp_fast's [`ChildProcess`][acp_fast.compat.acp_sdk.ChildProcess].
12. The SDK's HTTP/WebSocket `Transport` objects (and any other message-level transport)
    are not switched: they get the SDK's own `Connection`.
13. The initialization guard: the SDK enforces none on v1 connections and neither does this
    drop-in by default (acp_fast's v1 guard is "unchecked" too). `strict_initialization=True`
    (keyword of the connections and `run_agent`/`connect_to_agent`) applies acp_fast's
    [`InitializationGuard`][acp_fast.protocol.guard.InitializationGuard] as a responder (agent side) or an
    initiator (client side): requests before a successful `initialize` answer -32600.

Importing this module imports the SDK (`acp`) and pydantic, as `import acp` does, and
nothing the stock `import acp` does not import besides `acp_fast` itself: acp_fast's
connection, transports and initialization guard are imported when the first connection is
made (or `run_agent`/`spawn_*` is called), so that [`activate`][acp_fast.compat.acp_sdk.activate] costs (close to)
nothing at import.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union, cast

import acp
from acp.agent.connection import AgentSideConnection as _SdkAgentSideConnection
from acp.agent.router import build_agent_router
from acp.client.connection import ClientSideConnection as _SdkClientSideConnection
from acp.client.connection import _SessionUpdateTracker
from acp.client.router import build_client_router
from acp.connection import Connection as _SdkConnection
from acp.connection import StreamDirection, StreamEvent
from acp.exceptions import RequestError
from acp.router import _resolve_handler
from acp.schema import SessionNotification
from acp.telemetry import span_context
from pydantic import BaseModel, ValidationError

from ...protocol.facts import CANCEL_REQUEST as _CANCEL
from ...protocol.facts import INITIALIZE
from ...protocol.facts import SESSION_UPDATE as _SESSION_UPDATE
from ._models import dump_update
from .connect import ChildProcess, check_sdk_version, spawn_stream

if TYPE_CHECKING:  # imported on first use (see the module docstring)
    from acp.connection import StreamObserver
    from typing_extensions import Unpack

    from ...engine import Message
    from ...jsonrpc import Connection as _RpcConnection
    from ...jsonrpc import RequestContext, Responder
    from ...jsontypes import Json, JsonObject, RequestId
    from ...protocol.guard import InitializationGuard
    from ...transport import ChildStream, Stream
    from ._types import (
        ConnectOptions,
        ConnectionOptions,
        ConnectionTarget,
        DropInOptions,
        FastOptions,
        MethodHandler,
        SpawnOptions,
    )

__all__ = [
    "AgentSideConnection",
    "ClientSideConnection",
    "Connection",
    "connect_to_agent",
    "run_agent",
    "spawn_agent_process",
    "spawn_client_process",
]

logger = logging.getLogger("acp_fast.compat.acp_sdk")

_UPDATE_TYPES = frozenset(SessionNotification.model_fields["update"].annotation.__args__)  # type: ignore[union-attr]
_DUMP: dict[str, Any] = {"mode": "json", "by_alias": True, "exclude_none": True, "exclude_defaults": True}
_CLOSED_REASONS = ("incoming_transport_closed", "connection_closed")
_TRACING = bool(getattr(acp.telemetry, "TRACER", None) or getattr(acp.telemetry, "logfire_span", None))

if TYPE_CHECKING:
    StreamSource = Union[Stream, Callable[[], Awaitable[Stream]]]  # noqa: UP007 - a runtime alias on 3.10


def _source(writer: ConnectionTarget, reader: asyncio.StreamReader | None) -> StreamSource | None:
    """The acp_fast stream (or its opener) for what the SDK's constructors accept; else None."""
    from ...transport import Stream
    from .transport import StreamTransport

    if reader is None:
        if callable(writer) and inspect.iscoroutinefunction(writer):
            return cast("Callable[[], Awaitable[Stream]]", writer)
        if isinstance(writer, Stream):
            return writer
        if isinstance(writer, StreamTransport):  # an unopened one hands its opener over
            return writer.hand_over()
        return None
    if isinstance(writer, asyncio.StreamWriter) and isinstance(reader, asyncio.StreamReader):
        from ._streams import AsyncioStream

        return AsyncioStream(writer, reader)
    return None


def _usable(writer: ConnectionTarget, reader: asyncio.StreamReader | None) -> bool:
    """Whether `_source` can read `writer`/`reader` (without making anything)."""
    from ...transport import Stream
    from .transport import StreamTransport

    if reader is None:
        if isinstance(writer, StreamTransport):  # an opened one is an SDK Transport: the SDK's connection
            return writer.unopened
        return (callable(writer) and inspect.iscoroutinefunction(writer)) or isinstance(writer, Stream)
    return isinstance(writer, asyncio.StreamWriter) and isinstance(reader, asyncio.StreamReader)


class _Tap:
    """What the observers see: every line read or written, parsed again (only with observers)."""

    @staticmethod
    def lines(data: bytes) -> list[JsonObject]:
        out: list[JsonObject] = []
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError:
                continue
            for item in value if isinstance(value, list) else (value,):
                if isinstance(item, dict):
                    out.append(item)
        return out


class Connection:
    """The SDK's `acp.connection.Connection` surface on [`acp_fast.jsonrpc.Connection`][acp_fast.jsonrpc.Connection].

    `Connection(handler, writer, reader=None, *, observers=None, listening=True,
    receive_timeout=None)` as in the SDK: `handler(method, params, is_notification)` is
    awaited for every incoming request and notification. `writer` is an asyncio
    `StreamWriter` (with `reader` its `StreamReader`), an acp_fast `Stream`, a
    [`StreamTransport`][acp_fast.compat.acp_sdk.StreamTransport], or a zero-argument coroutine function returning a `Stream`.

    acp_fast keywords: `engine` (the engine twin), `max_line_size`,
    `max_batch_size`, `on_invalid` (passed to the acp_fast connection),
    `guard` (an [`InitializationGuard`][acp_fast.compat.acp_sdk.fast.InitializationGuard]).
    """

    def __new__(  # type: ignore[misc]  # not always a Connection: see the docstring
        cls, handler: MethodHandler, writer: ConnectionTarget, reader: asyncio.StreamReader | None = None,
        **kwargs: Unpack[DropInOptions],
    ) -> Connection | _SdkConnection:
        """Any other `Transport` (the SDK's HTTP/WebSocket ones, test doubles): the SDK's own."""
        if _usable(writer, reader):
            return super().__new__(cls)
        if kwargs.pop("guard", None) is not None:
            raise TypeError("an initialization guard needs a stream the connection drop-in can read")
        # not one of ours: the SDK's Transport (it refuses acp_fast's keywords, as before)
        return _SdkConnection(handler, writer, reader, **kwargs)  # type: ignore[arg-type, misc]

    def __init__(
        self,
        handler: MethodHandler,
        writer: ConnectionTarget,
        reader: asyncio.StreamReader | None = None,
        *,
        observers: list[StreamObserver] | None = None,
        listening: bool = True,
        receive_timeout: float | None = None,
        guard: InitializationGuard | None = None,
        **options: Unpack[FastOptions],
    ) -> None:
        source = _source(writer, reader)
        if source is None:
            raise TypeError("the connection drop-in needs an asyncio StreamWriter/StreamReader pair, "
                            "an acp_fast Stream or a StreamTransport")
        self._handler = handler
        self._source: StreamSource = source
        self._options = options
        self._observers: list[StreamObserver] = list(observers or [])
        self._guard = guard if guard is not None and guard.role != "unchecked" else None
        self._receive_timeout = receive_timeout
        self._conn: _RpcConnection | None = None
        self._stream: Stream | None = None
        self._opening: asyncio.Task[_RpcConnection] | None = None
        self._attached = False
        self._closed = False
        self._eof: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Future[Any]] = set()
        self._setup: list[Callable[[_RpcConnection], None]] = []
        self._listening = listening
        from ...transport import Stream

        if isinstance(source, Stream):
            self._make(source)
        if listening:
            self._opening = asyncio.get_running_loop().create_task(self._open())

    # -- the acp_fast connection -----------------------------------------------------------

    def _make(self, stream: Stream) -> _RpcConnection:
        from ...jsonrpc import Connection as _RpcConnection

        conn = _RpcConnection(stream, attach=False, first_id=0, **self._options)  # the SDK's ids start at 0
        conn.on_any_request(self._on_request)
        conn.on_any_notification(self._on_notification)
        for setup in self._setup:
            setup(conn)
        self._conn = conn
        self._stream = stream
        self._eof = asyncio.get_running_loop().create_future()  # the loop conn was made in
        return conn

    @property
    def guard(self) -> InitializationGuard | None:
        """The initialization guard applied (`strict_initialization`), or `None`."""
        return self._guard

    async def settled(self) -> None:
        """Wait until the handlers of every notification received so far have finished
        ([`acp_fast.jsonrpc.Connection.settled`][acp_fast.jsonrpc.Connection.settled]; at once before the connection exists)."""
        conn = self._conn
        if conn is not None:
            await conn.settled()

    def on_connection(self, setup: Callable[[_RpcConnection], None]) -> None:
        """Run `setup(conn)` on the acp_fast connection once it exists (now, if it does)."""
        self._setup.append(setup)
        if self._conn is not None:
            setup(self._conn)

    async def _open(self) -> _RpcConnection:
        conn = self._conn
        if conn is None:
            opener = cast("Callable[[], Awaitable[Stream]]", self._source)
            stream = await opener()
            conn = self._conn if self._conn is not None else self._make(stream)
        if not self._attached and not self._closed:
            self._attached = True
            assert self._stream is not None
            self._stream.attach(self._on_data, self._on_eof, conn.set_writable)
        return conn

    async def _ready(self) -> _RpcConnection:
        if self._closed or (self._eof is not None and self._eof.done()):
            raise ConnectionError("Connection closed")
        conn = self._conn
        if conn is None:
            if self._opening is None:
                self._opening = asyncio.get_running_loop().create_task(self._open())
            conn = await asyncio.shield(self._opening)
        return conn

    def _on_data(self, data: bytes) -> None:
        if self._observers:
            for message in _Tap.lines(data):
                self._notify_observers(StreamDirection.INCOMING, message)
        conn = self._conn
        assert conn is not None
        conn.feed_data(data)

    def _on_eof(self, exc: BaseException | None) -> None:
        conn = self._conn
        assert conn is not None
        conn.feed_eof(exc)
        if self._eof is not None and not self._eof.done():
            self._eof.set_result(None)

    # -- the SDK's surface -----------------------------------------------------------------

    async def close(self) -> None:
        """Stop reading, fail pending requests, cancel running handlers, close the stream."""
        if self._closed:
            return
        self._closed = True
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
        for task in list(self._tasks):
            task.cancel()
        conn = self._conn
        if conn is not None:
            conn.close()
            await conn.wait_closed()
        if self._eof is not None and not self._eof.done():
            self._eof.set_result(None)

    async def main_loop(self) -> None:
        """Read and dispatch until end of input (the SDK's `listen()`)."""
        if self._closed:
            raise ConnectionError("Connection closed")
        if self._opening is None:
            self._opening = asyncio.get_running_loop().create_task(self._open())
        await asyncio.shield(self._opening)
        assert self._eof is not None
        await asyncio.shield(self._eof)

    async def __aenter__(self) -> Connection:  # noqa: PYI034 (Python 3.10: no typing.Self)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def add_observer(self, observer: StreamObserver) -> None:
        """Register a callback that receives every JSON-RPC message (see the module docstring)."""
        self._observers.append(observer)

    async def send_request(self, method: str, params: Json = None) -> Json:
        """Send a request and wait for its result (opening the connection on first use).

        Raises:
            RequestError: the peer answered with an error, or the guard refused the request.
            ConnectionError: the connection is closed (or closed while waiting).
        """
        conn = self._conn if self._conn is not None and not self._closed else await self._ready()
        if conn.eof or conn.is_closing:
            raise ConnectionError("Connection closed")
        guard = self._guard
        token = 0
        if guard is not None:
            refused = guard.check_outgoing_request(method)
            if refused is not None:
                raise RequestError(refused.code, refused.message, refused.data)
            if method == INITIALIZE:
                token = guard.begin()
        if conn.writing_paused:
            await conn.drain()
        try:
            handle = conn.request(method, params)
            if self._observers:
                self._observed_send(handle.id, method, params)
            if conn.pending_requests == 1:
                await conn.drain()  # alone in flight: write now instead of at the end of the turn
            result = await handle
        except BaseException as exc:
            if token:
                assert guard is not None
                guard.fail(token)
            error = getattr(exc, "code", None)
            if error is None:
                raise
            data = getattr(exc, "data", None)
            if type(data) is dict and data.get("reason") in _CLOSED_REASONS and (conn.eof or conn.is_closing):
                raise ConnectionError("Connection closed") from None
            raise RequestError(exc.code, exc.message, data if exc.has_data else None) from None  # type: ignore[attr-defined]
        if token:
            assert guard is not None
            guard.succeed(token, 1)
        return result

    async def send_notification(self, method: str, params: Json = None) -> None:
        """Send a notification (opening the connection on first use; waits while the peer is
        not reading).

        Raises:
            ConnectionError: the connection is closed.
        """
        conn = self._conn if self._conn is not None and not self._closed else await self._ready()
        if conn.writing_paused:
            await conn.drain()
        if not conn.notify(method, params):
            raise ConnectionError("Connection closed")
        if self._observers:
            self._observed_send(None, method, params)

    # -- dispatch ----------------------------------------------------------------------------

    def _on_request(self, ctx: RequestContext) -> None:
        method = ctx.method
        guard = self._guard
        if guard is not None:
            refused = guard.check_incoming_request(method)
            if refused is not None:
                raise refused
            if method == INITIALIZE:
                self._start(ctx, self._run_initialize(guard, ctx.params))
                return
        self._start(ctx, self._run_request(method, ctx.params))

    def _start(self, ctx: RequestContext, coro: Awaitable[Json]) -> None:
        """Run one request's handler as its own Task (as the SDK does) and answer when it ends.

        The Task is ours, answering through `ctx.defer()`: the acp_fast connection then
        dispatches the rest of the read at once instead of giving each started handler a
        loop turn first (with the SDK's handlers, all coroutines, that turn would be paid by
        every request of a burst). The handler's first step still runs before any later
        notification's handler (both are scheduled in arrival order).
        """
        responder = ctx.defer()
        # accounted as the connection's own handler tasks: its backlog bound (reading pauses
        # past max_backlog), its close (cancelled) and its end of input (waited for)
        ctx.connection.start_handler_task(self._respond(responder, coro))

    async def _respond(self, responder: Responder, coro: Awaitable[Json]) -> None:
        from ...errors import REQUEST_CANCELLED, JsonRpcError

        try:
            result = await coro
        except JsonRpcError as exc:
            responder.respond_error(exc)
            if self._observers:
                self._observed_answer(responder.context.id, "error", exc.to_dict())
        except asyncio.CancelledError:
            if not self._closed:
                responder.respond_error(JsonRpcError(REQUEST_CANCELLED))
            raise
        else:
            responder.respond(result)
            if self._observers:
                self._observed_answer(responder.context.id, "result", result)
        rpc = responder.context.connection
        if rpc.running_handlers == 1:
            await rpc.drain()  # the only handler running: write the answer now, not a turn later

    async def _run_initialize(self, guard: InitializationGuard, params: Json) -> Json:
        token = guard.begin()
        try:
            result = await self._run_request(INITIALIZE, params)
        except BaseException:
            guard.fail(token)
            raise
        guard.succeed(token, 1)
        return result

    async def _run_request(self, method: str, params: Json) -> Json:
        if _TRACING:
            with span_context("acp.request", attributes={"method": method}):
                return await self._execute(method, params)
        return await self._execute(method, params)

    async def _execute(self, method: str, params: Json) -> Json:
        from ...errors import JsonRpcError

        try:
            result = await self._handler(method, params, False)
            if isinstance(result, BaseModel):
                result = result.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)
            return result
        except RequestError as exc:
            raise JsonRpcError(exc.code, str(exc), exc.data) from None
        except ValidationError as exc:
            raise JsonRpcError(-32602, "Invalid params", {"errors": exc.errors()}) from None
        except Exception as exc:
            logger.exception("Unhandled error while handling request method=%s", method, exc_info=exc)
            try:
                data = json.loads(str(exc))
            except Exception:  # noqa: BLE001 - the SDK's fallback
                data = {"details": str(exc)}
            raise JsonRpcError(-32603, "Internal error", data) from None

    def _on_notification(self, msg: Any) -> Coroutine[None, None, None] | None:
        method = msg.method
        if method == _CANCEL:
            return None  # consumed by the acp_fast connection
        guard = self._guard
        if guard is not None and not guard.allows_incoming_notification(method):
            return None
        return self._run_notification(method, msg.params)

    async def _run_notification(self, method: str, params: Json) -> None:
        try:
            await self._handler(method, params, True)
        except Exception as exc:
            logger.exception("Unhandled error while handling notification method=%s", method, exc_info=exc)

    # -- observers ---------------------------------------------------------------------------

    def _observed_send(self, rid: RequestId | None, method: str, params: Json) -> None:
        payload: JsonObject = {"jsonrpc": "2.0"}
        if rid is not None:
            payload["id"] = rid
        payload["method"] = method
        if params is not None:
            payload["params"] = json.loads(json.dumps(params))
        self._notify_observers(StreamDirection.OUTGOING, payload)

    def _observed_answer(self, rid: RequestId | None, key: str, value: Json) -> None:
        try:
            copy = json.loads(json.dumps(value))
        except (TypeError, ValueError):
            copy = value
        self._notify_observers(StreamDirection.OUTGOING, {"jsonrpc": "2.0", "id": rid, key: copy})

    def _notify_observers(self, direction: StreamDirection, message: JsonObject) -> None:
        event = StreamEvent(direction, message)
        for observer in list(self._observers):
            try:
                result = observer(event)
            except Exception:
                logger.exception("Stream observer failed")
                continue
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._observer_done)

    def _observer_done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("Stream observer coroutine failed", exc_info=task.exception())


def _connection(handler: MethodHandler, input_stream: ConnectionTarget, output_stream: asyncio.StreamReader | None,
                listening: bool, role: str, strict_initialization: bool,
                kwargs: ConnectionOptions) -> _SdkConnection:
    """Our [`Connection`][acp_fast.compat.acp_sdk.fast.Connection] for what we can read, else the stock SDK's (other Transports);
    either stands for the SDK's (ours has its surface) in the SDK's connection classes."""
    from ...protocol.guard import InitializationGuard

    guard = InitializationGuard(1, role) if strict_initialization else None
    return cast("_SdkConnection", Connection(handler, input_stream, output_stream, listening=listening, guard=guard,
                                             **kwargs))


class AgentSideConnection(_SdkAgentSideConnection):  # type: ignore[misc]  # the SDK marks it @final
    """The SDK's `AgentSideConnection` on acp_fast (same constructor, same typed methods)."""

    def __init__(
        self,
        to_agent: Callable[[acp.Client], acp.Agent] | acp.Agent,
        input_stream: ConnectionTarget,
        output_stream: asyncio.StreamReader | None = None,
        listening: bool = True,
        *,
        use_unstable_protocol: bool = False,
        strict_initialization: bool = False,
        **connection_kwargs: Unpack[ConnectionOptions],
    ) -> None:
        agent = to_agent(self) if callable(to_agent) else to_agent
        handler = build_agent_router(agent, use_unstable_protocol=use_unstable_protocol)
        self._conn = _connection(handler, input_stream, output_stream, listening, "responder",
                                 strict_initialization, connection_kwargs)
        if on_connect := getattr(agent, "on_connect", None):
            on_connect(self)

    async def session_update(self, session_id: str | BaseModel | None = None, update: BaseModel | None = None,
                             *args: object, **kwargs: Json) -> None:
        """As the SDK's; one of its update models (exact type) and no `_meta`: no intermediate model."""
        if not args and not kwargs and type(session_id) is str and type(update) in _UPDATE_TYPES:
            model: BaseModel = update  # type: ignore[assignment]  # one of the update models (its type just checked)
            dumped = dump_update(model)
            await self._conn.send_notification(
                _SESSION_UPDATE, {"sessionId": session_id, "update": model.model_dump(**_DUMP) if dumped is None
                                  else dumped})
            return
        if update is not None:
            kwargs["update"] = update
        if session_id is not None:
            args = (session_id, *args)
        await super().session_update(*args, **kwargs)  # type: ignore[arg-type]  # the SDK's checks


class ClientSideConnection(_SdkClientSideConnection):  # type: ignore[misc]  # the SDK marks it @final
    """The SDK's `ClientSideConnection` on acp_fast (same constructor, same typed methods)."""

    def __init__(
        self,
        to_client: Callable[[acp.Agent], acp.Client] | acp.Client,
        input_stream: ConnectionTarget,
        output_stream: asyncio.StreamReader | None = None,
        *,
        use_unstable_protocol: bool = False,
        strict_initialization: bool = False,
        **connection_kwargs: Unpack[ConnectionOptions],
    ) -> None:
        client = to_client(self) if callable(to_client) else to_client
        if _usable(input_stream, output_stream):
            handler = build_client_router(client, use_unstable_protocol=use_unstable_protocol)
        else:  # a Transport of another kind runs on the SDK's connection: its update tracker too
            self._session_updates = _SessionUpdateTracker(client)
            handler = build_client_router(cast("acp.Client", self._session_updates),
                                          use_unstable_protocol=use_unstable_protocol)
        self._conn = _connection(handler, input_stream, output_stream, True, "initiator",
                                 strict_initialization, connection_kwargs)
        func, _attr, legacy = _resolve_handler(client, "session_update")
        if isinstance(self._conn, Connection) and func is not None and not legacy:
            self._conn.on_connection(lambda conn: conn.on_notification(_SESSION_UPDATE, self._make_updates(func)))
        if isinstance(self._conn, Connection):
            self._session_updates = _Barrier(self._conn)
        if on_connect := getattr(client, "on_connect", None):
            on_connect(self)

    def _make_updates(self, func: Callable[..., Awaitable[object]]) -> Callable[[Message], object]:
        guard = cast("Connection", self._conn).guard
        validate = SessionNotification.model_validate

        def on_update(msg: Message) -> Awaitable[object] | None:
            if guard is not None and not guard.ready:
                return None
            try:
                notification = validate(msg.params)
            except ValidationError:
                logger.exception("Unhandled error while handling notification method=%s", _SESSION_UPDATE)
                return None
            meta = notification.field_meta
            if meta:
                return func(session_id=notification.session_id, update=notification.update, **meta)
            return func(session_id=notification.session_id, update=notification.update)

        return on_update



class _Barrier:
    """Stands in for the SDK's per-session update tracker: `prompt` waits on the FIFO barrier."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def wait(self, session_id: str) -> None:
        await self._conn.settled()


async def run_agent(
    agent: acp.Agent,
    input_stream: ConnectionTarget | None = None,
    output_stream: asyncio.StreamReader | None = None,
    *,
    use_unstable_protocol: bool = False,
    stdio_buffer_limit_bytes: int | None = None,
    **connection_kwargs: Unpack[ConnectionOptions],
) -> None:
    """`acp.run_agent` on the connection drop-in: the same call, the same parameters.

    Without streams the agent is served on this process's stdin/stdout through acp_fast.
    `stdio_buffer_limit_bytes` is accepted and ignored: in the SDK it is a read-buffer
    size that longer lines pass anyway; the bound on a line here is `max_line_size=`
    (default: the engine's, 64 MiB).
    """
    check_sdk_version()
    del stdio_buffer_limit_bytes
    if input_stream is None and output_stream is None:
        from ...transport import connect_stdio

        input_stream = connect_stdio
    # (a reader without its writer goes on to the SDK's own refusal, as before)
    conn = AgentSideConnection(agent, input_stream, output_stream, listening=False,  # type: ignore[arg-type]
                               use_unstable_protocol=use_unstable_protocol, **connection_kwargs)
    try:
        await conn.listen()
    finally:
        await asyncio.shield(conn.close())


def connect_to_agent(
    client: acp.Client,
    input_stream: ConnectionTarget,
    output_stream: asyncio.StreamReader | None = None,
    *,
    use_unstable_protocol: bool = False,
    **connection_kwargs: Unpack[ConnectionOptions],
) -> ClientSideConnection:
    """`acp.connect_to_agent` on the connection drop-in."""
    check_sdk_version()
    return ClientSideConnection(client, input_stream, output_stream, use_unstable_protocol=use_unstable_protocol,
                                **connection_kwargs)


def _connection_options(kwargs: SpawnOptions) -> ConnectOptions:
    """The connection keywords of `spawn_*_process`; the transport drop-in's `transport_options`
    (engine, max_line_size, ...) are accepted too and merged."""
    options: dict[str, Any] = dict(kwargs.pop("transport_options", None) or {})
    options.update(kwargs)
    return cast("ConnectOptions", options)


async def _spawned(command: str, args: tuple[str, ...], env: Mapping[str, str] | None, cwd: str | Path | None,
                   transport_kwargs: Mapping[str, object] | None,
                   connection_kwargs: SpawnOptions) -> tuple[ChildStream, ConnectOptions]:
    """Start `command`: its stream and the keywords of the drop-in's connection to put on it."""
    check_sdk_version()
    kwargs = _connection_options(connection_kwargs)
    stream, limit = await spawn_stream(command, *args, env=env, cwd=cwd, transport_kwargs=transport_kwargs)
    if limit is not None:
        kwargs.setdefault("max_line_size", limit)
    return stream, kwargs


@asynccontextmanager
async def spawn_agent_process(
    to_client: Callable[[acp.Agent], acp.Client] | acp.Client,
    command: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    transport_kwargs: Mapping[str, object] | None = None,
    **connection_kwargs: Unpack[SpawnOptions],
) -> AsyncIterator[tuple[ClientSideConnection, ChildProcess]]:
    """`acp.spawn_agent_process` on the connection drop-in: `(ClientSideConnection, ChildProcess)`."""
    stream, kwargs = await _spawned(command, args, env, cwd, transport_kwargs, connection_kwargs)
    conn, process = ClientSideConnection(to_client, stream, **kwargs), ChildProcess(stream)
    try:
        yield conn, process
    finally:
        await conn.close()


@asynccontextmanager
async def spawn_client_process(
    to_agent: Callable[[acp.Client], acp.Agent] | acp.Agent,
    command: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    transport_kwargs: Mapping[str, object] | None = None,
    **connection_kwargs: Unpack[SpawnOptions],
) -> AsyncIterator[tuple[AgentSideConnection, ChildProcess]]:
    """`acp.spawn_client_process` on the connection drop-in: `(AgentSideConnection, ChildProcess)`."""
    stream, kwargs = await _spawned(command, args, env, cwd, transport_kwargs, connection_kwargs)
    conn, process = AgentSideConnection(to_agent, stream, **kwargs), ChildProcess(stream)
    try:
        yield conn, process
    finally:
        await conn.close()
