"""Remote ACP: Streamable HTTP and WebSocket, server and client (the `remote` extra).

* [`asgi_app`][acp_fast.remote.asgi_app] — an ASGI 3 application serving a builder, router or conductor to remote
  clients (one in-process connection each); [`gateway_app`][acp_fast.remote.gateway_app] — the same for a stdio agent
  command, one child process per connection (`acp-fast serve`). Serve either with
  [`serve_app`][acp_fast.remote.serve_app] (uvicorn, or hypercorn for HTTP/2) or mount it in Starlette/FastAPI.
  [`ServerPolicy`][acp_fast.remote.ServerPolicy] holds its limits and access rules; [`AccessGuard`][acp_fast.remote.AccessGuard], the ASGI
  middleware that applies the rules, also guards other applications.
* [`connect_url`][acp_fast.remote.connect_url] — a client transport for `http(s)://` (Streamable HTTP) and
  `ws(s)://` (WebSocket) URLs, beside [`acp_fast.transport.spawn`][acp_fast.transport.spawn]:

  ```python
  async with Client.v2().connect(connect_url("ws://127.0.0.1:8000/acp")) as conn:
      await conn.initialize()
  ```

The server module needs no third-party package; the client and the runners need the
`remote` extra (`pip install 'acp-fast[remote]'`) and say so when it is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._wire import (
    CONNECTION_ID_HEADER,
    DEFAULT_MAX_BODY,
    DEFAULT_PATH,
    SESSION_ID_HEADER,
    URL_SCHEMES,
    MissingExtraError,
    is_url,
)
from .gateway import gateway_app
from .runner import Served, serve_app, served
from .policy import DEFAULT_ALLOW_HOSTS, AccessGuard, ServerPolicy
from .server import AcpApp, Servable, StreamOpener, asgi_app

__all__ = [
    "CONNECTION_ID_HEADER",
    "DEFAULT_ALLOW_HOSTS",
    "DEFAULT_MAX_BODY",
    "DEFAULT_PATH",
    "SESSION_ID_HEADER",
    "URL_SCHEMES",
    "AccessGuard",
    "AcpApp",
    "MissingExtraError",
    "RemoteConnectError",
    "RemoteConnectionLost",
    "Servable",
    "Served",
    "ServerPolicy",
    "StreamOpener",
    "asgi_app",
    "connect_url",
    "gateway_app",
    "is_url",
    "resolve_url",
    "serve_app",
    "served",
]

if TYPE_CHECKING:
    from .client import RemoteConnectError, RemoteConnectionLost, connect_url, resolve_url

_CLIENT_NAMES = ("RemoteConnectError", "RemoteConnectionLost", "connect_url", "resolve_url")


def __getattr__(name: str) -> object:
    # The client module is loaded when first asked for (it imports httpx and websockets on
    # use; serving needs neither).
    if name in _CLIENT_NAMES:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
