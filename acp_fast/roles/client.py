"""The connection of a built client: [`ClientConnection`][acp_fast.roles.client.ClientConnection], generic in its version.

A client sends `initialize` (the initiator side of the initialization guard) and opens
sessions; its handlers answer the agent's requests, and its `session/request_permission`
requests are tracked per session so that `cancel_active_work` can answer them with the
cancelled outcome. The version is in the type: `Client.v2().connect(...)` gives a
`ClientConnection[V2]`, whose [`build_session`][acp_fast.roles.client.ClientConnection.build_session] opens a
[`V2Session`][acp_fast.roles.V2Session]; `Client.builder()` (v1) gives a
`ClientConnection[V1]` and a [`V1Session`][acp_fast.roles.V1Session].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, overload

from ..errors import JsonRpcError
from ..jsonrpc import Connection, PendingRequest
from ..jsontypes import Json, JsonObject
from ..protocol import negotiation as nego
from ..protocol.facts import CLIENT_TRACKED_REQUESTS, INITIALIZE
from .connection import AcpConnection
from .context import V1, V2, Request, SentRequest, Version
from .dispatch import Rules, SideRules
from .sessions import OpenedSession, V1Session, V2Session, build_session, fork_session, resume_session
from .table import HandlerTable

if TYPE_CHECKING:  # pragma: no cover
    from .mcp import McpServerLike

__all__ = ["ClientConnection", "InitializeHooks"]


class InitializeHooks(Protocol):
    """How a client protocol connector takes part in one connection's `initialize`.

    Attributes:
        first_rule: the -32600 `data` for anything sent before `initialize`.
    """

    first_rule: str

    def intercept(self, connection: ClientConnection[int], params: JsonObject) -> SentRequest[JsonObject] | None:
        """Answer `initialize` without sending it (reuse), or `None` to send it."""

    def on_version_mismatch(self, params: JsonObject, result: JsonObject) -> None:
        """The peer answered our `initialize` with another version."""


class ClientConnection(AcpConnection[Version]):
    """The connection of a built client (`Client.builder()` / `Client.v2()`).

    Attributes:
        version: the client's ACP version; `V1` or `V2` in its type.
    """

    role = "client"
    guard_role = "initiator"
    answers_initialize = False

    def __init__(self, conn: Connection, table: HandlerTable, *, hooks: InitializeHooks | None = None) -> None:
        self._hooks = hooks
        # its permission requests are tracked per session; `send_request("initialize")` is `initialize`
        super().__init__(conn, table, rules=Rules(peer=SideRules(tracked_requests=CLIENT_TRACKED_REQUESTS),
                                                  send_initializing=self._send_initialize),
                         first_rule=None if hooks is None else hooks.first_rule)

    def _send_initialize(self, method: str, params: Json) -> Request[Json] | None:
        """`Rules.send_initializing`: `send_request("initialize", …)` is [`initialize`][acp_fast.roles.client.ClientConnection.initialize]."""
        return self.initialize(params) if method == INITIALIZE else None

    # -- initialize ---------------------------------------------------------------------

    def initialize(self, params: JsonObject | None = None) -> SentRequest[JsonObject]:
        """Send `initialize` and check the answer (protocol.md §5.9, §6.3).

        `protocolVersion` is forced to this implementation's version and `info` /
        `clientInfo` defaults to this builder's. A v2 client fails on any answer but 2
        (-32600 `"required ACP protocol version 2 but peer negotiated 1; …"`) and the
        connection returns to uninitialized, so a retry is possible.

        Raises:
            JsonRpcError: -32600 when the guard refuses (in progress / already initialized).
        """
        version = self.version
        params = dict(params or {})
        params["protocolVersion"] = version
        params.setdefault(self.profile.client_info_key, self.info)
        if self._hooks is not None and self.sender.first_rule is not None:
            reused = self._hooks.intercept(self, params)
            if reused is not None:
                self.sender.first_sent()
                return reused
        guard = self.guard
        error = guard.check_outgoing_request(INITIALIZE)
        if error is not None:
            raise error
        self.sender.first_sent()
        token = guard.begin()
        pending = self.raw.request(INITIALIZE, params)
        return SentRequest(pending, self._initialized(pending, params, token))

    def adopt_initialize(self, result: JsonObject) -> SentRequest[JsonObject]:
        """Take an `initialize` answer the peer already gave (protocol connector reuse)."""
        self.sender.first_sent()
        self._succeed(self.guard.begin())
        return SentRequest(None, _value(dict(result)), INITIALIZE)

    async def _initialized(self, pending: PendingRequest, params: JsonObject, token: int) -> JsonObject:
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
        return result  # type: ignore[no-any-return]

    # -- sessions (see acp_fast.roles.sessions) -----------------------------------------

    @overload
    def build_session(self: ClientConnection[V2], cwd: str, *, mcp_servers: Sequence[Json] | None = None,
                      with_mcp_servers: Sequence[McpServerLike] = (), **fields: Json
                      ) -> SentRequest[OpenedSession[V2Session]]: ...

    @overload
    def build_session(self: ClientConnection[V1], cwd: str, *, mcp_servers: Sequence[Json] | None = None,
                      with_mcp_servers: Sequence[McpServerLike] = (), **fields: Json
                      ) -> SentRequest[OpenedSession[V1Session]]: ...

    @overload
    def build_session(self, cwd: str, *, mcp_servers: Sequence[Json] | None = None,
                      with_mcp_servers: Sequence[McpServerLike] = (), **fields: Json
                      ) -> SentRequest[OpenedSession[V2Session | V1Session]]: ...

    def build_session(self, cwd: str, *, mcp_servers: Sequence[Json] | None = None,
                      with_mcp_servers: Sequence[McpServerLike] = (), **fields: Json
                      ) -> SentRequest[OpenedSession[Any]]:
        """`session/new` -> [`OpenedSession`][acp_fast.roles.OpenedSession]: its session is
        a [`V2Session`][acp_fast.roles.V2Session] on a v2 client, a
        [`V1Session`][acp_fast.roles.V1Session] on a v1 one (see
        `build_session`)."""
        return build_session(self, cwd, mcp_servers=mcp_servers, with_mcp_servers=with_mcp_servers, **fields)

    def resume_session(self: ClientConnection[V2], session_id: str, cwd: str, **kwargs: Json
                       ) -> SentRequest[OpenedSession[V2Session]]:
        """v2 `session/resume` -> [`OpenedSession`][acp_fast.roles.OpenedSession] (see
        `resume_session`)."""
        return resume_session(self, session_id, cwd, **kwargs)

    def fork_session(self: ClientConnection[V2], session_id: str, cwd: str, **kwargs: Json
                     ) -> SentRequest[OpenedSession[V2Session]]:
        """v2 `session/fork` (unstable) -> [`OpenedSession`][acp_fast.roles.OpenedSession]
        of the new session (see `fork_session`)."""
        return fork_session(self, session_id, cwd, **kwargs)


async def _value(value: JsonObject) -> JsonObject:
    return value
