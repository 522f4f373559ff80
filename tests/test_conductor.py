"""The conductor on the wire (protocol.md §8.3–8.5): scripted in-process components.

Every component here is a :class:`conductor_support.Scripted` served over an in-memory pair,
so each test sees the exact lines the conductor writes to each hop. The conductor runs on
both engine twins (the ``engine`` fixture).
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

from conductor_support import LinePeer, Scripted
from roles_support import run, v1_init, v2_init
from wire_messages import note, ok, req

from acp_fast.conductor import Conductor

INIT_V2_RESULT = {"protocolVersion": 2, "info": {"name": "agent", "version": "1"}}


async def start(engine: ModuleType, n_proxies: int, **kw: Any) -> tuple[Conductor, LinePeer, list[Scripted], Any]:
    comps = [Scripted() for _ in range(n_proxies + 1)]
    conductor = Conductor(comps, engine=engine, **kw)
    cm = conductor.__aenter__()
    up = await cm
    return conductor, LinePeer(up), comps, up


async def init_chain(client: LinePeer, comps: list[Scripted], init: dict[str, Any] | None = None,
                     result: dict[str, Any] | None = None) -> None:
    """Initialize through the chain: each proxy forwards, the agent answers."""
    client.send(req(0, "initialize", init or v2_init()))
    for proxy in comps[:-1]:
        p = await proxy.peer()
        got = await p.recv()
        assert got["method"] == "_proxy/initialize"
        p.send(req("fwd", "_proxy/successor", {"method": "initialize", "params": got["params"]}))
        proxy._pending_init = got["id"]  # type: ignore[attr-defined]
    agent = await comps[-1].peer()
    got = await agent.recv()
    assert got["method"] == "initialize"
    agent.send(ok(got["id"], result or INIT_V2_RESULT))
    for proxy in reversed(comps[:-1]):
        p = await proxy.peer()
        answer = await p.recv()
        assert answer["id"] == "fwd"
        p.send(ok(proxy._pending_init, answer["result"]))  # type: ignore[attr-defined]
    reply = await client.recv()
    assert reply["id"] == 0 and "result" in reply, reply


# ---------------------------------------------------------------------------------------
# initialization (§8.3)
# ---------------------------------------------------------------------------------------


@pytest.mark.seed("S004-07")
def test_lazy_start_and_permanent_failure_before_initialize(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 1)
        await asyncio.sleep(0.05)
        assert [c.starts for c in comps] == [0, 0]  # nothing runs before initialize
        client.send(req(1, "session/new", {"cwd": "/"}))
        reply = await client.recv()
        assert reply["id"] == 1 and reply["error"]["code"] == -32600
        assert reply["error"]["data"] == "expected `initialize` request"
        client.send(req(2, "initialize", v2_init()))  # permanently failed
        reply = await client.recv()
        assert reply["id"] == 2 and reply["error"]["data"] == "expected `initialize` request"
        assert [c.starts for c in comps] == [0, 0]
        await conductor.__aexit__(None, None, None)

    run(body)


@pytest.mark.parametrize(("params", "code", "data"), [
    ({"clientInfo": {}}, -32602, "must be a valid ACP protocol version"),
    ({"protocolVersion": "2"}, -32602, "must be a valid ACP protocol version"),
    ({"protocolVersion": 0}, -32600, "unsupported ACP protocol version 0"),
])
def test_invalid_protocol_version(engine: ModuleType, params: Any, code: int, data: str) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 0)
        reply = await client.request(1, "initialize", params)
        assert reply["error"]["code"] == code and data in reply["error"]["data"]
        assert comps[0].starts == 0
        await conductor.__aexit__(None, None, None)

    run(body)


@pytest.mark.seed("S000-73", "S004-12")
def test_exact_version_params_forwarded_verbatim_and_newer_lowered(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 1)
        params = b'{ "protocolVersion" : 2, "info": {"name":"c","version":"0"}, "future": [1, 2.50] }'
        client.send_raw(b'{"jsonrpc":"2.0","id":"init","method":"initialize","params":' + params + b"}")
        proxy = await (comps[0]).peer()
        got, raw = await proxy.recv_raw()
        assert got["method"] == "_proxy/initialize" and got["id"] != "init"
        assert params in raw  # byte for byte, unknown fields kept
        assert comps[1].starts == 1  # every component starts on the first initialize
        await conductor.__aexit__(None, None, None)

        conductor, client, comps, _ = await start(engine, 0)
        client.send(req(1, "initialize", v2_init(7, future=True)))
        agent = await comps[0].peer()
        got = await agent.recv()
        assert got["params"]["protocolVersion"] == 2  # pinned: only lowered, rest kept
        assert got["params"]["future"] is True
        agent.send(ok(got["id"], INIT_V2_RESULT))
        assert (await client.recv())["result"] == INIT_V2_RESULT
        assert conductor.version == 2
        await conductor.__aexit__(None, None, None)

    run(body)


@pytest.mark.seed("S000-74")
def test_agent_answering_another_version_fails_initialize(engine: ModuleType) -> None:
    """Pinned (without a pin the agent's lower version is selected: test_conductor_negotiation.py)."""
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 0, protocol_version=2)
        client.send(req(1, "initialize", v2_init()))
        agent = await comps[0].peer()
        got = await agent.recv()
        agent.send(ok(got["id"], {"protocolVersion": 1, "agentCapabilities": {}}))
        reply = await client.recv()
        assert reply["id"] == 1 and reply["error"]["code"] == -32600
        assert "required ACP protocol version 2 but peer negotiated 1" in reply["error"]["data"]
        await conductor.__aexit__(None, None, None)

    run(body)


