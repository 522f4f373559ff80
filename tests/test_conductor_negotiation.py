"""The conductor selects the chain's protocol version as a direct connection negotiates it (issue 20).

The matrix: a v1 client, a v2 client and a client asking 65535, each against a v1-only, a
v2-only and the router Testy, through 0, 1 and 3 acp_fast pass-through proxies, on both
engine twins. The expected outcome is what the same client gets from the same agent
directly (computed here, not written down): the same ``initialize`` answer, and then a
prompt turn at that version through the chain. Components are in-process (the conductor
starts them, and starts them again, like child processes), so the matrix is cheap; the
chains with the TypeScript SDK proxy and the SDK clients are in
``tests/interop/test_conductor_negotiation_interop.py``.

Then: mixed chains (v2-only proxies before a v1 agent, v1-only proxies before the router),
``protocol_version`` pinning, the mechanics on the wire with scripted components (held
client calls, the agent kept or started again, a partial line across the switch to the
Forwarder), the trace record, and ``acp-fast conductor`` itself on the issue's reproduction.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from conductor_support import LinePeer, Scripted, cmd_testy, component_env, text_prompt
from negotiation_support import AGENTS, CLIENTS, assert_one_version, chunks, direct, through
from roles_support import run, v1_init, v2_init
from wire_messages import ok, req

from acp_fast import Proxy, testy
from acp_fast.conductor import Conductor
from acp_fast.conductor.passthrough import build as passthrough

# ---------------------------------------------------------------------------------------
# the matrix: the outcome a direct connection to the agent gives
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("n_proxies", [0, 1, 3])
def test_chain_answers_what_the_agent_answers_directly(engine: ModuleType, n_proxies: int, agent: str,
                                                       client: str) -> None:
    async def body() -> None:
        versions, params = AGENTS[agent], CLIENTS[client]
        expected = await direct(engine, versions, params)
        conductor = Conductor([*(passthrough() for _ in range(n_proxies)), testy.build(versions)], engine=engine)
        got = await through(conductor, params)
        assert got == expected, (agent, client)
        assert_one_version(conductor, got)
        record = conductor.negotiation
        assert record is not None and record["requested"] == params["protocolVersion"]
        lowered = agent == "v1-only" and client != "v1"
        assert record["attempts"] == ([1] if client == "v1" else [2, 1] if lowered and n_proxies else [2])
        if lowered and n_proxies:  # the proxies started again at 1; the agent kept, its answer reused
            assert [c["starts"] for c in record["components"]] == [2] * n_proxies + [1]
            assert record["components"][-1]["tried"] == {"2": "answered 1", "1": "reused"}
        else:
            assert all(c["starts"] == 1 for c in record["components"]), record

    run(body)


# ---------------------------------------------------------------------------------------
# mixed chains: one version end to end, or a clear error and no chain
# ---------------------------------------------------------------------------------------


async def refused(conductor: Conductor, params: dict[str, Any]) -> dict[str, Any]:
    """The chain's error answer to ``initialize``; the chain then ends (the client sees EOF)."""
    async with conductor as upstream:
        peer = LinePeer(upstream)
        reply = await peer.request(1, "initialize", params)
        assert "error" in reply, reply
        await peer.closed()
    record = conductor.negotiation
    assert record is not None and record["outcome"] == "failed" and record["selected"] is None
    assert record["error"] == reply["error"] and conductor.version == 0
    return reply["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("n_proxies", [1, 3])
def test_v2_only_proxies_before_a_v1_agent_fail_naming_the_proxy(engine: ModuleType, n_proxies: int) -> None:
    async def body() -> None:
        conductor = Conductor([*(Proxy.v2() for _ in range(n_proxies)), testy.build((1,))], engine=engine)
        error = await refused(conductor, v2_init())
        assert error["code"] == -32600
        assert error["data"].startswith(
            "Proxy(0) (`<in-process ProxyBuilder>`) cannot speak ACP protocol version 1, the version selected "
            "for this chain [client requested 2, Agent speaks 1, Proxy(0) speaks 2]; its answer: "
            "unsupported ACP protocol version 1; this proxy supports ACP protocol version 2"), error
        record = conductor.negotiation
        assert record is not None and record["attempts"] == [2, 1]
        proxy, agent = record["components"][0], record["components"][-1]
        assert proxy["tried"]["2"] == "accepted" and proxy["tried"]["1"].startswith("rejected: ")
        assert agent["tried"] == {"2": "answered 1"} and agent["starts"] == 1

    run(body)


def test_v1_client_v2_only_proxy_v1_agent_fails_at_once(engine: ModuleType) -> None:
    async def body() -> None:
        conductor = Conductor([Proxy.v2(), testy.build((1,))], engine=engine)
        error = await refused(conductor, v1_init())
        assert error["data"].startswith("Proxy(0) (`<in-process ProxyBuilder>`) cannot speak ACP protocol "
                                        "version 1, the version selected for this chain [client requested 1, "
                                        "Agent speaks 1, Proxy(0) speaks 2]"), error  # declared in-process
        record = conductor.negotiation
        assert record is not None and record["attempts"] == [1]
        assert record["components"][1]["starts"] == 1 and record["components"][1]["tried"] == {}

    run(body)


@pytest.mark.parametrize("kinds", ["1", "111", "f1f"])
def test_v1_only_proxies_before_the_router_give_a_v1_chain(engine: ModuleType, kinds: str) -> None:
    """``1``: a v1-only acp_fast proxy (refuses ``_proxy/initialize`` at 2); ``f``: the
    pass-through (v1 and v2). The chain goes down to 1 (the router would speak 2 alone)."""
    async def body() -> None:
        proxies = [Proxy.builder() if k == "1" else passthrough() for k in kinds]
        conductor = Conductor([*proxies, testy.build((1, 2))], engine=engine)
        got = await through(conductor, v2_init())
        assert got["result"]["protocolVersion"] == 1 and got["result"]["agentInfo"]["name"] == "test-agent"
        assert_one_version(conductor, got)
        record = conductor.negotiation
        assert record is not None and record["attempts"] == [2, 1]
        first = kinds.index("1")  # the first v1-only proxy refused 2: it and those before it start again
        assert [c["starts"] for c in record["components"]] == [2] * (first + 1) + [1] * (len(kinds) - first)
        assert record["components"][first]["tried"]["2"].startswith("rejected: unsupported ACP protocol version 2")
        assert record["components"][-1]["tried"] == {"1": "answered 1"}

    run(body)


# ---------------------------------------------------------------------------------------
# protocol_version: the version pinned, no probing
# ---------------------------------------------------------------------------------------


def test_pinned_version_lowers_or_refuses_without_probing(engine: ModuleType) -> None:
    async def body() -> None:
        # pinned to 1: a v2 client gets a v1 chain, even in front of the router (one attempt)
        conductor = Conductor([passthrough(), testy.build((1, 2))], engine=engine, protocol_version=1)
        got = await through(conductor, v2_init(65535))
        assert got["result"]["protocolVersion"] == 1 and conductor.protocol_version == 1
        assert conductor.negotiation is not None and conductor.negotiation["attempts"] == [1]
        assert conductor.negotiation["pinned"] == 1 and not conductor.negotiation["probing"]

        # pinned to 2: a v1 client is refused as a v2 agent refuses it, and nothing starts
        comps = [Scripted()]
        async with Conductor(comps, engine=engine, protocol_version=2) as upstream:
            reply = await LinePeer(upstream).request(1, "initialize", v1_init())
            assert reply["error"] == {"code": -32022, "message": "Unsupported protocol version",
                                      "data": {"requested": 1, "supported": [2]}}
        assert comps[0].starts == 0

        # pinned to 2 before a v1-only agent: the agent is named, never started again
        conductor = Conductor([passthrough(), testy.build((1,))], engine=engine, protocol_version=2)
        error = await refused(conductor, v2_init())
        assert error["data"].startswith(
            "Agent (`<in-process Endpoint>`) answered ACP protocol version 1, not 2, the version this chain is "
            "pinned to (protocol_version=2) [client requested 2, Agent speaks 1]; required ACP protocol "
            "version 2 but peer negotiated 1"), error
        assert conductor.negotiation is not None
        assert [c["starts"] for c in conductor.negotiation["components"]] == [1, 1]

        # pinned to 2 before a v1-only proxy: the proxy is named, its declared version too
        conductor = Conductor([Proxy.builder(), testy.build((1, 2))], engine=engine, protocol_version=2)
        error = await refused(conductor, v2_init())
        assert error["data"].startswith(
            "Proxy(0) (`<in-process ProxyBuilder>`) cannot speak ACP protocol version 2, the version this chain "
            "is pinned to (protocol_version=2) [client requested 2, Agent speaks 1/2, Proxy(0) speaks 1]; "
            "its answer: unsupported ACP protocol version 2"), error

        with pytest.raises(ValueError, match="protocol_version must be 1, 2 or None"):
            Conductor([passthrough()], protocol_version=3)

    run(body)


def test_proxy_mode_takes_the_parents_version(engine: ModuleType) -> None:
    async def body() -> None:
        async with Conductor([Scripted()], engine=engine, mode="proxy", protocol_version=1) as upstream:
            reply = await LinePeer(upstream).request(1, "_proxy/initialize", v2_init())
            assert reply["error"]["data"] == ("unsupported ACP protocol version 2; this chain is pinned to "
                                              "ACP protocol version 1")
        # a proxy of a proxy-mode chain refusing the parent's version is named (no probing)
        async with Conductor([Proxy.v2()], engine=engine, mode="proxy") as upstream:
            parent = LinePeer(upstream)
            reply = await parent.request(1, "_proxy/initialize", v1_init())
            assert reply["error"]["data"].startswith(
                "Proxy(0) (`<in-process ProxyBuilder>`) cannot speak ACP protocol version 1, the version "
                "selected for this chain [client requested 1, Proxy(0) speaks 2]"), reply

    run(body)


# ---------------------------------------------------------------------------------------
# the mechanics on the wire (scripted components)
# ---------------------------------------------------------------------------------------

V1_RESULT = {"protocolVersion": 1, "agentCapabilities": {}, "agentInfo": {"name": "scripted", "version": "1"}}
#: ``v2_init()`` as a v1 agent reads it (protocol.md §6.5)
V2_INIT_LOWERED = {"protocolVersion": 1, "clientInfo": {"name": "raw-client", "version": "0"},
                   "clientCapabilities": {"auth": {"terminal": False}, "session": {"configOptions": {"boolean": {}}}}}


async def restarted(component: Scripted, starts: int) -> LinePeer:
    """The component's peer once it has been started ``starts`` times."""
    while component.starts < starts:
        await asyncio.sleep(0.002)
    return await component.peer()


async def lowered_by_the_agent(client: LinePeer, comps: list[Scripted]) -> tuple[LinePeer, LinePeer, Any]:
    """A v2 ``initialize`` through one scripted proxy to a scripted agent that answers 1, with
    a call held meanwhile and a request to the client answered meanwhile. Returns the
    restarted proxy, the agent, and the proxy's new ``_proxy/initialize``."""
    client.send(req(0, "initialize", v2_init()))
    client.send(req(1, "session/new", {"cwd": "/"}))  # held until initialize is answered
    proxy = await comps[0].peer()
    got = await proxy.recv()
    assert got["method"] == "_proxy/initialize" and got["params"] == v2_init()
    proxy.send(req("ask", "_vendor/ask", {"q": 1}))  # the client answers during initialize
    ask = await client.recv()
    assert ask["method"] == "_vendor/ask"
    client.send(ok(ask["id"], "yes"))
    assert await proxy.recv() == ok("ask", "yes")
    # (in the spec spelling: its successor is not the new proxy's, which starts from the default)
    proxy.send(req("fwd", "proxy/successor", {"method": "initialize", "params": got["params"]}))
    agent = await comps[1].peer()
    first = await agent.recv()
    assert first["method"] == "initialize" and first["params"] == v2_init()
    agent.send(ok(first["id"], V1_RESULT))  # a v1-only agent
    proxy2 = await restarted(comps[0], 2)
    await proxy.closed()  # the first proxy is closed, its initialize never answered
    got2 = await proxy2.recv()
    assert got2["method"] == "_proxy/initialize" and got2["params"] == V2_INIT_LOWERED
    return proxy2, agent, got2


def test_the_agent_is_kept_and_its_answer_reused(engine: ModuleType) -> None:
    async def body() -> None:
        comps = [Scripted(), Scripted()]
        conductor = Conductor(comps, engine=engine)
        async with conductor as upstream:
            client = LinePeer(upstream)
            proxy2, agent, got2 = await lowered_by_the_agent(client, comps)
            proxy2.send(req("fwd2", "_proxy/successor", {"method": "initialize", "params": got2["params"]}))
            assert await proxy2.recv() == ok("fwd2", V1_RESULT)  # answered with the agent's answer
            proxy2.send(ok(got2["id"], V1_RESULT))
            assert await client.recv() == ok(0, V1_RESULT)
            held = await proxy2.recv()  # only now the held call goes on
            assert held["method"] == "session/new" and held["id"] != 1
            assert comps[1].starts == 1 and agent.lines.empty()  # one initialize reached the agent
            assert all(conductor._fw.fast(h) for h in range(conductor._fw.hops))  # white box: the fast path
        assert conductor.version == 1

    run(body)


def test_the_agent_starts_again_when_a_proxy_changes_its_initialize(engine: ModuleType) -> None:
    async def body() -> None:
        comps = [Scripted(), Scripted()]
        conductor = Conductor(comps, engine=engine)
        async with conductor as upstream:
            client = LinePeer(upstream)
            proxy2, agent, got2 = await lowered_by_the_agent(client, comps)
            changed = dict(got2["params"], _meta={"proxy": "added this"})
            proxy2.send(req("fwd2", "_proxy/successor", {"method": "initialize", "params": changed}))
            agent2 = await restarted(comps[1], 2)
            await agent.closed()
            got = await agent2.recv()
            assert got["method"] == "initialize" and got["params"] == changed
            agent2.send(ok(got["id"], V1_RESULT))
            assert await proxy2.recv() == ok("fwd2", V1_RESULT)
            proxy2.send(ok(got2["id"], V1_RESULT))
            assert await client.recv() == ok(0, V1_RESULT)
        assert conductor.negotiation is not None
        assert conductor.negotiation["components"][1]["tried"] == {"2": "answered 1", "1": "answered 1"}

    run(body)


def test_a_retired_components_later_lines_are_ignored(engine: ModuleType) -> None:
    """A proxy refusing 2 and writing more in the same read: what follows its refusal is dropped."""
    async def body() -> None:
        comps = [Scripted(), Scripted()]
        async with Conductor(comps, engine=engine) as upstream:
            client = LinePeer(upstream)
            client.send(req(0, "initialize", v2_init()))
            proxy = await comps[0].peer()
            got = await proxy.recv()
            refusal = {"jsonrpc": "2.0", "id": got["id"],
                       "error": {"code": -32600, "message": "Invalid request", "data": "v1 only"}}
            proxy.stream.write(json.dumps(refusal).encode() + b"\n" + json.dumps(req("x", "_vendor/stray")).encode()
                               + b"\n")
            proxy2 = await restarted(comps[0], 2)
            got2 = await proxy2.recv()
            assert got2["params"] == V2_INIT_LOWERED
            proxy2.send(req("f", "_proxy/successor", {"method": "initialize", "params": got2["params"]}))
            agent = await comps[1].peer()
            a = await agent.recv()
            assert a["params"] == V2_INIT_LOWERED  # the agent's first initialize is at 1
            agent.send(ok(a["id"], V1_RESULT))
            assert await proxy2.recv() == ok("f", V1_RESULT)
            proxy2.send(ok(got2["id"], V1_RESULT))
            assert await client.recv() == ok(0, V1_RESULT)  # nothing of the stray request before it

    run(body)


def test_a_partial_line_crosses_the_switch_to_the_forwarder(engine: ModuleType) -> None:
    async def body() -> None:
        comps = [Scripted()]
        conductor = Conductor(comps, engine=engine)
        async with conductor as upstream:
            client = LinePeer(upstream)
            client.send(req(0, "initialize", v1_init()))
            agent = await comps[0].peer()
            got = await agent.recv()
            update = {"jsonrpc": "2.0", "method": "session/update",
                      "params": {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk"}}}
            line = json.dumps(update).encode()
            agent.stream.write(json.dumps(ok(got["id"], V1_RESULT)).encode() + b"\n" + line[:25])
            assert await client.recv() == ok(0, V1_RESULT)
            assert conductor._fw.fast(1)  # white box: the rest is read by the Forwarder
            agent.stream.write(line[25:] + b"\n")
            assert await client.recv() == update

    run(body)


def test_held_calls_are_bounded_then_go_on_in_order(engine: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    from acp_fast.conductor import chain

    monkeypatch.setattr(chain, "BACKLOG_LIMIT", 4)

    async def body() -> None:
        comps = [Scripted()]
        conductor = Conductor(comps, engine=engine)
        async with conductor as upstream:
            client = LinePeer(upstream)
            client.send(req(0, "initialize", v1_init()))
            agent = await comps[0].peer()
            got = await agent.recv()
            for i in range(12):  # one read each
                client.send(req(i + 1, "_vendor/n", {"i": i}))
                await asyncio.sleep(0.002)
            assert len(conductor._backlog) == 4 and conductor._up is not None
            assert conductor._up.stream._paused  # type: ignore[union-attr]  # white box: upstream not read
            agent.send(ok(got["id"], V1_RESULT))
            assert await client.recv() == ok(0, V1_RESULT)
            assert [(await agent.recv())["params"]["i"] for _ in range(12)] == list(range(12))

    run(body)


# ---------------------------------------------------------------------------------------
# the trace, and acp-fast conductor itself
# ---------------------------------------------------------------------------------------


def test_trace_records_the_selection(engine: ModuleType, tmp_path: Path) -> None:
    from acp_fast.conductor.trace_view import analyse, load_events, summary_table

    async def body() -> None:
        path = tmp_path / "trace.jsons"
        conductor = Conductor([passthrough(), testy.build((1,))], engine=engine, trace=path)
        got = await through(conductor, v2_init())
        assert got["result"]["protocolVersion"] == 1
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        (record,) = [e for e in lines if e["type"] == "negotiation"]
        assert isinstance(record.pop("ts"), float)
        assert record == {"type": "negotiation", **(conductor.negotiation or {})}
        assert (record["requested"], record["selected"], record["attempts"]) == (2, 1, [2, 1])
        assert [(c["name"], c["tried"], c["version"]) for c in record["components"]] == [
            ("Proxy(0)", {"2": "accepted", "1": "accepted"}, 1),
            ("Agent", {"2": "answered 1", "1": "reused"}, 1)]
        # written when the chain's initialize is answered: before any later message
        index = lines.index(next(e for e in lines if e["type"] == "negotiation"))
        assert all(e.get("method") != "session/new" for e in lines[:index])
        records: list[dict[str, Any]] = []
        events, warnings = load_events(path, records)  # the viewer draws messages only
        assert len(events) == len(lines) - 1 and records[0]["selected"] == 1 and not warnings
        assert "initialize" in summary_table(analyse(events))

    run(body)


def cli_run(engine: ModuleType, args: list[str], lines: list[dict[str, Any]]) -> dict[Any, Any]:
    """Run ``acp-fast ARGS`` fed ``lines``; its answers by id (notifications under ``None``)."""
    env = {**os.environ, **component_env(engine)}
    proc = subprocess.run([sys.executable, "-m", "acp_fast.cli.main", *args],
                          input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    out: dict[Any, Any] = {None: []}
    for line in proc.stdout.splitlines():
        msg = json.loads(line)
        if "method" in msg:
            out[None].append(msg)
        else:
            out[msg["id"]] = {k: v for k, v in msg.items() if k in ("result", "error")}
    return out


def test_cli_reproduction_of_the_issue(engine: ModuleType) -> None:
    """``acp-fast conductor agent "acp-fast testy --versions 1"`` fed the issue's v2
    ``initialize`` (with a pass-through proxy process in front): what Testy answers directly."""
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": 2, "clientCapabilities": {}}},
             {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}},
             {"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
              "params": text_prompt("testy-session-1", "echo piped")}]
    agent = " ".join(cmd_testy(engine, "--versions", "1"))
    proxy = f"{sys.executable} -m acp_fast.conductor.passthrough --engine {engine.IMPLEMENTATION}"
    expected = cli_run(engine, cmd_testy(engine, "--versions", "1")[3:], lines)
    assert expected[0]["result"]["protocolVersion"] == 1 and chunks(expected[None]) == ["piped"]
    assert cli_run(engine, ["conductor", "agent", proxy, agent], lines) == expected
    # pinned: no probing; the agent is named
    out = cli_run(engine, ["conductor", "--protocol-version", "2", "agent", agent], lines[:1])
    assert out[0]["error"]["data"].startswith(f"Agent (`{agent}`) answered ACP protocol version 1, not 2, the "
                                              "version this chain is pinned to (protocol_version=2)")


def test_a_proxy_answering_another_version_fails_the_chain(engine: ModuleType) -> None:
    async def body() -> None:
        comps = [Scripted(), Scripted()]
        conductor = Conductor(comps, engine=engine)
        async with conductor as upstream:
            client = LinePeer(upstream)
            client.send(req(0, "initialize", v2_init()))
            proxy = await comps[0].peer()
            got = await proxy.recv()
            proxy.send(req("f", "_proxy/successor", {"method": "initialize", "params": got["params"]}))
            agent = await comps[1].peer()
            a = await agent.recv()
            answer = {"protocolVersion": 2, "info": {"name": "a", "version": "1"}}
            agent.send(ok(a["id"], answer))
            assert await proxy.recv() == ok("f", answer)
            proxy.send(ok(got["id"], V1_RESULT))  # a proxy that changed the version: half-speaking
            reply = await client.recv()
            assert reply["id"] == 0 and reply["error"]["data"].startswith(
                "Proxy(0) (`<in-process Scripted>`) answered ACP protocol version 1, not 2, the version "
                "selected for this chain [client requested 2, Agent speaks 2"), reply
            await client.closed()

    run(body)


def test_the_rules() -> None:
    import doctest

    from acp_fast.conductor import selection

    assert doctest.testmod(selection).failed == 0
    v2 = {"protocolVersion": 65535, "info": {"name": "c", "version": "1"}, "capabilities": {}, "future": 1}
    assert selection.initialize_params(v2, 65535, 65535) is None  # the client's own bytes
    assert selection.initialize_params(v2, 65535, 2) == dict(v2, protocolVersion=2)  # only the version
    lowered = selection.initialize_params(v2, 65535, 1)
    assert lowered is not None and lowered["protocolVersion"] == 1 and "future" not in lowered
    assert lowered["clientInfo"] == {"name": "c", "version": "1"}
    mixed = {"protocolVersion": 2, "clientCapabilities": {"fs": {"readTextFile": True}}, "clientInfo": {"name": "z"}}
    lowered = selection.initialize_params(mixed, 2, 1)  # the client's own v1 fields are kept
    assert lowered is not None and lowered["clientCapabilities"] == {"fs": {"readTextFile": True}}
    assert lowered["clientInfo"] == {"name": "z"}
    assert selection.same_initialize(v2, selection.initialize_params(v2, 65535, 1))
    assert not selection.same_initialize(v2, dict(selection.initialize_params(v2, 65535, 1) or {}, _meta={"x": 1}))
    assert not selection.same_initialize(v1_init(), v1_init())  # only a newer request is lowered
    assert selection.first_version(65535, None) == 2 and selection.first_version(1, None) == 1
    assert selection.first_version(2, 1) == 1
    with pytest.raises(Exception, match="Unsupported protocol version"):
        selection.first_version(1, 2)


def test_a_retired_components_write_backpressure_is_forgotten(engine: ModuleType) -> None:
    """White box: a proxy that stopped reading (write-paused) when it is restarted, and whose
    transport reports it later, must not keep the chain paused."""
    async def body() -> None:
        comps = [Scripted(), Scripted()]
        conductor = Conductor(comps, engine=engine)
        async with conductor as upstream:
            client = LinePeer(upstream)
            client.send(req(0, "initialize", v2_init()))
            proxy = await comps[0].peer()
            got = await proxy.recv()
            old = conductor._comps[0]
            conductor._on_writable(old, False)  # as its transport does when it stops reading
            proxy.send({"jsonrpc": "2.0", "id": got["id"], "error": {"code": -32600, "message": "v1 only"}})
            proxy2 = await restarted(comps[0], 2)
            conductor._on_writable(old, False)  # late news from the retired one
            got2 = await proxy2.recv()
            proxy2.send(req("ask", "_vendor/ask", {}))  # upstream is read: the client can answer
            ask = await client.recv()
            client.send(ok(ask["id"], "yes"))
            assert await proxy2.recv() == ok("ask", "yes")
            proxy2.send(req("f", "_proxy/successor", {"method": "initialize", "params": got2["params"]}))
            agent = await comps[1].peer()
            a = await agent.recv()
            agent.send(ok(a["id"], V1_RESULT))
            assert await proxy2.recv() == ok("f", V1_RESULT)
            proxy2.send(ok(got2["id"], V1_RESULT))
            assert await client.recv() == ok(0, V1_RESULT)
            client.send(req(1, "_vendor/after"))  # upstream is read again
            assert (await proxy2.recv())["method"] == "_vendor/after"

    run(body)


def test_requests_to_a_restarted_proxy_fail(engine: ModuleType) -> None:
    """The agent asks something (through the proxy) and answers 1: the proxy it asked is
    restarted, so its request fails at once instead of waiting forever."""
    async def body() -> None:
        comps = [Scripted(), Scripted()]
        async with Conductor(comps, engine=engine) as upstream:
            client = LinePeer(upstream)
            client.send(req(0, "initialize", v2_init()))
            proxy = await comps[0].peer()
            got = await proxy.recv()
            proxy.send(req("f", "_proxy/successor", {"method": "initialize", "params": got["params"]}))
            agent = await comps[1].peer()
            a = await agent.recv()
            agent.send(req("ask", "_vendor/ask", {}))
            assert (await proxy.recv())["params"]["method"] == "_vendor/ask"  # wrapped, to the proxy
            agent.send(ok(a["id"], V1_RESULT))
            assert await agent.recv() == {"jsonrpc": "2.0", "id": "ask", "error": {
                "code": -32603, "message": "Internal error",
                "data": "Proxy(0) restarted while the chain selected its protocol version"}}

    run(body)


def test_a_component_exiting_during_the_selection_fails_it(engine: ModuleType) -> None:
    async def body() -> None:
        comps = [Scripted(), Scripted()]
        conductor = Conductor(comps, engine=engine)
        async with conductor as upstream:
            client = LinePeer(upstream)
            client.send(req(0, "initialize", v2_init()))
            await (await comps[0].peer()).recv()
            comps[0].close()
            reply = await client.recv()
            assert reply["id"] == 0 and reply["error"]["data"].startswith("Proxy(0) exited")
        assert conductor.negotiation is not None and conductor.negotiation["outcome"] == "failed"
        assert conductor.negotiation["error"] == reply["error"] and conductor.version == 0

    run(body)


def test_an_answer_after_the_chain_ended_does_not_make_it_ready(engine: ModuleType) -> None:
    """White box: the chain ends (``async with`` left) while the agent's answer is on its way."""
    async def body() -> None:
        comps = [Scripted()]
        conductor = Conductor(comps, engine=engine)
        upstream = await conductor.__aenter__()
        LinePeer(upstream).send(req(0, "initialize", v1_init()))
        agent = await comps[0].peer()
        got = await agent.recv()
        conductor._finish()  # what leaving the block does first
        agent.send(ok(got["id"], V1_RESULT))
        await conductor.__aexit__(None, None, None)
        assert conductor.version == 0 and conductor.negotiation is None

    run(body)


def test_an_answer_to_a_restarted_proxy_does_not_reach_its_successor(engine: ModuleType) -> None:
    """The first proxy asks the client, the chain goes down to 1 before the client answers: the
    late answer is dropped (the proxy that asked is gone), not delivered to the new proxy."""
    async def body() -> None:
        comps = [Scripted(), Scripted()]
        async with Conductor(comps, engine=engine) as upstream:
            client = LinePeer(upstream)
            client.send(req(0, "initialize", v2_init()))
            proxy = await comps[0].peer()
            got = await proxy.recv()
            proxy.send(req("ask", "_vendor/ask", {}))
            ask = await client.recv()
            proxy.send(req("f", "_proxy/successor", {"method": "initialize", "params": got["params"]}))
            agent = await comps[1].peer()
            a = await agent.recv()
            agent.send(ok(a["id"], V1_RESULT))
            proxy2 = await restarted(comps[0], 2)
            client.send(ok(ask["id"], "late"))
            got2 = await proxy2.recv()
            assert got2["method"] == "_proxy/initialize"
            proxy2.send(req("f2", "_proxy/successor", {"method": "initialize", "params": got2["params"]}))
            assert await proxy2.recv() == ok("f2", V1_RESULT)
            proxy2.send(ok(got2["id"], V1_RESULT))
            assert await client.recv() == ok(0, V1_RESULT)
            client.send(req(1, "_vendor/after"))
            assert (await proxy2.recv())["method"] == "_vendor/after"  # and nothing before it

    run(body)


def test_the_kept_tail_is_bounded_like_a_line(engine: ModuleType) -> None:
    from acp_fast.conductor import chain

    hop = chain._Hop(0, "Agent", None)  # white box: the tail kept while the version is selected
    hop.decoder = engine.Decoder(lazy=True, max_line_size=8)
    hop.keep_tail(b'{"a":1}\n{"b"')
    assert hop.tail == b'{"b"'
    for _ in range(5):
        hop.keep_tail(b"0123456789")
    assert hop.tail == b'{"b"01234'  # one byte over the limit: the Forwarder discards the line too
    hop.keep_tail(b"rest\n{")
    assert hop.tail == b"{"
