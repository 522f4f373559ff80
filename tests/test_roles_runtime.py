"""What a running connection adds to its builder's handlers (seed 000): handlers added at run
time (``add_dynamic_handler``), child connections spawned from a handler with their own
builder (``spawn_connection``), and the proxy-side session setup helper
(``on_proxy_session_start``).

Every test runs on both engine twins (the ``engine`` fixture); wire-level assertions use a
raw JSON-line peer.
"""

from __future__ import annotations

import asyncio
import json
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


@pytest.mark.seed("S000-42")
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


@pytest.mark.seed("S000-42")
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


@pytest.mark.seed("S000-43")
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
# the successor side of a proxy: the same dispatch, its own handlers and before
# ---------------------------------------------------------------------------------------


def _wrapped(method: str, params: Any, rid: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": "_proxy/successor", "params": {"method": method, "params": params}}
    if rid is not None:
        msg["id"] = rid
    return msg


def test_dynamic_handlers_on_a_proxys_successor_side(engine: ModuleType) -> None:
    """``add_dynamic_handler(..., from_successor=True)`` reaches what the successor sends
    (unwrapped): asked before the builder's ``on_successor_request`` handler, passing on with
    NOT_HANDLED to it and then to the forwarding; a handler of the predecessor's side never
    sees the successor's messages, nor the other way round; removed, the message is forwarded."""
    from acp_fast.roles import Proxy

    async def body() -> None:
        seen: list[Any] = []
        added: list[Any] = []
        proxy = Proxy.v2().on_successor_request("_x/ask", lambda p, cx: {"from": "builder"})

        @proxy.on_request("_x/install")
        def install(params: Any, cx: Any) -> Any:
            conn = cx.connection
            added.append(conn.add_dynamic_handler(
                "_x/ask", lambda p, cx: {"from": "dynamic", "method": cx.method, "id": cx.id} if p.get("mine")
                else NOT_HANDLED, from_successor=True))
            added.append(conn.add_dynamic_handler("_x/only", lambda p, cx: {"dynamic": p["n"]}, from_successor=True))
            added.append(conn.add_dynamic_handler(
                "_x/note", lambda p, cx: NOT_HANDLED if seen.append((cx.method, p)) or p["pass"] else None,
                kind="notification", from_successor=True))
            return {}

        conductor = RawPeer(serve_in_memory(proxy, engine))
        await _proxy_ready(conductor)
        assert (await conductor.request(1, "_x/install", {}))["result"] == {}
        conductor.send(_wrapped("_x/ask", {"mine": True}, rid=20))
        assert await conductor.recv() == {"jsonrpc": "2.0", "id": 20,
                                          "result": {"from": "dynamic", "method": "_x/ask", "id": 20}}
        conductor.send(_wrapped("_x/ask", {}, rid=21))  # passed on to the builder's handler
        assert await conductor.recv() == {"jsonrpc": "2.0", "id": 21, "result": {"from": "builder"}}
        conductor.send(_wrapped("_x/only", {"n": 3}, rid=22))
        assert await conductor.recv() == {"jsonrpc": "2.0", "id": 22, "result": {"dynamic": 3}}
        conductor.send(_wrapped("_x/note", {"pass": False}))  # taken: nothing goes out
        conductor.send(_wrapped("_x/note", {"pass": True}))  # passed on: forwarded to the predecessor
        assert await conductor.recv() == {"jsonrpc": "2.0", "method": "_x/note", "params": {"pass": True}}
        assert seen == [("_x/note", {"pass": False}), ("_x/note", {"pass": True})]
        # the predecessor's _x/only is not the successor's: forwarded to the successor, wrapped
        conductor.send({"jsonrpc": "2.0", "id": 23, "method": "_x/only", "params": {"n": 4}})
        out = await conductor.recv()
        assert out["method"] == "_proxy/successor" and out["params"] == {"method": "_x/only", "params": {"n": 4}}
        conductor.send({"jsonrpc": "2.0", "id": out["id"], "result": "downstream"})
        assert await conductor.recv() == {"jsonrpc": "2.0", "id": 23, "result": "downstream"}
        for handler in added:
            handler.remove()
        conductor.send(_wrapped("_x/only", {"n": 5}, rid=24))  # no handler left: forwarded plain
        out = await conductor.recv()
        assert out["method"] == "_x/only" and out["params"] == {"n": 5} and out["id"] != 24
        conductor.send({"jsonrpc": "2.0", "id": out["id"], "result": "upstream"})
        assert await conductor.recv() == {"jsonrpc": "2.0", "id": 24, "result": "upstream"}

    run(body)


def test_only_a_proxy_has_a_successor_side_and_it_takes_what_a_client_receives(engine: ModuleType) -> None:
    from acp_fast.roles import Proxy

    async def body() -> None:
        a, b = memory_pair()
        agent = Agent.v2().bind(Connection(a, engine=engine))
        with pytest.raises(ValueError, match="successor side"):
            agent.add_dynamic_handler("_x/any", lambda p, cx: None, from_successor=True)
        c, d = memory_pair()
        proxy = Proxy.v2().bind(Connection(c, engine=engine, lazy=True))
        with pytest.raises(ValueError, match="from its successor"):  # an agent-side method
            proxy.add_dynamic_handler("session/prompt", lambda p, cx: None, from_successor=True)
        with pytest.raises(ValueError, match="initialization guard"):
            proxy.add_dynamic_handler("_proxy/initialize", lambda p, cx: None, from_successor=True)
        proxy.add_dynamic_handler("session/request_permission", lambda p, cx: None, from_successor=True).remove()
        for conn in (agent, proxy):
            conn.close()
        for stream in (b, d):
            stream.close()

    run(body)


def test_a_dynamic_handler_of_the_successor_side_sees_routes_settled_by_its_before(engine: ModuleType) -> None:
    """The successor side's ``before`` (a proxy settling the routes of answered session
    setups) runs ahead of its dynamic handlers too: an update that arrives in the same read
    as the setup's response finds the route active."""
    async def body() -> None:
        record: dict[str, Any] = {}
        a, b = memory_pair()
        conn = _session_proxy(record).bind(Connection(a, engine=engine, lazy=True))
        routes: list[Any] = []

        def update(params: Any, cx: Any) -> Any:
            route = cx.connection.proxy_sessions.get(params["sessionId"])
            routes.append((cx.method, route.state if route else None))
            return None  # taken: the builder's handler does not see it

        conn.add_dynamic_handler("session/update", update, kind="notification", from_successor=True)
        conductor = RawPeer(b)
        await _proxy_ready(conductor)
        conductor.send({"jsonrpc": "2.0", "id": 10, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}})
        wrapped = await conductor.recv()
        conductor.stream.write((json.dumps({"jsonrpc": "2.0", "id": wrapped["id"], "result": {"sessionId": "s1"}})
                                + "\n" + json.dumps(_update("s1")) + "\n").encode())
        assert await conductor.recv() == {"jsonrpc": "2.0", "id": 10, "result": {"sessionId": "s1"}}
        for _ in range(10):
            await asyncio.sleep(0)
        assert routes == [("session/update", "active")]
        assert record["routes_seen"] == []  # the dynamic handler took it
        conn.close()

    run(body)


