"""The one dispatch path of a connection: :class:`Dispatch`.

Every incoming request and notification of an :class:`~acp_fast.roles.AcpConnection` goes
through its ``Dispatch``, which holds what decides where a message goes:

* the initialization guard and the wire surface (through the connection);
* the builder's frozen :class:`~acp_fast.roles.table.HandlerTable`;
* the handlers added at run time (:class:`DynamicHandler`: MCP routes, a client's own
  ``add_dynamic_handler``);
* the role's rules, as data (:class:`Rules`): which requests are tracked per session (a
  client's permission requests), whether ``session/update`` passes the read gate (agents and
  clients) or is relayed (proxies), what runs before every message (a proxy settling the
  routes of answered session setups), what an unhandled message becomes (-32601, a dropped
  notification, a proxy's forwarding), and the role's own extra entries (a proxy's
  ``_proxy/successor`` envelopes).

Until the connection is ready, every message takes the guarded slow path (:meth:`request`,
:meth:`notification`, installed as the JSON-RPC connection's fallbacks). When it becomes
ready, :meth:`install` builds one entry per method from those parts and installs it in the
JSON-RPC connection's per-method tables: on the hot path an entry is the compiled
``RequestHandler`` / ``NotificationHandler`` / ``UpdateDispatcher`` of ``_hot_py`` (one
dict lookup, one call, one ``Context``), wrapped only where a rule or a dynamic handler
applies to that method. Adding a dynamic handler later rebuilds that method's entry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..errors import JsonRpcError
from ..jsonrpc import Connection, RequestContext, RequestResult
from ..jsontypes import Json
from ..protocol.facts import INITIALIZE, PROXY_INITIALIZE, PROXY_INITIALIZE_SPEC, SESSION_UPDATE
from ..protocol.facts import INITIALIZING_METHODS as INITIALIZING
from ._hot import Context, NotificationHandler, RequestHandler, SessionUpdate, UpdateDispatcher
from .context import Peer
from .table import NOT_HANDLED, Handler, HandlerTable

if TYPE_CHECKING:  # pragma: no cover
    from ..engine import Message
    from ..protocol.gate import Gate
    from ..protocol.surface import SessionUpdateView

__all__ = ["INITIALIZE", "INITIALIZING", "PROXY_INITIALIZE", "PROXY_INITIALIZE_SPEC", "SESSION_UPDATE", "Dispatch",
           "DynamicHandler", "Rules"]

logger = logging.getLogger("acp_fast.roles")


#: ``fn(rctx)``: an entry of the JSON-RPC connection's request table
RequestEntry = Callable[[RequestContext], RequestResult]
#: ``fn(message)``: an entry of its notification table
NotificationEntry = Callable[["Message"], object]


class DynamicHandler:
    """One handler added at run time (:meth:`AcpConnection.add_dynamic_handler
    <acp_fast.roles.AcpConnection.add_dynamic_handler>`, which makes it).

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


def _no_request(rctx: RequestContext, method: str) -> RequestResult:
    """A request nobody handles: -32601 (the default ``Rules.unhandled_request``)."""
    raise JsonRpcError.method_not_found(method)


def _no_notification(msg: Message, method: str) -> object:
    """A notification nobody handles: dropped (the default ``Rules.unhandled_notification``)."""
    return None


def _empty_requests() -> Mapping[str, RequestEntry]:
    return MappingProxyType({})


def _empty_notifications() -> Mapping[str, NotificationEntry]:
    return MappingProxyType({})


@dataclass(frozen=True)
class Rules:
    """What a role changes in the dispatch, as data (each connection type gives its own).

    Attributes:
        context_type: what handlers get as ``cx`` (``Context``; ``ProxyContext`` for proxies).
        gated_updates: ``session/update`` passes the read gate and the session-state
            tracking, then goes to ``on_update`` (agents, clients); ``False``: it is an
            ordinary notification (proxies relay it untouched).
        tracked_requests: requests tracked per session before their handler runs (a
            client's ``session/request_permission``: ``cancel_active_work`` answers them).
        track: ``track(rctx)`` for those.
        initializes: ``initializes(method)``: whether an incoming request initializes this
            side (a proxy also records which spelling its conductor uses).
        incoming_initialize: answers that request (negotiation, the guard, the handler).
        before: runs before every message (a proxy settles the routes of the session setups
            answered so far); ``None``: nothing.
        unhandled_request / unhandled_notification: what a message without a handler
            becomes (default: -32601 / dropped; a proxy forwards it).
        requests / notifications: the role's own entries (a proxy's ``_proxy/successor``),
            installed when the connection becomes ready.
    """

    context_type: type[Context]
    incoming_initialize: RequestEntry
    initializes: Callable[[str], bool]
    gated_updates: bool = True
    tracked_requests: frozenset[str] = frozenset()
    track: Callable[[RequestContext], None] | None = None
    before: Callable[[], None] | None = None
    unhandled_request: Callable[[RequestContext, str], RequestResult] = _no_request
    unhandled_notification: Callable[[Message, str], object] = _no_notification
    requests: Mapping[str, RequestEntry] = field(default_factory=_empty_requests)
    notifications: Mapping[str, NotificationEntry] = field(default_factory=_empty_notifications)


