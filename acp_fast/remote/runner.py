"""Running an [`AcpApp`][acp_fast.remote.AcpApp] on uvicorn, hypercorn or granian.

[`served`][acp_fast.remote.runner.served] starts a server inside the running event loop for as long as a `with` block
(tests, embedding, benchmarks); [`serve_app`][acp_fast.remote.runner.serve_app] runs one until it is told to stop (the CLI).
uvicorn serves HTTP/1.1 and WebSocket. hypercorn and granian serve HTTP/2 as well, which the
transport's RFD asks for: over TLS (give `certfile`/`keyfile`) by ALPN, and without TLS
to a client that speaks HTTP/2 from its first bytes ("prior knowledge", h2c); HTTP/1.1 and
WebSocket on the same port. granian's HTTP and WebSocket I/O runs on its own Rust threads;
the app itself runs in this event loop, as with the other two. All three bind a socket made
here, so `port=0` picks a free port and `Served.port` says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

from ._asgi import ASGIApp
from ._wire import DEFAULT_PATH, require_extra
from .server import AcpApp

__all__ = ["DEFAULT_SERVER", "SERVERS", "Served", "serve_app", "served"]

#: The ASGI servers :func:`served` and :func:`serve_app` can run.
SERVERS = ("uvicorn", "hypercorn", "granian")
ServerName = Literal["uvicorn", "hypercorn", "granian"]
#: The server :func:`served`, :func:`serve_app` and ``acp-fast serve`` use unless told otherwise.
DEFAULT_SERVER: ServerName = "uvicorn"


@dataclass(frozen=True)
class Served:
    """A running server: where it listens.

    Attributes:
        host: the bound address.
        port: the bound port.
        tls: whether it serves TLS (`https`/`wss`).
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
        """The Streamable HTTP endpoint, `http://host:port/acp`."""
        return self._base("http")

    @property
    def ws_url(self) -> str:
        """The WebSocket endpoint, `ws://host:port/acp`."""
        return self._base("ws")


#: The listening socket's backlog.
_BACKLOG = 2048
#: Requests granian serves at once (its default is 128): every open SSE stream and WebSocket
#: is one, and the app's own connection cap (``ServerPolicy.max_connections``) is what bounds
#: them, so granian's must not bind first.
_BACKPRESSURE = 65536


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose
    # proto says TCP, and accepted sockets inherit proto 0 otherwise; with Nagle on, a
    # response's head and body (two writes) wait for the peer's delayed ACK: 40 ms each.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(_BACKLOG)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def served(app: ASGIApp, *, server: ServerName = DEFAULT_SERVER, host: str = "127.0.0.1",
                 port: int = 0, certfile: str | None = None, keyfile: str | None = None,
                 log_level: str = "warning") -> AsyncIterator[Served]:
    """Serve `app` in this event loop while the block runs; yields a [`Served`][acp_fast.remote.runner.Served].

    Example:

    ```python
    async with served(asgi_app(agent)) as where:
        async with Client.v2().connect(connect_url(where.ws_url)) as conn: ...
    ```
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
    elif server == "granian":
        task = asyncio.ensure_future(_granian(app, sock, stop, certfile, keyfile, log_level))
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


async def _uvicorn(app: ASGIApp, sock: socket.socket, stop: asyncio.Event, certfile: str | None, keyfile: str | None,
                   log_level: str) -> None:
    require_extra("uvicorn")
    import uvicorn

    max_body = getattr(getattr(app, "policy", None), "max_body", 16 * 1024 * 1024)
    # log_config=None: uvicorn's records go to this process's handlers (its own format, or
    # `acp-fast serve --log-format json`), not to handlers of uvicorn's own
    config = uvicorn.Config(app, log_level=log_level, lifespan="off", ws_max_size=max_body + 1024,
                            ssl_certfile=certfile, ssl_keyfile=keyfile, timeout_graceful_shutdown=2,
                            log_config=None)
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


async def _hypercorn(app: ASGIApp, sock: socket.socket, stop: asyncio.Event, certfile: str | None, keyfile: str | None,
                     log_level: str) -> None:
    require_extra("hypercorn")
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"fd://{os.dup(sock.fileno())}"]  # hypercorn owns (and closes) its copy
    config.loglevel = log_level.upper()
    config.errorlog = logging.getLogger("hypercorn.error")  # to this process's handlers, as uvicorn's
    config.graceful_timeout = 2.0
    max_body = getattr(getattr(app, "policy", None), "max_body", 16 * 1024 * 1024)
    config.websocket_max_message_size = max_body + 1024
    if certfile is not None:
        config.certfile = certfile
        config.keyfile = keyfile
    # hypercorn types its scopes and events as TypedDicts; an ASGI app here takes plain dicts
    await serve(cast(Any, app), config, shutdown_trigger=stop.wait)


#: granian's start-up notice that its in-process ("embedded") server is experimental: said on
#: every start, dropped from the log (the tests of this package are what vouch for it here).
_GRANIAN_EMBED_NOTICE = "Embedded server is experimental"


def _granian_filter(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_GRANIAN_EMBED_NOTICE)


def _os_threads() -> set[str]:
    """This process's OS thread ids (Linux), or an empty set where `/proc` cannot say."""
    try:
        return set(os.listdir("/proc/self/task"))
    except OSError:
        return set()


