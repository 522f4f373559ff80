"""A proxy's connection to its predecessor: :class:`ProxyConnection` (protocol.md §6.7, §8).

A proxy is initialized by ``_proxy/initialize`` (exact version match), talks to its
successor through ``_proxy/successor`` envelopes on the same connection, and forwards
whatever it does not handle: requests and notifications from the predecessor go to the
successor, and vice versa. ``$/cancel_request`` is hop-local and never forwarded; a
forwarded request is cancelled downstream when the upstream caller cancels it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..errors import INVALID_PARAMS, INVALID_REQUEST, JsonRpcError
from ..jsonrpc import CANCEL_METHOD, RequestContext
from ..protocol import negotiation as nego
from ..protocol.guard import PROXY_DATA, InitializationGuard
from .connection import INITIALIZE, PROXY_INITIALIZE, PROXY_INITIALIZE_SPEC, SESSION_UPDATE, AcpConnection
from ._hot import Context
from .context import Request, SentRequest
from .table import HandlerTable

__all__ = ["SUCCESSOR", "SUCCESSOR_SPEC", "ProxyConnection"]

logger = logging.getLogger("acp_fast.roles")

SUCCESSOR = "_proxy/successor"
#: the spec spelling (``proxy/*``): accepted too, and used towards a predecessor that
#: initialized this proxy with ``proxy/initialize``
SUCCESSOR_SPEC = "proxy/successor"
_SUCCESSORS = (SUCCESSOR, SUCCESSOR_SPEC)
_PROXY_SEND_DATA = (
    "proxy initialization must be sent as a logical `initialize` message to the successor; "
    "`_proxy/successor` wrapping is applied by connection routing"
)


def _unwrap(params: Any) -> tuple[str, Any]:
    method = params.get("method") if type(params) is dict else None
    inner = params.get("params") if type(params) is dict else None
    if type(method) is not str or (inner is not None and type(inner) not in (dict, list)):
        raise JsonRpcError(INVALID_PARAMS, data="invalid `_proxy/successor` envelope")
    return method, inner


class ProxyConnection(AcpConnection):
    """The connection of a built proxy (``Proxy.builder()`` / ``Proxy.v2()``).

    Unhandled requests and notifications from the predecessor are forwarded to the
    successor, and those from the successor (inside ``_proxy/successor``) to the
    predecessor. Handlers registered with ``on_successor_request`` /
    ``on_successor_notification`` see the successor's messages unwrapped.
    """

    role = "proxy"
    #: the successor envelope's spelling: the one of the predecessor's initialize
    _successor = SUCCESSOR
    #: the declaration of the proxy's global MCP server (``Proxy.v2().with_mcp_server``)
    _mcp_declaration: dict[str, Any] | None = None

    def _make_guard(self, table: HandlerTable) -> InitializationGuard:
        return InitializationGuard(self.version, "unchecked", proxy=table.guarded)

    def _updates_gated(self) -> bool:
        return False  # a proxy relays session/update; it never binds it to a type

    def _became_ready(self) -> None:
        super()._became_ready()
        for name in _SUCCESSORS:
            self.raw.on_request(name, self._from_successor_request)
            self.raw.on_notification(name, self._from_successor_notification)

    def _initializes(self, method: str) -> bool:
        if method == PROXY_INITIALIZE_SPEC or method == PROXY_INITIALIZE:
            self._successor = SUCCESSOR_SPEC if method == PROXY_INITIALIZE_SPEC else SUCCESSOR
            return True
        return False

    # -- incoming from the predecessor ---------------------------------------------------

    def _negotiate(self, params: Any) -> Any:
        requested = nego.parse_protocol_version(params)
        if requested != self.version:  # exact match only (§6.7)
            raise JsonRpcError(INVALID_REQUEST, data=(
                f"unsupported ACP protocol version {requested}; "
                f"this proxy supports ACP protocol version {self.version}"))
        nego.validate_initialize_request(params, self.version)
        return params

    def _default_initialize(self, seen: Any) -> Any:
        return self.send_to_successor(INITIALIZE, dict(seen))

    def _unhandled_request(self, rctx: RequestContext, method: str) -> Any:
        if method in _SUCCESSORS:
            return self._from_successor_request(rctx)
        return self._forward_request(rctx, method, rctx.message.params, to_successor=True)

    def _unhandled_notification(self, msg: Any, method: str) -> Any:
        if method == CANCEL_METHOD:  # hop-local
            return None
        if method in _SUCCESSORS:
            return self._from_successor_notification(msg)
        self.notify_successor(method, msg.params, passthrough=True)
        return None

    # -- outgoing to the successor -------------------------------------------------------

    def _refuse_initialize(self, method: str) -> None:
        raise JsonRpcError(INVALID_REQUEST, data=_PROXY_SEND_DATA)

    def send_to_successor(self, method: str, params: Any = None, *, passthrough: bool = False,
                          timeout: float | None = None) -> Request[Any]:
        """Send a request to the successor, wrapped in ``_proxy/successor``.

        ``initialize`` gets ``protocolVersion`` pinned to this proxy's version and the
        successor's answer must carry the same version.

        Raises:
            WireSurfaceError: the version does not define ``method`` (unless ``passthrough``).
        """
        self.surface.check_outgoing_method(method, "request", passthrough=passthrough)
        if self._mcp_declaration is not None:
            from .mcp import with_declaration

            params = with_declaration(method, params, self._mcp_declaration)
        inner: dict[str, Any] = {"method": method}
        if method == INITIALIZE:
            params = dict(params or {}, protocolVersion=self.version)
        if params is not None:
            inner["params"] = params
        pending = self.raw.request(self._successor, inner, timeout=timeout)
        if method != INITIALIZE:
            return pending

        async def checked() -> Any:
            result = await pending
            nego.check_negotiated_version(result, self.version)
            return result

        return SentRequest(pending, checked())

    def notify_successor(self, method: str, params: Any = None, *, passthrough: bool = False) -> bool:
        """Send a notification to the successor, wrapped in ``_proxy/successor``.

        Raises:
            WireSurfaceError: the version does not define ``method`` or the update variant
                (unless ``passthrough``).
        """
        self.surface.check_outgoing_method(method, "notification", passthrough=passthrough)
        if method == SESSION_UPDATE and not passthrough and type(params) is dict:
            self._check_update_out(params.get("update"))
        inner: dict[str, Any] = {"method": method}
        if params is not None:
            inner["params"] = params
        return self.raw.notify(self._successor, inner)

    # -- incoming from the successor -----------------------------------------------------

    def _from_successor_request(self, rctx: RequestContext) -> Any:
        method, params = _unwrap(rctx.message.params)
        if method in (INITIALIZE, PROXY_INITIALIZE, PROXY_INITIALIZE_SPEC):
            raise JsonRpcError(INVALID_REQUEST, data=PROXY_DATA)
        if self._mcp_declaration is not None and method == "mcp/message":
            from .mcp import successor_request

            served = successor_request(self, rctx, params)
            if served is not NotImplemented:
                return served
        fn = self.table.successor_requests.get(method)
        if fn is not None:
            return fn(params, Context(self, rctx, rctx.message))
        return self._forward_request(rctx, method, params, to_successor=False)

    def _from_successor_notification(self, msg: Any) -> Any:
        try:
            method, params = _unwrap(msg.params)
        except JsonRpcError:
            logger.warning("malformed %s notification dropped", SUCCESSOR)
            return None
        if method == CANCEL_METHOD:  # hop-local; never forwarded
            return None
        fn = self.table.successor_notifications.get(method)
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
