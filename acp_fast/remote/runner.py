"""Running an :class:`~acp_fast.transport.remote.AcpApp` on uvicorn or hypercorn.

:func:`served` starts a server inside the running event loop for as long as a ``with`` block
(tests, embedding, benchmarks); :func:`serve_app` runs one until it is told to stop (the CLI).
uvicorn serves HTTP/1.1 and WebSocket; hypercorn serves HTTP/2 as well (over TLS: give
``certfile``/``keyfile``), which the transport's RFD asks for. Both bind a socket made here,
so ``port=0`` picks a free port and :attr:`Served.port` says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

from ._wire import DEFAULT_PATH, require_extra
from .server import AcpApp

__all__ = ["SERVERS", "Served", "serve_app", "served"]

#: The ASGI servers :func:`served` and :func:`serve_app` can run.
SERVERS = ("uvicorn", "hypercorn")
ServerName = Literal["uvicorn", "hypercorn"]


@dataclass(frozen=True)
class Served:
    """A running server: where it listens.

    Attributes:
        host: the bound address.
        port: the bound port.
        tls: whether it serves TLS (``https``/``wss``).
        path: the ACP endpoint path of the app.
    """

    host: str
    port: int
    tls: bool
    path: str

    def _base(self, scheme: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}{'s' if self.tls else ''}://{host}:{self.port}{self.path}"

    @property
    def http_url(self) -> str:
        """The Streamable HTTP endpoint, ``http://host:port/acp``."""
        return self._base("http")

    @property
    def ws_url(self) -> str:
        """The WebSocket endpoint, ``ws://host:port/acp``."""
        return self._base("ws")


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose
    # proto says TCP, and accepted sockets inherit proto 0 otherwise; with Nagle on, a
    # response's head and body (two writes) wait for the peer's delayed ACK: 40 ms each.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def served(app: AcpApp | Callable[..., Any], *, server: ServerName = "uvicorn", host: str = "127.0.0.1",
                 port: int = 0, certfile: str | None = None, keyfile: str | None = None,
                 log_level: str = "warning") -> AsyncIterator[Served]:
    """Serve ``app`` in this event loop while the block runs; yields a :class:`Served`.

    Example::

        async with served(asgi_app(agent)) as where:
            async with Client.v2().connect(connect_url(where.ws_url)) as conn: ...
    """
    sock = _listen(host, port)
    bound = sock.getsockname()[1]
    path = getattr(app, "path", DEFAULT_PATH)
    where = Served(host, bound, certfile is not None, path if path != "/" else "")
    stop = asyncio.Event()
    if server == "uvicorn":
        task = asyncio.ensure_future(_uvicorn(app, sock, stop, certfile, keyfile, log_level))
    elif server == "hypercorn":
        task = asyncio.ensure_future(_hypercorn(app, sock, stop, certfile, keyfile, log_level))
    else:
        sock.close()
        raise ValueError(f"server must be one of {SERVERS}, not {server!r}")
    try:
        await _wait_listening(host, bound, task)
        yield where
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, 10.0)
        except asyncio.TimeoutError:
            task.cancel()
        finally:
            sock.close()
            if isinstance(app, AcpApp):
                await app.aclose()


async def _wait_listening(host: str, port: int, task: asyncio.Future[None]) -> None:
    for _ in range(500):
        if task.done():
            task.result()
            raise RuntimeError("the ASGI server stopped while starting")
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.01)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        await asyncio.sleep(0.05)  # let the server finish its start-up before the first request
        return
    raise RuntimeError("the ASGI server did not start listening within 5 s")


async def _uvicorn(app: Any, sock: socket.socket, stop: asyncio.Event, certfile: str | None, keyfile: str | None,
                   log_level: str) -> None:
    require_extra("uvicorn")
    import uvicorn

    max_body = getattr(getattr(app, "policy", None), "max_body", 16 * 1024 * 1024)
    config = uvicorn.Config(app, log_level=log_level, lifespan="off", ws_max_size=max_body + 1024,
                            ssl_certfile=certfile, ssl_keyfile=keyfile, timeout_graceful_shutdown=2)
    error_log = logging.getLogger("uvicorn.error")
    if _client_text_not_utf8 not in error_log.filters:
        error_log.addFilter(_client_text_not_utf8)
    class _Server(uvicorn.Server):
        def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
            return contextlib.nullcontext()  # signals belong to whoever runs the loop (serve_app)

    srv = _Server(config)
    watcher = asyncio.ensure_future(_set_exit(srv, stop))
    try:
        await srv.serve(sockets=[sock])
    finally:
        watcher.cancel()


def _client_text_not_utf8(record: logging.LogRecord) -> bool:
    """uvicorn logs a traceback at ERROR for a WebSocket text frame that is not UTF-8, which
    it answers with close 1007: a client's bad bytes, so one WARNING line without it."""
    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, UnicodeDecodeError):
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
    return True



async def _set_exit(srv: Any, stop: asyncio.Event) -> None:
    await stop.wait()
    srv.should_exit = True


async def _hypercorn(app: Any, sock: socket.socket, stop: asyncio.Event, certfile: str | None, keyfile: str | None,
                     log_level: str) -> None:
    require_extra("hypercorn")
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"fd://{os.dup(sock.fileno())}"]  # hypercorn owns (and closes) its copy
    config.loglevel = log_level.upper()
    config.graceful_timeout = 2.0
    max_body = getattr(getattr(app, "policy", None), "max_body", 16 * 1024 * 1024)
    config.websocket_max_message_size = max_body + 1024
    if certfile is not None:
        config.certfile = certfile
        config.keyfile = keyfile
    await serve(app, config, shutdown_trigger=stop.wait)


async def serve_app(app: AcpApp, *, server: ServerName = "uvicorn", host: str = "127.0.0.1", port: int = 8000,
                    certfile: str | None = None, keyfile: str | None = None, log_level: str = "info",
                    on_ready: Callable[[Served], None] | None = None) -> None:
    """Serve ``app`` until SIGINT or SIGTERM (or cancellation); ``on_ready`` gets the address."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    try:
        async with served(app, server=server, host=host, port=port, certfile=certfile, keyfile=keyfile,
                          log_level=log_level) as where:
            if on_ready is not None:
                on_ready(where)
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
