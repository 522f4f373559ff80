"""Roles and builders: ``Agent``, ``Client``, ``Proxy`` (the API layer of acp_fast).

This layer sits on :class:`acp_fast.jsonrpc.Connection` and adds ACP semantics from
:mod:`acp_fast.protocol`: version negotiation (``negotiation``), the initialization guard
(``guard``) and the per-version wire surface (read gate + write guard). It mirrors the Rust
SDK's protocol-v2 API (seed 000) in Python form:

========================================  ===========================================
``Agent.builder()`` / ``Client.builder()``  v1 implementations (no lifecycle checks)
``Agent.v2()`` / ``Client.v2()``            v2-only; guarded responder / initiator
``Proxy.builder()`` / ``Proxy.v2()``        proxies initialized by ``_proxy/initialize``
``Agent.protocol_router()``                 ``.with_v1(a).with_v2(b)``: picks per request
``Proxy.protocol_router()``                 exact-version proxy router
``Client.protocol_connector()``             ``.with_v1(f).with_v2(f)``: v2 first, v1 fallback
========================================  ===========================================

Handlers are registered by method name or by schema type name and get ``(params, cx)``;
``cx`` is a :class:`Context` (the request's cancellation state plus a way to send requests
and notifications back). A handler returns the result (or a coroutine giving it); raising
:class:`~acp_fast.errors.JsonRpcError` answers with that error.

Example (an agent served on stdio, and a client driving it)::

    from acp_fast import Agent, Client
    from acp_fast.transport import spawn

    agent = Agent.v2()

    @agent.on_request("session/new")
    def new_session(params, cx):
        return {"sessionId": "s1"}

    agent.serve_stdio()          # in the agent process

    async def main(cx):          # in the client process
        await cx.initialize()
        opened = await cx.build_session(cwd="/tmp")

    await Client.v2().connect_with(spawn("python agent.py"), main)

Nothing here converts traffic between protocol versions: a v1 implementation only ever sees
v1 traffic and a v2 one v2 traffic; the routers only normalise the ``initialize`` request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, TypeVar

from . import _engine
from . import transport as _transport
from .errors import INVALID_PARAMS, INVALID_REQUEST, JsonRpcError
from .jsonrpc import CANCEL_METHOD, Connection, PendingRequest, RequestContext
from .protocol import negotiation as nego
from .protocol.guard import PROXY_DATA, InitializationGuard
from .protocol.surface import KNOWN, SessionUpdateView, WireSurface
from .sessions import SessionStates

__all__ = [
    "AcpConnection",
    "Agent",
    "AgentBuilder",
    "AgentRouter",
    "Builder",
    "Client",
    "ClientBuilder",
    "ClientConnector",
    "Context",
    "Proxy",
    "ProxyBuilder",
    "ProxyRouter",
    "SentRequest",
    "SessionUpdate",
    "run_agent_stdio",
]

logger = logging.getLogger("acp_fast.roles")

_T = TypeVar("_T")
Handler = Callable[[Any, "Context"], Any]
Main = Callable[["AcpConnection"], Awaitable[_T]]
Transport = _transport.Stream | Awaitable[_transport.Stream]

INITIALIZE = "initialize"
PROXY_INITIALIZE = "_proxy/initialize"
SUCCESSOR = "_proxy/successor"
SESSION_UPDATE = "session/update"
_PROXY_SEND_DATA = (
    "proxy initialization must be sent as a logical `initialize` message to the successor; "
    "`_proxy/successor` wrapping is applied by connection routing"
)


def _default_info() -> dict[str, str]:
    from . import __version__

    return {"name": "acp_fast", "version": __version__}


async def _resolve(transport: Transport) -> _transport.Stream:
    if isinstance(transport, _transport.Stream) or hasattr(transport, "attach"):
        return transport  # type: ignore[return-value]
    return await transport


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" noise


def _is_coroutine(value: Any) -> bool:
    return asyncio.iscoroutine(value)


# ---------------------------------------------------------------------------------------
# request handles and handler contexts
# ---------------------------------------------------------------------------------------


class SentRequest(Generic[_T]):
    """A sent request whose result is checked or mapped (initialize, session setup).

    ``await`` it for the mapped result. The check runs even if nobody awaits (so the
    initialization guard always learns the outcome). Cancelling the awaiting task sends
    ``$/cancel_request`` once, like :class:`~acp_fast.jsonrpc.PendingRequest`.

    Attributes:
        pending: the underlying request handle (``None`` for a locally answered request).
    """

    __slots__ = ("_task", "pending")

    def __init__(self, pending: PendingRequest | None, coro: Awaitable[_T]) -> None:
        self.pending = pending
        self._task: asyncio.Future[_T] = asyncio.ensure_future(coro)
        self._task.add_done_callback(_consume)

    @property
    def id(self) -> Any:
        return None if self.pending is None else self.pending.id

    def done(self) -> bool:
        return self._task.done()

    def cancel(self) -> bool:
        """Ask the peer to cancel (``$/cancel_request``); the handle still resolves."""
        return False if self.pending is None else self.pending.cancel()

    def detach(self) -> None:
        """Forget the request: no ``$/cancel_request``; awaiting raises ``CancelledError``."""
        if self.pending is not None:
            self.pending.detach()
        else:
            self._task.cancel()

    async def _wait(self) -> _T:
        try:
            return await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if not self._task.done():
                self.cancel()
            raise

    def __await__(self) -> Generator[Any, None, _T]:
        return self._wait().__await__()


class SessionUpdate:
    """One received ``session/update``, passed through the read gate.

    Attributes:
        session_id: ``params["sessionId"]``.
        kind: the ``sessionUpdate`` value (``""`` if absent or not a string).
        payload: the ``update`` object, untouched (same identity).
        view: the :class:`~acp_fast.protocol.surface.SessionUpdateView` of the negotiated
            version. Only ``known`` updates have that version's shape.
        params: the notification's params, unchanged.
    """

    # Strategy: the hot path (a known update, see AcpConnection._incoming_session_update)
    # stores the read gate's fast-path entry in ``_view`` and builds the view object only
    # when ``view`` is read; ``kind``/``payload``/``known`` are plain slots.
    __slots__ = ("_view", "kind", "known", "params", "payload", "session_id")

    def __init__(self, params: Any, view: SessionUpdateView) -> None:
        self.params = params
        self.session_id = params.get("sessionId") if type(params) is dict else None
        self.kind = view.kind
        self.payload = view.payload
        self.known = view.status == KNOWN
        self._view: Any = view

    @property
    def view(self) -> SessionUpdateView:
        view = self._view
        if type(view) is tuple:  # a fast-path entry: (check, kind, version, type, tier, defined)
            _check, kind, version, type_name, tier, defined = view
            view = self._view = SessionUpdateView(
                kind, KNOWN, self.payload, version, type_name, tier, defined)
        return view  # type: ignore[no-any-return]

    @property
    def passthrough(self) -> bool:
        """True for unknown, other-version or malformed updates: keep them raw."""
        return not self.known

    def __repr__(self) -> str:
        return f"SessionUpdate({self.session_id!r}, {self.kind!r}, {self.view.status})"


_new_object = object.__new__


def _known_session_update(params: dict[str, Any], update: dict[str, Any], fast: Any) -> SessionUpdate:
    """A :class:`SessionUpdate` for a fast-path known update (no view object yet)."""
    event = _new_object(SessionUpdate)
    event.params = params
    event.session_id = params.get("sessionId")
    event.kind = fast[1]
    event.payload = update
    event.known = True
    event._view = fast
    return event


class Context:
    """What a handler gets besides ``params``: the request and the way back to the peer.

    Attributes:
        connection: the :class:`AcpConnection` the message came in on.
        request: the jsonrpc ``RequestContext`` (``None`` for notifications).
        message: the jsonrpc ``Message`` (notifications; the request's for requests).
    """

    __slots__ = ("connection", "message", "request")

    def __init__(self, connection: AcpConnection, request: RequestContext | None = None,
                 message: Any = None) -> None:
        self.connection = connection
        self.request = request
        self.message = message if message is not None or request is None else request.message

    @property
    def method(self) -> str:
        return self.message.method  # type: ignore[no-any-return]

    @property
    def id(self) -> Any:
        return None if self.request is None else self.request.id

    @property
    def version(self) -> int:
        return self.connection.version

    @property
    def cancelled(self) -> bool:
        """True once the peer sent ``$/cancel_request`` for this request."""
        return self.request is not None and self.request.cancelled

    async def wait_cancelled(self) -> None:
        if self.request is None:
            raise RuntimeError("notifications cannot be cancelled")
        await self.request.wait_cancelled()

    def raise_if_cancelled(self) -> None:
        if self.request is not None:
            self.request.raise_if_cancelled()

    async def run_until_cancelled(self, aw: Awaitable[_T]) -> _T:
        """Await ``aw`` unless the peer cancels first (then -32800 is raised)."""
        if self.request is None:
            return await aw
        return await self.request.run_until_cancelled(aw)

    def defer(self) -> Any:
        """Answer later through the returned ``Responder`` (see ``RequestContext.defer``)."""
        if self.request is None:
            raise RuntimeError("notifications are not answered")
        if self.connection._manage_init and self.method == self.connection.guard.init_method:
            raise RuntimeError("initialize handlers return their result (the guard checks it)")
        return self.request.defer()

    # sending back: delegated to the connection
    def send_request(self, method: str, params: Any = None, **kwargs: Any) -> Any:
        return self.connection.send_request(method, params, **kwargs)

    def send_notification(self, method: str, params: Any = None, **kwargs: Any) -> bool:
        return self.connection.send_notification(method, params, **kwargs)

    def send_session_update(self, session_id: str, update: dict[str, Any], **kwargs: Any) -> bool:
        return self.connection.send_session_update(session_id, update, **kwargs)

    def send_to_successor(self, method: str, params: Any = None, **kwargs: Any) -> Any:
        return self.connection.send_to_successor(method, params, **kwargs)

    async def drain(self) -> None:
        """Wait while the peer is not reading what we send (backpressure; see ``AcpConnection.drain``)."""
        await self.connection.raw.drain()

    def notify_successor(self, method: str, params: Any = None, **kwargs: Any) -> bool:
        return self.connection.notify_successor(method, params, **kwargs)

    def __repr__(self) -> str:
        return f"<Context {self.method!r} v{self.version}>"


# ---------------------------------------------------------------------------------------
# the per-connection object
# ---------------------------------------------------------------------------------------


class AcpConnection:
    """One live ACP connection of a built role (Rust ``ConnectionTo`` / ``V2ConnectionTo``).

    Created by the builders' ``connect_to`` / ``connect_with``, never directly. Every
    outgoing message passes the initialization guard and the write guard of
    ``version``'s wire surface; every incoming one passes the guard, and ``session/update``
    also the read gate.

    Attributes:
        version: the API version of the implementation (1 or 2).
        role: ``"agent"``, ``"client"`` or ``"proxy"``.
        guard: the :class:`~acp_fast.protocol.guard.InitializationGuard`.
        surface: the :class:`~acp_fast.protocol.surface.WireSurface` of ``version``.
        raw: the underlying :class:`~acp_fast.jsonrpc.Connection` (no ACP checks at all).
        sessions: tracked v2 session states (:class:`~acp_fast.sessions.SessionStates`).
    """

    def __init__(self, conn: Connection, builder: Builder) -> None:
        self.raw = conn
        self.version = builder.version
        self.role = builder.role
        self.info = builder._info
        self.surface = WireSurface.for_version(self.version)
        self._fast_known = self.surface._fast_known
        proxy = self.role == "proxy"
        guarded = builder._guarded and self.version >= 2 and not proxy
        guard_role = {"agent": "responder", "client": "initiator"}.get(self.role, "unchecked")
        self.guard = InitializationGuard(self.version, guard_role if guarded else "unchecked",
                                         proxy=proxy and builder._guarded)
        self._manage_init = builder._guarded and self.role in ("agent", "proxy")
        self._requests = dict(builder._requests)
        self._notifications = dict(builder._notifications)
        self._successor_requests = dict(builder._successor_requests)
        self._successor_notifications = dict(builder._successor_notifications)
        self._on_update = builder._on_update
        self.sessions = SessionStates()
        # client protocol connector hooks (§6.6)
        self._first_rule: str | None = None
        self._initialize_sent = False
        self._intercept_initialize: Callable[[dict[str, Any]], SentRequest[Any]] | None = None
        self._on_version_mismatch: Callable[[dict[str, Any], Any], None] | None = None
        conn.on_any_request(self._on_request)
        conn.on_any_notification(self._on_notification)

    # -- state --------------------------------------------------------------------------

    @property
    def negotiated_version(self) -> int | None:
        """The version agreed by ``initialize`` (``None`` before)."""
        return self.guard.negotiated

    @property
    def closed(self) -> asyncio.Future[None]:
        return self.raw.closed

    def close(self) -> None:
        self.raw.close()

    async def wait_closed(self) -> None:
        await self.raw.wait_closed()

    async def drain(self) -> None:
        """Write what is queued and wait while the peer is not reading (backpressure).

        Await it in loops that send many messages (e.g. streaming updates) so memory stays
        bounded when the peer reads slowly.
        """
        await self.raw.drain()

    # -- incoming -----------------------------------------------------------------------

    def _on_request(self, rctx: RequestContext) -> Any:
        method = rctx.method
        guard = self.guard
        if method == INITIALIZE or method == PROXY_INITIALIZE or not guard.ready:
            error = guard.check_incoming_request(method)
            if error is not None:
                raise error
            if self._manage_init and method == guard.init_method:
                return self._incoming_initialize(rctx)
        fn = self._requests.get(method)
        if fn is not None:
            return fn(rctx.params, Context(self, rctx))
        if self.role == "proxy":
            if method == SUCCESSOR:
                return self._from_successor_request(rctx)
            return self._forward_request(rctx, method, rctx.params, to_successor=True)
        raise JsonRpcError.method_not_found(method)

    def _on_notification(self, msg: Any) -> Any:
        method = msg.method
        if not self.guard.allows_incoming_notification(method):
            logger.debug("notification %r before initialization dropped", method)
            return None
        if method == SESSION_UPDATE and self.role != "proxy":
            return self._incoming_session_update(msg)
        fn = self._notifications.get(method)
        if fn is not None:
            return fn(msg.params, Context(self, None, msg))
        if self.role == "proxy" and method != CANCEL_METHOD:  # cancellation is hop-local
            if method == SUCCESSOR:
                return self._from_successor_notification(msg)
            self.notify_successor(method, msg.params, passthrough=True)
        return None

    def _incoming_session_update(self, msg: Any) -> Any:
        # Strategy: known updates take the read gate's fast path (a precompiled per-variant
        # check, no view object, no diagnostics); everything else the full classifier.
        params = msg.params
        if type(params) is dict:
            update = params.get("update")
            fast = self._fast_known(update)
        else:
            update = fast = None
        if fast is not None:
            event = _known_session_update(params, update, fast)  # type: ignore[arg-type]
        else:
            event = SessionUpdate(params, self.surface.classify_session_update(update))
        if event.known and event.kind == "state_update":
            self.sessions.apply(event.session_id, event.payload)
        fn = self._on_update
        if fn is not None:
            cx = _new_object(Context)  # Context(self, None, msg) without the __init__ call
            cx.connection, cx.request, cx.message = self, None, msg
            return fn(event, cx)
        fn = self._notifications.get(SESSION_UPDATE)
        if fn is not None:
            return fn(params, Context(self, None, msg))
        return None

    def _incoming_initialize(self, rctx: RequestContext) -> Any:
        params = rctx.params
        requested = nego.parse_protocol_version(params)
        version = self.version
        if self.role == "proxy":  # exact match only (§6.7)
            if requested != version:
                raise JsonRpcError(INVALID_REQUEST, data=(
                    f"unsupported ACP protocol version {requested}; "
                    f"this proxy supports ACP protocol version {version}"))
            nego.validate_initialize_request(params, version)
            seen = params
        elif version >= 2:
            nego.select_version(requested, (2,))  # -32022 for 1, handler not invoked
            nego.validate_initialize_request(params, 2)
            seen = params if requested == 2 else nego.canonicalize_v2_initialize(params)
        else:  # v1: any valid version selects v1; newer metadata is normalised (§6.5)
            seen = nego.normalize_v2_to_v1(params) if requested >= 2 else dict(params, protocolVersion=1)
            nego.validate_initialize_request(seen, 1)
        guard = self.guard
        token = guard.begin()
        fn = self._requests.get(rctx.method)
        try:
            if fn is not None:
                result = fn(seen, Context(self, rctx))
            elif self.role == "proxy":
                result = self.send_to_successor(INITIALIZE, dict(seen))
            else:
                result = self._default_initialize_result()
        except BaseException:
            guard.fail(token)
            raise
        if _is_coroutine(result) or isinstance(result, SentRequest):
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
        self.guard.succeed(token, version)
        return result

    def _default_initialize_result(self) -> dict[str, Any]:
        if self.version >= 2:
            return {"protocolVersion": self.version, "info": self.info, "capabilities": {}}
        return {"protocolVersion": 1, "agentInfo": self.info, "agentCapabilities": {}}

    # -- outgoing -----------------------------------------------------------------------

    def _check_first(self, method: str) -> None:
        if self._first_rule is not None and not self._initialize_sent and method != INITIALIZE:
            raise JsonRpcError(INVALID_REQUEST, data=self._first_rule)

    def send_request(self, method: str, params: Any = None, *, passthrough: bool = False,
                     timeout: float | None = None) -> PendingRequest | SentRequest[Any]:
        """Send a request; returns a handle to ``await`` (``PendingRequest``).

        ``initialize`` goes through :meth:`initialize` (and returns a :class:`SentRequest`).

        Args:
            method: the method name.
            params: the params object.
            passthrough: skip the write guard (relays forwarding what they received). The
                initialization guard still applies.
            timeout: seconds until the handle fails with ``asyncio.TimeoutError``.

        Raises:
            JsonRpcError: -32600 when the initialization guard refuses (nothing is sent).
            WireSurfaceError: the negotiated version does not define ``method``.
        """
        if method == INITIALIZE or method == PROXY_INITIALIZE:
            if self.role == "proxy":
                raise JsonRpcError(INVALID_REQUEST, data=_PROXY_SEND_DATA)
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

    def send_notification(self, method: str, params: Any = None, *, passthrough: bool = False) -> bool:
        """Send a notification; returns False when it was dropped (guard or closed).

        A ``session/update`` also has its ``update`` checked by the write guard.

        Raises:
            WireSurfaceError: the negotiated version does not define ``method`` (or the
                update variant).
        """
        self._check_first(method)
        guard = self.guard
        if not guard.ready:
            error = guard.check_outgoing_notification(method)
            if error is not None:
                logger.warning("notification %r dropped: %s", method, error.data)
                return False
        surface = self.surface
        surface.check_outgoing_method(method, "notification", passthrough=passthrough)
        if method == SESSION_UPDATE and not passthrough and type(params) is dict:
            surface.check_outgoing_session_update(params.get("update"))
        return self.raw.notify(method, params)

    def send_session_update(self, session_id: str, update: dict[str, Any], *,
                            passthrough: bool = False, **fields: Any) -> bool:
        """Send ``session/update`` ``{"sessionId", "update", …}`` through the write guard.

        Raises:
            WireSurfaceError: the variant (or v2's inner ``state``) is not defined in the
                negotiated version, unless ``passthrough`` (forwarding a received update).
        """
        return self.send_notification(
            SESSION_UPDATE, {"sessionId": session_id, "update": update, **fields}, passthrough=passthrough)

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
        if self._intercept_initialize is not None:
            intercept, self._intercept_initialize = self._intercept_initialize, None
            self._initialize_sent = True
            return intercept(params)
        guard = self.guard
        error = guard.check_outgoing_request(INITIALIZE)
        if error is not None:
            raise error
        self._initialize_sent = True
        token = guard.begin()
        pending = self.raw.request(INITIALIZE, params)
        return SentRequest(pending, self._initialized(pending, params, token))

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
            hook = self._on_version_mismatch
            if hook is not None and type(result) is dict and result.get("protocolVersion") == 1:
                hook(params, result)
            raise
        guard.succeed(token, self.version)
        return result

    def _mapped_request(self, method: str, params: Any, fn: Callable[[Any], _T], *,
                        settle: bool = False) -> SentRequest[_T]:
        pending = self.send_request(method, params)
        assert isinstance(pending, PendingRequest)  # never initialize

        async def mapped() -> _T:
            result = await pending
            if settle:
                await self._settled()
            return fn(result)

        return SentRequest(pending, mapped())

    async def _settled(self) -> None:
        """Wait until async notification handlers started before now have finished."""
        await self.raw.settled()

    # -- proxies ------------------------------------------------------------------------

    def send_to_successor(self, method: str, params: Any = None, *, passthrough: bool = False,
                          timeout: float | None = None) -> Any:
        """Proxy: send a request to the successor, wrapped in ``_proxy/successor``.

        ``initialize`` gets ``protocolVersion`` pinned to this proxy's version and the
        successor's answer must carry the same version.
        """
        if self.role != "proxy":
            raise TypeError("only proxies have a successor")
        self.surface.check_outgoing_method(method, "request", passthrough=passthrough)
        inner: dict[str, Any] = {"method": method}
        if method == INITIALIZE:
            params = dict(params or {}, protocolVersion=self.version)
        if params is not None:
            inner["params"] = params
        pending = self.raw.request(SUCCESSOR, inner, timeout=timeout)
        if method != INITIALIZE:
            return pending

        async def checked() -> Any:
            result = await pending
            nego.check_negotiated_version(result, self.version)
            return result

        return SentRequest(pending, checked())

    def notify_successor(self, method: str, params: Any = None, *, passthrough: bool = False) -> bool:
        """Proxy: send a notification to the successor, wrapped in ``_proxy/successor``."""
        if self.role != "proxy":
            raise TypeError("only proxies have a successor")
        self.surface.check_outgoing_method(method, "notification", passthrough=passthrough)
        if method == SESSION_UPDATE and not passthrough and type(params) is dict:
            self.surface.check_outgoing_session_update(params.get("update"))
        inner: dict[str, Any] = {"method": method}
        if params is not None:
            inner["params"] = params
        return self.raw.notify(SUCCESSOR, inner)

    @staticmethod
    def _unwrap(params: Any) -> tuple[str, Any]:
        method = params.get("method") if type(params) is dict else None
        inner = params.get("params") if type(params) is dict else None
        if type(method) is not str or (inner is not None and type(inner) not in (dict, list)):
            raise JsonRpcError(INVALID_PARAMS, data="invalid `_proxy/successor` envelope")
        return method, inner

    def _from_successor_request(self, rctx: RequestContext) -> Any:
        method, params = self._unwrap(rctx.params)
        if method in (INITIALIZE, PROXY_INITIALIZE):
            raise JsonRpcError(INVALID_REQUEST, data=PROXY_DATA)
        fn = self._successor_requests.get(method)
        if fn is not None:
            return fn(params, Context(self, rctx))
        return self._forward_request(rctx, method, params, to_successor=False)

    def _from_successor_notification(self, msg: Any) -> Any:
        try:
            method, params = self._unwrap(msg.params)
        except JsonRpcError:
            logger.warning("malformed %s notification dropped", SUCCESSOR)
            return None
        if method == CANCEL_METHOD:  # hop-local; never forwarded
            return None
        fn = self._successor_notifications.get(method)
        if fn is not None:
            return fn(params, Context(self, None, msg))
        self.raw.notify(method, params)
        return None

    async def _forward_request(self, rctx: RequestContext, method: str, params: Any, *,
                               to_successor: bool) -> Any:
        if to_successor:
            pending = self.send_to_successor(method, params, passthrough=True)
        else:
            pending = self.raw.request(method, params)
        watcher = asyncio.ensure_future(rctx.wait_cancelled())
        watcher.add_done_callback(lambda _: pending.cancel() if not watcher.cancelled() else None)
        try:
            return await pending
        finally:
            watcher.cancel()

    # -- sessions (see acp_fast.sessions) -----------------------------------------------

    def build_session(self, cwd: str, **kwargs: Any) -> Any:
        """v2 ``session/new`` -> :class:`~acp_fast.sessions.OpenedSession` (see there)."""
        from .sessions import build_session

        return build_session(self, cwd, **kwargs)

    def resume_session(self, session_id: str, cwd: str, **kwargs: Any) -> Any:
        """v2 ``session/resume`` -> :class:`~acp_fast.sessions.OpenedSession` (see there)."""
        from .sessions import resume_session

        return resume_session(self, session_id, cwd, **kwargs)

    def new_session(self, cwd: str, **kwargs: Any) -> Any:
        """v1 ``session/new`` -> :class:`~acp_fast.sessions.V1Session` (see there)."""
        from .sessions import new_session_v1

        return new_session_v1(self, cwd, **kwargs)

    def __repr__(self) -> str:
        return f"<AcpConnection {self.role} v{self.version} {self.guard.state}>"


# ---------------------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------------------


class Builder:
    """Common part of the role builders: handler registry and the ways to connect."""

    role = "agent"

    def __init__(self, version: int) -> None:
        if version not in nego.SUPPORTED_VERSIONS:
            raise ValueError(f"unsupported ACP protocol version {version}")
        self.version = version
        self._guarded = True
        self._info = _default_info()
        self._requests: dict[str, Handler] = {}
        self._notifications: dict[str, Handler] = {}
        self._successor_requests: dict[str, Handler] = {}
        self._successor_notifications: dict[str, Handler] = {}
        self._on_update: Callable[[SessionUpdate, Context], Any] | None = None
        self._main: Main[Any] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} v{self.version}>"

    def _method(self, name: str, kind: str) -> str:
        """A method name, or the method whose params type is the schema type ``name``."""
        if not name[:1].isupper():
            return name
        surface = WireSurface.for_version(self.version)
        for method in sorted(surface.methods):
            info = surface.method_info(method, kind)
            if info is not None and info.params_type == name:
                return method
        raise ValueError(f"no ACP v{self.version} {kind} has params type {name!r}")

    def _register(self, table: dict[str, Handler], name: str, kind: str, fn: Handler | None) -> Any:
        method = self._method(name, kind)
        if fn is None:
            def decorator(f: Handler) -> Handler:
                table[method] = f
                return f
            return decorator
        table[method] = fn
        return self

    def on_request(self, method: str, fn: Handler | None = None) -> Any:
        """Handle requests ``method`` (a method name or a schema type name such as
        ``"PromptRequest"``) with ``fn(params, cx)``; without ``fn``, a decorator.

        Example:
            >>> agent = Agent.v2().on_request("session/new", lambda p, cx: {"sessionId": "s"})
            >>> @agent.on_request("PromptRequest")
            ... async def prompt(params, cx):
            ...     return {"messageId": "m1"}
        """
        return self._register(self._requests, method, "request", fn)

    def on_notification(self, method: str, fn: Handler | None = None) -> Any:
        """Handle notifications ``method`` with ``fn(params, cx)``; as :meth:`on_request`."""
        return self._register(self._notifications, method, "notification", fn)

    def on_session_update(self, fn: Callable[[SessionUpdate, Context], Any] | None = None) -> Any:
        """Handle ``session/update`` with ``fn(update: SessionUpdate, cx)`` (read-gated)."""
        if fn is None:
            def decorator(f: Callable[[SessionUpdate, Context], Any]) -> Any:
                self._on_update = f
                return f
            return decorator
        self._on_update = fn
        return self

    def with_info(self, name: str, version: str, **fields: Any) -> Builder:
        """The ``Implementation`` sent as ``info`` / ``clientInfo`` / ``agentInfo``."""
        self._info = {"name": name, "version": version, **fields}
        return self

    def without_acp_version_guard(self) -> Builder:
        """Disable negotiation handling and the initialization guard (raw selectors only)."""
        self._guarded = False
        return self

    def with_main(self, main: Main[Any]) -> Builder:
        """The ``main(cx)`` a client connector runs for this implementation."""
        self._main = main
        return self

    def _bind(self, conn: Connection) -> AcpConnection:
        return AcpConnection(conn, self)

    async def connect_to(self, transport: Transport, *, engine: Any = None) -> None:
        """Serve on ``transport`` (a ``Stream`` or an awaitable of one) until it closes."""
        stream = await _resolve(transport)
        conn = Connection(stream, engine=engine)
        self._bind(conn)
        await conn.wait_closed()

    async def connect_with(self, transport: Transport, main: Main[_T], *, engine: Any = None) -> _T:
        """Run ``main(cx)`` on a connection over ``transport``, then close it.

        Returns:
            What ``main`` returned.
        """
        stream = await _resolve(transport)
        conn = Connection(stream, engine=engine)
        acp = self._bind(conn)
        try:
            return await main(acp)
        finally:
            conn.close()
            await conn.wait_closed()

    def serve_stdio(self, *, engine: Any = None) -> None:
        """Serve this process's stdin/stdout until EOF (blocking; uvloop when installed)."""
        _transport.run(self.connect_to(_transport.connect_stdio(), engine=engine))


class AgentBuilder(Builder):
    """An agent implementation (``Agent.builder()`` for v1, ``Agent.v2()`` for v2)."""

    role = "agent"


class ClientBuilder(Builder):
    """A client implementation (``Client.builder()`` for v1, ``Client.v2()`` for v2)."""

    role = "client"


class ProxyBuilder(Builder):
    """A proxy (``Proxy.builder()`` / ``Proxy.v2()``): initialized by ``_proxy/initialize``.

    Unhandled requests/notifications from the predecessor are forwarded to the successor
    and vice versa; ``$/cancel_request`` is hop-local and never forwarded.
    """

    role = "proxy"

    def on_successor_request(self, method: str, fn: Handler | None = None) -> Any:
        """Handle requests that arrive from the successor (inside ``_proxy/successor``)."""
        return self._register(self._successor_requests, method, "request", fn)

    def on_successor_notification(self, method: str, fn: Handler | None = None) -> Any:
        """Handle notifications that arrive from the successor."""
        return self._register(self._successor_notifications, method, "notification", fn)


# ---------------------------------------------------------------------------------------
# routers: pick an implementation from the first frame
# ---------------------------------------------------------------------------------------


_NOT_YET: Any = object()


class _Handoff:
    """Reads a stream until the first call-shaped frame decides, then hands it over.

    It is stream-shaped (``attach``/``write``/``close``…) so the selected implementation's
    ``Connection`` consumes it like any other stream: first the bytes read so far (the
    complete first frame, possibly rewritten), then everything after.
    """

    def __init__(self, stream: Any, engine: Any, decide: Callable[[Any], Any]) -> None:
        self._stream = stream
        self._engine = engine
        self._decide = decide
        self._decoder = engine.Decoder()
        self._buf = bytearray()
        self._loop = asyncio.get_running_loop()
        self.decision: asyncio.Future[Any] = self._loop.create_future()
        self.default_on_invalid = stream.default_on_invalid
        self._on_data: Callable[[bytes], None] | None = None
        self._on_eof: Callable[[Any], None] | None = None
        self._on_writable: Callable[[bool], None] | None = None
        self._eof: Any = _NOT_YET
        stream.attach(self._data, self._eof_cb, self._writable)

    # -- from the real stream -------------------------------------------------------------

    def _data(self, data: bytes) -> None:
        if self._on_data is not None:
            self._on_data(data)
            return
        self._buf += data
        if not self.decision.done():
            self._frames(self._decoder.feed(data))

    def _eof_cb(self, exc: Any) -> None:
        if self._on_eof is not None:
            self._on_eof(exc)
            return
        self._eof = exc
        if not self.decision.done():
            self._frames(self._decoder.feed_eof())
        if not self.decision.done():  # EOF before any call: nothing to serve
            self.decision.set_result(None)
            self._stream.close()

    def _writable(self, writable: bool) -> None:
        if self._on_writable is not None:
            self._on_writable(writable)

    def _frames(self, frames: list[Any]) -> None:
        for frame in frames:
            outcome = self._decide(frame)
            if outcome is None:
                continue
            verdict, payload = outcome
            if verdict == "reject":
                if payload is not None:
                    self._stream.write(payload)
                self._stream.close()
                self.decision.set_result(None)
            else:
                version, old, new = payload
                if new is not None:
                    at = self._buf.find(bytes(old))
                    self._buf[at:at + len(old)] = new
                self.decision.set_result(version)
            return

    # -- to the selected implementation (the Stream interface a Connection uses) -----------

    def attach(self, on_data: Callable[[bytes], None], on_eof: Callable[[Any], None],
               on_writable: Callable[[bool], None]) -> None:
        self._loop.call_soon(self._start, on_data, on_eof, on_writable)

    def _start(self, on_data: Callable[[bytes], None], on_eof: Callable[[Any], None],
               on_writable: Callable[[bool], None]) -> None:
        data, self._buf = bytes(self._buf), bytearray()
        self._on_data, self._on_eof, self._on_writable = on_data, on_eof, on_writable
        if data:
            on_data(data)
        if self._eof is not _NOT_YET:
            on_eof(self._eof)
        elif self._stream.writing_paused:
            on_writable(False)

    def write(self, data: bytes) -> None:
        self._stream.write(data)

    def pause_reading(self) -> None:
        self._stream.pause_reading()

    def resume_reading(self) -> None:
        self._stream.resume_reading()

    def close(self) -> None:
        self._stream.close()

    async def wait_closed(self) -> None:
        await self._stream.wait_closed()

    def __getattr__(self, name: str) -> Any:  # writing_paused, get_extra_info, pid, ...
        return getattr(self._stream, name)


def _reject_batch(engine: Any, batch: Any, error: JsonRpcError) -> bytes | None:
    """Every request entry gets ``error`` with its own id; malformed calls their own error."""
    lines = []
    for entry in batch.entries:
        if entry.kind == engine.REQUEST:
            lines.append(_encode_error(engine, entry.id, error))
        elif entry.kind == engine.MALFORMED:
            line = engine.error_reply(entry)
            if line is not None:
                lines.append(line)
    return engine.encode_batch(lines) if lines else None


def _encode_error(engine: Any, rid: Any, error: JsonRpcError) -> bytes:
    if error.has_data:
        return engine.encode_error(rid, error.code, error.message, error.data)  # type: ignore[no-any-return]
    return engine.encode_error(rid, error.code, error.message)  # type: ignore[no-any-return]


class _Router:
    """First-frame selection shared by the agent and proxy routers (protocol.md §2.17, §6.4)."""

    role = "agent"
    init_method = INITIALIZE
    first_request = "first ACP request must be initialize"
    first_message = "first ACP message must be an initialize request"

    def __init__(self) -> None:
        self._impls: dict[int, Builder] = {}

    def _add(self, version: int, impl: Builder) -> Any:
        if impl.version != version or impl.role != self.role:
            raise TypeError(f"with_v{version} needs a v{version} {self.role} builder, not {impl!r}")
        self._impls[version] = impl
        return self

    def with_v1(self, impl: Builder) -> Any:
        """Serve v1 connections with ``impl`` (a v1 builder of this role)."""
        return self._add(1, impl)

    def with_v2(self, impl: Builder) -> Any:
        """Serve v2 connections with ``impl`` (a v2 builder of this role)."""
        return self._add(2, impl)

    @property
    def versions(self) -> tuple[int, ...]:
        return tuple(sorted(self._impls))

    def _select(self, params: Any) -> tuple[int, Any]:
        """``(version, rewritten params or None)``; raises the JsonRpcError to answer."""
        raise NotImplementedError

    def _decide(self, engine: Any, frame: Any) -> Any:
        kind = frame.kind
        if kind == engine.RESPONSE or (kind == engine.MALFORMED and frame.response_shaped):
            return None  # response-only frames before initialization are ignored
        if kind == engine.MALFORMED:
            return "reject", engine.error_reply(frame)
        if kind == engine.NOTIFICATION:
            return "reject", None  # nothing to answer: the connection just closes
        if kind == engine.REQUEST:
            if frame.method != self.init_method:
                return "reject", _encode_error(engine, frame.id, JsonRpcError(INVALID_REQUEST, data=self.first_request))
            try:
                version, params = self._select(frame.params)
            except JsonRpcError as exc:
                return "reject", _encode_error(engine, frame.id, exc)
            new = None if params is None else engine.encode_request(frame.id, frame.method, params)[:-1]
            return "accept", (version, frame.raw, new)
        # a batch: its first call-shaped entry decides (§2.17)
        entries = frame.entries
        first = next((e for e in entries if not (e.kind == engine.RESPONSE or (
            e.kind == engine.MALFORMED and e.response_shaped))), None)
        if first is None:
            return None
        if first.kind == engine.REQUEST and first.method == self.init_method:
            try:
                version, params = self._select(first.params)
            except JsonRpcError as exc:
                return "reject", _reject_batch(engine, frame, exc)
            if params is None:
                return "accept", (version, frame.raw, None)
            parts = [engine.encode_request(e.id, e.method, params)[:-1] if e is first else bytes(e.raw)
                     for e in entries]
            return "accept", (version, frame.raw, b"[" + b",".join(parts) + b"]")
        text = self.first_message if first.kind == engine.NOTIFICATION else self.first_request
        return "reject", _reject_batch(engine, frame, JsonRpcError(INVALID_REQUEST, data=text))

    async def connect_to(self, transport: Transport, *, engine: Any = None) -> None:
        """Serve one connection: select an implementation from the first frame, then run it.

        On a rejection the router answers (ids and batch framing kept), closes the stream
        and never starts an implementation.
        """
        if not self._impls:
            raise ValueError("the router has no implementations (use with_v1 / with_v2)")
        eng = engine if engine is not None else _engine
        stream = await _resolve(transport)
        handoff = _Handoff(stream, eng, lambda frame: self._decide(eng, frame))
        version = await handoff.decision
        if version is None:
            await stream.wait_closed()
            return
        await self._impls[version].connect_to(handoff, engine=eng)

    def serve_stdio(self, *, engine: Any = None) -> None:
        """Serve this process's stdin/stdout until EOF (blocking)."""
        _transport.run(self.connect_to(_transport.connect_stdio(), engine=engine))


class AgentRouter(_Router):
    """``Agent.protocol_router().with_v1(a).with_v2(b)`` (protocol.md §6.4 [SEED]).

    Picks the highest configured version <= the requested one (a v1-only router keeps
    fallback-to-latest), else answers -32022 with the configured versions and closes.
    Exact-version requests reach the implementation unchanged; a newer request is
    canonicalised to v2, a v2+ request for the v1 implementation normalised (§6.5).
    """

    def _select(self, params: Any) -> tuple[int, Any]:
        requested = nego.parse_protocol_version(params)
        version = nego.select_version(requested, self._impls)
        nego.validate_initialize_request(params, 2 if requested >= 2 else 1)
        if requested == version or requested < 1:
            return version, None
        if version == 2:
            return 2, nego.canonicalize_v2_initialize(params)
        return 1, nego.normalize_v2_to_v1(params)


class ProxyRouter(_Router):
    """``Proxy.protocol_router()``: exact v1/v2 match on ``_proxy/initialize`` (§6.7)."""

    role = "proxy"
    init_method = PROXY_INITIALIZE
    first_request = "first ACP proxy request must be `_proxy/initialize`"
    first_message = "first ACP proxy message must be an `_proxy/initialize` request"

    def _select(self, params: Any) -> tuple[int, Any]:
        requested = nego.parse_protocol_version(params)
        if requested not in self._impls:
            supported = ", ".join(str(v) for v in self.versions)
            raise JsonRpcError(INVALID_REQUEST, data=(
                f"unsupported ACP protocol version {requested}; "
                f"this proxy supports ACP protocol version(s) {supported}"))
        nego.validate_initialize_request(params, requested)
        return requested, None


# ---------------------------------------------------------------------------------------
# client protocol connector (§6.6)
# ---------------------------------------------------------------------------------------

ClientFactory = Callable[[], ClientBuilder]
TransportFactory = Callable[[], Transport]


class ClientConnector:
    """``Client.protocol_connector().with_v1(f1).with_v2(f2)`` (protocol.md §6.6).

    Both implementations and the agent transport are factories, because falling back may
    need a fresh connection. Each factory returns a client builder with a ``with_main``
    function whose first message is ``initialize``.

    The highest configured implementation starts. If a v2 ``initialize`` is answered
    successfully with version 1 and a v1 implementation exists, the v1 implementation
    starts; if its ``initialize`` params equal the lossless v1 normalisation of the v2
    request the agent already saw, the agent connection is reused and the original answer
    is delivered without a second ``initialize``; otherwise a new connection is opened
    (fresh factories) for a normal v1 start. A rejected v2 ``initialize`` is surfaced,
    never taken as permission to fall back.
    """

    def __init__(self) -> None:
        self._factories: dict[int, ClientFactory] = {}

    def with_v1(self, factory: ClientFactory) -> ClientConnector:
        self._factories[1] = factory
        return self

    def with_v2(self, factory: ClientFactory) -> ClientConnector:
        self._factories[2] = factory
        return self

    def _build(self, version: int) -> ClientBuilder:
        builder = self._factories[version]()
        if builder.version != version or builder.role != "client" or builder._main is None:
            raise TypeError(f"the v{version} factory must return a v{version} client builder with_main()")
        return builder

    def _bind(self, conn: Connection, builder: ClientBuilder) -> AcpConnection:
        acp = builder._bind(conn)
        acp._first_rule = (f"ACP protocol version {builder.version} client implementation "
                           "must send initialize first")
        return acp

    async def connect_to(self, transport_factory: TransportFactory, *, engine: Any = None) -> Any:
        """Run the selected client implementation against an agent; returns its ``main``'s
        result (the connection is closed afterwards).

        Raises:
            JsonRpcError: -32600 when no implementation is configured.
        """
        if not self._factories:
            raise JsonRpcError(INVALID_REQUEST, data=(
                "client protocol connector has no configured ACP protocol implementations"))
        top = max(self._factories)
        if top == 1 or 1 not in self._factories:
            return await self._plain(top, transport_factory, engine)
        loop = asyncio.get_running_loop()
        builder2 = self._build(2)
        conn = Connection(await _resolve(transport_factory()), engine=engine)
        acp2 = self._bind(conn, builder2)
        mismatch: asyncio.Future[tuple[dict[str, Any], Any]] = loop.create_future()
        acp2._on_version_mismatch = lambda p, r: None if mismatch.done() else mismatch.set_result((p, r))
        main2 = asyncio.ensure_future(builder2._main(acp2))  # type: ignore[misc]
        try:
            await asyncio.wait({main2, mismatch}, return_when=asyncio.FIRST_COMPLETED)
            if not mismatch.done():
                return await main2
            main2.cancel()
            await asyncio.gather(main2, return_exceptions=True)
            v2_params, response = mismatch.result()
            probe = nego.normalize_v2_to_v1_lossless(v2_params)
            builder1 = self._build(1)
            acp1 = self._bind(conn, builder1)  # takes over the connection's dispatch
            same: asyncio.Future[bool] = loop.create_future()

            def intercept(params1: dict[str, Any]) -> SentRequest[Any]:
                reuse = probe is not None and (
                    nego.canonicalize_v1_initialize(params1) == nego.canonicalize_v1_initialize(probe))
                same.set_result(reuse)
                if reuse:
                    acp1.guard.succeed(acp1.guard.begin(), 1)
                    return SentRequest(None, _value(dict(response)))
                return SentRequest(None, loop.create_future())  # cancelled below

            acp1._intercept_initialize = intercept
            main1 = asyncio.ensure_future(builder1._main(acp1))  # type: ignore[misc]
            await asyncio.wait({main1, same}, return_when=asyncio.FIRST_COMPLETED)
            if not same.done() or same.result():
                return await main1
            main1.cancel()
            await asyncio.gather(main1, return_exceptions=True)
        finally:
            conn.close()
            await conn.wait_closed()
        return await self._plain(1, transport_factory, engine)

    async def _plain(self, version: int, transport_factory: TransportFactory, engine: Any) -> Any:
        builder = self._build(version)
        conn = Connection(await _resolve(transport_factory()), engine=engine)
        acp = self._bind(conn, builder)
        try:
            return await builder._main(acp)  # type: ignore[misc]
        finally:
            conn.close()
            await conn.wait_closed()


async def _value(value: _T) -> _T:
    return value


# ---------------------------------------------------------------------------------------
# the role namespaces
# ---------------------------------------------------------------------------------------


class Agent:
    """Agent role: ``Agent.builder()`` (v1), ``Agent.v2()``, ``Agent.protocol_router()``."""

    @staticmethod
    def builder() -> AgentBuilder:
        """A v1 agent: selects v1 for any valid ``initialize`` (normalising v2 metadata)."""
        return AgentBuilder(1)

    @staticmethod
    def v2() -> AgentBuilder:
        """A v2-only agent: guarded responder; rejects a v1 ``initialize`` with -32022."""
        return AgentBuilder(2)

    @staticmethod
    def protocol_router() -> AgentRouter:
        return AgentRouter()


class Client:
    """Client role: ``Client.builder()`` (v1), ``Client.v2()``, ``Client.protocol_connector()``."""

    @staticmethod
    def builder() -> ClientBuilder:
        """A v1 client: sends ``protocolVersion: 1`` and requires a v1 answer."""
        return ClientBuilder(1)

    @staticmethod
    def v2() -> ClientBuilder:
        """A v2-only client: guarded initiator; always sends 2 and fails on any other answer."""
        return ClientBuilder(2)

    @staticmethod
    def protocol_connector() -> ClientConnector:
        return ClientConnector()


class Proxy:
    """Proxy role: ``Proxy.builder()`` (v1), ``Proxy.v2()``, ``Proxy.protocol_router()``."""

    @staticmethod
    def builder() -> ProxyBuilder:
        return ProxyBuilder(1)

    @staticmethod
    def v2() -> ProxyBuilder:
        return ProxyBuilder(2)

    @staticmethod
    def protocol_router() -> ProxyRouter:
        return ProxyRouter()


def run_agent_stdio(agent: Builder | _Router, *, engine: Any = None) -> None:
    """Serve ``agent`` (a builder or router) on this process's stdio until EOF (blocking).

    Example::

        acp_fast.run_agent_stdio(Agent.v2().on_request("session/new", new_session))
    """
    agent.serve_stdio(engine=engine)
