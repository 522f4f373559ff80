"""Roles, builders, negotiation and the initialization guard, end to end (protocol.md §5-6).

Every test runs on both engine twins (the ``engine`` fixture of ``conftest.py``). The
"talk" tests also run over a real child process (``tests/helpers/roles_agent.py`` served
on stdio with the builder API, spawned with the child-process transport); the rest use
in-memory pairs, with a raw JSON-line peer where the wire itself is asserted.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

import roles_agent
from roles_support import (
    REPO,
    RawPeer,
    open_agent,
    run,
    serve_in_memory,
    v1_init,
    v2_init,
)

from acp_fast.errors import JsonRpcError
from acp_fast.protocol.errors import WireSurfaceError
from acp_fast.protocol.gate import SurfaceGate
from acp_fast.roles import Agent, Client, Context, Proxy, _hot
from acp_fast.transport import memory_pair

NOT_READY = "ACP initialization must complete before `session/new` can be used"
ONCE = "ACP connections may only be initialized once; reconnect to initialize again"
IN_PROGRESS = "ACP initialization is already in progress on this connection"
DIRECTION = "ACP clients send `initialize` requests and ACP agents respond to them"
V1_ANSWER = ("required ACP protocol version 2 but peer negotiated 1; "
             "use a matching implementation for the negotiated protocol version")


@pytest.fixture(params=["memory", "child"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def error_of(reply: dict[str, Any]) -> tuple[int, Any]:
    return reply["error"]["code"], reply["error"].get("data")


# ---------------------------------------------------------------------------------------
# an agent and a client written with the builder API talk, over memory and real pipes
# ---------------------------------------------------------------------------------------


@pytest.mark.seed("S000-01")
def test_v1_agent_and_client_talk_v1(engine: ModuleType, transport: str) -> None:
    async def body() -> None:
        updates = []
        client = Client.builder().on_session_update(lambda u, cx: updates.append(u))

        async def main(cx: Any) -> Any:
            init = await cx.initialize()
            assert init["protocolVersion"] == 1 and cx.negotiated_version == 1
            opened = await cx.build_session("/tmp")
            session = opened.session
            assert session.session_id == "v1-session" and opened.response["_meta"] == {"v": 1}
            turn = await session.send_prompt("hello")
            return turn

        turn = await client.connect_with(await open_agent(transport, "v1", engine), main, engine=engine)
        assert turn == {"stopReason": "end_turn"}
        assert [(u.kind, u.known, u.payload["content"]["text"]) for u in updates] == [
            ("agent_message_chunk", True, "echo: hello")]

    run(body)


@pytest.mark.seed("S000-01")
def test_v2_agent_and_client_talk_v2(engine: ModuleType, transport: str) -> None:
    async def body() -> None:
        updates = []
        client = Client.v2().on_session_update(lambda u, cx: updates.append(u.kind))

        async def main(cx: Any) -> Any:
            init = await cx.initialize()
            assert init["protocolVersion"] == 2 and init["info"]["name"] == "roles-agent-v2"
            opened = await cx.build_session("/tmp")
            epoch = opened.session.idle_epoch
            receipt = await opened.session.send_prompt("hello")
            stop = await opened.session.wait_idle(after=epoch)
            return receipt, stop

        receipt, stop = await client.connect_with(await open_agent(transport, "v2", engine), main, engine=engine)
        assert receipt == {"messageId": "m1"} and stop.kind == "end_turn"
        assert updates == ["user_message", "state_update", "agent_message_chunk", "state_update"]

    run(body)


def test_router_serves_v1_and_v2_clients(engine: ModuleType, transport: str) -> None:
    async def body() -> None:
        async def v2_main(cx: Any) -> Any:
            init = await cx.initialize()
            opened = await cx.build_session("/tmp")
            return init["protocolVersion"], (await opened.session.send_prompt("x"))["messageId"]

        async def v1_main(cx: Any) -> Any:
            init = await cx.initialize()
            session = (await cx.build_session("/tmp")).session
            return init["protocolVersion"], (await session.send_prompt("x"))["stopReason"]

        assert await Client.v2().connect_with(
            await open_agent(transport, "router", engine), v2_main, engine=engine) == (2, "m1")
        assert await Client.builder().connect_with(
            await open_agent(transport, "router", engine), v1_main, engine=engine) == (1, "end_turn")

    run(body)


@pytest.mark.seed("S000-85")
def test_v2_client_against_v1_agent_fails_on_v1_answer_over_pipes(engine: ModuleType, transport: str) -> None:
    async def body() -> None:
        async def main(cx: Any) -> Any:
            with pytest.raises(JsonRpcError) as info:
                await cx.initialize()
            return info.value

        exc = await Client.v2().connect_with(await open_agent(transport, "v1", engine), main, engine=engine)
        assert (exc.code, exc.data) == (-32600, V1_ANSWER)

    run(body)


@pytest.mark.seed("S000-93")
def test_router_rejects_and_closes_over_pipes(engine: ModuleType, transport: str) -> None:
    async def body() -> None:
        async def main(cx: Any) -> Any:
            with pytest.raises(JsonRpcError) as info:
                await cx.initialize()
            await cx.closed  # the router closed the connection after answering
            return info.value

        exc = await Client.builder().connect_with(
            await open_agent(transport, "router-v2", engine), main, engine=engine)
        assert (exc.code, exc.data) == (-32022, {"requested": 1, "supported": [2]})

    run(body)


# ---------------------------------------------------------------------------------------
# negotiation: v1 agent (§6.1), v2 agent (§6.2), v2 client (§6.3)
# ---------------------------------------------------------------------------------------


def _raw_to(agent: Any, engine: ModuleType) -> RawPeer:
    return RawPeer(serve_in_memory(agent, engine))


@pytest.mark.seed("S000-86")
def test_v1_agent_selects_v1_for_v2_request_and_normalises(engine: ModuleType) -> None:
    async def body() -> None:
        record: dict[str, Any] = {}
        peer = _raw_to(roles_agent.v1_agent(record), engine)
        params = v2_init(3, capabilities={"auth": {"terminal": {"_meta": {"x": 1}}}, "future": {}},
                         futureField=True)
        reply = await peer.request(1, "initialize", params)
        assert reply["result"]["protocolVersion"] == 1
        seen = record["initialize"][0]
        assert seen == {"protocolVersion": 1, "clientInfo": {"name": "raw-client", "version": "0"},
                        "clientCapabilities": {"auth": {"terminal": True},
                                               "session": {"configOptions": {"boolean": {}}}}}

    run(body)


@pytest.mark.seed("S000-86")
def test_v1_agent_selects_v1_for_version_0(engine: ModuleType) -> None:
    async def body() -> None:
        record: dict[str, Any] = {}
        peer = _raw_to(roles_agent.v1_agent(record), engine)
        reply = await peer.request(1, "initialize", v1_init(0))
        assert reply["result"]["protocolVersion"] == 1
        assert record["initialize"][0]["protocolVersion"] == 1

    run(body)


@pytest.mark.seed("S000-87")
def test_v2_agent_normalises_newer_version_to_2(engine: ModuleType) -> None:
    async def body() -> None:
        record: dict[str, Any] = {}
        peer = _raw_to(roles_agent.v2_agent(record), engine)
        reply = await peer.request(1, "initialize", v2_init(7))
        assert reply["result"]["protocolVersion"] == 2
        assert record["initialize"][0]["protocolVersion"] == 2

    run(body)


def test_v2_agent_response_version_is_pinned_to_2(engine: ModuleType) -> None:
    async def body() -> None:
        agent = Agent.v2().on_request("initialize", lambda p, cx: {
            "protocolVersion": 9, "info": {"name": "a", "version": "1"}})
        peer = _raw_to(agent, engine)
        assert (await peer.request(1, "initialize", v2_init()))["result"]["protocolVersion"] == 2

    run(body)


@pytest.mark.seed("S000-87")
def test_v2_agent_rejects_v1_without_invoking_handler(engine: ModuleType) -> None:
    async def body() -> None:
        record: dict[str, Any] = {}
        peer = _raw_to(roles_agent.v2_agent(record), engine)
        reply = await peer.request(0, "initialize", v1_init())
        assert reply == {"jsonrpc": "2.0", "id": 0, "error": {
            "code": -32022, "message": "Unsupported protocol version",
            "data": {"requested": 1, "supported": [2]}}}
        assert record["initialize"] == []
        # the connection stays open and uninitialized: a v2 initialize now succeeds
        assert error_of(await peer.request(1, "session/new", {"cwd": "/"})) == (-32600, NOT_READY)
        assert (await peer.request(2, "initialize", v2_init()))["result"]["protocolVersion"] == 2

    run(body)


@pytest.mark.seed("S000-93")
def test_v2_agent_malformed_initialize_is_invalid_params(engine: ModuleType) -> None:
    async def body() -> None:
        record: dict[str, Any] = {}
        peer = _raw_to(roles_agent.v2_agent(record), engine)
        for rid, params in enumerate([{"protocolVersion": "2"}, {"info": {}}, {"protocolVersion": 2.0}]):
            assert error_of(await peer.request(rid, "initialize", params)) == (
                -32602, "initialize.protocolVersion must be a valid ACP protocol version")
        code, data = error_of(await peer.request(9, "initialize", {"protocolVersion": 2}))
        assert code == -32602 and data.startswith("invalid initialize params:") and "info" in data
        assert record["initialize"] == []
        assert error_of(await peer.request(10, "session/new", {"cwd": "/"})) == (-32600, NOT_READY)

    run(body)


@pytest.mark.seed("S000-05")
def test_v2_client_always_sends_2(engine: ModuleType) -> None:
    async def body() -> None:
        record: dict[str, Any] = {}
        stream = serve_in_memory(roles_agent.v2_agent(record), engine)

        async def main(cx: Any) -> Any:
            return await cx.initialize({"protocolVersion": 1, "info": {"name": "c", "version": "1"}})

        assert (await Client.v2().connect_with(stream, main, engine=engine))["protocolVersion"] == 2
        assert record["initialize"][0]["protocolVersion"] == 2

    run(body)


@pytest.mark.seed("S000-83", "S000-85")
def test_v2_client_fails_on_v1_answer_and_may_retry(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        agent = RawPeer(a)

        async def main(cx: Any) -> Any:
            sent = cx.initialize()
            msg = await agent.recv()
            assert msg["params"]["protocolVersion"] == 2
            agent.send({"jsonrpc": "2.0", "id": msg["id"], "result": {"protocolVersion": 1}})
            with pytest.raises(JsonRpcError) as info:
                await sent
            assert (info.value.code, info.value.data) == (-32600, V1_ANSWER)
            assert cx.guard.state == "uninitialized"
            retry = cx.initialize()
            msg = await agent.recv()
            agent.send({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "protocolVersion": 2, "info": {"name": "a", "version": "1"}}})
            await retry
            return cx.guard.state

        assert await Client.v2().connect_with(b, main, engine=engine) == "ready"

    run(body)


# ---------------------------------------------------------------------------------------
# the initialization guard on live connections (§5)
# ---------------------------------------------------------------------------------------


def _counting_v2_agent(calls: list[str], **handlers: Any) -> Any:
    agent = Agent.v2()
    agent.on_request("session/new", lambda p, cx: calls.append("session/new") or {"sessionId": "s"})
    agent.on_notification("session/cancel", lambda p, cx: calls.append("session/cancel"))
    for method, fn in handlers.items():
        agent.on_request(method.replace("__", "/"), fn)
    return agent


@pytest.mark.seed("S000-80")
def test_v2_agent_rejects_requests_before_ready(engine: ModuleType) -> None:
    async def body() -> None:
        calls: list[str] = []
        peer = _raw_to(_counting_v2_agent(calls), engine)
        assert error_of(await peer.request("a", "session/new", {"cwd": "/"})) == (-32600, NOT_READY)
        code, data = error_of(await peer.request("b", "unknown/method", {}))
        assert (code, data) == (-32600, "ACP initialization must complete before `unknown/method` can be used")
        assert calls == []

    run(body)


@pytest.mark.seed("S000-80")
def test_v2_agent_drops_notifications_before_ready(engine: ModuleType) -> None:
    async def body() -> None:
        calls: list[str] = []
        peer = _raw_to(_counting_v2_agent(calls), engine)
        peer.notify("session/cancel", {"sessionId": "s"})
        await peer.request(1, "initialize", v2_init())
        peer.notify("session/cancel", {"sessionId": "s"})
        await peer.request(2, "session/new", {"cwd": "/"})
        assert calls == ["session/cancel", "session/new"]

    run(body)


@pytest.mark.seed("S000-84")
def test_v2_agent_rejects_second_initialize_after_ready(engine: ModuleType) -> None:
    async def body() -> None:
        record: dict[str, Any] = {}
        peer = _raw_to(roles_agent.v2_agent(record), engine)
        await peer.request(1, "initialize", v2_init())
        assert error_of(await peer.request(2, "initialize", v2_init())) == (-32600, ONCE)
        assert len(record["initialize"]) == 1
        assert "result" in await peer.request(3, "session/new", {"cwd": "/"})  # still ready

    run(body)


@pytest.mark.seed("S000-84")
def test_v2_agent_rejects_initialize_while_in_progress(engine: ModuleType) -> None:
    async def body() -> None:
        gate = asyncio.Event()

        async def slow_init(params: Any, cx: Any) -> Any:
            await gate.wait()
            return {"protocolVersion": 2, "info": {"name": "a", "version": "1"}}

        peer = _raw_to(Agent.v2().on_request("initialize", slow_init), engine)
        peer.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": v2_init()})
        assert error_of(await peer.request(2, "initialize", v2_init())) == (-32600, IN_PROGRESS)
        gate.set()
        assert (await peer.recv())["id"] == 1

    run(body)


@pytest.mark.seed("S000-81")
def test_cancel_request_passes_only_while_initializing_and_failure_allows_retry(engine: ModuleType) -> None:
    async def body() -> None:
        attempts: list[int] = []

        async def init(params: Any, cx: Any) -> Any:
            attempts.append(1)
            if len(attempts) == 1:
                await cx.wait_cancelled()  # released only by the peer's $/cancel_request
                raise JsonRpcError(-32800)
            return {"protocolVersion": 2, "info": {"name": "a", "version": "1"}}

        observed: list[Any] = []
        agent = Agent.v2().on_request("initialize", init)
        agent.on_notification("$/cancel_request", lambda p, cx: observed.append(p["requestId"]))
        peer = _raw_to(agent, engine)
        peer.notify("$/cancel_request", {"requestId": 0})  # uninitialized: dropped
        peer.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": v2_init()})
        peer.notify("$/cancel_request", {"requestId": 1})  # initializing: passes
        assert error_of(await peer.recv())[0] == -32800
        assert observed == [1]
        assert "result" in await peer.request(2, "initialize", v2_init())  # retry on the same connection
        assert len(attempts) == 2

    run(body)


@pytest.mark.seed("S000-83")
def test_initialize_handler_cannot_defer_and_a_failure_allows_retry(engine: ModuleType) -> None:
    async def body() -> None:
        calls: list[int] = []

        def init(params: Any, cx: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                cx.defer()
            return {"protocolVersion": 2, "info": {"name": "a", "version": "1"}}

        peer = _raw_to(Agent.v2().on_request("initialize", init), engine)
        assert error_of(await peer.request(1, "initialize", v2_init()))[0] == -32603
        assert error_of(await peer.request(2, "session/new", {"cwd": "/"})) == (-32600, NOT_READY)
        assert "result" in await peer.request(3, "initialize", v2_init())

    run(body)


def test_v2_client_guard_refuses_outgoing_traffic_before_ready(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        agent = RawPeer(a)

        async def main(cx: Any) -> Any:
            with pytest.raises(JsonRpcError) as info:
                cx.send_request("session/new", {"cwd": "/"})
            assert (info.value.code, info.value.data) == (-32600, NOT_READY)
            assert cx.send_notification("session/cancel", {"sessionId": "s"}) is False
            sent = cx.initialize()
            first = await agent.recv()  # nothing was written before initialize
            assert first["method"] == "initialize"
            with pytest.raises(JsonRpcError) as info:
                cx.initialize()
            assert info.value.data == IN_PROGRESS
            agent.send({"jsonrpc": "2.0", "id": first["id"], "result": {
                "protocolVersion": 2, "info": {"name": "a", "version": "1"}}})
            await sent
            with pytest.raises(JsonRpcError) as info:
                cx.initialize()
            assert info.value.data == ONCE

        await Client.v2().connect_with(b, main, engine=engine)

    run(body)


@pytest.mark.seed("S000-82")
def test_direction_rules(engine: ModuleType) -> None:
    async def body() -> None:
        # a v2 client answers an incoming initialize with the direction error
        a, b = memory_pair()
        agent = RawPeer(a)

        async def client_main(cx: Any) -> Any:
            return await agent.request(5, "initialize", v2_init())

        reply = await Client.v2().connect_with(b, client_main, engine=engine)
        assert error_of(reply) == (-32600, DIRECTION)

        # a v2 agent cannot send initialize
        failures: list[Any] = []

        def new_session(params: Any, cx: Any) -> Any:
            try:
                cx.send_request("initialize", v2_init())
            except JsonRpcError as exc:
                failures.append(exc.data)
            return {"sessionId": "s"}

        peer = _raw_to(Agent.v2().on_request("session/new", new_session), engine)
        await peer.request(1, "initialize", v2_init())
        await peer.request(2, "session/new", {"cwd": "/"})
        assert failures == [DIRECTION]

    run(body)


def test_v1_builders_are_unchecked(engine: ModuleType) -> None:
    async def body() -> None:
        peer = _raw_to(roles_agent.v1_agent({}), engine)
        assert "result" in await peer.request(1, "session/new", {"cwd": "/", "mcpServers": []})

    run(body)


@pytest.mark.seed("S000-72")
def test_without_acp_version_guard(engine: ModuleType) -> None:
    async def body() -> None:
        agent = Agent.v2().without_acp_version_guard().on_request(
            "initialize", lambda p, cx: {"echo": p["protocolVersion"]})
        peer = _raw_to(agent, engine)
        assert (await peer.request(1, "initialize", v1_init()))["result"] == {"echo": 1}

    run(body)


# ---------------------------------------------------------------------------------------
# wire surfaces: write guard and read gate on live connections
# ---------------------------------------------------------------------------------------


@pytest.mark.seed("S003-06")
def test_write_guard_refuses_variants_the_version_lacks(engine: ModuleType) -> None:
    async def body() -> None:
        results: list[Any] = []

        def new_session(params: Any, cx: Any) -> Any:
            for update in ({"sessionUpdate": "state_update", "state": "idle"},
                           {"sessionUpdate": "plan", "entries": []}):
                try:
                    cx.send_session_update("s", update)
                except WireSurfaceError as exc:
                    results.append((exc.variant, exc.version))
            # a relay may forward what it received, explicitly
            results.append(cx.send_session_update("s", {"sessionUpdate": "state_update", "state": "idle"},
                                                  passthrough=True))
            return {"sessionId": "s"}

        for builder, expected in ((Agent.builder(), [("state_update", 1)]),
                                  (Agent.v2(), [("plan", 2)])):
            results.clear()
            peer = _raw_to(builder.on_request("session/new", new_session), engine)
            await peer.request(1, "initialize", v2_init())
            await peer.request(2, "session/new", {"cwd": "/"})
            assert results == [*expected, True]
            update = await peer.recv()  # only the passthrough update reached the wire
            assert update["params"]["update"]["sessionUpdate"] == "state_update"

    run(body)


def test_write_guard_refuses_methods_the_version_lacks(engine: ModuleType) -> None:
    async def body() -> None:
        async def main(cx: Any) -> Any:
            await cx.initialize()
            with pytest.raises(WireSurfaceError) as info:
                cx.send_request("session/load", {"sessionId": "s", "cwd": "/", "mcpServers": []})
            assert (info.value.variant, info.value.version) == ("session/load", 2)
            assert "ACP v2" in str(info.value)
            cx.send_request("_vendor/ping", {})  # extensions are allowed
            return True

        stream = serve_in_memory(roles_agent.v2_agent({}), engine)
        assert await Client.v2().connect_with(stream, main, engine=engine)

    run(body)


@pytest.mark.seed("S003-03")
def test_read_gate_delivers_other_version_updates_as_passthrough(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        agent = RawPeer(a)
        seen: list[Any] = []
        client = Client.builder().on_session_update(lambda u, cx: seen.append(u))
        state = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}

        async def main(cx: Any) -> Any:
            agent.notify("session/update", {"sessionId": "s", "update": state})
            agent.notify("session/update", {"sessionId": "s", "update": {"sessionUpdate": "_vendor_x", "k": 1}})
            agent.notify("session/update", {"sessionId": "s", "update": {
                "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "t"}}})
            while len(seen) < 3:
                await asyncio.sleep(0)

        await client.connect_with(b, main, engine=engine)
        assert [(u.kind, u.view.status, u.passthrough) for u in seen] == [
            ("state_update", "other_version", True), ("_vendor_x", "unknown", True),
            ("agent_message_chunk", "known", False)]
        assert seen[0].payload == state  # preserved verbatim

    run(body)


def test_session_update_fast_path_view_equals_the_full_read_gate(engine: ModuleType) -> None:
    """Known updates skip building the view; reading ``view`` gives what the gate gives."""
    async def body() -> None:
        a, b = memory_pair()
        agent = RawPeer(a)
        seen: list[Any] = []
        contexts: list[Any] = []

        def on_update(u: Any, cx: Any) -> None:
            seen.append(u)
            contexts.append(cx)

        client = Client.builder().on_session_update(on_update)
        updates = [
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "t"}},
            {"sessionUpdate": "tool_call_update", "toolCallId": "c",
             "content": [{"type": "diff", "changes": []}]},  # the v2 diff shape: passthrough
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}},  # malformed
        ]

        async def main(cx: Any) -> Any:
            for update in updates:
                agent.notify("session/update", {"sessionId": "s", "update": update})
            while len(seen) < len(updates):
                await asyncio.sleep(0)
            return cx

        acp = await client.connect_with(b, main, engine=engine)
        fields = ("kind", "status", "version", "type_name", "tier", "defined_in", "detail")
        for u in seen:
            full = acp.surface._classify_full(u.payload)
            assert u.view is u.view  # built once
            assert u.view.payload is u.payload
            assert [getattr(u.view, f) for f in fields] == [getattr(full, f) for f in fields]
            assert (u.kind, u.known, u.passthrough, u.session_id) == (
                full.kind, full.status == "known", full.status != "known", "s")
        assert [u.view.status for u in seen] == ["known", "other_version", "malformed"]
        assert all(type(cx) is Context and cx.connection is acp and cx.request is None
                   and cx.method == "session/update" for cx in contexts)
        assert len({id(cx) for cx in contexts}) == len(contexts)  # one per notification
        # the fast path is the gate of the hot path's twin, whichever engine twin decodes
        # (the compiled hot path calls the compiled gate at C level)
        gate = acp.dispatch.session_update.gate
        compiled = _hot.IMPLEMENTATION == "c"
        assert type(gate) is (importlib.import_module("acp_fast.protocol._gate_c").Gate if compiled else SurfaceGate)
        assert acp.send_session_update.gate is gate

    run(body)


@pytest.mark.seed("S000-89")
def test_no_conversion_after_negotiation(engine: ModuleType) -> None:
    async def body() -> None:
        peer = RawPeer(serve_in_memory(roles_agent.build("router"), engine))
        assert (await peer.request(1, "initialize", v2_init()))["result"]["protocolVersion"] == 2
        # a v1-only method on a v2 connection reaches no v1 handler: method not found
        reply = await peer.request(2, "session/load", {"sessionId": "s", "cwd": "/", "mcpServers": []})
        assert error_of(reply) == (-32601, "session/load")

    run(body)


# ---------------------------------------------------------------------------------------
# agent router (§6.4) and batches (§2.17)
# ---------------------------------------------------------------------------------------


@pytest.mark.seed("S000-90")
def test_router_picks_highest_configured_version_at_or_below(engine: ModuleType) -> None:
    async def body() -> None:
        for mode, requested, params, version, seen_keys in (
            ("router", 3, v2_init(3, extra=1), 2, {"protocolVersion", "info", "capabilities"}),
            ("router", 1, v1_init(1), 1, {"protocolVersion", "clientInfo"}),
            ("router-v1", 2, v2_init(2), 1, {"protocolVersion", "clientInfo", "clientCapabilities"}),
            ("router-v1", 0, v1_init(0), 1, {"protocolVersion", "clientInfo"}),
        ):
            record: dict[str, Any] = {}
            peer = RawPeer(serve_in_memory(roles_agent.build(mode, record), engine))
            reply = await peer.request(1, "initialize", params)
            assert reply["result"]["protocolVersion"] == version, (mode, requested)
            assert set(record["initialize"][0]) == seen_keys, (mode, requested)

    run(body)


@pytest.mark.seed("S000-90")
def test_router_normalises_a_v2_request_for_the_v1_implementation(engine: ModuleType) -> None:
    async def body() -> None:
        seen: list[Any] = []
        raw_v1 = Agent.builder().without_acp_version_guard().on_request(
            "initialize", lambda p, cx: seen.append(p) or {"protocolVersion": 1})
        peer = RawPeer(serve_in_memory(Agent.protocol_router().with_v1(raw_v1), engine))
        await peer.request(1, "initialize", v2_init(2, capabilities={"auth": {"terminal": {}}}))
        assert seen == [{"protocolVersion": 1, "clientInfo": {"name": "raw-client", "version": "0"},
                         "clientCapabilities": {"auth": {"terminal": True},
                                                "session": {"configOptions": {"boolean": {}}}}}]

    run(body)


def test_router_exact_version_params_reach_implementation_unchanged(engine: ModuleType) -> None:
    async def body() -> None:
        record: dict[str, Any] = {}
        peer = RawPeer(serve_in_memory(roles_agent.build("router", record), engine))
        params = v2_init(2, capabilities={"future": {"x": [1]}}, _meta={"m": 1}, unknownField="kept")
        await peer.request(1, "initialize", params)
        assert record["initialize"][0] == params

    run(body)


@pytest.mark.seed("S000-90")
@pytest.mark.parametrize("mode, requested, supported", [("router-v2", 1, [2]), ("router", 0, [1, 2])])
def test_router_rejects_with_32022_and_closes(engine: ModuleType, mode: str, requested: int,
                                               supported: list[int]) -> None:
    async def body() -> None:
        record: dict[str, Any] = {}
        peer = RawPeer(serve_in_memory(roles_agent.build(mode, record), engine))
        reply = await peer.request("x", "initialize", v1_init(requested))
        assert reply["id"] == "x" and error_of(reply) == (-32022, {"requested": requested, "supported": supported})
        await peer.closed()
        assert record["initialize"] == []

    run(body)


def test_router_first_request_must_be_initialize(engine: ModuleType) -> None:
    async def body() -> None:
        peer = RawPeer(serve_in_memory(roles_agent.build("router"), engine))
        reply = await peer.request(4, "session/new", {"cwd": "/"})
        assert (reply["id"], *error_of(reply)) == (4, -32600, "first ACP request must be initialize")
        await peer.closed()

    run(body)


def test_router_first_notification_closes_silently(engine: ModuleType) -> None:
    async def body() -> None:
        peer = RawPeer(serve_in_memory(roles_agent.build("router"), engine))
        peer.notify("session/cancel", {"sessionId": "s"})
        await peer.closed()
        assert peer.lines.get_nowait() is EOFError  # no reply at all

    run(body)


@pytest.mark.seed("S000-92")
def test_router_ignores_response_only_frames_before_initialize(engine: ModuleType) -> None:
    async def body() -> None:
        peer = RawPeer(serve_in_memory(roles_agent.build("router"), engine))
        peer.send({"jsonrpc": "2.0", "id": 99, "result": None})
        peer.send([{"jsonrpc": "2.0", "id": 98, "result": None}])
        assert (await peer.request(1, "initialize", v2_init()))["result"]["protocolVersion"] == 2

    run(body)


@pytest.mark.seed("S000-02", "S000-91")
def test_router_batch_with_initialize_first_is_handed_over_whole(engine: ModuleType) -> None:
    async def body() -> None:
        calls: list[str] = []
        v2 = roles_agent.v2_agent({})
        v2.on_notification("_test/note", lambda p, cx: calls.append(p["n"]))
        peer = RawPeer(serve_in_memory(Agent.protocol_router().with_v2(v2), engine))
        peer.send([{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": v2_init(3)},
                   {"jsonrpc": "2.0", "method": "_test/note", "params": {"n": 7}}])
        reply = await peer.recv()
        assert isinstance(reply, list) and reply[0]["id"] == 1 and reply[0]["result"]["protocolVersion"] == 2
        assert calls == [7]

    run(body)


def test_router_batch_rejection_answers_every_call(engine: ModuleType) -> None:
    async def body() -> None:
        peer = RawPeer(serve_in_memory(roles_agent.build("router-v2"), engine))
        peer.send([{"jsonrpc": "2.0", "id": 99, "result": None},
                   {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": v1_init()},
                   {"jsonrpc": "2.0", "id": 2, "method": "session/list", "params": {}},
                   {"jsonrpc": "2.0", "method": "_test/note"},
                   17])
        reply = await peer.recv()
        data = {"requested": 1, "supported": [2]}
        assert [(r["id"], *error_of(r)) for r in reply] == [
            (1, -32022, data), (2, -32022, data), (None, -32600, reply[2]["error"].get("data"))]
        await peer.closed()

    run(body)


def test_router_batch_validation_error_goes_to_every_call(engine: ModuleType) -> None:
    async def body() -> None:
        peer = RawPeer(serve_in_memory(roles_agent.build("router"), engine))
        peer.send([{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 2}},
                   {"jsonrpc": "2.0", "id": 2, "method": "session/list", "params": {}}])
        reply = await peer.recv()
        assert [(r["id"], r["error"]["code"]) for r in reply] == [(1, -32602), (2, -32602)]
        await peer.closed()

    run(body)


def test_router_batch_not_starting_with_initialize_is_rejected(engine: ModuleType) -> None:
    async def body() -> None:
        peer = RawPeer(serve_in_memory(roles_agent.build("router"), engine))
        peer.send([{"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}},
                   {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": v2_init()}])
        reply = await peer.recv()
        assert [(r["id"], *error_of(r)) for r in reply] == [
            (1, -32600, "first ACP request must be initialize"),
            (2, -32600, "first ACP request must be initialize")]
        await peer.closed()

    run(body)


# ---------------------------------------------------------------------------------------
# client protocol connector (§6.6)
# ---------------------------------------------------------------------------------------


def _connector_clients(log: list[Any], v1_params: dict[str, Any] | None = None) -> Any:
    def v2_client() -> Any:
        async def main(cx: Any) -> Any:
            log.append(("v2-start",))
            init = await cx.initialize({"info": {"name": "ed", "version": "1"}})
            opened = await cx.build_session("/")
            return 2, init["protocolVersion"], opened.session.session_id
        return Client.v2().with_main(main)

    def v1_client() -> Any:
        async def main(cx: Any) -> Any:
            log.append(("v1-start",))
            init = await cx.initialize(v1_params if v1_params is not None else {
                "clientInfo": {"name": "ed", "version": "1"},
                "clientCapabilities": {"auth": {"terminal": False},
                                       "session": {"configOptions": {"boolean": {}}}}})
            session = (await cx.build_session("/")).session
            return 1, init["protocolVersion"], session.session_id
        return Client.builder().with_main(main)

    return v1_client, v2_client


def test_connector_uses_v2_with_a_v2_agent(engine: ModuleType) -> None:
    async def body() -> None:
        log: list[Any] = []
        v1, v2 = _connector_clients(log)
        opened: list[Any] = []

        def transport() -> Any:
            opened.append(1)
            return serve_in_memory(roles_agent.build("router"), engine)

        result = await Client.protocol_connector().with_v1(v1).with_v2(v2).run(transport, engine=engine)
        assert result == (2, 2, "v2-session") and opened == [1] and log == [("v2-start",)]

    run(body)


@pytest.mark.seed("S000-96")
def test_connector_falls_back_and_reuses_the_connection(engine: ModuleType) -> None:
    async def body() -> None:
        log: list[Any] = []
        record: dict[str, Any] = {}
        v1, v2 = _connector_clients(log)
        opened: list[Any] = []

        def transport() -> Any:
            opened.append(1)
            return serve_in_memory(roles_agent.v1_agent(record), engine)

        result = await Client.protocol_connector().with_v1(v1).with_v2(v2).run(transport, engine=engine)
        assert result == (1, 1, "v1-session")
        assert opened == [1] and len(record["initialize"]) == 1  # no second initialize
        assert log == [("v2-start",), ("v1-start",)]

    run(body)


@pytest.mark.seed("S000-96")
def test_connector_falls_back_on_a_fresh_connection_when_params_differ(engine: ModuleType) -> None:
    async def body() -> None:
        log: list[Any] = []
        records: list[dict[str, Any]] = []
        v1, v2 = _connector_clients(log, v1_params={"clientInfo": {"name": "other", "version": "9"}})

        def transport() -> Any:
            records.append({})
            return serve_in_memory(roles_agent.v1_agent(records[-1]), engine)

        result = await Client.protocol_connector().with_v1(v1).with_v2(v2).run(transport, engine=engine)
        assert result == (1, 1, "v1-session") and len(records) == 2
        assert records[1]["initialize"][0]["clientInfo"] == {"name": "other", "version": "9"}
        assert log == [("v2-start",), ("v1-start",), ("v1-start",)]

    run(body)


@pytest.mark.seed("S000-94", "S000-96")
def test_connector_surfaces_a_v2_rejection(engine: ModuleType) -> None:
    async def body() -> None:
        log: list[Any] = []
        v1, _ = _connector_clients(log)
        opened: list[Any] = []

        def v2() -> Any:
            async def main(cx: Any) -> Any:
                with pytest.raises(JsonRpcError) as info:
                    await cx.initialize()
                return info.value.code
            return Client.v2().with_main(main)

        def transport() -> Any:
            opened.append(1)
            agent = Agent.v2().on_request("initialize", lambda p, cx: (_ for _ in ()).throw(
                JsonRpcError.unsupported_protocol_version(2, [1])))
            return serve_in_memory(agent, engine)

        result = await Client.protocol_connector().with_v1(v1).with_v2(v2).run(transport, engine=engine)
        assert result == -32022 and opened == [1] and log == []

    run(body)


def test_connector_does_not_fall_back_on_other_versions(engine: ModuleType) -> None:
    async def body() -> None:
        log: list[Any] = []
        v1, _ = _connector_clients(log)

        def v2() -> Any:
            async def main(cx: Any) -> Any:
                with pytest.raises(JsonRpcError) as info:
                    await cx.initialize()
                return info.value.code
            return Client.v2().with_main(main)

        def transport() -> Any:
            agent = Agent.v2().without_acp_version_guard().on_request("initialize", lambda p, cx: {
                "protocolVersion": 3, "info": {"name": "a", "version": "1"}})
            return serve_in_memory(agent, engine)

        result = await Client.protocol_connector().with_v1(v1).with_v2(v2).run(transport, engine=engine)
        assert result == -32600 and log == []

    run(body)


def test_connector_without_implementations_and_initialize_first(engine: ModuleType) -> None:
    async def body() -> None:
        with pytest.raises(JsonRpcError) as info:
            await Client.protocol_connector().run(lambda: None)
        assert info.value.data == "client protocol connector has no configured ACP protocol implementations"

        async def main(cx: Any) -> Any:
            with pytest.raises(JsonRpcError) as info:
                cx.send_request("session/new", {"cwd": "/"})
            return info.value.data

        result = await Client.protocol_connector().with_v2(lambda: Client.v2().with_main(main)).run(
            lambda: serve_in_memory(roles_agent.v2_agent({}), engine), engine=engine)
        assert result == "ACP protocol version 2 client implementation must send initialize first"

    run(body)


# ---------------------------------------------------------------------------------------
# proxies (§5.11, §6.7)
# ---------------------------------------------------------------------------------------


@pytest.mark.seed("S000-66", "S000-70", "S004-12")
def test_proxy_rejects_plain_initialize_and_forwards_proxy_initialize(engine: ModuleType) -> None:
    async def body() -> None:
        conductor = RawPeer(serve_in_memory(Proxy.v2(), engine))
        code, data = error_of(await conductor.request(1, "initialize", v2_init()))
        assert code == -32600 and data.startswith("proxy initialization must arrive as `_proxy/initialize`")
        conductor.send({"jsonrpc": "2.0", "id": 2, "method": "_proxy/initialize", "params": v2_init()})
        wrapped = await conductor.recv()  # forwarded to the successor, version pinned
        assert wrapped["method"] == "_proxy/successor"
        assert wrapped["params"]["method"] == "initialize" and wrapped["params"]["params"]["protocolVersion"] == 2
        conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "result": {
            "protocolVersion": 2, "info": {"name": "agent", "version": "1"}}})
        reply = await conductor.recv()
        assert reply["id"] == 2 and reply["result"]["info"]["name"] == "agent"
        # later traffic: predecessor -> successor wrapped, successor -> predecessor plain
        conductor.send({"jsonrpc": "2.0", "id": 3, "method": "session/new", "params": {"cwd": "/"}})
        wrapped = await conductor.recv()
        assert wrapped["params"] == {"method": "session/new", "params": {"cwd": "/"}}
        conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "result": {"sessionId": "s"}})
        assert (await conductor.recv()) == {"jsonrpc": "2.0", "id": 3, "result": {"sessionId": "s"}}
        update = {"sessionId": "s", "update": {"sessionUpdate": "_vendor", "x": 1}}
        conductor.notify("_proxy/successor", {"method": "session/update", "params": update})
        assert await conductor.recv() == {"jsonrpc": "2.0", "method": "session/update", "params": update}
        conductor.send({"jsonrpc": "2.0", "id": "w1", "method": "_proxy/successor", "params": {
            "method": "session/request_permission", "params": {"sessionId": "s"}}})
        plain = await conductor.recv()
        assert plain["method"] == "session/request_permission" and plain["params"] == {"sessionId": "s"}
        conductor.send({"jsonrpc": "2.0", "id": plain["id"], "result": {"outcome": {"outcome": "cancelled"}}})
        assert await conductor.recv() == {"jsonrpc": "2.0", "id": "w1", "result": {"outcome": {"outcome": "cancelled"}}}

    run(body)


@pytest.mark.seed("S000-71", "S004-17")
def test_proxy_answers_the_spec_spelling_in_that_spelling(engine: ModuleType) -> None:
    """``proxy/initialize`` (the spec spelling) is accepted, by the builder and the router, and
    the successor is then addressed as ``proxy/successor``; both envelopes are read."""
    async def body() -> None:
        for served in (Proxy.v2(), Proxy.protocol_router().with_v2(Proxy.v2())):
            conductor = RawPeer(serve_in_memory(served, engine))
            conductor.send({"jsonrpc": "2.0", "id": 1, "method": "proxy/initialize", "params": v2_init()})
            wrapped = await conductor.recv()
            assert wrapped["method"] == "proxy/successor" and wrapped["params"]["method"] == "initialize"
            conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "result": {
                "protocolVersion": 2, "info": {"name": "agent", "version": "1"}}})
            assert (await conductor.recv())["id"] == 1
            conductor.send({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/"}})
            wrapped = await conductor.recv()
            assert wrapped["method"] == "proxy/successor"
            conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "result": {"sessionId": "s"}})
            assert (await conductor.recv())["result"] == {"sessionId": "s"}
            for envelope in ("proxy/successor", "_proxy/successor"):  # either spelling is read
                update = {"sessionId": "s", "update": {"sessionUpdate": "_vendor", "via": envelope}}
                conductor.notify(envelope, {"method": "session/update", "params": update})
                assert (await conductor.recv())["params"] == update

    run(body)


@pytest.mark.parametrize("registered", ["_proxy/initialize", "proxy/initialize"])
def test_proxy_initialize_handler_serves_both_spellings_and_cannot_defer(engine: ModuleType, registered: str) -> None:
    """A proxy's own initialize handler, registered under either spelling, answers the
    conductor's spelling whichever it is; deferring it is refused (-32603) in both, and the
    proxy can then still be initialized (the guard saw the failure)."""
    async def one(incoming: str) -> None:
        calls: list[str] = []

        async def init(params: Any, cx: Any) -> Any:
            calls.append(cx.method)
            if len(calls) == 1:
                cx.defer()
            return await cx.connection.send_to_successor("initialize", params)

        conductor = RawPeer(serve_in_memory(Proxy.v2().on_request(registered, init), engine))
        assert error_of(await conductor.request(1, incoming, v2_init()))[0] == -32603
        conductor.send({"jsonrpc": "2.0", "id": 2, "method": incoming, "params": v2_init()})
        wrapped = await conductor.recv()
        assert wrapped["params"]["method"] == "initialize"
        assert wrapped["method"] == ("proxy/successor" if incoming == "proxy/initialize" else "_proxy/successor")
        conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "result": {
            "protocolVersion": 2, "info": {"name": "agent", "version": "1"}}})
        assert (await conductor.recv())["result"]["protocolVersion"] == 2
        assert calls == [incoming, incoming]

    async def body() -> None:
        for incoming in ("_proxy/initialize", "proxy/initialize"):
            await one(incoming)

    run(body)


def test_proxy_unwraps_a_successor_notification_to_method_and_params_only(engine: ModuleType) -> None:
    """Whatever else a successor notification's envelope params hold (the envelope's hop-local
    ``_meta``, another member, whitespace, an escaped method, members in another order), the
    predecessor gets ``{"jsonrpc", "method", "params"}`` only; the inner ``params._meta`` stays."""
    async def body() -> None:
        conductor = RawPeer(serve_in_memory(Proxy.v2(), engine))
        conductor.send({"jsonrpc": "2.0", "id": 1, "method": "_proxy/initialize", "params": v2_init()})
        wrapped = await conductor.recv()
        conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "result": {
            "protocolVersion": 2, "info": {"name": "agent", "version": "1"}}})
        assert (await conductor.recv())["id"] == 1
        params = b'{"sessionId":"s","update":{"sessionUpdate":"_vendor","x":[1,"\\u00e9 \xc3\xa9"]},"_meta":{"inner":1}}'
        envelopes = [
            b'{"method":"session/update","params":' + params + b"}",
            b'{"params":' + params + b',"method":"session/update"}',
            b'{"method":"_vendor/ping"}',
            b'{"method":"session/update","params":' + params + b',"_meta":{"hop":1}}',
            b'{"method":"session/update","params":' + params + b',"x":1}',
            b'{ "method": "session/update", "params": ' + params + b" }",
            b'{"method":"session\\/update","params":' + params + b"}",
        ]
        for envelope in envelopes:
            conductor.send_raw(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":' + envelope + b"}")
            inner = json.loads(envelope)
            expected = {"jsonrpc": "2.0", "method": inner["method"]}
            if "params" in inner:
                expected["params"] = inner["params"]
            assert await conductor.recv() == expected, envelope

    run(body)


@pytest.mark.seed("S004-10")
def test_proxy_cancellation_is_hop_local(engine: ModuleType) -> None:
    async def body() -> None:
        conductor = RawPeer(serve_in_memory(Proxy.builder(), engine))
        conductor.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                        "params": {"sessionId": "s", "prompt": []}})
        wrapped = await conductor.recv()
        conductor.notify("$/cancel_request", {"requestId": 3})
        cancel = await conductor.recv()  # the proxy cancels its own downstream request id
        assert cancel == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": wrapped["id"]}}
        conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "error": {"code": -32800, "message": "Request cancelled"}})
        assert error_of(await conductor.recv())[0] == -32800

    run(body)


@pytest.mark.seed("S000-70", "S000-71", "S000-95")
def test_proxy_v2_rejects_v1_and_proxy_router_requires_exact_match(engine: ModuleType) -> None:
    async def body() -> None:
        conductor = RawPeer(serve_in_memory(Proxy.v2(), engine))
        assert error_of(await conductor.request(1, "_proxy/initialize", v1_init())) == (
            -32600, "unsupported ACP protocol version 1; this proxy supports ACP protocol version 2")
        router = Proxy.protocol_router().with_v2(Proxy.v2())
        conductor = RawPeer(serve_in_memory(router, engine))
        assert error_of(await conductor.request(1, "_proxy/initialize", v2_init(3))) == (
            -32600, "unsupported ACP protocol version 3; this proxy supports ACP protocol version(s) 2")
        await conductor.closed()
        conductor = RawPeer(serve_in_memory(Proxy.protocol_router().with_v1(Proxy.builder()), engine))
        assert error_of(await conductor.request(1, "initialize", v1_init())) == (
            -32600, "first ACP proxy request must be `_proxy/initialize`")

    run(body)


# ---------------------------------------------------------------------------------------
# builder API details and start-up cost
# ---------------------------------------------------------------------------------------


def test_handlers_by_method_or_schema_type_name_and_decorator(engine: ModuleType) -> None:
    agent = Agent.v2()

    @agent.on_request("PromptRequest")
    def prompt(params: Any, cx: Any) -> Any:
        return {"messageId": "m"}

    agent.on_notification("CancelSessionNotification", lambda p, cx: None)
    assert agent._requests["session/prompt"] is prompt
    assert "session/cancel" in agent._notifications
    with pytest.raises(ValueError):  # the v1 type name does not bind on a v2 builder
        agent.on_notification("CancelNotification", print)
    assert "session/cancel" in Agent.builder().on_notification("CancelNotification", print)._notifications
    assert "session/update" in Client.v2().on_notification("UpdateSessionNotification", print)._notifications
    assert "session/update" in Client.builder().on_notification("SessionNotification", print)._notifications
    with pytest.raises(ValueError):
        agent.on_request("NoSuchRequest", print)
    with pytest.raises(TypeError):
        Agent.protocol_router().with_v2(Agent.builder())


def test_serve_serves_until_closed_and_connect_with_closes(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        served = asyncio.ensure_future(roles_agent.v2_agent({}).serve(a, engine=engine))

        async def main(cx: Any) -> Any:
            await cx.initialize()
            assert not served.done()
            return "done"

        assert await Client.v2().connect_with(b, main, engine=engine) == "done"
        await served  # the agent returns once the client closed

    run(body)


def test_import_acp_fast_does_not_load_the_api_layer() -> None:
    code = (
        "import sys, acp_fast\n"
        "lazy = [m for m in ('acp_fast.roles', 'acp_fast.jsonrpc', "
        "'acp_fast.protocol.negotiation', 'acp_fast.protocol.guard', 'acp_fast.protocol.types_v1', "
        "'acp_fast.protocol.types_v2', 'asyncio') if m in sys.modules]\n"
        "assert not lazy, lazy\n"
        "assert acp_fast.Agent.v2 and acp_fast.run_agent_stdio\n"
        "assert 'acp_fast.protocol.types_v2' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
