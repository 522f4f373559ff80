"""TCP and Unix-domain stream sockets: connect and serve."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .stream import Stream, _DuplexProtocol

__all__ = ["DEFAULT_HOST", "OnStream", "connect_tcp", "connect_unix", "serve_tcp", "serve_unix"]


async def connect_tcp(host: str, port: int, **kwargs: Any) -> Stream:
    """Connect to a TCP server (`kwargs` go to `loop.create_connection`).

    Nothing authenticates either end (see [`serve_tcp`][acp_fast.transport.sockets.serve_tcp]).
    """
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


#: Where :func:`serve_tcp` listens unless told otherwise: this machine only.
DEFAULT_HOST = "127.0.0.1"


async def serve_tcp(on_stream: OnStream, host: str | Sequence[str] | None = DEFAULT_HOST, port: int = 0,
                    **kwargs: Any) -> asyncio.Server:
    """Accept TCP connections; `on_stream(stream)` runs for each (a coroutine becomes a task).

    Security: there is **no authentication** on this socket: whoever can connect speaks
    ACP to the agent (and through it to whatever the agent may do: run tools, read files).
    The default `host` is the loopback address `DEFAULT_HOST`, so only processes of
    this machine can connect. Binding any other address (`"0.0.0.0"`, `""`, `None`
    or a public interface) exposes the agent to the network; put an authenticating layer
    in front if you do.

    Args:
        on_stream: called with each accepted connection's [`Stream`][acp_fast.transport.sockets.Stream].
        host: the address(es) to bind (`loop.create_server`'s `host`).
        port: the port; 0 (default) picks a free one (see `server.sockets`).
        kwargs: passed to `loop.create_server`.
    """
    loop = asyncio.get_running_loop()
    return await loop.create_server(_server_factory(loop, on_stream), host, port, **kwargs)


async def serve_unix(on_stream: OnStream, path: str | os.PathLike[str], **kwargs: Any) -> asyncio.Server:
    """Accept Unix-domain stream connections; as [`serve_tcp`][acp_fast.transport.sockets.serve_tcp].

    There is no authentication either: who may connect is decided by the socket file's
    permissions (and its directory's).
    """
    loop = asyncio.get_running_loop()
    return await loop.create_unix_server(_server_factory(loop, on_stream), os.fspath(path), **kwargs)