@pytest.mark.seed("S004-13")
def test_v1_chain_initializes_proxies_then_agent(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 2)
        await init_chain(client, comps, v1_init(), {"protocolVersion": 1, "agentCapabilities": {}})
        assert conductor.version == 1
        # a repeated initialize is forwarded into the chain (renamed for the first proxy);
        # whether it is accepted is the components' decision (§8.3.16)
        client.send(req(9, "initialize", v1_init()))
        got = await (await comps[0].peer()).recv()
        assert got["method"] == "_proxy/initialize" and got.get("params") == v1_init(), got
        await conductor.__aexit__(None, None, None)

    run(body)


@pytest.mark.seed("S004-07")
def test_chain_fails_to_start(engine: ModuleType) -> None:
    async def body() -> None:
        conductor = Conductor([], engine=engine)
        client = LinePeer(await conductor.__aenter__())
        reply = await client.request(1, "initialize", v2_init())
        assert reply["error"] == {"code": -32603, "message": "Internal error", "data": "no agent component in list"}
        await conductor.__aexit__(None, None, None)

        conductor = Conductor(["/nonexistent/agent-binary"], engine=engine)
        client = LinePeer(await conductor.__aenter__())
        reply = await client.request(1, "initialize", v2_init())
        assert reply["error"]["code"] == -32603 and "failed to start the chain" in reply["error"]["data"]
        await client.closed()
        await conductor.__aexit__(None, None, None)

    run(body)


# ---------------------------------------------------------------------------------------
# routing (§8.4)
# ---------------------------------------------------------------------------------------


@pytest.mark.seed("S004-11", "S004-16")
def test_fresh_id_per_hop_and_params_bytes_kept_across_envelopes(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 1)
        await init_chain(client, comps)
        proxy, agent = await comps[0].peer(), await comps[1].peer()
        params = b'{"sessionId" : "s",  "prompt":[{"type":"text","text":"h\\u00e9"}],"_meta":{"k":1}}'
        client.send_raw(b'{"jsonrpc":"2.0","id":"abc","method":"session/prompt","params":' + params + b"}")
        got, raw = await proxy.recv_raw()  # plain to proxy 0, new id, same bytes
        assert got["id"] != "abc" and raw.endswith(b'"params":' + params + b"}")
        # the proxy sends it on wrapped, with an envelope _meta (hop-local)
        proxy.send_raw(b'{"jsonrpc":"2.0","id":9,"method":"_proxy/successor","params":{"method":"session/prompt",'
                       b'"params":' + params + b',"_meta":{"envelope":true}}}')
        got2, raw2 = await agent.recv_raw()
        assert got2["method"] == "session/prompt" and b'"params":' + params in raw2
        assert "envelope" not in raw2.decode() and got2["params"]["_meta"] == {"k": 1}
        agent.send(ok(got2["id"], {"stopReason": "end_turn"}))
        assert await proxy.recv() == ok(9, {"stopReason": "end_turn"})  # never wrapped
        proxy.send(ok(got["id"], {"stopReason": "end_turn"}))
        assert await client.recv() == ok("abc", {"stopReason": "end_turn"})
        # agent -> client: wrapped toward the proxy, plain from the proxy to the client
        agent.send(req("a1", "session/request_permission", {"sessionId": "s"}))
        wrapped = await proxy.recv()
        assert wrapped["method"] == "_proxy/successor" and wrapped["id"] != "a1"
        assert wrapped["params"] == {"method": "session/request_permission", "params": {"sessionId": "s"}}
        proxy.send(req(None, "session/request_permission", {"sessionId": "s"}))  # a null id is an id
        ask = await client.recv()
        client.send(ok(ask["id"], {"outcome": {"outcome": "cancelled"}}))
        assert await proxy.recv() == ok(None, {"outcome": {"outcome": "cancelled"}})
        proxy.send(ok(wrapped["id"], {"outcome": {"outcome": "cancelled"}}))
        assert await agent.recv() == ok("a1", {"outcome": {"outcome": "cancelled"}})
        # notifications: from the agent wrapped to the proxy, plain from the proxy onward
        agent.send(note("session/update", {"sessionId": "s", "update": {"sessionUpdate": "x"}}))
        assert (await proxy.recv())["params"]["method"] == "session/update"
        await conductor.__aexit__(None, None, None)

    run(body)


