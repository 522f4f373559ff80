"""The stream every transport hands to a connection, and its `asyncio.Protocol` glue.

A [`Stream`][acp_fast.transport.stream.Stream] is the one interface the JSON-RPC connection (`acp_fast.jsonrpc`) sees:
`attach(on_data, on_eof, on_writable)`, `write`, `pause_reading` / `resume_reading`,
`close` / `wait_closed`, `writing_paused`, `get_extra_info` and the
`reads_child_stdout` fact (the connection bases its policy for non-JSON-RPC lines on it). The other modules of this package only decide which
asyncio transports feed it (pipes, sockets, a child process, threads, memory).

Reading is `Protocol`-based (never `readline()`): each `data_received` chunk goes to
the consumer as is, so the engine is fed once per read. A stream starts with reading paused
and resumes it when a consumer attaches; a chunk that arrived before is replayed.

Bounds (backpressure):

* Reads arrive in chunks of at most the event loop's read size (256 KiB for asyncio's
  selector loop). The consumer pauses reading with [`Stream.pause_reading`][acp_fast.transport.stream.Stream.pause_reading]; the
  transport then stops reading and the peer's writes block in the OS pipe/socket buffer.
* Writes go to the asyncio transport's buffer. When it holds more than `high` bytes
  (default `WRITE_HIGH_WATER`, 256 KiB) the consumer is told (`on_writable(False)`)
  and again when it drains below `low` (`WRITE_LOW_WATER`, 64 KiB). The buffer
  only grows past `high` by what the consumer writes after being told. (A pipe holds
  64 KiB, so a larger buffer buys no throughput against a slower reader, only peak RSS:
  1 MiB cost a streaming agent ~2 MiB of peak RSS for the same notifications/s.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["WRITE_HIGH_WATER", "WRITE_LOW_WATER", "OnData", "OnEof", "OnFrames", "OnWritable", "Stream", "logger"]

#: The package's logger (every transport module logs here).
logger = logging.getLogger("acp_fast.transport")

#: Write-buffer size above which the consumer is told to stop writing.
WRITE_HIGH_WATER = 256 * 1024
#: Write-buffer size below which the consumer is told it may write again.
WRITE_LOW_WATER = 64 * 1024

OnData = Callable[[bytes], None]
OnEof = Callable[["BaseException | None"], None]
OnWritable = Callable[[bool], None]
#: A consumer's entry for input decoded before it reached the stream (see
#: :meth:`Stream.accept_frames`): the frames its own decoder would have made of it.
OnFrames = Callable[[list[Any]], None]


class Stream:
    """A duplex byte stream handed to exactly one consumer (normally a `Connection`).

    Created by the helpers of this package, never directly. The consumer calls
    [`attach`][acp_fast.transport.stream.Stream.attach] once; from then on every chunk read goes to `on_data`, the end of input
    goes to `on_eof` exactly once (`None` for a clean EOF, else the transport's error),
    and write-buffer pressure goes to `on_writable`.

    Attributes:
        reads_child_stdout: True when this stream reads a child process's stdout
            ([`spawn`][acp_fast.transport.spawn]), where an agent may print banners that are not JSON-RPC.
    """

    reads_child_stdout = False

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._rt: Any = None  # read transport
        self._wt: Any = None  # write transport (the same object for sockets and memory)
        self._on_data: OnData = self._early_data
        self._ready = False  # True once a consumer gets the data directly
        self._on_eof: OnEof | None = None
        self._on_writable: OnWritable | None = None
        self._early: list[bytes] = []
        self._early_eof: list[BaseException | None] = []
        self._eof_reported = False
        self._paused = True  # until attach()
        self._closing = False
        self._write_paused = False
        self._transports = 0
        self._lost: asyncio.Future[None] = loop.create_future()
        self._extra: dict[str, Any] = {}
        self._frames_to: tuple[OnFrames, object] | None = None

    # -- consumer side ------------------------------------------------------------------

    def attach(self, on_data: OnData, on_eof: OnEof, on_writable: OnWritable) -> None:
        """Start delivering to a consumer; resumes reading.

        Raises:
            RuntimeError: when a consumer is already attached.
        """
        if self._on_eof is not None:
            raise RuntimeError("a consumer is already attached to this stream")
        self._on_eof = on_eof
        self._on_writable = on_writable
        if self._early or self._early_eof:
            self._loop.call_soon(self._replay, on_data)
        else:
            self._on_data = on_data
            self._ready = True
            self.resume_reading()
        if self._write_paused:
            self._loop.call_soon(on_writable, False)

    def accept_frames(self, on_frames: OnFrames, decoder: object) -> None:
        """Offer the attached consumer's entry for input decoded elsewhere.

        `on_frames` takes a list of frames exactly as `decoder` (the consumer's own, which
        reads every byte it is given) would have made them of the input. Only the in-process
        pipe ([`memory_pair`][acp_fast.transport.memory.memory_pair]) uses it: bytes its other end
        writes with [`write_frames`][acp_fast.transport.stream.Stream.write_frames] for this `decoder` arrive as their frames, in
        order with the bytes around them; everything else still comes through `on_data`.
        """
        self._frames_to = (on_frames, decoder)

    @property
    def frame_decoder(self) -> object | None:
        """The decoder named by [`accept_frames`][acp_fast.transport.stream.Stream.accept_frames], `None` when the consumer takes bytes only."""
        to = self._frames_to
        return None if to is None else to[1]

    @property
    def peer_frame_decoder(self) -> object | None:
        """The [`frame_decoder`][acp_fast.transport.stream.Stream.frame_decoder] of the consumer at the other end of an in-process pipe
        (`None` for any other transport, or while that consumer takes bytes only): frames
        of an equal decoder may be written to it with [`write_frames`][acp_fast.transport.stream.Stream.write_frames]."""
        peer = getattr(self._wt, "peer_frame_decoder", None)
        return None if peer is None else peer()

    def write(self, data: bytes) -> None:
        """Queue bytes on the transport (dropped once the stream is closing or lost)."""
        wt = self._wt
        if wt is not None and not self._closing and not wt.is_closing():
            wt.write(data)

    def write_frames(self, data: bytes, frames: list[Any], decoder: object) -> None:
        """Queue `data`, whole lines that `decoder` makes `frames` of, like [`write`][acp_fast.transport.stream.Stream.write];
        a peer consumer that reads with that very `decoder` ([`peer_frame_decoder`][acp_fast.transport.stream.Stream.peer_frame_decoder])
        gets the frames instead of decoding the bytes again, any other reader the bytes.

        Every earlier write must have ended a line (the peer's decoder holds no partial line).
        """
        wt = self._wt
        if wt is not None and not self._closing and not wt.is_closing():
            put = getattr(wt, "write_frames", None)
            if put is None:
                wt.write(data)
            else:
                put(data, frames, decoder)

    def pause_reading(self) -> None:
        """Stop reading (idempotent); the peer's writes then block in the OS buffer."""
        if not self._paused:
            self._paused = True
            rt = self._rt
            if rt is not None and not rt.is_closing():
                rt.pause_reading()

    def resume_reading(self) -> None:
        """Resume reading (idempotent)."""
        if self._paused and self._ready:
            self._paused = False
            rt = self._rt
            if rt is not None and not rt.is_closing():
                rt.resume_reading()

    @property
    def reading_paused(self) -> bool:
        """True between [`pause_reading`][acp_fast.transport.stream.Stream.pause_reading] and [`resume_reading`][acp_fast.transport.stream.Stream.resume_reading]."""
        return self._paused

    @property
    def writing_paused(self) -> bool:
        """True while the write buffer is above its high-water mark."""
        return self._write_paused

    @property
    def closing(self) -> bool:
        """True once the stream is closing or closed; writes are then dropped."""
        return self._closing

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the stream was made in (its consumer's callbacks run there)."""
        return self._loop

    def get_write_buffer_size(self) -> int:
        """Bytes written but not yet handed to the OS (0 before the stream is connected)."""
        wt = self._wt
        return 0 if wt is None else int(wt.get_write_buffer_size())

    def get_extra_info(self, name: str, default: object = None) -> object:
        """Transport details (`"peername"`, `"pid"`, ...), as in asyncio."""
        if name in self._extra:
            return self._extra[name]
        for t in (self._wt, self._rt):
            if t is not None:
                value = t.get_extra_info(name)
                if value is not None:
                    return value
        return default

    def set_extra_info(self, name: str, value: object) -> None:
        """Make [`get_extra_info`][acp_fast.transport.stream.Stream.get_extra_info] answer `name` with `value` (a transport built on
        top of this stream names itself: `"transport"`, `"url"`, ...)."""
        self._extra[name] = value

    def protocol(self) -> asyncio.Protocol:
        """An asyncio protocol feeding this stream from one bidirectional transport.

        For a transport written outside this package (a WebSocket link, say): the transport
        calls the protocol as asyncio would (`connection_made`, `data_received`,
        `eof_received`, `connection_lost`, `pause_writing` / `resume_writing`) and
        the stream writes to, pauses and closes that transport.
        """
        return _DuplexProtocol(self)

    def close(self) -> None:
        """Close the stream: queued writes are flushed first, then the peer sees EOF."""
        if self._closing:
            return
        self._closing = True
        seen = set()
        for t in (self._wt, self._rt):
            if t is not None and id(t) not in seen:
                seen.add(id(t))
                t.close()
        if self._transports == 0 and not self._lost.done():
            self._lost.set_result(None)

    async def wait_closed(self) -> None:
        """Wait until every underlying transport (and process) is gone."""
        await asyncio.shield(self._lost)

    # -- protocol-glue side -------------------------------------------------------------

    def _early_data(self, data: bytes) -> None:
        self._early.append(bytes(data))
        rt = self._rt
        if rt is not None and not rt.is_closing():
            rt.pause_reading()

    def _frames_received(self, data: bytes, frames: list[Any], decoder: object) -> None:
        to = self._frames_to
        if to is not None and to[1] is decoder and self._ready:
            to[0](frames)
        else:
            self._on_data(data)

    def _replay(self, on_data: OnData) -> None:
        early, self._early = self._early, []
        self._on_data = on_data
        self._ready = True
        if early:
            on_data(b"".join(early))
        if self._early_eof:
            self._eof(self._early_eof[0])
        elif not self._closing:
            self.resume_reading()

    def _connected(self, transport: Any, *, read: bool, write: bool) -> None:
        self._transports += 1
        if read:
            self._rt = transport
            if self._paused:
                transport.pause_reading()
        if write:
            self._wt = transport
            if not transport.is_closing():  # closed before connection_made ran (uvloop raises)
                transport.set_write_buffer_limits(WRITE_HIGH_WATER, WRITE_LOW_WATER)

    def _eof(self, exc: BaseException | None) -> None:
        if self._eof_reported:
            return
        if not self._ready:  # not attached yet (or its replay is still pending)
            if not self._early_eof:
                self._early_eof.append(exc)
            return
        self._eof_reported = True
        if self._on_eof is not None:
            self._on_eof(exc)

    def _pause_writing(self) -> None:
        self._write_paused = True
        if self._on_writable is not None:
            self._on_writable(False)

    def _resume_writing(self) -> None:
        self._write_paused = False
        if self._on_writable is not None:
            self._on_writable(True)

    def _transport_lost(self) -> None:
        self._transports -= 1
        if self._write_paused:
            self._resume_writing()
        if self._transports <= 0:
            self._closing = True
            if not self._lost.done():
                self._lost.set_result(None)


class _DuplexProtocol(asyncio.Protocol):
    """One bidirectional transport (socket, memory): reads and writes."""

    __slots__ = ("_s",)

    def __init__(self, stream: Stream) -> None:
        self._s = stream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._s._connected(transport, read=True, write=True)

    @property
    def stream(self) -> Stream:
        """The stream this protocol feeds."""
        return self._s

    def data_received(self, data: bytes) -> None:
        self._s._on_data(data)

    def frames_received(self, data: bytes, frames: list[Any], decoder: object) -> None:
        """`data` arrived with the frames `decoder` makes of it (an in-process pipe)."""
        self._s._frames_received(data, frames, decoder)

    def eof_received(self) -> bool:
        self._s._eof(None)
        return True  # keep the write side open: replies to what was read still go out

    def connection_lost(self, exc: BaseException | None) -> None:
        self._s._eof(exc)
        self._s._transport_lost()

    def pause_writing(self) -> None:
        self._s._pause_writing()

    def resume_writing(self) -> None:
        self._s._resume_writing()


class _ReadPipeProtocol(asyncio.Protocol):
    __slots__ = ("_s",)

    def __init__(self, stream: Stream) -> None:
        self._s = stream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._s._connected(transport, read=True, write=False)

    def data_received(self, data: bytes) -> None:
        self._s._on_data(data)

    def eof_received(self) -> None:
        self._s._eof(None)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._s._eof(exc)
        self._s._transport_lost()


class _WritePipeProtocol(asyncio.BaseProtocol):
    __slots__ = ("_s",)

    def __init__(self, stream: Stream) -> None:
        self._s = stream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._s._connected(transport, read=False, write=True)

    def connection_lost(self, exc: BaseException | None) -> None:
        if exc is not None:
            logger.debug("write pipe lost: %r", exc)
        self._s._transport_lost()

    def pause_writing(self) -> None:
        self._s._pause_writing()

    def resume_writing(self) -> None:
        self._s._resume_writing()