async def _granian(app: ASGIApp, sock: socket.socket, stop: asyncio.Event, certfile: str | None, keyfile: str | None,
                   log_level: str) -> None:
    require_extra("granian")
    from pathlib import Path

    from granian import net
    from granian.constants import HTTPModes, Interfaces, SSLProtocols
    from granian.log import LogLevels
    from granian.server.embed import Server

    level = log_level.lower() if log_level.lower() in LogLevels.__members__ else "warning"
    fd = os.dup(sock.fileno())  # granian owns (and closes) its copy

    class _Embedded(Server):
        def _init_shared_socket(self) -> None:  # serve the socket made here (port 0 works)
            self._ssp = None
            holder: Any = getattr(net, "SocketHolder")  # noqa: B009 - granian.net re-exports it untyped
            self._shd = holder(fd, False, _BACKLOG)

    logging.getLogger("_granian").addFilter(_granian_filter)
    before = _os_threads()
    srv = _Embedded(
        app, address=sock.getsockname()[0], port=sock.getsockname()[1], interface=Interfaces.ASGINL,
        http=HTTPModes.auto, websockets=True, backlog=_BACKLOG, backpressure=_BACKPRESSURE,
        log_level=LogLevels(level),
        # incremental: only the levels of granian's own loggers change; the records go to this
        # process's handlers (no new handlers, none of the existing ones closed)
        log_dictconfig={"version": 1, "incremental": True, "handlers": {}, "formatters": {}, "loggers": {}},
        ssl_cert=Path(certfile) if certfile else None, ssl_key=Path(keyfile) if keyfile else None,
        ssl_protocol_min=SSLProtocols.tls12,
    )
    watcher = asyncio.ensure_future(_stop_granian(srv, stop))
    try:
        await srv.serve()
    finally:
        watcher.cancel()
        # serve() returns as soon as the stop is signalled, while granian's Rust threads are
        # still winding down; one that reaches for the interpreter after this process began to
        # exit aborts it. So wait (bounded) until the threads it started are gone.
        python_threads = {str(t.native_id) for t in threading.enumerate()}
        for _ in range(400):
            if not (_os_threads() - before - python_threads):
                break
            await asyncio.sleep(0.005)


async def _stop_granian(srv: Any, stop: asyncio.Event) -> None:
    await stop.wait()
    srv.stop()


async def serve_app(app: ASGIApp, *, server: ServerName = DEFAULT_SERVER, host: str = "127.0.0.1", port: int = 8000,
                    certfile: str | None = None, keyfile: str | None = None, log_level: str = "info",
                    on_ready: Callable[[Served], None] | None = None) -> None:
    """Serve `app` until SIGINT or SIGTERM (or cancellation); `on_ready` gets the address."""
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
