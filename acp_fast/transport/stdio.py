"""This process's own stdin/stdout as a stream: the agent side ([`connect_stdio`][acp_fast.transport.stdio.connect_stdio]).

Strategy: each descriptor is classified once, when the stream is made, and driven by the
transport that can drive it:

* **pollable** (pipe, socket, terminal): the event loop's pipe transports, as any asyncio
  program would;
* **not pollable** (a regular file, as in `agent < requests.jsonl > replies.jsonl`,
  `/dev/null`, or another device epoll refuses with `EPERM`): reading is done by
  blocking reads in a daemon thread, one chunk at a time and paused with the stream;
  writing is synchronous (a file never applies backpressure);
* **closed** (the process started with `<&-` / `>&-`, or the descriptor is invalid):
  a closed stdin is an immediate end of input; on a closed stdout every write is discarded
  and one warning is logged (`acp_fast.transport`) at the first one. Reading goes on, so
  the agent still finishes what its input asked for and exits at EOF as usual.

NOTE: when Python starts with descriptor 0 or 1 closed it sets `sys.__stdin__` /
`sys.__stdout__` to `None`, and the event loop's own descriptors (epoll, its self-pipe
socket) may later reuse those numbers. So for `stdin=0` / `stdout=1` that state counts
as closed, whatever the number points at by the time the stream is made.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import os
import selectors
import stat
import sys
import threading
from typing import Any

from ._pipes import widen_pipe
from .stream import Stream, _ReadPipeProtocol, _WritePipeProtocol, logger

__all__ = ["connect_stdio"]


def _pollable(fd: int, events: int) -> bool:
    """Whether the event loop can watch `fd` (epoll refuses regular files and /dev/null)."""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return False  # asyncio's pipe transports take only these kinds
    selector = selectors.DefaultSelector()
    try:
        selector.register(fd, events)
    except (OSError, ValueError):
        return False
    finally:
        selector.close()
    return True


def _dup_open(fd: int, closed_at_startup: bool) -> int | None:
    """A duplicate of `fd`, or `None` when it is closed (see the module's NOTE)."""
    if closed_at_startup:
        return None
    try:
        return os.dup(fd)
    except OSError as exc:
        if exc.errno == errno.EBADF:
            return None
        raise


class _ThreadReadTransport(asyncio.ReadTransport):
    """Reads a descriptor the event loop cannot poll, with blocking reads in a daemon thread.

    `fd=None` stands for a closed stdin: end of input at once. The loop asks the thread
    for one chunk at a time and only while reading is not paused, so at most one chunk is
    read ahead of a pause (it is held here and delivered on resume). The thread owns the
    descriptor and closes it when it stops; it is a daemon, so a read that never returns
    cannot keep the process alive.
    """

    CHUNK = 256 * 1024

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int | None, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self._reading = True
        self._closing = False
        self._lost = False
        self._asked = False  # the thread was asked for a chunk it has not handed over yet
        self._eof = fd is None
        self._held: collections.deque[bytes] = collections.deque()  # b"" stands for EOF
        self._go = threading.Event()
        protocol.connection_made(self)  # the stream pauses us here until a consumer attaches
        if fd is None:
            self._held.append(b"")
            loop.call_soon(self._flush)
        else:
            threading.Thread(target=self._pump, args=(fd,), name="acp_fast stdin reader", daemon=True).start()
            self._ask()

    # -- worker thread ----------------------------------------------------------------------

    def _pump(self, fd: int) -> None:
        try:
            while True:
                self._go.wait()
                self._go.clear()
                if self._closing:
                    return
                try:
                    data = os.read(fd, self.CHUNK)
                except OSError as exc:
                    self._to_loop(self._failed, exc)
                    return
                self._to_loop(self._arrived, data)
                if not data:
                    return
        finally:
            os.close(fd)

    def _to_loop(self, callback: Any, arg: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, arg)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    # -- event loop -------------------------------------------------------------------------

    def _ask(self) -> None:
        if self._reading and not self._asked and not self._held and not self._eof and not self._closing:
            self._asked = True
            self._go.set()

    def _arrived(self, data: bytes) -> None:
        self._asked = False
        if self._closing:
            return
        if not data:
            self._eof = True
        self._held.append(data)
        self._flush()

    def _flush(self) -> None:
        while self._held and self._reading and not self._closing:
            data = self._held.popleft()
            if data:
                self._protocol.data_received(data)
            else:
                self._protocol.eof_received()
                self._closing = True
                self._lose(None)
                return
        self._ask()

    def _failed(self, exc: Exception) -> None:
        self._asked = False
        if not self._closing:
            self._closing = True
            self._lose(exc)

    def _lose(self, exc: Exception | None) -> None:
        if not self._lost:
            self._lost = True
            self._protocol.connection_lost(exc)

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if not self._reading:
            self._reading = True
            self._flush()

    def is_reading(self) -> bool:
        return self._reading and not self._closing

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._go.set()  # a waiting thread wakes up, sees the close, and closes its descriptor
            self._loop.call_soon(self._lose, None)


class _SyncWriteTransport(asyncio.WriteTransport):
    """Writes a descriptor the event loop cannot poll, synchronously.

    `fd=None` stands for a closed stdout: writes are discarded, with one warning. A write
    error (disk full, ...) is logged once and every later write is discarded too, as
    asyncio's pipe transports do after a broken pipe.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int | None, protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self._loop = loop
        self._fd = fd
        self._protocol = protocol
        self._closing = False
        self._warned = False
        protocol.connection_made(self)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        fd = self._fd
        if fd is None:
            if not self._warned and not self._closing:
                self._warned = True
                logger.warning("stdout is closed: discarding this process's output (%d bytes now, "
                               "and everything written after)", len(data))
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            logger.warning("writing to stdout failed (%s): discarding everything written after", exc)
            self._shut(exc)

    def _shut(self, exc: Exception | None) -> None:
        self._closing = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._loop.call_soon(self._protocol.connection_lost, exc)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._shut(None)

    def abort(self) -> None:
        self.close()

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return 0, 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


class _StdioStream(Stream):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._blocking: list[tuple[int, bool]] = []  # (fd, was it blocking) for loop-driven fds

    def _transport_lost(self) -> None:
        super()._transport_lost()
        if self._transports <= 0:
            # asyncio made the (shared) file descriptions non-blocking; undo it so that
            # print() and friends behave again after the connection.
            for fd, blocking in self._blocking:
                try:
                    os.set_blocking(fd, blocking)
                except OSError:  # pragma: no cover
                    pass


async def connect_stdio(stdin: int = 0, stdout: int = 1) -> Stream:
    """A stream over this process's stdin (read) and stdout (write): the agent side.

    The descriptors are duplicated, so closing the stream leaves fds 0 and 1 open. Pipes,
    sockets and terminals are driven by the event loop; a pipe gets a 1 MiB kernel buffer
    where the system allows (`PIPE_SIZE`). A descriptor the
    loop cannot poll (a regular file as in `agent < requests.jsonl`, `/dev/null`) is read
    in a daemon thread and written synchronously. A closed stdin is an immediate end of input; on a
    closed stdout the output is discarded with one logged warning (see this module's
    docstring).

    Args:
        stdin: the descriptor to read.
        stdout: the descriptor to write.
    """
    loop = asyncio.get_running_loop()
    stream = _StdioStream(loop)
    rfd = _dup_open(stdin, stdin == 0 and sys.__stdin__ is None)
    if rfd is not None and _pollable(rfd, selectors.EVENT_READ):
        widen_pipe(rfd)  # a pipe from the client: 1 MiB (see transport._pipes), on any loop
        stream._blocking.append((stdin, os.get_blocking(rfd)))
        await loop.connect_read_pipe(lambda: _ReadPipeProtocol(stream), open(rfd, "rb", buffering=0))  # noqa: ASYNC230,SIM115 (wraps an fd)
    else:
        _ThreadReadTransport(loop, rfd, _ReadPipeProtocol(stream))
    wfd = _dup_open(stdout, stdout == 1 and sys.__stdout__ is None)
    if wfd is not None and _pollable(wfd, selectors.EVENT_WRITE):
        widen_pipe(wfd)
        stream._blocking.append((stdout, os.get_blocking(wfd)))
        await loop.connect_write_pipe(lambda: _WritePipeProtocol(stream), open(wfd, "wb", buffering=0))  # noqa: ASYNC230,SIM115 (wraps an fd)
    else:
        _SyncWriteTransport(loop, wfd, _WritePipeProtocol(stream))
    return stream
