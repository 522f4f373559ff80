"""Testy v2 (protocol.md §9.2, seed 000): prompt receipts, `state_update` framing, replay."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..errors import AUTH_REQUIRED, INVALID_PARAMS, JsonRpcError
from ..jsontypes import Json, JsonObject
from ..protocol.facts import SESSION_REQUEST_PERMISSION
from ..roles.sessions import AgentSession, PromptTurn
from .commands import HELP, parse_command, prompt_text
from .common import (
    AGENT_NAME,
    AUTH_METHOD,
    GREETING,
    TestyBase,
    session_id,
    text_block,
    unknown_session,
)
from .streaming import stream

if TYPE_CHECKING:
    from ..jsonrpc import RequestResult
    from ..roles import V2, AgentBuilder

__all__ = ["TestyV2"]

logger = logging.getLogger("acp_fast.testy")

MCP_V2 = "Testy v2 does not advertise MCP support yet"


class _Session2(AgentSession):
    """A Testy v2 session: the builder API's [`AgentSession`][acp_fast.testy.v2.AgentSession] (prompt acceptance,
    cancellation and close by seed 000's rules) plus Testy's cwd, history and cancel flag."""

    def __init__(self, sid: str, cwd: str) -> None:
        super().__init__(sid)
        self.cwd = cwd
        self.pending_cancel = False
        self.history: list[dict[str, Any]] = []


#: agent messages longer than this are kept in the replay history as a summary only
HISTORY_LIMIT = 1 << 20


class TestyV2(TestyBase):
    """State and handlers of the v2 Testy (one instance per connection)."""

    version = 2

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sessions: dict[str, _Session2] = {}
        self.next_prompt = 0

    def builder(self) -> AgentBuilder[V2]:
        """A v2 `Agent` builder with this variant's handlers (`register`)."""
        from .. import Agent

        return self.register(Agent.v2())

    def initialize_connection(self, params: Json, cx: Any) -> JsonObject:
        """`initialize`: version 2, Testy's info and capabilities (session fork, auth
        status), and its auth method with `--require-auth`."""
        result: dict[str, Any] = {"protocolVersion": 2, "info": {"name": AGENT_NAME, "version": __version__},
                                  "capabilities": {"session": {"fork": {}}, "auth": {"status": {}}}}
        if self.require_auth:
            result["authMethods"] = [{"type": "agent", "methodId": AUTH_METHOD, "name": "Testy sign-in"}]
        return result

    def login(self, params: Json, cx: Any) -> JsonObject:
        """`auth/login` (`--require-auth`): the one agent method signs in."""
        method = params.get("methodId") if isinstance(params, dict) else None
        if method != AUTH_METHOD:
            raise JsonRpcError(INVALID_PARAMS, data=f"unknown authentication method `{method}`")
        self.authenticated = True
        return {}

    def logout_v2(self, params: Json, cx: Any) -> JsonObject:
        """`auth/logout`: signs out (`auth/status` then says `unauthenticated`)."""
        self.authenticated = False
        return {}

    def _get(self, params: Json) -> tuple[str, _Session2]:
        sid = session_id(params)
        session = self.sessions.get(sid)
        if session is None or session.closed:
            raise unknown_session(sid)
        return sid, session

    def new_session(self, params: Json, cx: Any) -> JsonObject:
        """`session/new`: a new session in `cwd`.

        Raises:
            JsonRpcError: -32602 for a malformed `cwd`, `mcpServers` or
                `additionalDirectories`.
        """
        _check_acted_on(params)
        cwd = self._new_cwd(params)
        sid = f"testy-v2-session-{self.next_session}"
        self.sessions[sid] = _Session2(sid, cwd)
        return {"sessionId": sid}

    def resume_session(self, params: Json, cx: Any) -> JsonObject:
        """`session/resume`: with `replayFrom: {"type": "start"}` the session's history is
        replayed first; then an idle `state_update` snapshot, before the response.

        Raises:
            JsonRpcError: -32602 for a malformed `mcpServers` or `additionalDirectories`,
                an unknown session, one with active work, another `cwd` than the
                session's, or an unsupported replay cursor.
        """
        _check_acted_on(params)
        sid, session = self._get(params)
        if session.turn is not None:
            raise JsonRpcError(INVALID_PARAMS, data=f"session `{sid}` has active foreground work")
        cwd = params.get("cwd")
        if cwd != session.cwd:
            raise JsonRpcError(INVALID_PARAMS, data=f"session `{sid}` belongs to cwd `{session.cwd}`")
        replay = params.get("replayFrom")
        if replay is not None and not (isinstance(replay, dict) and replay.get("type") == "start"):
            raise JsonRpcError(INVALID_PARAMS, data="unsupported session replay cursor")
        if replay is not None:
            for update in session.history:
                cx.send_session_update(sid, update)
        # the current-state snapshot, after any replay and before the response (seed 000)
        cx.send_session_update(sid, {"sessionUpdate": "state_update", "state": "idle"})
        return {}

    def fork_session(self, params: Json, cx: Any) -> JsonObject:
        """`session/fork` (unstable): a new session with a copy of the source's history
        (replayable with `session/resume`), in the requested cwd."""
        _check_acted_on(params)
        _sid, source = self._get(params)
        cwd = self._new_cwd(params)
        sid = f"testy-v2-session-{self.next_session}"
        fork = self.sessions[sid] = _Session2(sid, cwd)
        fork.history = list(source.history)
        return {"sessionId": sid}

    def close_session(self, params: Json, cx: Any) -> RequestResult:
        """`session/close`: active work is cancelled and the response follows its final
        updates and idle `cancelled` (an uninserted prompt gets -32800; seed 000)."""
        sid = session_id(params)
        session = self.sessions.get(sid)
        if session is None or session.closed:
            return {}
        closing = session.close()
        if isinstance(closing, dict):
            del self.sessions[sid]
            return closing

        async def after_work() -> Json:
            result = await closing
            self.sessions.pop(sid, None)
            return result

        return after_work()

    def cancel(self, params: Json, cx: Any) -> None:
        """`session/cancel`: cancel the session's active work, or remember the cancellation
        for the `cancel_status` command when it is idle."""
        sid = params.get("sessionId") if isinstance(params, dict) else None
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            return
        if session.turn is not None:
            session.cancel()
        else:
            session.pending_cancel = True

    def prompt(self, params: Json, cx: Any) -> None:
        """`session/prompt`: run the command of the prompt's text (see
        `acp_fast.testy.commands`) as the session's foreground work
        ([`AgentSession.prompt`][acp_fast.roles.AgentSession.prompt]); the response is the
        insertion receipt, and the work ends with an idle `state_update`.

        Raises:
            JsonRpcError: -32602 for an unknown session, one with active work, or a `prompt`
                that is not an array.
        """
        _sid, session = self._get(params)
        prompt = params.get("prompt")
        if not isinstance(prompt, list):
            raise JsonRpcError(INVALID_PARAMS, data="`prompt` must be an array of content blocks")
        n = self.next_prompt + 1
        session.prompt(cx, params, lambda turn: self._turn(session, turn, prompt, f"testy-v2-agent-message-{n}"),
                       message_id=f"testy-v2-user-message-{n}")
        self.next_prompt = n  # only counted once the session accepted the work

    async def _turn(self, session: _Session2, turn: PromptTurn, prompt: list[Any], agent_id: str) -> str:
        sid = session.session_id
        send = turn.send
        kind, args = parse_command(prompt_text(prompt))
        if kind == "scenario" and args["name"] == "hold_before_insert":
            # running precedes insertion; the prompt is never inserted: a session/cancel or
            # session/close answers it -32800 and ends the work idle/cancelled
            turn.set_state("running")
            await turn.wait_cancelled()
            raise asyncio.CancelledError
        session.history.append({"sessionUpdate": "user_message", "messageId": turn.message_id, "content": prompt})
        turn.insert()  # the response (the insertion receipt) goes out before the user message
        turn.set_state("running")
        stop = "end_turn"
        text: str | None = None
        if kind == "stream":
            if args["permission"]:
                outcome = await self._permission(sid, turn, cx=turn.cx)
                send({"sessionUpdate": "agent_message_chunk", "messageId": agent_id,
                      "content": text_block(f"permission:{outcome}")})
            if not turn.cancelled:
                await stream(self.stream_mode)(turn.cx, sid, args["n"], args["size"], agent_id, lambda: turn.cancelled)
            total = args["n"] * args["size"]
            text = "x" * total if total <= HISTORY_LIMIT else f"[{args['n']} chunks of {args['size']} bytes]"
            self._record(session, agent_id, text)
            text = None
        elif kind == "help":
            text = HELP
        elif kind == "echo":
            text = str(args["message"])
        elif kind == "tool":
            text, stop = MCP_V2, "refusal"
        elif kind == "scenario":
            name = args["name"]
            if name == "wait_for_cancel":
                await turn.wait_cancelled()
            elif name == "cancel_status":
                status = "cancelled" if session.pending_cancel else "not_cancelled"
                session.pending_cancel = False
                text = f"cancel_status: {status}"
            elif name == "auth_required":
                # a failure after insertion, authentication included, ends the work on the
                # idle update (stop reason error + the JSON-RPC error), not as a prompt error
                raise JsonRpcError(AUTH_REQUIRED, data="Testy's sign-in expired during the turn")
            else:
                text, stop = f"Testy v2 scenario `{name}` is not implemented yet", "refusal"
        else:
            text = GREETING
        if not turn.cancelled and text is not None:
            send({"sessionUpdate": "agent_message_chunk", "messageId": agent_id, "content": text_block(text)})
            self._record(session, agent_id, text)
        return stop

    def _record(self, session: _Session2, agent_id: str, text: str) -> None:
        session.history.append({"sessionUpdate": "agent_message", "messageId": agent_id, "content": [text_block(text)]})

    async def _permission(self, sid: str, turn: PromptTurn, cx: Any) -> str:
        # through the turn: cancelling the work cancels it with $/cancel_request (seed 004)
        pending = turn.request(SESSION_REQUEST_PERMISSION, {
            "sessionId": sid, "title": "Testy tool",
            "subject": {"type": "tool_call", "toolCall": {"toolCallId": "testy-permission", "title": "Testy tool"}},
            "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]})
        cancel = asyncio.ensure_future(turn.wait_cancelled())
        waiter = asyncio.ensure_future(_settle(pending))
        await asyncio.wait((waiter, cancel), return_when=asyncio.FIRST_COMPLETED)
        cancel.cancel()
        if not waiter.done():  # cancelled foreground work: stop waiting (the turn cancelled it)
            return "cancelled"
        result = waiter.result()
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if isinstance(outcome, dict) and outcome.get("outcome") == "selected":
            return str(outcome.get("optionId"))
        return str(outcome.get("outcome")) if isinstance(outcome, dict) else "error"


def _check_acted_on(params: Json) -> None:
    """Schema 1.11 (seed 000): setup payloads the agent acts on are rejected with -32602 when
    malformed, never silently dropped: `mcpServers` (objects with a string `name`) and
    `additionalDirectories` (absolute paths); `null` or omitted means empty."""
    if not isinstance(params, dict):
        return
    servers = params.get("mcpServers")
    if servers is not None and not (isinstance(servers, list) and all(
            isinstance(s, dict) and isinstance(s.get("name"), str) for s in servers)):
        raise JsonRpcError(INVALID_PARAMS, data="`mcpServers` must be an array of MCP server declarations")
    dirs = params.get("additionalDirectories")
    if dirs is not None and not (isinstance(dirs, list) and all(
            isinstance(d, str) and d.startswith("/") for d in dirs)):
        raise JsonRpcError(INVALID_PARAMS, data="`additionalDirectories` must be an array of absolute paths")


async def _settle(pending: Awaitable[Json]) -> Json:
    try:
        return await pending
    except JsonRpcError as exc:
        return {"error": exc.to_dict()}

