"""Setup requests built from a complete request (`*_from`), for clients and proxies.

A [`SessionSetup`][acp_fast.roles.SessionSetup] is a v2 `session/new` / `session/resume` /
`session/fork` not yet published: a client starts it
([`start_session`][acp_fast.roles.SessionSetup.start_session]); a proxy forwards it to its
successor and routes the session's messages
([`on_proxy_session_start`][acp_fast.roles.SessionSetup.on_proxy_session_start]). What it
needs of its connection is `SetupPeer`. Part of the session helpers
([`acp_fast.roles.sessions`][acp_fast.roles.sessions]).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Protocol

from ..jsontypes import Json, JsonObject
from ..protocol.facts import SESSION_FORK, SESSION_NEW, SESSION_RESUME
from .mcp import McpConnection
from .client_sessions import OpenedSession, SessionPeer, V1Session, V2Session, require_v2, with_mcp

if TYPE_CHECKING:  # pragma: no cover
    from ._hot import ProxyContext
    from .context import SentRequest
    from .mcp import McpServerLike

__all__ = ["SETUP_OPERATIONS", "SessionSetup", "SetupPeer"]


class SetupPeer(SessionPeer, McpConnection, Protocol):
    """What a [`SessionSetup`][acp_fast.roles.SessionSetup] needs of its connection (an `AcpConnection` is one): the
    session helpers' peer with its MCP-over-ACP state."""


#: setup method -> operation name
SETUP_OPERATIONS = {SESSION_NEW: "new", SESSION_RESUME: "resume", SESSION_FORK: "fork"}


class SessionSetup:
    """A v2 setup request not yet published, built from a complete request (Rust
    `V2SessionBuilder` / `V2ResumeSessionBuilder` / `V2ForkSessionBuilder`).

    Made by `build_session_from` / `resume_session_from` / `fork_session_from` of a
    connection. A client publishes it with [`start_session`][acp_fast.roles.SessionSetup.start_session]; a v2 proxy forwards it
    downstream with [`on_proxy_session_start`][acp_fast.roles.SessionSetup.on_proxy_session_start]. `params` is the request, unchanged
    unless the caller edits it before starting.

    Attributes:
        connection: the connection it will be published on.
        method: `session/new`, `session/resume` or `session/fork`.
        operation: `"new"`, `"resume"` or `"fork"`.
        params: the complete request params.
    """

    __slots__ = ("_mcp", "connection", "method", "operation", "params")

    def __init__(self, connection: SetupPeer, method: str, params: JsonObject) -> None:
        if method not in SETUP_OPERATIONS:
            raise ValueError(f"{method!r} is not a session setup request")
        if type(params) is not dict:
            raise TypeError("a setup request's params must be a JSON object")
        self.connection = connection
        self.method = method
        self.operation = SETUP_OPERATIONS[method]
        self.params = params
        self._mcp: list[McpServerLike] = []

    def with_mcp_server(self, server: McpServerLike) -> SessionSetup:
        """Serve `server` to the agent over ACP for this session (MCP-over-ACP, v2).

        `server` is what `with_mcp_servers` of `build_session` takes (an `mcp`
        server, a factory of one, or [`acp_fast.roles.mcp.McpServer`][acp_fast.roles.mcp.McpServer]). When the setup
        is started, its route is installed and its runner started before the request is
        published, then kept for the connection's lifetime on success and removed on
        failure or cancellation; its declaration is appended to `params["mcpServers"]`.
        Returns `self` for chaining.
        """
        self._mcp.append(server)
        return self

    @property
    def session_id(self) -> str | None:
        """The session id known before the response: resume's (fork's is the source's)."""
        sid = self.params.get("sessionId")
        return sid if self.operation == "resume" and type(sid) is str else None

    def start_session(self) -> SentRequest[OpenedSession[V2Session | V1Session]]:
        """Publish the request; resolves to an [`OpenedSession`][acp_fast.roles.OpenedSession] (the complete
        response, never reconstructed; fork's handle uses the new session id; resume
        resolves after the handlers of its replay ran)."""
        connection = self.connection
        if self.operation != "new":
            require_v2(connection, f"{self.operation}_session_from")
        params = self.params
        if self._mcp:
            servers, self._mcp = self._mcp, []

            def publish(declared: list[Mapping[str, Json]]) -> SentRequest[OpenedSession[V2Session | V1Session]]:
                self.params = {**params, "mcpServers": declared}
                try:
                    return self.start_session()
                finally:
                    self.params = params

            return with_mcp(connection, servers, params.get("mcpServers"), publish)
        if self.operation == "resume":
            sid = params.get("sessionId")
            if type(sid) is not str:
                raise ValueError("session/resume needs a string sessionId")

            def resumed(result: JsonObject) -> OpenedSession[V2Session | V1Session]:
                return OpenedSession(V2Session(sid, connection), result)

            return connection.mapped_request(self.method, params, resumed, settle=True)

        def opened(result: JsonObject) -> OpenedSession[V2Session | V1Session]:
            new_id = result["sessionId"]
            if not connection.profile.session_states:
                return OpenedSession(V1Session(new_id, connection), result)
            connection.sessions.get(new_id)  # default idle unless already reported
            return OpenedSession(V2Session(new_id, connection), result)

        return connection.mapped_request(self.method, params, opened)

    def on_proxy_session_start(self, cx: ProxyContext,
                               callback: Callable[[OpenedSession[V2Session]], Coroutine[object, object, None] | None]
                               ) -> None:
        """A v2 proxy's non-blocking setup helper (Rust `on_proxy_session_start`).

        Call it from the proxy's `session/new` / `session/resume` / `session/fork`
        handler with that handler's `cx` and return its result. It sends the request
        downstream at once (in order with later traffic), forwards the upstream request's
        cancellation downstream (advisory: the downstream answer is still awaited and
        forwarded), answers upstream with the complete downstream response (or its error),
        installs the session's route (see `ProxyConnection.proxy_sessions`) before any
        later inbound message is dispatched - for resume before the request is published,
        so replay can be routed - and then runs `callback(opened)` as a task outside the
        ordering barrier, with an [`OpenedSession`][acp_fast.roles.OpenedSession] whose handle sends to the
        successor. A failed or cancelled setup drops the pending route.

        Raises:
            TypeError: the connection is not a proxy's.
        """
        start = getattr(self.connection, "start_proxy_session", None)
        if start is None:
            raise TypeError("on_proxy_session_start needs a proxy connection (Proxy.v2())")
        start(self, cx, callback)
