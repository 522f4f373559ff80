"""MCP-over-ACP (unstable): MCP servers served and called through the ACP connection.

A component that *provides* an MCP server declares it in a session setup request's
`mcpServers` with the ACP transport, `{"type": "acp", "name": …, "serverId": …}`; the agent
that *consumes* it sends each MCP request as an `mcp/message` request
`{serverId, requestId, method, params?}` and gets the inner MCP outcome back as
`{"result": …}` or `{"error": {code, message, data?}}` (outer ACP errors are binding
failures: -32602 malformed envelope or duplicate active `(serverId, requestId)`, -32800
cancelled, -33001 no such server, -33002 backend failed). Request-scoped MCP notifications
(progress …) travel back as `mcp/message` notifications carrying the `requestId` of the
request they belong to. The MCP side is the stateless MCP revision 2026-07-28: each request
carries its version, client info and capabilities in `params._meta`; there is no handshake,
so the binding needs no connect/disconnect methods.

The MCP side is the `mcp` package (the `mcp` extra); nothing here imports it until an MCP
server is attached or a session is opened. What one ACP connection has of MCP-over-ACP (the
servers it serves, the MCP sessions open on it) is its `McpState`, `connection.mcp`; the
`mcp/message` handlers are ordinary dynamic handlers of the side they serve (a proxy's
successor's side for the servers it serves its successor), so a handler the builder
registered for `mcp/message` still gets what they do not serve, and a proxy forwards it.

- Provider: `acp_fast.roles.sessions.build_session` / `resume_session` / `fork_session` take
  `with_mcp_servers=[…]` (`mcp` `Server` or `MCPServer` instances, zero-argument factories of
  one, or `McpServer` to choose the name). Each gets a connection-scoped server id; its route
  is installed and its runner (the server's `run` over an in-memory stream pair) started
  *before* the setup request is published, and messages sent while the runner starts are
  queued. A successful setup keeps the attachment for the connection's lifetime; a failed or
  cancelled one removes it.
- Proxy: `Proxy.v2().with_mcp_server(server)` attaches one server for the connection and adds
  its declaration to every `session/new` / `session/resume` / `session/fork` sent to the
  successor, touching nothing but `mcpServers`.
- Consumer: `open_mcp_session` (in an agent's handler) yields an `mcp` `ClientSession` talking
  to a declared server over the ACP connection; `acp_mcp_servers` lists the ACP-transport
  declarations of a setup request.

Example (client side, then agent side):

```python
from mcp.server.mcpserver import MCPServer

tools = MCPServer("tools")

@tools.tool()
def add(a: int, b: int) -> int:
    return a + b

opened = await conn.build_session("/work", with_mcp_servers=[tools])

# in the agent, with the declaration received in session/new:
async with open_mcp_session(cx.connection, declaration) as mcp:
    result = await mcp.call_tool("add", {"a": 1, "b": 2})
```
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from ..errors import INVALID_PARAMS, REQUEST_CANCELLED, JsonRpcError
from ..jsontypes import Json, JsonObject
from ..protocol.facts import MCP_MESSAGE, SETUP_METHODS
from .context import Peer, SentRequest
from .table import NOT_HANDLED

if TYPE_CHECKING:  # pragma: no cover
    from typing import TypeAlias

    from mcp.client.session import ClientSession
    from mcp.server.lowlevel import Server
    from mcp.server.mcpserver import MCPServer
    from mcp.types import JSONRPCNotification, JSONRPCRequest

    from ..jsonrpc import PendingRequest, RequestContext, RequestResult
    from ._hot import Context
    from .context import Request
    from .dispatch import DynamicHandler
    from .table import Handler

__all__ = [
    "ACP_TRANSPORT",
    "BACKEND_FAILED",
    "RESOURCE_LIMIT_EXCEEDED",
    "SERVER_UNAVAILABLE",
    "McpAttachment",
    "McpCalls",
    "McpPeer",
    "McpRoutes",
    "McpServer",
    "McpServerHost",
    "McpSetupRequest",
    "McpState",
    "acp_mcp_servers",
    "attach_for_setup",
    "install_proxy_server",
    "open_mcp_session",
]

logger = logging.getLogger("acp_fast.roles.mcp")

_T = TypeVar("_T")

#: the ``type`` of an ACP-transport MCP server declaration
ACP_TRANSPORT = "acp"
#: outer ACP error codes of the MCP-over-ACP binding
RESOURCE_LIMIT_EXCEEDED = -33000
SERVER_UNAVAILABLE = -33001
BACKEND_FAILED = -33002
#: most concurrently active requests of one server (over it: -33000)
MAX_ACTIVE_REQUESTS = 64


def _token_hex(nbytes: int) -> str:
    # secrets (with hashlib, hmac, random: ~0.8 MiB) is imported on first use, not by every
    # process that imports the builder API
    import secrets

    return secrets.token_hex(nbytes)



class McpPeer(Protocol):
    """The peer an `McpRoutes` serves its MCP servers to: the servers' notifications are sent
    to it, and its `mcp/message` requests come through a handler added to it.

    A connection is the peer of its own peer's messages; a proxy's successor is reached through
    the proxy (`ProxyConnection.serve_mcp_server` serves it).
    """

    def send_notification(self, method: str, params: Json = None, *, passthrough: bool = False) -> bool:
        """Send a notification to the peer; returns False when it was dropped."""

    def add_dynamic_handler(self, method: str, fn: Handler, *, kind: str = "request") -> DynamicHandler:
        """Add a handler of the peer's `method` messages while the connection runs."""


