"""This process's own stdin/stdout as a stream: the agent side (:func:`connect_stdio`)."""

from __future__ import annotations

import asyncio
import os
import stat

from .stream import Stream, _ReadPipeProtocol, _WritePipeProtocol

__all__ = ["connect_stdio"]


class _FileReadTransport(asyncio.ReadTransport):
    """Reads a regular file (``agent < requests.jsonl``) in a worker thread, in chunks."""

    CHUNK = 256 * 1024

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._loop = loop
        self._fd = fd
        self._protocol = protocol
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._closing = False
        protocol.connection_made(self)
        self._task = loop.create_task(self._pump())

    async def _pump(self) -> None:
        exc: Exception | None = None
        try:
            while not self._closing:
                await self._resumed.wait()
                data = await self._loop.run_in_executor(None, os.read, self._fd, self.CHUNK)
                if not data:
                    self._protocol.eof_received()
                    break
                self._protocol.data_received(data)
        except asyncio.CancelledError:
            pass
        except OSError as e:  # pragma: no cover - I/O error on a regular file
            exc = e
        os.close(self._fd)
        self._closing = True
        self._protocol.connection_lost(exc)

    def pause_reading(self) -> None:
        self._resumed.clear()

    def resume_reading(self) -> None:
        self._resumed.set()

    def is_reading(self) -> bool:
        return self._resumed.is_set()

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._task.cancel()


class _FileWriteTransport(asyncio.WriteTransport):
    """Writes to a regular file synchronously (a file never applies backpressure)."""

    def __init__(self, fd: int, protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self._fd = fd
        self._protocol = protocol
        self._closing = False
        protocol.connection_made(self)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            os.close(self._fd)
            asyncio.get_running_loop().call_soon(self._protocol.connection_lost, None)

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


class _StdioStream(Stream):
    def __init__(self, loop: asyncio.AbstractEventLoop, fds: tuple[int, int]) -> None:
        super().__init__(loop)
        self._fds = fds
        self._was_blocking = [os.get_blocking(fd) for fd in fds]

    def _transport_lost(self) -> None:
        super()._transport_lost()
        if self._transports <= 0:
            # asyncio made the (shared) file descriptions non-blocking; undo it so that
            # print() and friends behave again after the connection.
            for fd, blocking in zip(self._fds, self._was_blocking):
                try:
                    os.set_blocking(fd, blocking)
                except OSError:  # pragma: no cover
                    pass


async def connect_stdio(stdin: int = 0, stdout: int = 1) -> Stream:
    """A stream over this process's stdin (read) and stdout (write): the agent side.

    The descriptors are duplicated, so closing the stream leaves fds 0 and 1 open. Pipes,
    sockets and terminals are driven by the event loop; a regular file (``agent <
    file``) is read in a worker thread and written synchronously.

    Args:
        stdin: the descriptor to read.
        stdout: the descriptor to write.
    """
    loop = asyncio.get_running_loop()
    stream = _StdioStream(loop, (stdin, stdout))
    rfd, wfd = os.dup(stdin), os.dup(stdout)
    if stat.S_ISREG(os.fstat(rfd).st_mode):
        _FileReadTransport(loop, rfd, _ReadPipeProtocol(stream))
    else:
        await loop.connect_read_pipe(lambda: _ReadPipeProtocol(stream), open(rfd, "rb", buffering=0))  # noqa: ASYNC230,SIM115 (wraps an fd)
    if stat.S_ISREG(os.fstat(wfd).st_mode):
        _FileWriteTransport(wfd, _WritePipeProtocol(stream))
    else:
        await loop.connect_write_pipe(lambda: _WritePipeProtocol(stream), open(wfd, "wb", buffering=0))  # noqa: ASYNC230,SIM115 (wraps an fd)
    return stream
