"""The one dispatch path of a connection: `Dispatch`.

Every incoming request and notification of an `AcpConnection` goes through its `Dispatch`.
A connection hears one peer, and a proxy two: its predecessor (the connection's own peer)
and its successor, whose messages arrive inside `_proxy/successor` envelopes on the same
connection. Each peer has a *side* (`Side`) in the dispatch, and every side holds the same
parts:

- the builder's handlers of what that peer sends (`HandlerTable.requests` /
  `notifications`; for a proxy's successor, `successor_requests` / `successor_notifications`);
- the handlers added at run time (`DynamicHandler`, made by
  `AcpConnection.add_dynamic_handler`: MCP routes, a client's own run-time handlers);
- the side's rules, as data (`SideRules`): what runs before its handlers (a proxy settling
  the routes of the session setups answered so far), which requests are tracked per session
  (a client's permission requests), whether `session/update` passes the read gate, what a
  message nobody handles becomes (-32601 or dropped; a proxy forwards it), and how the side's
  messages are read off the connection (a successor's: through a `SuccessorEnvelope`).

The precedence is the same on every side and written once, for requests and notifications
alike (`Dispatch.request_entry` and `Dispatch.notification_entry` build their entries with
it): the dynamic handlers (oldest first, asked in one loop; one that returns `NOT_HANDLED`
passes the message on), then the builder's handler, then what the side does with what
nobody handles (`SideRules.unhandled_request`; a notification is forwarded through
`SideRules.forward_notification`, else dropped). What the role changes beyond its sides
is data too (`Rules`: the context type, how an initializing request is negotiated and
answered without a handler, which spelling of it arrived): a role is its `Rules`, handed
to the one `AcpConnection`, which no role overrides.

How a message reaches its entry. The predecessor side's messages are the JSON-RPC
connection's own: until the connection is ready each one takes the guarded slow path
(`Dispatch.request`, `Dispatch.notification`, the connection's fallbacks), which builds the
method's entry on the spot; when it becomes ready, `Dispatch.install` puts one entry per
handled method into the connection's per-method tables, and the fallbacks only see what
nothing handles. A successor's messages come through one entry of the connection per
envelope spelling, which reads the inner message (`acp_fast.protocol.envelope`), puts it in
place of the envelope (a request keeps the envelope's id and `RequestContext`: answering or
cancelling it is answering or cancelling the envelope) and calls the successor side's entry
of the inner method, kept in the side's own tables and built the same way. On the hot path
an entry is the compiled `RequestHandler` / `NotificationHandler` / `UpdateDispatcher` of
`_hot_py` (one dict lookup, one call, one `Context`), wrapped only where a dynamic handler,
a tracked request or a `before` applies; adding a dynamic handler later rebuilds that
method's entry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from ..errors import JsonRpcError
from ..jsonrpc import Connection, RequestContext, RequestResult
from ..jsontypes import Json
from ..protocol.facts import CANCEL_REQUEST, INITIALIZE, PROXY_INITIALIZE, PROXY_INITIALIZE_SPEC, SESSION_UPDATE
from ..protocol.facts import SUCCESSOR_METHODS
from ..protocol.facts import INITIALIZING_METHODS as INITIALIZING
from ._hot import Context, NotificationHandler, RequestHandler, SessionUpdate, UpdateDispatcher
from .context import Peer, Request
from .table import NOT_HANDLED, Handler, HandlerTable

if TYPE_CHECKING:  # pragma: no cover
    from ..engine import Message
    from ..protocol.envelope import SuccessorEnvelope
    from ..protocol.gate import Gate
    from ..protocol.profile import VersionProfile
    from ..protocol.surface import SessionUpdateView

__all__ = ["INITIALIZE", "INITIALIZING", "PROXY_INITIALIZE", "PROXY_INITIALIZE_SPEC", "SESSION_UPDATE", "Dispatch",
           "DynamicHandler", "Rules", "Side", "SideRules"]

logger = logging.getLogger("acp_fast.roles")

#: an entry type (request, notification or update entries)
_E = TypeVar("_E", bound=Callable[..., object])

#: `fn(rctx)`: an entry of the JSON-RPC connection's request table (and of a side's)
RequestEntry = Callable[[RequestContext], RequestResult]
#: `fn(message)`: an entry of its notification table
NotificationEntry = Callable[["Message"], object]
#: `fn(event, cx)`: what a read-gated `session/update` goes to
UpdateEntry = Callable[[SessionUpdate, Context], object]


class DynamicHandler:
    """One handler added at run time (`AcpConnection.add_dynamic_handler`, which makes it).

    Args:
        side: the side of the dispatch whose messages it handles.
        method: the method it handles.
        kind: `"request"` or `"notification"`.
        fn: the handler.

    Attributes:
        method: the method it handles (`session/update` on a read-gated side: it gets
            `(SessionUpdate, cx)`).
        kind: `"request"` or `"notification"`.
        fn: the handler.
    """

    __slots__ = ("_handlers", "_side", "fn", "kind", "method")

    def __init__(self, side: Side, method: str, kind: str, fn: Handler) -> None:
        self._side = side
        self._handlers = side.dynamic.setdefault((kind, method), [])
        self.method = method
        self.kind = kind
        self.fn = fn
        self._handlers.append(self)

    @property
    def active(self) -> bool:
        """True until `remove`."""
        return self in self._handlers

    @property
    def passes_on(self) -> bool:
        """True when a message this handler passes on (`NOT_HANDLED`) still reaches a handler:
        the builder's, or its side's own policy (a proxy forwards it); False when it would
        only get the default answer (-32601, or a dropped notification)."""
        return self._side.passes_on(self.kind, self.method)

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


def _no_request(rctx: RequestContext) -> RequestResult:
    """A request nobody handles: -32601 (the default `SideRules.unhandled_request`)."""
    raise JsonRpcError.method_not_found(rctx.message.method)


@dataclass(frozen=True)
class SideRules:
    """What one side of the dispatch does besides running handlers, as data.

    Attributes:
        before: runs before every handler of the side, builder's or dynamic (a proxy settles
            the routes of the session setups answered so far, which its handlers look up);
            what no handler takes goes to `unhandled_*` without it. `None`: nothing.
        gated_updates: `session/update` passes the read gate and the session-state
            tracking, then goes to `on_update` (agents, clients); `False`: it is an ordinary
            notification (a proxy relays it untouched).
        tracked_requests: requests tracked per session before their handler runs (a
            client's `session/request_permission`: `cancel_active_work` answers them), by
            the dispatch's `track`.
        unhandled_request: what a request nobody handles becomes (default: -32601; a proxy
            forwards it).
        forward_notification: where a notification nobody handles goes,
            `forward_notification(method, params_raw)` (a proxy sends it on to the other side;
            never `$/cancel_request`, which is hop-local); `None` (default): it is dropped.
        envelope: how a message of the side is read off the connection: `None` for the
            connection's own peer; a proxy's successor side reads envelopes
            (`SuccessorEnvelope`).
    """

    before: Callable[[], None] | None = None
    gated_updates: bool = True
    tracked_requests: frozenset[str] = frozenset()
    unhandled_request: RequestEntry = _no_request
    forward_notification: Callable[[str, Json], object] | None = None
    envelope: SuccessorEnvelope | None = None


@dataclass(frozen=True)
class Rules:
    """A role, as data: what an agent, a client and a proxy change in the one connection they
    share (`AcpConnection`, which reads these fields and is never overridden).

    A connection's facade (`AgentConnection`, `ClientConnection`, `ProxyConnection`) hands its
    `Rules` to the base connection when it is made; an agent's are the defaults.

    Attributes:
        context_type: what handlers get as `cx` (`Context`; `ProxyContext` for proxies).
        peer: the rules of the side of the connection's own peer (a proxy's predecessor).
        successor: a proxy's: the rules of the side of its successor; `None`: no such side.
        negotiate: `negotiate(params, profile)`: validates the params of an incoming
            initializing request and returns what its handler sees (a proxy's: the exact
            version, else -32600). `None`: the connection's own negotiation (v1: any valid
            version selects v1, newer metadata normalised; v2: exactly v2, else -32022).
        default_initialize: `default_initialize(params)`: the answer to an incoming
            initializing request without a handler, given the negotiated params (a proxy's:
            forward it to the successor). `None`: the profile's default result with the
            connection's `info`.
        on_initialize: `on_initialize(method)`: told the spelling of an incoming initializing
            request before it is answered (a proxy wraps what it sends its successor in the
            spelling its conductor uses). `None`: nothing.
        send_initializing: `send_initializing(method, params)`: sends an initializing request
            this side sends through `send_request` (a client's `initialize`); `None` from it,
            or without one, lets the initialization guard decide.
    """

    context_type: type[Context] = Context
    peer: SideRules = field(default_factory=SideRules)
    successor: SideRules | None = None
    negotiate: Callable[[Json, VersionProfile], Json] | None = None
    default_initialize: Callable[[Json], RequestResult] | None = None
    on_initialize: Callable[[str], None] | None = None
    send_initializing: Callable[[str, Json], Request[Json] | None] | None = None


class Side:
    """One peer's side of the dispatch: its handlers, the ones added at run time, its rules
    and its installed entries (see the module docstring).

    Args:
        requests: the builder's request handlers of the side.
        notifications: its notification handlers.
        rules: the side's rules.
        on_request: `on_request(method, entry)` installs a request entry where the side's
            messages are looked up (a side's own table, unless given: the JSON-RPC
            connection's `on_request` for the connection's own peer).
        on_notification: the same for notification entries.

    Attributes:
        requests: the builder's request handlers.
        notifications: the builder's notification handlers.
        rules: the side's `SideRules`.
        dynamic: `(kind, method) -> handlers` added at run time.
        request_entries: the installed request entries, when the side keeps its own table.
        notification_entries: the installed notification entries, likewise.
        installed: True once its entries are installed.
        unhandled_notification: the entry of a notification nobody handles (forwarded or
            dropped, as the rules say).
    """

    __slots__ = ("dynamic", "installed", "notification_entries", "notifications", "on_notification", "on_request",
                 "request_entries", "requests", "rules", "unhandled_notification")

    def __init__(self, requests: Mapping[str, Handler], notifications: Mapping[str, Handler], rules: SideRules, *,
                 on_request: Callable[[str, RequestEntry], object] | None = None,
                 on_notification: Callable[[str, NotificationEntry], object] | None = None) -> None:
        self.requests = requests
        self.notifications = notifications
        self.rules = rules
        self.dynamic: dict[tuple[str, str], list[DynamicHandler]] = {}
        self.request_entries: dict[str, RequestEntry] = {}
        self.notification_entries: dict[str, NotificationEntry] = {}
        self.on_request = on_request or self.request_entries.__setitem__
        self.on_notification = on_notification or self.notification_entries.__setitem__
        self.installed = False
        self.unhandled_notification = _forwarding(rules.forward_notification)

    def passes_on(self, kind: str, method: str) -> bool:
        """Whether a `kind` message of `method` that no dynamic handler takes still reaches a
        handler: the builder's, or the side's own policy (a proxy forwards it); False when it
        only gets the default answer (-32601, or dropped)."""
        if kind == "request":
            return method in self.requests or self.rules.unhandled_request is not _no_request
        return method in self.notifications or self.rules.forward_notification is not None


class Dispatch:
    """Where every incoming message of one connection goes (see the module docstring).

    Args:
        connection: the connection it dispatches for (what handlers get as `cx.connection`;
            its `guard` and `manages_initialize`).
        raw: the connection's JSON-RPC connection (whose tables it fills).
        table: the builder's frozen handler table.
        rules: the role's rules.
        gate: the read gate's fast path of the connection's version (a `Gate`; the compiled
            one on the compiled hot path).
        classify: the full read gate (`WireSurface.classify_session_update`).
        apply_state: the session-state tracking (`SessionStates.apply`).
        track: tracks a request per session (`SessionStates.track_request`): the tracked
            requests of a side (`SideRules.tracked_requests`) go through it.
        initialize: answers the request that initializes the connection (negotiation, the
            guard, the handler: `AcpConnection`'s, by its `rules`).

    Attributes:
        peer: the side of the connection's own peer (a proxy's predecessor).
        successor: a proxy's side of its successor (`None` for agents and clients).
        session_update: the compiled `session/update` path of a read-gated side.
    """

    def __init__(self, connection: Peer, raw: Connection, table: HandlerTable, rules: Rules, *,
                 gate: Gate, classify: Callable[[Json], SessionUpdateView],
                 apply_state: Callable[[Json, Json], None], track: Callable[[RequestContext], None],
                 initialize: RequestEntry) -> None:
        self.connection = connection
        self.raw = raw
        self.table = table
        self.rules = rules
        self._gate = (gate, classify, apply_state)
        self._track = track
        self._initialize = initialize
        self.session_update = UpdateDispatcher(
            connection, gate, classify, apply_state, table.on_update, table.notifications.get(SESSION_UPDATE),
            SessionUpdate, rules.context_type)
        self.peer = Side(table.requests, table.notifications, rules.peer,
                         on_request=raw.on_request, on_notification=raw.on_notification)
        raw.on_any_request(self.request)
        raw.on_any_notification(self.notification)
        self.successor: Side | None = None
        #: the requests no side installs an entry for (the guard handles them, or the
        #: successor's envelopes do)
        self._reserved = INITIALIZING
        if rules.successor is not None:
            self.successor = Side(table.successor_requests, table.successor_notifications, rules.successor)
            self._reserved = INITIALIZING | SUCCESSOR_METHODS
            request, notification = self._successor_entrances(self.successor)
            for method in SUCCESSOR_METHODS:
                raw.on_request(method, request)
                raw.on_notification(method, notification)
            self._install(self.successor)  # nothing guards that side: its entries are ready now

    @property
    def installed(self) -> bool:
        """True once the predecessor side's entries are in the JSON-RPC connection."""
        return self.peer.installed

    # -- handlers added at run time -------------------------------------------------------

    def add_dynamic(self, kind: str, method: str, fn: Handler, *, from_successor: bool = False) -> DynamicHandler:
        """Add a run-time handler (checked by the caller) and, once its side is installed,
        rebuild the entry of its method.

        Raises:
            ValueError: `from_successor` on a connection without a successor side.
        """
        side = self.successor if from_successor else self.peer
        if side is None:
            raise ValueError("only a proxy's connection has a successor side")
        handler = DynamicHandler(side, method, kind, fn)
        if side.installed:
            self._install_method(side, kind, method)
        return handler

    # -- installing the per-method entries ------------------------------------------------

    def install(self) -> None:
        """Build and install every entry of the predecessor side (once, when the connection
        is ready)."""
        self._install(self.peer)

    def _install(self, side: Side) -> None:
        if side.installed:
            return
        side.installed = True
        methods = {("request", m) for m in side.requests}
        methods |= {("notification", m) for m in side.notifications}
        methods |= set(side.dynamic)
        if side.rules.gated_updates:
            methods.add(("notification", SESSION_UPDATE))
        for kind, method in sorted(methods):
            self._install_method(side, kind, method)

    def _install_method(self, side: Side, kind: str, method: str) -> None:
        if method in self._reserved:
            return
        before = side.rules.before
        if kind == "request":
            request_entry = self.request_entry(method, side)
            side.on_request(method, request_entry if before is None else _before_request(before, request_entry))
        else:
            entry = self.notification_entry(method, side)
            side.on_notification(method, entry if before is None else _before_notification(before, entry))

    # -- the entries: dynamic handlers, then the builder's handler, then the side's policy --

    def request_entry(self, method: str, side: Side | None = None) -> RequestEntry:
        """The entry of requests `method` on `side` (default: the predecessor side), without
        the side's `before`: its dynamic handlers, then the builder's handler, then the
        side's `unhandled_request`; tracked first where the side tracks `method`."""
        side = side or self.peer
        rules = side.rules
        fn = side.requests.get(method)
        leaf: RequestEntry | None = RequestHandler(self.connection, fn, self.rules.context_type) if fn is not None else None
        entry = _first(side.dynamic.get(("request", method)), leaf, rules.unhandled_request, self._asking_request)
        if method in rules.tracked_requests:
            entry = _tracked(self._track, entry)
        return entry

    def notification_entry(self, method: str, side: Side | None = None) -> NotificationEntry:
        """The entry of notifications `method` on `side` (default: the predecessor side),
        without the side's `before`: its dynamic handlers, then the builder's handler, then
        the side's `unhandled_notification` (`session/update` on a read-gated side: the
        read gate first, then the dynamic handlers, then `on_update` or the handler)."""
        side = side or self.peer
        handlers = side.dynamic.get(("notification", method))
        if method == SESSION_UPDATE and side.rules.gated_updates:
            if handlers is None:
                return self.session_update
            gate, classify, apply_state = self._gate
            table = self.table
            fallback = table.notifications.get(SESSION_UPDATE)
            update: UpdateEntry | None = table.on_update or (_update_params(fallback) if fallback is not None else None)
            return UpdateDispatcher(self.connection, gate, classify, apply_state,
                                    _first(handlers, update, _no_update, _asking_update), None, SessionUpdate,
                                    self.rules.context_type)
        fn = side.notifications.get(method)
        leaf: NotificationEntry | None = (NotificationHandler(self.connection, fn, self.rules.context_type)
                                          if fn is not None else None)
        return _first(handlers, leaf, side.unhandled_notification, self._asking_notification)

    def _asking_request(self, handlers: list[DynamicHandler], then: RequestEntry) -> RequestEntry:
        connection, context_type = self.connection, self.rules.context_type

        def entry(rctx: RequestContext) -> RequestResult:
            if handlers:
                message = rctx.message
                result = _ask(handlers, message.params, context_type(connection, rctx, message))
                if result is not NOT_HANDLED:
                    return result
            return then(rctx)

        return entry

    def _asking_notification(self, handlers: list[DynamicHandler], then: NotificationEntry) -> NotificationEntry:
        connection, context_type = self.connection, self.rules.context_type

        def entry(msg: Message) -> object:
            if handlers:
                result = _ask(handlers, msg.params, context_type(connection, None, msg))
                if result is not NOT_HANDLED:
                    return result
            return then(msg)

        return entry

    # -- the predecessor side's slow (guarded) path: the JSON-RPC connection's fallbacks ----

    def request(self, rctx: RequestContext) -> RequestResult:
        """A request of the predecessor side without an installed entry: the guard,
        `initialize`; then, once installed, the side's `unhandled_request` (nothing else
        handles it), else the method's entry after the side's `before`."""
        side = self.peer
        method = rctx.message.method
        assert method is not None  # a request
        connection = self.connection
        guard = connection.guard
        if method in INITIALIZING or not guard.ready:
            error = guard.check_incoming_request(method)
            if error is not None:
                raise error
            if connection.manages_initialize and connection.initializes(method):
                _run(side.rules.before)
                return self._initialize(rctx)
        if side.installed and method not in INITIALIZING:
            return side.rules.unhandled_request(rctx)
        _run(side.rules.before)
        return self.request_entry(method)(rctx)

    def notification(self, msg: Message) -> object:
        """A notification of the predecessor side without an installed entry: the guard
        (dropped before `initialize`); then, once installed, the side's
        `unhandled_notification`, else the method's entry after the side's `before`."""
        side = self.peer
        method = msg.method
        assert method is not None  # a notification
        if not self.connection.guard.allows_incoming_notification(method):
            logger.debug("notification %r before initialization dropped", method)
            return None
        if side.installed:  # `_forwarding`, inlined: a proxy's predecessor streams through here
            forward = side.rules.forward_notification
            if forward is not None and method != CANCEL_REQUEST:
                forward(method, msg.params_raw)
            return None
        _run(side.rules.before)
        return self.notification_entry(method)(msg)

    # -- the successor side: envelopes, unwrapped -----------------------------------------

    def _successor_entrances(self, side: Side) -> tuple[RequestEntry, NotificationEntry]:
        """The JSON-RPC connection's entries of the successor's envelopes (both spellings):
        the inner message, then its entry on `side`, else the side's `unhandled_*`."""
        rules = side.rules
        envelope = rules.envelope
        assert envelope is not None  # a successor side reads envelopes
        unwrap_request, unwrap_notification = envelope.unwrap_request, envelope.unwrap_notification
        request_entries, notification_entries = side.request_entries, side.notification_entries
        unhandled_request, forward = rules.unhandled_request, rules.forward_notification

        def request(rctx: RequestContext) -> RequestResult:
            rctx.message = inner = unwrap_request(rctx.message)  # -32602 when malformed
            entry = request_entries.get(inner.method)  # type: ignore[arg-type]  # a request has a method
            return unhandled_request(rctx) if entry is None else entry(rctx)

        def notification(msg: Message) -> object:
            try:
                inner = unwrap_notification(msg)
            except JsonRpcError:
                logger.warning("malformed %s notification dropped", msg.method)
                return None
            method = inner.method
            entry = notification_entries.get(method)  # type: ignore[arg-type]  # a notification has one
            if entry is not None:
                return entry(inner)
            if forward is not None and method != CANCEL_REQUEST:  # `_forwarding`, inlined (the hot path)
                forward(method, inner.params_raw)  # type: ignore[arg-type]
            return None

        return request, notification

# -- the pieces the entries are built of -------------------------------------------------


def _first(handlers: list[DynamicHandler] | None, leaf: _E | None, unhandled: _E,
           asking: Callable[[list[DynamicHandler], _E], _E]) -> _E:
    """The precedence, the one place it is written: the dynamic handlers (`asking`, when the
    method has any), then the builder's handler `leaf`, else the side's `unhandled`."""
    then = leaf if leaf is not None else unhandled
    return then if handlers is None else asking(handlers, then)


def _ask(handlers: list[DynamicHandler], value: Json, cx: Context) -> object:
    """The dynamic-handler loop, the one there is: each handler in turn (oldest first) until
    one does not return `NOT_HANDLED`; `NOT_HANDLED` when none took `value`."""
    for handler in list(handlers):  # a handler may remove itself
        result = handler.fn(value, cx)
        if result is not NOT_HANDLED:
            return result
    return NOT_HANDLED



def _asking_update(handlers: list[DynamicHandler], then: UpdateEntry) -> UpdateEntry:
    def dispatch(event: SessionUpdate, cx: Context) -> object:
        result = _ask(handlers, event, cx)
        if result is not NOT_HANDLED:
            return result
        return then(event, cx)

    return dispatch


def _update_params(fn: Handler) -> UpdateEntry:
    """A plain `session/update` handler behind the read gate: it gets the params."""
    def dispatch(event: SessionUpdate, cx: Context) -> object:
        return fn(event.params, cx)

    return dispatch


def _no_update(event: SessionUpdate, cx: Context) -> object:
    return None


def _forwarding(forward: Callable[[str, Json], object] | None) -> NotificationEntry:
    """The entry of a notification nobody handles: `forward(method, params_raw)`, except
    `$/cancel_request` (hop-local); dropped without `forward`."""
    def entry(msg: Message) -> object:
        method = msg.method
        if forward is not None and method != CANCEL_REQUEST:
            forward(method, msg.params_raw)  # type: ignore[arg-type]  # a notification has a method
        return None

    return entry


def _run(before: Callable[[], None] | None) -> None:
    if before is not None:
        before()


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