class McpConnection(Peer, McpPeer, Protocol):
    """What the MCP-over-ACP binding needs of a connection (every `AcpConnection` is one): a
    `Peer` with its MCP state, run-time handlers and its closing."""

    @property
    def mcp(self) -> McpState:
        """The connection's MCP-over-ACP state."""


class McpProxyConnection(McpConnection, Protocol):
    """A proxy's connection as the MCP binding sees it (a `ProxyConnection`): an
    `McpConnection` that serves MCP servers to its successor."""

    def serve_mcp_server(self, server: McpServerLike) -> McpServerHost:
        """Serve `server` to the successor under one connection-scoped server id."""


class McpServer:
    """An MCP server to attach, with the name it is declared under.

    Args:
        server: an `mcp` `Server` / `MCPServer`, or a zero-argument factory of one
            (called when the runner starts).
        name: the declaration's `name` (default: the server's `name`, else `"mcp"`).
    """

    __slots__ = ("name", "server")

    def __init__(self, server: McpServerObject | Callable[[], McpServerObject], name: str | None = None) -> None:
        self.server = server
        self.name = name

    @classmethod
    def of(cls, value: McpServerLike) -> McpServer:
        """`value` when it is an [`McpServer`][acp_fast.roles.mcp.McpServer], else `McpServer(value)` (its own name)."""
        return value if isinstance(value, McpServer) else cls(value)

    def check(self) -> None:
        """Raise `TypeError` unless `server` is an `mcp` server or a callable."""
        from mcp.server.lowlevel import Server
        from mcp.server.mcpserver import MCPServer

        if not isinstance(self.server, (Server, MCPServer)) and not callable(self.server):
            raise TypeError(f"not an mcp Server, MCPServer or a factory of one: {self.server!r}")

    def resolve(self) -> tuple[Server, str]:
        """The low-level `mcp` server to run and the declared name."""
        from mcp.server.lowlevel import Server
        from mcp.server.mcpserver import MCPServer

        server: object = self.server
        if not isinstance(server, (Server, MCPServer)) and callable(server):
            server = server()
        if isinstance(server, MCPServer):
            name = server.name
            # MCPServer runs its low-level server over arbitrary streams only this way
            # (the mcp package's own in-memory transport does the same)
            lowlevel: Server = server._lowlevel_server
        elif isinstance(server, Server):
            name, lowlevel = server.name, server
        else:
            raise TypeError(f"not an mcp Server or MCPServer: {server!r}")
        return lowlevel, self.name or name or "mcp"


