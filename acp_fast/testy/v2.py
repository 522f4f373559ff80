"""Testy v2 (protocol.md §9.2, seed 000): prompt receipts, ``state_update`` framing, replay."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .. import __version__
from ..errors import INVALID_PARAMS, JsonRpcError
from .commands import HELP, parse_command, prompt_text
from .common import AGENT_NAME, GREETING, TestyBase, session_id, text_block, unknown_session
from .streaming import stream

__all__ = ["TestyV2"]

logger = logging.getLogger("acp_fast.testy")

MCP_V2 = "Testy v2 does not advertise MCP support yet"


class _Session2:
    __slots__ = ("cancel_event", "cancelled", "closed", "cwd", "history", "pending_cancel", "work")

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.closed = False
        self.cancelled = False
        self.pending_cancel = False
        self.cancel_event = asyncio.Event()
        self.work: asyncio.Task[None] | None = None
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

    def initialize(self, params: Any, cx: Any) -> dict[str, Any]:
        return {"protocolVersion": 2, "info": {"name": AGENT_NAME, "version": __version__},
                "capabilities": {"session": {"fork": {}}}}

    def _get(self, params: Any) -> tuple[str, _Session2]:
        sid = session_id(params)
        session = self.sessions.get(sid)
        if session is None or session.closed:
            raise unknown_session(sid)
        return sid, session

    def new_session(self, params: Any, cx: Any) -> dict[str, Any]:
        cwd = self._new_cwd(params)
        sid = f"testy-v2-session-{self.next_session}"
        self.sessions[sid] = _Session2(cwd)
        return {"sessionId": sid}

    def resume_session(self, params: Any, cx: Any) -> dict[str, Any]:
        sid, session = self._get(params)
        if session.work is not None:
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

    def fork_session(self, params: Any, cx: Any) -> dict[str, Any]:
        """``session/fork`` (unstable): a new session with a copy of the source's history
        (replayable with ``session/resume``), in the requested cwd."""
        _sid, source = self._get(params)
        cwd = self._new_cwd(params)
        sid = f"testy-v2-session-{self.next_session}"
        fork = self.sessions[sid] = _Session2(cwd)
        fork.history = list(source.history)
        return {"sessionId": sid}

    def close_session(self, params: Any, cx: Any) -> Any:
        sid = session_id(params)
        session = self.sessions.get(sid)
        if session is None or session.closed:
            return {}
        session.closed = True
        work = session.work
        if work is None:
            del self.sessions[sid]
            return {}
        session.cancelled = True
        session.cancel_event.set()

        async def after_work() -> dict[str, Any]:
            await asyncio.wait((work,))
            self.sessions.pop(sid, None)
            return {}

        return after_work()

    def cancel(self, params: Any, cx: Any) -> None:
        sid = params.get("sessionId") if isinstance(params, dict) else None
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            return
        if session.work is not None:
            session.cancelled = True
            session.cancel_event.set()
        else:
            session.pending_cancel = True

    def prompt(self, params: Any, cx: Any) -> dict[str, Any]:
        sid, session = self._get(params)
        prompt = params.get("prompt")
        if not isinstance(prompt, list):
            raise JsonRpcError(INVALID_PARAMS, data="`prompt` must be an array of content blocks")
        if session.work is not None:
            raise JsonRpcError(INVALID_PARAMS, data=f"session `{sid}` already has foreground work")
        self.next_prompt += 1
        n = self.next_prompt
        user_id = f"testy-v2-user-message-{n}"
        session.cancelled = False
        session.cancel_event = asyncio.Event()
        # the response (the insertion receipt) is written before the task's first update
        session.work = asyncio.ensure_future(self._turn(sid, session, cx, prompt, user_id,
                                                        f"testy-v2-agent-message-{n}"))
        return {"messageId": user_id}

    async def _turn(self, sid: str, session: _Session2, cx: Any, prompt: list[Any],
                    user_id: str, agent_id: str) -> None:
        send = cx.send_session_update
        try:
            user = {"sessionUpdate": "user_message", "messageId": user_id, "content": prompt}
            session.history.append(user)
            send(sid, user)
            send(sid, {"sessionUpdate": "state_update", "state": "running"})
            kind, args = parse_command(prompt_text(prompt))
            stop = "end_turn"
            text: str | None = None
            if kind == "stream":
                if args["permission"]:
                    outcome = await self._permission(sid, session, cx)
                    send(sid, {"sessionUpdate": "agent_message_chunk", "messageId": agent_id,
                               "content": text_block(f"permission:{outcome}")})
                if not session.cancelled:
                    await stream(self.stream_mode)(cx, sid, args["n"], args["size"], agent_id, lambda: session.cancelled)
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
                    await session.cancel_event.wait()
                elif name == "cancel_status":
                    status = "cancelled" if session.pending_cancel else "not_cancelled"
                    session.pending_cancel = False
                    text = f"cancel_status: {status}"
                else:
                    text, stop = f"Testy v2 scenario `{name}` is not implemented yet", "refusal"
            else:
                text = GREETING
            if session.cancelled:
                stop = "cancelled"
            elif text is not None:
                send(sid, {"sessionUpdate": "agent_message_chunk", "messageId": agent_id, "content": text_block(text)})
                self._record(session, agent_id, text)
            send(sid, {"sessionUpdate": "state_update", "state": "idle", "stopReason": stop})
        except Exception:  # pragma: no cover - reported on the idle update
            logger.exception("testy v2 turn failed")
            send(sid, {"sessionUpdate": "state_update", "state": "idle", "stopReason": "error"})
        finally:
            session.work = None

    def _record(self, session: _Session2, agent_id: str, text: str) -> None:
        session.history.append({"sessionUpdate": "agent_message", "messageId": agent_id, "content": [text_block(text)]})

    async def _permission(self, sid: str, session: _Session2, cx: Any) -> str:
        pending = cx.send_request("session/request_permission", {
            "sessionId": sid, "title": "Testy tool",
            "subject": {"type": "tool_call", "toolCall": {"toolCallId": "testy-permission", "title": "Testy tool"}},
            "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]})
        cancel = asyncio.ensure_future(session.cancel_event.wait())
        waiter = asyncio.ensure_future(_settle(pending))
        await asyncio.wait((waiter, cancel), return_when=asyncio.FIRST_COMPLETED)
        cancel.cancel()
        if not waiter.done():  # cancelled foreground work: stop waiting, cancel the request
            pending.cancel()
            return "cancelled"
        result = waiter.result()
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if isinstance(outcome, dict) and outcome.get("outcome") == "selected":
            return str(outcome.get("optionId"))
        return str(outcome.get("outcome")) if isinstance(outcome, dict) else "error"


async def _settle(pending: Any) -> Any:
    try:
        return await pending
    except JsonRpcError as exc:
        return {"error": exc.to_dict()}

