"""What a running connection adds to its builder's handlers (seed 000): handlers added at run
time (``add_dynamic_handler``), child connections spawned from a handler with their own
builder (``spawn_connection``), and the proxy-side session setup helper
(``on_proxy_session_start``).

Every test runs on both engine twins (the ``engine`` fixture); wire-level assertions use a
raw JSON-line peer.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from roles_support import RawPeer, run, serve_in_memory, v2_init

from acp_fast import testy
from acp_fast.errors import JsonRpcError
from acp_fast.jsonrpc import Connection
from acp_fast.roles import Agent, Client
from acp_fast.roles.connection import NOT_HANDLED, AcpConnection
from acp_fast.transport import memory_pair

# ---------------------------------------------------------------------------------------
# dynamic handlers
# ---------------------------------------------------------------------------------------


def test_dynamic_request_handlers_are_added_and_removed_at_run_time(engine: ModuleType) -> None:
    """A handler added while the connection runs answers its method; one returning
    NOT_HANDLED passes the message on (to the builder's handler, then the default -32601);
    removing it restores what was there before."""
    async def body() -> None:
        agent = Agent.v2()
        added: list[Any] = []
        agent.on_request("_x/static", lambda p, cx: {"from": "builder"})

        @agent.on_request("_x/install")
        def install(params: Any, cx: Any) -> Any:
            conn: AcpConnection = cx.connection
            added.append(conn.add_dynamic_handler("_x/dynamic", lambda p, cx: {"dynamic": p["n"]}))
            added.append(conn.add_dynamic_handler(
                "_x/static", lambda p, cx: {"from": "dynamic"} if p.get("mine") else NOT_HANDLED))
            return {}

        peer = RawPeer(serve_in_memory(agent, engine))
        assert "result" in await peer.request(1, "initialize", v2_init())
        before = await peer.request(2, "_x/dynamic", {"n": 1})
        assert before["error"]["code"] == -32601
        assert (await peer.request(3, "_x/install", {}))["result"] == {}
        assert (await peer.request(4, "_x/dynamic", {"n": 7}))["result"] == {"dynamic": 7}
        assert (await peer.request(5, "_x/static", {"mine": True}))["result"] == {"from": "dynamic"}
        assert (await peer.request(6, "_x/static", {}))["result"] == {"from": "builder"}  # passed on
        for handler in added:
            handler.remove()
        assert not added[0].active
        assert (await peer.request(7, "_x/dynamic", {"n": 1}))["error"]["code"] == -32601
        assert (await peer.request(8, "_x/static", {"mine": True}))["result"] == {"from": "builder"}

    run(body)


def test_dynamic_handlers_added_before_initialize_apply_after_it(engine: ModuleType) -> None:
    """Added before the connection is ready, a dynamic handler still waits for the guard
    (requests before ``initialize`` are refused) and then answers."""
    async def body() -> None:
        a, b = memory_pair()
        peer = RawPeer(a)
        conn = Agent.v2().bind(Connection(b, engine=engine))
        conn.add_dynamic_handler("_x/early", lambda p, cx: "early")
        got: list[Any] = []
        conn.add_dynamic_handler("_x/note", lambda p, cx: got.append(p), kind="notification")
        refused = await peer.request(1, "_x/early", {})
        assert refused["error"]["code"] == -32600
        assert "result" in await peer.request(2, "initialize", v2_init())
        peer.notify("_x/note", {"k": 1})
        assert (await peer.request(3, "_x/early", {}))["result"] == "early"
        assert got == [{"k": 1}]
        with pytest.raises(ValueError):
            conn.add_dynamic_handler("initialize", lambda p, cx: None)
        with pytest.raises(ValueError):
            conn.add_dynamic_handler("_x/y", lambda p, cx: None, kind="response")
        conn.close()

    run(body)


def test_dynamic_session_update_handler_sees_gated_updates_per_session(engine: ModuleType) -> None:
    """A client's dynamic ``session/update`` handler gets the read-gated ``SessionUpdate``
    after the session state was tracked; NOT_HANDLED passes other sessions' updates to the
    builder's update handler."""
    async def body() -> None:
        routed: list[tuple[str, str, bool]] = []
        builder_seen: list[str] = []
        client = Client.v2().on_session_update(lambda u, cx: builder_seen.append(u.session_id))

        async def main(conn: Any) -> None:
            await conn.initialize()
            one = (await conn.build_session("/w")).session
            two = (await conn.build_session("/w")).session

            def route(update: Any, cx: Any) -> Any:
                if update.session_id != one.session_id:
                    return NOT_HANDLED
                routed.append((update.kind, str(update.payload.get("state")), update.known))
                return None

            with conn.add_dynamic_handler("session/update", route, kind="notification"):
                for session in (one, two):
                    epoch = session.idle_epoch
                    await session.send_prompt("echo hi")
                    assert await session.wait_idle(after=epoch) == "end_turn"  # still tracked
            epoch = one.idle_epoch
            await one.send_prompt("echo again")  # removed: the builder's handler sees it
            await one.wait_idle(after=epoch)
            await conn.raw.settled()

        await client.connect_with(serve_in_memory(testy.build((2,)), engine), main, engine=engine)
        assert routed == [("user_message", "None", True), ("state_update", "running", True),
                          ("agent_message_chunk", "None", True), ("state_update", "idle", True)]
        assert builder_seen == ["testy-v2-session-2"] * 4 + ["testy-v2-session-1"] * 4

    run(body)


# ---------------------------------------------------------------------------------------
# nested connections
# ---------------------------------------------------------------------------------------


def test_handler_spawns_a_v2_client_connection_with_its_own_builder(engine: ModuleType) -> None:
    """Seed 000: from a handler, ``spawn_connection(Client.v2(), transport)`` starts a child
    connection; callbacks installed on the child's builder get the child's traffic, the
    child has the v2 session helpers, and it is closed with its parent."""
    async def body() -> None:
        child_updates: list[str] = []
        children: list[AcpConnection] = []
        agent = Agent.v2()

        @agent.on_request("_x/delegate")
        async def delegate(params: Any, cx: Any) -> Any:
            a, b = memory_pair()
            asyncio.ensure_future(testy.build((2,)).serve(a, engine=engine))
            child_builder = Client.v2().on_session_update(lambda u, cx2: child_updates.append(u.kind))
            child = await cx.connection.spawn_connection(child_builder, b)
            children.append(child)
            assert child.version == 2 and child.role == "client" and child in cx.connection.children
            await child.initialize()
            session = (await child.build_session("/w")).session
            epoch = session.idle_epoch
            receipt = await session.send_prompt(f"echo {params['text']}")
            stop = await session.wait_idle(after=epoch)
            return {"receipt": receipt, "stop": stop.kind}

        a, b = memory_pair()
        served = asyncio.ensure_future(agent.serve(a, engine=engine))
        peer = RawPeer(b)
        assert "result" in await peer.request(1, "initialize", v2_init())
        reply = await peer.request(2, "_x/delegate", {"text": "nested"})
        assert reply["result"] == {"receipt": {"messageId": "testy-v2-user-message-1"}, "stop": "end_turn"}
        assert child_updates == ["user_message", "state_update", "agent_message_chunk", "state_update"]
        (child,) = children
        assert not child.closed.done()
        b.close()  # the parent's peer hangs up: the parent closes, and its child with it
        await asyncio.wait_for(served, 10)
        await asyncio.wait_for(child.wait_closed(), 10)

    run(body)


def test_spawn_connection_with_context_returns_the_childs_connection(engine: ModuleType) -> None:
    async def body() -> None:
        parent_a, parent_b = memory_pair()
        parent = Client.v2().bind(Connection(
            parent_a, engine=engine))
        a, b = memory_pair()
        served = asyncio.ensure_future(testy.build((1,)).serve(a, engine=engine))
        child = await parent.spawn_connection_with_context(Client.builder(), b)
        assert child.version == 1 and child.raw.engine is parent.raw.engine
        assert (await child.initialize())["protocolVersion"] == 1
        with pytest.raises(JsonRpcError):
            await child.send_request("_x/nothing", {})
        parent.close()
        await parent.wait_closed()
        await asyncio.wait_for(child.wait_closed(), 10)
        assert child not in parent.children
        await asyncio.wait_for(served, 10)
        parent_b.close()

    run(body)