@pytest.mark.seed("S004-15")
def test_unknown_methods_forwarded_and_method_not_found_only_from_the_end(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 0)
        await init_chain(client, comps)
        agent = await comps[0].peer()
        client.send(req(5, "_vendor/thing", [1, 2]))
        got = await agent.recv()
        assert got["method"] == "_vendor/thing" and got["params"] == [1, 2]
        error = {"code": -32601, "message": "Method not found", "data": {"method": "_vendor/thing"}}
        agent.send({"jsonrpc": "2.0", "id": got["id"], "error": error})
        assert await client.recv() == {"jsonrpc": "2.0", "id": 5, "error": error}
        agent.send(ok(12345, {}))  # a response to an unknown id: dropped, nothing breaks
        client.send(req(6, "_vendor/other"))
        got = await agent.recv()
        assert got["method"] == "_vendor/other" and "params" not in got
        await conductor.__aexit__(None, None, None)

    run(body)


@pytest.mark.seed("S004-10")
def test_cancel_request_is_hop_local_plain_and_wrapped(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 1)
        await init_chain(client, comps)
        proxy, agent = await comps[0].peer(), await comps[1].peer()
        client.send(req("p", "session/prompt", {"sessionId": "s", "prompt": []}))
        got = await proxy.recv()
        client.send(note("$/cancel_request", {"requestId": "p"}))
        assert await proxy.recv() == note("$/cancel_request", {"requestId": got["id"]})  # re-issued
        proxy.send(req(40, "_proxy/successor", {"method": "session/prompt", "params": got["params"]}))
        got2 = await agent.recv()
        # the wrapped form is accepted; its requestId is the envelope request's id
        proxy.send(note("_proxy/successor", {"method": "$/cancel_request", "params": {"requestId": 40}}))
        assert await agent.recv() == note("$/cancel_request", {"requestId": got2["id"]})
        client.send(note("$/cancel_request", {"requestId": "unknown"}))  # ignored
        client.send(note("$/cancel_request", {"requestId": {}}))  # malformed: ignored
        cancelled = {"jsonrpc": "2.0", "id": got2["id"], "error": {"code": -32800, "message": "Request cancelled"}}
        agent.send(cancelled)
        assert (await proxy.recv())["error"]["code"] == -32800
        proxy.send({"jsonrpc": "2.0", "id": got["id"], "error": {"code": -32800, "message": "Request cancelled"}})
        assert await client.recv() == {"jsonrpc": "2.0", "id": "p", "error": {"code": -32800, "message": "Request cancelled"}}
        client.send(note("$/cancel_request", {"requestId": "p"}))  # answered already: ignored
        client.send(req(7, "_vendor/ping"))
        assert (await proxy.recv())["method"] == "_vendor/ping"  # nothing else arrived first
        await conductor.__aexit__(None, None, None)

    run(body)


