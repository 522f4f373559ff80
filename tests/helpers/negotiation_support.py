"""Shared helpers of the conductor's version-selection tests (not a test module; issue 20).

``tests/test_conductor_negotiation.py`` (in-process components) and
``tests/interop/test_conductor_negotiation_interop.py`` (the TypeScript SDK proxy) run the
same matrix: :data:`CLIENTS` × :data:`AGENTS`, the expected outcome being what the client
gets from the agent directly (:func:`direct`), the chain's from :func:`through`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from conductor_support import Wire, text_prompt, updates
from roles_support import RawPeer, serve_in_memory, v1_init, v2_init

from acp_fast import testy
from acp_fast.conductor import Conductor

CLIENTS = {"v1": v1_init(), "v2": v2_init(), "65535": v2_init(65535)}
AGENTS = {"v1-only": (1,), "v2-only": (2,), "router": (1, 2)}


async def direct(engine: ModuleType, versions: tuple[int, ...], params: dict[str, Any]) -> dict[str, Any]:
    """The ``initialize`` answer of Testy serving ``versions``, straight (its ``result`` or ``error``)."""
    stream = serve_in_memory(testy.build(versions), engine)
    reply = await RawPeer(stream).request(0, "initialize", params)
    stream.close()
    return {k: v for k, v in reply.items() if k in ("result", "error")}


def chunks(msgs: list[Any]) -> list[str]:
    return [u["content"]["text"] for u in updates(msgs) if u["sessionUpdate"] == "agent_message_chunk"]


async def turn(w: Wire, version: int) -> None:
    """One prompt turn at ``version``: Testy echoes the text back as one chunk."""
    if version == 1:
        sid = (await w.result("session/new", {"cwd": "/", "mcpServers": []}))["sessionId"]
        reply, seen = await w.call("session/prompt", text_prompt(sid, "echo through the chain"))
        assert reply["result"] == {"stopReason": "end_turn"}, reply
    else:
        sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
        reply, seen = await w.call("session/prompt", text_prompt(sid, "echo through the chain"))
        assert reply["result"]["messageId"], reply

        def idle(m: Any) -> bool:
            return m.get("params", {}).get("update", {}).get("state") == "idle"

        if not any(idle(m) for m in seen):
            _, more = await w.until(idle)
            seen += more
    assert chunks(seen) == ["through the chain"]


async def through(conductor: Conductor, params: dict[str, Any]) -> dict[str, Any]:
    """The chain's ``initialize`` answer (then a prompt turn at its version when it succeeded)."""
    async with conductor as upstream:
        w = Wire(RawPeer(upstream))
        reply, _ = await w.call("initialize", params)
        if "result" in reply:
            await turn(w, reply["result"]["protocolVersion"])
    return {k: v for k, v in reply.items() if k in ("result", "error")}


def assert_one_version(conductor: Conductor, outcome: dict[str, Any]) -> None:
    """The record agrees with the answer, and every component speaks the selected version."""
    record = conductor.negotiation
    assert record is not None
    if "result" in outcome:
        version = outcome["result"]["protocolVersion"]
        assert record["outcome"] == "selected" and record["selected"] == version == conductor.version
        assert {c["version"] for c in record["components"]} == {version}, record
    else:
        assert record["outcome"] == "agent error", record
