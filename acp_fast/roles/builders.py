"""The builders: they collect handlers and run what they build.

A builder only collects handlers; when it serves or connects, it freezes them into a
[`HandlerTable`][acp_fast.roles.table.HandlerTable] and hands that to a new connection, so a
builder can serve many connections and later changes never reach a running one.

The verbs are the same everywhere: `serve(transport)` answers a peer until it hangs up
(agents, proxies, routers); `connect(transport)` is an `async with` connection and
`connect_with(transport, main)` runs `main(connection)` (clients); the connector's
`run(transport_factory)` runs the selected client's `main`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, Union, cast, overload

from .._version import __version__
from ..tracing import Tracing, env_tracing, instrument
from ..jsonrpc import Connection
from ..jsontypes import Json, JsonObject
from ..protocol import negotiation as nego
from ..protocol.methods import Method, NotificationMethod, RequestMethod
from ..protocol.surface import WireSurface
from .client import ClientConnection, InitializeHooks
from .connection import AcpConnection, AgentConnection
from .mcp import McpServer

if TYPE_CHECKING:  # pragma: no cover
    from .mcp import McpServerObject
from .proxy import ProxyConnection
from ._hot import Context, ProxyContext
from .context import Deferred, Version
from .names import check_handler_method
from .streams import EngineChoice, Transport, open_connection, open_stream, resolve_engine
from .table import Handler, HandlerTable, Main, UpdateHandler

__all__ = [
    "AgentBuilder",
    "Builder",
    "ClientBuilder",
    "EngineChoice",
    "ProxyBuilder",
    "Transport",
    "open_stream",
    "resolve_engine",
]

_T = TypeVar("_T")
_B = TypeVar("_B", bound="Builder[int, AcpConnection[int], Context]")
_PB = TypeVar("_PB", bound="ProxyBuilder[int]")
#: the connection type a builder binds (``AgentConnection[V]``, ``ClientConnection[V]``, …)
_C = TypeVar("_C", bound="AcpConnection[int]", covariant=True)
#: the context type its handlers get (``Context``, or ``ProxyContext`` for proxies)
_X = TypeVar("_X", bound=Context, covariant=True)
_F = TypeVar("_F", bound=Callable[..., Any])
_P = TypeVar("_P")
_R = TypeVar("_R")

#: A typed request handler: ``fn(params: P, cx: X) -> R`` (or an awaitable of ``R``).
TypedRequestHandler = Callable[[_P, _X], Union[_R, Awaitable[_R], Deferred[_R]]]
#: A typed notification handler: ``fn(params: P, cx: X)``.
TypedNotificationHandler = Callable[[_P, _X], Union[None, Awaitable[None]]]
#: A handler registered by method name: ``fn(params, cx: X)`` (see :data:`~acp_fast.roles.Handler`).
NamedHandler = Callable[[Json, _X], object]

def _default_info() -> dict[str, str]:
    return {"name": "acp_fast", "version": __version__}


class Builder(Generic[Version, _C, _X]):
    """Common part of the role builders: the handler registry and the ways to run it.

    Generic in the version (`V1`, `V2`), the connection type it binds and the context
    type its handlers get: `Client.v2()` is a `ClientBuilder[V2]` whose `connect`
    gives a `ClientConnection[V2]`.
    """

    #: the connection class :meth:`bind` makes (and whose ``lazy_frames`` its JSON-RPC
    #: connections get); its ``role`` is the builder's
    connection_type: ClassVar[type[AcpConnection[int]]] = AgentConnection
    #: ``"agent"``, ``"client"`` or ``"proxy"``: the ``role`` of ``connection_type`` (set per
    #: subclass from it, never restated)
    role: ClassVar[str] = AgentConnection.role

    #: whether this role's connections run prompt turns (an agent's: its traced span of a
    #: received ``session/prompt`` is the turn's; a proxy only forwards them)
    runs_prompt_turns: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.role = cls.connection_type.role

    def __init__(self, version: Version) -> None:
        if version not in nego.SUPPORTED_VERSIONS:
            raise ValueError(f"unsupported ACP protocol version {version}")
        self.version = version
        self._guarded = True
        self._info: JsonObject = _default_info()
        self._requests: dict[str, Handler] = {}
        self._notifications: dict[str, Handler] = {}
        self._successor_requests: dict[str, Handler] = {}
        self._successor_notifications: dict[str, Handler] = {}
        self._on_update: UpdateHandler | None = None
        self._main: Main | None = None
        self._tracing: Tracing | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} v{self.version}>"

    # -- registering ----------------------------------------------------------------------

    def _method(self, name: str | Method[Any, Any], kind: str, from_successor: bool = False) -> str:
        """A method name, a typed descriptor (`acp_fast.protocol.methods_v2.session.prompt`),
        or the method whose params type is the schema type `name`, checked against the
        methods this side receives ([`check_handler_method`][acp_fast.roles.names.check_handler_method]).

        Raises:
            ValueError: a descriptor of another kind or version, an unknown type name, or a
                method name this side does not receive in this version (not `_`-prefixed).
        """
        if isinstance(name, Method):
            if name.kind != kind:
                raise ValueError(f"{name!r} is a {name.kind}, not a {kind}")
            if name.version != self.version:
                raise ValueError(f"{name!r} is an ACP v{name.version} method; this builder is v{self.version}")
            name = name.name
        elif name[:1].isupper():
            surface = WireSurface.for_version(self.version)
            for method in sorted(surface.methods):
                info = surface.method_info(method, kind)
                if info is not None and info.params_type == name:
                    name = method
                    break
            else:
                raise ValueError(f"no ACP v{self.version} {kind} has params type {name!r}")
        return check_handler_method(name, version=self.version, role=self.role, kind=kind,
                                    from_successor=from_successor)

    @overload
    def on_request(self: _B, method: RequestMethod[_P, _R], fn: TypedRequestHandler[_P, _X, _R]) -> _B: ...

    @overload
    def on_request(self, method: RequestMethod[_P, _R], fn: None = None
                   ) -> Callable[[TypedRequestHandler[_P, _X, _R]], TypedRequestHandler[_P, _X, _R]]: ...

    @overload
    def on_request(self: _B, method: str, fn: NamedHandler[_X]) -> _B: ...

    @overload
    def on_request(self, method: str, fn: None = None) -> Callable[[_F], _F]: ...

    def on_request(self, method: str | RequestMethod[Any, Any], fn: Callable[..., object] | None = None) -> object:
        """Handle requests `method` with `fn(params, cx)`; without `fn`, a decorator.

        `method` is a typed descriptor (`methods.session.prompt` from
        `acp_fast.protocol.methods_v1`/`methods_v2`: the handler's params and result are
        then type-checked), a method name, or a schema type name such as `"PromptRequest"`.
        `fn` returns the result (or an awaitable of it); raising
        [`JsonRpcError`][acp_fast.errors.JsonRpcError] answers with that error.

        Example:
            >>> from acp_fast.protocol import methods_v2 as methods
            >>> agent = Agent.v2().on_request("session/new", lambda p, cx: {"sessionId": "s"})
            >>> @agent.on_request(methods.session.prompt)
            ... async def prompt(params, cx):
            ...     return {"messageId": "m1"}

        Raises:
            ValueError: a descriptor of another version or kind, an unknown type name, or a
                method name that is not a request this side receives in this version and
                does not start with `_` (extension methods); the message names the nearest
                known name (see [`acp_fast.roles.names`][acp_fast.roles.names]).
        """
        return self._register(self._requests, method, "request", fn)

    @overload
    def on_notification(self: _B, method: NotificationMethod[_P], fn: TypedNotificationHandler[_P, _X]) -> _B: ...

    @overload
    def on_notification(self, method: NotificationMethod[_P], fn: None = None
                        ) -> Callable[[TypedNotificationHandler[_P, _X]], TypedNotificationHandler[_P, _X]]: ...

    @overload
    def on_notification(self: _B, method: str, fn: NamedHandler[_X]) -> _B: ...

    @overload
    def on_notification(self, method: str, fn: None = None) -> Callable[[_F], _F]: ...

    def on_notification(self, method: str | NotificationMethod[Any], fn: Callable[..., object] | None = None) -> object:
        """Handle notifications `method` with `fn(params, cx)`; as [`on_request`][acp_fast.roles.builders.Builder.on_request]."""
        return self._register(self._notifications, method, "notification", fn)

    @overload
    def on_session_update(self: _B, fn: UpdateHandler) -> _B: ...

    @overload
    def on_session_update(self, fn: None = None) -> Callable[[_F], _F]: ...

    def on_session_update(self, fn: UpdateHandler | None = None) -> object:
        """Handle `session/update` with `fn(update: SessionUpdate, cx)` (read-gated)."""
        if fn is None:
            def decorator(f: _F) -> _F:
                self._on_update = f
                return f
            return decorator
        self._on_update = fn
        return self

    def _register(self, table: dict[str, Handler], name: str | Method[Any, Any], kind: str,
                  fn: Callable[..., object] | None, from_successor: bool = False) -> object:
        method = self._method(name, kind, from_successor)
        if fn is None:
            def decorator(f: _F) -> _F:
                table[method] = f
                return f
            return decorator
        table[method] = fn
        return self

    def with_info(self: _B, name: str, version: str, **fields: Json) -> _B:
        """The `Implementation` sent as `info` / `clientInfo` / `agentInfo`."""
        self._info = {"name": name, "version": version, **fields}
        return self

    def without_acp_version_guard(self: _B) -> _B:
        """Disable negotiation handling and the initialization guard (raw selectors only)."""
        self._guarded = False
        return self

    def with_tracing(self: _B, tracer: object = None, *, notifications: bool = False) -> _B:
        """Trace every connection of this builder with OpenTelemetry (see [`acp_fast.tracing`][acp_fast.tracing]).

        A span per request sent and received (and per prompt turn), W3C trace context in
        the params' `_meta` both ways; no span per notification unless `notifications`.
        Without this call a connection is traced only when `ACP_FAST_OTEL=1` is set;
        either way the choice is made once per connection, as it is bound.

        Args:
            tracer: the OpenTelemetry `Tracer` (default: the global provider's `acp_fast` one).
            notifications: also a span per received notification.

        Raises:
            MissingOtelError: `opentelemetry-api` is not installed (the `otel` extra).
        """
        self._tracing = Tracing.make(tracer, notifications=notifications)
        return self

    def _traced(self, conn: Connection) -> Connection:
        """`conn`, traced when this builder or the environment asks for it."""
        tracing = self._tracing if self._tracing is not None else env_tracing()
        return conn if tracing is None else instrument(conn, tracing, prompt_turns=self.runs_prompt_turns)

    def with_main(self: _B, main: Callable[[_C], Awaitable[object]]) -> _B:
        """The `main(connection)` a client protocol connector runs for this implementation."""
        self._main = cast(Main, main)  # called with the connection bind() made
        return self

    # -- running ----------------------------------------------------------------------------

    def table(self) -> HandlerTable:
        """The frozen handler table a new connection gets (a snapshot of this builder)."""
        return HandlerTable(
            version=self.version,
            role=self.role,
            guarded=self._guarded,
            info=MappingProxyType(dict(self._info)),
            requests=MappingProxyType(dict(self._requests)),
            notifications=MappingProxyType(dict(self._notifications)),
            on_update=self._on_update,
            successor_requests=MappingProxyType(dict(self._successor_requests)),
            successor_notifications=MappingProxyType(dict(self._successor_notifications)),
            main=self._main,
        )

    def bind(self, conn: Connection) -> _C:
        """Run this implementation on an existing JSON-RPC connection."""
        return cast("_C", self.connection_type(self._traced(conn), self.table()))

    async def serve(self, transport: Transport, *, engine: EngineChoice = None) -> None:
        """Serve on `transport` (a `Stream` or an awaitable of one) until it closes."""
        stream = await open_stream(transport)
        conn = open_connection(stream, engine, self.connection_type.lazy_frames)
        self.bind(conn)
        await conn.wait_closed()

    @contextlib.asynccontextmanager
    async def connect(self, transport: Transport, *, engine: EngineChoice = None) -> AsyncIterator[_C]:
        """`async with builder.connect(spawn(cmd)) as conn:` — a connection closed on exit.

        Example:

        ```python
        async with Client.v2().connect(spawn("python agent.py")) as conn:
            await conn.initialize()
            opened = await conn.build_session(cwd="/tmp")
        ```
        """
        stream = await open_stream(transport)
        conn = open_connection(stream, engine, self.connection_type.lazy_frames)
        acp = self.bind(conn)
        try:
            yield acp
        finally:
            conn.close()
            await conn.wait_closed()

    async def connect_with(self, transport: Transport, main: Callable[[_C], Awaitable[_T]], *,
                           engine: EngineChoice = None) -> _T:
        """Run `main(connection)` on a connection over `transport`, then close it.

        Returns:
            What `main` returned.
        """
        async with self.connect(transport, engine=engine) as acp:
            return await main(acp)


class AgentBuilder(Builder[Version, AgentConnection[Version], "Context[AgentConnection[Version]]"]):
    """An agent implementation (`Agent.builder()` for v1, `Agent.v2()` for v2)."""

    connection_type = AgentConnection
    runs_prompt_turns = True


class ClientBuilder(Builder[Version, ClientConnection[Version], "Context[ClientConnection[Version]]"]):
    """A client implementation (`Client.builder()` for v1, `Client.v2()` for v2)."""

    connection_type = ClientConnection

    def bind(self, conn: Connection, *, hooks: InitializeHooks | None = None) -> ClientConnection[Version]:
        """Run this client on an existing JSON-RPC connection (`hooks`: a protocol
        connector's part in `initialize`)."""
        return ClientConnection(self._traced(conn), self.table(), hooks=hooks)


class ProxyBuilder(Builder[Version, ProxyConnection[Version], "ProxyContext[ProxyConnection[Version]]"]):
    """A proxy (`Proxy.builder()` / `Proxy.v2()`): initialized by `_proxy/initialize`.

    Unhandled requests/notifications from the predecessor are forwarded to the successor
    and vice versa; `$/cancel_request` is hop-local and never forwarded.
    """

    connection_type = ProxyConnection
    _mcp_server: McpServer | None = None

    def with_mcp_server(self: _PB, server: McpServerObject | Callable[[], McpServerObject],
                        name: str | None = None) -> _PB:
        """Serve one MCP server (MCP-over-ACP) on every connection of this proxy.

        Each connection gives it one connection-scoped server id and adds its declaration
        (`{"type": "acp", …}`) to the `mcpServers` of every `session/new`,
        `session/resume` and `session/fork` it sends to its successor; nothing else in
        those requests changes ([`ProxyConnection.serve_mcp_server`][acp_fast.roles.proxy.ProxyConnection.serve_mcp_server]). `server`: an `mcp`
        `Server` / `MCPServer` or a factory of one (see `acp_fast.roles.mcp`).
        """
        self._mcp_server = McpServer(server, name)
        return self

    def bind(self, conn: Connection) -> ProxyConnection[Version]:
        acp = super().bind(conn)
        if self._mcp_server is not None:
            acp.serve_mcp_server(self._mcp_server)
        return acp

    @overload
    def on_successor_request(self: _PB, method: str, fn: NamedHandler[ProxyContext]) -> _PB: ...

    @overload
    def on_successor_request(self, method: str, fn: None = None) -> Callable[[_F], _F]: ...

    def on_successor_request(self, method: str, fn: Callable[..., object] | None = None) -> object:
        """Handle requests that arrive from the successor (inside `_proxy/successor`).

        Raises:
            ValueError: not a request the client side receives in this version, and not
                `_`-prefixed (see [`on_request`][acp_fast.roles.builders.ProxyBuilder.on_request]).
        """
        return self._register(self._successor_requests, method, "request", fn, from_successor=True)

    @overload
    def on_successor_notification(self: _PB, method: str, fn: NamedHandler[ProxyContext]) -> _PB: ...

    @overload
    def on_successor_notification(self, method: str, fn: None = None) -> Callable[[_F], _F]: ...

    def on_successor_notification(self, method: str, fn: Callable[..., object] | None = None) -> object:
        """Handle notifications that arrive from the successor."""
        return self._register(self._successor_notifications, method, "notification", fn, from_successor=True)
