"""One live ACP connection of an agent or a client: :class:`AcpConnection`.

It sits on a :class:`~acp_fast.jsonrpc.Connection` and adds ACP semantics from
:mod:`acp_fast.protocol`: version negotiation, the initialization guard, and the wire
surface of its version (read gate for ``session/update``, write guard for everything sent).

Hot path. Until the connection is ready (``initialize`` done, or at once for unchecked v1
roles), every message takes the guarded slow path (``_on_request`` / ``_on_notification``,
registered as the JSON-RPC connection's fallbacks). When it becomes ready, the handler table
is installed into the JSON-RPC connection's per-method tables: an incoming message then costs
one dict lookup and one call into a small closure that calls the user's handler, and
``session/update`` costs one more dict lookup for its variant's read-gate check. Outgoing,
``send_notification`` / ``send_session_update`` / ``send_request`` check the method (and the
update variant) against sets precomputed from the surface, then encode and queue the line
through the JSON-RPC connection: no view objects, no generator, no wrapper chain.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from ..errors import INVALID_REQUEST, JsonRpcError
from ..jsonrpc import Connection, PendingRequest, RequestContext
from ..protocol import negotiation as nego
from ..protocol.gate import make_known
from ..protocol.guard import InitializationGuard
from ..protocol.surface import WireSurface
from ._hot import NotificationHandler, RequestHandler, UpdateDispatcher, UpdateSender
from ._hot import Context, SessionUpdate
from .context import Request, SentRequest
from .mcp import McpState
from .names import check_handler_method
from .sessions import OpenedSession, SessionSetup, SessionStates, build_session, fork_session, resume_session
from .streams import EngineChoice, Transport, open_stream, resolve_engine
from .table import NOT_HANDLED, Handler, HandlerTable

__all__ = ["INITIALIZE", "NOT_HANDLED", "PROXY_INITIALIZE", "SESSION_UPDATE", "AcpConnection", "ConnectionBuilder",
           "DynamicHandler", "InitializeHooks"]

logger = logging.getLogger("acp_fast.roles")

_T = TypeVar("_T")

INITIALIZE = "initialize"
PROXY_INITIALIZE = "_proxy/initialize"
#: the spec spelling of ``_proxy/initialize`` (accepted too; a proxy answers in the spelling used)
PROXY_INITIALIZE_SPEC = "proxy/initialize"
_INITIALIZES = frozenset({INITIALIZE, PROXY_INITIALIZE, PROXY_INITIALIZE_SPEC})
SESSION_UPDATE = "session/update"
PERMISSION = "session/request_permission"


class DynamicHandler:
    """One handler added at run time (:meth:`AcpConnection.add_dynamic_handler`, which makes it).

    Args:
        handlers: the connection's list of the dynamic handlers of ``(kind, method)``, which
            this one joins (asked in order) and leaves on :meth:`remove`.

    Attributes:
        method: the method it handles (``session/update``: it gets ``(SessionUpdate, cx)``).
        kind: ``"request"`` or ``"notification"``.
        fn: the handler.
    """

    __slots__ = ("_handlers", "fn", "kind", "method")

    def __init__(self, handlers: list[DynamicHandler], method: str, kind: str, fn: Handler) -> None:
        self._handlers = handlers
        self.method = method
        self.kind = kind
        self.fn = fn
        handlers.append(self)

    @property
    def active(self) -> bool:
        """True until :meth:`remove`."""
        return self in self._handlers

    def remove(self) -> None:
        """Unregister it (later messages go to the next handler); idempotent."""
        if self in self._handlers:
            self._handlers.remove(self)

    def __enter__(self) -> DynamicHandler:  # noqa: PYI034 - final in practice
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<DynamicHandler {self.kind} {self.method!r}{'' if self.active else ' removed'}>"


def _is_awaitable_result(value: Any) -> bool:
    return asyncio.iscoroutine(value) or isinstance(value, SentRequest)


class InitializeHooks(Protocol):
    """How a client protocol connector takes part in one connection's ``initialize``.

    Attributes:
        first_rule: the -32600 ``data`` for anything sent before ``initialize``.
    """

    first_rule: str

    def intercept(self, connection: AcpConnection, params: dict[str, Any]) -> SentRequest[Any] | None:
        """Answer ``initialize`` without sending it (reuse), or ``None`` to send it."""

    def on_version_mismatch(self, params: dict[str, Any], result: Any) -> None:
        """The peer answered our ``initialize`` with another version."""


class ConnectionBuilder(Protocol):
    """What :meth:`AcpConnection.spawn_connection` needs of a builder (every builder of
    :mod:`acp_fast.roles.builders` is one)."""

    @property
    def connection_type(self) -> type[AcpConnection]:
        """The connection class :meth:`bind` makes."""

    def bind(self, conn: Connection) -> AcpConnection:
        """Run the builder's implementation on ``conn``."""


