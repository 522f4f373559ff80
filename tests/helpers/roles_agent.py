"""Test agents written with the builder API; also a script that serves one on stdio.

Used two ways by ``tests/test_roles.py`` / ``tests/test_sessions.py``:

* imported: :func:`build` returns an agent (builder or router) to serve over an in-memory
  pair in the test process;
* run as a child process: ``python roles_agent.py MODE`` serves :func:`build(MODE)` on its
  stdio with ``run_agent_stdio`` on the engine twin named by ``ACP_FAST_TEST_ENGINE``.

Modes: ``v1``, ``v2``, ``router`` (v1 + v2), ``router-v1``, ``router-v2``.

Every initialize handler echoes the params it saw in ``_meta.seen`` of its result, so tests
can check the normalisation an implementation receives. Prompt texts steer the turn:
``"wait-cancel"`` runs until ``session/cancel``; ``"fail"`` ends v2 work with the ``error``
stop reason; ``"block"`` reports ``requires_action`` first.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from typing import Any

from acp_fast.roles import Agent, Builder, Context

TEXT = "text"


def _text(params: dict[str, Any]) -> str:
    blocks = params.get("prompt") or [{}]
    return str(blocks[0].get("text", ""))


class _Cancels:
    """session id -> an Event set by ``session/cancel``."""

    def __init__(self) -> None:
        self.events: dict[str, asyncio.Event] = {}

    def event(self, session_id: str) -> asyncio.Event:
        return self.events.setdefault(session_id, asyncio.Event())

    def cancel(self, params: Any, cx: Context) -> None:
        self.event(params["sessionId"]).set()


def v1_agent(record: dict[str, Any] | None = None) -> Builder:
    """A v1 agent: a prompt turn streams one chunk and ends with ``stopReason``."""
    record = record if record is not None else {}
    record.setdefault("initialize", [])
    cancels = _Cancels()
    agent = Agent.builder().with_info("roles-agent-v1", "1.0")

    @agent.on_request("initialize")
    def initialize(params: Any, cx: Context) -> Any:
        record["initialize"].append(params)
        return {"protocolVersion": params["protocolVersion"], "agentCapabilities": {},
                "agentInfo": {"name": "roles-agent-v1", "version": "1.0"}, "_meta": {"seen": params}}

    agent.on_request("NewSessionRequest", lambda params, cx: {"sessionId": "v1-session", "_meta": {"v": 1}})

    @agent.on_request("session/prompt")
    async def prompt(params: Any, cx: Context) -> Any:
        sid, text = params["sessionId"], _text(params)
        cx.send_session_update(sid, {"sessionUpdate": "agent_message_chunk",
                                     "content": {"type": TEXT, "text": f"echo: {text}"}})
        if text == "wait-cancel":
            await cancels.event(sid).wait()
            return {"stopReason": "cancelled"}
        return {"stopReason": "end_turn"}

    agent.on_notification("session/cancel", cancels.cancel)
    return agent


def v2_agent(record: dict[str, Any] | None = None) -> Builder:
    """A v2 agent: prompts are acknowledged with ``messageId``; idle ends the work."""
    record = record if record is not None else {}
    record.setdefault("initialize", [])
    cancels = _Cancels()
    agent = Agent.v2().with_info("roles-agent-v2", "2.0")
    counter = [0]

    @agent.on_request("initialize")
    def initialize(params: Any, cx: Context) -> Any:
        record["initialize"].append(params)
        return {"protocolVersion": params["protocolVersion"],
                "info": {"name": "roles-agent-v2", "version": "2.0"}, "capabilities": {},
                "_meta": {"seen": params}}

    @agent.on_request("session/new")
    def new_session(params: Any, cx: Context) -> Any:
        return {"sessionId": "v2-session", "configOptions": [], "_meta": {"extra": {"kept": True}}}

    def update(cx: Context, sid: str, body: dict[str, Any]) -> None:
        cx.send_session_update(sid, body)

    async def work(cx: Context, sid: str, text: str, message_id: str) -> None:
        await asyncio.sleep(0)  # let the prompt response go first
        if text == "block":
            update(cx, sid, {"sessionUpdate": "state_update", "state": "requires_action"})
        update(cx, sid, {"sessionUpdate": "state_update", "state": "running"})
        update(cx, sid, {"sessionUpdate": "agent_message_chunk", "messageId": f"a-{message_id}",
                         "content": {"type": TEXT, "text": f"echo: {text}"}})
        if text == "wait-cancel":
            await cancels.event(sid).wait()
            update(cx, sid, {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"})
        elif text == "fail":
            update(cx, sid, {"sessionUpdate": "state_update", "state": "idle", "stopReason": "error",
                             "error": {"code": -32000, "message": "Authentication required"}})
        else:
            update(cx, sid, {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})

    @agent.on_request("PromptRequest")
    def prompt(params: Any, cx: Context) -> Any:
        sid, text = params["sessionId"], _text(params)
        counter[0] += 1
        message_id = f"m{counter[0]}"
        update(cx, sid, {"sessionUpdate": "user_message", "messageId": message_id,
                         "content": params["prompt"]})
        task = asyncio.ensure_future(work(cx, sid, text, message_id))
        record.setdefault("tasks", []).append(task)
        return {"messageId": message_id}

    @agent.on_request("session/resume")
    def resume(params: Any, cx: Context) -> Any:
        sid = params["sessionId"]
        if params.get("replayFrom") is not None:
            for i in range(5):
                update(cx, sid, {"sessionUpdate": "agent_message", "messageId": f"r{i}",
                                 "content": [{"type": TEXT, "text": f"replay {i}"}]})
        update(cx, sid, {"sessionUpdate": "state_update", "state": "idle"})
        return {"configOptions": [], "_meta": {"resumed": sid}}

    agent.on_notification("session/cancel", cancels.cancel)
    return agent


def build(mode: str, record: dict[str, Any] | None = None) -> Any:
    """The agent of ``mode`` (see the module docstring)."""
    if mode == "v1":
        return v1_agent(record)
    if mode == "v2":
        return v2_agent(record)
    router = Agent.protocol_router()
    if mode in ("router", "router-v1"):
        router.with_v1(v1_agent(record))
    if mode in ("router", "router-v2"):
        router.with_v2(v2_agent(record))
    return router


def main() -> None:
    from acp_fast.roles import run_agent_stdio

    engine = importlib.import_module("acp_fast._engine_" + os.environ.get("ACP_FAST_TEST_ENGINE", "py"))
    run_agent_stdio(build(sys.argv[1] if len(sys.argv) > 1 else "v2"), engine=engine)


if __name__ == "__main__":
    main()
