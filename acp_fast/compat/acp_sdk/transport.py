"""[`StreamTransport`][acp_fast.compat.acp_sdk.transport.StreamTransport]: the SDK's message-level `Transport` over an acp_fast stream.

The official Python SDK (`acp`) moves JSON-RPC messages as `dict` values through
`acp._transport.Transport` (`async send(dict)`, `async receive() -> dict | None`,
`async close()`), a runtime-checkable protocol that `Connection`,
`AgentSideConnection`, `ClientSideConnection`, `run_agent` and `connect_to_agent`
accept. This class implements it on an acp_fast [`Stream`][acp_fast.transport.Stream] and
the acp_fast engine, and nothing of the SDK is imported here (the protocol is structural).

What happens on the wire, compared with the SDK's own `NdjsonTransport`:

* **Reading** goes through the engine's `Decoder` (`feed` once per chunk read): lines
  are bounded by `max_line_size` (default: the engine's, 64 MiB). A longer line is
  discarded as it arrives (never buffered whole, never a `LimitOverrunError`) and
  answered with -32600 `"line too long"`; the connection lives on.
* **Bad lines are answered on the wire** with the engine's error replies (-32700 for
  invalid JSON, -32600 for an invalid envelope, `"id": null`) and never reach the SDK,
  which would only log them. On a child process's stdout (`spawn_agent_process`) they
  are logged and skipped instead, as acp_fast's own connection does (an agent's banner
  is not a peer to answer); `on_invalid=` chooses.
* **Batches** (a JSON array line, which the SDK drops) are unpacked: each entry goes to
  the SDK as an ordinary message, in order, and the SDK's responses to the batch's
  requests are collected by id and written back as **one** reply array, in the batch's
  order, once every request of it is answered (malformed entries are answered in their
  slots; a batch of notifications and responses gets no reply). Response ids are matched
  by type and value (`1` and `"1"` differ); should the peer have the same id in
  flight both alone and in a batch, the first response the SDK sends for it fills the
  batch's slot.
* **Writing** encodes with the engine's encoders (`"params": null` is omitted, as
  JSON-RPC wants) and coalesces: the lines sent in one event-loop turn are written with
  one `write` (at most `flush_size` bytes are held before a write). `send` returns
  once the line is queued; it waits (backpressure) while the stream's write buffer is
  above its high-water mark, so a fast sender cannot grow memory without bound.
* **Receiving** is bounded too: past `max_pending` decoded messages the SDK has not
  taken yet, reading pauses until it has taken them down to a quarter.
* `receive_timeout` (seconds) makes `receive` raise `asyncio.TimeoutError` as the
  SDK's `NdjsonTransport` does (the SDK's `Connection` ignores its own
  `receive_timeout=` when given a `Transport`, so pass it here).
* End of input (or a read error, logged) is `receive() -> None`; `close` writes what
  is queued, closes the stream and waits for it (for a child process: stdin closed, the
  child gets `grace` seconds, then its process group is killed).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Union, cast

from ... import engine as _default_engine
from ...engine import Engine
from ..._kinds import BATCH, MALFORMED, NOTIFICATION, REQUEST, RESPONSE
from ...jsonrpc import invalid_line_reply
from ...transport import Stream

if TYPE_CHECKING:
    from ..._replies import BatchReply
    from ...engine import Malformed, Message
    from ...jsontypes import JsonObject

__all__ = ["DEFAULT_FLUSH_SIZE", "DEFAULT_MAX_PENDING", "StreamTransport", "TransportOptions", "logger"]

#: The drop-in's logger.
logger = logging.getLogger("acp_fast.compat.acp_sdk")

#: Bytes of queued lines above which ``send`` writes at once instead of at the end of the turn.
DEFAULT_FLUSH_SIZE = 64 * 1024
#: Decoded messages waiting for the SDK above which reading pauses.
DEFAULT_MAX_PENDING = 1024

StreamSource = Union[Stream, Callable[[], Awaitable[Stream]]]  # noqa: UP007 - a runtime alias on 3.10

_REQUEST_KEYS = frozenset(("jsonrpc", "id", "method", "params"))
_RESULT_KEYS = frozenset(("jsonrpc", "id", "result"))
_ERROR_KEYS = frozenset(("jsonrpc", "id", "error"))
_ERROR_OBJ_KEYS = frozenset(("code", "message", "data"))


_IdKey = tuple[type, object]


def _id_key(ident: object) -> _IdKey:
    return (type(ident), ident)


class TransportOptions(TypedDict, total=False):
    """The keyword options of [`StreamTransport`][acp_fast.compat.acp_sdk.transport.StreamTransport] (`stdio_transport(**options)`, ...)."""

    engine: Engine | None
    max_line_size: int | None
    max_batch_size: int | None
    on_invalid: Literal["reply", "skip"] | None
    receive_timeout: float | None
    flush_size: int
    max_pending: int


class _Slot:
    """Where the SDK's response to one request of an incoming batch goes."""

    __slots__ = ("reply", "slot")

    def __init__(self, reply: BatchReply, slot: int) -> None:
        self.reply = reply
        self.slot = slot