if TYPE_CHECKING:  # pragma: no cover
    #: An ``mcp`` server object: a low-level ``Server`` or an ``MCPServer`` (the ``mcp`` extra).
    McpServerObject: TypeAlias = Server | MCPServer
    #: What the attaching helpers take (``with_mcp_servers=[…]``, ``with_mcp_server``): an
    #: ``mcp`` server, a zero-argument factory of one, or an :class:`McpServer` naming it.
    #: For type checkers only (the ``mcp`` extra is optional): import it under ``TYPE_CHECKING``.
    McpServerLike: TypeAlias = Server | MCPServer | Callable[[], Server | MCPServer] | McpServer


def _declared_name(spec: McpServer) -> str:
    if spec.name:
        return spec.name
    name = getattr(spec.server, "name", None)
    return name if type(name) is str and name else "mcp"


def _error(code: int, message: str) -> JsonRpcError:
    return JsonRpcError(code, message)


def _check_envelope(params: Json) -> tuple[str, str, str, JsonObject | None]:
    if type(params) is not dict:
        raise _error(INVALID_PARAMS, "mcp/message params must be an object")
    server_id, request_id, method = params.get("serverId"), params.get("requestId"), params.get("method")
    inner = params.get("params")
    if type(server_id) is not str or type(request_id) is not str or type(method) is not str:
        raise _error(INVALID_PARAMS, "mcp/message needs string serverId, requestId and method")
    if inner is not None and type(inner) is not dict:
        raise _error(INVALID_PARAMS, "mcp/message params.params must be an object or null")
    return server_id, request_id, method, inner


# -- provider side -------------------------------------------------------------------------