def test_a_successor_sides_before_runs_ahead_of_its_handlers_and_not_of_what_it_forwards(engine: ModuleType) -> None:
    """The successor side is a side of the one dispatch, with its own ``before`` (here a
    recording one in place of the proxy's): it runs before every handler of that side,
    builder's or dynamic, requests and notifications, never for what the side forwards, and
    never for the predecessor's messages."""
    import dataclasses

    from acp_fast.roles import Proxy
    from acp_fast.roles.dispatch import Rules
    from acp_fast.roles.proxy import ProxyConnection

    events: list[Any] = []

    class Recorded(ProxyConnection[int]):
        def _rules(self) -> Rules:
            rules = super()._rules()
            assert rules.successor is not None
            successor = dataclasses.replace(rules.successor, before=lambda: events.append("before"))
            return dataclasses.replace(rules, successor=successor)

    async def body() -> None:
        builder = (Proxy.v2().on_successor_notification("_x/built", lambda p, cx: events.append("built"))
                   .on_successor_request("_x/ask", lambda p, cx: events.append("ask") or {})
                   .on_notification("_x/from-predecessor", lambda p, cx: events.append("predecessor")))
        a, b = memory_pair()
        conn = Recorded(Connection(a, engine=engine, lazy=True), builder.table())
        conn.add_dynamic_handler("_x/dyn", lambda p, cx: events.append("dynamic"), kind="notification",
                                 from_successor=True)
        conductor = RawPeer(b)
        await _proxy_ready(conductor)
        events.clear()
        conductor.send(_wrapped("_x/built", {}))
        conductor.send(_wrapped("_x/dyn", {}))
        conductor.send(_wrapped("_x/forwarded", {"k": 1}))
        conductor.send({"jsonrpc": "2.0", "method": "_x/from-predecessor", "params": {}})
        conductor.send(_wrapped("_x/ask", {}, rid=5))
        assert await conductor.recv() == {"jsonrpc": "2.0", "method": "_x/forwarded", "params": {"k": 1}}
        assert await conductor.recv() == {"jsonrpc": "2.0", "id": 5, "result": {}}
        assert events == ["before", "built", "before", "dynamic", "predecessor", "before", "ask"]
        conn.close()

    run(body)


