"""The official Python SDK's remote API on acp_fast: `create_asgi_app` and the client streams.

An SDK program that serves its agent over the network builds an ASGI app with
`acp.http.asgi.create_asgi_app(agent_factory)` and runs it on an ASGI server. The same call
on this module returns acp_fast's remote app instead ([`AcpApp`][acp_fast.remote.AcpApp]):

```python
from acp_fast.compat.acp_sdk import create_asgi_app   # was: from acp.http.asgi import create_asgi_app

app = create_asgi_app(lambda conn: MyAgent(conn))      # uvicorn module:app
```

Each remote connection (Streamable HTTP or WebSocket, on one path) gets its own agent from
`agent_factory`, bound to the connection drop-in's `AgentSideConnection`
([`acp_fast.compat.acp_sdk.fast`][acp_fast.compat.acp_sdk.fast]): the SDK's typed API
dispatched on acp_fast's connection. What the network sees is acp_fast's server: its access
policy (loopback `Host`, no foreign `Origin`, optional bearer token), its limits (body and
frame size, connection cap, bounded queues that pause the agent), resumable SSE streams
(`id:` cursors, `Last-Event-ID`) and hostile input answered with JSON-RPC errors.

Where it differs from the SDK's own app:

| | the SDK's app | this one |
|---|---|---|
| `Host` / `Origin` | any | loopback names only (421), no browser origin (403), unless the policy lists them |
| body size | unbounded | `ServerPolicy.max_body` (413; WebSocket close 1009) |
| SSE cursors | none | `id:` on every event, resumable within a replay window (409 outside) |
| slow `initialize` | 504 after 30 s | 504 after `ServerPolicy.initialize_timeout` (30 s) |
| malformed JSON | `400 {"error": "Invalid JSON"}` | 400 with the JSON-RPC error the agent's engine gives on stdio |
| keepalive comments on a quiet SSE stream | every 15 s | every `ServerPolicy.keepalive` (15 s) |
| cookies | none set; its clients keep a jar (a load balancer's affinity cookie) | none set; the SDK's clients and acp_fast's HTTP client keep theirs |
| WebSocket messages | one JSON-RPC message per text frame | the same; batch frames only for a client that asks |

On the client side, `create_http_stream(url)` and `create_websocket_stream(url)` have the
SDK's signatures (`acp.http.create_http_stream`, `acp.ws.create_websocket_stream`) and return
a transport that `acp.connect_to_agent` (the connection drop-in's) runs on acp_fast's remote
client ([`connect_url`][acp_fast.remote.connect_url]). With the connection drop-in installed
([`activate.install("connection")`][acp_fast.compat.acp_sdk.activate.install]), the SDK's own
three names resolve to these, however the program imports them; the transport drop-in leaves
the SDK's remote API alone.

Needs the SDK (`agent-client-protocol`) and acp_fast's `remote` extra.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from typing_extensions import Unpack

from ...remote import DEFAULT_PATH, AcpApp, ServerPolicy, asgi_app
from ._types import ConnectionOptions

if TYPE_CHECKING:
    import acp
    import httpx
    from acp._cookies import MemoryAcpCookieStore

    from ...transport.stream import Stream
    from .fast import AgentSideConnection
    from .transport import StreamTransport

__all__ = ["AgentFactory", "create_asgi_app", "create_http_stream", "create_websocket_stream"]

#: What the SDK's `create_asgi_app` takes: called once per connection with the bound
#: connection, it returns that connection's agent.
AgentFactory = Callable[["AgentSideConnection"], "acp.Agent"]


def create_asgi_app(agent_factory: AgentFactory, *, path: str = DEFAULT_PATH, policy: ServerPolicy | None = None,
                    use_unstable_protocol: bool = False, **connection_kwargs: Unpack[ConnectionOptions]) -> AcpApp:
    """`acp.http.asgi.create_asgi_app` on acp_fast: the SDK agent served by acp_fast's remote server.

    Args:
        agent_factory: called once per remote connection with its `AgentSideConnection`
            (the connection drop-in's, same typed methods as the SDK's), returns the agent.
        path: the ACP endpoint (POST/GET/DELETE and the WebSocket upgrade).
        policy: acp_fast's access rules and limits (default: `ServerPolicy()`).
        use_unstable_protocol: as the SDK's `AgentSideConnection` takes it.
        **connection_kwargs: the connection drop-in's keywords (`engine`, `max_line_size`, ...).

    Returns:
        an ASGI 3 application ([`AcpApp`][acp_fast.remote.AcpApp]) for uvicorn, hypercorn,
        or a Starlette/FastAPI mount.

    Raises:
        RuntimeError: the installed SDK is not a version the drop-in was tested with (see
            `check_sdk_version`).
    """
    from .connect import check_sdk_version
    from .fast import AgentSideConnection

    check_sdk_version()

    async def serve(stream: Stream) -> None:
        # the drop-in's connection is the SDK's `AgentSideConnection` (a subclass): what the
        # factory is typed to take, which the SDK's constructor types as its `Client` protocol
        to_agent = cast("Callable[[acp.Client], acp.Agent]", agent_factory)
        conn = AgentSideConnection(to_agent, stream, listening=False,
                                   use_unstable_protocol=use_unstable_protocol, **connection_kwargs)
        try:
            await conn.listen()
        finally:
            await asyncio.shield(conn.close())

    return asgi_app(serve, path=path, policy=policy)


def create_http_stream(url: str, *, client: httpx.AsyncClient | None = None,
                       headers: dict[str, str] | None = None) -> StreamTransport:
    """`acp.http.create_http_stream` on acp_fast's Streamable HTTP client.

    Args:
        url: the ACP endpoint (`http(s)://host/acp`).
        client: a caller-owned `httpx.AsyncClient` (its TLS, proxy or HTTP/2 settings): the
            SDK's own transport is used then, since acp_fast's client makes its connections
            itself.
        headers: extra headers sent on every request.

    Returns:
        a transport for `acp.connect_to_agent`; no I/O happens until the connection sends
        `initialize`.
    """
    if client is not None:
        from .originals import original

        sdk_create = cast("Callable[..., StreamTransport]", original("http.client.create_http_stream"))
        return sdk_create(url, client=client, headers=headers)
    from ...remote import connect_url
    from .transport import StreamTransport

    extra = dict(headers or {})

    async def open_stream() -> Stream:
        return await connect_url(url, headers=extra)

    return StreamTransport(open_stream)


async def create_websocket_stream(url: str, *, headers: dict[str, str] | None = None,
                                  cookie_store: MemoryAcpCookieStore | None = None) -> StreamTransport:
    """`acp.ws.create_websocket_stream` on acp_fast's WebSocket client: connected on return.

    Args:
        url: the ACP WebSocket endpoint (`ws(s)://host/acp`).
        headers: extra headers sent on the handshake.
        cookie_store: the SDK's affinity cookie store: its cookies are sent on the handshake
            (unless `headers` holds a `Cookie`); a `Set-Cookie` on the upgrade response is not
            read back into it.

    Returns:
        a connected transport for `acp.connect_to_agent`.

    Raises:
        RemoteConnectError: the WebSocket could not be opened.
    """
    from ...remote import connect_url
    from .transport import StreamTransport

    extra = dict(headers or {})
    cookie = cookie_store.cookie_header() if cookie_store is not None else None
    if cookie and not any(k.lower() == "cookie" for k in extra):
        extra["Cookie"] = cookie
    stream = await connect_url(url, headers=extra)

    async def opened() -> Stream:
        return stream

    return StreamTransport(opened)  # unopened: the connection drop-in reads the stream itself
