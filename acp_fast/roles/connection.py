"""One live ACP connection of an agent, a client or a proxy: [`AcpConnection`][acp_fast.roles.connection.AcpConnection].

It sits on a [`Connection`][acp_fast.jsonrpc.Connection] and adds ACP semantics from
[`acp_fast.protocol`][acp_fast.protocol]: version negotiation, the initialization guard, and the wire
surface of its version (read gate for `session/update`, write guard for everything sent).

A role is data handed to this one connection, not a subclass overriding it: its class data
(`role`, `guard_role`, `proxy_guard`, `refuses_initializing`, `answers_initialize`,
`init_methods`, `lazy_frames`) and its [`Rules`][acp_fast.roles.dispatch.Rules] (the handler
context, the sides of the dispatch, how an incoming initializing request is negotiated and
answered without a handler, which spelling of it arrived, how an initializing request is
sent). The role's own connection type (`AgentConnection`, `ClientConnection`,
`ProxyConnection`) is a facade: it hands its `Rules` over when it is made and adds methods
of its own (`initialize` and the session helpers of a client, the successor of a proxy).

Incoming, every message goes through the connection's
[`Dispatch`][acp_fast.roles.dispatch.Dispatch] (`roles.dispatch`): the guarded slow path until
the connection is ready (`initialize` done, or at once for unchecked v1 roles), then one
installed entry per method in the JSON-RPC connection's per-method tables (one dict lookup,
one call; `session/update` one more lookup for its variant's read-gate check).

Outgoing, every message goes through the connection's one `Sender` (`_hot_py`, compiled on
the compiled hot path): requests, notifications and session updates each take one path (the
initialization guard, the first-message rule, the write surface) until the connection is
ready, then a set lookup (a request or notification) or the compiled check of the update
variant (`send_session_update`) before the line is queued through the JSON-RPC connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar, Generic, Protocol, TypeGuard, TypeVar, cast

from ..errors import INVALID_REQUEST, JsonRpcError
from ..jsonrpc import Connection, PendingRequest, RequestContext, RequestResult
from ..jsontypes import Json, JsonObject
from ..protocol import negotiation as nego
from ..protocol.facts import SESSION_FORK, SESSION_NEW, SESSION_RESUME
from ..protocol.gate import make_gate
from ..protocol.guard import InitializationGuard
from ..protocol.surface import WireSurface
from ._hot import COMPILED as HOT_COMPILED
from ._hot import Sender
from .context import Request, SentRequest, SessionUpdateSender, Version, mapped_request
from .mcp import McpState
from .names import check_handler_method
from .sessions import SessionSetup, SessionStates
from .streams import EngineChoice, Transport, open_connection, open_stream
from .dispatch import (
    INITIALIZE,
    INITIALIZING,
    PROXY_INITIALIZE,
    PROXY_INITIALIZE_SPEC,
    SESSION_UPDATE,
    Dispatch,
    DynamicHandler,
    Rules,
)
from .table import NOT_HANDLED, Handler, HandlerTable
from ..protocol.profile import VersionProfile, profile_of

__all__ = ["INITIALIZE", "NOT_HANDLED", "PROXY_INITIALIZE", "PROXY_INITIALIZE_SPEC", "SESSION_UPDATE", "AcpConnection",
           "AgentConnection", "ConnectionBuilder", "DynamicHandler"]

logger = logging.getLogger("acp_fast.roles")

_T = TypeVar("_T")
_C = TypeVar("_C", bound="AcpConnection[int]")


def _is_awaitable_result(value: object) -> TypeGuard[Awaitable[Json]]:
    return asyncio.iscoroutine(value) or isinstance(value, SentRequest)


_C_co = TypeVar("_C_co", bound="AcpConnection[int]", covariant=True)


#: an agent's rules: the defaults (one frozen value every agent connection shares)
_AGENT_RULES = Rules()


class ConnectionBuilder(Protocol[_C_co]):
    """What [`AcpConnection.spawn_connection`][acp_fast.roles.connection.AcpConnection.spawn_connection] needs of a builder (every builder of
    `acp_fast.roles.builders` is one)."""

    @property
    def connection_type(self) -> type[AcpConnection[int]]:
        """The connection class `bind` makes."""

    def bind(self, conn: Connection) -> _C_co:
        """Run the builder's implementation on `conn`."""