# ---------------------------------------------------------------------------------------
# nested connections
# ---------------------------------------------------------------------------------------


@pytest.mark.seed("S000-40")
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


@pytest.mark.seed("S000-41")
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


# ---------------------------------------------------------------------------------------
# on_proxy_session_start
# ---------------------------------------------------------------------------------------


def _session_proxy(record: dict[str, Any]) -> Any:
    """A v2 proxy whose setup handlers use on_proxy_session_start; it records, for every
    update from the successor, whether that session's route existed when it was dispatched,
    and what its callbacks got."""
    from acp_fast.roles import Proxy

    proxy = Proxy.v2()
    record.setdefault("routes_seen", [])
    record.setdefault("opened", [])

    async def started(opened: Any) -> None:
        session, response = opened.into_parts()
        record["opened"].append((session.session_id, response))
        if response.get("_meta", {}).get("prompt_from_callback"):
            # the handle sends downstream, to the successor
            record["callback_prompt"] = await session.send_prompt("from the proxy")

    for method, make in (("session/new", "build_session_from"), ("session/resume", "resume_session_from"),
                         ("session/fork", "fork_session_from")):
        def handler(params: Any, cx: Any, make: str = make) -> Any:
            return getattr(cx.connection, make)(params).on_proxy_session_start(cx, started)
        proxy.on_request(method, handler)

    @proxy.on_notification("_x/probe")  # from the predecessor
    def probe(params: Any, cx: Any) -> None:
        route = cx.connection.proxy_sessions.get(params["sessionId"])
        record["routes_seen"].append(("probe:" + params["sessionId"], route.state if route else None))

    @proxy.on_successor_notification("session/update")
    def update(params: Any, cx: Any) -> None:
        route = cx.connection.proxy_sessions.get(params["sessionId"])
        record["routes_seen"].append((params["sessionId"], route.state if route else None))
        cx.connection.raw.notify("session/update", params)  # relay as-is

    return proxy


async def _proxy_ready(conductor: RawPeer) -> None:
    conductor.send({"jsonrpc": "2.0", "id": "init", "method": "_proxy/initialize", "params": v2_init()})
    wrapped = await conductor.recv()
    conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "result": {
        "protocolVersion": 2, "info": {"name": "agent", "version": "1"}}})
    assert (await conductor.recv())["id"] == "init"


def _update(sid: str, **fields: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "_proxy/successor", "params": {"method": "session/update", "params": {
        "sessionId": sid, "update": {"sessionUpdate": "state_update", "state": "idle", **fields}}}}


@pytest.mark.seed("S000-60", "S000-61")
def test_proxy_session_start_routes_new_and_fork_before_later_traffic(engine: ModuleType) -> None:
    """Seed 000: the setup is forwarded in order, the complete response goes back unchanged,
    the route (fork: under the response's new id) exists for an update that arrives in the
    same read as the response, and the callback gets the session and the response."""
    async def body() -> None:
        record: dict[str, Any] = {}
        conductor = RawPeer(serve_in_memory(_session_proxy(record), engine))
        await _proxy_ready(conductor)
        params = {"cwd": "/w", "mcpServers": [], "_meta": {"kept": [1, 2]}, "additionalDirectories": ["/x"]}
        conductor.send({"jsonrpc": "2.0", "id": 10, "method": "session/new", "params": params})
        conductor.send({"jsonrpc": "2.0", "id": 11, "method": "_x/after", "params": {}})
        wrapped = await conductor.recv()
        assert wrapped["params"] == {"method": "session/new", "params": params}  # unchanged
        after = await conductor.recv()  # later traffic is forwarded after the setup, in order
        assert after["params"]["method"] == "_x/after"
        response = {"sessionId": "s-new", "configOptions": [], "_meta": {"agent": "x"}}
        # the response and an update of the new session in ONE write: the route must exist
        # when the update is dispatched, before any task of the helper ran
        probe = {"jsonrpc": "2.0", "method": "_x/probe", "params": {"sessionId": "s-new"}}
        conductor.stream.write(
            (json.dumps({"jsonrpc": "2.0", "id": wrapped["id"], "result": response}) + "\n"
             + json.dumps(probe) + "\n" + json.dumps(_update("s-new")) + "\n").encode())
        got = [await conductor.recv(), await conductor.recv()]
        reply = next(m for m in got if m.get("id") == 10)
        assert reply == {"jsonrpc": "2.0", "id": 10, "result": response}
        # both directions: the predecessor's message and the successor's update see the route
        assert record["routes_seen"] == [("probe:s-new", "active"), ("s-new", "active")]
        # fork: the route uses the new id, not the source's
        conductor.send({"jsonrpc": "2.0", "id": 12, "method": "session/fork", "params": {"sessionId": "s-new", "cwd": "/w"}})
        wrapped = await conductor.recv()
        assert wrapped["params"]["method"] == "session/fork"
        conductor.stream.write(
            (json.dumps({"jsonrpc": "2.0", "id": wrapped["id"], "result": {"sessionId": "s-fork"}}) + "\n"
             + json.dumps(_update("s-fork")) + "\n").encode())
        got = [await conductor.recv(), await conductor.recv()]
        assert {"jsonrpc": "2.0", "id": 12, "result": {"sessionId": "s-fork"}} in got
        assert record["routes_seen"][-1] == ("s-fork", "active")
        for _ in range(10):
            await asyncio.sleep(0)
        assert record["opened"] == [("s-new", response), ("s-fork", {"sessionId": "s-fork"})]

    run(body)


