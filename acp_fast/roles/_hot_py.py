# cython: annotation_typing=False
"""The per-message hot path of the builder API (pure twin; also the compiled twin's source).

What runs once per received message between the JSON-RPC connection and the user's
handler: what a handler sees ([`Context`][acp_fast.roles._hot_py.Context], [`SessionUpdate`][acp_fast.roles._hot_py.SessionUpdate]) and the small
callables the connection installs in its per-method tables when it becomes ready.

This file is the pure-Python twin and, unchanged, the source of the compiled twin:
`setup.py` compiles it with Cython as `acp_fast.roles._hot_c`, where the augmenting
declarations in `_hot_c.pxd` make the classes C types with C-level fields (constructed
several times faster: they are made once per message). Keep it plain Python that Cython
accepts (no closures in the classes). `acp_fast.roles._hot` selects the twin.
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, TypeVar

from ..errors import INVALID_REQUEST as _INVALID_REQUEST
from ..errors import JsonRpcError
from ..jsonrpc import RequestContext, Responder
from ..protocol.facts import INITIALIZE as _INITIALIZE
from ..protocol.facts import INITIALIZING_METHODS as _INITIALIZING
from ..protocol.facts import SESSION_UPDATE as _SESSION_UPDATE
from ..protocol.surface import KnownVariant, SessionUpdateView

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from ..engine import Message
    from ..jsonrpc import RequestResult
    from ..jsontypes import Json, JsonObject
    from ..protocol.gate import Gate
    from ..protocol.guard import InitializationGuard
    from ..protocol.surface import WireSurface
    from .context import Peer, Request, SuccessorPeer

__all__ = ["Context", "NotificationHandler", "ProxyContext", "RequestHandler", "SessionUpdate", "UpdateDispatcher",
           "Sender"]

_T = TypeVar("_T")
_logger = logging.getLogger("acp_fast.roles")

_STATE_UPDATE = "state_update"
#: known updates that change the client's tracked session state
_TRACKED = frozenset({"state_update", "tool_call", "tool_call_update"})


class SessionUpdate:
    """One received `session/update`, passed through the read gate.

    Attributes:
        session_id: `params["sessionId"]` (`None` if absent).
        kind: the `sessionUpdate` value (`""` if absent or not a string).
        payload: the `update` object, untouched (same identity).
        params: the notification's params, unchanged.
    """

    __slots__ = ("_gate", "kind", "params", "payload", "session_id")

    def __init__(self, session_id: Json, kind: str, payload: Json, params: Json,
                 gate: KnownVariant | SessionUpdateView) -> None:
        self.session_id = session_id
        self.kind = kind
        self.payload = payload
        self.params = params
        self._gate = gate  # the fast path's KnownVariant, or the full read gate's view

    @property
    def known(self) -> bool:
        """True when the update has the negotiated version's shape; anything else is
        untyped passthrough (store, forward or display it; never bind it to a type)."""
        gate = self._gate
        return isinstance(gate, KnownVariant) or bool(gate.known)

    @property
    def view(self) -> SessionUpdateView:
        """The [`SessionUpdateView`][acp_fast.protocol.surface.SessionUpdateView] of the negotiated
        version (built on first access for known updates)."""
        gate = self._gate
        if type(gate) is KnownVariant:
            gate = self._gate = gate.view(self.payload)
        assert isinstance(gate, SessionUpdateView)
        return gate

    @property
    def passthrough(self) -> bool:
        """True for unknown, other-version or malformed updates: keep them raw."""
        return not self.known

    def __repr__(self) -> str:
        return f"SessionUpdate({self.session_id!r}, {self.kind!r}, {self.view.status})"


class Context:
    """What a handler gets besides `params`: the message and the way back to the peer.

    Attributes:
        connection: the [`AcpConnection`][acp_fast.roles.AcpConnection] the message came in on.
        request: the jsonrpc [`RequestContext`][acp_fast.jsonrpc.RequestContext] (`None` for
            notifications).
        message: the jsonrpc `Message` (the request's, for requests).
    """

    __slots__ = ("connection", "message", "request")

    def __init__(self, connection: Peer, request: RequestContext | None, message: Message) -> None:
        self.connection = connection
        self.request = request
        self.message = message

    def __class_getitem__(cls, item: object) -> types.GenericAlias:
        """`Context[C]` at run time too (to a type checker it is generic in its connection:
        `Context[AgentConnection[V2]]`; see `_hot.pyi`)."""
        return types.GenericAlias(cls, item)

    @property
    def method(self) -> str:
        """The message's method."""
        method = self.message.method
        assert method is not None  # requests and notifications have one
        return method

    @property
    def id(self) -> int | str | None:
        """The request id (`None` for notifications)."""
        return None if self.request is None else self.request.id

    @property
    def version(self) -> int:
        """The ACP version of the implementation handling the message."""
        return self.connection.version

    # -- cancellation (requests) ----------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once the peer sent `$/cancel_request` for this request."""
        return self.request is not None and self.request.cancelled

    async def wait_cancelled(self) -> None:
        """Return when the peer cancels this request.

        Raises:
            RuntimeError: called for a notification.
        """
        if self.request is None:
            raise RuntimeError("notifications cannot be cancelled")
        await self.request.wait_cancelled()

    def raise_if_cancelled(self) -> None:
        """Raise `JsonRpcError` -32800 if the peer cancelled this request."""
        if self.request is not None:
            self.request.raise_if_cancelled()

    async def run_until_cancelled(self, aw: Awaitable[_T]) -> _T:
        """Await `aw` unless the peer cancels first (then -32800 is raised)."""
        if self.request is None:
            return await aw
        return await self.request.run_until_cancelled(aw)

    def defer(self) -> Responder:
        """Answer later through the returned [`Responder`][acp_fast.jsonrpc.Responder].

        Raises:
            RuntimeError: for notifications, and for the initializing request of a guarded
                connection (its handler returns the result so the guard can check it).
        """
        if self.request is None:
            raise RuntimeError("notifications are not answered")
        if self.connection.manages_initialize and self.connection.initializes(self.method):
            raise RuntimeError("initialize handlers return their result (the guard checks it)")
        return self.request.defer()

    # -- sending back (the connection's methods) -----------------------------------------

    def send_request(self, method: str, params: Json = None, *, passthrough: bool = False,
                     timeout: float | None = None) -> Request[Json]:
        """See [`AcpConnection.send_request`][acp_fast.roles.AcpConnection.send_request]."""
        return self.connection.send_request(method, params, passthrough=passthrough, timeout=timeout)

    def send_notification(self, method: str, params: Json = None, *, passthrough: bool = False) -> bool:
        """See [`AcpConnection.send_notification`][acp_fast.roles.AcpConnection.send_notification]."""
        return self.connection.send_notification(method, params, passthrough=passthrough)

    def send_session_update(self, session_id: str, update: JsonObject, *,
                            passthrough: bool = False, **fields: Json) -> bool:
        """See `AcpConnection.send_session_update`."""
        sender = self.connection.sender
        if passthrough or fields:
            return sender(session_id, update, passthrough, **fields)
        return sender.plain(session_id, update)  # the hot path: no keyword handling

    async def drain(self) -> None:
        """Wait while the peer is not reading what we send (see [`AcpConnection.drain`][acp_fast.roles.AcpConnection.drain])."""
        await self.connection.drain()

    def start_task(self, coro: Coroutine[object, object, _T]) -> asyncio.Task[_T]:
        """Run `coro` in the background, owned by the connection (see
        [`AcpConnection.start_task`][acp_fast.roles.AcpConnection.start_task])."""
        return self.connection.start_task(coro)

    def __repr__(self) -> str:
        return f"<Context {self.method!r} v{self.version}>"


class ProxyContext(Context):
    """What a proxy's handlers get: a [`Context`][acp_fast.roles._hot_py.Context] whose connection is a
    [`ProxyConnection`][acp_fast.roles.ProxyConnection], plus the way on to the successor."""

    __slots__ = ()

    def send_to_successor(self, method: str, params: Json = None, *, passthrough: bool = False,
                          timeout: float | None = None) -> Request[Json]:
        """Send a request to the successor (see `ProxyConnection.send_to_successor`)."""
        return self.proxy.send_to_successor(method, params, passthrough=passthrough, timeout=timeout)

    def notify_successor(self, method: str, params: Json = None, *, passthrough: bool = False) -> bool:
        """Send a notification to the successor (see `ProxyConnection.notify_successor`)."""
        return self.proxy.notify_successor(method, params, passthrough=passthrough)

    @property
    def proxy(self) -> SuccessorPeer:
        """The proxy's connection (`connection`, typed as the proxy's)."""
        return self.connection  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<ProxyContext {self.method!r} v{self.version}>"


class RequestHandler:
    """Installed per request method: `handler(params, Context(connection, rctx, message))`."""

    __slots__ = ("connection", "context_type", "handler")

    def __init__(self, connection: Peer, handler: Callable[[Json, Context], object],
                 context_type: type[Context]) -> None:
        self.connection = connection
        self.handler = handler
        self.context_type = context_type

    def __call__(self, rctx: RequestContext) -> RequestResult:
        message = rctx.message
        return self.handler(message.params, self.context_type(self.connection, rctx, message))


class NotificationHandler:
    """Installed per notification method: `handler(params, Context(connection, None, message))`."""

    __slots__ = ("connection", "context_type", "handler")

    def __init__(self, connection: Peer, handler: Callable[[Json, Context], object],
                 context_type: type[Context]) -> None:
        self.connection = connection
        self.handler = handler
        self.context_type = context_type

    def __call__(self, message: Message) -> object:
        return self.handler(message.params, self.context_type(self.connection, None, message))


class UpdateDispatcher:
    """`session/update`: the read gate, session-state tracking, then the handler.

    A known update (the fast path `gate.known(update)` returns its variant; compiled, a C
    call to the compiled gate) becomes a `SessionUpdate` carrying the variant; anything else goes through `classify` (the
    full read gate) and carries its view. Known `state_update`, `tool_call` and
    `tool_call_update` payloads are applied to the session states (`apply_state`)
    before the handler sees them. The handler is
    `on_update(event, cx)`, else `fallback(params, cx)` (a plain notification handler).
    """

    __slots__ = ("apply_state", "classify", "connection", "context_type", "event_type",
                 "fallback", "gate", "on_update")

    def __init__(self, connection: Peer, gate: Gate,
                 classify: Callable[[Json], SessionUpdateView], apply_state: Callable[[Json, Json], None],
                 on_update: Callable[[SessionUpdate, Context], object] | None,
                 fallback: Callable[[Json, Context], object] | None, event_type: type[SessionUpdate],
                 context_type: type[Context]) -> None:
        self.connection = connection
        self.gate = gate
        self.classify = classify
        self.apply_state = apply_state
        self.on_update = on_update
        self.fallback = fallback
        self.event_type = event_type
        self.context_type = context_type

    def __call__(self, message: Message) -> object:
        params = message.params
        if type(params) is dict:
            # dict.get(params, …), not params.get(…): compiled, a C lookup (no method call)
            update = dict.get(params, "update")
            session_id = dict.get(params, "sessionId")
            variant = self.gate.known(update)
        else:
            update = None
            session_id = None
            variant = None
        if variant is not None:
            kind = variant.kind
            event = self.event_type(session_id, kind, update, params, variant)
            if kind in _TRACKED:
                self.apply_state(session_id, update)
        else:
            view = self.classify(update)
            event = self.event_type(session_id, view.kind, update, params, view)
            if view.kind in _TRACKED and view.known:
                self.apply_state(session_id, update)
        context = self.context_type(self.connection, None, message)
        if self.on_update is not None:
            return self.on_update(event, context)
        if self.fallback is not None:
            return self.fallback(params, context)
        return None


class Sender:
    """The outgoing side of one connection (or of a proxy's successor side): one path per
    message kind, shared by every connection kind.

    `send_request` / `send_notification` check the initialization guard, the first-message
    rule (a connector's client: nothing before `initialize`) and the write surface of the
    version, then queue the message through `request` / `notify`; once `ready` (guard ready,
    first rule met) a method the version defines takes the short path (one set lookup).
    Calling the sender is `send_session_update(session_id, update, *, passthrough=False,
    **fields)`: a plain update the compiled check of the variant (`gate.known`) accepts goes
    straight to `notify`; anything else takes `send_notification` (the full write guard,
    which raises `WireSurfaceError` for what the version does not define). Responses are
    the JSON-RPC connection's (`Responder`); what is forwarded verbatim (a proxy's
    pass-through) is not sent as a role and does not come here.

    Args:
        gate: the write guard's fast check of an update variant (the compiled `Gate` on the
            compiled hot path: a C call).
        surface: the `WireSurface` of the version.
        notify: `notify(method, params)` queues a notification (the engine's outbox, or a
            proxy's successor envelope).
        request: `request(method, params, timeout=...)` sends a request, returns its handle.
        guard: the connection's `InitializationGuard` (`None`: none, a proxy's successor side).
        first_rule: the -32600 `data` for anything sent before `initialize` (`None`: no rule).
        initializing: `initializing(method, params)` for an initializing request sent through
            `send_request` (a client's `initialize`; a proxy refuses): a handle, or `None` to
            let the guard decide. `None`: initializing requests are ordinary requests.
    """

    __slots__ = ("first_rule", "gate", "guard", "initializing", "notification_ok", "notify", "ready",
                 "request", "request_ok", "surface")

    def __init__(self, gate: Gate, surface: WireSurface, notify: Callable[[str, Json], bool],
                 request: Callable[..., Request[Json]], guard: InitializationGuard | None = None,
                 first_rule: str | None = None,
                 initializing: Callable[[str, Json], Request[Json] | None] | None = None) -> None:
        self.gate = gate
        self.surface = surface
        self.notify = notify
        self.request = request
        self.guard = guard
        self.first_rule = first_rule
        self.initializing = initializing
        self.request_ok = surface.methods_of_kind("request") - _INITIALIZING
        self.notification_ok = surface.methods_of_kind("notification")
        #: the short paths are open: the guard is ready and the first rule met
        self.ready = False
        self.update_ready()

    def update_ready(self) -> None:
        """Open the short paths once the guard is ready and the first rule met (call it when
        either changes)."""
        guard = self.guard
        self.ready = (guard is None or guard.ready) and self.first_rule is None

    def first_sent(self) -> None:
        """`initialize` went out: the first-message rule is met."""
        self.first_rule = None
        self.update_ready()

    def _check_first(self, method: str) -> None:
        if self.first_rule is not None and method != _INITIALIZE:
            raise JsonRpcError(_INVALID_REQUEST, data=self.first_rule)

    def send_request(self, method: str, params: Json = None, passthrough: bool = False,
                     timeout: float | None = None) -> Request[Json]:
        """Send a request through the guards (see `AcpConnection.send_request`)."""
        if self.ready and method in self.request_ok:
            return self.request(method, params, timeout=timeout)
        if self.initializing is not None and method in _INITIALIZING:
            sent = self.initializing(method, params)
            if sent is not None:
                return sent
        self._check_first(method)
        guard = self.guard
        if guard is not None and (not guard.ready or method == _INITIALIZE):
            error = guard.check_outgoing_request(method)
            if error is not None:
                raise error
        self.surface.check_outgoing_method(method, "request", passthrough=passthrough)
        return self.request(method, params, timeout=timeout)

    def send_notification(self, method: str, params: Json = None, passthrough: bool = False) -> bool:
        """Send a notification through the guards (see `AcpConnection.send_notification`);
        False when it was dropped."""
        if self.ready and method in self.notification_ok:
            if method == _SESSION_UPDATE and not passthrough and type(params) is dict:
                self.check_update(dict.get(params, "update"))
            return self.notify(method, params)
        self._check_first(method)
        guard = self.guard
        if guard is not None and not guard.ready:
            error = guard.check_outgoing_notification(method)
            if error is not None:
                _logger.warning("notification %r dropped: %s", method, error.data)
                return False
        self.surface.check_outgoing_method(method, "notification", passthrough=passthrough)
        if method == _SESSION_UPDATE and not passthrough and type(params) is dict:
            self.check_update(dict.get(params, "update"))
        return self.notify(method, params)

    def check_update(self, update: Json) -> None:
        """The write guard of an update variant: raises `WireSurfaceError` for one the
        version does not define."""
        if self.gate.known(update) is None:
            self.surface.check_outgoing_session_update(update)

    def __call__(self, session_id: str, update: JsonObject, passthrough: bool = False, **fields: Json) -> bool:
        if self.ready and not passthrough and not fields and self.gate.known(update) is not None:
            return self.notify(_SESSION_UPDATE, {"sessionId": session_id, "update": update})
        return self.send_notification(_SESSION_UPDATE, {"sessionId": session_id, "update": update, **fields},
                                      passthrough)

    def plain(self, session_id: str, update: JsonObject) -> bool:
        """`self(session_id, update)` without options, for `Context.send_session_update`:
        two positional arguments and no keyword handling (a compiled call with `**fields`
        builds a dict each time; this is once per streamed update)."""
        if self.ready and self.gate.known(update) is not None:
            return self.notify(_SESSION_UPDATE, {"sessionId": session_id, "update": update})
        return self.send_notification(_SESSION_UPDATE, {"sessionId": session_id, "update": update})