@pytest.mark.seed("S004-08", "S004-14")
def test_misplaced_successor_and_proxy_initialize_from_outside(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 1)
        await init_chain(client, comps)
        proxy, agent = await comps[0].peer(), await comps[1].peer()
        # from the agent: request -32600, notification dropped
        agent.send(note("_proxy/successor", {"method": "session/update", "params": {}}))
        agent.send(req("x", "_proxy/successor", {"method": "session/request_permission", "params": {}}))
        reply = await agent.recv()
        assert reply["id"] == "x" and reply["error"]["code"] == -32600
        # from the client of a terminal conductor
        reply = await client.request(3, "proxy/successor", {"method": "session/update", "params": {}})
        assert reply["error"]["code"] == -32600
        # proxy initialize from the client after init, or sent by a proxy toward the agent
        reply = await client.request(4, "_proxy/initialize", v2_init())
        assert reply["error"] == {"code": -32600, "message": "Invalid request",
                                  "data": "initialize/proxy requests are only sent by the conductor"}
        proxy.send(req(5, "_proxy/successor", {"method": "proxy/initialize", "params": v2_init()}))
        assert (await proxy.recv())["error"]["data"] == "initialize/proxy requests are only sent by the conductor"
        # malformed envelopes: -32602
        for params in ({"params": {}}, {"method": 3}, {"method": "m", "params": 5}, [1]):
            proxy.send(req(6, "_proxy/successor", params))
            reply = await proxy.recv()
            assert reply["id"] == 6 and reply["error"]["code"] == -32602, params
        client.send(req(8, "_vendor/ping"))
        assert (await proxy.recv())["method"] == "_vendor/ping"  # the agent got none of the above
        proxy.send(req(9, "_proxy/successor", {"method": "_vendor/ping"}))
        assert (await agent.recv())["method"] == "_vendor/ping"
        await conductor.__aexit__(None, None, None)

    run(body)


@pytest.mark.seed("S004-17")
@pytest.mark.parametrize("option", ["underscore", "spec"])
def test_spelling_emitted_and_each_component_answered_in_its_own(engine: ModuleType, option: str) -> None:
    async def body() -> None:
        init_name, succ_name = ("_proxy/initialize", "_proxy/successor") if option == "underscore" else (
            "proxy/initialize", "proxy/successor")
        other = "proxy/successor" if option == "underscore" else "_proxy/successor"
        conductor, client, comps, _ = await start(engine, 1, proxy_methods=option)
        client.send(req(0, "initialize", v2_init()))
        proxy, agent_c = await comps[0].peer(), comps[1]
        got = await proxy.recv()
        assert got["method"] == init_name
        proxy.send(req("f", succ_name, {"method": "initialize", "params": got["params"]}))
        agent = await agent_c.peer()
        a = await agent.recv()
        agent.send(ok(a["id"], INIT_V2_RESULT))
        assert (await proxy.recv())["id"] == "f"
        proxy.send(ok(got["id"], INIT_V2_RESULT))
        await client.recv()
        agent.send(note("session/update", {"n": 1}))
        assert (await proxy.recv())["method"] == succ_name  # the emitted spelling
        proxy.send(note(other, {"method": "_vendor/hello"}))  # the proxy uses the other one
        assert (await agent.recv())["method"] == "_vendor/hello"
        agent.send(note("session/update", {"n": 2}))
        assert (await proxy.recv())["method"] == other  # answered in its own spelling
        await conductor.__aexit__(None, None, None)

    run(body)


@pytest.mark.seed("S000-03")
def test_batches_stay_frames_across_hops(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 0)
        await init_chain(client, comps)
        agent = await comps[0].peer()
        client.send([req(1, "_a"), note("_n", {"x": 1}), req(2, "_b", {"y": 2})])
        batch = await agent.recv()
        assert isinstance(batch, list) and [m["method"] for m in batch] == ["_a", "_n", "_b"]
        agent.send([ok(batch[2]["id"], "B"), ok(batch[0]["id"], "A")])
        assert await client.recv() == [ok(2, "B"), ok(1, "A")]
        # conductor-made answers to entries of a batch come back as a batch too
        client.send([req(3, "_proxy/initialize", v2_init()), req(4, "proxy/initialize", v2_init())])
        replies = await client.recv()
        assert isinstance(replies, list) and [r["id"] for r in replies] == [3, 4]
        # a one-entry batch stays a one-entry batch both ways
        client.send([req(5, "_c")])
        single = await agent.recv()
        assert isinstance(single, list) and [m["method"] for m in single] == ["_c"]
        agent.send([ok(single[0]["id"], "C")])
        assert await client.recv() == [ok(5, "C")]
        await conductor.__aexit__(None, None, None)

    run(body)


