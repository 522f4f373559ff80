"""The agent side of a v2 session: [`AgentSession`][acp_fast.roles.AgentSession] and its
[`PromptTurn`][acp_fast.roles.PromptTurn] (seed 000 prompt lifecycle: acceptance by
insertion, failures after insertion, cancellation, close). Part of the session helpers
([`acp_fast.roles.sessions`][acp_fast.roles.sessions]).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..errors import INTERNAL_ERROR, INVALID_PARAMS, REQUEST_CANCELLED, JsonRpcError
from ..jsontypes import Json, JsonObject
from .context import Deferred
from .session_state import CANCELLED, IDLE

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol import types_v2
    from ._hot import Context
    from .context import Request

logger = logging.getLogger("acp_fast.roles")

__all__ = ["AgentSession", "PromptTurn"]


class PromptTurn:
    """One v2 `session/prompt` being served by an agent (see [`AgentSession`][acp_fast.roles.AgentSession]).

    The turn's work (`run(turn)`) decides when the prompt is *inserted*: [`insert`][acp_fast.roles.PromptTurn.insert]
    sends the `user_message` update and answers `session/prompt` with `{"messageId"}`.
    Until then the prompt may still be rejected (an exception answers it with an error and
    no user-message update is sent) or cancelled (-32800). After insertion the prompt
    response stays successful whatever happens: a failure, including `auth_required`
    (-32000), ends the work with an `idle` update whose stop reason is `error` and
    carries the JSON-RPC error object.

    Args:
        on_finished: called with the turn once its work ended (its [`AgentSession`][acp_fast.roles.AgentSession]
            is idle again from then on).

    Attributes:
        session_id: the session.
        message_id: the id the inserted user message gets (and the prompt response carries).
        params: the `session/prompt` params.
        cx: the handler context of the prompt request.
        inserted: True once [`insert`][acp_fast.roles.PromptTurn.insert] ran.
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
        """Wait until the work is cancelled (see [`cancelled`][acp_fast.roles.PromptTurn.cancelled])."""
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
        ([`AgentSession.prompt`][acp_fast.roles.AgentSession.prompt] does). When it ends, the turn reports `idle` (or
        answers the prompt with an error if it was never inserted), then calls the
        `on_finished` it was made with."""
        task: asyncio.Task[None] = self.cx.start_task(self._run(work))
        self.task = task
        return task

    def cancel(self) -> None:
        """Cancel the work (`session/cancel`, `session/close`; idempotent).

        The requests it sent to the client and still waits for are cancelled with
        `$/cancel_request`; work not yet inserted stops at once (its task is cancelled),
        inserted work sees [`cancelled`][acp_fast.roles.PromptTurn.cancelled] and ends with `idle` / `cancelled`.
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

    Serves `session/prompt` ([`prompt`][acp_fast.roles.AgentSession.prompt]), `session/cancel` ([`cancel`][acp_fast.roles.AgentSession.cancel]) and
    `session/close` ([`close`][acp_fast.roles.AgentSession.close]) by the seed's rules:

    * prompt acceptance is insertion ([`PromptTurn.insert`][acp_fast.roles.PromptTurn.insert]); a rejection before it is
      an error response with no user-message update; a failure after it (`auth_required`
      included) is the `error` stop reason of the idle update, never an error response;
    * cancelled foreground work ends with `idle` / `cancelled` after its final updates;
      the requests it sent to the client through [`PromptTurn.request`][acp_fast.roles.PromptTurn.request] and still
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
        turn: the active [`PromptTurn`][acp_fast.roles.PromptTurn] (`None` when idle).
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

        `work` runs as a task owned by the connection; it calls [`PromptTurn.insert`][acp_fast.roles.PromptTurn.insert]
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