@pytest.mark.seed("S000-62", "S000-63")
def test_proxy_session_start_resume_route_precedes_the_request_and_failure_drops_it(engine: ModuleType) -> None:
    """Seed 000: for resume the route is ready before the request is published, so replay
    (before the response) is routed; a failed setup answers upstream with the downstream
    error and drops the pending route; a new session's failure installs nothing."""
    async def body() -> None:
        record: dict[str, Any] = {}
        conductor = RawPeer(serve_in_memory(_session_proxy(record), engine))
        await _proxy_ready(conductor)
        conductor.send({"jsonrpc": "2.0", "id": 20, "method": "session/resume",
                        "params": {"sessionId": "s-old", "cwd": "/w", "replayFrom": {"type": "start"}}})
        wrapped = await conductor.recv()
        conductor.send(_update("s-old"))  # replay precedes the response
        assert (await conductor.recv())["method"] == "session/update"  # forwarded upstream at once
        conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "result": {}})
        assert await conductor.recv() == {"jsonrpc": "2.0", "id": 20, "result": {}}
        conductor.send(_update("s-old"))
        await conductor.recv()
        assert record["routes_seen"] == [("s-old", "pending"), ("s-old", "active")]
        # a failing resume of another session: the error goes upstream, the route is dropped
        conductor.send({"jsonrpc": "2.0", "id": 21, "method": "session/resume", "params": {"sessionId": "s-bad", "cwd": "/w"}})
        wrapped = await conductor.recv()
        conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "error": {"code": -32602, "message": "Invalid params"}})
        assert (await conductor.recv())["error"]["code"] == -32602
        conductor.send(_update("s-bad"))
        await conductor.recv()
        assert record["routes_seen"][-1] == ("s-bad", None)
        conductor.send({"jsonrpc": "2.0", "id": 22, "method": "session/new", "params": {"cwd": "/w"}})
        wrapped = await conductor.recv()
        conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "error": {"code": -32000, "message": "Authentication required"}})
        assert (await conductor.recv())["error"]["code"] == -32000
        assert [s for s, _ in record["opened"]] == ["s-old"]

    run(body)


@pytest.mark.seed("S000-64")
def test_proxy_session_start_forwards_cancellation_and_the_answer(engine: ModuleType) -> None:
    """Seed 000: the upstream $/cancel_request is forwarded downstream (hop-local: the
    proxy's own request id) and the downstream answer is still awaited and forwarded."""
    async def body() -> None:
        record: dict[str, Any] = {}
        conductor = RawPeer(serve_in_memory(_session_proxy(record), engine))
        await _proxy_ready(conductor)
        conductor.send({"jsonrpc": "2.0", "id": 30, "method": "session/new", "params": {"cwd": "/w"}})
        wrapped = await conductor.recv()
        conductor.notify("$/cancel_request", {"requestId": 30})
        cancel = await conductor.recv()
        assert cancel == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": wrapped["id"]}}
        conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "error": {"code": -32800, "message": "Request cancelled"}})
        assert (await conductor.recv())["error"]["code"] == -32800
        assert record["opened"] == [] and "callback_prompt" not in record

    run(body)