@pytest.mark.seed("S004-09")
def test_malformed_lines_answered_upstream(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 0)
        await init_chain(client, comps)
        client.send_raw(b'{"jsonrpc":"2.0","id":1,"method":')
        reply = await client.recv()
        assert reply["id"] is None and reply["error"]["code"] == -32700
        await conductor.__aexit__(None, None, None)

    run(body)


# ---------------------------------------------------------------------------------------
# component exit (§8.5)
# ---------------------------------------------------------------------------------------


@pytest.mark.seed("S004-09")
def test_component_exit_fails_pending_and_ends_the_chain(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 1)
        await init_chain(client, comps)
        proxy = await comps[0].peer()
        agent = await comps[1].peer()
        client.send(req("turn", "session/prompt", {"sessionId": "s", "prompt": []}))
        got = await proxy.recv()
        proxy.send(req("env", "_proxy/successor", {"method": "session/prompt", "params": got["params"]}))
        await agent.recv()
        comps[1].close()  # the agent goes away with the proxy's request pending
        failed = await proxy.recv()  # the agent's pending requests fail where they came from
        assert failed["id"] == "env" and failed["error"]["code"] == -32603
        assert failed["error"]["data"].startswith("Agent exited")
        reply = await client.recv()  # and so does what upstream still waits for
        assert reply["id"] == "turn" and reply["error"] == failed["error"]
        await client.closed()  # the whole chain ends; no restart
        await proxy.closed()
        await conductor.__aexit__(None, None, None)
        assert conductor.exit_error is not None

    run(body)


def test_upstream_eof_drains_then_ends(engine: ModuleType) -> None:
    """After upstream EOF (write side still open), requests sent upstream fail and the chain
    ends once every upstream request is answered."""

    async def body() -> None:
        conductor, client, comps, up = await start(engine, 0)
        await init_chain(client, comps)
        agent = await comps[0].peer()
        agent.send(req("ask", "session/request_permission", {"sessionId": "s"}))
        assert (await client.recv())["method"] == "session/request_permission"
        client.send(req(5, "session/prompt", {"sessionId": "s", "prompt": []}))
        got = await agent.recv()
        up._wt.write_eof()  # half-close: the client stops sending, still reads
        failed = await agent.recv()
        assert failed["id"] == "ask" and failed["error"]["code"] == -32603
        assert failed["error"]["data"] == {"reason": "incoming_transport_closed"}
        agent.send(ok(got["id"], {"stopReason": "end_turn"}))
        assert await client.recv() == ok(5, {"stopReason": "end_turn"})  # still answered
        await client.closed()  # then the chain ends
        await agent.closed()
        await conductor.__aexit__(None, None, None)

    run(body)


# ---------------------------------------------------------------------------------------
# trace (§8.7.38)
# ---------------------------------------------------------------------------------------


def test_trace_records_each_hop_message_once_unwrapped(engine: ModuleType, tmp_path: Path) -> None:
    async def body() -> None:
        path = tmp_path / "trace.jsons"
        conductor, client, comps, _ = await start(engine, 1, trace=path)
        await init_chain(client, comps)
        proxy, agent = await comps[0].peer(), await comps[1].peer()
        client.send(req(1, "session/new", {"cwd": "/"}))
        got = await proxy.recv()
        proxy.send(req("w", "_proxy/successor", {"method": "session/new", "params": {"cwd": "/"}}))
        a = await agent.recv()
        agent.send(ok(a["id"], {"sessionId": "s1"}))
        await proxy.recv()
        proxy.send(ok(got["id"], {"sessionId": "s1"}))
        await client.recv()
        agent.send(note("session/update", {"sessionId": "s1", "update": {"sessionUpdate": "x"}}))
        await proxy.recv()
        await conductor.__aexit__(None, None, None)
        events = [json.loads(line) for line in path.read_text().splitlines()]
        events = [e for e in events if e["type"] != "negotiation"]  # the version selection's record
        assert all("_proxy/successor" != e.get("method") for e in events)
        hops = [(e["type"], e["from"], e["to"], e.get("method")) for e in events[4:]]
        assert hops == [
            ("request", "Client", "Proxy(0)", "session/new"),
            ("request", "Proxy(0)", "Agent", "session/new"),
            ("response", "Agent", "Proxy(0)", None),
            ("response", "Proxy(0)", "Client", None),
            ("notification", "Agent", "Proxy(0)", "session/update"),
        ]
        request, response = events[5], events[6]
        assert request["id"] == response["id"] == a["id"] and response["payload"] == {"sessionId": "s1"}
        assert events[8]["session"] == "s1" and events[8]["protocol"] == "acp"
        assert all(isinstance(e["ts"], float) for e in events)

    run(body)


