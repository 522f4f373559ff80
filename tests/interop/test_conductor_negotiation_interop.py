"""The conductor's version selection (issue 20) with the official SDKs' peers, real processes.

* The matrix of ``tests/test_conductor_negotiation.py`` through 1 and 3 TypeScript SDK
  proxies (``peers/ts/proxy.mjs``, child processes; it forwards any version, so a chain
  whose agent answers lower starts the TS proxies again at that version): a v1, a v2 and a
  65535 client against a v1-only, a v2-only and the router Testy, expecting what the
  client gets from the agent directly. The nine cases of one chain shape run at once, so
  the node start-ups overlap.
* The acp_fast connector (``Client.protocol_connector()``: v2 first), the TypeScript SDK
  client and the official Python SDK client drive a chain to a v1-only Testy
  (``acp-fast testy --versions 1``) and stream a prompt.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from interop_support import PEERS_PY, PEERS_TS, fast_testy, json_line
from negotiation_support import AGENTS, CLIENTS, assert_one_version, direct, through
from roles_support import run

from acp_fast import Client, SessionUpdate, testy
from acp_fast.conductor import Conductor
from acp_fast.conductor.passthrough import build as passthrough

TS_PROXY = ["node", str(PEERS_TS / "proxy.mjs")]


@pytest.mark.usefixtures("ts_sdk")
@pytest.mark.parametrize("n_proxies", [1, 3])
def test_ts_proxies_give_what_the_agent_gives_directly(engine: ModuleType, n_proxies: int) -> None:
    async def case(agent: str, client: str) -> list[str]:
        versions, params = AGENTS[agent], CLIENTS[client]
        expected = await direct(engine, versions, params)
        conductor = Conductor([*[TS_PROXY] * n_proxies, testy.build(versions)], engine=engine)
        got = await through(conductor, params)
        if got != expected:
            return [f"{agent}/{client}: {got} != {expected}"]
        assert_one_version(conductor, got)
        record = conductor.negotiation
        assert record is not None
        if agent == "v1-only" and client != "v1":  # the TS proxies start again at 1; the agent is kept
            assert record["attempts"] == [2, 1] and record["components"][-1]["tried"] == {
                "2": "answered 1", "1": "reused"}, record
            assert [c["starts"] for c in record["components"]] == [2] * n_proxies + [1]
        return []

    async def body() -> None:
        results = await asyncio.gather(*(case(a, c) for a in AGENTS for c in CLIENTS))
        assert not [line for lines in results for line in lines]

    run(body)


def test_acp_fast_connector_drives_a_chain_to_a_v1_only_agent(engine: ModuleType) -> None:
    """v2 first: the chain answers 1 (the agent's version), the connector falls back to its v1
    implementation (on the same connection when the requests agree, else on a new chain)."""

    async def body() -> None:
        texts: list[str] = []
        conductors: list[Conductor] = []

        def record(update: SessionUpdate, cx: Any) -> None:
            if update.kind == "agent_message_chunk":
                texts.append(update.payload["content"]["text"])

        async def main_v2(cx: Any) -> Any:
            await cx.initialize()  # answered 1: the connector takes over with its v1 implementation
            return 2

        async def main_v1(cx: Any) -> Any:
            init = await cx.initialize()
            session = (await cx.build_session("/")).session
            return init["protocolVersion"], (await session.send_prompt("stream 5 chunks of 4 bytes"))["stopReason"]

        async def chain() -> Any:
            conductor = Conductor([passthrough(), passthrough(), testy.build((1,))], engine=engine)
            conductors.append(conductor)
            return await conductor.__aenter__()

        connector = (Client.protocol_connector()
                     .with_v1(lambda: Client.builder().on_session_update(record).with_main(main_v1))
                     .with_v2(lambda: Client.v2().on_session_update(record).with_main(main_v2)))
        try:
            assert await connector.run(chain, engine=engine) == (1, "end_turn")
        finally:
            for conductor in conductors:
                await conductor.__aexit__(None, None, None)
        assert "".join(texts) == "".join(f"{i}xxx" for i in range(5))
        first, last = conductors[0].negotiation, conductors[-1].negotiation
        assert first is not None and first["requested"] == 2 and first["selected"] == 1, first
        assert last is not None and last["selected"] == 1, last

    run(body)


def fast_proxy(engine: ModuleType) -> str:
    return shlex.join([sys.executable, "-m", "acp_fast.conductor.passthrough", "--engine", engine.IMPLEMENTATION])


def v1_only_chain(engine: ModuleType, *proxies: str) -> list[str]:
    """``acp-fast conductor agent PROXY… "acp-fast testy --versions 1"``."""
    return [sys.executable, "-m", "acp_fast.cli.main", "conductor", "agent", *proxies,
            shlex.join(fast_testy(engine, "--versions", "1"))]


def conductor_env(engine: ModuleType) -> dict[str, str]:
    return {"ACP_FAST_NO_EXTENSIONS": "1"} if engine.IMPLEMENTATION == "py" else {}


@pytest.mark.usefixtures("ts_sdk")
def test_ts_client_streams_through_a_chain_to_a_v1_only_agent(ts_sdk: str, engine: ModuleType) -> None:
    out = json_line([ts_sdk, str(PEERS_TS / "client.mjs"), "--n", "100", "--m", "5", "--", *v1_only_chain(
        engine, shlex.join(TS_PROXY), fast_proxy(engine))], ACP_CHUNK="16", **conductor_env(engine))
    assert out["protocolVersion"] == 1 and out["agentInfo"]["name"] == "test-agent"
    assert out["updatesReceived"] == 100 and out["updatesOk"] and out["textOk"]
    assert out["stopReason"] == "end_turn" and out["agentExit"] == 0


@pytest.mark.usefixtures("pysdk", "ts_sdk")
def test_pysdk_client_streams_through_a_chain_to_a_v1_only_agent(engine: ModuleType) -> None:
    out = json_line([sys.executable, str(PEERS_PY / "client.py"), "--n", "100", "--m", "5", "--", *v1_only_chain(
        engine, fast_proxy(engine), shlex.join(TS_PROXY))], ACP_CHUNK="16", **conductor_env(engine))
    assert out["protocolVersion"] == 1 and out["agentInfo"]["name"] == "test-agent"
    assert out["updatesReceived"] == 100 and out["updatesOk"] and out["textOk"]
    assert out["stopReason"] == "end_turn" and out["agentExit"] == 0