@pytest.mark.seed("S000-65")
def test_proxy_session_start_callback_commands_go_downstream(engine: ModuleType) -> None:
    """The callback's session handle sends to the successor (wrapped), through Testy."""
    async def body() -> None:
        record: dict[str, Any] = {}
        conductor = RawPeer(serve_in_memory(_session_proxy(record), engine))
        await _proxy_ready(conductor)
        conductor.send({"jsonrpc": "2.0", "id": 40, "method": "session/new", "params": {"cwd": "/w"}})
        wrapped = await conductor.recv()
        conductor.send({"jsonrpc": "2.0", "id": wrapped["id"], "result": {
            "sessionId": "s1", "_meta": {"prompt_from_callback": True}}})
        assert (await conductor.recv())["id"] == 40
        prompt = await conductor.recv()
        assert prompt["method"] == "_proxy/successor" and prompt["params"]["method"] == "session/prompt"
        assert prompt["params"]["params"]["sessionId"] == "s1"
        conductor.send({"jsonrpc": "2.0", "id": prompt["id"], "result": {"messageId": "m1"}})
        for _ in range(20):
            await asyncio.sleep(0)
        assert record["callback_prompt"] == {"messageId": "m1"}
        with pytest.raises(TypeError):
            Client.v2().bind(Connection(memory_pair()[0], engine=engine)).build_session_from(
                {"cwd": "/"}).on_proxy_session_start(None, print)

    run(body)


@pytest.mark.seed("S000-13")
def test_session_setup_from_a_complete_request_on_a_client(engine: ModuleType) -> None:
    """``build_session_from`` / ``resume_session_from`` / ``fork_session_from`` take the
    complete request; ``start_session`` publishes it and opens the session with the complete
    response (fork: the new id; resume: after its replay was handled)."""
    async def body() -> None:
        seen: list[str] = []
        client = Client.v2().on_session_update(lambda u, cx: seen.append(u.kind))

        async def main(conn: Any) -> None:
            await conn.initialize()
            opened = await conn.build_session_from({"cwd": "/w", "mcpServers": []}).start_session()
            source = opened.session
            assert opened.response == {"sessionId": source.session_id}
            epoch = source.idle_epoch
            await source.send_prompt("echo x")
            await source.wait_idle(after=epoch)
            fork_setup = conn.fork_session_from({"sessionId": source.session_id, "cwd": "/w"})
            assert fork_setup.operation == "fork" and fork_setup.session_id is None
            fork = await fork_setup.start_session()
            assert fork.session.session_id not in (None, source.session_id)
            seen.clear()
            resume = conn.resume_session_from({"sessionId": fork.session.session_id, "cwd": "/w",
                                               "replayFrom": {"type": "start"}})
            assert resume.session_id == fork.session.session_id
            resumed = await resume.start_session()
            assert resumed.session == fork.session and resumed.response == {}
            assert seen == ["user_message", "agent_message", "state_update"]
            with pytest.raises(ValueError):
                conn.build_session_from({"cwd": "/w"}).__class__(conn, "session/prompt", {})

        await client.connect_with(serve_in_memory(testy.build((2,)), engine), main, engine=engine)

    run(body)


@pytest.mark.seed("S000-16")
def test_v2_client_without_handlers_ignores_updates_and_refuses_requests(engine: ModuleType) -> None:
    """Seed 000: without matching handlers a v2 client ignores notifications and answers
    requests -32601; nothing is retained for a later per-session receiver."""
    async def body() -> None:
        a, b = memory_pair()
        agent = RawPeer(a)

        async def main(conn: Any) -> None:
            sent = conn.initialize()
            msg = await agent.recv()
            agent.send({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "protocolVersion": 2, "info": {"name": "a", "version": "1"}}})
            await sent
            agent.notify("session/update", {"sessionId": "s", "update": {
                "sessionUpdate": "agent_message_chunk", "messageId": "m", "content": {"type": "text", "text": "x"}}})
            reply = await agent.request(7, "session/request_permission", {
                "sessionId": "s", "title": "t", "options": []})
            assert reply["error"]["code"] == -32601 and reply["id"] == 7
            # a handler added later sees only what comes after it
            later: list[Any] = []
            conn.add_dynamic_handler("session/update", lambda u, cx: later.append(u.kind), kind="notification")
            agent.notify("session/update", {"sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "idle"}})
            await agent.request(8, "_x/barrier", {})
            assert later == ["state_update"]

        await Client.v2().connect_with(b, main, engine=engine)

    run(body)
