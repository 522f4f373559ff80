"""In-memory stream pairs: the real `asyncio.Protocol` path without the OS.

Two connections in one process talk through a pair: the conductor and its in-process
components, the remote server and an in-process agent, the remote client's bridge, and the
tests. Bytes written with their frames (`write_frames`) reach the other end already decoded.
"""

from __future__ import annotations

import asyncio
from typing import Any, Union

from .stream import Stream, _DuplexProtocol

#: bytes written, or bytes written with the frames a decoder makes of them (``write_frames``)
_Item = Union[bytes, tuple[bytes, list[Any], object]]

__all__ = ["memory_pair"]


class _MemoryTransport(asyncio.Transport):
    """One end of an in-memory pipe pair, driving a protocol like a socket transport does.

    Bytes written on one end are delivered to the other end's `data_received` on a later
    loop turn, everything pending joined into one chunk (one "read"). While the reader is
    paused they wait in its inbox; the writer gets `pause_writing` once the inbox holds
    more than its high-water mark, and `resume_writing` when it drains below low.

    Bytes written with their frames (`write_frames`) count and wait like any bytes; they
    reach the protocol as `frames_received`, in order with the bytes around them.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: _DuplexProtocol) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self._peer: _MemoryTransport | None = None
        self._inbox: list[_Item] = []
        self._inbox_framed = False  # some inbox item carries frames
        self._inbox_size = 0
        self._inbox_eof = False
        self._reading = True
        self._scheduled = False
        self._closing = False
        self._lost = False
        self._writer_paused = False
        self._high = 64 * 1024
        self._low = 16 * 1024

    # writer side
    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._put(bytes(data), len(data), False)

    def write_frames(self, data: bytes, frames: list[Any], decoder: object) -> None:
        """Write `data` with the frames `decoder` makes of it (see `Stream.write_frames`)."""
        self._put((data, frames, decoder), len(data), True)

    def peer_frame_decoder(self) -> object | None:
        """The decoder the other end's consumer takes frames of (`Stream.accept_frames`)."""
        peer = self._peer
        return None if peer is None else peer._protocol.stream.frame_decoder

    def _put(self, item: _Item, size: int, framed: bool) -> None:
        peer = self._peer
        if self._closing or peer is None or peer._lost:
            return
        peer._inbox.append(item)
        peer._inbox_size += size
        if framed:
            peer._inbox_framed = True
        peer._schedule()
        if not self._writer_paused and peer._inbox_size > self._high:
            self._writer_paused = True
            self._protocol.pause_writing()

    def _maybe_resume_writer(self) -> None:
        if self._writer_paused and (self._peer is None or self._peer._inbox_size <= self._low):
            self._writer_paused = False
            self._protocol.resume_writing()

    def get_write_buffer_size(self) -> int:
        return 0 if self._peer is None else self._peer._inbox_size

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is not None:
            self._high = high
        self._low = low if low is not None else self._high // 4

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        peer = self._peer
        if peer is not None and not peer._inbox_eof:
            peer._inbox_eof = True
            peer._schedule()

    # reader side
    def _schedule(self) -> None:
        if self._reading and not self._scheduled and not self._lost:
            self._scheduled = True
            self._loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        self._scheduled = False
        if not self._reading or self._lost:
            return
        if self._inbox:
            inbox = self._inbox
            self._inbox = []
            self._inbox_size = 0
            if self._inbox_framed:
                self._inbox_framed = False
                self._deliver_items(inbox)
            else:
                self._protocol.data_received(b"".join(inbox) if len(inbox) > 1 else inbox[0])  # type: ignore[arg-type]
            if self._peer is not None:
                self._peer._maybe_resume_writer()
        if self._inbox_eof and not self._inbox and self._reading and not self._lost:
            self._inbox_eof = False
            if not self._protocol.eof_received():
                self.close()

    def _deliver_items(self, items: list[_Item]) -> None:
        """One read of an inbox holding frames, in the order written: each run of bytes
        joined, as one read would be, and each run of items with frames of one decoder as
        one list of frames (its bytes joined, for a consumer that takes bytes only)."""
        protocol = self._protocol
        if len(items) == 1:  # one write (a round trip's request): no runs to join
            protocol.frames_received(*items[0])  # the framed item (see _inbox_framed)
            return
        run: list[bytes] = []
        frames: list[Any] = []
        decoder: object = None
        for item in items:
            if isinstance(item, bytes):
                if frames:
                    protocol.frames_received(b"".join(run), frames, decoder)
                    run, frames = [], []
                run.append(item)
                continue
            data, more, of = item
            if frames and of is not decoder:
                protocol.frames_received(b"".join(run), frames, decoder)
                run, frames = [], []
            elif run and not frames:
                protocol.data_received(b"".join(run))
                run = []
            run.append(data)
            frames += more
            decoder = of
        if frames:
            protocol.frames_received(b"".join(run), frames, decoder)
        elif run:
            protocol.data_received(b"".join(run))

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if not self._reading:
            self._reading = True
            if self._inbox or self._inbox_eof:
                self._schedule()

    def is_reading(self) -> bool:
        return self._reading

    # both
    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.write_eof()
        self._loop.call_soon(self._connection_lost)

    def abort(self) -> None:
        self.close()

    def _connection_lost(self) -> None:
        self._lost = True
        self._inbox.clear()
        self._inbox_framed = False
        self._inbox_size = 0
        if self._peer is not None:
            self._peer._maybe_resume_writer()
        self._protocol.connection_lost(None)


def memory_pair(first: type[Stream] = Stream) -> tuple[Stream, Stream]:
    """Two connected in-memory streams (call inside a running loop); for tests.

    They behave like a socket pair: asynchronous delivery, half-close on [`Stream.close`][acp_fast.transport.Stream.close],
    and backpressure (a reader that pauses makes the other side's writer pause once 64 KiB
    are waiting; tune with `stream._wt.set_write_buffer_limits`).

    Args:
        first: the class of the first stream, a [`Stream`][acp_fast.transport.memory.Stream] subclass built with the loop
            alone (a transport that hands the first end to its caller overrides `close`).
    """
    loop = asyncio.get_running_loop()
    a, b = first(loop), Stream(loop)
    pa, pb = _DuplexProtocol(a), _DuplexProtocol(b)
    ta, tb = _MemoryTransport(loop, pa), _MemoryTransport(loop, pb)
    ta._peer, tb._peer = tb, ta
    pa.connection_made(ta)
    pb.connection_made(tb)
    for t in (ta, tb):  # keep the asyncio-like default limits in memory (smaller than pipes)
        t.set_write_buffer_limits(64 * 1024, 16 * 1024)
    return a, b
