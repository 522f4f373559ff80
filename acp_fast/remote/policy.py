"""The remote server's limits and access rules, and the ASGI middleware that enforces the rules.

[`ServerPolicy`][acp_fast.remote.policy.ServerPolicy] holds both: the access rules (`Host` allow-list against DNS rebinding,
`Origin` allow-list, optional bearer token) that [`AccessGuard`][acp_fast.remote.policy.AccessGuard] checks before a request
or a WebSocket upgrade reaches the application, and the limits (body size, connection count,
queues, idle time, replay window, keepalive) the application itself applies.
[`AcpApp`][acp_fast.remote.AcpApp] wraps itself in an [`AccessGuard`][acp_fast.remote.policy.AccessGuard] of its policy; the
guard also stands alone in front of any ASGI application (Starlette's `TrustedHostMiddleware`
is the same idea for the `Host` rule alone).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ._asgi import ASGIApp, Receive, Scope, Send, deny, endpoint_path, error_body, lower_headers, respond
from ._wire import DEFAULT_MAX_BODY, KEEPALIVE_SECONDS

__all__ = ["DEFAULT_ALLOW_HOSTS", "AccessGuard", "ServerPolicy"]

#: ``Host`` names accepted unless :attr:`ServerPolicy.allow_hosts` says otherwise.
DEFAULT_ALLOW_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class ServerPolicy:
    """The limits and access rules of an [`AcpApp`][acp_fast.remote.AcpApp].

    Attributes:
        token: when set, every request (and the WebSocket upgrade) needs
            `Authorization: Bearer <token>` (401 otherwise; compared in constant time).
        allow_hosts: accepted `Host` header names (port ignored; `"*"` accepts any).
            The default accepts loopback names only: a DNS name an attacker points at this
            machine (DNS rebinding) gets 421. Add the names clients use when you bind
            another address.
        allow_origins: accepted `Origin` values (`"*"` accepts any). A request without
            `Origin` (any non-browser client) passes; one from a browser origin not listed
            gets 403, on every request and on the WebSocket upgrade.
        max_body: the largest POST body or WebSocket text frame, in bytes (413 / close 1009).
        max_connections: open connections at most; the next gets 503.
        idle_timeout: seconds an HTTP connection with no SSE reader and no request lives;
            then it is closed and its agent with it. WebSocket connections live as long as
            their socket (the ASGI server's pings detect a dead peer).
        queue_high: bytes of agent output queued for the network (all streams of one
            connection) above which the agent's stream is paused; it resumes below
            `queue_high // 4`. Nothing is dropped.
        replay_window: bytes of already sent SSE events kept per stream for readers that
            reconnect with `Last-Event-ID` (0 turns resuming off).
        keepalive: seconds between SSE comment lines on a quiet stream.
        initialize_timeout: seconds the `initialize` POST waits for the agent's answer;
            then it gets 504 and the connection is closed with its agent.
    """

    token: str | None = None
    allow_hosts: Sequence[str] = DEFAULT_ALLOW_HOSTS
    allow_origins: Sequence[str] = ()
    max_body: int = DEFAULT_MAX_BODY
    max_connections: int = 4096
    idle_timeout: float = 300.0
    queue_high: int = 1024 * 1024
    replay_window: int = 256 * 1024
    keepalive: float = KEEPALIVE_SECONDS
    initialize_timeout: float = 30.0
    _hosts: frozenset[str] = field(init=False, repr=False, compare=False)
    _origins: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_body < 1 or self.max_connections < 1 or self.queue_high < 1:
            raise ValueError("max_body, max_connections and queue_high must be positive")
        if self.idle_timeout <= 0 or self.keepalive <= 0 or self.initialize_timeout <= 0 or self.replay_window < 0:
            raise ValueError("idle_timeout, keepalive and initialize_timeout must be positive, replay_window >= 0")
        object.__setattr__(self, "_hosts", frozenset(h.lower().strip("[]") for h in self.allow_hosts))
        object.__setattr__(self, "_origins", frozenset(o.lower().rstrip("/") for o in self.allow_origins))

    def refusal(self, headers: Mapping[bytes, bytes]) -> tuple[int, str] | None:
        """Why a request with these (lower-cased) headers is refused, or `None`."""
        if "*" not in self._hosts:
            host = _host_name(headers.get(b"host", b"").decode("latin-1"))
            if host not in self._hosts:
                return 421, "Host not allowed"
        origin = headers.get(b"origin")
        if origin is not None and "*" not in self._origins:
            if origin.decode("latin-1").lower().rstrip("/") not in self._origins:
                return 403, "Origin not allowed"
        if self.token is not None:
            auth = headers.get(b"authorization", b"")
            expected = b"Bearer " + self.token.encode()
            if not hmac.compare_digest(auth, expected):
                return 401, "missing or wrong bearer token"
        return None


def _host_name(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


class AccessGuard:
    """ASGI middleware: the access rules of a [`ServerPolicy`][acp_fast.remote.policy.ServerPolicy] in front of `app`.

    Every HTTP request and WebSocket upgrade to one of `paths` (below the mount point; all
    paths when `paths` is `None`) that [`ServerPolicy.refusal`][acp_fast.remote.policy.ServerPolicy.refusal] refuses is answered here
    (421, 403 or 401 with a JSON-RPC error body; an upgrade is refused with that status where
    the server supports it, else closed with 1008) and never reaches `app`. Other scopes
    (`lifespan`) and other paths pass through untouched.

    Args:
        app: the ASGI application guarded.
        policy: whose access rules apply (its limits are the application's business).
        paths: the endpoint paths guarded (`("/acp",)`), or `None` for every path.
        on_refusal: called with the status and the reason of each refusal, before it is
            sent (the server's metrics and event log).
    """

    def __init__(self, app: ASGIApp, policy: ServerPolicy, *, paths: Sequence[str] | None = None,
                 on_refusal: Callable[[int, str], None] | None = None) -> None:
        self.app = app
        self.policy = policy
        self.on_refusal = on_refusal
        self.paths = None if paths is None else frozenset(p.rstrip("/") or "/" for p in paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or (self.paths is not None and endpoint_path(scope) not in self.paths):
            await self.app(scope, receive, send)
            return
        refused = self.policy.refusal(lower_headers(scope))
        if refused is None:
            await self.app(scope, receive, send)
            return
        if self.on_refusal is not None:
            self.on_refusal(*refused)
        if kind == "http":
            await respond(send, refused[0], error_body(*refused), www_auth=refused[0] == 401)
        else:
            await _refuse_upgrade(scope, receive, send, *refused)


async def _refuse_upgrade(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    if (await receive())["type"] == "websocket.connect":
        await deny(scope, send, status, message)
