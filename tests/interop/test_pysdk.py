"""Interop with the official Python SDK (``agent-client-protocol`` 0.12.1, v1 only), real processes.

* SDK clients (``peers/pysdk/client.py`` and ``tests/interop/pysdk_probe.py``) against
  ``acp-fast testy``;
* acp_fast clients against ``peers/pysdk/agent.py``;
* raw wire behaviour of the SDK agent next to testy (the differences listed in INTEROP.md).

Everything with an acp_fast engine in it runs on both twins.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "helpers"))

from interop_support import HERE, PEERS_PY, REPO, env, fast_testy, json_line, run
from roles_support import RawPeer

from acp_fast import Client, JsonRpcError
from acp_fast.transport import spawn

pytestmark = pytest.mark.usefixtures("pysdk")

PROBE = str(HERE / "pysdk_probe.py")
AGENT = [sys.executable, str(PEERS_PY / "agent.py")]


def probe(scenario: str, agent: list[str]) -> dict[str, Any]:
    return json_line([sys.executable, PROBE, scenario, "--", *agent])


async def sdk_agent(**extra_env: str) -> Any:
    return await spawn(AGENT, env=env(**extra_env), cwd=REPO)


# ---------------------------------------------------------------------------------------
# Python SDK clients -> acp-fast testy
# ---------------------------------------------------------------------------------------


def test_pysdk_client_streams_from_testy(engine: ModuleType) -> None:
    out = json_line([sys.executable, str(PEERS_PY / "client.py"), "--n", "200", "--permission", "--m", "30",
                     "--rtt-method", "prompt", "--inflight", "4", "--inflight-m", "40", "--warmup", "10", "--",
                     *fast_testy(engine)], ACP_CHUNK="50")
    assert out["protocolVersion"] == 1 and out["agentInfo"]["name"] == "test-agent"
    assert out["permissionRequests"] == 1 and out["updatesReceived"] == 201 and out["updatesOk"]
    assert out["textOk"] and out["stopReason"] == "end_turn" and out["agentExit"] == 0
    assert out["agentMaxRssKiB"] > 0 and out["requestsPerSec"] > 0 and out["rttMethod"] == "prompt"


def test_pysdk_probe_scenarios(engine: ModuleType) -> None:
    suite = probe("suite", fast_testy(engine))
    assert suite["cancel"] == {"stopReason": "cancelled"}
    out = suite["errors"]
    assert out["unknown"]["code"] == -32601 and out["unknown"]["data"] == "_no/such_method"
    assert out["unknownSession"]["code"] == -32602
    assert out["echo"] == {"deep": {"a": [1, "two", None]}}
    assert {"maxRssKiB", "rssKiB", "userCpuUs", "systemCpuUs", "notesReceived"} <= set(out["stats"])
    out = suite["callbacks"]
    assert out["stopReason"] == "end_turn"
    assert out["asked"] == ["session/request_permission", "fs/write_text_file", "fs/read_text_file"]


def test_pysdk_client_against_v2_only_testy_gets_32022(engine: ModuleType) -> None:
    out = probe("init-error", fast_testy(engine, "--versions", "2"))
    assert out["error"]["code"] == -32022
    assert out["error"]["data"] == {"requested": 1, "supported": [2]}


# ---------------------------------------------------------------------------------------
# acp_fast clients -> the Python SDK agent
# ---------------------------------------------------------------------------------------


def test_acp_v1_client_against_pysdk_agent(engine: ModuleType) -> None:
    async def body() -> None:
        record: list[Any] = []
        arrived = asyncio.Event()
        client = Client.builder().on_session_update(lambda u, cx: (record.append(u), arrived.set()))

        @client.on_request("session/request_permission")
        def permission(params: dict[str, Any], cx: Any) -> dict[str, Any]:
            return {"outcome": {"outcome": "selected", "optionId": params["options"][0]["optionId"]}}

        def texts() -> list[str]:
            return [u.payload["content"]["text"] for u in record if u.kind == "agent_message_chunk"]

        async def main(cx: Any) -> None:
            init = await cx.initialize()
            assert init["protocolVersion"] == 1 and init["agentInfo"]["name"] == "pysdk-test-agent"
            session = (await cx.build_session(str(REPO))).session
            assert await session.send_prompt("stream 6 chunks") == {"stopReason": "end_turn"}
            assert texts() == ["x" * 10] * 6 and all(u.known for u in record)
            record.clear()
            assert await session.send_prompt("permission 1") == {"stopReason": "end_turn"}
            assert texts() == ["permission:allow", "x" * 10]
            assert await cx.send_request("_test/echo", {"k": [1, None]}) == {"k": [1, None]}
            with pytest.raises(JsonRpcError) as exc:
                await cx.send_request("_no/such_method", {})
            assert exc.value.code == -32601
            with pytest.raises(JsonRpcError) as exc:
                await cx.send_request("session/prompt", {"sessionId": "nope", "prompt": []})
            assert exc.value.code == -32602
            # session/cancel ends the turn with stopReason cancelled
            arrived.clear()
            turn = session.send_prompt("100000000")
            await arrived.wait()
            session.cancel_active_work()
            assert await turn == {"stopReason": "cancelled"}

        await client.connect_with(sdk_agent(ACP_CHUNK="10"), main, engine=engine)

    run(body)


def test_pysdk_agent_ignores_cancel_request(engine: ModuleType) -> None:
    """The Python SDK 0.12.1 has no ``$/cancel_request``: the prompt runs to its end. The
    cancel goes while the agent waits for the client's permission answer, so the turn is
    surely in flight (answered once the cancel has gone)."""

    async def body() -> None:
        count = [0]
        asked = asyncio.Event()
        cancelled = asyncio.Event()
        client = Client.builder().on_session_update(lambda u, cx: count.__setitem__(0, count[0] + 1))

        @client.on_request("session/request_permission")
        async def permission(params: dict[str, Any], cx: Any) -> dict[str, Any]:
            asked.set()
            await cancelled.wait()
            return {"outcome": {"outcome": "selected", "optionId": params["options"][0]["optionId"]}}

        async def main(cx: Any) -> None:
            await cx.initialize()
            session = (await cx.build_session(str(REPO))).session
            turn = session.send_prompt("permission, then stream 300 chunks")
            await asked.wait()
            assert turn.cancel()  # $/cancel_request sent: the SDK agent does not know it
            cancelled.set()
            assert await turn == {"stopReason": "end_turn"}
            await cx.send_request("_test/echo", {})  # every update was read before this answer
            assert count[0] == 1 + 300  # the permission outcome, then every chunk

        await client.connect_with(sdk_agent(ACP_CHUNK="10"), main, engine=engine)

    run(body)


def test_acp_connector_falls_back_to_v1_with_pysdk_agent(engine: ModuleType) -> None:
    async def body() -> None:
        ran: list[int] = []

        async def main_v1(cx: Any) -> Any:
            ran.append(1)
            assert (await cx.initialize())["protocolVersion"] == 1
            session = (await cx.build_session(str(REPO))).session
            return (await session.send_prompt("stream 2 chunks"))["stopReason"]

        async def main_v2(cx: Any) -> Any:
            ran.append(2)
            await cx.initialize()
            raise AssertionError("the Python SDK agent speaks v1 only")

        connector = (Client.protocol_connector()
                     .with_v1(lambda: Client.builder().with_main(main_v1))
                     .with_v2(lambda: Client.v2().with_main(main_v2)))
        assert await connector.run(lambda: sdk_agent(ACP_CHUNK="5"), engine=engine) == "end_turn"
        # v2 first; then v1 (a fresh connection: the v1 params differ from the normalised v2 ones)
        assert ran[0] == 2 and ran[-1] == 1 and 2 not in ran[1:]

    run(body)


def test_acp_v2_client_against_pysdk_agent(engine: ModuleType) -> None:
    async def body() -> None:
        async def main(cx: Any) -> None:
            with pytest.raises(JsonRpcError) as exc:
                await cx.initialize()
            assert exc.value.code == -32600 and "peer negotiated 1" in exc.value.data

        await Client.v2().connect_with(sdk_agent(), main, engine=engine)

    run(body)


# ---------------------------------------------------------------------------------------
# raw wire behaviour (INTEROP.md "Deliberate differences")
# ---------------------------------------------------------------------------------------


async def raw_session(cmd: list[str]) -> tuple[RawPeer, Any]:
    stream = await spawn(cmd, env=env(), cwd=REPO)
    peer = RawPeer(stream)
    peer.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
    await peer.recv()
    return peer, stream


async def replies_to(peer: RawPeer, line: bytes, tag: str) -> list[Any]:
    peer.send_raw(line)
    peer.send({"jsonrpc": "2.0", "id": tag, "method": "_test/echo", "params": {}})
    got = []
    while (msg := await peer.recv()) != {"jsonrpc": "2.0", "id": tag, "result": {}}:
        got.append(msg)
    return got


def test_wire_differences_pysdk_vs_testy(engine: ModuleType) -> None:
    async def body() -> None:
        sdk, sdk_stream = await raw_session(AGENT)
        fast, fast_stream = await raw_session(fast_testy(engine))
        # invalid JSON: the Python SDK answers nothing (logs and drops it); acp_fast: -32700
        assert await replies_to(sdk, b"{not json", "a") == []
        assert (await replies_to(fast, b"{not json", "a"))[0]["error"]["code"] == -32700
        # no "jsonrpc" member: the SDK processes the request anyway; acp_fast: -32600
        assert await replies_to(sdk, b'{"id":5,"method":"_test/echo","params":{"q":1}}', "b") == [
            {"jsonrpc": "2.0", "id": 5, "result": {"q": 1}}]
        assert (await replies_to(fast, b'{"id":5,"method":"_test/echo","params":{"q":1}}', "b"))[0]["error"] == {
            "code": -32600, "message": "Invalid request", "data": "invalid jsonrpc version"}
        # a batch: acp_fast answers it; the Python SDK drops the connection
        batch = b'[{"jsonrpc":"2.0","id":7,"method":"_test/echo","params":{"z":1}}]'
        assert await replies_to(fast, batch, "c") == [[{"jsonrpc": "2.0", "id": 7, "result": {"z": 1}}]]
        sdk.send_raw(batch)
        with pytest.raises(EOFError):
            while True:
                await sdk.recv()
        for stream in (sdk_stream, fast_stream):
            stream.close()
            await stream.wait_closed()

    run(body)
