"""MCP-over-ACP interop with the official TypeScript SDK (``@agentclientprotocol/sdk`` 2.4.0).

Its experimental v2 API has MCP-over-ACP helpers (``McpOverAcpProvider`` /
``McpOverAcpCaller``, ``SessionBuilder.withMcpServer``) on the same wire binding: a single
``mcp/message`` method (``serverId``, ``requestId``, ``method``, ``params``; outcome carrier
``{result}`` / ``{error}``), stateless MCP 2026-07-28. Both directions, real processes
(``tests/interop/ts_mcp.mjs``):

* a TS v2 client serves an MCP server to an acp_fast agent (``tests/helpers/mcp_agent.py``),
  which uses it through ``open_mcp_session``;
* an acp_fast v2 client serves an ``mcp`` ``MCPServer`` with ``with_mcp_servers`` to a TS v2
  agent, which uses it through ``McpOverAcpCaller``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "helpers"))

from peer_rule import require_module  # noqa: E402

require_module("mcp", what="the MCP package (mcp) is not installed")

from interop_support import HERE, REPO, env, json_line, run
from mcp.server.mcpserver import MCPServer

from acp_fast import Client
from acp_fast.transport import spawn

pytestmark = pytest.mark.usefixtures("ts_sdk")

SCRIPT = str(HERE / "ts_mcp.mjs")
AGENT = str(REPO / "tests" / "helpers" / "mcp_agent.py")


def test_ts_client_serves_mcp_to_acp_fast_agent(ts_sdk: str, engine: ModuleType) -> None:
    out = json_line([ts_sdk, SCRIPT, "client", "--", sys.executable, AGENT],
                    ACP_FAST_TEST_ENGINE=engine.IMPLEMENTATION)
    assert "thrown" not in out, out
    decl = out["declaration"]
    assert decl["type"] == "acp" and decl["name"] == "ts-tools"
    # the acp_fast agent discovered, listed and called over mcp/message, at MCP 2026-07-28
    assert out["served"] == [{"method": m, "protocolVersion": "2026-07-28"}
                             for m in ("server/discover", "tools/list", "tools/call")]
    (reported,) = out["texts"]
    assert json.loads(reported) == [{
        "name": "ts-tools", "tools": ["add"],
        "call": {"content": [{"type": "text", "text": "42"}], "structuredContent": {"result": 42},
                 "isError": False, "resultType": "complete"}}]
    assert out["stopReason"] == "end_turn"


def test_acp_fast_client_serves_mcp_to_ts_agent(ts_sdk: str, engine: ModuleType) -> None:
    async def body() -> Any:
        server = MCPServer("py-tools")

        @server.tool()
        def add(a: int, b: int) -> int:
            """Add two numbers."""
            return a + b

        texts: list[str] = []
        client = Client.v2().on_session_update(
            lambda u, cx: texts.append(u.payload["content"]["text"]) if u.kind == "agent_message_chunk" else None)

        async def main(cx: Any) -> Any:
            init = await cx.initialize()
            assert init["capabilities"]["session"]["mcp"] == {"acp": {}}
            sent = cx.build_session(str(REPO), with_mcp_servers=[server])
            session = (await sent).session
            epoch = session.idle_epoch
            await session.send_prompt("use the tools")
            stop = await session.wait_idle(after=epoch)
            return sent.mcp.declarations, stop

        stream = await spawn([ts_sdk, SCRIPT, "agent"], env=env(), cwd=REPO)
        declarations, stop = await client.connect_with(stream, main, engine=engine)
        return declarations, stop, texts

    declarations, stop, texts = run(body)
    assert stop.kind == "end_turn"
    (reported,) = (json.loads(t) for t in texts)
    (entry,) = reported
    assert entry["name"] == "py-tools" and entry["serverId"] == declarations[0]["serverId"]
    assert entry["tools"] == ["add"]
    assert entry["call"]["structuredContent"] == {"result": 42}
    assert entry["call"]["content"] == [{"type": "text", "text": "42"}]