# ---------------------------------------------------------------------------------------
# proxy mode: a nested chain (§8.4.29)
# ---------------------------------------------------------------------------------------


def test_trace_records_a_hop_local_cancel_and_its_reissue(engine: ModuleType, tmp_path: Path) -> None:
    """The received ``$/cancel_request`` (to the conductor) and the re-issued one (with the
    next hop's request id, so a viewer can link it to the request it cancels) are both traced."""
    async def body() -> None:
        path = tmp_path / "trace.jsons"
        conductor, client, comps, _ = await start(engine, 0, trace=path)
        await init_chain(client, comps)
        agent = await comps[0].peer()
        client.send(req("p", "session/prompt", {"sessionId": "s", "prompt": []}))
        got = await agent.recv()
        client.send(note("$/cancel_request", {"requestId": "p"}))
        assert await agent.recv() == note("$/cancel_request", {"requestId": got["id"]})
        await conductor.__aexit__(None, None, None)
        events = [json.loads(line) for line in path.read_text().splitlines()]
        cancels = [(e["from"], e["to"], e["params"]) for e in events if e.get("method") == "$/cancel_request"]
        assert cancels == [("Client", "Conductor", {"requestId": "p"}),
                           ("Conductor", "Agent", {"requestId": got["id"]})]
        (prompt,) = [e for e in events if e.get("method") == "session/prompt"]
        assert prompt["id"] == got["id"]  # the re-issued cancel names the traced request's id

    run(body)


