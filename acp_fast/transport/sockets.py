"""TCP and Unix-domain stream sockets: connect and serve."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

from .stream import Stream, _DuplexProtocol

__all__ = ["OnStream", "connect_tcp", "connect_unix", "serve_tcp", "serve_unix"]


async def connect_tcp(host: str, port: int, **kwargs: Any) -> Stream:
    """Connect to a TCP server (``kwargs`` go to ``loop.create_connection``)."""
    loop = asyncio.get_running_loop()
    stream = Stream(loop)
    await loop.create_connection(lambda: _DuplexProtocol(stream), host, port, **kwargs)
    return stream


async def connect_unix(path: str | os.PathLike[str], **kwargs: Any) -> Stream:
    """Connect to a Unix-domain stream socket."""
    loop = asyncio.get_running_loop()
    stream = Stream(loop)
    await loop.create_unix_connection(lambda: _DuplexProtocol(stream), os.fspath(path), **kwargs)
    return stream


OnStream = Callable[[Stream], "Awaitable[None] | None"]


def _server_factory(loop: asyncio.AbstractEventLoop, on_stream: OnStream) -> Callable[[], asyncio.Protocol]:
    tasks: set[asyncio.Task[Any]] = set()

    class _Accepted(_DuplexProtocol):
        __slots__ = ()

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            result = on_stream(self._s)
            if asyncio.iscoroutine(result):
                task = loop.create_task(result)
                tasks.add(task)
                task.add_done_callback(tasks.discard)

    return lambda: _Accepted(Stream(loop))


async def serve_tcp(on_stream: OnStream, host: str, port: int, **kwargs: Any) -> asyncio.Server:
    """Accept TCP connections; ``on_stream(stream)`` runs for each (a coroutine becomes a task)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(_server_factory(loop, on_stream), host, port, **kwargs)


async def serve_unix(on_stream: OnStream, path: str | os.PathLike[str], **kwargs: Any) -> asyncio.Server:
    """Accept Unix-domain stream connections; as :func:`serve_tcp`."""
    loop = asyncio.get_running_loop()
    return await loop.create_unix_server(_server_factory(loop, on_stream), os.fspath(path), **kwargs)
