"""The per-connection ACP initialization / lifecycle guard (protocol layer, sans-IO).

One [`InitializationGuard`][acp_fast.protocol.guard.InitializationGuard] sits on each ACP connection built by [`acp_fast.roles`][acp_fast.roles]
and answers, for every message in either direction, "may this pass now?" (protocol.md §5).
It never touches I/O: the role layer asks it and then answers, drops or sends.

Modes (`role`):

* `"unchecked"`: v1 agents/clients and proxies; no ordering is enforced.
* `"responder"` (a v2 agent) and `"initiator"` (a v2 client): the states are
  `uninitialized -> initializing -> ready`.

Rules for the checked modes:

1. Before `ready` every ordinary request in either direction is refused with -32600,
   data "ACP initialization must complete before (the method, in backticks) can be used"; ordinary
   notifications are dropped. Only `$/cancel_request` passes, and only while
   `initializing`.
2. Only the client initiates: a responder sending, or an initiator receiving,
   `initialize` is refused (data: "ACP clients send (initialize, in backticks) requests and ACP
   agents respond to them").
3. A second `initialize` while one is in flight is refused (`"… already in progress …"`);
   after `ready` it is refused (`"… may only be initialized once; …"`) and the
   connection stays ready.
4. A failed handshake returns to `uninitialized` so the client may retry; a stale attempt
   never resets a newer one ([`InitializationGuard.fail`][acp_fast.protocol.guard.InitializationGuard.fail] takes the attempt token).

Proxy surfaces (`proxy=True`) additionally require `_proxy/initialize` instead of
`initialize` on input (§5.11).

Example:
    >>> g = InitializationGuard(2, "responder")
    >>> g.check_incoming_request("session/new").data
    'ACP initialization must complete before `session/new` can be used'
    >>> token = g.begin()
    >>> g.allows_incoming_notification("$/cancel_request")
    True
    >>> g.succeed(token, 2)
    >>> g.check_incoming_request("session/new") is None
    True
"""

from __future__ import annotations

from ..errors import INVALID_REQUEST, JsonRpcError
from .facts import CANCEL_REQUEST as CANCEL_METHOD
from .facts import INITIALIZE, PROXY_INITIALIZE

__all__ = [
    "CANCEL_METHOD",
    "INITIALIZING",
    "READY",
    "UNCHECKED",
    "UNINITIALIZED",
    "InitializationGuard",
    "not_initialized",
]

UNCHECKED = "unchecked"
UNINITIALIZED = "uninitialized"
INITIALIZING = "initializing"
READY = "ready"

DIRECTION_DATA = "ACP clients send `initialize` requests and ACP agents respond to them"
IN_PROGRESS_DATA = "ACP initialization is already in progress on this connection"
ONCE_DATA = "ACP connections may only be initialized once; reconnect to initialize again"
PROXY_DATA = (
    "proxy initialization must arrive as `_proxy/initialize`; outgoing `initialize` must "
    "target the successor so the connection can apply `_proxy/successor`"
)


def not_initialized(method: str) -> JsonRpcError:
    """The -32600 error for `method` used before initialization completed."""
    return JsonRpcError(
        INVALID_REQUEST, data=f"ACP initialization must complete before `{method}` can be used"
    )


def _invalid(data: str) -> JsonRpcError:
    return JsonRpcError(INVALID_REQUEST, data=data)


class InitializationGuard:
    """Lifecycle state of one connection (see the module docstring).

    Args:
        version: the API version of the local implementation (1 or 2).
        role: `"unchecked"`, `"initiator"` (client) or `"responder"` (agent).
        proxy: the connection initializes through `_proxy/initialize`.

    Attributes:
        state: one of `UNCHECKED`, `UNINITIALIZED`, `INITIALIZING`,
            `READY`.
        negotiated: the negotiated version once ready (`None` before).
    """

    __slots__ = ("_attempt", "negotiated", "proxy", "role", "state", "version")

    def __init__(self, version: int, role: str = "unchecked", *, proxy: bool = False) -> None:
        if role not in ("unchecked", "initiator", "responder"):
            raise ValueError(f"unknown guard role {role!r}")
        self.version = version
        self.role = role
        self.proxy = proxy
        self.state = UNCHECKED if role == "unchecked" else UNINITIALIZED
        self.negotiated: int | None = None
        self._attempt = 0

    @property
    def ready(self) -> bool:
        """True when ordinary traffic may flow (always for unchecked guards)."""
        return self.state is READY or self.state is UNCHECKED

    @property
    def init_method(self) -> str:
        """The method that initializes this connection on input."""
        return PROXY_INITIALIZE if self.proxy else INITIALIZE

    # -- incoming -------------------------------------------------------------------------

    def check_incoming_request(self, method: str) -> JsonRpcError | None:
        """`None` when the request may be dispatched, else the error to answer with.

        For the initializing method, `None` means "validate it, then [`begin`][acp_fast.protocol.guard.InitializationGuard.begin]".
        """
        if self.proxy and method == INITIALIZE:
            return _invalid(PROXY_DATA)
        state = self.state
        if state is UNCHECKED:
            return None
        if method == INITIALIZE:
            if self.role == "initiator":
                return _invalid(DIRECTION_DATA)
            if state is READY:
                return _invalid(ONCE_DATA)
            if state is INITIALIZING:
                return _invalid(IN_PROGRESS_DATA)
            return None
        if state is READY:
            return None
        return not_initialized(method)

    def allows_incoming_notification(self, method: str) -> bool:
        """Whether an incoming notification is delivered (else it is dropped)."""
        state = self.state
        if state is READY or state is UNCHECKED:
            return True
        return state is INITIALIZING and method == CANCEL_METHOD

    # -- outgoing -------------------------------------------------------------------------

    def check_outgoing_request(self, method: str) -> JsonRpcError | None:
        """`None` when we may send the request, else the error the local send fails with.

        For `initialize` on an initiator, `None` means "send it, then [`begin`][acp_fast.protocol.guard.InitializationGuard.begin]".
        """
        state = self.state
        if state is UNCHECKED:
            return None
        if method == INITIALIZE:
            if self.role == "responder":
                return _invalid(DIRECTION_DATA)
            if state is READY:
                return _invalid(ONCE_DATA)
            if state is INITIALIZING:
                return _invalid(IN_PROGRESS_DATA)
            return None
        if state is READY:
            return None
        return not_initialized(method)

    def check_outgoing_notification(self, method: str) -> JsonRpcError | None:
        """`None` when we may send the notification, else why it must be dropped."""
        if self.allows_incoming_notification(method):
            return None
        return not_initialized(method)

    # -- transitions ----------------------------------------------------------------------

    def begin(self) -> int:
        """A handshake starts; returns its token (pass it to [`succeed`][acp_fast.protocol.guard.InitializationGuard.succeed]/[`fail`][acp_fast.protocol.guard.InitializationGuard.fail])."""
        self._attempt += 1
        if self.state is not UNCHECKED:
            self.state = INITIALIZING
        return self._attempt

    def succeed(self, token: int, negotiated: int) -> None:
        """The handshake `token` completed with `negotiated`."""
        if token != self._attempt:
            return
        self.negotiated = negotiated
        if self.state is not UNCHECKED:
            self.state = READY

    def fail(self, token: int) -> None:
        """The handshake `token` failed: back to `uninitialized` (the client may retry)."""
        if token != self._attempt or self.state is not INITIALIZING:
            return
        self.state = UNINITIALIZED

    def __repr__(self) -> str:
        return (
            f"InitializationGuard(version={self.version}, role={self.role!r}, "
            f"proxy={self.proxy}, state={self.state!r})"
        )
