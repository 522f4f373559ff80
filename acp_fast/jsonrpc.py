"""JSON-RPC 2.0 connection: the dispatch layer between a transport and ACP semantics.

A [`Connection`][acp_fast.jsonrpc.Connection] sits on one [`Stream`][acp_fast.transport.Stream] and one engine twin
(`acp_fast._engine_py` or `acp_fast._engine_c`; the selected `acp_fast.engine` by
default). It owns the rules of `notes/protocol.md` §1-4: the typed-id pending table, method
dispatch, batch reply slots, `$/cancel_request` in both directions, EOF semantics and
coalesced writes. It knows nothing about ACP methods.

Hot path, per read: `Decoder.feed(chunk)` once, then a plain loop over the frames.
Responses resolve their waiter directly; synchronous handlers run inline; only a handler
that returns a coroutine costs a Task. Every line written during one read (or one loop
turn) goes out in one transport write.

Ordering (one FIFO per connection):

* Handlers are invoked in arrival order. A synchronous handler runs inline.
* A request handler that returns a coroutine becomes a Task: requests run concurrently.
* A notification handler that returns a coroutine blocks the FIFO: later notifications and
  requests wait until it finished (one runner Task drains them, in order). So notification
  handlers always complete in arrival order, sync or async. Do not make an async
  notification handler wait for a *later* incoming message: it would wait forever.
* Responses are never queued: they resolve their waiter at once, so a handler may await
  its own request to the peer (e.g. a permission request during a prompt) without deadlock.

Memory bounds (every state):

* Reading pauses while the peer is not reading what we write (`Stream.writing_paused`),
  and while more than `max_backlog` handlers are queued or running; it resumes at half
  that. While one of our own requests awaits its response, we read ahead (the response
  may be behind, and handlers may be waiting for it) within wider bounds, never without:
  up to `64 × max_backlog` handlers (queued or running) and, while the peer is not reading, until
  `max_write_buffer` bytes of our answers wait for it. A peer that sends more than that
  ahead of a response it owes us is waited for, not buffered.
* Writing: lines are queued in memory and handed to the transport once per loop turn (or
  every 256 KiB). The public senders ([`Connection.notify`][acp_fast.jsonrpc.Connection.notify], [`Connection.request`][acp_fast.jsonrpc.Connection.request])
  refuse with [`SendBufferFull`][acp_fast.errors.SendBufferFull] once more than `max_write_buffer`
  bytes wait for a peer that is not reading: await [`Connection.drain`][acp_fast.jsonrpc.Connection.drain] in send loops.
  Answers to the peer's requests are never refused (the reading pause bounds them).

Every request is answered exactly once, whatever its handler does: an exception (even one
whose `str()` raises), a result that cannot be encoded (even one whose `items()`
raises) and a cancelled task each answer with an error.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import types
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, TypeVar, Union, overload

from . import engine as _engine
from ._kinds import BATCH, MALFORMED, NOTIFICATION, REQUEST, RESPONSE
from .errors import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    JsonRpcError,
)
from .jsontypes import Json, RequestId
from .protocol.facts import CANCEL_REQUEST
from .transport import Stream

if TYPE_CHECKING:
    from ._replies import BatchReply
    from .engine import Decoder, Engine, Frame, Malformed, Message, Outbox

__all__ = [
    "CANCEL_METHOD",
    "DEFAULT_MAX_BACKLOG",
    "DEFAULT_MAX_WRITE_BUFFER",
    "Connection",
    "NotificationHandler",
    "PendingRequest",
    "RequestContext",
    "RequestHandler",
    "RequestResult",
    "Responder",
    "cancel_target",
    "error_line",
    "invalid_line_reply",
]

logger = logging.getLogger("acp_fast.jsonrpc")

#: The cancellation notification of protocol.md §4.1 (``acp_fast.protocol.facts.CANCEL_REQUEST``).
CANCEL_METHOD = CANCEL_REQUEST
#: Queued + running handlers above which reading is paused.
DEFAULT_MAX_BACKLOG = 1024
#: Bytes waiting for a slow peer above which ``notify``/``request`` raise ``SendBufferFull``.
DEFAULT_MAX_WRITE_BUFFER = 8 * 1024 * 1024
#: Queued output handed to the transport at once, without waiting for the loop turn's end.
_FLUSH_AT = 256 * 1024
#: A read longer than this is decoded and handled in pieces of at most this many bytes, each
#: ending at a line's end (see ``Connection._feed_sliced``): ~80 streamed updates, ~400
#: objects the cyclic GC counts, below its default first-generation threshold (700).
_SLICE = 16 * 1024
#: While our own requests are pending, the backlog may grow to this multiple of max_backlog.
_READ_AHEAD = 64
#: Longest ``data`` string of the -32603 answer for a handler's unexpected exception.
_MAX_ERROR_DATA = 200

# Frame kinds, defined once in acp_fast._kinds (both engine twins use them; checked below).
_REQUEST, _NOTIFICATION, _RESPONSE, _BATCH, _MALFORMED = REQUEST, NOTIFICATION, RESPONSE, BATCH, MALFORMED

_T = TypeVar("_T")
_CoroutineType = types.CoroutineType
_PLAIN = frozenset({type(None), dict, list, str, int, float, bool, tuple})
#: What a request handler returns: the result, or an awaitable giving it (a coroutine).
RequestResult = Union[Json, Awaitable[Json]]  # noqa: UP007 - a runtime alias on 3.10
#: A request handler: ``fn(ctx)`` returns the result or an awaitable of it.
RequestHandler = Callable[["RequestContext"], RequestResult]
#: A notification handler: ``fn(message)``; its return value is ignored, a coroutine is awaited.
NotificationHandler = Callable[["Message"], object]
_RH = TypeVar("_RH", bound=RequestHandler)
_NH = TypeVar("_NH", bound=NotificationHandler)


# -- the JSON-RPC rules, written once (this connection, the SDK drop-in's transport, the
# -- conductor and the routers apply them to the engine's frames) -------------------------


def error_line(encode_error: Callable[..., bytes], rid: RequestId | None, error: JsonRpcError) -> bytes:
    """The error response line answering request `rid` with `error`: its `data` member
    only when the error has one (`JsonRpcError.has_data`; `data: null` is a value).

    Args:
        encode_error: the engine's `encode_error(id, code, message, data?)`.

    Raises:
        EncodeError: `error.data` is not JSON.
    """
    if error.has_data:
        return encode_error(rid, error.code, error.message, error.data)
    return encode_error(rid, error.code, error.message)


def invalid_line_reply(error_reply: Callable[[Malformed], bytes | None], frame: Malformed, *,
                       skip: bool = False) -> bytes | None:
    """What a line that is not a valid JSON-RPC message gets back (protocol.md §2).

    A malformed *response* is dropped (logged): nobody may answer a response. With `skip`
    (`on_invalid="skip"`: a peer known to print other lines on its stdout) the line is
    dropped (logged). Anything else is answered with the engine's error reply: -32700 for a
    line that is not JSON, -32600 for JSON that is not a message, id `null` (`None` when
    the engine has nothing to answer).

    Args:
        error_reply: the engine's `error_reply(frame)`.
    """
    if frame.response_shaped:
        logger.warning("malformed response dropped (%s): %.200r", frame.reason, frame.raw)
        return None
    if skip:
        logger.warning("skipped a line that is not JSON-RPC (%s): %.200r", frame.reason, frame.raw)
        return None
    return error_reply(frame)


def cancel_target(params: Json) -> tuple[bool, RequestId | None]:
    """The request a `$/cancel_request` names: `(True, requestId)` when its params are an
    object whose `requestId` is an integer, a string or `null`; `(False, None)` for a
    malformed one (ignored: a notification is never answered)."""
    if type(params) is dict and "requestId" in params:
        rid = params["requestId"]
        if type(rid) is int or type(rid) is str or rid is None:
            return True, rid
    return False, None


def _describe(exc: BaseException) -> str:
    """`"Type: message"` for an error's `data`; never raises (`str(exc)` may)."""
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the answer
        return f"{name}: <unprintable>"[:_MAX_ERROR_DATA]
    return f"{name}: {text}"[:_MAX_ERROR_DATA]


