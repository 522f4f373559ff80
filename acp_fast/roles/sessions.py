"""Session helpers (part of the builder API, [`acp_fast.roles`][acp_fast.roles]).

Mirrors the v2 session API of the Rust SDK guide (seed 000) in Python form. Client side
first; the agent side ([`AgentSession`][acp_fast.roles.sessions.AgentSession], [`PromptTurn`][acp_fast.roles.sessions.PromptTurn]: prompt acceptance,
failures after insertion, cancellation and close) and [`SessionSetup`][acp_fast.roles.sessions.SessionSetup] (setup requests
from a complete request, `start_session` / `on_proxy_session_start`) are at the end.

* `build_session` / `resume_session` publish `session/new` /
  `session/resume` and resolve to an [`OpenedSession`][acp_fast.roles.sessions.OpenedSession]: the command handle
  ([`V2Session`][acp_fast.roles.sessions.V2Session], just a session id + connection) *and* the complete setup response,
  never a reconstructed subset.
* [`V2Session.send_prompt`][acp_fast.roles.sessions.V2Session.send_prompt] returns the `session/prompt` request handle; its result is
  the insertion receipt (`{"messageId": …}`), not the end of the turn. Completion arrives
  as an `idle` `state_update` ([`V2Session.wait_idle`][acp_fast.roles.sessions.V2Session.wait_idle]).
* [`V2Session.cancel_active_work`][acp_fast.roles.sessions.V2Session.cancel_active_work] sends the session-wide `session/cancel`.
* Foreground state is tracked per session ([`SessionState`][acp_fast.roles.sessions.SessionState]) from every *known*
  `state_update` the connection reads, before the application's handler sees it. The
  handle owns nothing and buffers nothing; dropping it has no effect on the wire.
* v1: the same `build_session` resolves to an [`OpenedSession`][acp_fast.roles.sessions.OpenedSession] whose session is
  a [`V1Session`][acp_fast.roles.sessions.V1Session]: its [`V1Session.send_prompt`][acp_fast.roles.sessions.V1Session.send_prompt] stays pending for the whole turn
  and ends with `stopReason` (v1 has no idle update).

Install update handlers on the builder *before* connecting: resume replay precedes the
resume response on the wire, so handlers observe it in order, and `resume_session`
only resolves after the notifications received before its response were handled.

Example (inside `Client.v2().connect_with(stream, main)`):

```python
async def main(cx):
    await cx.initialize()
    opened = await cx.build_session(cwd="/work")
    session = opened.session
    epoch = session.idle_epoch
    receipt = await session.send_prompt([{"type": "text", "text": "hi"}])
    stop = await session.wait_idle(after=epoch)
    assert stop.kind == "end_turn" and "messageId" in receipt
```
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, Union, cast

from ..errors import INTERNAL_ERROR, INVALID_PARAMS, REQUEST_CANCELLED, JsonRpcError

from ..jsontypes import Json, JsonObject
from ..protocol.facts import SESSION_CANCEL, SESSION_FORK, SESSION_NEW, SESSION_PROMPT, SESSION_RESUME
from .context import Deferred
from .mcp import McpConnection

if TYPE_CHECKING:  # pragma: no cover
    from ..jsonrpc import RequestContext
    from ..protocol import types_v2
    from ._hot import Context, ProxyContext
    from .context import Request, SentRequest
    from .mcp import McpServerLike

_T = TypeVar("_T")
#: the session handle type of an :class:`OpenedSession`
_S = TypeVar("_S", bound=Union["V2Session", "V1Session"])

logger = logging.getLogger("acp_fast.roles")

__all__ = [
    "IDLE",
    "REQUIRES_ACTION",
    "RUNNING",
    "AgentSession",
    "OpenedSession",
    "PromptTurn",
    "SessionPeer",
    "SessionSetup",
    "SessionState",
    "SessionStates",
    "StopReason",
    "V1Session",
    "V2Session",
    "apply_meta_update",
    "apply_upsert",
    "build_session",
    "fork_session",
    "resume_session",
]

IDLE = "idle"
RUNNING = "running"
REQUIRES_ACTION = "requires_action"


class StopReason:
    """The stop reason of an `idle` state update (v2, flattened tagged object).

    Attributes:
        kind: `"end_turn"`, `"max_tokens"`, `"max_turn_requests"`, `"refusal"`,
            `"cancelled"`, `"error"` or any other string (custom ones start with `_`).
        error: the JSON-RPC error object of an `error` stop reason, if reported.
        payload: the whole update it came from (unknown fields preserved).

    Equality compares what the stop reason *says*: `kind` and `error` (and a string
    compares with `kind`). `payload` is not compared, since it is the whole update (session
    id, state, the agent's own fields); read the fields you care about from `payload`.
    """

    __slots__ = ("error", "kind", "payload")

    def __init__(self, kind: str, error: JsonObject | None, payload: JsonObject) -> None:
        self.kind = kind
        self.error = error
        self.payload = payload

    @classmethod
    def from_update(cls, update: JsonObject) -> StopReason | None:
        """The stop reason of an idle update; `None` when omitted, null or malformed."""
        kind = update.get("stopReason")
        if type(kind) is not str:
            return None
        error = update.get("error") if kind == "error" else None
        return cls(kind, error if type(error) is dict else None, update)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.kind == other
        return isinstance(other, StopReason) and (self.kind, self.error) == (other.kind, other.error)

    def __hash__(self) -> int:
        return hash(self.kind)

    def __repr__(self) -> str:
        return f"StopReason({self.kind!r}" + (f", error={self.error!r})" if self.error else ")")


#: ``tool_call`` statuses after which a tool call is finished (its status stays as reported).
FINISHED_TOOL_CALL = frozenset({"completed", "failed"})
#: The client-side status of a tool call that was unfinished when its work was cancelled.
CANCELLED = "cancelled"
#: The outcome a pending permission request gets when its session's work is cancelled.
PERMISSION_CANCELLED = {"outcome": {"outcome": "cancelled"}}


class SessionState:
    """What the client knows of one session, from the agent's known updates.

    Attributes:
        state: `"idle"` (the default for a new session), `"running"`,
            `"requires_action"` or another (future) string (v2 `state_update`).
        stop_reason: the stop reason of the last idle update that carried one.
        idle_epoch: how many times the session went from non-idle to idle (a repeated
            idle snapshot is not a new completion).
        tool_calls: `toolCallId -> status` from `tool_call` / `tool_call_update`
            (`"pending"` until a status is reported; `"cancelled"` once the client
            cancelled the work while it was unfinished).
    """

    __slots__ = ("_closed", "_permissions", "_waiters", "idle_epoch", "state", "stop_reason", "tool_calls")

    def __init__(self) -> None:
        self.state = IDLE
        self.stop_reason: StopReason | None = None
        self.idle_epoch = 0
        self.tool_calls: dict[str, str] = {}
        self._waiters: list[tuple[int, asyncio.Future[StopReason | None]]] = []
        self._permissions: list[RequestContext] = []  # in-flight session/request_permission contexts
        self._closed: BaseException | None = None

    def apply(self, update: JsonObject) -> None:
        """Apply one known `state_update`, `tool_call` or `tool_call_update` payload."""
        kind = update.get("sessionUpdate")
        if kind == "tool_call" or kind == "tool_call_update":
            call_id = update.get("toolCallId")
            if type(call_id) is str:
                status = update.get("status")
                if type(status) is str:
                    if self.tool_calls.get(call_id) != CANCELLED:  # a cancelled call stays cancelled
                        self.tool_calls[call_id] = status
                else:
                    self.tool_calls.setdefault(call_id, "pending")
            return
        state = update.get("state")
        if type(state) is not str:
            return
        previous, self.state = self.state, state
        if state != IDLE:
            return
        reason = StopReason.from_update(update)
        if previous != IDLE:
            self.idle_epoch += 1
            self.stop_reason = reason
            self._wake()
        elif reason is not None and self.stop_reason is None:
            self.stop_reason = reason  # a snapshot may carry the last reason for context

    def _wake(self) -> None:
        keep = []
        for after, fut in self._waiters:
            if fut.done():
                continue
            if self.idle_epoch > after:
                fut.set_result(self.stop_reason)
            else:
                keep.append((after, fut))
        self._waiters = keep

    async def wait_idle(self, after: int | None = None) -> StopReason | None:
        """Wait until the session becomes idle after epoch `after`; return its stop reason.

        Args:
            after: an earlier `idle_epoch` (take it *before* starting the work);
                `None`: the current epoch, i.e. wait for the next transition to idle.

        Raises:
            JsonRpcError: -32603 when the connection closed before the session went idle
                (e.g. the agent died mid-turn).
        """
        if after is None:
            after = self.idle_epoch
        if self.idle_epoch > after:
            return self.stop_reason
        if self._closed is not None:
            raise self._closed
        fut: asyncio.Future[StopReason | None] = asyncio.get_running_loop().create_future()
        self._waiters.append((after, fut))
        return await fut

    def track_permission(self, request: RequestContext) -> None:
        """Remember an in-flight `session/request_permission` (a jsonrpc `RequestContext`)."""
        self._permissions = [r for r in self._permissions if not r.answered]
        self._permissions.append(request)

    def cancel_work(self) -> int:
        """The client cancelled this session's active work (seed 000): answer every pending
        permission request with the cancelled outcome, exactly once (a handler's later answer
        is dropped), and mark unfinished tool calls `"cancelled"`. Returns how many
        permission requests it answered."""
        answered = 0
        pending, self._permissions = self._permissions, []
        for request in pending:
            if not request.answered:
                request.defer().respond(dict(PERMISSION_CANCELLED))
                answered += 1
        for call_id, status in self.tool_calls.items():
            if status not in FINISHED_TOOL_CALL:
                self.tool_calls[call_id] = CANCELLED
        return answered

    def close(self, error: BaseException) -> None:
        """The connection ended: every waiter (now and later) fails with `error`."""
        self._closed = error
        waiters, self._waiters = self._waiters, []
        for _after, fut in waiters:
            if not fut.done():
                fut.set_exception(error)

    def __repr__(self) -> str:
        return f"SessionState({self.state!r}, stop_reason={self.stop_reason!r}, idle_epoch={self.idle_epoch})"


class SessionStates:
    """Per-connection table `session id -> SessionState` (filled by the read path)."""

    __slots__ = ("_closed", "_states")

    def __init__(self) -> None:
        self._states: dict[str, SessionState] = {}
        self._closed: BaseException | None = None

    def get(self, session_id: str) -> SessionState:
        """The state of `session_id` (created idle on first use, never overwritten)."""
        state = self._states.get(session_id)
        if state is None:
            state = self._states[session_id] = SessionState()
            if self._closed is not None:
                state.close(self._closed)
        return state

    def apply(self, session_id: Json, update: JsonObject) -> None:
        """Apply a known update that changes the tracked state (see [`SessionState.apply`][acp_fast.roles.sessions.SessionState.apply])."""
        if type(session_id) is str:
            self.get(session_id).apply(update)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._states

    def close(self, error: BaseException) -> None:
        """The connection ended: fail every `wait_idle` (see [`SessionState.close`][acp_fast.roles.sessions.SessionState.close])."""
        self._closed = error
        for state in self._states.values():
            state.close(error)


class SessionPeer(Protocol):
    """What the session helpers need of a client connection (an `AcpConnection` is one)."""

    @property
    def version(self) -> int:
        """The ACP version of the implementation (1 or 2)."""

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



class SetupPeer(SessionPeer, McpConnection, Protocol):
    """What a [`SessionSetup`][acp_fast.roles.sessions.SessionSetup] needs of its connection (an `AcpConnection` is one): the
    session helpers' peer with its MCP-over-ACP state."""

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
        [`wait_idle`][acp_fast.roles.sessions.V2Session.wait_idle]'s `after`)."""
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
        """See [`SessionState.wait_idle`][acp_fast.roles.sessions.SessionState.wait_idle]."""
        return await self.state.wait_idle(after)

    def cancel_active_work(self, **fields: Json) -> bool:
        """Send the session-wide `session/cancel` notification, and do the client's part.

        Every pending `session/request_permission` of this session (and no other) is
        answered with the cancelled outcome, once; unfinished tool calls are marked
        `"cancelled"` in [`state`][acp_fast.roles.sessions.V2Session.state]. Completion of cancelled foreground work is an idle
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
        the handlers of those updates ran, so [`state`][acp_fast.roles.sessions.V2Session.state] is final by then. A prompt the
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
        session: the session handle: a [`V2Session`][acp_fast.roles.sessions.V2Session], or a [`V1Session`][acp_fast.roles.sessions.V1Session] on a v1
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
    """Publish `session/new`; resolves to an [`OpenedSession`][acp_fast.roles.sessions.OpenedSession].

    On v2 its session is a [`V2Session`][acp_fast.roles.sessions.V2Session]; a state reported before the response is
    kept (the response never resets it to idle). On v1 it is a [`V1Session`][acp_fast.roles.sessions.V1Session]
    (`mcpServers` is required in v1: it defaults to `[]`).

    `with_mcp_servers` (v2, MCP-over-ACP): MCP servers this client serves to the agent,
    declared with the ACP transport (see `acp_fast.roles.mcp`).
    """
    if with_mcp_servers:
        return _with_mcp(connection, with_mcp_servers, mcp_servers,
                         lambda servers: build_session(connection, cwd, mcp_servers=servers, **fields))
    if connection.version == 1:
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
    """Publish v2 `session/resume`; resolves to an [`OpenedSession`][acp_fast.roles.sessions.OpenedSession].

    Replay updates (and the current-state snapshot) precede the response on the wire; the
    result resolves only after the handlers of the notifications received before it ran.

    Args:
        replay_from: e.g. `{"type": "start"}`; `None` omits `replayFrom`.
        with_mcp_servers: MCP servers to serve over ACP for this session, attached before
            the request is published (see `build_session`).

    Raises:
        TypeError: `connection` does not speak v2.
    """
    _require_v2(connection, "resume_session")
    if with_mcp_servers:
        return _with_mcp(connection, with_mcp_servers, mcp_servers, lambda servers: resume_session(
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
    [`OpenedSession`][acp_fast.roles.sessions.OpenedSession] whose handle uses the **new** session id the response allocates,
    with the complete `ForkSessionResponse`. `with_mcp_servers`: as in
    `build_session`.

    Raises:
        TypeError: `connection` does not speak v2.
    """
    _require_v2(connection, "fork_session")
    if with_mcp_servers:
        return _with_mcp(connection, with_mcp_servers, mcp_servers, lambda servers: fork_session(
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


def _with_mcp(connection: SessionPeer, servers: Sequence[McpServerLike], mcp_servers: Sequence[Mapping[str, Json]] | None,
              publish: Callable[[list[Mapping[str, Json]]], SentRequest[OpenedSession[_S]]]
              ) -> SentRequest[OpenedSession[_S]]:
    """Attach MCP-over-ACP servers, then publish the setup request (`acp_fast.roles.mcp`)."""
    from .mcp import attach_for_setup

    # the MCP state lives on the connection: the session helpers' peer is an AcpConnection here
    return attach_for_setup(cast("McpConnection", connection), servers, mcp_servers, publish)


def _same(value: _T) -> _T:
    return value


def _require_v2(connection: SessionPeer, what: str) -> None:
    if connection.version < 2:
        raise TypeError(f"{what} needs a v2 connection (Client.v2())")


# ---------------------------------------------------------------------------------------
# Agent side: prompt acceptance, failures after insertion, close (seed 000)
# ---------------------------------------------------------------------------------------


class PromptTurn:
    """One v2 `session/prompt` being served by an agent (see [`AgentSession`][acp_fast.roles.sessions.AgentSession]).

    The turn's work (`run(turn)`) decides when the prompt is *inserted*: [`insert`][acp_fast.roles.sessions.PromptTurn.insert]
    sends the `user_message` update and answers `session/prompt` with `{"messageId"}`.
    Until then the prompt may still be rejected (an exception answers it with an error and
    no user-message update is sent) or cancelled (-32800). After insertion the prompt
    response stays successful whatever happens: a failure, including `auth_required`
    (-32000), ends the work with an `idle` update whose stop reason is `error` and
    carries the JSON-RPC error object.

    Args:
        on_finished: called with the turn once its work ended (its [`AgentSession`][acp_fast.roles.sessions.AgentSession]
            is idle again from then on).

    Attributes:
        session_id: the session.
        message_id: the id the inserted user message gets (and the prompt response carries).
        params: the `session/prompt` params.
        cx: the handler context of the prompt request.
        inserted: True once [`insert`][acp_fast.roles.sessions.PromptTurn.insert] ran.
    """

    def __init__(self, session: AgentSession, cx: Context, params: types_v2.PromptRequest, message_id: str, *,
                 on_finished: Callable[[PromptTurn], None] | None = None) -> None:
        self.session = session
        self.session_id = session.session_id
        self.cx = cx
        self.params = params
        self.message_id = message_id
        self.inserted = False
        self.state = IDLE  # the foreground state this turn reported last
        self._responder = cx.defer()
        self._cancelled = asyncio.Event()
        self._requests: list[Request[Json]] = []  # requests this work sent to the client, not yet answered
        self._on_finished = on_finished
        self.task: asyncio.Task[None] | None = None

    @property
    def cancelled(self) -> bool:
        """True once the work was cancelled (`session/cancel`, `session/close`, or
        `$/cancel_request` of the prompt before insertion)."""
        return self._cancelled.is_set()

    async def wait_cancelled(self) -> None:
        """Wait until the work is cancelled (see [`cancelled`][acp_fast.roles.sessions.PromptTurn.cancelled])."""
        await self._cancelled.wait()

    def send(self, update: types_v2.SessionUpdate | JsonObject) -> bool:
        """Send one `session/update` of this session (through the write guard)."""
        return self.cx.send_session_update(self.session_id, dict(update))

    def request(self, method: str, params: Json = None) -> Request[Json]:
        """Send a request to the client for this work (`session/request_permission`,
        `elicitation/create` …). When the work is cancelled (`session/cancel` or
        `session/close`), every such request still unanswered is cancelled with
        `$/cancel_request` at once, before the work's idle update (seed 004: the agent
        stops waiting and cancels them; on close, before the close response). Its handle
        then resolves with the client's answer (usually -32800)."""
        pending = self.cx.send_request(method, params)
        self._requests = [r for r in self._requests if not r.done()]
        self._requests.append(pending)
        if self.cancelled:
            pending.cancel()
        return pending

    def set_state(self, state: str) -> None:
        """Report `running` / `requires_action` (once per change); may precede insertion."""
        if state != self.state:
            self.state = state
            self.cx.send_session_update(self.session_id, {"sessionUpdate": "state_update", "state": state})

    def insert(self, content: list[types_v2.ContentBlock] | None = None, **fields: Json) -> types_v2.PromptResponse:
        """Insert the user message: answer the prompt with its id, then send `user_message`.

        Args:
            content: the message content (default: the prompt's content blocks).
            **fields: further `user_message` fields.

        Returns:
            The prompt response sent (`{"messageId": …}`).

        Raises:
            JsonRpcError: -32800 when the prompt was cancelled before insertion.
        """
        if self.inserted:
            raise RuntimeError("the prompt is already inserted")
        if self.cancelled:
            raise JsonRpcError(REQUEST_CANCELLED)
        self.inserted = True
        receipt: types_v2.PromptResponse = {"messageId": self.message_id}
        self._responder.respond(receipt)
        update: JsonObject = {"sessionUpdate": "user_message", "messageId": self.message_id,
                              "content": self.params.get("prompt", []) if content is None else content, **fields}
        self.cx.send_session_update(self.session_id, update)
        return receipt

    def start(self, work: Callable[[PromptTurn], Awaitable[str | None]]) -> asyncio.Task[None]:
        """Run `work(turn)` as this turn's `task`, owned by the connection
        ([`AgentSession.prompt`][acp_fast.roles.sessions.AgentSession.prompt] does). When it ends, the turn reports `idle` (or
        answers the prompt with an error if it was never inserted), then calls the
        `on_finished` it was made with."""
        task: asyncio.Task[None] = self.cx.start_task(self._run(work))
        self.task = task
        return task

    def cancel(self) -> None:
        """Cancel the work (`session/cancel`, `session/close`; idempotent).

        The requests it sent to the client and still waits for are cancelled with
        `$/cancel_request`; work not yet inserted stops at once (its task is cancelled),
        inserted work sees [`cancelled`][acp_fast.roles.sessions.PromptTurn.cancelled] and ends with `idle` / `cancelled`.
        """
        if self.cancelled:
            return
        self._cancelled.set()
        requests, self._requests = self._requests, []
        for pending in requests:
            if not pending.done():
                pending.cancel()  # $/cancel_request: the work no longer waits for it
        task = self.task
        if not self.inserted and task is not None and not task.done():
            task.cancel()  # nothing was inserted: the work stops at once

    def _idle(self, reason: str, error: JsonObject | None = None) -> None:
        update: JsonObject = {"sessionUpdate": "state_update", "state": IDLE, "stopReason": reason}
        if error is not None:
            update["error"] = error
        self.state = IDLE
        self.cx.send_session_update(self.session_id, update)

    async def _run(self, work: Callable[[PromptTurn], Awaitable[str | None]]) -> None:
        watcher = asyncio.ensure_future(self._watch_request_cancel())
        error: JsonRpcError | None = None
        try:
            try:
                reason = await work(self)
            except asyncio.CancelledError:
                if self.inserted or not self.cancelled:  # the connection is closing
                    if not self.inserted:
                        self._responder.respond_error(JsonRpcError(REQUEST_CANCELLED))
                    raise
                reason = CANCELLED
            except JsonRpcError as exc:
                reason, error = "error", exc
            except Exception as exc:
                logger.exception("prompt work of session %r failed", self.session_id)
                reason, error = "error", JsonRpcError(INTERNAL_ERROR, data=str(exc) or type(exc).__name__)
            else:
                if self.cancelled:
                    reason = CANCELLED
                elif reason is None:
                    reason = "end_turn"
            if not self.inserted:
                # rejected or cancelled before insertion: an error response, no user message;
                # an idle update only if this turn had reported foreground work
                if error is None and reason == CANCELLED:
                    error = JsonRpcError(REQUEST_CANCELLED)
                elif error is None:
                    reason, error = "error", JsonRpcError(
                        INTERNAL_ERROR, data="prompt work ended without inserting the prompt")
                self._responder.respond_error(error)
                if self.state != IDLE:
                    self._idle(reason, error.to_dict() if reason == "error" else None)
            elif reason == "error" and error is not None:
                self._idle("error", error.to_dict())
            else:
                self._idle(reason)
        finally:
            watcher.cancel()
            if self._on_finished is not None:
                self._on_finished(self)

    async def _watch_request_cancel(self) -> None:
        request = self.cx.request
        if request is None:  # pragma: no cover - prompts are requests
            return
        await request.wait_cancelled()
        if not self.inserted:  # after insertion the request is answered; nothing to cancel
            self.cancel()


class AgentSession:
    """Agent side of one v2 session's foreground work (seed 000 prompt lifecycle).

    Serves `session/prompt` ([`prompt`][acp_fast.roles.sessions.AgentSession.prompt]), `session/cancel` ([`cancel`][acp_fast.roles.sessions.AgentSession.cancel]) and
    `session/close` ([`close`][acp_fast.roles.sessions.AgentSession.close]) by the seed's rules:

    * prompt acceptance is insertion ([`PromptTurn.insert`][acp_fast.roles.sessions.PromptTurn.insert]); a rejection before it is
      an error response with no user-message update; a failure after it (`auth_required`
      included) is the `error` stop reason of the idle update, never an error response;
    * cancelled foreground work ends with `idle` / `cancelled` after its final updates;
      the requests it sent to the client through [`PromptTurn.request`][acp_fast.roles.sessions.PromptTurn.request] and still
      waits for are cancelled with `$/cancel_request` (seed 004); cancelling an idle
      session sends nothing;
    * closing a session with active work cancels it, and the close response follows the
      final updates and the idle `cancelled` update; a prompt the close cancelled before
      insertion is answered -32800, an inserted one already has its message id.

    Example (an agent's handlers):

    ```python
    sessions: dict[str, AgentSession] = {}

    @agent.on_request("session/prompt")
    def prompt(params, cx):
        async def work(turn):
            turn.set_state("running")
            turn.insert()
            turn.send({"sessionUpdate": "agent_message_chunk", "messageId": "a1",
                       "content": {"type": "text", "text": "hi"}})
            return "end_turn"
        return sessions[params["sessionId"]].prompt(cx, params, work)
    ```

    Attributes:
        session_id: the session id.
        turn: the active [`PromptTurn`][acp_fast.roles.sessions.PromptTurn] (`None` when idle).
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.turn: PromptTurn | None = None
        self.closed = False
        self._count = 0

    def prompt(self, cx: Context, params: types_v2.PromptRequest,
               work: Callable[[PromptTurn], Awaitable[str | None]], *, message_id: str | None = None
               ) -> Deferred[types_v2.PromptResponse]:
        """Serve `session/prompt` with `work(turn)`; return its result from the handler
        (a [`Deferred`][acp_fast.roles.context.Deferred]: the turn answers the request itself).

        `work` runs as a task owned by the connection; it calls [`PromptTurn.insert`][acp_fast.roles.sessions.PromptTurn.insert]
        once it inserted the prompt and returns the stop reason (`None`: `end_turn`).

        Args:
            message_id: the inserted user message's id (default `<session id>-user-<n>`).

        Raises:
            JsonRpcError: -32602 when the session is closed or already has foreground work.
        """
        if self.closed:
            raise JsonRpcError(INVALID_PARAMS, data=f"unknown session `{self.session_id}`")
        if self.turn is not None:
            raise JsonRpcError(INVALID_PARAMS, data=f"session `{self.session_id}` already has foreground work")
        if message_id is None:
            self._count += 1
            message_id = f"{self.session_id}-user-{self._count}"
        turn = self.turn = PromptTurn(self, cx, params, message_id, on_finished=self._finished)
        turn.start(work)
        return Deferred()

    def cancel(self) -> None:
        """`session/cancel`: cancel the active foreground work (nothing when idle)."""
        if self.turn is not None:
            self.turn.cancel()

    def close(self) -> types_v2.CloseSessionResponse | Awaitable[types_v2.CloseSessionResponse]:
        """`session/close`: the close response, after the cancelled work's final updates."""
        self.closed = True
        turn = self.turn
        if turn is None or turn.task is None:
            return {}
        turn.cancel()
        task = turn.task

        async def after_work() -> types_v2.CloseSessionResponse:
            await asyncio.wait((task,))
            return {}

        return after_work()

    def _finished(self, turn: PromptTurn) -> None:
        if self.turn is turn:
            self.turn = None


# ---------------------------------------------------------------------------------------
# Setup requests built from a complete request (``*_from``), for clients and proxies
# ---------------------------------------------------------------------------------------

#: setup method -> operation name
SETUP_OPERATIONS = {SESSION_NEW: "new", SESSION_RESUME: "resume", SESSION_FORK: "fork"}


class SessionSetup:
    """A v2 setup request not yet published, built from a complete request (Rust
    `V2SessionBuilder` / `V2ResumeSessionBuilder` / `V2ForkSessionBuilder`).

    Made by `build_session_from` / `resume_session_from` / `fork_session_from` of a
    connection. A client publishes it with [`start_session`][acp_fast.roles.sessions.SessionSetup.start_session]; a v2 proxy forwards it
    downstream with [`on_proxy_session_start`][acp_fast.roles.sessions.SessionSetup.on_proxy_session_start]. `params` is the request, unchanged
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
        """Publish the request; resolves to an [`OpenedSession`][acp_fast.roles.sessions.OpenedSession] (the complete
        response, never reconstructed; fork's handle uses the new session id; resume
        resolves after the handlers of its replay ran)."""
        connection = self.connection
        if self.operation != "new":
            _require_v2(connection, f"{self.operation}_session_from")
        params = self.params
        if self._mcp:
            servers, self._mcp = self._mcp, []

            def publish(declared: list[Mapping[str, Json]]) -> SentRequest[OpenedSession[V2Session | V1Session]]:
                self.params = {**params, "mcpServers": declared}
                try:
                    return self.start_session()
                finally:
                    self.params = params

            return _with_mcp(connection, servers, params.get("mcpServers"), publish)
        if self.operation == "resume":
            sid = params.get("sessionId")
            if type(sid) is not str:
                raise ValueError("session/resume needs a string sessionId")

            def resumed(result: JsonObject) -> OpenedSession[V2Session | V1Session]:
                return OpenedSession(V2Session(sid, connection), result)

            return connection.mapped_request(self.method, params, resumed, settle=True)

        def opened(result: JsonObject) -> OpenedSession[V2Session | V1Session]:
            new_id = result["sessionId"]
            if connection.version == 1:
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
        ordering barrier, with an [`OpenedSession`][acp_fast.roles.sessions.OpenedSession] whose handle sends to the
        successor. A failed or cancelled setup drops the pending route.

        Raises:
            TypeError: the connection is not a proxy's.
        """
        start = getattr(self.connection, "start_proxy_session", None)
        if start is None:
            raise TypeError("on_proxy_session_start needs a proxy connection (Proxy.v2())")
        start(self, cx, callback)


# ---------------------------------------------------------------------------------------
# v2 upsert patches (seed 000, schema 1.12)
# ---------------------------------------------------------------------------------------


def apply_meta_update(current: JsonObject | None, patch: Json) -> JsonObject | None:
    """The stored `_meta` after a v2 upsert's top-level `_meta` patch (seed 000).

    An omitted `_meta` leaves it unchanged (do not call); `None` (`null`) clears it; an object keeps the keys it omits, removes the
    keys whose value is `None` and replaces every other value whole (nested objects are
    not merged, nested nulls are data). An empty object changes nothing.

    Example:
        >>> apply_meta_update({"a": 1, "b": {"x": 1}}, {"a": None, "b": {"y": None}, "c": 3})
        {'b': {'y': None}, 'c': 3}
        >>> apply_meta_update({"a": 1}, None) is None
        True
    """
    if patch is None:
        return None
    if type(patch) is not dict:
        return current  # a malformed patch is not applied
    out = dict(current or {})
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out if out or current is not None else None


def apply_upsert(stored: Mapping[str, Json] | None, update: Mapping[str, Json]) -> JsonObject:
    """The entity after one v2 upsert update (`tool_call_update`, `agent_message` …):
    an omitted field is unchanged, `null` clears it, a value replaces it whole (arrays
    too); `_meta` follows [`apply_meta_update`][acp_fast.roles.sessions.apply_meta_update]; `sessionUpdate` is not stored.

    Example:
        >>> apply_upsert({"toolCallId": "t", "name": "read", "status": "pending"},
        ...              {"sessionUpdate": "tool_call_update", "toolCallId": "t", "name": None,
        ...               "status": "completed"})
        {'toolCallId': 't', 'status': 'completed'}
    """
    out = dict(stored or {})
    for key, value in update.items():
        if key == "sessionUpdate":
            continue
        if key == "_meta":
            meta = apply_meta_update(out.get("_meta"), value)
            if meta is None:
                out.pop("_meta", None)
            else:
                out["_meta"] = meta
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out