class McpServerHost:
    """One MCP server served on one ACP connection under `server_id` (the runner).

    The server runs over an in-memory stream pair (its `run`), started by `start`;
    requests arriving before it is up are queued in the stream. `notify(params)` sends an
    `mcp/message` notification towards the consumer.
    """

    def __init__(self, spec: McpServer, server_id: str, notify: Callable[[JsonObject], object]) -> None:
        import anyio
        from mcp.shared.message import SessionMessage

        spec.check()
        self.spec = spec
        self.server_id = server_id
        self.name = _declared_name(spec)
        self._notify = notify
        self._to_server, self._server_in = anyio.create_memory_object_stream[SessionMessage | Exception](math.inf)
        self._server_out, self._from_server = anyio.create_memory_object_stream[SessionMessage | Exception](math.inf)
        self._active: dict[str, asyncio.Future[JsonObject]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def declaration(self) -> JsonObject:
        """The `mcpServers` entry: `{"type": "acp", "name": …, "serverId": …}`."""
        return {"type": ACP_TRANSPORT, "name": self.name, "serverId": self.server_id}

    @property
    def running(self) -> bool:
        """True while the runner task is started and not finished."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the runner task (once)."""
        if self._task is None and not self._closed:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        import anyio

        try:
            server, _name = self.spec.resolve()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read_server)
                await server.run(self._server_in, self._server_out, server.create_initialization_options())
                tg.cancel_scope.cancel()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("MCP server %r (%s) failed", self.name, self.server_id)
        finally:
            self._fail_active(_error(BACKEND_FAILED, f"MCP server {self.server_id!r} stopped"))

    async def _read_server(self) -> None:
        from mcp.shared.message import ServerMessageMetadata
        from mcp.types import JSONRPCError, JSONRPCNotification, JSONRPCResponse

        async for item in self._from_server:
            if isinstance(item, Exception):
                logger.debug("MCP server %s stream error: %r", self.server_id, item)
                continue
            msg = item.message
            if isinstance(msg, (JSONRPCResponse, JSONRPCError)):
                fut = self._active.pop(str(msg.id), None) if msg.id is not None else None
                if fut is None or fut.done():
                    continue
                if isinstance(msg, JSONRPCResponse):
                    fut.set_result({"result": msg.result})
                else:
                    fut.set_result({"error": msg.error.model_dump(by_alias=True, mode="json", exclude_unset=True)})
            elif isinstance(msg, JSONRPCNotification):
                meta = item.metadata
                related = meta.related_request_id if isinstance(meta, ServerMessageMetadata) else None
                if related is None or str(related) not in self._active:
                    continue  # the binding carries request-scoped notifications only
                params: JsonObject = {"serverId": self.server_id, "requestId": str(related),
                                          "method": msg.method}
                if msg.params is not None:
                    params["params"] = msg.params
                try:
                    self._notify(params)
                except Exception:
                    logger.debug("mcp/message notification dropped", exc_info=True)

    def _send(self, message: JSONRPCRequest | JSONRPCNotification) -> None:
        from mcp.shared.message import SessionMessage

        self._to_server.send_nowait(SessionMessage(message))

    async def handle(self, rctx: RequestContext, request_id: str, method: str,
                     params: JsonObject | None) -> JsonObject:
        """Serve one `mcp/message` request; returns the outcome carrier."""
        from mcp.types import JSONRPCNotification, JSONRPCRequest

        if self._closed:
            raise _error(SERVER_UNAVAILABLE, f"no MCP server registered for serverId {self.server_id!r}")
        if self._task is not None and self._task.done():
            raise _error(BACKEND_FAILED, f"MCP server {self.server_id!r} stopped")
        if request_id in self._active:
            raise _error(INVALID_PARAMS, f"MCP request {request_id!r} is already active on {self.server_id!r}")
        if len(self._active) >= MAX_ACTIVE_REQUESTS:
            raise _error(RESOURCE_LIMIT_EXCEEDED, "too many active MCP requests")
        self.start()
        fut: asyncio.Future[JsonObject] = asyncio.get_running_loop().create_future()
        self._active[request_id] = fut
        try:
            self._send(JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method, params=params))
        except Exception as exc:
            self._active.pop(request_id, None)
            raise _error(BACKEND_FAILED, f"MCP server {self.server_id!r} is not accepting requests") from exc
        cancelled = asyncio.ensure_future(rctx.wait_cancelled())
        try:
            await asyncio.wait((fut, cancelled), return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if fut.done():
            return fut.result()
        # the caller cancelled: tell the server, answer -32800
        self._active.pop(request_id, None)
        fut.cancel()
        with contextlib.suppress(Exception):
            self._send(JSONRPCNotification(jsonrpc="2.0", method="notifications/cancelled",
                                           params={"requestId": request_id}))
        raise JsonRpcError(REQUEST_CANCELLED)

    def _fail_active(self, error: JsonRpcError) -> None:
        active, self._active = self._active, {}
        for fut in active.values():
            if not fut.done():
                fut.set_exception(error)

    def close(self) -> None:
        """Stop the runner; active and later requests fail (-33001)."""
        if self._closed:
            return
        self._closed = True
        self._fail_active(_error(SERVER_UNAVAILABLE, f"MCP server {self.server_id!r} was removed"))
        self._to_server.close()
        if self._task is not None and not self._task.done():
            self._task.cancel()


class McpRoutes:
    """The MCP servers one ACP connection serves to one peer, by server id (connection-scoped).

    Its `mcp/message` handler is a dynamic handler of the peer's messages
    (`AcpConnection.add_dynamic_handler`, added with the first server): a request for a
    server id it does not serve (or not an `mcp/message` envelope at all) goes on when
    something else takes it (the builder's own `mcp/message` handler, a proxy's forwarding),
    else is answered -33001 (-32602).

    Args:
        connection: the connection.
        peer: the peer the servers are served to (default: the connection's own peer; a
            proxy's successor for `ProxyConnection.serve_mcp_server`).

    Attributes:
        connection: the connection.
        peer: the peer the servers are served to.
        hosts: server id -> the server's `McpServerHost`.
    """

    def __init__(self, connection: McpConnection, peer: McpPeer | None = None) -> None:
        self.connection = connection
        self.peer: McpPeer = peer if peer is not None else connection
        self.hosts: dict[str, McpServerHost] = {}
        self._used: set[str] = set()
        self._handler: DynamicHandler | None = None
        connection.closed.add_done_callback(lambda _f: self.close())

    def new_id(self) -> str:
        """A server id not used on this connection before (`acp-fast-mcp-<16 hex>`)."""
        while True:
            server_id = "acp-fast-mcp-" + _token_hex(8)
            if server_id not in self._used:
                self._used.add(server_id)
                return server_id

    def _notify(self, params: JsonObject) -> bool:
        return self.peer.send_notification(MCP_MESSAGE, params)

    def add(self, spec: McpServer) -> McpServerHost:
        """Serve `spec` under a new server id (its runner started now); returns its host."""
        host = McpServerHost(spec, self.new_id(), self._notify)
        self.hosts[host.server_id] = host
        if self._handler is None:
            self._handler = self.peer.add_dynamic_handler(MCP_MESSAGE, self.on_request)
        host.start()
        return host

    def remove(self, host: McpServerHost) -> None:
        """Stop serving `host` (its active and later requests fail with -33001)."""
        if self.hosts.get(host.server_id) is host:
            del self.hosts[host.server_id]
        host.close()

    def route(self, params: Json) -> tuple[McpServerHost | None, str, str, JsonObject | None]:
        """`(host or None, requestId, method, inner params)` of an `mcp/message` envelope.

        Raises:
            JsonRpcError: -32602 when `params` is not an `mcp/message` envelope.
        """
        server_id, request_id, method, inner = _check_envelope(params)
        return self.hosts.get(server_id), request_id, method, inner

    def on_request(self, params: Json, cx: Context) -> RequestResult:
        """The `mcp/message` request handler (`(params, cx)`, a dynamic handler)."""
        passes_on = self._handler is not None and self._handler.passes_on
        try:
            host, request_id, method, inner = self.route(params)
        except JsonRpcError:
            if passes_on:
                return NOT_HANDLED
            raise
        if host is None:
            if passes_on:
                return NOT_HANDLED
            raise _error(SERVER_UNAVAILABLE, f"no MCP server registered for serverId {params.get('serverId')!r}")
        return host.handle(cast("RequestContext", cx.request), request_id, method, inner)  # a request's cx

    def close(self) -> None:
        """Stop every server (the connection closed)."""
        hosts, self.hosts = self.hosts, {}
        for host in hosts.values():
            host.close()


class McpState:
    """The MCP-over-ACP state of one ACP connection: its [`mcp`][acp_fast.roles.AcpConnection.mcp].

    Attributes:
        connection: the connection.
        routes: the MCP servers it serves (`McpRoutes`), `None` until one is attached.
        calls: the routing of `mcp/message` notifications to the MCP sessions open on it
            (`McpCalls`), `None` until [`open_mcp_session`][acp_fast.roles.mcp.open_mcp_session] opens one.
    """

    __slots__ = ("calls", "connection", "routes")

    def __init__(self, connection: McpConnection) -> None:
        self.connection = connection
        self.routes: McpRoutes | None = None
        self.calls: McpCalls | None = None

    def serve(self, peer: McpPeer | None = None) -> McpRoutes:
        """The connection's `McpRoutes` (made on first use, serving `peer`: by default the
        connection's own peer)."""
        if self.routes is None:
            self.routes = McpRoutes(self.connection, peer)
        return self.routes

    def consume(self) -> McpCalls:
        """The connection's `McpCalls` (made on first use)."""
        if self.calls is None:
            self.calls = McpCalls(self.connection)
        return self.calls


class McpAttachment:
    """The MCP servers attached to one session setup request (pending until it succeeds).

    Attributes:
        hosts: the attached servers (their `server_id` and `declaration`).
        state: `"pending"`, `"attached"` (kept for the connection's lifetime) or
            `"removed"` (the setup failed or was cancelled).
    """

    def __init__(self, routes: McpRoutes, hosts: list[McpServerHost]) -> None:
        self._routes = routes
        self.hosts = hosts
        self.state = "pending"

    @property
    def declarations(self) -> list[JsonObject]:
        """The `mcpServers` entries of the attached servers, in order."""
        return [host.declaration for host in self.hosts]

    def promote(self) -> None:
        """The setup succeeded: a pending attachment becomes `"attached"`."""
        if self.state == "pending":
            self.state = "attached"

    def remove(self) -> None:
        """The setup failed or was cancelled: stop serving the servers (once); `"removed"`."""
        if self.state != "removed":
            self.state = "removed"
            for host in self.hosts:
                self._routes.remove(host)


class McpSetupRequest(SentRequest[_T]):
    """A session setup request with MCP servers attached.

    Attributes:
        mcp: the `McpAttachment` (pending until the setup succeeds).
    """

    __slots__ = ("mcp",)

    def __init__(self, pending: PendingRequest | None, coro: Coroutine[object, object, _T],
                 attachment: McpAttachment) -> None:
        super().__init__(pending, coro)
        self.mcp = attachment


def attach_for_setup(
    connection: McpConnection,
    servers: Sequence[McpServerLike],
    mcp_servers: Sequence[Mapping[str, Json]] | None,
    publish: Callable[[list[Mapping[str, Json]]], SentRequest[_T]],
) -> McpSetupRequest[_T]:
    """Attach `servers` for one setup request, then `publish(mcp_servers + declarations)`.

    Routes are installed and runners started before `publish` runs; the returned request
    resolves like the published one, and promotes the attachment on success or removes it
    on any failure (error response, cancellation, closed connection).

    Raises:
        TypeError: `connection` does not speak v2.
    """
    if not connection.profile.mcp_over_acp:
        raise TypeError("MCP-over-ACP session attachments need a v2 connection (Client.v2())")
    specs = [McpServer.of(server) for server in servers]
    for spec in specs:
        spec.check()
    routes = connection.mcp.serve()
    attachment = McpAttachment(routes, [routes.add(spec) for spec in specs])
    try:
        sent = publish([*(mcp_servers or ()), *attachment.declarations])
    except BaseException:
        attachment.remove()
        raise

    async def settled() -> _T:
        try:
            result = await sent
        except BaseException:
            attachment.remove()
            raise
        attachment.promote()
        return result

    return McpSetupRequest(sent.pending, settled(), attachment)


def attachments(connection: McpConnection) -> dict[str, McpServerHost]:
    """The MCP servers `connection` currently serves, by server id (for inspection)."""
    routes = connection.mcp.routes
    return dict(routes.hosts) if routes is not None else {}


# -- proxy: one global server --------------------------------------------------------------


def install_proxy_server(connection: McpProxyConnection, server: McpServerLike) -> McpServerHost:
    """Serve `server` on a v2 proxy connection under one connection-scoped id: the same as
    `ProxyConnection.serve_mcp_server`.

    Its declaration is added to the `mcpServers` of every setup request the proxy sends to its
    successor; `mcp/message` requests from the successor for that id are served, others are
    forwarded as usual.

    Returns:
        The server's `McpServerHost`.
    """
    return connection.serve_mcp_server(server)


def with_declaration(method: str, params: Json, declaration: Mapping[str, Json]) -> Json:
    """The params of a `method` request a proxy sends to its successor: for a session
    setup request, with `declaration` appended to `mcpServers` (nothing else changed)."""
    if method not in SETUP_METHODS or type(params) is not dict:
        return params
    servers = params.get("mcpServers")
    out = dict(params)
    out["mcpServers"] = [*(servers if type(servers) is list else ()), dict(declaration)]
    return out


# -- consumer side -------------------------------------------------------------------------


def acp_mcp_servers(params: Json) -> list[JsonObject]:
    """The ACP-transport declarations in a setup request's `mcpServers`."""
    servers = params.get("mcpServers") if type(params) is dict else None
    if type(servers) is not list:
        return []
    return [s for s in servers if type(s) is dict and s.get("type") == ACP_TRANSPORT
            and type(s.get("serverId")) is str]


class McpCalls:
    """Routes incoming `mcp/message` notifications to the open MCP session owning the
    request (a dynamic notification handler of the connection; a notification no open session
    owns goes on to the connection's own handler, if any)."""

    def __init__(self, connection: McpConnection) -> None:
        self.owners: dict[tuple[str, str], Callable[[JsonObject], None]] = {}
        connection.add_dynamic_handler(MCP_MESSAGE, self.on_notification, kind="notification")

    def on_notification(self, params: Json, cx: Context) -> object:
        """The `mcp/message` notification handler (`(params, cx)`, a dynamic handler)."""
        if type(params) is not dict:
            return NOT_HANDLED
        owner = self.owners.get((params.get("serverId"), params.get("requestId")))  # type: ignore[arg-type]
        if owner is None:
            return NOT_HANDLED
        owner(params)
        return None


_SESSION_IDS = itertools.count(1)


@contextlib.asynccontextmanager
async def open_mcp_session(connection: Peer, server: Mapping[str, Json] | str, *,
                           discover: bool = True, **session_kwargs: object) -> AsyncIterator[ClientSession]:
    """An `mcp` `ClientSession` to a server declared with the ACP transport.

    Each MCP request becomes an `mcp/message` request on `connection` (an agent's
    connection: `cx.connection`); its cancellation sends `$/cancel_request`.

    Args:
        server: the declaration (`{"type": "acp", "serverId": …}`) or the server id.
        discover: probe `server/discover` first (adopting the stateless MCP revision).
        **session_kwargs: passed to `ClientSession` (`client_info`, callbacks …).
    """
    import anyio
    from mcp.client.session import ClientSession
    from mcp.shared.message import SessionMessage
    from mcp.types import (
        ErrorData,
        JSONRPCError,
        JSONRPCNotification,
        JSONRPCRequest,
        JSONRPCResponse,
    )

    server_id = server if isinstance(server, str) else server.get("serverId")
    if type(server_id) is not str:
        raise ValueError(f"not an ACP-transport MCP server declaration: {server!r}")
    # every Peer (a handler's cx.connection) is an AcpConnection
    calls = cast("McpConnection", connection).mcp.consume()
    prefix = f"acp-fast-{next(_SESSION_IDS)}-{_token_hex(4)}-"
    to_client, client_in = anyio.create_memory_object_stream[SessionMessage | Exception](math.inf)
    client_out, from_client = anyio.create_memory_object_stream[SessionMessage](math.inf)
    outer: dict[object, Request[Json]] = {}  # inner JSON-RPC id -> the outer mcp/message request
    tasks: set[asyncio.Task[None]] = set()

    def deliver(params: JsonObject) -> None:
        inner = params.get("params")
        to_client.send_nowait(SessionMessage(JSONRPCNotification(
            jsonrpc="2.0", method=params["method"], params=inner if type(inner) is dict else None)))

    async def call(msg: JSONRPCRequest) -> None:
        request_id = prefix + str(msg.id)
        envelope: JsonObject = {"serverId": server_id, "requestId": request_id, "method": msg.method}
        if msg.params is not None:
            envelope["params"] = msg.params
        calls.owners[(server_id, request_id)] = deliver
        reply: JSONRPCResponse | JSONRPCError
        try:
            pending = connection.send_request(MCP_MESSAGE, envelope)
            outer[msg.id] = pending
            carrier = await pending
            if type(carrier) is dict and "result" in carrier:
                result = carrier["result"]
                reply = JSONRPCResponse(jsonrpc="2.0", id=msg.id, result=result if type(result) is dict else {})
            elif type(carrier) is dict and type(carrier.get("error")) is dict:
                reply = JSONRPCError(jsonrpc="2.0", id=msg.id, error=ErrorData.model_validate(carrier["error"]))
            else:
                reply = JSONRPCError(jsonrpc="2.0", id=msg.id, error=ErrorData(
                    code=BACKEND_FAILED, message="invalid mcp/message response"))
        except JsonRpcError as exc:
            reply = JSONRPCError(jsonrpc="2.0", id=msg.id, error=ErrorData(
                code=exc.code, message=exc.message, data=exc.data))
        finally:
            outer.pop(msg.id, None)
            calls.owners.pop((server_id, request_id), None)
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            to_client.send_nowait(SessionMessage(reply))

    async def pump() -> None:
        async for item in from_client:
            msg = item.message
            if isinstance(msg, JSONRPCRequest):
                task = asyncio.ensure_future(call(msg))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            elif isinstance(msg, JSONRPCNotification) and msg.method == "notifications/cancelled":
                pending = outer.get((msg.params or {}).get("requestId"))
                if pending is not None:
                    pending.cancel()  # $/cancel_request for the outer request
            # other client notifications and responses have no carrier in the binding

    pump_task = asyncio.ensure_future(pump())
    try:
        async with ClientSession(client_in, client_out, **cast("dict[str, Any]", session_kwargs)) as session:
            if discover:
                await session.discover()
            yield session
    finally:
        pump_task.cancel()
        for task in list(tasks):
            task.cancel()
        for pending in list(outer.values()):
            pending.cancel()
        to_client.close()
        client_out.close()
        with contextlib.suppress(BaseException):
            await pump_task