def _being_cancelled() -> bool:
    """Whether the current task itself is being cancelled (vs. a handler's own CancelledError)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or cancelling() > 0  # Python 3.10 cannot tell: assume it is


def _is_coroutine(value: object) -> TypeGuard[Coroutine[Any, Any, Any]]:
    t = type(value)
    return t is _CoroutineType or (t not in _PLAIN and asyncio.iscoroutine(value))


class _BatchState:
    """One incoming batch: its `BatchReply` and whether every entry was dispatched."""

    __slots__ = ("dispatched", "reply")

    def __init__(self, reply: BatchReply) -> None:
        self.reply = reply
        self.dispatched = False


class RequestContext:
    """What a request handler receives: the request, its cancellation state, a way back.

    The handler's return value is the result (`None` becomes `null`); raising
    [`JsonRpcError`][acp_fast.errors.JsonRpcError] answers with that error; any other exception
    answers -32603. To answer later or from elsewhere, call [`defer`][acp_fast.jsonrpc.RequestContext.defer].

    Attributes:
        connection: the [`Connection`][acp_fast.jsonrpc.Connection] the request came in on (send requests and
            notifications back through it).
        message: the request `Message` (`.raw`, `.params_raw` for forwarding).
    """

    __slots__ = (
        "_batch",
        "_cancel_fut",
        "_cancelled",
        "_deferred",
        "_done",
        "_on_cancel",
        "_registered",
        "_slot",
        "connection",
        "message",
    )

    def __init__(self, connection: Connection, message: Any, batch: _BatchState | None, slot: int) -> None:
        self.connection = connection
        self.message = message
        self._batch = batch
        self._slot = slot
        self._done = False
        self._deferred: weakref.ref[Responder] | None = None  # weakref to the Responder once deferred
        self._registered = False
        self._cancelled = False
        self._cancel_fut: asyncio.Future[None] | None = None
        self._on_cancel: list[Callable[[], object]] | None = None

    @property
    def id(self) -> RequestId | None:
        """The request id, exactly as the peer sent it (typed)."""
        return self.message.id  # type: ignore[no-any-return]

    @property
    def method(self) -> str:
        """The request's method."""
        return self.message.method  # type: ignore[no-any-return]

    @property
    def params(self) -> Json:
        """Decoded params (`None` when absent)."""
        return self.message.params

    @property
    def answered(self) -> bool:
        """True once the request has its answer (a result, an error or the fallback)."""
        return self._done

    @property
    def cancelled(self) -> bool:
        """True once the peer sent `$/cancel_request` for this request."""
        return self._cancelled

    async def wait_cancelled(self) -> None:
        """Return when the peer cancels this request (immediately if it already did)."""
        if not self._cancelled:
            await asyncio.shield(self._waiter())

    def add_cancel_callback(self, fn: Callable[[], object]) -> None:
        """Call `fn()` when the peer cancels this request: at once (synchronously, from
        the read path) when the `$/cancel_request` arrives, or soon if it already did.
        A callback-based [`wait_cancelled`][acp_fast.jsonrpc.RequestContext.wait_cancelled] that needs no task (e.g. to pass the
        cancellation on to a forwarded request); an exception it raises is logged."""
        if self._cancelled:
            self.connection._loop.call_soon(self._call_cancel_callback, fn)
        elif self._on_cancel is None:
            self._on_cancel = [fn]
        else:
            self._on_cancel.append(fn)

    def _call_cancel_callback(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:
            logger.exception("cancel callback of request %r (%s) failed", self.id, self.method)

    def raise_if_cancelled(self) -> None:
        """Raise `JsonRpcError` -32800 if the peer cancelled this request.

        Raises:
            JsonRpcError: code -32800 (Request cancelled).
        """
        if self._cancelled:
            raise JsonRpcError(REQUEST_CANCELLED)

    async def run_until_cancelled(self, aw: Awaitable[_T]) -> _T:
        """Await `aw` unless the peer cancels first; then cancel it and raise -32800.

        Raises:
            JsonRpcError: code -32800 when the cancellation won.
        """
        task = asyncio.ensure_future(aw)
        try:
            if not self._cancelled:
                await asyncio.wait((task, self._waiter()), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                task.cancel()
        if task.done() and not task.cancelled():
            return task.result()
        raise JsonRpcError(REQUEST_CANCELLED)

    def defer(self) -> Responder:
        """Take over answering: the handler's return value is then ignored.

        The returned [`Responder`][acp_fast.jsonrpc.Responder] answers exactly once; if it is garbage-collected
        unanswered, that is logged at error level and the request is answered -32603
        (its data names the method: "request handler dropped its responder for", then the
        method in backticks), standalone or in a batch.
        """
        responder = self._deferred() if self._deferred is not None else None
        if responder is None:
            responder = Responder(self)
            self._deferred = weakref.ref(responder)
            if not self._done and not self._registered:
                self.connection._register(self)
        return responder

    def _waiter(self) -> asyncio.Future[None]:
        fut = self._cancel_fut
        if fut is None:
            fut = self._cancel_fut = self.connection._loop.create_future()
            if self._cancelled:
                fut.set_result(None)
        return fut

    def _cancel(self) -> None:
        self._cancelled = True
        fut = self._cancel_fut
        if fut is not None and not fut.done():
            fut.set_result(None)
        callbacks = self._on_cancel
        if callbacks is not None:
            self._on_cancel = None
            for fn in callbacks:
                self._call_cancel_callback(fn)

    def __repr__(self) -> str:
        return f"<RequestContext id={self.id!r} method={self.method!r}>"


class Responder:
    """Answers one deferred request (see [`RequestContext.defer`][acp_fast.jsonrpc.RequestContext.defer]); first answer wins."""

    __slots__ = ("__weakref__", "_ctx")

    def __init__(self, ctx: RequestContext) -> None:
        self._ctx = ctx

    @property
    def context(self) -> RequestContext:
        """The deferred request this responder answers."""
        return self._ctx

    @property
    def answered(self) -> bool:
        """True once the request has its answer (from this responder or otherwise)."""
        return self._ctx._done

    def respond(self, result: Json = None) -> bool:
        """Answer with `result`; returns False (and warns) if already answered."""
        ctx = self._ctx
        if ctx._done:
            ctx.connection._duplicate(ctx)
            return False
        ctx.connection._answer(ctx, result)
        return True

    def respond_error(self, error: BaseException) -> bool:
        """Answer with `error`; returns False (and warns) if already answered.

        A [`JsonRpcError`][acp_fast.errors.JsonRpcError] is answered as it is (code, message,
        data); any other exception -32603, as when a handler raises it."""
        ctx = self._ctx
        if ctx._done:
            ctx.connection._duplicate(ctx)
            return False
        ctx.connection._fail(ctx, error)
        return True

    def __del__(self) -> None:
        ctx = self._ctx
        if not ctx._done:
            try:
                ctx.connection._dropped(ctx)
            except Exception:  # noqa: BLE001,S110  # pragma: no cover - interpreter shutdown
                pass


class PendingRequest:
    """Handle of one request we sent; `await` it for the result.

    Awaiting raises [`JsonRpcError`][acp_fast.errors.JsonRpcError] for an error response (and for
    EOF or close: -32603), `asyncio.TimeoutError` when its timeout expired.

    If the task awaiting it is cancelled, `$/cancel_request` is sent (once) and the
    eventual response is dropped quietly.

    Attributes:
        id: the id we allocated (an `int`).
        method: the request's method.
    """

    __slots__ = (
        "_abandoned",
        "_answered",
        "_cancel_sent",
        "_conn",
        "_detached",
        "_fut",
        "_raw",
        "_timer",
        "id",
        "method",
    )

    def __init__(self, conn: Connection, id: int, method: str, raw: bool) -> None:
        self.id = id
        self.method = method
        self._conn = conn
        self._fut: asyncio.Future[Any] = conn._loop.create_future()
        self._timer: asyncio.TimerHandle | None = None
        self._raw = raw
        self._answered = False
        self._cancel_sent = False
        self._abandoned = False
        self._detached = False

    def __await__(self) -> Generator[Any, None, Any]:
        try:
            return (yield from self._fut.__await__())
        except asyncio.CancelledError:
            if not self._detached:
                self._abandon()
            raise

    def done(self) -> bool:
        """True once the request is answered, failed, timed out or detached."""
        return self._fut.done()

    def add_done_callback(self, fn: Callable[[asyncio.Future[Any]], Any]) -> None:
        """Call `fn(future)` once the request is answered, failed, timed out or detached
        (scheduled on the loop, as `asyncio.Future.add_done_callback` does): its
        `result()` is what awaiting this handle returns, its `exception()` what
        awaiting it raises. A way to follow the request without a task; nothing awaits
        the handle, so cancellation is then the caller's (see [`cancel`][acp_fast.jsonrpc.PendingRequest.cancel])."""
        self._fut.add_done_callback(fn)

    def cancel(self) -> bool:
        """Ask the peer to cancel: sends `$/cancel_request` once (protocol.md §4.1).

        The handle still resolves with the peer's real answer (usually -32800, but it may
        be a normal result). Returns False when nothing was sent (already answered,
        detached, or already cancelled).
        """
        if self._answered or self._detached or self._cancel_sent:
            return False
        self._cancel_sent = True
        self._conn._send_cancel(self.id)
        return True

    def detach(self) -> None:
        """Forget the request: its response is ignored, no `$/cancel_request` is sent.

        Awaiting a detached handle raises `asyncio.CancelledError`.
        """
        self._detached = True
        self._abandoned = True
        if self._timer is not None:
            self._timer.cancel()
        if not self._fut.done():
            self._fut.cancel()

    def _abandon(self) -> None:
        self._abandoned = True
        if self._timer is not None:
            self._timer.cancel()
        if not self._answered and not self._cancel_sent:
            self._cancel_sent = True
            self._conn._send_cancel(self.id)

    def _expire(self, timeout: float) -> None:
        if self._fut.done():
            return
        self._fut.set_exception(asyncio.TimeoutError(f"request {self.method!r} timed out after {timeout} s"))
        self._abandon()

    def _resolve(self, msg: Message) -> None:
        self._answered = True
        if self._timer is not None:
            self._timer.cancel()
        fut = self._fut
        if fut.done():
            logger.debug("late response to abandoned request %r (%s) dropped", self.id, self.method)
            return
        error = msg.error
        if error is not None:
            fut.set_exception(JsonRpcError.from_dict(error))
        else:
            fut.set_result(msg if self._raw else msg.result)

    def _fail(self, exc: JsonRpcError) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if not self._fut.done():
            self._fut.set_exception(exc)

    def __repr__(self) -> str:
        return f"<PendingRequest id={self.id} method={self.method!r} done={self._fut.done()}>"


class Connection:
    """A JSON-RPC 2.0 peer over one stream (protocol.md §1-4); see the module docstring.

    Args:
        stream: the byte stream (from [`acp_fast.transport`][acp_fast.transport]); the connection attaches
            to it at once and owns it from then on.
        engine: the engine twin module (default: the selected `acp_fast.engine`).
        on_invalid: what to do with a line that is not JSON-RPC at all (a banner an agent
            prints on stdout): `"reply"` answers the JSON-RPC error, `"skip"` logs and
            skips it. Default: `"skip"` on a stream that reads a child process's stdout
            (`stream.reads_child_stdout`), `"reply"` otherwise. Batch entries are always
            answered.
        lazy: decode `params`/`result` only on access (`Decoder(lazy=True)`).
        max_line_size: the engine's line limit (default: the engine's default).
        max_batch_size: the engine's batch limit (default: the engine's default, 1024).
        max_backlog: queued + running handlers above which reading is paused.
        max_write_buffer: bytes waiting for a slow peer above which [`notify`][acp_fast.jsonrpc.Connection.notify] and
            [`request`][acp_fast.jsonrpc.Connection.request] raise [`SendBufferFull`][acp_fast.errors.SendBufferFull].
        attach: attach to `stream` now (default). `False`: the caller delivers the
            stream's events through [`feed_data`][acp_fast.jsonrpc.Connection.feed_data], [`feed_eof`][acp_fast.jsonrpc.Connection.feed_eof] and
            [`set_writable`][acp_fast.jsonrpc.Connection.set_writable] (a first-frame router hands a connection over this way).
        decoder: an engine `Decoder` to continue with (one that already read the start of
            the stream); default: a new one.
        first_id: the id of the first request sent, then one more for each (default 1;
            the official Python SDK starts at 0).

    Must be created inside a running event loop. Register handlers before the first
    `await` after creating it: messages are delivered from the next loop turn on.
    """

    def __init__(
        self,
        stream: Stream,
        *,
        engine: Engine | None = None,
        on_invalid: Literal["reply", "skip"] | None = None,
        lazy: bool = False,
        max_line_size: int | None = None,
        max_batch_size: int | None = None,
        max_backlog: int = DEFAULT_MAX_BACKLOG,
        max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
        attach: bool = True,
        decoder: Decoder | None = None,
        first_id: int = 1,
    ) -> None:
        eng: Any = engine if engine is not None else _engine
        if (eng.REQUEST, eng.NOTIFICATION, eng.RESPONSE, eng.BATCH, eng.MALFORMED) != (
                REQUEST, NOTIFICATION, RESPONSE, BATCH, MALFORMED):
            raise ValueError(f"engine {eng.__name__} uses unexpected frame kinds")
        if on_invalid is None:
            # the connection's policy: a child's stdout may carry banners (skip them, logged);
            # everywhere else the peer is told (-32700/-32600 replies)
            on_invalid = "skip" if getattr(stream, "reads_child_stdout", False) else "reply"
        if on_invalid not in ("reply", "skip"):
            raise ValueError(f"on_invalid must be 'reply' or 'skip', not {on_invalid!r}")
        self._engine = eng
        self._loop = asyncio.get_running_loop()
        self._stream = stream
        kwargs: dict[str, Any] = {"lazy": lazy}
        if max_line_size is not None:
            kwargs["max_line_size"] = max_line_size
        if max_batch_size is not None:
            kwargs["max_batch_size"] = max_batch_size
        self._decoder = decoder if decoder is not None else eng.Decoder(**kwargs)
        self._enc_result = eng.encode_result
        self._enc_error = eng.encode_error
        self._error_reply = eng.error_reply
        self._BatchReply = eng.BatchReply
        self._skip_invalid = on_invalid == "skip"
        self._max_backlog = max_backlog
        self._max_write_buffer = max_write_buffer

        self._requests: dict[str, RequestHandler] = {}
        self._notifications: dict[str, NotificationHandler] = {}
        self._request_fallback: RequestHandler | None = None
        self._notification_fallback: NotificationHandler | None = None

        self._next_id = first_id - 1
        self._pending: dict[Any, PendingRequest] = {}
        self._inflight: dict[Any, RequestContext] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._queue: collections.deque[Any] = collections.deque()
        self._runner: asyncio.Task[None] | None = None

        #: encoded lines waiting for one transport write per loop turn (the engine's outbox)
        self._outbox: Outbox = eng.Outbox(self._write_out, self._loop.call_soon, stream.get_write_buffer_size,
                                  max_buffer=max_write_buffer, flush_at=_FLUSH_AT)
        self._task_started = False
        self._reading_paused = False
        self._drain_fut: asyncio.Future[None] | None = None

        self._eof = False
        self._closing = False
        self._finishing = False
        self._error: BaseException | None = None
        self.closed: asyncio.Future[None] = self._loop.create_future()
        """Resolves (to `None`) once the connection and its stream are fully closed."""
        self._closer: asyncio.Task[None] | None = None

        if attach:
            stream.attach(self.feed_data, self.feed_eof, self.set_writable)
            accept = getattr(stream, "accept_frames", None)  # an in-process peer may decode for us
            if accept is not None:
                accept(self.feed_frames, self._decoder)

    # -- registry -----------------------------------------------------------------------

    @overload
    def on_request(self, method: str, fn: None = None) -> Callable[[_RH], _RH]: ...
    @overload
    def on_request(self, method: str, fn: _RH) -> _RH: ...

    def on_request(self, method: str, fn: _RH | None = None) -> _RH | Callable[[_RH], _RH]:
        """Register the handler of requests named `method` (usable as a decorator).

        `fn(ctx: RequestContext)` returns the result, or a coroutine giving it.
        """
        if fn is None:
            return lambda f: self.on_request(method, f)
        self._requests[method] = fn
        return fn

    @overload
    def on_notification(self, method: str, fn: None = None) -> Callable[[_NH], _NH]: ...
    @overload
    def on_notification(self, method: str, fn: _NH) -> _NH: ...

    def on_notification(self, method: str, fn: _NH | None = None) -> _NH | Callable[[_NH], _NH]:
        """Register the handler of notifications named `method` (usable as a decorator).

        `fn(message)` receives the notification `Message` (`.method`, `.params`,
        `.raw`); its return value is ignored; a returned coroutine is awaited in order.
        """
        if fn is None:
            return lambda f: self.on_notification(method, f)
        self._notifications[method] = fn
        return fn

    def on_any_request(self, fn: RequestHandler | None) -> None:
        """Fallback for requests without a handler (default: -32601, data = the method)."""
        self._request_fallback = fn

    def on_any_notification(self, fn: NotificationHandler | None) -> None:
        """Fallback for notifications without a handler (default: ignored)."""
        self._notification_fallback = fn

    # -- sending ------------------------------------------------------------------------

    def request(self, method: str, params: Json = None, *, timeout: float | None = None,
                raw: bool = False) -> PendingRequest:
        """Send a request; returns a handle to `await` for its result.

        Args:
            method: the method name.
            params: an object/array (`None`: omitted); may hold `RawJson`.
            timeout: seconds until the handle fails with `asyncio.TimeoutError` (and
                `$/cancel_request` is sent); `None`: no timeout.
            raw: resolve with the response `Message` instead of its decoded result.

        After EOF or [`close`][acp_fast.jsonrpc.Connection.close] the handle fails at once with -32603.

        Raises:
            EncodeError: `params` cannot be encoded (nothing is sent).
            SendBufferFull: more than `max_write_buffer` bytes wait for the peer.
        """
        self._outbox.check_room()
        self._next_id += 1
        rid = self._next_id
        handle = PendingRequest(self, rid, method, raw)
        if self._eof or self._closing:
            handle._fail(self.closed_error(method))
            return handle
        self._outbox.request(rid, method, params)
        self._pending[rid] = handle
        if timeout is not None:
            handle._timer = self._loop.call_later(timeout, handle._expire, timeout)
        if self._reading_paused:
            self._update_reading()
        return handle

    def notify(self, method: str, params: Json = None) -> bool:
        """Send a notification; returns False (nothing sent) once the connection closes.

        Raises:
            EncodeError: `params` cannot be encoded.
            SendBufferFull: more than `max_write_buffer` bytes wait for the peer.
        """
        return self._outbox.notify(method, params)

    @property
    def outbox(self) -> Outbox:
        """The engine's `Outbox` this connection writes through: `outbox.notify(method,
        params)` is [`notify`][acp_fast.jsonrpc.Connection.notify] without a Python call around it (the builder API's
        session-update sender uses it); everything written goes through it, in order."""
        return self._outbox

    async def drain(self) -> None:
        """Write what is queued and wait while the peer is not keeping up.

        Returns at once when the peer reads fast enough; await it in send loops.
        """
        self._outbox.flush()
        if self._outbox.paused and not self._closing:
            if self._drain_fut is None:
                self._drain_fut = self._loop.create_future()
            await asyncio.shield(self._drain_fut)

    async def settled(self) -> None:
        """Wait until the handlers of every notification received so far have finished.

        A barrier over the FIFO (see the module docstring): returns at once when no
        coroutine notification handler is running or queued. Called from inside such a
        handler it returns at once too (it cannot wait for itself).
        """
        runner = self._runner
        while runner is not None and runner is not asyncio.current_task():
            await asyncio.wait((runner,))
            runner = self._runner

    # -- state and closing --------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The engine twin this connection decodes and encodes with."""
        return self._engine  # type: ignore[no-any-return]

    @property
    def stream(self) -> Stream:
        """The byte stream the connection reads and writes."""
        return self._stream

    @property
    def eof(self) -> bool:
        """True once the peer's side of the stream ended."""
        return self._eof

    @property
    def is_closing(self) -> bool:
        """True once the connection is closing or closed ([`close`][acp_fast.jsonrpc.Connection.close], or finished after EOF)."""
        return self._closing

    @property
    def transport_error(self) -> BaseException | None:
        """The error the stream ended with (`None` for a clean EOF or while open)."""
        return self._error

    @property
    def pending_requests(self) -> int:
        """Requests we sent whose response has not arrived."""
        return len(self._pending)

    @property
    def running_handlers(self) -> int:
        """Request handler tasks running: coroutine handlers, and [`start_handler_task`][acp_fast.jsonrpc.Connection.start_handler_task]'s."""
        return len(self._tasks)

    def start_handler_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run `coro` as one of this connection's request handler tasks.

        For a handler that answers through `ctx.defer()` from a task of its own: the task
        counts in the backlog (reading pauses past `max_backlog`), [`close`][acp_fast.jsonrpc.Connection.close] cancels
        it and the end of input waits for it, as for a coroutine handler; unlike one, the
        rest of the read is dispatched before it first runs.
        """
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    @property
    def reading_paused(self) -> bool:
        """True while reading is paused: the peer does not read our answers, or too many
        handlers are queued."""
        return self._reading_paused

    @property
    def writing_paused(self) -> bool:
        """True while the stream's write side is paused (its buffer is above the high mark)."""
        return self._outbox.paused

    def close(self) -> None:
        """Close now: pending requests fail (-32603 "Connection closed"), running handlers
        are cancelled (their answers are not sent), queued writes are flushed, the stream is
        closed. Idempotent. After an EOF the connection closes by itself once its handlers
        finished."""
        if self._closing:
            return
        self._closing = True
        self._outbox.close()  # queued lines are still flushed (_finish)
        self._queue.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._runner is not None:
            self._runner.cancel()
        self._fail_pending()
        self._finish()

    async def wait_closed(self) -> None:
        """Wait until the connection and its stream are closed."""
        await asyncio.shield(self.closed)

    async def __aenter__(self) -> Connection:  # noqa: PYI034 (Python 3.10: no typing.Self)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()
        await self.wait_closed()

    # -- incoming -----------------------------------------------------------------------

    def feed_data(self, data: bytes) -> None:
        """Deliver bytes read from the stream (the stream calls this when attached)."""
        if len(data) > _SLICE:
            self._feed_sliced(data)
        else:
            self._deliver(self._decoder.feed(data))
        self._update_reading()

    def _feed_sliced(self, data: bytes) -> None:
        """Decode and handle a long read in pieces of at most `_SLICE` bytes cut at line ends,
        as one read: handlers see the same order, what they write goes out in one write.

        Why: a 256 KiB read of 200-byte updates is ~1,300 messages, each with its dicts; decoded
        at once, they all live until the last is handled, and the cyclic GC, counting them,
        runs a collection every 700 and moves them to older generations (a fifth of a
        streaming client's CPU per update here). Handled slice by slice, each slice is
        freed before the next is decoded and the count stays below the threshold. A line
        longer than a slice is not cut: the rest of the read goes to the decoder at once.
        """
        feed = self._decoder.feed
        n = len(data)
        start = 0
        self._outbox.holding = True
        try:
            while start < n:
                if n - start <= _SLICE:
                    cut = n
                else:
                    cut = data.rfind(b"\n", start, start + _SLICE) + 1
                    if cut <= start:  # inside a line longer than a slice
                        cut = n
                self._handle_frames(feed(data[start:cut] if start or cut < n else data))
                start = cut
        finally:
            self._end_frames()

    def feed_frames(self, frames: list[Frame]) -> None:
        """Dispatch frames decoded elsewhere (a router's first frames), as if just read."""
        self._deliver(frames)
        self._update_reading()

    def _deliver(self, frames: list[Any]) -> None:
        """Handle one read's frames; what they wrote goes out in one transport write."""
        self._outbox.holding = True
        try:
            self._handle_frames(frames)
        finally:
            self._end_frames()

    def _end_frames(self) -> None:
        """After one read's frames: the next read is handled inline again (a handler started
        by this one has run its first step by then), and what they wrote goes out."""
        self._task_started = False
        self._outbox.release()

    def _handle_frames(self, frames: list[Any]) -> None:
        # The hot loop: responses resolve their waiter, a notification with a handler is
        # dispatched inline (no further call levels); the rest goes through _dispatch.
        notifications = self._notifications
        for frame in frames:
            kind = frame.kind
            if kind == _RESPONSE:
                self._route(frame)
                continue
            if kind == _BATCH:  # responses are never queued (a handler may await them)
                for entry in frame.entries:
                    if entry.kind == _RESPONSE:
                        self._route(entry)
            if self._runner is not None or self._task_started:
                # a request handler started by this read must run its first step before
                # later messages are handled (a notification about it sees it started)
                self._queue.append(frame)
                if self._runner is None:
                    self._start_runner(self._drained_queue())
                continue
            if kind == _NOTIFICATION:
                method = frame.method
                fn = notifications.get(method)
                if fn is not None and method != CANCEL_METHOD:
                    try:
                        result = fn(frame)
                    except Exception:
                        logger.exception("notification handler for %r failed", method)
                        continue
                    if result is not None and _is_coroutine(result):
                        self._start_runner(result)
                    continue
            try:
                coro = self._dispatch(frame)
            except Exception:  # pragma: no cover - _dispatch answers its own errors
                logger.exception("dispatch of a %s frame failed", kind)
                continue
            if coro is not None:
                self._start_runner(coro)

    def _dispatch(self, frame: Any) -> Awaitable[object] | None:
        """Dispatch one non-response frame; returns a coroutine that must block the FIFO."""
        kind = frame.kind
        if kind == _NOTIFICATION:
            return self._notification(frame)
        if kind == _REQUEST:
            self._request(frame, None, 0)
        elif kind == _BATCH:
            return self._batch(frame)
        elif kind == _MALFORMED:
            self._malformed(frame)
        return None

    def _route(self, msg: Message) -> None:
        handle = self._pending.pop(msg.id, None)
        if handle is None:
            logger.warning("response for unknown request id %r dropped", msg.id)
            return
        handle._resolve(msg)

    def _notification(self, msg: Any) -> Awaitable[object] | None:
        method = msg.method
        if method == CANCEL_METHOD:
            self._peer_cancel(msg)
        fn = self._notifications.get(method, self._notification_fallback)
        if fn is None:
            return None
        try:
            result = fn(msg)
        except Exception:
            logger.exception("notification handler for %r failed", method)
            return None
        if result is None or not _is_coroutine(result):
            return None
        return result

    def _request(self, msg: Any, batch: _BatchState | None, slot: int) -> None:
        method = msg.method
        fn = self._requests.get(method, self._request_fallback)
        if fn is None:
            line = self._enc_error(msg.id, METHOD_NOT_FOUND, None, method)
            if batch is None:
                self._send(line)
            else:
                self._fill(batch, slot, line)
            return
        ctx = RequestContext(self, msg, batch, slot)
        try:
            result = fn(ctx)
        except Exception as exc:  # noqa: BLE001 - answered with -32603
            self._fail(ctx, exc)
            return
        if _is_coroutine(result):
            self._register(ctx)
            task = self._loop.create_task(self._run_request(ctx, result))
            self._tasks.add(task)
            task.add_done_callback(self._task_done)
            self._task_started = True
        elif ctx._deferred is None:
            self._answer(ctx, result)

    async def _run_request(self, ctx: RequestContext, coro: Awaitable[Json]) -> None:
        try:
            result = await coro
        except asyncio.CancelledError:
            if self._closing:
                raise
            self._fail(ctx, JsonRpcError(REQUEST_CANCELLED))  # internal cancellation: -32800
            if _being_cancelled():
                raise
            return
        except Exception as exc:  # noqa: BLE001 - answered with -32603
            self._fail(ctx, exc)
            return
        if ctx._deferred is None:
            self._answer(ctx, result)

    def _batch(self, batch: Any) -> Coroutine[Any, Any, None] | None:
        reply = self._BatchReply(batch)
        state = _BatchState(reply) if reply.needs_reply else None
        coro, index = self._batch_from(batch, 0, state)
        if coro is None:
            return None
        return self._batch_rest(coro, batch, index, state)

    def _batch_from(self, batch: Any, start: int, state: _BatchState | None) -> tuple[Awaitable[object] | None, int]:
        entries = batch.entries
        for i in range(start, len(entries)):
            entry = entries[i]
            kind = entry.kind
            if kind == _REQUEST:
                assert state is not None
                self._request(entry, state, state.reply.slot(i))  # type: ignore[arg-type]  # a request has a slot
            elif kind == _NOTIFICATION:
                coro = self._notification(entry)
                if coro is not None:
                    return coro, i + 1
            elif kind == _MALFORMED and entry.response_shaped:
                logger.warning("malformed response in a batch dropped: %s", entry.reason)
        if state is not None:
            state.dispatched = True
            if state.reply.complete:
                self._emit(state)
        return None, len(entries)

    async def _batch_rest(self, coro: Awaitable[object] | None, batch: Any, index: int,
                          state: _BatchState | None) -> None:
        while coro is not None:
            await self._await_notification(coro)
            coro, index = self._batch_from(batch, index, state)

    def _malformed(self, frame: Malformed) -> None:
        line = invalid_line_reply(self._error_reply, frame, skip=self._skip_invalid)
        if line is not None:
            self._send(line)

    def _peer_cancel(self, msg: Message) -> None:
        ok, rid = cancel_target(msg.params)
        if not ok:
            logger.warning("malformed %s ignored: %.200r", CANCEL_METHOD, msg.raw)
            return
        ctx = self._inflight.get(rid)
        if ctx is not None:
            ctx._cancel()

    # -- the FIFO runner ----------------------------------------------------------------

    def _start_runner(self, coro: Awaitable[object]) -> None:
        self._runner = task = self._loop.create_task(self._run_fifo(coro))
        task.add_done_callback(self._runner_done)

    async def _run_fifo(self, coro: Awaitable[object] | None) -> None:
        queue = self._queue
        try:
            while coro is not None:
                await self._await_notification(coro)
                coro = None
                while coro is None and queue:
                    self._task_started = False
                    try:
                        coro = self._dispatch(queue.popleft())
                    except Exception:  # pragma: no cover - _dispatch answers its own errors
                        logger.exception("dispatch of a queued frame failed")
                    if self._reading_paused:
                        self._update_reading()
                    if coro is None and self._task_started and queue:
                        coro = asyncio.sleep(0)  # one loop turn: the new handler starts first
                self._task_started = False
        finally:
            self._runner = None

    async def _drained_queue(self) -> None:
        """A no-op to restart the runner on (it then drains the queue)."""

    async def _await_notification(self, coro: Awaitable[object]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            if self._closing or _being_cancelled():
                raise
            logger.warning("a notification handler was cancelled")
        except Exception:
            logger.exception("notification handler failed")

    def _runner_done(self, task: asyncio.Task[None]) -> None:
        if self._queue and not self._closing and self._runner is None and not self._loop.is_closed():
            self._start_runner(self._drained_queue())  # cancelled from outside: carry on in order
            return
        self._update_reading()
        if self._eof:
            self._maybe_finish()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._reading_paused:
            self._update_reading()
        if self._eof:
            self._maybe_finish()

    # -- answering ----------------------------------------------------------------------

    def _register(self, ctx: RequestContext) -> None:
        ctx._registered = True
        self._inflight[ctx.message.id] = ctx  # the newest registration of an id wins

    def _answer(self, ctx: RequestContext, result: Json) -> None:
        try:
            line = self._enc_result(ctx.message.id, result)
        except Exception as exc:  # noqa: BLE001 - EncodeError, or a result whose methods raise
            logger.error("result of %r could not be encoded: %s", ctx.method, _describe(exc))
            line = self._enc_error(ctx.message.id, INTERNAL_ERROR, None,
                                   f"result could not be encoded: {_describe(exc)}"[:_MAX_ERROR_DATA])
        self._complete(ctx, line)

    def _fail(self, ctx: RequestContext, exc: BaseException) -> None:
        if ctx._done:
            logger.warning("request %r (%s) already answered; error %r dropped", ctx.id, ctx.method, exc)
            return
        rid = ctx.message.id
        if isinstance(exc, JsonRpcError):
            try:
                line = error_line(self._enc_error, rid, exc)
            except Exception as enc:  # noqa: BLE001 - EncodeError, or data whose methods raise
                logger.error("error of %r could not be encoded: %s", ctx.method, _describe(enc))
                line = self._enc_error(rid, INTERNAL_ERROR, None, "error could not be encoded")
        else:
            data = _describe(exc)
            try:
                logger.error("request handler for %r failed", ctx.method, exc_info=exc)
            except Exception:  # noqa: BLE001,S110 - logging a broken exception must not lose the answer
                pass
            line = self._enc_error(rid, INTERNAL_ERROR, None, data)
        self._complete(ctx, line)

    def _complete(self, ctx: RequestContext, line: bytes) -> None:
        if ctx._done:
            self._duplicate(ctx)
            return
        ctx._done = True
        if ctx._batch is None:
            self._send(line)
        else:
            self._fill(ctx._batch, ctx._slot, line)
        if ctx._registered:  # after queueing the answer: after EOF this may finish the connection
            self._unregister(ctx)

    def _duplicate(self, ctx: RequestContext) -> None:
        logger.warning("request %r (%s) answered twice; the second answer is dropped", ctx.id, ctx.method)

    def _dropped(self, ctx: RequestContext) -> None:
        if ctx._done or self._closing:
            return
        ctx._done = True
        logger.error("handler of request %r (%s) dropped its responder without answering", ctx.id, ctx.method)
        if ctx._batch is not None:
            self._fill_dropped(ctx._batch, ctx._slot)
        else:  # every request gets one answer: the same fallback as a batch slot gets
            self._send(self._enc_error(ctx.message.id, INTERNAL_ERROR, None,
                                       f"request handler dropped its responder for `{ctx.method}`"))
        if ctx._registered:
            self._unregister(ctx)

    def _unregister(self, ctx: RequestContext) -> None:
        ctx._registered = False
        rid = ctx.message.id
        if self._inflight.get(rid) is ctx:
            del self._inflight[rid]
        if self._eof:
            self._maybe_finish()

    def _fill(self, state: _BatchState, slot: int, line: bytes) -> None:
        reply = state.reply
        if reply.fill(slot, line) and state.dispatched and reply.complete:
            self._emit(state)

    def _fill_dropped(self, state: _BatchState, slot: int) -> None:
        if state.reply.fill_dropped(slot) and state.dispatched and state.reply.complete:
            self._emit(state)

    def _emit(self, state: _BatchState) -> None:
        line = state.reply.encode()
        if line is not None:  # never an empty array
            self._send(line)

    def _send_cancel(self, rid: int) -> None:
        if not self._eof:
            self.notify(CANCEL_METHOD, {"requestId": rid})

    # -- writing and flow control -------------------------------------------------------

    def _send(self, line: bytes) -> None:
        self._outbox.write(line)  # dropped once closing

    def _write_out(self, data: bytes) -> None:
        """The outbox's way out: one flush, one transport write."""
        self._stream.write(data)

    def set_writable(self, writable: bool) -> None:
        """The stream's write side paused (`False`) or resumed (`True`)."""
        self._outbox.paused = not writable
        if writable and self._drain_fut is not None:
            if not self._drain_fut.done():
                self._drain_fut.set_result(None)
            self._drain_fut = None
        self._update_reading()

    def _update_reading(self) -> None:
        if self._closing or self._eof:
            return
        backlog = len(self._queue) + len(self._tasks)
        if self._pending:  # read ahead (the response may be behind), within bounds
            limit = self._max_backlog * _READ_AHEAD
            outbox = self._outbox
            blocked = outbox.paused and (
                outbox.size + self._stream.get_write_buffer_size() > self._max_write_buffer)
        else:
            limit = self._max_backlog
            blocked = self._outbox.paused
        if self._reading_paused:
            if not blocked and backlog <= limit // 2:
                self._reading_paused = False
                self._stream.resume_reading()
        elif blocked or backlog > limit:
            self._reading_paused = True
            self._stream.pause_reading()

    # -- end of input and closing -------------------------------------------------------

    def feed_eof(self, exc: BaseException | None) -> None:
        """The stream ended (`exc`: the error it ended with, `None` for a clean EOF)."""
        if self._eof:
            return
        if not self._closing and not self._decoder.closed:
            frames = self._decoder.feed_eof()
            if frames:
                self._deliver(frames)
        self._eof = True
        self._error = exc
        if exc is not None:
            logger.info("transport lost: %r", exc)
        self._reading_paused = False  # nothing more to read (drain() waiters wake in _finish)
        self._fail_pending()
        self._maybe_finish()

    def closed_error(self, method: str) -> JsonRpcError:
        """The -32603 error a request for `method` fails with once the connection ended.

        After an incoming EOF its data is `{"reason": "incoming_transport_closed", "method"}`,
        plus `"cause"` (the text of [`transport_error`][acp_fast.jsonrpc.Connection.transport_error]) when the stream ended on an
        error, so that each failed request names why (a remote transport's lost network path,
        a child that could not be read)."""
        if self._eof:
            data: dict[str, Json] = {"reason": "incoming_transport_closed", "method": method}
            if self._error is not None:
                data["cause"] = str(self._error) or type(self._error).__name__
            return JsonRpcError(INTERNAL_ERROR, "Incoming transport closed", data)
        return JsonRpcError(INTERNAL_ERROR, "Connection closed", {"reason": "connection_closed", "method": method})

    def _fail_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for handle in pending.values():
            handle._fail(self.closed_error(handle.method))

    def _maybe_finish(self) -> None:
        if not self._finishing and not (self._tasks or self._runner or self._queue or self._inflight):
            self._finish()

    def _finish(self) -> None:
        if self._finishing:
            return
        self._finishing = True
        self._outbox.flush()
        self._closing = True
        self._outbox.close()
        if self._drain_fut is not None and not self._drain_fut.done():
            self._drain_fut.set_result(None)
        self._stream.close()
        self._closer = self._loop.create_task(self._wait_stream())

    async def _wait_stream(self) -> None:
        try:
            await self._stream.wait_closed()
        finally:
            if not self.closed.done():
                self.closed.set_result(None)

