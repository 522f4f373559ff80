"""An acp_fast v2 agent that uses the MCP servers declared with the ACP transport (test-only).

``python mcp_agent.py`` serves it on stdio (engine twin from ``ACP_FAST_TEST_ENGINE``). On
``session/prompt`` it opens an ``mcp`` ``ClientSession`` to every ACP-transport server of the
session (:func:`acp_fast.roles.open_mcp_session`), lists the tools and calls ``add`` with
``{"a": 2, "b": 40}``, then reports ``[{"name", "tools", "call"}]`` as JSON in one
``agent_message_chunk`` and ends the turn (``idle`` / ``end_turn``).
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any

from acp_fast.roles import Agent, Context, acp_mcp_servers, open_mcp_session


def build() -> Any:
    agent = Agent.v2().with_info("acp-fast-mcp-agent", "0")
    declared: dict[str, list[dict[str, Any]]] = {}

    @agent.on_request("initialize")
    def initialize(params: Any, cx: Context) -> Any:
        return {"protocolVersion": 2, "info": {"name": "acp-fast-mcp-agent", "version": "0"},
                "capabilities": {"session": {"mcp": {"acp": {}}}}}

    @agent.on_request("session/new")
    def new_session(params: Any, cx: Context) -> Any:
        session_id = f"mcp-session-{len(declared) + 1}"
        declared[session_id] = acp_mcp_servers(params)
        return {"sessionId": session_id}

    async def turn(session_id: str, cx: Context) -> None:
        out: list[Any] = []
        for declaration in declared[session_id]:
            try:
                async with open_mcp_session(cx.connection, declaration) as session:
                    tools = await session.list_tools()
                    called = await session.call_tool("add", {"a": 2, "b": 40})
                    out.append({"name": declaration["name"], "tools": [t.name for t in tools.tools],
                                "call": called.model_dump(mode="json", by_alias=True, exclude_none=True)})
            except Exception as exc:  # noqa: BLE001 -- reported, so that the test shows it
                out.append({"name": declaration["name"], "error": repr(exc)})
        cx.connection.send_session_update(session_id, {
            "sessionUpdate": "agent_message_chunk", "messageId": "a1",
            "content": {"type": "text", "text": json.dumps(out)}})
        cx.connection.send_session_update(session_id, {
            "sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})

    @agent.on_request("session/prompt")
    def prompt(params: Any, cx: Context) -> Any:
        cx.connection.start_task(turn(params["sessionId"], cx))
        return {"messageId": "m1"}

    return agent


def main() -> None:
    from acp_fast.roles import run_agent_stdio

    engine = importlib.import_module("acp_fast._engine_" + os.environ.get("ACP_FAST_TEST_ENGINE", "py"))
    run_agent_stdio(build(), engine=engine)


if __name__ == "__main__":
    main()