class StreamTransport:
    """The SDK's `Transport` (send/receive/close of `dict` messages) on an acp_fast stream.

    Args:
        stream: an acp_fast [`Stream`][acp_fast.transport.Stream], or a zero-argument
            coroutine function returning one (`lambda: connect_stdio()`): then the
            stream is made on first use, inside the running loop, so the transport itself
            can be created anywhere (`acp.run_agent(agent, stdio_transport())`).
        engine: the engine twin module (default: the selected `acp_fast.engine`).
        max_line_size: the longest line accepted (default: the engine's, 64 MiB).
        max_batch_size: the most entries an incoming batch may have (engine default 1024).
        on_invalid: `"reply"` answers a line that is not JSON-RPC with its error,
            `"skip"` logs and skips it; default: skip on a child's stdout, else reply.
        receive_timeout: seconds `receive` waits before raising `asyncio.TimeoutError`.
        flush_size: bytes queued in one turn above which they are written at once.
        max_pending: decoded messages not yet received above which reading pauses.
    """

    def __init__(
        self,
        stream: StreamSource,
        *,
        engine: Engine | None = None,
        max_line_size: int | None = None,
        max_batch_size: int | None = None,
        on_invalid: Literal["reply", "skip"] | None = None,
        receive_timeout: float | None = None,
        flush_size: int = DEFAULT_FLUSH_SIZE,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        if on_invalid not in (None, "reply", "skip"):
            raise ValueError(f"on_invalid must be 'reply' or 'skip', not {on_invalid!r}")
        eng: Any = engine if engine is not None else _default_engine
        if (eng.REQUEST, eng.NOTIFICATION, eng.RESPONSE, eng.BATCH, eng.MALFORMED) != (
                REQUEST, NOTIFICATION, RESPONSE, BATCH, MALFORMED):
            raise ValueError(f"engine {eng.__name__} uses unexpected frame kinds")
        kwargs: dict[str, Any] = {}
        if max_line_size is not None:
            kwargs["max_line_size"] = max_line_size
        if max_batch_size is not None:
            kwargs["max_batch_size"] = max_batch_size
        self._decoder = eng.Decoder(**kwargs)
        self._enc_request = eng.encode_request
        self._enc_notification = eng.encode_notification
        self._enc_result = eng.encode_result
        self._enc_error = eng.encode_error
        self._enc_value = eng.encode_value
        self._error_reply = eng.error_reply
        self._BatchReply = eng.BatchReply
        self._source: StreamSource | None = stream
        self._stream: Stream | None = stream if isinstance(stream, Stream) else None
        self._opening: asyncio.Future[Stream] | None = None
        self._on_invalid = on_invalid
        self._skip_invalid = False
        self._receive_timeout = receive_timeout
        self._flush_size = int(flush_size)
        self._max_pending = max(1, int(max_pending))
        self._inbox: collections.deque[JsonObject] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._closed = False
        self._paused_by_us = False
        self._out: list[bytes] = []
        self._out_size = 0
        self._flush_handle: asyncio.Handle | None = None
        self._drain: asyncio.Future[None] | None = None
        self._batch_slots: dict[_IdKey, collections.deque[_Slot]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        if self._stream is not None:
            self._attach(self._stream)

    # -- the SDK's Transport protocol ---------------------------------------------------

    async def send(self, message: JsonObject) -> None:
        """Queue one message (encoded now); waits while the peer is not reading."""
        if self._closed:
            raise ConnectionError("Transport closed")
        stream = self._stream if self._stream is not None else await self.open()
        if stream.closing:
            raise ConnectionError("Transport closed")
        line = self._encode(message)
        if self._batch_slots and "method" not in message:
            reply = self._batch_response(message, line)
            if reply is None:  # held for its batch's reply array
                return
            line = reply
        self._queue(line)
        if stream.writing_paused:
            await self._wait_writable(stream)

    async def receive(self) -> JsonObject | None:
        """The next message from the peer, in order; `None` at end of input."""
        if self._stream is None and not self._closed:
            await self.open()
        while True:
            inbox = self._inbox
            if inbox:
                message = inbox.popleft()
                if self._paused_by_us and len(inbox) <= self._max_pending // 4:
                    self._paused_by_us = False
                    if self._stream is not None:
                        self._stream.resume_reading()
                return message
            if self._eof or self._closed:
                return None
            waiter = self._waiter = self._loop.create_future()  # type: ignore[union-attr]
            try:
                if self._receive_timeout is None:
                    await waiter
                else:
                    await asyncio.wait_for(waiter, self._receive_timeout)
            finally:
                self._waiter = None

    async def close(self) -> None:
        """Write what is queued, close the stream and wait until it is gone."""
        if self._closed:
            return
        self._closed = True
        self._wake()
        self._release_drain()
        stream = self._stream
        if stream is None:
            opening = self._opening
            if opening is None or not opening.done() or opening.exception() is not None:
                return
            stream = opening.result()
        self._flush()
        stream.close()
        await stream.wait_closed()

    # -- extras -------------------------------------------------------------------------

    @property
    def stream(self) -> Stream | None:
        """The acp_fast stream (`None` until a lazily opened one is open)."""
        return self._stream

    def get_extra_info(self, name: str, default: object = None) -> object:
        """The stream's transport details (`"pid"`, `"peername"`, ...)."""
        return default if self._stream is None else self._stream.get_extra_info(name, default)

    # -- opening ------------------------------------------------------------------------

    @property
    def unopened(self) -> bool:
        """Made with an opener that has not run (nothing sent, received or closed yet)."""
        return self._stream is None and self._opening is None and not self._closed and self._source is not None

    def hand_over(self) -> Callable[[], Awaitable[Stream]] | None:
        """The opener of an `unopened` transport, for a connection that reads the
        stream itself (the connection drop-in); this transport is closed for its own use.
        `None` when it is not unopened: it keeps its stream (use it as an SDK Transport)."""
        if not self.unopened:
            return None
        opener = cast("Callable[[], Awaitable[Stream]]", self._source)
        self._source = None
        self._closed = True
        return opener

    async def open(self) -> Stream:
        """The acp_fast stream, opened now if it is not yet (a lazily opened source is
        awaited once, however many callers wait; this transport then reads it).

        Raises:
            ConnectionError: the transport is closed (or was closed while opening).
        """
        if self._stream is not None:
            return self._stream
        if self._closed:
            raise ConnectionError("Transport closed")
        opening = self._opening
        if opening is None:
            loop = asyncio.get_running_loop()
            opening = self._opening = loop.create_future()
            factory: Any = self._source
            try:
                stream: Stream = await factory()
            except BaseException as exc:
                opening.set_exception(exc)
                opening.exception()  # retrieved: the raise below reports it
                self._opening = None
                raise
            if self._closed:  # closed while opening
                stream.close()
                opening.set_exception(ConnectionError("Transport closed"))
                opening.exception()
                raise ConnectionError("Transport closed")
            self._attach(stream)
            opening.set_result(stream)
            return stream
        return await asyncio.shield(opening)

    def _attach(self, stream: Stream) -> None:
        self._loop = stream.loop
        on_invalid = self._on_invalid
        if on_invalid is None:
            on_invalid = "skip" if getattr(stream, "reads_child_stdout", False) else "reply"
        self._skip_invalid = on_invalid == "skip"
        self._stream = stream
        self._source = None
        stream.attach(self._on_data, self._on_eof, self._on_writable)

    # -- reading ------------------------------------------------------------------------

    def _on_data(self, data: bytes) -> None:
        for frame in self._decoder.feed(data):
            self._frame(frame)
        self._delivered()

    def _on_eof(self, exc: BaseException | None) -> None:
        if exc is not None:
            logger.info("end of input after a read error: %r", exc)
        if not self._decoder.closed:
            for frame in self._decoder.feed_eof():
                self._frame(frame)
        self._eof = True
        self._wake()

    def _delivered(self) -> None:
        if self._inbox:
            self._wake()
            if len(self._inbox) > self._max_pending and not self._paused_by_us and self._stream is not None:
                self._paused_by_us = True
                self._stream.pause_reading()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _frame(self, frame: Any) -> None:
        kind = frame.kind
        if kind == NOTIFICATION:
            params = frame.params
            message: JsonObject = {"jsonrpc": "2.0", "method": frame.method}
            if params is not None:
                message["params"] = params
            self._inbox.append(message)
        elif kind == REQUEST or kind == RESPONSE:
            self._inbox.append(self._message(frame))
        elif kind == BATCH:
            self._batch(frame)
        else:
            self._malformed(frame)

    @staticmethod
    def _message(frame: Message) -> JsonObject:
        if frame.kind == RESPONSE:
            error = frame.error
            if error is not None:
                return {"jsonrpc": "2.0", "id": frame.id, "error": error}
            return {"jsonrpc": "2.0", "id": frame.id, "result": frame.result}
        message: JsonObject = {"jsonrpc": "2.0", "id": frame.id, "method": frame.method}
        params = frame.params
        if params is not None:
            message["params"] = params
        return message

    def _malformed(self, frame: Malformed) -> None:
        line = invalid_line_reply(self._error_reply, frame, skip=self._skip_invalid)
        if line is not None:
            self._queue(line)

    def _batch(self, batch: Any) -> None:
        reply = self._BatchReply(batch)
        for i, entry in enumerate(batch.entries):
            kind = entry.kind
            if kind == REQUEST:
                slot = reply.slot(i)
                self._batch_slots.setdefault(_id_key(entry.id), collections.deque()).append(_Slot(reply, slot))
                self._inbox.append(self._message(entry))
            elif kind == NOTIFICATION or kind == RESPONSE:
                self._inbox.append(self._message(entry) if kind == RESPONSE else self._notification(entry))
            elif entry.response_shaped:
                logger.warning("malformed response in a batch dropped: %s", entry.reason)
        if reply.needs_reply and reply.complete:  # only malformed entries had slots
            line = reply.encode()
            if line is not None:
                self._queue(line)

    @staticmethod
    def _notification(frame: Message) -> JsonObject:
        message: JsonObject = {"jsonrpc": "2.0", "method": frame.method}
        params = frame.params
        if params is not None:
            message["params"] = params
        return message

    def _batch_response(self, message: JsonObject, line: bytes) -> bytes | None:
        """A response the SDK sends: into its batch's slot (`None`: held), else as is."""
        key = _id_key(message.get("id"))
        slots = self._batch_slots.get(key)
        if not slots:
            return line
        target = slots.popleft()
        if not slots:
            del self._batch_slots[key]
        target.reply.fill(target.slot, line)
        if not target.reply.complete:
            return None
        return target.reply.encode()

    # -- writing ------------------------------------------------------------------------

    def _encode(self, m: JsonObject) -> bytes:
        method = m.get("method")
        keys = m.keys()
        if method is not None:
            if keys <= _REQUEST_KEYS:
                if "id" in m:
                    return self._enc_request(m["id"], method, m.get("params"))  # type: ignore[no-any-return]
                return self._enc_notification(method, m.get("params"))  # type: ignore[no-any-return]
        elif "result" in m:
            if keys <= _RESULT_KEYS and "id" in m:
                return self._enc_result(m["id"], m["result"])  # type: ignore[no-any-return]
        elif "error" in m:
            error = m["error"]
            if (keys <= _ERROR_KEYS and "id" in m and type(error) is dict and error.keys() <= _ERROR_OBJ_KEYS
                    and type(error.get("code")) is int and type(error.get("message")) is str):
                if "data" in error:
                    return self._enc_error(m["id"], error["code"], error["message"], error["data"])  # type: ignore[no-any-return]
                return self._enc_error(m["id"], error["code"], error["message"])  # type: ignore[no-any-return]
        return self._enc_value(m) + b"\n"  # type: ignore[no-any-return]  # any other shape, verbatim

    def _queue(self, line: bytes) -> None:
        self._out.append(line)
        self._out_size += len(line)
        if self._out_size >= self._flush_size:
            self._flush()
        elif self._flush_handle is None and self._loop is not None:
            self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        handle = self._flush_handle
        if handle is not None:
            handle.cancel()
            self._flush_handle = None
        out = self._out
        if not out or self._stream is None:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        self._out = []
        self._out_size = 0
        self._stream.write(data)

    def _on_writable(self, writable: bool) -> None:
        if writable:
            self._release_drain()

    async def _wait_writable(self, stream: Stream) -> None:
        while stream.writing_paused and not stream.closing and not self._closed:
            drain = self._drain
            if drain is None:
                drain = self._drain = self._loop.create_future()  # type: ignore[union-attr]
            await drain

    def _release_drain(self) -> None:
        drain = self._drain
        if drain is not None:
            self._drain = None
            if not drain.done():
                drain.set_result(None)
