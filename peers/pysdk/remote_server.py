#!/usr/bin/env python3
"""The v1 test agent of ``agent.py`` served remotely by the official Python SDK (0.12.1).

Streamable HTTP and WebSocket on one endpoint: the SDK's ASGI app (``acp.http.asgi``, which
hands WebSocket scopes to its ``acp.ws`` server side) on uvicorn. One ``TestAgent`` per
connection; its behaviour is ``agent.py``'s (``session/prompt`` streams N chunks, asks
``session/request_permission`` when the text says "permission", honours ``session/cancel``).

Prints the port it listens on (one line on stdout) once it accepts connections, then serves
until killed.

Options:
  --port P      port on 127.0.0.1 (default 0: any free port)
  --path PATH   the ACP endpoint (default /acp); anything else but GET /health is 404
  --token T     require ``Authorization: Bearer T`` on every request and the WebSocket
                handshake (401 otherwise). The SDK has no authentication of its own: this
                check is this script's, in front of the SDK's app.
  --number      prefix the text of each ``agent_message_chunk`` with its index in the
                session and a colon (``0:xxx``, ``1:xxx``, ...), so a client can check order
  --loop L      asyncio (default) or uvloop
  --dropin      serve the same agent with ``acp_fast.compat.acp_sdk.create_asgi_app`` (the
                one-line switch to acp_fast's server: its policy and limits, ``--token`` as
                its bearer token) instead of the SDK's ``acp.http.asgi.create_asgi_app``

Env: ACP_N, ACP_CHUNK as for ``agent.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import os
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, cast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import acp  # noqa: E402
import uvicorn  # noqa: E402
from acp.http.asgi import create_asgi_app  # noqa: E402

from agent import TestAgent  # noqa: E402

class _ClientView:
    """The agent's view of its client connection: ``session_update`` yields to the event
    loop after each update and, with ``number``, prefixes the text of ``agent_message_chunk``
    updates with their index in the session; everything else passes through.

    The yield is needed here: the SDK binds each agent to its HTTP/WebSocket pump with an
    unbounded in-memory queue, so the agent's sends never wait, and a long streamed prompt
    would hold the event loop (no SSE frame, no ``session/cancel``) until it ended.
    """

    def __init__(self, conn: Any, number: bool) -> None:
        self._conn = conn
        self._number = number
        self._counts: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        content: Any = getattr(update, "content", None)
        if (self._number and getattr(update, "session_update", None) == "agent_message_chunk"
                and getattr(content, "type", None) == "text"):
            k = self._counts.get(session_id, 0)
            self._counts[session_id] = k + 1
            update = update.model_copy(update={"content": content.model_copy(update={"text": f"{k}:{content.text}"})})
        await self._conn.session_update(session_id=session_id, update=update, **kwargs)
        await asyncio.sleep(0)


class RemoteAgent(TestAgent):
    """``TestAgent`` behind :class:`_ClientView`."""

    number = False

    def on_connect(self, conn: acp.Client) -> None:
        super().on_connect(cast(acp.Client, _ClientView(conn, self.number)))


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


async def _plain(send: Send, status: int, text: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": text.encode()})


def front(app: App, path: str, token: str | None) -> App:
    """The endpoint path, ``/health`` and the optional bearer token in front of ``app``."""
    expected = f"Bearer {token}".encode() if token is not None else None

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await app(scope, receive, send)
            return
        if kind == "http" and scope["path"] == "/health":
            await _plain(send, 200, "ok")
            return
        if scope["path"] != path:
            if kind == "http":
                await _plain(send, 404, "not found")
            else:
                await receive()
                await send({"type": "websocket.close", "code": 1008})
            return
        if expected is not None and not hmac.compare_digest(_header(scope, b"authorization") or b"", expected):
            if kind == "http":
                await _plain(send, 401, "unauthorized")
                return
            await receive()  # websocket.connect
            if "websocket.http.response" in scope.get("extensions", {}):
                await send({"type": "websocket.http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "websocket.http.response.body", "body": b"unauthorized"})
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        await app(scope, receive, send)

    return wrapped


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--path", default="/acp")
    parser.add_argument("--token", default=None)
    parser.add_argument("--number", action="store_true")
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                        help="event loop (default asyncio; the benchmark runs every Python side on the same loop)")
    parser.add_argument("--dropin", action="store_true")
    args = parser.parse_args()

    RemoteAgent.number = args.number
    app: App
    if args.dropin:
        from acp_fast.compat.acp_sdk import create_asgi_app as dropin_app
        from acp_fast.remote import ServerPolicy

        app = cast(App, dropin_app(lambda conn: cast(acp.Agent, RemoteAgent()), path=args.path,
                                   policy=ServerPolicy(token=args.token)))
    else:
        app = front(cast(App, create_asgi_app(lambda conn: cast(acp.Agent, RemoteAgent()))), args.path, args.token)
    # IPPROTO_TCP spelled out: the asyncio loop turns Nagle off only on sockets that say TCP,
    # and a response's head and body (two writes) would otherwise wait 40 ms for an ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    config = uvicorn.Config(app, log_level="warning",
                            lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    print(sock.getsockname()[1], flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    if "--loop" in sys.argv and sys.argv[sys.argv.index("--loop") + 1:][:1] == ["uvloop"]:
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())
