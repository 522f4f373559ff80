"""What a client knows of each session, tracked from the agent's updates (v2, seed 000).

[`SessionState`][acp_fast.roles.SessionState] follows one session's foreground state
(`idle` / `running` / `requires_action`), its last [`StopReason`][acp_fast.roles.StopReason],
its idle epoch and its tool calls, from every *known* `state_update`, `tool_call` and
`tool_call_update` the connection reads, before the application's handler sees it; it also
holds the session's in-flight permission requests, answered `cancelled` when the work is
cancelled. [`SessionStates`][acp_fast.roles.SessionStates] is a connection's table of them.
Part of the session helpers ([`acp_fast.roles.sessions`][acp_fast.roles.sessions]).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..jsontypes import Json, JsonObject

if TYPE_CHECKING:  # pragma: no cover
    from ..jsonrpc import RequestContext

__all__ = ["IDLE", "REQUIRES_ACTION", "RUNNING", "SessionState", "SessionStates", "StopReason"]

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
        """Apply a known update that changes the tracked state (see [`SessionState.apply`][acp_fast.roles.SessionState.apply])."""
        if type(session_id) is str:
            self.get(session_id).apply(update)

    def track_request(self, request: RequestContext) -> None:
        """Track an incoming request with its session (a client's
        `session/request_permission`, see `tracked_requests`), so that `cancel_active_work`
        can answer it with the cancelled outcome (seed 000)."""
        params = request.message.params
        session_id = params.get("sessionId") if type(params) is dict else None
        if type(session_id) is str:
            self.get(session_id).track_permission(request)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._states

    def close(self, error: BaseException) -> None:
        """The connection ended: fail every `wait_idle` (see [`SessionState.close`][acp_fast.roles.SessionState.close])."""
        self._closed = error
        for state in self._states.values():
            state.close(error)