@pytest.mark.seed("S004-11")
def test_proxy_mode_routes_the_last_proxy_to_the_parent(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, parent, comps, _ = await start(engine, 0, mode="proxy")
        reply = await parent.request(1, "initialize", v2_init())  # a proxy-mode chain wants the proxy method
        assert reply["error"]["data"] == "expected `_proxy/initialize` request"
        await conductor.__aexit__(None, None, None)

        conductor, parent, comps, _ = await start(engine, 0, mode="proxy")
        parent.send(req("i", "proxy/initialize", v2_init()))  # the parent uses the spec spelling
        proxy = await comps[0].peer()
        got = await proxy.recv()
        assert got["method"] == "_proxy/initialize"  # the emitted (default) spelling
        proxy.send(req("f", "_proxy/successor", {"method": "initialize", "params": got["params"]}))
        up = await parent.recv()  # to the parent, wrapped in the parent's own spelling
        assert up["method"] == "proxy/successor" and up["params"]["method"] == "initialize"
        parent.send(ok(up["id"], INIT_V2_RESULT))
        assert await proxy.recv() == ok("f", INIT_V2_RESULT)
        proxy.send(ok(got["id"], INIT_V2_RESULT))
        assert await parent.recv() == ok("i", INIT_V2_RESULT)
        # plain from the parent: to proxy 0; wrapped from the parent (its successor): to the
        # last proxy, wrapped again, envelope _meta dropped
        parent.send(req(2, "session/new", {"cwd": "/"}))
        got = await proxy.recv()
        assert got["method"] == "session/new"
        parent.send(note("proxy/successor", {"method": "session/update", "params": {"u": 1}, "_meta": {"hop": 1}}))
        assert await proxy.recv() == note("_proxy/successor", {"method": "session/update", "params": {"u": 1}})
        proxy.send(note("_proxy/successor", {"method": "_vendor/x", "params": {"_meta": {"keep": True}}}))
        assert await parent.recv() == note("proxy/successor", {"method": "_vendor/x", "params": {"_meta": {"keep": True}}})
        await conductor.__aexit__(None, None, None)

    run(body)


# ---------------------------------------------------------------------------------------
# the fast path (engine.Forwarder) and the Python path share tables and keep order
# ---------------------------------------------------------------------------------------


def lines(*msgs: Any) -> bytes:
    return b"\n".join(json.dumps(m).encode() for m in msgs)


def test_fast_path_on_once_ready_and_claims_keep_their_place(engine: ModuleType) -> None:
    async def body() -> None:
        conductor, client, comps, _ = await start(engine, 1)
        fw = conductor._fw  # white box: which path routes what
        assert not fw.fast(0)  # before initialization every frame goes through Python
        await init_chain(client, comps)
        assert all(fw.fast(h) for h in range(fw.hops))
        proxy, agent = await comps[0].peer(), await comps[1].peer()
        client.send(req("p", "session/prompt", {"sessionId": "s", "prompt": []}))
        got = await proxy.recv()
        # one chunk: a pass-through, a claimed cancel, then lines the Python path routes
        client.send_raw(lines(note("a"), note("$/cancel_request", {"requestId": "p"}), note("b"),
                              req(7, "_x"), [note("c"), note("c2")], note("d")))
        received = [await proxy.recv() for _ in range(6)]
        assert received[:3] == [note("a"), note("$/cancel_request", {"requestId": got["id"]}), note("b")]
        assert received[3]["method"] == "_x" and received[4] == [note("c"), note("c2")]
        assert received[5] == note("d")
        # from the proxy, one chunk mixing an envelope, a response, a plain request, a cancel
        # of the wrapped request (found through the shared table) and a notification
        proxy.send_raw(lines(req("w", "_proxy/successor", {"method": "session/prompt", "params": got["params"]}),
                             ok(received[3]["id"], "x-done"),
                             req("q", "session/request_permission", {"sessionId": "s"}),
                             note("_proxy/successor", {"method": "$/cancel_request", "params": {"requestId": "w"}}),
                             note("_proxy/successor", {"method": "after"})))
        inner = await agent.recv()
        assert inner == req(inner["id"], "session/prompt", {"sessionId": "s", "prompt": []})
        assert await agent.recv() == note("$/cancel_request", {"requestId": inner["id"]})
        assert await agent.recv() == note("after")
        assert await client.recv() == ok(7, "x-done")
        ask = await client.recv()
        assert ask["method"] == "session/request_permission" and ask["id"] != "q"
        client.send(ok(ask["id"], {"outcome": {"outcome": "cancelled"}}))
        assert await proxy.recv() == ok("q", {"outcome": {"outcome": "cancelled"}})
        agent.send(ok(inner["id"], {"stopReason": "cancelled"}))
        assert await proxy.recv() == ok("w", {"stopReason": "cancelled"})
        proxy.send(ok(got["id"], {"stopReason": "cancelled"}))
        assert await client.recv() == ok("p", {"stopReason": "cancelled"})
        assert fw.owed(0) == fw.owed(1) == fw.owed(2) == 0
        await conductor.__aexit__(None, None, None)

    run(body)


def test_tracing_and_upstream_eof_take_the_python_path(engine: ModuleType, tmp_path: Path) -> None:
    async def body() -> None:
        conductor, client, comps, up = await start(engine, 0, trace=tmp_path / "t.jsons")
        await init_chain(client, comps)
        assert not any(conductor._fw.fast(h) for h in range(conductor._fw.hops))
        await conductor.__aexit__(None, None, None)
        conductor, client, comps, up = await start(engine, 0)
        await init_chain(client, comps)
        agent = await comps[0].peer()
        client.send(req(1, "_slow"))
        got = await agent.recv()
        up.close()  # upstream EOF: the chain ends once the request is answered
        for _ in range(1000):  # the EOF reaches the conductor on a later loop turn
            if not conductor._fw.fast(1):
                break
            await asyncio.sleep(0.01)
        assert not conductor._fw.fast(1)
        agent.send(ok(got["id"], "done"))
        await asyncio.wait_for(conductor._cm_task, 10)
        await conductor.__aexit__(None, None, None)

    run(body)


def test_requests_beyond_the_pending_bound_are_refused(engine: ModuleType) -> None:
    async def body() -> None:
        comps = [Scripted()]
        conductor = Conductor(comps, engine=engine)
        conductor._fw = engine.Forwarder(0, max_pending=1)  # white box: a small bound
        client = LinePeer(await conductor.__aenter__())
        await init_chain(client, comps)
        agent = await comps[0].peer()
        client.send_raw(lines(req(1, "_slow"), req(2, "_slow")))
        reply = await client.recv()
        assert reply["id"] == 2 and reply["error"]["code"] == -32603
        assert reply["error"]["data"] == "too many requests in flight on Agent"
        got = await agent.recv()
        agent.send(ok(got["id"], "done"))
        assert await client.recv() == ok(1, "done")
        client.send(req(3, "_slow"))  # room again
        assert (await agent.recv())["method"] == "_slow"
        await conductor.__aexit__(None, None, None)

    run(body)