class AcpConnection:
    """One live ACP connection of a built agent or client (Rust ``ConnectionTo``).

    Made by the builders (``serve``, ``connect``, ``connect_with``), never directly.
    Every outgoing message passes the initialization guard and the write guard of
    ``version``'s wire surface; every incoming one passes the guard, and
    ``session/update`` also the read gate.

    Attributes:
        version: the ACP version of the implementation (1 or 2).
        role: ``"agent"``, ``"client"`` or ``"proxy"``.
        guard: the :class:`~acp_fast.protocol.guard.InitializationGuard`.
        surface: the :class:`~acp_fast.protocol.surface.WireSurface` of ``version``.
        raw: the underlying :class:`~acp_fast.jsonrpc.Connection` (no ACP checks at all).
        sessions: tracked v2 session states (:class:`~acp_fast.roles.sessions.SessionStates`).
        info: this side's ``Implementation`` object.
    """

    role = "agent"
    #: whether this connection type wants a lazy JSON-RPC connection (``Decoder(lazy=True)``,
    #: params decoded on first access): proxies, which mostly forward bytes they never read
    lazy_frames = False
    #: proxies: session setups whose routes are installed when their response arrives
    #: (``ProxyConnection``); checked inline by the fallbacks below
    _pending_setups: Any = ()

    def __init__(self, conn: Connection, table: HandlerTable, *, hooks: InitializeHooks | None = None) -> None:
        self.raw = conn
        self.table = table
        self.version = table.version
        self.role = table.role
        self.info = dict(table.info)
        self.surface = WireSurface.for_version(self.version)
        self.guard = self._make_guard(table)
        self.sessions = SessionStates()
        self._hooks = hooks
        self._initialize_sent = False
        # the read gate's fast path: the compiled twin on the compiled engine
        self._known = make_known(self.surface, compiled=getattr(conn.engine, "IMPLEMENTATION", "") == "c")
        self._session_update = UpdateDispatcher(
            self, self._known, self.surface.classify_session_update, self.sessions.apply,
            table.on_update, table.notifications.get(SESSION_UPDATE), SessionUpdate, Context)
        self._request_ok = self.surface.methods_of_kind("request") - _INITIALIZES
        self._notification_ok = self.surface.methods_of_kind("notification")
        self._notify = conn.notify
        self._out_fast = False
        #: ``update_sender(session_id, update)``: ``send_session_update`` without options;
        #: the guarded path until ready, then the compiled fast path (``_hot_py.UpdateSender``)
        self.update_sender: Callable[[str, Any], bool] = self._send_update_guarded
        self._installed = False
        self._background: set[asyncio.Task[Any]] = set()
        #: ``(kind, method) -> handlers`` added at run time (see :meth:`add_dynamic_handler`)
        self._dynamic: dict[tuple[str, str], list[DynamicHandler]] = {}
        self._dynamic_installed: set[tuple[str, str]] = set()
        self._children: set[AcpConnection] = set()
        self._mcp: McpState | None = None
        conn.on_any_request(self._on_request)
        conn.on_any_notification(self._on_notification)
        conn.closed.add_done_callback(self._on_closed)
        if self.guard.ready:
            self._became_ready()

    def _make_guard(self, table: HandlerTable) -> InitializationGuard:
        guarded = table.guarded and self.version >= 2
        role = {"agent": "responder", "client": "initiator"}[table.role] if guarded else "unchecked"
        return InitializationGuard(self.version, role)

    # -- state --------------------------------------------------------------------------

    @property
    def negotiated_version(self) -> int | None:
        """The version agreed by ``initialize`` (``None`` before)."""
        return self.guard.negotiated

    @property
    def manages_initialize(self) -> bool:
        """True when this side answers ``initialize`` itself (negotiation applies)."""
        return self.table.guarded and self.role != "client"

    @property
    def closed(self) -> asyncio.Future[None]:
        """Resolves once the connection and its stream are closed."""
        return self.raw.closed

    def close(self) -> None:
        """Close now (see :meth:`acp_fast.jsonrpc.Connection.close`)."""
        self.raw.close()

    async def wait_closed(self) -> None:
        """Wait until the connection and its stream are closed."""
        await self.raw.wait_closed()

    @property
    def mcp(self) -> McpState:
        """This connection's MCP-over-ACP state (made on first use): the MCP servers it
        serves and the MCP sessions open on it (see :mod:`acp_fast.roles.mcp`)."""
        state = self._mcp
        if state is None:
            state = self._mcp = McpState(self)
        return state

    @property
    def children(self) -> frozenset[AcpConnection]:
        """The child connections spawned from this one that are still open (see
        :meth:`spawn_connection`); all of them are closed when this connection closes."""
        return frozenset(c for c in self._children if not c.raw.closed.done())

    async def drain(self) -> None:
        """Write what is queued and wait while the peer is not reading (backpressure).

        Await it in loops that send many messages (e.g. streaming updates): memory then
        stays bounded however slowly the peer reads. A loop that never awaits is stopped
        by :class:`~acp_fast.errors.SendBufferFull` once the write buffer passes its
        limit (see :class:`~acp_fast.jsonrpc.Connection`).
        """
        await self.raw.drain()

    def start_task(self, coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        """Run ``coro`` in the background, owned by this connection.

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
        self.sessions.close(self.raw.closed_error("session/update"))

    # -- handlers added at run time, nested connections ----------------------------------

    def add_dynamic_handler(self, method: str, fn: Handler, *, kind: str = "request") -> DynamicHandler:
        """Add a handler of ``method`` while the connection runs (Rust ``add_dynamic_handler``).

        Dynamic handlers are asked first, oldest first; one that returns
        :data:`NOT_HANDLED` (synchronously) passes the message on, finally to the builder's
        handler and then the connection's default (-32601, ignored notification, or a
        proxy's forwarding). They get ``(params, cx)`` like builder handlers; for
        ``session/update`` (``kind="notification"``) on an agent or client they get
        ``(SessionUpdate, cx)`` after the read gate and the session-state tracking, before
        the builder's update handler (a proxy relays updates ungated: ``(params, cx)``).

        Returns:
            The :class:`DynamicHandler`; ``remove()`` it (or use it as a context manager).

        Raises:
            ValueError: ``kind`` is neither ``"request"`` nor ``"notification"``,
                ``method`` is an initializing request (the guard handles those), or it is
                not a ``kind`` this side receives in its version and does not start with
                ``_`` (see :mod:`acp_fast.roles.names`).
        """
        if kind not in ("request", "notification"):
            raise ValueError(f"kind must be 'request' or 'notification', not {kind!r}")
        if kind == "request" and method in _INITIALIZES:
            raise ValueError(f"{method!r} is handled by the initialization guard")
        check_handler_method(method, version=self.version, role=self.role, kind=kind)
        handler = DynamicHandler(self._dynamic.setdefault((kind, method), []), method, kind, fn)
        if self._installed:
            self._install_dynamic(kind, method)
        return handler

    def _install_dynamic(self, kind: str, method: str) -> None:
        key = (kind, method)
        if key in self._dynamic_installed:
            return
        self._dynamic_installed.add(key)
        if kind == "request":
            self.raw.on_request(method, self._dynamic_request_handler(method))
        elif method == SESSION_UPDATE and self._updates_gated():
            self.raw.on_notification(SESSION_UPDATE, UpdateDispatcher(
                self, self._known, self.surface.classify_session_update, self.sessions.apply,
                self._dynamic_update, None, SessionUpdate, Context))
        else:
            self.raw.on_notification(method, self._dynamic_notification_handler(method))

    def _dynamic_request_handler(self, method: str) -> Callable[[RequestContext], Any]:
        handlers = self._dynamic.setdefault(("request", method), [])
        track = method == PERMISSION and self.role == "client"

        def dispatch(rctx: RequestContext) -> Any:
            if track:
                self._track_permission(rctx)
            if handlers:
                cx = Context(self, rctx, rctx.message)
                for handler in list(handlers):
                    result = handler.fn(rctx.message.params, cx)
                    if result is not NOT_HANDLED:
                        return result
            return self._on_request(rctx)

        return dispatch

    def _dynamic_notification_handler(self, method: str) -> Callable[[Any], Any]:
        handlers = self._dynamic.setdefault(("notification", method), [])

        def dispatch(msg: Any) -> Any:
            if handlers:
                cx = Context(self, None, msg)
                for handler in list(handlers):
                    result = handler.fn(msg.params, cx)
                    if result is not NOT_HANDLED:
                        return result
            return self._on_notification(msg)

        return dispatch

    def _dynamic_update(self, event: SessionUpdate, cx: Context) -> Any:
        for handler in list(self._dynamic.get(("notification", SESSION_UPDATE), ())):
            result = handler.fn(event, cx)
            if result is not NOT_HANDLED:
                return result
        if self.table.on_update is not None:
            return self.table.on_update(event, cx)
        fallback = self.table.notifications.get(SESSION_UPDATE)
        if fallback is not None:
            return fallback(event.params, cx)
        return None

    async def spawn_connection(self, builder: ConnectionBuilder, transport: Transport, *,
                               engine: EngineChoice = None) -> AcpConnection:
        """Start a child connection with its own builder (Rust ``spawn_connection``).

        The child speaks ``builder``'s role and version (``Client.v2()`` gives a v2 client
        connection with the session helpers, whatever this connection is) on ``transport``
        (a stream or an awaitable of one, e.g. ``spawn(...)``); it runs beside this one and
        is closed when this connection closes. Call it from a handler as
        ``await cx.connection.spawn_connection(Client.v2(), spawn(cmd))``.

        Args:
            engine: the engine twin (default: this connection's).

        Returns:
            The child connection (the context its builder selects: an
            :class:`AcpConnection`, or a ``ProxyConnection`` for a proxy builder).
        """
        stream = await open_stream(transport)
        conn = Connection(stream, engine=resolve_engine(engine) if engine is not None else self.raw.engine,
                          lazy=getattr(builder, "connection_type", AcpConnection).lazy_frames)
        child = builder.bind(conn)
        self._children.add(child)
        conn.closed.add_done_callback(lambda _f: self._children.discard(child))
        if self.raw.closed.done():
            child.close()
        return child

    def spawn_connection_with_context(self, builder: ConnectionBuilder, transport: Transport, *,
                                      engine: EngineChoice = None) -> Awaitable[AcpConnection]:
        """Same as :meth:`spawn_connection` (in Python the child's context is always the one
        its builder selects)."""
        return self.spawn_connection(builder, transport, engine=engine)

    # -- becoming ready: the per-connection tables --------------------------------------

    def _became_ready(self) -> None:
        if self._hooks is None or self._initialize_sent:
            self._out_ready()
        if self._installed:
            return
        self._installed = True
        raw = self.raw
        for method, fn in self.table.requests.items():
            if method == PERMISSION and self.role == "client":
                raw.on_request(method, self._permission_handler(fn))
            elif method not in _INITIALIZES:
                raw.on_request(method, self._request_handler(fn))
        for method, fn in self.table.notifications.items():
            if method != SESSION_UPDATE:
                raw.on_notification(method, self._notification_handler(fn))
        if self._updates_gated():
            raw.on_notification(SESSION_UPDATE, self._session_update)
        elif SESSION_UPDATE in self.table.notifications:
            raw.on_notification(SESSION_UPDATE, self._notification_handler(self.table.notifications[SESSION_UPDATE]))
        for kind, method in list(self._dynamic):
            self._install_dynamic(kind, method)

    def _updates_gated(self) -> bool:
        return True

    def _request_handler(self, fn: Handler) -> Callable[[RequestContext], Any]:
        return RequestHandler(self, fn, Context)

    def _permission_handler(self, fn: Handler) -> Callable[[RequestContext], Any]:
        """``session/request_permission`` on a client: tracked per session, so that
        ``cancel_active_work`` can answer it with the cancelled outcome (seed 000)."""
        handle = self._request_handler(fn)

        def tracked(rctx: RequestContext) -> Any:
            self._track_permission(rctx)
            return handle(rctx)

        return tracked

    def _track_permission(self, rctx: RequestContext) -> None:
        params = rctx.message.params
        session_id = params.get("sessionId") if type(params) is dict else None
        if type(session_id) is str:
            self.sessions.get(session_id).track_permission(rctx)

    def _notification_handler(self, fn: Handler) -> Callable[[Any], Any]:
        return NotificationHandler(self, fn, Context)

    # -- incoming: the slow (guarded) path ---------------------------------------------

    def _install_ready_routes(self) -> None:
        """Proxies: install the routes of setups answered so far (see ``ProxyConnection``)."""

    def _on_request(self, rctx: RequestContext) -> Any:
        if self._pending_setups:
            self._install_ready_routes()
        method = rctx.message.method
        guard = self.guard
        if method in _INITIALIZES or not guard.ready:
            error = guard.check_incoming_request(method)
            if error is not None:
                raise error
            if self.manages_initialize and self._initializes(method):
                return self._incoming_initialize(rctx)
        if not self._installed and self._dynamic.get(("request", method)):
            result = self._try_dynamic("request", method, rctx.message.params, Context(self, rctx, rctx.message))
            if result is not NOT_HANDLED:
                return result
        fn = self.table.requests.get(method)
        if fn is not None:
            return fn(rctx.message.params, Context(self, rctx, rctx.message))
        return self._unhandled_request(rctx, method)

    def _try_dynamic(self, kind: str, method: str, params: Any, cx: Context) -> Any:
        for handler in list(self._dynamic.get((kind, method), ())):
            result = handler.fn(params, cx)
            if result is not NOT_HANDLED:
                return result
        return NOT_HANDLED

    def initializes(self, method: str) -> bool:
        """Whether ``method`` is the request that initializes this side (``initialize``;
        for a proxy ``_proxy/initialize`` in either spelling)."""
        return method == self.guard.init_method

    def _initializes(self, method: str) -> bool:
        """:meth:`initializes`, for an incoming request about to be handled (a proxy also
        records which spelling its conductor uses)."""
        return self.initializes(method)

    def _init_handler(self, method: str) -> Any:
        """The builder's handler of the initializing request ``method`` (or ``None``)."""
        return self.table.requests.get(method)

    def _unhandled_request(self, rctx: RequestContext, method: str) -> Any:
        raise JsonRpcError.method_not_found(method)

    def _on_notification(self, msg: Any) -> Any:
        if self._pending_setups:
            self._install_ready_routes()
        method = msg.method
        if not self.guard.allows_incoming_notification(method):
            logger.debug("notification %r before initialization dropped", method)
            return None
        if method == SESSION_UPDATE and self._updates_gated():
            return self._session_update(msg)
        if not self._installed and self._dynamic.get(("notification", method)):
            result = self._try_dynamic("notification", method, msg.params, Context(self, None, msg))
            if result is not NOT_HANDLED:
                return result
        fn = self.table.notifications.get(method)
        if fn is not None:
            return fn(msg.params, Context(self, None, msg))
        return self._unhandled_notification(msg, method)

    def _unhandled_notification(self, msg: Any, method: str) -> Any:
        return None

    # -- incoming initialize ------------------------------------------------------------

    def _negotiate(self, params: Any) -> Any:
        """Validate an incoming ``initialize``; return the params the handler sees."""
        requested = nego.parse_protocol_version(params)
        if self.version >= 2:
            nego.select_version(requested, (2,))  # -32022 for 1, handler not invoked
            nego.validate_initialize_request(params, 2)
            return params if requested == 2 else nego.canonicalize_v2_initialize(params)
        # v1: any valid version selects v1; newer metadata is normalised (§6.5)
        seen = nego.normalize_v2_to_v1(params) if requested >= 2 else dict(params, protocolVersion=1)
        nego.validate_initialize_request(seen, 1)
        return seen

    def _default_initialize(self, seen: Any) -> Any:
        if self.version >= 2:
            return {"protocolVersion": self.version, "info": self.info, "capabilities": {}}
        return {"protocolVersion": 1, "agentInfo": self.info, "agentCapabilities": {}}

    def _incoming_initialize(self, rctx: RequestContext) -> Any:
        seen = self._negotiate(rctx.message.params)
        guard = self.guard
        token = guard.begin()
        fn = self._init_handler(rctx.message.method)
        try:
            if fn is not None:
                result = fn(seen, Context(self, rctx, rctx.message))
            else:
                result = self._default_initialize(seen)
        except BaseException:
            guard.fail(token)
            raise
        if _is_awaitable_result(result):
            return self._finish_initialize_async(result, token)
        return self._finish_initialize(result, token)

    async def _finish_initialize_async(self, aw: Awaitable[Any], token: int) -> Any:
        try:
            result = await aw
        except BaseException:
            self.guard.fail(token)
            raise
        return self._finish_initialize(result, token)

    def _finish_initialize(self, result: Any, token: int) -> Any:
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

    def _check_first(self, method: str) -> None:
        hooks = self._hooks
        if hooks is not None and not self._initialize_sent and method != INITIALIZE:
            raise JsonRpcError(INVALID_REQUEST, data=hooks.first_rule)

    def send_request(self, method: str, params: Any = None, *, passthrough: bool = False,
                     timeout: float | None = None) -> Request[Any]:
        """Send a request; returns its handle (``await`` it for the result).

        A client's ``initialize`` goes through :meth:`initialize`.

        Args:
            method: the method name.
            params: the params object (or array); may hold ``RawJson``.
            passthrough: skip the write guard (relays forwarding what they received). The
                initialization guard still applies.
            timeout: seconds until the handle fails with ``asyncio.TimeoutError``.

        Raises:
            JsonRpcError: -32600 when the initialization guard refuses (nothing is sent).
            WireSurfaceError: the negotiated version does not define ``method``.
            SendBufferFull: the write buffer is over its limit (await :meth:`drain`).
        """
        if self._out_fast and method in self._request_ok:
            return self.raw.request(method, params, timeout=timeout)
        if method in _INITIALIZES:
            self._refuse_initialize(method)
            if method == INITIALIZE and self.role == "client":
                return self.initialize(params)
        self._check_first(method)
        guard = self.guard
        if not guard.ready or method == INITIALIZE:
            error = guard.check_outgoing_request(method)
            if error is not None:
                raise error
        self.surface.check_outgoing_method(method, "request", passthrough=passthrough)
        return self.raw.request(method, params, timeout=timeout)

    def _refuse_initialize(self, method: str) -> None:
        """Proxies refuse to send (``_proxy/``)``initialize`` to their predecessor."""

    def send_notification(self, method: str, params: Any = None, *, passthrough: bool = False) -> bool:
        """Send a notification; returns False when it was dropped (guard or closed).

        A ``session/update`` also has its ``update`` checked by the write guard.

        Raises:
            WireSurfaceError: the negotiated version does not define ``method`` (or the
                update variant).
            SendBufferFull: the write buffer is over its limit (await :meth:`drain`).
        """
        if self._out_fast and method in self._notification_ok:
            if method == SESSION_UPDATE and not passthrough and type(params) is dict:
                self._check_update_out(params.get("update"))
            return self._notify(method, params)
        self._check_first(method)
        guard = self.guard
        if not guard.ready:
            error = guard.check_outgoing_notification(method)
            if error is not None:
                logger.warning("notification %r dropped: %s", method, error.data)
                return False
        self.surface.check_outgoing_method(method, "notification", passthrough=passthrough)
        if method == SESSION_UPDATE and not passthrough and type(params) is dict:
            self._check_update_out(params.get("update"))
        return self._notify(method, params)

    def send_session_update(self, session_id: str, update: dict[str, Any], *,
                            passthrough: bool = False, **fields: Any) -> bool:
        """Send ``session/update`` ``{"sessionId", "update", …fields}`` through the write guard.

        Raises:
            WireSurfaceError: the variant (or v2's inner ``state``) is not defined in the
                negotiated version, unless ``passthrough`` (forwarding a received update).
            SendBufferFull: the write buffer is over its limit (await :meth:`drain`).
        """
        if not fields and not passthrough:
            return self.update_sender(session_id, update)
        return self.send_notification(
            SESSION_UPDATE, {"sessionId": session_id, "update": update, **fields}, passthrough=passthrough)

    def _send_update_guarded(self, session_id: str, update: Any) -> bool:
        return self.send_notification(SESSION_UPDATE, {"sessionId": session_id, "update": update})

    def _out_ready(self) -> None:
        """Outgoing traffic may take the fast paths from now on (guard ready, first rule met)."""
        self._out_fast = True
        self.update_sender = UpdateSender(self._known, self._notify, self._send_update_guarded)

    def _check_update_out(self, update: Any) -> None:
        if self._known(update) is None:
            self.surface.check_outgoing_session_update(update)

    # -- client side: initialize --------------------------------------------------------

    def initialize(self, params: dict[str, Any] | None = None) -> SentRequest[dict[str, Any]]:
        """Client side: send ``initialize`` and check the answer (protocol.md §5.9, §6.3).

        ``protocolVersion`` is forced to this implementation's version and ``info`` /
        ``clientInfo`` defaults to this builder's. A v2 client fails on any answer but 2
        (-32600 ``"required ACP protocol version 2 but peer negotiated 1; …"``) and the
        connection returns to uninitialized, so a retry is possible.

        Raises:
            JsonRpcError: -32600 when the guard refuses (in progress / already initialized).
        """
        version = self.version
        params = dict(params or {})
        params["protocolVersion"] = version
        params.setdefault("info" if version >= 2 else "clientInfo", self.info)
        if self._hooks is not None and not self._initialize_sent:
            reused = self._hooks.intercept(self, params)
            if reused is not None:
                self._initialize_sent = True
                return reused
        guard = self.guard
        error = guard.check_outgoing_request(INITIALIZE)
        if error is not None:
            raise error
        self._initialize_sent = True
        token = guard.begin()
        pending = self.raw.request(INITIALIZE, params)
        return SentRequest(pending, self._initialized(pending, params, token))

    def adopt_initialize(self, result: dict[str, Any]) -> SentRequest[dict[str, Any]]:
        """Take an ``initialize`` answer the peer already gave (protocol connector reuse)."""
        self._initialize_sent = True
        self._succeed(self.guard.begin())
        return SentRequest(None, _value(dict(result)), INITIALIZE)

    async def _initialized(self, pending: PendingRequest, params: dict[str, Any], token: int) -> Any:
        guard = self.guard
        try:
            result = await pending
        except BaseException:
            guard.fail(token)
            raise
        try:
            nego.check_negotiated_version(result, self.version)
        except JsonRpcError:
            guard.fail(token)
            if self._hooks is not None and type(result) is dict and result.get("protocolVersion") == 1:
                self._hooks.on_version_mismatch(params, result)
            raise
        self._succeed(token)
        return result

    def mapped_request(self, method: str, params: Any, fn: Callable[[Any], _T], *,
                       settle: bool = False) -> SentRequest[_T]:
        """Send a request whose result is mapped by ``fn`` (session helpers use it).

        Args:
            settle: before mapping, wait until the handlers of every notification received
                before the response have finished (e.g. a resume's replayed updates).
        """
        pending = self.send_request(method, params)
        assert isinstance(pending, PendingRequest)  # never initialize

        async def mapped() -> _T:
            result = await pending
            if settle:
                await self.raw.settled()
            return fn(result)

        return SentRequest(pending, mapped())

    # -- sessions (see acp_fast.roles.sessions) -----------------------------------------

    def build_session(self, cwd: str, **kwargs: Any) -> SentRequest[OpenedSession]:
        """``session/new`` -> :class:`~acp_fast.roles.sessions.OpenedSession` (v1 and v2)."""
        return build_session(self, cwd, **kwargs)

    def resume_session(self, session_id: str, cwd: str, **kwargs: Any) -> SentRequest[OpenedSession]:
        """v2 ``session/resume`` -> :class:`~acp_fast.roles.sessions.OpenedSession`."""
        return resume_session(self, session_id, cwd, **kwargs)

    def fork_session(self, session_id: str, cwd: str, **kwargs: Any) -> SentRequest[OpenedSession]:
        """v2 ``session/fork`` (unstable) -> :class:`~acp_fast.roles.sessions.OpenedSession`
        of the new session (see :func:`~acp_fast.roles.sessions.fork_session`)."""
        return fork_session(self, session_id, cwd, **kwargs)

    def build_session_from(self, params: dict[str, Any]) -> SessionSetup:
        """A ``session/new`` from a complete request: ``start_session()`` publishes it
        (a proxy uses ``on_proxy_session_start``; see :class:`~acp_fast.roles.sessions.SessionSetup`)."""
        return SessionSetup(self, "session/new", params)

    def resume_session_from(self, params: dict[str, Any]) -> SessionSetup:
        """A v2 ``session/resume`` from a complete request (see :meth:`build_session_from`)."""
        return SessionSetup(self, "session/resume", params)

    def fork_session_from(self, params: dict[str, Any]) -> SessionSetup:
        """A v2 ``session/fork`` (unstable) from a complete request (see :meth:`build_session_from`)."""
        return SessionSetup(self, "session/fork", params)

    # -- proxies only -------------------------------------------------------------------

    def send_to_successor(self, method: str, params: Any = None, *, passthrough: bool = False,
                          timeout: float | None = None) -> Request[Any]:
        """Proxies only: send a request to the successor (see
        :meth:`~acp_fast.roles.ProxyConnection.send_to_successor`).

        Raises:
            TypeError: always here; only a proxy has a successor.
        """
        raise TypeError("only proxies have a successor")

    def notify_successor(self, method: str, params: Any = None, *, passthrough: bool = False) -> bool:
        """Proxies only: send a notification to the successor (see
        :meth:`~acp_fast.roles.ProxyConnection.notify_successor`).

        Raises:
            TypeError: always here; only a proxy has a successor.
        """
        raise TypeError("only proxies have a successor")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.role} v{self.version} {self.guard.state}>"


async def _value(value: _T) -> _T:
    return value