class Dispatch:
    """Where every incoming message of one connection goes (see the module docstring).

    Args:
        connection: the connection it dispatches for (what handlers get as ``cx.connection``;
            its ``guard`` and ``manages_initialize``).
        raw: the connection's JSON-RPC connection (whose tables it fills).
        table: the builder's frozen handler table.
        rules: the role's rules.
        gate: the read gate's fast path of the connection's version (a
            :class:`~acp_fast.protocol.gate.Gate`; the compiled one on the compiled hot path).
        classify: the full read gate (``WireSurface.classify_session_update``).
        apply_state: the session-state tracking (``SessionStates.apply``).

    Attributes:
        installed: True once the per-method entries are in the JSON-RPC connection.
    """

    def __init__(self, connection: Peer, raw: Connection, table: HandlerTable, rules: Rules, *,
                 gate: Gate, classify: Callable[[Json], SessionUpdateView],
                 apply_state: Callable[[Json, Json], None]) -> None:
        self.connection = connection
        self.raw = raw
        self.table = table
        self.rules = rules
        self.installed = False
        self._gate = (gate, classify, apply_state)
        #: ``(kind, method) -> handlers`` added at run time
        self._dynamic: dict[tuple[str, str], list[DynamicHandler]] = {}
        #: the compiled ``session/update`` path: read gate, session states, ``on_update``
        self.session_update = UpdateDispatcher(
            connection, gate, classify, apply_state, table.on_update, table.notifications.get(SESSION_UPDATE),
            SessionUpdate, rules.context_type)
        raw.on_any_request(self.request)
        raw.on_any_notification(self.notification)

    # -- handlers added at run time -------------------------------------------------------

    def add_dynamic(self, kind: str, method: str, fn: Handler) -> DynamicHandler:
        """Add a run-time handler (checked by the caller) and, once installed, rebuild the
        entry of its method."""
        handler = DynamicHandler(self._dynamic.setdefault((kind, method), []), method, kind, fn)
        if self.installed:
            self._install_method(kind, method)
        return handler

    # -- installing the per-method entries ------------------------------------------------

    def install(self) -> None:
        """Build and install every method's entry (once, when the connection is ready)."""
        if self.installed:
            return
        self.installed = True
        table = self.table
        methods = {("request", m) for m in table.requests if m not in INITIALIZING}
        methods |= {("notification", m) for m in table.notifications}
        methods |= set(self._dynamic)
        if self.rules.gated_updates:
            methods.add(("notification", SESSION_UPDATE))
        for kind, method in sorted(methods):
            self._install_method(kind, method)
        raw = self.raw
        for method, request_entry in self.rules.requests.items():
            raw.on_request(method, request_entry)
        for method, notification_entry in self.rules.notifications.items():
            raw.on_notification(method, notification_entry)

    def _install_method(self, kind: str, method: str) -> None:
        raw = self.raw
        if kind == "request":
            raw.on_request(method, self.request_entry(method))
        else:
            raw.on_notification(method, self.notification_entry(method))

    def request_entry(self, method: str) -> RequestEntry:
        """The entry of requests ``method``: the builder's handler (or the slow path), after
        the method's dynamic handlers, its tracking and the role's ``before``."""
        rules = self.rules
        fn = self.table.requests.get(method)
        entry: RequestEntry = (RequestHandler(self.connection, fn, rules.context_type) if fn is not None
                               else self.request)
        handlers = self._dynamic.get(("request", method))
        if handlers is not None:
            entry = self._dynamic_request(handlers, entry)
        if method in rules.tracked_requests and rules.track is not None:
            entry = _tracked(rules.track, entry)
        if rules.before is not None:
            entry = _before_request(rules.before, entry)
        return entry

    def notification_entry(self, method: str) -> NotificationEntry:
        """The entry of notifications ``method`` (``session/update`` read-gated where the
        role gates it), after the method's dynamic handlers and the role's ``before``."""
        rules = self.rules
        handlers = self._dynamic.get(("notification", method))
        entry: NotificationEntry
        if method == SESSION_UPDATE and rules.gated_updates:
            if handlers is None:
                entry = self.session_update
            else:  # dynamic update handlers see the gated SessionUpdate first
                gate, classify, apply_state = self._gate
                entry = UpdateDispatcher(self.connection, gate, classify, apply_state,
                                         self._dynamic_update(handlers), None, SessionUpdate, rules.context_type)
        else:
            fn = self.table.notifications.get(method)
            entry = (NotificationHandler(self.connection, fn, rules.context_type) if fn is not None
                     else self.notification)
            if handlers is not None:
                entry = self._dynamic_notification(handlers, entry)
        if rules.before is not None:
            entry = _before_notification(rules.before, entry)
        return entry

    def _dynamic_request(self, handlers: list[DynamicHandler], then: RequestEntry) -> RequestEntry:
        connection, context_type = self.connection, self.rules.context_type

        def dispatch(rctx: RequestContext) -> RequestResult:
            if handlers:
                message = rctx.message
                cx = context_type(connection, rctx, message)
                for handler in list(handlers):
                    result = handler.fn(message.params, cx)
                    if result is not NOT_HANDLED:
                        return result
            return then(rctx)

        return dispatch

    def _dynamic_notification(self, handlers: list[DynamicHandler], then: NotificationEntry) -> NotificationEntry:
        connection, context_type = self.connection, self.rules.context_type

        def dispatch(msg: Message) -> object:
            if handlers:
                cx = context_type(connection, None, msg)
                for handler in list(handlers):
                    result = handler.fn(msg.params, cx)
                    if result is not NOT_HANDLED:
                        return result
            return then(msg)

        return dispatch

    def _dynamic_update(self, handlers: list[DynamicHandler]) -> Callable[[SessionUpdate, Context], object]:
        table = self.table

        def dispatch(event: SessionUpdate, cx: Context) -> object:
            for handler in list(handlers):
                result = handler.fn(event, cx)
                if result is not NOT_HANDLED:
                    return result
            if table.on_update is not None:
                return table.on_update(event, cx)
            fallback = table.notifications.get(SESSION_UPDATE)
            if fallback is not None:
                return fallback(event.params, cx)
            return None

        return dispatch

    # -- the slow (guarded) path: the JSON-RPC connection's fallbacks ----------------------

    def _try_dynamic(self, kind: str, method: str, params: Json, cx: Context) -> object:
        for handler in list(self._dynamic.get((kind, method), ())):
            result = handler.fn(params, cx)
            if result is not NOT_HANDLED:
                return result
        return NOT_HANDLED

    def request(self, rctx: RequestContext) -> RequestResult:
        """A request without an installed entry: the guard, ``initialize``, then the
        dynamic handlers (before :meth:`install`), the builder's handler, or the role's
        ``unhandled_request``."""
        rules = self.rules
        if rules.before is not None:
            rules.before()
        message = rctx.message
        method = message.method
        assert method is not None  # a request
        connection = self.connection
        guard = connection.guard
        if method in INITIALIZING or not guard.ready:
            error = guard.check_incoming_request(method)
            if error is not None:
                raise error
            if connection.manages_initialize and rules.initializes(method):
                return rules.incoming_initialize(rctx)
        if not self.installed and self._dynamic.get(("request", method)):
            result = self._try_dynamic("request", method, message.params, rules.context_type(connection, rctx, message))
            if result is not NOT_HANDLED:
                return result
        fn = self.table.requests.get(method)
        if fn is not None:
            return fn(message.params, rules.context_type(connection, rctx, message))
        return rules.unhandled_request(rctx, method)

    def notification(self, msg: Message) -> object:
        """A notification without an installed entry: the guard (dropped before
        ``initialize``), the read-gated ``session/update``, the dynamic handlers (before
        :meth:`install`), the builder's handler, or the role's ``unhandled_notification``."""
        rules = self.rules
        if rules.before is not None:
            rules.before()
        method = msg.method
        assert method is not None  # a notification
        connection = self.connection
        if not connection.guard.allows_incoming_notification(method):
            logger.debug("notification %r before initialization dropped", method)
            return None
        if method == SESSION_UPDATE and rules.gated_updates:
            return self.session_update(msg)
        if not self.installed and self._dynamic.get(("notification", method)):
            result = self._try_dynamic("notification", method, msg.params, rules.context_type(connection, None, msg))
            if result is not NOT_HANDLED:
                return result
        fn = self.table.notifications.get(method)
        if fn is not None:
            return fn(msg.params, rules.context_type(connection, None, msg))
        return rules.unhandled_notification(msg, method)


def _tracked(track: Callable[[RequestContext], None], then: RequestEntry) -> RequestEntry:
    def tracked(rctx: RequestContext) -> RequestResult:
        track(rctx)
        return then(rctx)

    return tracked


def _before_request(before: Callable[[], None], then: RequestEntry) -> RequestEntry:
    def routed(rctx: RequestContext) -> RequestResult:
        before()
        return then(rctx)

    return routed


def _before_notification(before: Callable[[], None], then: NotificationEntry) -> NotificationEntry:
    def routed(msg: Message) -> object:
        before()
        return then(msg)

    return routed
