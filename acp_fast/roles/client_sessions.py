"""The client's session handles (v2 and v1), and the setup requests that open them.

`build_session` / `resume_session` / `fork_session` publish `session/new` /
`session/resume` / `session/fork` and resolve to an
[`OpenedSession`][acp_fast.roles.OpenedSession]: the command handle
([`V2Session`][acp_fast.roles.V2Session] or [`V1Session`][acp_fast.roles.V1Session], a
session id and the connection) and the complete setup response. What a handle needs of its
connection is [`SessionPeer`][acp_fast.roles.SessionPeer]. Part of the session helpers
([`acp_fast.roles.sessions`][acp_fast.roles.sessions]).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, Union, cast

from ..jsontypes import Json, JsonObject
from ..protocol.facts import SESSION_CANCEL, SESSION_FORK, SESSION_NEW, SESSION_PROMPT, SESSION_RESUME
from .mcp import McpConnection
from .session_state import SessionState, SessionStates, StopReason

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol.profile import VersionProfile
    from .context import Request, SentRequest
    from .mcp import McpServerLike

_T = TypeVar("_T")
#: the session handle type of an [`OpenedSession`][acp_fast.roles.OpenedSession]
_S = TypeVar("_S", bound=Union["V2Session", "V1Session"])

__all__ = ["OpenedSession", "SessionPeer", "V1Session", "V2Session", "build_session", "fork_session", "resume_session"]


class SessionPeer(Protocol):
    """What the session helpers need of a client connection (an `AcpConnection` is one)."""

    @property
    def version(self) -> int:
        """The ACP version of the implementation (1 or 2)."""

    @property
    def profile(self) -> VersionProfile:
        """What differs between versions, as data."""

    @property
    def sessions(self) -> SessionStates:
        """The tracked v2 session states."""

    def send_request(self, method: str, params: Json = None, *, passthrough: bool = False,
                     timeout: float | None = None) -> Request[Json]:
        """Send a request through the guards; returns its handle (`await` it for the result)."""

    def send_notification(self, method: str, params: Json = None, *, passthrough: bool = False) -> bool:
        """Send a notification through the guards; returns False when it was dropped."""

    def mapped_request(self, method: str, params: Json, fn: Callable[[Json], _T], *,
                       settle: bool = False) -> SentRequest[_T]:
        """Send a request whose result is mapped by `fn` (`settle`: first wait for the
        handlers of the notifications received before the response)."""


class V2Session:
    """Command handle of one v2 session: its id and the connection, nothing else.

    Cloneable by construction (two handles with the same id are interchangeable); it does
    not own, buffer or unregister inbound messages.
    """

    __slots__ = ("connection", "session_id")

    def __init__(self, session_id: str, connection: SessionPeer) -> None:
        self.session_id = session_id
        self.connection = connection

    @property
    def state(self) -> SessionState:
        """The tracked foreground state of this session."""
        return self.connection.sessions.get(self.session_id)

    @property
    def idle_epoch(self) -> int:
        """The session's `SessionState.idle_epoch` now (take it before prompting, for
        [`wait_idle`][acp_fast.roles.V2Session.wait_idle]'s `after`)."""
        return self.state.idle_epoch

    def send_prompt(self, prompt: Sequence[Mapping[str, Json]] | str, **fields: Json) -> Request[Json]:
        """Send `session/prompt`; the handle resolves to the insertion receipt.

        Args:
            prompt: content blocks, or a plain string (one `text` block).
            **fields: further request fields (`_meta` …).

        Returns:
            The request handle (await it, `cancel()` it or `detach()` it). Its result is
            `{"messageId": …}`; the turn's end is an idle `state_update`.
        """
        blocks = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else list(prompt)
        params = {"sessionId": self.session_id, "prompt": blocks, **fields}
        return self.connection.send_request(SESSION_PROMPT, params)

    async def wait_idle(self, after: int | None = None) -> StopReason | None:
        """See [`SessionState.wait_idle`][acp_fast.roles.SessionState.wait_idle]."""
        return await self.state.wait_idle(after)

    def cancel_active_work(self, **fields: Json) -> bool:
        """Send the session-wide `session/cancel` notification, and do the client's part.

        Every pending `session/request_permission` of this session (and no other) is
        answered with the cancelled outcome, once; unfinished tool calls are marked
        `"cancelled"` in [`state`][acp_fast.roles.V2Session.state]. Completion of cancelled foreground work is an idle
        update with stop reason `cancelled`; cancelling an idle session need not produce one.
        """
        sent = self.connection.send_notification(SESSION_CANCEL, {"sessionId": self.session_id, **fields})
        self.state.cancel_work()
        return sent

    def fork(self, cwd: str, *, mcp_servers: Sequence[Mapping[str, Json]] | None = None,
             with_mcp_servers: Sequence[McpServerLike] = (), **fields: Json) -> SentRequest[OpenedSession[V2Session]]:
        """`session/fork` of this session (unstable): see `fork_session`."""
        return fork_session(self.connection, self.session_id, cwd, mcp_servers=mcp_servers,
                            with_mcp_servers=with_mcp_servers, **fields)

    def set_config_option(self, config_id: str, value: Json, **fields: Json) -> Request[Json]:
        """`session/set_config_option`; resolves to the authoritative replacement set."""
        params = {"sessionId": self.session_id, "configId": config_id, "value": value, **fields}
        return self.connection.send_request("session/set_config_option", params)

    def close(self, **fields: Json) -> SentRequest[Json]:
        """`session/close`; resolves to the complete close response.

        The agent cancels active work first and sends its final updates and the idle
        `cancelled` update before the response (seed 000); the handle resolves only after
        the handlers of those updates ran, so [`state`][acp_fast.roles.V2Session.state] is final by then. A prompt the
        close cancelled before insertion fails with -32800; an inserted one kept its id.
        """
        params = {"sessionId": self.session_id, **fields}
        return self.connection.mapped_request("session/close", params, _same, settle=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, V2Session) and (self.session_id, self.connection) == (
            other.session_id, other.connection)

    def __hash__(self) -> int:
        return hash(self.session_id)

    def __repr__(self) -> str:
        return f"V2Session({self.session_id!r})"


