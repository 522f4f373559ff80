"""The default send bound: 8 MiB waiting for a peer that does not read, then ``SendBufferFull``.

``test_api_shape.py`` checks the mechanism with a 1 MiB ``max_write_buffer``; here nothing is
passed, so the limit is the one every connection and builder gets: a plain ``Connection``
and an agent built with ``Agent.builder()`` (``cx.send_session_update`` in a loop that never
awaits ``drain()``). Each must take a full 8 MiB before refusing, and refuse as soon as the
queued bytes pass 8 MiB (one message late at most). Both engine twins.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from roles_support import RawPeer, run, serve_in_memory  # noqa: E402

from acp_fast import Agent, SendBufferFull  # noqa: E402
from acp_fast.jsonrpc import DEFAULT_MAX_WRITE_BUFFER, Connection  # noqa: E402
from acp_fast.transport import memory_pair  # noqa: E402

EIGHT_MIB = 8 * 1024 * 1024
TEXT = "x" * 200
#: More than enough messages to pass 8 MiB (each is > 200 bytes): a loop that ends without
#: SendBufferFull means no bound at the default.
MAX_MESSAGES = 2 * EIGHT_MIB // 200


def test_the_default_limit_is_eight_mib() -> None:
    assert DEFAULT_MAX_WRITE_BUFFER == EIGHT_MIB


def test_a_connection_refuses_past_eight_mib_by_default(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        b.pause_reading()  # the peer reads nothing
        conn = Connection(a, engine=engine)  # no max_write_buffer: the default
        sent_bytes = 0
        line = 0
        with pytest.raises(SendBufferFull) as info:
            for i in range(MAX_MESSAGES):
                params = {"i": i, "text": TEXT}
                line = len(engine.encode_notification("n", params))
                conn.notify("n", params)
                sent_bytes += line
                if i % 64 == 0:
                    await asyncio.sleep(0)  # let the transport take what it can
        assert info.value.limit == EIGHT_MIB
        # enforced at 8 MiB: not before (all 8 MiB were accepted) and not long after
        assert EIGHT_MIB < info.value.buffered <= EIGHT_MIB + line
        assert sent_bytes >= EIGHT_MIB
        conn.close()

    run(body)


def test_a_builder_agent_refuses_past_eight_mib_by_default(engine: ModuleType) -> None:
    """The builders pass no limit of their own: an agent's send loop gets the same 8 MiB."""
    outcome: dict[str, Any] = {}
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": TEXT}}

    agent = Agent.builder()

    @agent.on_request("_test/flood")
    async def flood(params: Any, cx: Any) -> Any:
        sent = 0
        try:
            for i in range(MAX_MESSAGES):
                cx.send_session_update("s-1", update)
                sent += 1
                if i % 64 == 0:
                    await asyncio.sleep(0)
        except SendBufferFull as exc:
            outcome.update(limit=exc.limit, buffered=exc.buffered)
        outcome.setdefault("limit", None)  # never refused: the assertions below say so
        outcome["sent"] = sent
        return {"sent": sent}

    async def body() -> None:
        stream = serve_in_memory(agent, engine)
        peer = RawPeer(stream)
        stream.pause_reading()  # we read nothing until the agent gave up
        peer.send({"jsonrpc": "2.0", "id": 1, "method": "_test/flood"})
        while not outcome:
            await asyncio.sleep(0.01)
        stream.resume_reading()
        while True:  # the answer comes after every queued update: never refused
            msg = await peer.recv()
            if msg.get("id") == 1:
                break
        assert msg["result"] == {"sent": outcome["sent"]}

    run(body)
    line = len(engine.encode_notification("session/update", {"sessionId": "s-1", "update": update}))
    assert outcome["limit"] == EIGHT_MIB
    assert EIGHT_MIB < outcome["buffered"] <= EIGHT_MIB + line
    assert outcome["sent"] * line >= EIGHT_MIB  # every update was taken until 8 MiB waited
