"""A proxy's connection to its predecessor: `ProxyConnection` (protocol.md §6.7, §8).

A proxy is initialized by `_proxy/initialize` (exact version match), talks to its successor
through `_proxy/successor` envelopes on the same connection, and forwards whatever it does
not handle: requests and notifications from the predecessor go to the successor, and vice
versa. `$/cancel_request` is hop-local and never forwarded; a forwarded request is
cancelled downstream when the upstream caller cancels it.

Both directions go through the connection's one `Dispatch` (`acp_fast.roles.dispatch`): the
predecessor's messages on its predecessor side, the successor's on its successor side, each
with the builder's handlers of that side (`on_request`, `on_successor_request`, …), the
handlers added at run time (`add_dynamic_handler(..., from_successor=True)` for the
successor's) and this module's rules: settle the routes of answered session setups before a
handler runs, forward what no handler takes.

A proxy is the one `AcpConnection` with a proxy's `Rules` (`ProxyConnection` hands them over
and overrides nothing): both sides above; `_proxy/initialize` negotiated for the exact version
(-32600 `"unsupported ACP protocol version N; this proxy supports ACP protocol version M"`),
answered without a handler by forwarding `initialize` to the successor, and its spelling
recorded (the successor envelope is written in the same one); `ProxyContext` for handlers.

The pass-through path (what no handler claims) never decodes what it only forwards. A
proxy's JSON-RPC connection decodes lazily (`Decoder(lazy=True)`: the envelope only), and the
successor envelope is read and written by `acp_fast.protocol.envelope`, the conductor's
reader too: a message from the predecessor is wrapped by splicing its `params` bytes into a
new `{"method":…,"params":…}` envelope; an envelope from the successor is unwrapped by
re-reading its params bytes as a lazy message, whose `params` bytes are then sent on; a
forwarded request's result comes back as bytes too (`raw=True`) and is answered verbatim.
Envelope members other than `method`/`params` (its `_meta`: hop-local) are dropped; the inner
`params` (with their `_meta`) and results pass byte for byte, whatever their spacing or
escapes.

What a pass-through forward validates: every line is fully validated by the decoder before
anything is forwarded (UTF-8, strict JSON syntax, nesting depth, the JSON-RPC envelope rules),
and the inner message of an envelope again by the re-read (a string `method`; `params` an
object, an array, null or absent); `$/cancel_request` is consumed (plain or wrapped) and
re-issued per hop; an `initialize` from the successor is refused (-32600). The proxy's
initialization guard is unchecked, as before: it refuses a plain `initialize` (-32600) and
lets everything else through. What it does not validate: `params` and results against the
ACP schema or the wire surface of the version (a proxy relays, its endpoints check;
`session/update` is not read-gated). An envelope the re-read does not take is read from its
decoded params: -32602 for a malformed request envelope, a dropped notification, the same
value forwarded for an odd but valid one (an `id`, `jsonrpc`, `result` or `error` member, a
repeated `method`/`params`). Handlers get decoded params; `initialize` and, with
`with_mcp_server`, the session setup requests are forwarded decoded (the version is pinned,
the MCP declaration added).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import INTERNAL_ERROR, INVALID_REQUEST, REQUEST_CANCELLED, JsonRpcError
from ..jsonrpc import Connection, PendingRequest, RequestContext, RequestResult, Responder
from ..jsontypes import Json, JsonObject
from ..protocol import negotiation as nego
from ..protocol.envelope import SuccessorEnvelope, successor_for
from ..protocol.facts import INITIALIZING_METHODS, PROXY_INITIALIZE_METHODS, SETUP_METHODS
from ..protocol.facts import PROXY_SUCCESSOR as SUCCESSOR
from ..protocol.facts import PROXY_SUCCESSOR_SPEC as SUCCESSOR_SPEC
from ..protocol.guard import PROXY_DATA, InitializationGuard
from ._hot import ProxyContext, Sender
from .connection import INITIALIZE, SESSION_UPDATE, AcpConnection
from .context import Request, SentRequest, Version, mapped_request
from .dispatch import DynamicHandler, Rules, SideRules
from .mcp import McpServer, McpServerHost, with_declaration
from .sessions import OpenedSession, SessionSetup, SessionStates, V2Session
from .table import Handler, HandlerTable

if TYPE_CHECKING:  # pragma: no cover
    from ..engine import Message
    from ..protocol.profile import VersionProfile
    from .mcp import McpServerLike

__all__ = ["SUCCESSOR", "SUCCESSOR_SPEC", "ProxyConnection", "ProxySessionRoute"]

logger = logging.getLogger("acp_fast.roles")
_T = TypeVar("_T")

_PROXY_SEND_DATA = (
    "proxy initialization must be sent as a logical `initialize` message to the successor; "
    "`_proxy/successor` wrapping is applied by connection routing"
)


class ProxySessionRoute:
    """A proxy's route of one session started through `on_proxy_session_start`.

    Installed before later inbound traffic of the session is dispatched (for resume, before
    the downstream request is published: `state == "pending"` until it succeeds); kept
    for the connection's lifetime once the setup succeeded; dropped when it failed or was
    cancelled. Per-session attachments (e.g. MCP servers) hang on `attachments`.

    Attributes:
        session_id: the session (fork: the new id from the response).
        operation: `"new"`, `"resume"` or `"fork"`.
        state: `"pending"` or `"active"`.
        response: the complete setup response (`None` while pending).
        attachments: per-session things that live as long as the route.
    """

    __slots__ = ("attachments", "operation", "response", "session_id", "state")

    def __init__(self, session_id: str, operation: str, state: str, response: Json = None) -> None:
        self.session_id = session_id
        self.operation = operation
        self.state = state
        self.response = response
        self.attachments: list[Any] = []

    def __repr__(self) -> str:
        return f"ProxySessionRoute({self.session_id!r}, {self.operation!r}, {self.state!r})"


class _SuccessorPeer:
    """The successor seen as a peer: a `V2Session` made by a proxy's `on_proxy_session_start`
    sends its commands downstream, and the MCP servers a proxy serves its successor
    (`serve_mcp_server`) take the requests it sends."""

    __slots__ = ("proxy",)

    def __init__(self, proxy: ProxyConnection[int]) -> None:
        #: the proxy connection whose successor this is
        self.proxy = proxy

    @property
    def version(self) -> int:
        version: int = self.proxy.version
        return version

    @property
    def profile(self) -> VersionProfile:
        return self.proxy.profile

    @property
    def sessions(self) -> SessionStates:
        return self.proxy.sessions

    def send_request(self, method: str, params: Json = None, *, passthrough: bool = False,
                     timeout: float | None = None) -> Request[Json]:
        return self.proxy.send_to_successor(method, params, passthrough=passthrough, timeout=timeout)

    def send_notification(self, method: str, params: Json = None, *, passthrough: bool = False) -> bool:
        return self.proxy.notify_successor(method, params, passthrough=passthrough)

    def add_dynamic_handler(self, method: str, fn: Handler, *, kind: str = "request") -> DynamicHandler:
        return self.proxy.add_dynamic_handler(method, fn, kind=kind, from_successor=True)

    def mapped_request(self, method: str, params: Json, fn: Callable[[Json], _T], *,
                       settle: bool = False) -> SentRequest[_T]:
        return mapped_request(self.proxy.send_to_successor(method, params), fn,
                              self.proxy.raw.settled if settle else None)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SuccessorPeer) and other.proxy is self.proxy

    def __hash__(self) -> int:
        return id(self.proxy)


class _PendingSetup:
    __slots__ = ("pending", "previous", "route", "settled", "setup")

    def __init__(self, setup: SessionSetup, pending: Request[Json], route: ProxySessionRoute | None,
                 previous: ProxySessionRoute | None) -> None:
        self.setup = setup
        self.pending = pending
        self.route = route
        self.previous = previous
        self.settled = False


def _done_result(pending: Request[Json]) -> Json:
    """The result of a request handle that is done (raises its error), without a loop turn."""
    gen = pending.__await__()
    try:
        gen.send(None)
    except StopIteration as stop:
        return stop.value
    gen.close()  # pragma: no cover - only called once done()
    raise RuntimeError("the request is not answered yet")


def _exact_version(params: Json, profile: VersionProfile) -> Json:
    """A proxy's `Rules.negotiate`: `_proxy/initialize` must ask for exactly the proxy's
    version (§6.7), else -32600 naming both; the params are then validated and seen as
    they came."""
    version = profile.version
    requested = nego.parse_protocol_version(params)
    if requested != version:
        raise JsonRpcError(INVALID_REQUEST, data=(
            f"unsupported ACP protocol version {requested}; "
            f"this proxy supports ACP protocol version {version}"))
    nego.validate_initialize_request(params, version)
    return params


class ProxyConnection(AcpConnection[Version]):
    """The connection of a built proxy (`Proxy.builder()` / `Proxy.v2()`).

    Unhandled requests and notifications from the predecessor are forwarded to the successor,
    and those from the successor (inside `_proxy/successor`) to the predecessor. Handlers of
    the successor's messages (`on_successor_request` / `on_successor_notification`, and
    `add_dynamic_handler(..., from_successor=True)`) see them unwrapped: `cx.message` is the
    inner message (`cx.method` its method), and a request is answered through the envelope's
    request (`cx.id` is the envelope's id).

    What makes it a proxy is data: its class data (the guard, `init_methods`, `lazy_frames`)
    and the `Rules` it hands the base connection (see the module docstring); it overrides
    none of `AcpConnection`'s methods.
    """

    role = "proxy"
    #: the guard refuses a plain ``initialize`` and lets everything else through
    guard_role = "unchecked"
    proxy_guard = True
    refuses_initializing = _PROXY_SEND_DATA
    #: `_proxy/initialize` in either spelling (the conductor chooses; one handler serves both)
    init_methods = PROXY_INITIALIZE_METHODS
    #: the successor envelope's spelling: the one of the predecessor's initialize
    _successor = SUCCESSOR
    #: the declaration of the MCP server this proxy serves to its successor
    #: (:meth:`serve_mcp_server`, ``Proxy.v2().with_mcp_server``); ``None`` without one
    mcp_declaration: JsonObject | None = None

    #: a proxy's JSON-RPC connection decodes lazily (the builders and the proxy router ask for
    #: ``Decoder(lazy=True)``): what it only forwards is never decoded
    lazy_frames = True

    def __init__(self, conn: Connection, table: HandlerTable) -> None:
        #: session id -> route of the sessions started with ``on_proxy_session_start``
        self.proxy_sessions: dict[str, ProxySessionRoute] = {}
        self._pending_setups: list[_PendingSetup] = []
        #: reads the successor's envelopes and writes ours (`acp_fast.protocol.envelope`)
        self._envelope = SuccessorEnvelope(conn.engine)
        self._successor_peer = _SuccessorPeer(self)
        # both sides relay session/update ungated and forward what no handler takes
        super().__init__(conn, table, rules=Rules(
            context_type=ProxyContext, negotiate=_exact_version, default_initialize=self._initialize_successor,
            on_initialize=self._answer_in_spelling,
            peer=SideRules(before=self._settle_arrived, gated_updates=False,
                           unhandled_request=self._to_successor_request,
                           forward_notification=self._notify_successor_raw),
            successor=SideRules(before=self._settle_arrived, gated_updates=False,
                                unhandled_request=self._to_predecessor_request,
                                forward_notification=conn.outbox.notify, envelope=self._envelope)))
        #: the outgoing side towards the successor: the predecessor side's `Sender` rules
        #: without a guard (the version is pinned), each message wrapped in `_proxy/successor`
        self.successor_sender = Sender(self._gate, self.surface, self._notify_wrapped, self._request_wrapped)

    # -- on_proxy_session_start (seed 000) -------------------------------------------------

    def start_proxy_session(self, setup: SessionSetup, cx: ProxyContext,
                            callback: Callable[[OpenedSession[V2Session]], Coroutine[object, object, None] | None]) -> None:
        """See [`on_proxy_session_start`][acp_fast.roles.SessionSetup.on_proxy_session_start]."""
        if not self.profile.proxy_sessions:
            raise TypeError("on_proxy_session_start is a v2 proxy helper (Proxy.v2())")
        responder = cx.defer()
        route = previous = None
        sid = setup.session_id
        if sid is not None:  # resume: the route is ready before the request is published
            previous = self.proxy_sessions.get(sid)
            route = ProxySessionRoute(sid, setup.operation, "pending")
            if previous is None:
                self.proxy_sessions[sid] = route
        pending = self.send_to_successor(setup.method, setup.params, passthrough=True)
        entry = _PendingSetup(setup, pending, route, previous)
        self._pending_setups.append(entry)
        self.start_task(self._finish_setup(entry, responder, cx, callback))

    def _install_ready_routes(self) -> None:
        """Settle every setup whose downstream response has arrived: called before any
        inbound message is dispatched, so a route exists for traffic after its response."""
        for entry in list(self._pending_setups):
            if entry.pending.done():
                self._settle(entry)

    def _settle(self, entry: _PendingSetup) -> ProxySessionRoute | None:
        if entry.settled:
            return entry.route
        entry.settled = True
        if entry in self._pending_setups:
            self._pending_setups.remove(entry)
        try:
            result = _done_result(entry.pending)
        except BaseException:  # noqa: BLE001 - failed or cancelled: drop the pending route
            route = entry.route
            if route is not None and self.proxy_sessions.get(route.session_id) is route:
                del self.proxy_sessions[route.session_id]
            entry.route = None
            return None
        sid = result.get("sessionId") if type(result) is dict else None
        if entry.setup.operation == "resume":
            sid = entry.setup.session_id
        if type(sid) is not str:
            entry.route = None
            return None
        route = entry.route
        if route is None or entry.setup.operation != "resume":
            route = ProxySessionRoute(sid, entry.setup.operation, "active", result)
        elif entry.previous is not None:  # resuming a routed session keeps its route
            route = entry.previous
        route.state = "active"
        route.response = result
        self.proxy_sessions[sid] = route
        entry.route = route
        return route

    async def _finish_setup(self, entry: _PendingSetup, responder: Responder, cx: ProxyContext,
                            callback: Callable[[OpenedSession[V2Session]], Coroutine[object, object, None] | None]) -> None:
        pending = entry.pending
        request = cx.request
        watcher = asyncio.ensure_future(request.wait_cancelled()) if request is not None else None
        if watcher is not None:  # cancellation is advisory: forwarded, the answer still awaited
            watcher.add_done_callback(lambda w: pending.cancel() if not w.cancelled() else None)
        try:
            result = await pending
        except JsonRpcError as exc:
            self._settle(entry)
            responder.respond_error(exc)
            return
        except Exception as exc:  # noqa: BLE001 - e.g. a timeout: answered -32603
            self._settle(entry)
            responder.respond_error(JsonRpcError(INTERNAL_ERROR, data=str(exc) or type(exc).__name__))
            return
        finally:
            if watcher is not None:
                watcher.cancel()
        route = self._settle(entry)
        responder.respond(result)
        if route is None:
            logger.warning("%s response without a session id: no route installed", entry.setup.method)
            return
        outcome = callback(OpenedSession(V2Session(route.session_id, self._successor_peer), result))
        if asyncio.iscoroutine(outcome):
            self.start_task(outcome)  # outside the ordering barrier

    def _settle_arrived(self) -> None:
        """Before every inbound message of either side (the sides' `before`): settle the
        setups whose downstream response has arrived, so a route exists for traffic after its
        response."""
        if self._pending_setups:
            self._install_ready_routes()

    # -- incoming from the predecessor ---------------------------------------------------

    def _answer_in_spelling(self, method: str) -> None:
        """`Rules.on_initialize`: the successor envelope takes the spelling of the
        `_proxy/initialize` being answered (the conductor chooses it)."""
        self._successor = successor_for(method)

    def _initialize_successor(self, seen: Json) -> RequestResult:
        """`Rules.default_initialize`: without a handler, `initialize` the successor with
        the negotiated params (the version pinned) and answer with its result."""
        return self.send_to_successor(INITIALIZE, dict(seen))

    def _to_successor_request(self, rctx: RequestContext) -> RequestResult:
        """What the predecessor's side does with a request no handler takes: forward it."""
        message = rctx.message
        method = message.method
        if method == INITIALIZE or (self.mcp_declaration is not None and method in SETUP_METHODS):
            # decoded: initialize gets its version pinned, a setup request the MCP declaration
            return self._forward_request(rctx, method, message.params)
        pending = self.raw.request(self._successor, self._envelope.wrap(method, message.params_raw), raw=True)
        return self._forward_raw(rctx, pending)

    def _notify_successor_raw(self, method: str, params_raw: Json) -> bool:
        """Where the predecessor's side forwards a notification no handler takes: to the
        successor, wrapped (its params bytes as they came)."""
        return self._notify(self._successor, self._envelope.wrap(method, params_raw))

    # -- incoming from the successor (unwrapped by the dispatch's successor side) --------

    def _to_predecessor_request(self, rctx: RequestContext) -> RequestResult:
        """What the successor's side does with a request no handler takes: forward it; an
        initializing request is refused (-32600)."""
        message = rctx.message
        method = message.method
        if method in INITIALIZING_METHODS:
            raise JsonRpcError(INVALID_REQUEST, data=PROXY_DATA)
        return self._forward_raw(rctx, self.raw.request(method, message.params_raw, raw=True))


    # -- an MCP server for the successor (MCP-over-ACP) ----------------------------------

    def serve_mcp_server(self, server: McpServerLike) -> McpServerHost:
        """Serve `server` to the successor under one connection-scoped server id.

        What `Proxy.v2().with_mcp_server` does for every connection: from now on its
        declaration (`mcp_declaration`) is added to the `mcpServers` of every `session/new`,
        `session/resume` and `session/fork` sent to the successor, and the successor's
        `mcp/message` requests for its id are served here by a dynamic handler of the
        successor's side (others are forwarded as usual).

        Args:
            server: an `mcp` `Server` / `MCPServer`, a factory of one, or an
                `acp_fast.roles.mcp.McpServer`.

        Returns:
            The server's `acp_fast.roles.mcp.McpServerHost`.
        """
        host = self.mcp.serve(self._successor_peer).add(McpServer.of(server))
        self.mcp_declaration = host.declaration
        return host

    # -- outgoing to the successor -------------------------------------------------------

    def send_to_successor(self, method: str, params: Json = None, *, passthrough: bool = False,
                          timeout: float | None = None) -> Request[Json]:
        """Send a request to the successor, wrapped in `_proxy/successor`.

        `initialize` gets `protocolVersion` pinned to this proxy's version and the successor's
        answer must carry the same version.

        Args:
            method: the inner method.
            params: the inner params (`None`: none).
            passthrough: skip the write guard (forwarding what was received).
            timeout: seconds until the handle fails with `asyncio.TimeoutError`.

        Returns:
            The request's handle.

        Raises:
            WireSurfaceError: the version does not define `method` (unless `passthrough`).
        """
        if self.mcp_declaration is not None:
            params = with_declaration(method, params, self.mcp_declaration)
        if method == INITIALIZE:
            params = dict(params or {}, protocolVersion=self.version)
        pending = self.successor_sender.send_request(method, params, passthrough, timeout)
        if method != INITIALIZE:
            return pending
        assert isinstance(pending, PendingRequest)  # the successor side has no role rule

        async def checked() -> Json:
            result = await pending
            nego.check_negotiated_version(result, self.version)
            return result

        return SentRequest(pending, checked())

    def notify_successor(self, method: str, params: Json = None, *, passthrough: bool = False) -> bool:
        """Send a notification to the successor, wrapped in `_proxy/successor`.

        Args:
            method: the inner method.
            params: the inner params (`None`: none).
            passthrough: skip the write guard (forwarding what was received).

        Returns:
            False when it was dropped (the connection closed).

        Raises:
            WireSurfaceError: the version does not define `method` or the update variant
                (unless `passthrough`).
        """
        return self.successor_sender.send_notification(method, params, passthrough)

    def _notify_wrapped(self, method: str, params: Json) -> bool:
        return self._notify(self._successor, self._envelope.wrap(method, params))

    def _request_wrapped(self, method: str, params: Json, *, timeout: float | None = None) -> PendingRequest:
        return self.raw.request(self._successor, self._envelope.wrap(method, params), timeout=timeout)

    async def _forward_request(self, rctx: RequestContext, method: str, params: Json) -> Json:
        """Forward a request to the successor decoded (`send_to_successor`) and answer it."""
        pending = self.send_to_successor(method, params, passthrough=True)
        rctx.add_cancel_callback(pending.cancel)
        return await pending

    @staticmethod
    def _forward_raw(rctx: RequestContext, pending: PendingRequest) -> None:
        """Answer `rctx` with the answer to the forwarded `pending` (sent `raw=True`):
        its result bytes verbatim (never decoded), an error as it came (code, message,
        data), -32800 if the forwarded request was detached. The peer's cancellation of
        `rctx` is passed on as `pending.cancel()` (`$/cancel_request` on the next
        hop). Callbacks only: no task per forwarded request."""
        responder = rctx.defer()
        rctx.add_cancel_callback(pending.cancel)

        def answered(fut: asyncio.Future[Any]) -> None:
            if fut.cancelled():
                responder.respond_error(JsonRpcError(REQUEST_CANCELLED))
                return
            exc = fut.exception()
            if exc is not None:
                responder.respond_error(exc)
            else:
                responder.respond(fut.result().result_raw)

        pending.add_done_callback(answered)
