"""An acp_fast [`Stream`][acp_fast.transport.Stream] over an asyncio `StreamWriter`/`StreamReader` pair.

The SDK's byte-level form (`AgentSideConnection(agent, writer, reader)`,
`connect_to_agent(client, proc.stdin, proc.stdout)`) hands over asyncio streams; the
connection drop-in reads them in chunks with one pump task (never `readline`, so no
`LimitOverrunError`) and writes through the writer's transport.
"""

from __future__ import annotations

import asyncio
import contextlib

from ...transport import WRITE_HIGH_WATER, OnData, OnEof, OnWritable, Stream

__all__ = ["AsyncioStream"]

_READ_SIZE = 256 * 1024


class AsyncioStream(Stream):
    """The duplex [`Stream`][acp_fast.jsonrpc.Stream] a connection needs, over asyncio's stream pair."""

    def __init__(self, writer: asyncio.StreamWriter, reader: asyncio.StreamReader) -> None:
        super().__init__(asyncio.get_running_loop())
        self._writer = writer
        self._reader = reader
        self._pump: asyncio.Task[None] | None = None
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._drainer: asyncio.Task[None] | None = None

    def attach(self, on_data: OnData, on_eof: OnEof, on_writable: OnWritable) -> None:
        if self._on_eof is not None:
            raise RuntimeError("a consumer is already attached to this stream")
        self._on_data = on_data
        self._on_eof = on_eof
        self._on_writable = on_writable
        self._ready = True
        self._paused = False
        self._pump = self._loop.create_task(self._read_loop())

    async def _read_loop(self) -> None:
        exc: BaseException | None = None
        try:
            while True:
                if self._paused:
                    await self._resumed.wait()
                data = await self._reader.read(_READ_SIZE)
                if not data:
                    break
                self._on_data(data)
        except asyncio.CancelledError:
            pass
        except Exception as error:  # noqa: BLE001 - the connection learns it as the EOF's error
            exc = error
        self._eof(exc)

    def write(self, data: bytes) -> None:
        writer = self._writer
        if self._closing or writer.is_closing():
            return
        writer.write(data)
        if not self._write_paused and writer.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
            self._pause_writing()
            self._drainer = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        with contextlib.suppress(Exception):
            await self._writer.drain()
        if self._write_paused:
            self._resume_writing()

    def pause_reading(self) -> None:
        self._paused = True
        self._resumed.clear()

    def resume_reading(self) -> None:
        if self._ready:
            self._paused = False
            self._resumed.set()

    def get_write_buffer_size(self) -> int:
        transport = self._writer.transport
        return 0 if transport is None else int(transport.get_write_buffer_size())

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self._writer.get_extra_info(name, default)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._write_paused:
            self._resume_writing()
        with contextlib.suppress(Exception):
            if self._writer.can_write_eof():
                self._writer.write_eof()
        self._writer.close()
        if self._pump is not None:
            self._pump.cancel()

    async def wait_closed(self) -> None:
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
        if self._pump is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait((self._pump,))