class OpenedSession(Generic[_S]):
    """Result of a setup request: the session handle and the complete response.

    Generic in the handle's type: a v2 client's `build_session` gives an
    `OpenedSession[V2Session]`, a v1 client's an `OpenedSession[V1Session]`.

    Attributes:
        session: the session handle: a [`V2Session`][acp_fast.roles.V2Session], or a [`V1Session`][acp_fast.roles.V1Session] on a v1
            connection.
        response: the complete `session/new` / `session/resume` result, unchanged.
    """

    __slots__ = ("response", "session")

    def __init__(self, session: _S, response: JsonObject) -> None:
        self.session = session
        self.response = response

    def into_parts(self) -> tuple[_S, JsonObject]:
        """`(session, response)`."""
        return self.session, self.response

    def __repr__(self) -> str:
        return f"OpenedSession({self.session!r}, response={self.response!r})"


def _setup_params(cwd: str, mcp_servers: Sequence[Mapping[str, Json]] | None, fields: JsonObject) -> JsonObject:
    params: JsonObject = {"cwd": cwd}
    if mcp_servers is not None:
        params["mcpServers"] = list(mcp_servers)
    params.update(fields)
    return params


def build_session(
    connection: SessionPeer, cwd: str, *, mcp_servers: Sequence[Mapping[str, Json]] | None = None,
    with_mcp_servers: Sequence[McpServerLike] = (), **fields: Json
) -> SentRequest[OpenedSession[V2Session | V1Session]]:
    """Publish `session/new`; resolves to an [`OpenedSession`][acp_fast.roles.OpenedSession].

    On v2 its session is a [`V2Session`][acp_fast.roles.V2Session]; a state reported before the response is
    kept (the response never resets it to idle). On v1 it is a [`V1Session`][acp_fast.roles.V1Session]
    (`mcpServers` is required in v1: it defaults to `[]`).

    `with_mcp_servers` (v2, MCP-over-ACP): MCP servers this client serves to the agent,
    declared with the ACP transport (see `acp_fast.roles.mcp`).
    """
    if with_mcp_servers:
        return with_mcp(connection, with_mcp_servers, mcp_servers,
                         lambda servers: build_session(connection, cwd, mcp_servers=servers, **fields))
    if not connection.profile.session_states:
        def opened_v1(result: JsonObject) -> OpenedSession[V2Session | V1Session]:
            return OpenedSession(V1Session(result["sessionId"], connection), result)

        params = _setup_params(cwd, [] if mcp_servers is None else mcp_servers, fields)
        return connection.mapped_request(SESSION_NEW, params, opened_v1)

    def opened(result: JsonObject) -> OpenedSession[V2Session | V1Session]:
        session_id = result["sessionId"]
        connection.sessions.get(session_id)  # default idle unless already reported
        return OpenedSession(V2Session(session_id, connection), result)

    return connection.mapped_request(SESSION_NEW, _setup_params(cwd, mcp_servers, fields), opened)


