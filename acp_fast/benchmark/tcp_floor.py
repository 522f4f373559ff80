"""The floor of the remote round-trip rows: a minimal TCP ping-pong on this machine.

No HTTP, no WebSocket, no JSON: an asyncio `Protocol` server that writes back every chunk it
reads, and a client that sends a 100-byte message and waits for its echo, N times in a row.
Both run on the row's event loop. A remote round trip (HTTP or WebSocket) costs at least this
much: the same two socket writes, two reads and two loop wake-ups; the `floor` row of
`acp-fast bench --remote` shows it beside the ACP rows. It is a ceiling measured with a
shortcut, never a target.

`python -m acp_fast.benchmark.tcp_floor serve [--loop L]` prints its port on stdout;
`python -m acp_fast.benchmark.tcp_floor URL roundtrips N [--loop L]` (URL `tcp://host:port`)
prints one JSON line: `{"ok", "n", "seconds", "rate", "cpuSeconds", "loop"}`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

from ..jsontypes import JsonObject
from .remote_client import report

__all__ = ["MESSAGE", "floor_cli", "main"]

#: What the client sends each round trip (the size of a small ACP request).
MESSAGE = b"x" * 99 + b"\n"


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


class _Pinger(asyncio.Protocol):
    def __init__(self) -> None:
        self.waiter: asyncio.Future[None] | None = None
        self.got = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= len(MESSAGE) and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or ConnectionError("the echo server closed the connection"))

    async def ping(self) -> None:
        self.got = 0
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(MESSAGE)
        await self.waiter


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


async def _ping(url: str, n: int, warmup: int) -> JsonObject:
    from ..transport.loop import loop_name

    parts = urlsplit(url)
    if not parts.hostname or not parts.port:
        raise ValueError(f"not a tcp://host:port URL: {url!r}")
    loop = asyncio.get_running_loop()
    transport, pinger = await loop.create_connection(_Pinger, parts.hostname, parts.port)
    try:
        for _ in range(warmup):
            await pinger.ping()
        cpu0, t0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            await pinger.ping()
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    finally:
        transport.close()
    return {"ok": True, "workload": "roundtrips", "n": n, "seconds": round(seconds, 6), "rate": round(n / seconds, 1),
            "cpuSeconds": round(cpu, 6), "loop": loop_name()}


def floor_cli(prog: str, url: str, serve: Callable[..., Coroutine[Any, Any, None]],
              roundtrips: Callable[[str, int, int], Coroutine[Any, Any, JsonObject]], argv: list[str] | None,
              *, asgi: bool = False) -> int:
    """The command line of a floor module: `serve [--loop L]`, or `URL roundtrips N [--warmup W]
    [--loop L]` (`url`: the form of URL, for the help). With `asgi`, `serve` also takes
    `--server NAME` (the ASGI server, passed to `serve` as `server=`)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("target", help=f"serve, or {url}")
    parser.add_argument("workload", nargs="?", choices=("roundtrips",), default="roundtrips")
    parser.add_argument("n", nargs="?", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--loop", default="auto", help="auto, asyncio or uvloop")
    if asgi:
        from ..remote.runner import DEFAULT_SERVER, SERVERS

        parser.add_argument("--server", choices=SERVERS, default=DEFAULT_SERVER, help="the ASGI server (serve)")
    args = parser.parse_args(argv)
    from ..transport.loop import run

    if args.target == "serve":
        try:
            run(serve(server=args.server) if asgi else serve(), loop=args.loop)
        except KeyboardInterrupt:
            pass
        return 0
    return report(roundtrips(args.target, args.n, args.warmup), args.workload, args.loop)


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module's text)."""
    return floor_cli("python -m acp_fast.benchmark.tcp_floor", "tcp://host:port", _serve, _ping, argv)


if __name__ == "__main__":
    sys.exit(main())