class AcpConnection(Generic[Version]):
    """What every live ACP connection is (Rust `ConnectionTo`), generic in its version.

    The role's own connection type is a facade that hands its
    [`Rules`][acp_fast.roles.dispatch.Rules] to this one connection and adds methods of its
    own, never overriding one of these: [`AgentConnection`][acp_fast.roles.connection.AgentConnection],
    [`ClientConnection`][acp_fast.roles.ClientConnection] (`initialize`, the session helpers),
    [`ProxyConnection`][acp_fast.roles.ProxyConnection] (the successor). Made by the builders
    (`serve`, `connect`, `connect_with`), never directly.
    Every outgoing message passes the initialization guard and the write guard of
    `version`'s wire surface; every incoming one passes the guard, and
    `session/update` also the read gate.

    Attributes:
        version: the ACP version of the implementation (1 or 2).
        role: `"agent"`, `"client"` or `"proxy"`.
        guard: the [`InitializationGuard`][acp_fast.protocol.guard.InitializationGuard].
        surface: the [`WireSurface`][acp_fast.protocol.surface.WireSurface] of `version`.
        raw: the underlying [`Connection`][acp_fast.jsonrpc.Connection] (no ACP checks at all).
        sessions: tracked v2 session states (`SessionStates`).
        info: this side's `Implementation` object.
        rules: the role's [`Rules`][acp_fast.roles.dispatch.Rules] (an agent's: the defaults).
    """

    role: ClassVar[str] = "agent"
    #: the initialization-guard role of a guarded connection of this type
    guard_role: ClassVar[str] = "responder"
    #: whether the guard is a proxy's (it refuses a plain ``initialize``; see
    #: [`InitializationGuard`][acp_fast.protocol.guard.InitializationGuard])
    proxy_guard: ClassVar[bool] = False
    #: the -32600 ``data`` when this side refuses to send an initializing request itself
    #: (a proxy: its conductor initializes it); ``None``: the guard decides
    refuses_initializing: ClassVar[str | None] = None
    #: whether this side answers ``initialize`` itself (negotiation applies when guarded)
    answers_initialize: ClassVar[bool] = True
    #: the requests that initialize this side on input, every spelling of one request (a
    #: handler registered under any of them serves them all)
    init_methods: ClassVar[frozenset[str]] = frozenset({INITIALIZE})
    #: whether this connection type wants a lazy JSON-RPC connection (``Decoder(lazy=True)``,
    #: params decoded on first access): proxies, which mostly forward bytes they never read
    lazy_frames = False

    def __init__(self, conn: Connection, table: HandlerTable, *, rules: Rules | None = None,
                 first_rule: str | None = None) -> None:
        if table.role != self.role:
            raise ValueError(f"a {table.role}'s handler table cannot run on a {self.role}'s connection "
                             f"({type(self).__name__})")
        self.rules = rules if rules is not None else _AGENT_RULES
        self.raw = conn
        self.table = table
        self.version: Version = cast("Version", table.version)
        self.info = dict(table.info)
        self.surface = WireSurface.for_version(self.version)
        #: what differs between versions, as data ([`VersionProfile`][acp_fast.protocol.profile.VersionProfile])
        self.profile: VersionProfile = profile_of(self.version)
        self.guard = self._make_guard(table)
        self.sessions = SessionStates()
        # the read gate's fast path: the compiled twin on the compiled hot path (which calls it
        # at C level), whichever engine twin decodes
        self._gate = make_gate(self.surface, compiled=HOT_COMPILED)
        self._notify = conn.outbox.notify  # Connection.notify without the Python call around it
        #: the outgoing side (:class:`~acp_fast.roles._hot_py.Sender`): every request,
        #: notification and session update this connection sends as its role goes through it
        self.sender = Sender(self._gate, self.surface, self._notify, conn.request, self.guard,
                             first_rule, self._send_initializing)
        #: ``send_session_update(session_id, update, *, passthrough=False, **fields)``: send
        #: ``session/update`` ``{"sessionId", "update", …fields}`` through the write guard
        #: (returns False when it was dropped). The one way to send a session update (a
        #: handler's ``cx.send_session_update`` and ``PromptTurn.send`` come here): the
        #: connection's ``sender``, whose compiled fast path takes plain updates once the
        #: connection is ready.
        #:
        #: Raises ``WireSurfaceError`` when the variant (or v2's inner ``state``) is not
        #: defined in the negotiated version, unless ``passthrough`` (forwarding a received
        #: update), and ``SendBufferFull`` when the write buffer is over its limit.
        self.send_session_update: SessionUpdateSender = self.sender
        self._background: set[asyncio.Task[Any]] = set()
        self._children: set[AcpConnection[int]] = set()
        self._mcp: McpState | None = None
        #: where every incoming message goes (:class:`~acp_fast.roles.dispatch.Dispatch`):
        #: the guarded slow path until ready, then one installed entry per method
        self.dispatch = Dispatch(self, conn, table, self._rules(), gate=self._gate,
                                 classify=self.surface.classify_session_update, apply_state=self.sessions.apply,
                                 track=self.sessions.track_request, initialize=self._incoming_initialize)
        conn.closed.add_done_callback(self._on_closed)
        if self.guard.ready:
            self._became_ready()

    def _rules(self) -> Rules:
        """The rules the dispatch runs by: the role's `rules`, as its facade handed them over
        (what the dispatch reads of them is read once, when it is made)."""
        return self.rules

    def _make_guard(self, table: HandlerTable) -> InitializationGuard:
        guarded = table.guarded and self.profile.guarded
        return InitializationGuard(self.version, self.guard_role if guarded else "unchecked",
                                   proxy=self.proxy_guard and table.guarded)

    # -- state --------------------------------------------------------------------------

    @property
    def negotiated_version(self) -> int | None:
        """The version agreed by `initialize` (`None` before)."""
        return self.guard.negotiated

    @property
    def manages_initialize(self) -> bool:
        """True when this side answers `initialize` itself (negotiation applies)."""
        return self.table.guarded and self.answers_initialize

    @property
    def closed(self) -> asyncio.Future[None]:
        """Resolves once the connection and its stream are closed."""
        return self.raw.closed

    def close(self) -> None:
        """Close now (see [`acp_fast.jsonrpc.Connection.close`][acp_fast.jsonrpc.Connection.close])."""
        self.raw.close()

    async def wait_closed(self) -> None:
        """Wait until the connection and its stream are closed."""
        await self.raw.wait_closed()

    @property
    def mcp(self) -> McpState:
        """This connection's MCP-over-ACP state (made on first use): the MCP servers it
        serves and the MCP sessions open on it (see `acp_fast.roles.mcp`)."""
        state = self._mcp
        if state is None:
            state = self._mcp = McpState(self)
        return state

    @property
    def children(self) -> frozenset[AcpConnection[int]]:
        """The child connections spawned from this one that are still open (see
        [`spawn_connection`][acp_fast.roles.connection.AcpConnection.spawn_connection]); all of them are closed when this connection closes."""
        return frozenset(c for c in self._children if not c.raw.closed.done())

    async def drain(self) -> None:
        """Write what is queued and wait while the peer is not reading (backpressure).

        Await it in loops that send many messages (e.g. streaming updates): memory then
        stays bounded however slowly the peer reads. A loop that never awaits is stopped
        by [`SendBufferFull`][acp_fast.errors.SendBufferFull] once the write buffer passes its
        limit (see [`Connection`][acp_fast.jsonrpc.Connection]).
        """
        await self.raw.drain()

    def start_task(self, coro: Coroutine[object, object, _T]) -> asyncio.Task[_T]:
        """Run `coro` in the background, owned by this connection.

        The task is cancelled when the connection closes; an exception it raises is
        logged (never lost silently). Use it to start work from a handler that must not
        delay the handler's answer.
        """
        task = asyncio.ensure_future(coro)
        if self.raw.closed.done():
            task.cancel()
            return task
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background task of %r failed", self, exc_info=task.exception())

    def _on_closed(self, _fut: asyncio.Future[None]) -> None:
        for task in list(self._background):
            task.cancel()
        for child in list(self._children):
            child.close()
        self.sessions.close(self.raw.closed_error(SESSION_UPDATE))

    # -- handlers added at run time, nested connections ----------------------------------

    def add_dynamic_handler(self, method: str, fn: Handler, *, kind: str = "request",
                            from_successor: bool = False) -> DynamicHandler:
        """Add a handler of `method` while the connection runs (Rust `add_dynamic_handler`).

        Dynamic handlers are asked first, oldest first; one that returns `NOT_HANDLED`
        (synchronously) passes the message on, finally to the builder's handler and then the
        side's default (-32601, an ignored notification, or a proxy's forwarding). They get
        `(params, cx)` like builder handlers; for `session/update` (`kind="notification"`) on
        an agent or client they get `(SessionUpdate, cx)` after the read gate and the
        session-state tracking, before the builder's update handler (a proxy relays updates
        ungated: `(params, cx)`).

        Args:
            method: the method it handles.
            fn: the handler, `fn(params, cx)`.
            kind: `"request"` or `"notification"`.
            from_successor: a proxy's: handle what its successor sends (unwrapped from
                `_proxy/successor`, like `ProxyBuilder.on_successor_request`) instead of what
                its predecessor sends.

        Returns:
            The [`DynamicHandler`][acp_fast.roles.connection.DynamicHandler]; `remove()` it (or
            use it as a context manager).

        Raises:
            ValueError: `kind` is neither `"request"` nor `"notification"`, `method` is an
                initializing request (the guard handles those), it is not a `kind` that side
                receives in its version and does not start with `_` (see
                [`acp_fast.roles.names`][acp_fast.roles.names]), or `from_successor` on a connection that is not a
                proxy's.
        """
        if kind not in ("request", "notification"):
            raise ValueError(f"kind must be 'request' or 'notification', not {kind!r}")
        if kind == "request" and method in INITIALIZING:
            raise ValueError(f"{method!r} is handled by the initialization guard")
        if from_successor and self.dispatch.successor is None:
            raise ValueError("only a proxy's connection has a successor side")
        check_handler_method(method, version=self.version, role=self.role, kind=kind, from_successor=from_successor)
        return self.dispatch.add_dynamic(kind, method, fn, from_successor=from_successor)

    async def spawn_connection(self, builder: ConnectionBuilder[_C], transport: Transport, *,
                               engine: EngineChoice = None) -> _C:
        """Start a child connection with its own builder (Rust `spawn_connection`).

        The child speaks `builder`'s role and version (`Client.v2()` gives a v2 client
        connection with the session helpers, whatever this connection is) on `transport`
        (a stream or an awaitable of one, e.g. `spawn(...)`); it runs beside this one and
        is closed when this connection closes. Call it from a handler as
        `await cx.connection.spawn_connection(Client.v2(), spawn(cmd))`.

        Args:
            engine: the engine twin (default: this connection's).

        Returns:
            The child connection (the context its builder selects: an
            [`AcpConnection`][acp_fast.roles.connection.AcpConnection], or a `ProxyConnection` for a proxy builder).
        """
        stream = await open_stream(transport)
        conn = open_connection(stream, engine if engine is not None else self.raw.engine,
                               builder.connection_type.lazy_frames)
        child = builder.bind(conn)
        self._children.add(child)
        conn.closed.add_done_callback(lambda _f: self._children.discard(child))
        if self.raw.closed.done():
            child.close()
        return child

    def spawn_connection_with_context(self, builder: ConnectionBuilder[_C], transport: Transport, *,
                                      engine: EngineChoice = None) -> Awaitable[_C]:
        """Same as [`spawn_connection`][acp_fast.roles.connection.AcpConnection.spawn_connection] (in Python the child's context is always the one
        its builder selects)."""
        return self.spawn_connection(builder, transport, engine=engine)

    # -- becoming ready: the per-connection tables --------------------------------------

    def _became_ready(self) -> None:
        self.sender.update_ready()
        self.dispatch.install()

    def initializes(self, method: str) -> bool:
        """Whether `method` is the request that initializes this side (`initialize`;
        for a proxy `_proxy/initialize` in either spelling)."""
        return method in self.init_methods

    def _init_handler(self, method: str) -> Handler | None:
        """The builder's handler of the initializing request `method` (or `None`): registered
        under `method` or, failing that, another spelling of it (`init_methods`)."""
        requests = self.table.requests
        fn = requests.get(method)
        if fn is None:
            fn = next((requests[m] for m in sorted(self.init_methods) if m in requests), None)
        return fn

    # -- incoming initialize ------------------------------------------------------------

    def _negotiate(self, params: Json) -> Json:
        """Validate an incoming `initialize`; return the params the handler sees (what
        `Rules.negotiate` replaces)."""
        requested = nego.parse_protocol_version(params)
        version = self.version
        if self.profile.exact_initialize:
            nego.select_version(requested, (version,))  # -32022 for another, handler not invoked
            nego.validate_initialize_request(params, version)
            return params if requested == version else nego.canonicalize_v2_initialize(params)
        # v1: any valid version selects v1; newer metadata is normalised (§6.5)
        newer = profile_of(requested) is not self.profile
        seen = nego.normalize_v2_to_v1(params) if newer else dict(params, protocolVersion=version)
        nego.validate_initialize_request(seen, version)
        return seen

    def _incoming_initialize(self, rctx: RequestContext) -> RequestResult:
        """Answer the request that initializes this side, by the role's rules: its spelling
        told (`on_initialize`), its params negotiated (`negotiate`), then its handler, else
        `default_initialize` (else the profile's default result), checked by the guard."""
        rules = self.rules
        message = rctx.message
        method = message.method
        if rules.on_initialize is not None:
            rules.on_initialize(method)
        negotiate = rules.negotiate
        seen = self._negotiate(message.params) if negotiate is None else negotiate(message.params, self.profile)
        guard = self.guard
        token = guard.begin()
        fn = self._init_handler(method)
        try:
            if fn is not None:
                result = fn(seen, rules.context_type(self, rctx, message))
            elif rules.default_initialize is not None:
                result = rules.default_initialize(seen)
            else:
                result = self.profile.default_initialize_result(self.info)
        except BaseException:
            guard.fail(token)
            raise
        if _is_awaitable_result(result):
            return self._finish_initialize_async(result, token)
        return self._finish_initialize(result, token)

    async def _finish_initialize_async(self, aw: Awaitable[Json], token: int) -> Json:
        try:
            result = await aw
        except BaseException:
            self.guard.fail(token)
            raise
        return self._finish_initialize(result, token)

    def _finish_initialize(self, result: Json, token: int) -> Json:
        version = self.version
        if type(result) is dict:
            result = dict(result)
            result["protocolVersion"] = version  # the handler cannot answer another number
        try:
            nego.validate_initialize_response(result, version)
        except JsonRpcError as exc:
            self.guard.fail(token)
            raise nego.invalid_initialize_result(str(exc.data).removeprefix("invalid initialize response: ")) from None
        self._succeed(token)
        return result

    def _succeed(self, token: int) -> None:
        self.guard.succeed(token, self.version)
        if self.guard.ready:
            self._became_ready()

    # -- outgoing -----------------------------------------------------------------------

    def send_request(self, method: str, params: Json = None, *, passthrough: bool = False,
                     timeout: float | None = None) -> Request[Json]:
        """Send a request; returns its handle (`await` it for the result).

        A client's `initialize` goes through `initialize`.

        Args:
            method: the method name.
            params: the params object (or array); may hold `RawJson`.
            passthrough: skip the write guard (relays forwarding what they received). The
                initialization guard still applies.
            timeout: seconds until the handle fails with `asyncio.TimeoutError`.

        Raises:
            JsonRpcError: -32600 when the initialization guard refuses (nothing is sent).
            WireSurfaceError: the negotiated version does not define `method`.
            SendBufferFull: the write buffer is over its limit (await [`drain`][acp_fast.roles.connection.AcpConnection.drain]).
        """
        return self.sender.send_request(method, params, passthrough, timeout)

    def _send_initializing(self, method: str, params: Json) -> Request[Json] | None:
        """An initializing request this side sends through [`send_request`][acp_fast.roles.connection.AcpConnection.send_request]: a proxy
        refuses (`refuses_initializing`); a client's `initialize` is
        [`initialize`][acp_fast.roles.ClientConnection.initialize] (its `Rules.send_initializing`);
        `None` lets the initialization guard decide (it refuses a responder)."""
        if self.refuses_initializing is not None:
            raise JsonRpcError(INVALID_REQUEST, data=self.refuses_initializing)
        send = self.rules.send_initializing
        return None if send is None else send(method, params)

    def send_notification(self, method: str, params: Json = None, *, passthrough: bool = False) -> bool:
        """Send a notification; returns False when it was dropped (guard or closed).

        A `session/update` also has its `update` checked by the write guard.

        Raises:
            WireSurfaceError: the negotiated version does not define `method` (or the
                update variant).
            SendBufferFull: the write buffer is over its limit (await [`drain`][acp_fast.roles.connection.AcpConnection.drain]).
        """
        return self.sender.send_notification(method, params, passthrough)

    def mapped_request(self, method: str, params: Json, fn: Callable[[Json], _T], *,
                       settle: bool = False) -> SentRequest[_T]:
        """Send a request whose result is mapped by `fn` (session helpers use it).

        Args:
            settle: before mapping, wait until the handlers of every notification received
                before the response have finished (e.g. a resume's replayed updates).
        """
        return mapped_request(self.send_request(method, params), fn, self.raw.settled if settle else None)

    # -- sessions (see acp_fast.roles.sessions) -----------------------------------------

    def build_session_from(self, params: JsonObject) -> SessionSetup:
        """A `session/new` from a complete request: `start_session()` publishes it
        (a proxy uses `on_proxy_session_start`; see [`SessionSetup`][acp_fast.roles.SessionSetup])."""
        return SessionSetup(self, SESSION_NEW, params)

    def resume_session_from(self, params: JsonObject) -> SessionSetup:
        """A v2 `session/resume` from a complete request (see [`build_session_from`][acp_fast.roles.connection.AcpConnection.build_session_from])."""
        return SessionSetup(self, SESSION_RESUME, params)

    def fork_session_from(self, params: JsonObject) -> SessionSetup:
        """A v2 `session/fork` (unstable) from a complete request (see [`build_session_from`][acp_fast.roles.connection.AcpConnection.build_session_from])."""
        return SessionSetup(self, SESSION_FORK, params)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.role} v{self.version} {self.guard.state}>"




class AgentConnection(AcpConnection[Version]):
    """The connection of a built agent (`Agent.builder()` / `Agent.v2()`): it answers
    `initialize` (negotiation, the guard's responder side) and serves the client (the
    default `Rules` and class data are the agent's)."""