def resume_session(
    connection: SessionPeer,
    session_id: str,
    cwd: str,
    *,
    replay_from: Json = None,
    mcp_servers: Sequence[Mapping[str, Json]] | None = None,
    with_mcp_servers: Sequence[McpServerLike] = (),
    **fields: Json,
) -> SentRequest[OpenedSession[V2Session]]:
    """Publish v2 `session/resume`; resolves to an [`OpenedSession`][acp_fast.roles.OpenedSession].

    Replay updates (and the current-state snapshot) precede the response on the wire; the
    result resolves only after the handlers of the notifications received before it ran.

    Args:
        replay_from: e.g. `{"type": "start"}`; `None` omits `replayFrom`.
        with_mcp_servers: MCP servers to serve over ACP for this session, attached before
            the request is published (see `build_session`).

    Raises:
        TypeError: `connection` does not speak v2.
    """
    require_v2(connection, "resume_session")
    if with_mcp_servers:
        return with_mcp(connection, with_mcp_servers, mcp_servers, lambda servers: resume_session(
            connection, session_id, cwd, replay_from=replay_from, mcp_servers=servers, **fields))
    params = {"sessionId": session_id, **_setup_params(cwd, mcp_servers, fields)}
    if replay_from is not None:
        params["replayFrom"] = replay_from

    def opened(result: JsonObject) -> OpenedSession[V2Session]:
        return OpenedSession(V2Session(session_id, connection), result)

    return connection.mapped_request(SESSION_RESUME, params, opened, settle=True)


def fork_session(
    connection: SessionPeer,
    session_id: str,
    cwd: str,
    *,
    mcp_servers: Sequence[Mapping[str, Json]] | None = None,
    with_mcp_servers: Sequence[McpServerLike] = (),
    **fields: Json,
) -> SentRequest[OpenedSession[V2Session]]:
    """Publish v2 `session/fork` (unstable) of `session_id`; resolves to an
    [`OpenedSession`][acp_fast.roles.OpenedSession] whose handle uses the **new** session id the response allocates,
    with the complete `ForkSessionResponse`. `with_mcp_servers`: as in
    `build_session`.

    Raises:
        TypeError: `connection` does not speak v2.
    """
    require_v2(connection, "fork_session")
    if with_mcp_servers:
        return with_mcp(connection, with_mcp_servers, mcp_servers, lambda servers: fork_session(
            connection, session_id, cwd, mcp_servers=servers, **fields))
    params = {"sessionId": session_id, **_setup_params(cwd, mcp_servers, fields)}

    def opened(result: JsonObject) -> OpenedSession[V2Session]:
        new_id = result["sessionId"]
        connection.sessions.get(new_id)  # default idle unless already reported
        return OpenedSession(V2Session(new_id, connection), result)

    return connection.mapped_request(SESSION_FORK, params, opened)


class V1Session:
    """Command handle of one v1 session: `send_prompt` stays pending for the whole turn.

    Attributes:
        session_id: the id from `session/new`.
        connection: the [`AcpConnection`][acp_fast.roles.AcpConnection].
    """

    __slots__ = ("connection", "session_id")

    def __init__(self, session_id: str, connection: SessionPeer) -> None:
        self.session_id = session_id
        self.connection = connection

    def send_prompt(self, prompt: Sequence[Mapping[str, Json]] | str, **fields: Json) -> Request[Json]:
        """Send `session/prompt`; resolves to `{"stopReason": …}` when the turn ends."""
        blocks = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else list(prompt)
        return self.connection.send_request(
            SESSION_PROMPT, {"sessionId": self.session_id, "prompt": blocks, **fields})

    def cancel_active_work(self, **fields: Json) -> bool:
        """Send `session/cancel`; the pending prompt then ends with `cancelled`.

        As on v2, pending permission requests of this session get the cancelled outcome
        (once) and unfinished tool calls are marked `"cancelled"`.
        """
        sent = self.connection.send_notification(SESSION_CANCEL, {"sessionId": self.session_id, **fields})
        self.connection.sessions.get(self.session_id).cancel_work()
        return sent

    def __repr__(self) -> str:
        return f"V1Session({self.session_id!r})"


def with_mcp(connection: SessionPeer, servers: Sequence[McpServerLike], mcp_servers: Sequence[Mapping[str, Json]] | None,
              publish: Callable[[list[Mapping[str, Json]]], SentRequest[OpenedSession[_S]]]
             ) -> SentRequest[OpenedSession[_S]]:
    """Attach MCP-over-ACP servers, then publish the setup request (`acp_fast.roles.mcp`)."""
    from .mcp import attach_for_setup

    # the MCP state lives on the connection: the session helpers' peer is an AcpConnection here
    return attach_for_setup(cast("McpConnection", connection), servers, mcp_servers, publish)


def _same(value: _T) -> _T:
    return value


def require_v2(connection: SessionPeer, what: str) -> None:
    """Refuse a v2-only session operation `what` on a v1 connection (`TypeError`)."""
    if not connection.profile.session_helpers:
        raise TypeError(f"{what} needs a v2 connection (Client.v2())")
