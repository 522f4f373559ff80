"""The floor of the WebSocket round-trip rows: the least an ASGI WebSocket round trip costs here.

The server is an ASGI app of a dozen lines on the same ASGI server and settings as
`acp-fast serve` ([`acp_fast.remote.runner.served`][acp_fast.remote.runner.served]; `serve --server NAME`
picks the server, the default one of `acp-fast serve` by default): it decodes each text message and sends back
`{"jsonrpc": "2.0", "id": …, "result": <the request's params>}`. No ACP, no JSON-RPC
connection, no session, no validation. The client is websockets' sans-I/O protocol in an
asyncio `Protocol`: it builds each `_test/echo` request, waits for the answer and decodes
it, N times in a row. Both sides decode and encode with orjson when it is installed (the
`test` extra), else with the standard library's `json` (the row's JSON line says which).

Any ACP server and client on that ASGI server pay at least this much per round trip, whatever
their protocol library: the `floor` `ws` row of `acp-fast bench --remote` shows it beside
the ACP rows. It is a ceiling measured with a shortcut, never a target.

`python -m acp_fast.benchmark.ws_floor serve [--loop L] [--server S]` prints its port on stdout;
`python -m acp_fast.benchmark.ws_floor URL roundtrips N [--loop L]` (URL `ws://host:port/acp`)
prints one JSON line: `{"ok", "n", "seconds", "rate", "cpuSeconds", "loop", "json"}`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..jsontypes import JsonObject
from .tcp_floor import floor_cli

if TYPE_CHECKING:
    from ..remote.runner import ServerName

__all__ = ["echo_app", "main"]


_Data = str | bytes | bytearray | memoryview


def _codec() -> tuple[str, Callable[[_Data], Any], Callable[[Any], str]]:
    """The JSON functions both sides use: orjson's when installed, else the standard library's."""
    try:
        import orjson
    except ImportError:
        return ("json", lambda data: json.loads(data if isinstance(data, str) else bytes(data)),
                lambda value: json.dumps(value, separators=(",", ":")))
    dumps = orjson.dumps
    return "orjson", orjson.loads, lambda value: dumps(value).decode()


async def echo_app(scope: dict[str, Any], receive: Callable[[], Any], send: Callable[[Any], Any]) -> None:
    """The ASGI app: each WebSocket text message that is a request is answered with its params."""
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["type"] != "websocket":
        return
    _, loads, dumps = _codec()
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] != "websocket.receive":
            return
        text = message.get("text")
        if text is None:
            continue
        request = loads(text)
        if type(request) is dict and "id" in request and "method" in request:
            await send({"type": "websocket.send",
                        "text": dumps({"jsonrpc": "2.0", "id": request["id"], "result": request.get("params")})})


class _Caller(asyncio.Protocol):
    """A WebSocket client connection: websockets' sans-I/O protocol on the socket's callbacks."""

    def __init__(self, url: str) -> None:
        from websockets.client import ClientProtocol
        from websockets.uri import parse_uri

        self.ws = ClientProtocol(parse_uri(url))
        self.loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = self.loop.create_future()
        self.answer: asyncio.Future[_Data] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.ws.send_request(self.ws.connect())
        self.transport.write(b"".join(self.ws.data_to_send()))

    def data_received(self, data: bytes) -> None:
        from websockets.frames import Frame, Opcode

        self.ws.receive_data(data)
        for event in self.ws.events_received():
            if not isinstance(event, Frame):  # the handshake's response
                if not self.opened.done():
                    self.opened.set_result(None)
            elif event.opcode is Opcode.TEXT and self.answer is not None and not self.answer.done():
                self.answer.set_result(event.data)
        out = self.ws.data_to_send()  # pongs, a close
        if out:
            self.transport.write(b"".join(out))

    def connection_lost(self, exc: Exception | None) -> None:
        for waiter in (self.opened, self.answer):
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc or ConnectionError("the server closed the connection"))

    def call(self, text: str) -> asyncio.Future[_Data]:
        self.ws.send_text(text.encode())
        self.transport.write(b"".join(self.ws.data_to_send()))
        self.answer = self.loop.create_future()
        return self.answer


async def _serve(server: ServerName) -> None:
    from ..remote.runner import served

    async with served(echo_app, server=server) as where:
        print(where.port, flush=True)
        await asyncio.Event().wait()


async def _roundtrips(url: str, n: int, warmup: int) -> JsonObject:
    from urllib.parse import urlsplit

    from ..transport.loop import loop_name

    parts = urlsplit(url)
    if parts.scheme != "ws" or not parts.hostname or not parts.port:
        raise ValueError(f"not a ws://host:port/path URL: {url!r}")
    codec, loads, dumps = _codec()
    transport, caller = await asyncio.get_running_loop().create_connection(
        lambda: _Caller(url), parts.hostname, parts.port)
    try:
        await caller.opened

        async def echo(i: int) -> None:
            answer = loads(await caller.call(dumps({"jsonrpc": "2.0", "id": i, "method": "_test/echo",
                                                    "params": {"i": i}})))
            if answer.get("id") != i or answer.get("result") != {"i": i}:
                raise RuntimeError(f"echo {i} answered {answer!r}")

        for i in range(warmup):
            await echo(i)
        cpu0, t0 = time.process_time(), time.perf_counter()
        for i in range(n):
            await echo(warmup + i)
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    finally:
        transport.close()
    return {"ok": True, "workload": "roundtrips", "n": n, "seconds": round(seconds, 6), "rate": round(n / seconds, 1),
            "cpuSeconds": round(cpu, 6), "loop": loop_name(), "json": codec}


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module's text)."""
    return floor_cli("python -m acp_fast.benchmark.ws_floor", "ws://host:port/path", _serve, _roundtrips, argv,
                     asgi=True)


if __name__ == "__main__":
    sys.exit(main())
