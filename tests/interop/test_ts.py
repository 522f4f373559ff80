"""Interop with the official TypeScript SDK (``@agentclientprotocol/sdk`` 2.4.0), real processes.

* TS clients (``peers/ts/client.mjs``, ``client_v2.mjs`` and ``tests/interop/ts_probe.mjs``)
  against ``acp-fast testy`` (the acp_fast agent router; ``--versions 1`` / ``--versions 2``);
* acp_fast clients (``Client.builder()``, ``Client.v2()``, ``Client.protocol_connector()``)
  against the TS agents (``agent.mjs`` v1, ``agent_v2.mjs`` v2, ``agent_dual.mjs`` the TS
  router);
* raw wire behaviour of both agents side by side (the differences listed in INTEROP.md).

Everything with an acp_fast engine in it runs on both twins (``engine`` fixture: the
in-process client, or ``testy --engine``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "helpers"))

from interop_support import HERE, PEERS_TS, REPO, env, fast_testy, json_line, run
from roles_support import RawPeer

from acp_fast import Client, JsonRpcError
from acp_fast.transport import spawn

pytestmark = pytest.mark.usefixtures("ts_sdk")

PROBE = str(HERE / "ts_probe.mjs")


def ts_client(node: str, script: str, engine: ModuleType, *args: str, agent_args: tuple[str, ...] = (),
              **extra_env: str) -> dict[str, Any]:
    return json_line([node, str(PEERS_TS / script), *args, "--", *fast_testy(engine, *agent_args)], **extra_env)


def probe(node: str, scenario: str, agent: list[str]) -> dict[str, Any]:
    out = json_line([node, PROBE, scenario, "--", *agent])
    assert "thrown" not in out, out
    return out


async def ts_agent(script: str, **extra_env: str) -> Any:
    return await spawn(["node", str(PEERS_TS / script)], env=env(**extra_env), cwd=REPO)


# ---------------------------------------------------------------------------------------
# TS clients -> acp-fast testy
# ---------------------------------------------------------------------------------------


def test_ts_v1_client_streams_from_testy(ts_sdk: str, engine: ModuleType) -> None:
    out = ts_client(ts_sdk, "client.mjs", engine, "--n", "300", "--permission", "--m", "50", "--inflight", "8",
                    "--inflight-m", "100", "--warmup", "20", ACP_CHUNK="64")
    assert out["protocolVersion"] == 1 and out["agentInfo"]["name"] == "test-agent"
    # the permission request, its outcome chunk, then the N chunks
    assert out["permissionRequests"] == 1 and out["updatesReceived"] == 301 and out["updatesOk"]
    assert out["textBytes"] == 300 * 64 + len("permission:allow") and out["textOk"]
    assert out["stopReason"] == "end_turn" and out["agentExit"] == 0
    assert out["roundTripsPerSec"] > 0 and out["requestsPerSec"] > 0
    assert out["agentMaxRssKiB"] > 0


def test_ts_v1_client_large_chunks(ts_sdk: str, engine: ModuleType) -> None:
    out = ts_client(ts_sdk, "client.mjs", engine, "--large", "--n", "8", "--m", "0")
    assert out["chunkSize"] == 1048576 and out["textBytes"] == 8 * 1048576 and out["textOk"]


def test_ts_v1_client_against_v1_only_testy(ts_sdk: str, engine: ModuleType) -> None:
    out = ts_client(ts_sdk, "client.mjs", engine, "--n", "10", "--m", "10", "--rtt-method", "prompt",
                    agent_args=("--versions", "1"))
    assert out["protocolVersion"] == 1 and out["updatesOk"] and out["stopReason"] == "end_turn"
    assert out["rttMethod"] == "prompt" and out["agentExit"] == 0


@pytest.mark.parametrize("versions", ["1,2", "2"])
def test_ts_v2_client_streams_from_testy(ts_sdk: str, engine: ModuleType, versions: str) -> None:
    out = ts_client(ts_sdk, "client_v2.mjs", engine, "--n", "300", "--m", "50", "--inflight", "8",
                    "--inflight-m", "100", "--warmup", "20", agent_args=("--versions", versions))
    assert out["protocolVersion"] == 2 and out["agentInfo"]["name"] == "test-agent"
    assert out["promptResponse"]["messageId"].startswith("testy-v2-user-message-")
    assert out["updates"] == {"user_message": 1, "state_update:running": 1, "agent_message_chunk": 300,
                              "state_update:idle": 1}
    assert out["updatesOk"] and out["textOk"] and out["stopReason"] == "end_turn" and out["agentExit"] == 0


def test_ts_probe_v1_cancellation(ts_sdk: str, engine: ModuleType) -> None:
    out = probe(ts_sdk, "v1-cancel", fast_testy(engine))
    assert out["result"] == {"stopReason": "cancelled"}
    out = probe(ts_sdk, "v1-cancel-request", fast_testy(engine))  # $/cancel_request from the TS SDK
    assert out["error"]["code"] == -32800


def test_ts_probe_v1_errors_and_callbacks(ts_sdk: str, engine: ModuleType) -> None:
    out = probe(ts_sdk, "v1-errors", fast_testy(engine))
    assert out["unknown"] == {"code": -32601, "message": "Method not found", "data": "_no/such_method"}
    assert out["unknownSession"] == {"code": -32602, "message": "Invalid params",
                                     "data": "unknown session `testy-session-404`"}
    assert out["badParams"]["code"] == -32602
    assert out["echo"] == {"deep": {"a": [1, "two", None]}}
    out = probe(ts_sdk, "v1-callbacks", fast_testy(engine))
    assert out["result"] == {"stopReason": "end_turn"}
    assert out["asked"] == ["session/request_permission", "fs/write_text_file", "fs/read_text_file"]
    assert out["report"].splitlines()[:3] == ["permission: ok allow_once", "fs/write_text_file: ok",
                                              "fs/read_text_file: ok 'testy\\n'"]


def test_ts_v1_client_against_v2_only_testy_gets_32022(ts_sdk: str, engine: ModuleType) -> None:
    out = probe(ts_sdk, "v1-init-error", fast_testy(engine, "--versions", "2"))
    assert out["error"] == {"code": -32022, "message": "Unsupported protocol version",
                            "data": {"requested": 1, "supported": [2]}}


def test_ts_probe_v2_cancel_permission_resume(ts_sdk: str, engine: ModuleType) -> None:
    out = probe(ts_sdk, "v2-cancel", fast_testy(engine))
    assert out["kinds"] == ["user_message", "state_update:running", "state_update:idle"]
    assert out["stopReason"] == "cancelled"
    out = probe(ts_sdk, "v2-permission", fast_testy(engine))
    assert out["asked"] == ["Testy tool"] and out["texts"] == ["permission:reject", "0xx", "1xx"]  # Testy: chunk index + padding
    assert out["stopReason"] == "end_turn"
    out = probe(ts_sdk, "v2-resume", fast_testy(engine))
    assert out["resumed"] == {}
    assert [u["sessionUpdate"] for u in out["seen"]] == ["user_message", "agent_message", "state_update"]
    assert out["seen"][-1] == {"sessionUpdate": "state_update", "state": "idle"}


# ---------------------------------------------------------------------------------------
# acp_fast clients -> TS agents
# ---------------------------------------------------------------------------------------


def v1_client(record: list[Any], choose: str = "allow") -> Any:
    client = Client.builder()
    client.on_session_update(lambda u, cx: record.append(u))

    @client.on_request("session/request_permission")
    def permission(params: dict[str, Any], cx: Any) -> dict[str, Any]:
        return {"outcome": {"outcome": "selected", "optionId": choose}}

    return client


def texts(record: list[Any]) -> list[str]:
    return [u.payload["content"]["text"] for u in record if u.kind == "agent_message_chunk"]


def test_acp_v1_client_against_ts_agent(ts_sdk: str, engine: ModuleType) -> None:
    async def body() -> None:
        record: list[Any] = []

        async def main(cx: Any) -> None:
            init = await cx.initialize()
            assert init["protocolVersion"] == 1 and init["agentInfo"]["name"] == "ts-sdk-test-agent"
            session = (await cx.build_session(str(REPO))).session
            assert await session.send_prompt("stream 7 chunks") == {"stopReason": "end_turn"}
            assert texts(record) == ["x" * 10] * 7 and all(u.known for u in record)
            record.clear()
            assert await session.send_prompt("permission 2") == {"stopReason": "end_turn"}
            assert texts(record) == ["permission:reject", "x" * 10, "x" * 10]
            assert await cx.send_request("_test/echo", {"k": [1, {"z": None}]}) == {"k": [1, {"z": None}]}
            with pytest.raises(JsonRpcError) as exc:
                await cx.send_request("_no/such_method", {})
            assert exc.value.code == -32601
            with pytest.raises(JsonRpcError) as exc:
                await cx.send_request("session/prompt", {"sessionId": "nope", "prompt": []})
            assert exc.value.code == -32002  # the TS peer answers unknown sessions "Resource not found"
            with pytest.raises(JsonRpcError) as exc:
                await cx.send_request("session/new", {"cwd": 42, "mcpServers": []})
            assert exc.value.code == -32602

        await v1_client(record, "reject").connect_with(ts_agent("agent.mjs", ACP_CHUNK="10"), main, engine=engine)

    run(body)


def test_acp_v1_client_cancels_ts_agent(ts_sdk: str, engine: ModuleType) -> None:
    async def body() -> None:
        record: list[Any] = []
        first = asyncio.Event()
        client = Client.builder()
        client.on_session_update(lambda u, cx: (record.append(u), first.set()))

        async def main(cx: Any) -> None:
            await cx.initialize()
            session = (await cx.build_session(str(REPO))).session
            turn = session.send_prompt("100000000")
            await first.wait()
            session.cancel_active_work()  # session/cancel: the turn ends with stopReason cancelled
            assert await turn == {"stopReason": "cancelled"}
            first.clear()
            turn = session.send_prompt("100000000")
            await first.wait()
            assert turn.cancel()  # $/cancel_request: the TS SDK aborts the handler, -32800
            with pytest.raises(JsonRpcError) as exc:
                await turn
            assert exc.value.code == -32800

        await client.connect_with(ts_agent("agent.mjs", ACP_CHUNK="10"), main, engine=engine)

    run(body)


async def v2_turn(cx: Any, record: list[Any], text: str) -> tuple[dict[str, Any], Any]:
    await cx.initialize()
    opened = await cx.build_session(str(REPO))
    session = opened.session
    epoch = session.idle_epoch
    receipt = await session.send_prompt(text)
    stop = await session.wait_idle(after=epoch)
    return receipt, stop


@pytest.mark.parametrize("script", ["agent_v2.mjs", "agent_dual.mjs"])
def test_acp_v2_client_against_ts_agent(ts_sdk: str, engine: ModuleType, script: str) -> None:
    async def body() -> None:
        record: list[Any] = []
        client = Client.v2().on_session_update(lambda u, cx: record.append(u))

        async def main(cx: Any) -> None:
            receipt, stop = await v2_turn(cx, record, "stream 25 chunks")
            assert cx.negotiated_version == 2 and "messageId" in receipt
            assert stop is not None and stop.kind == "end_turn"
            assert texts(record) == ["x" * 10] * 25
            kinds = [u.kind for u in record]
            assert kinds[0] == "state_update" and kinds[-1] == "state_update" and "user_message" in kinds
            assert await cx.send_request("_test/echo", {"v": 2}) == {"v": 2}

        await client.connect_with(ts_agent(script, ACP_CHUNK="10"), main, engine=engine)

    run(body)


@pytest.mark.parametrize(("script", "expected"), [("agent_dual.mjs", 2), ("agent_v2.mjs", 2), ("agent.mjs", 1)])
def test_acp_connector_against_ts_agents(ts_sdk: str, engine: ModuleType, script: str, expected: int) -> None:
    """``Client.protocol_connector()``: v2 when the agent speaks it, else the v1 fallback."""

    async def body() -> None:
        record: list[Any] = []
        ran: list[int] = []

        async def main_v2(cx: Any) -> Any:
            ran.append(2)
            _, stop = await v2_turn(cx, record, "stream 3 chunks")
            return 2, stop.kind

        async def main_v1(cx: Any) -> Any:
            ran.append(1)
            init = await cx.initialize()
            assert init["protocolVersion"] == 1
            session = (await cx.build_session(str(REPO))).session
            return 1, (await session.send_prompt("stream 3 chunks"))["stopReason"]

        connector = (Client.protocol_connector()
                     .with_v1(lambda: Client.builder().on_session_update(lambda u, cx: record.append(u))
                              .with_main(main_v1))
                     .with_v2(lambda: Client.v2().on_session_update(lambda u, cx: record.append(u))
                              .with_main(main_v2)))
        result = await connector.run(lambda: ts_agent(script, ACP_CHUNK="10"), engine=engine)
        assert result == (expected, "end_turn") and ran[-1] == expected
        assert texts(record)[-3:] == ["x" * 10] * 3

    run(body)


def test_acp_v1_client_against_ts_v2_only_agent(ts_sdk: str, engine: ModuleType) -> None:
    async def body() -> None:
        async def main(cx: Any) -> None:
            with pytest.raises(JsonRpcError) as exc:
                await cx.initialize()
            assert (exc.value.code, exc.value.data) == (-32022, {"requested": 1, "supported": [2]})

        await Client.builder().connect_with(ts_agent("agent_v2.mjs"), main, engine=engine)

    run(body)


def test_acp_v2_client_against_ts_v1_agent(ts_sdk: str, engine: ModuleType) -> None:
    async def body() -> None:
        async def main(cx: Any) -> None:
            with pytest.raises(JsonRpcError) as exc:
                await cx.initialize()  # the TS v1 agent answers protocolVersion 1
            assert exc.value.code == -32600
            assert "required ACP protocol version 2 but peer negotiated 1" in exc.value.data

        await Client.v2().connect_with(ts_agent("agent.mjs"), main, engine=engine)

    run(body)


# ---------------------------------------------------------------------------------------
# raw wire behaviour, side by side (INTEROP.md "Deliberate differences")
# ---------------------------------------------------------------------------------------

WIRE_CASES: list[tuple[str, bytes]] = [
    ("blank", b""),
    ("whitespace", b"  \t "),
    ("invalid_json", b"{not json"),
    ("batch", (b'[{"jsonrpc":"2.0","id":10,"method":"_test/echo","params":{"a":1}},'
               b'{"jsonrpc":"2.0","id":11,"method":"_test/echo","params":{"b":2}}]')),
    ("empty_batch", b"[]"),
    ("no_jsonrpc", b'{"id":12,"method":"_test/echo","params":{}}'),
    ("fractional_id", b'{"jsonrpc":"2.0","id":1.5,"method":"_test/echo","params":{}}'),
    ("method_number", b'{"jsonrpc":"2.0","id":14,"method":5}'),
]


async def wire_replies(cmd: list[str], init: dict[str, Any]) -> dict[str, list[Any]]:
    """Each case's replies; a sentinel echo after each one marks where its replies end."""
    stream = await spawn(cmd, env=env(), cwd=REPO)
    peer = RawPeer(stream)
    peer.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
    await peer.recv()
    out: dict[str, list[Any]] = {}
    for n, (name, line) in enumerate(WIRE_CASES):
        peer.send_raw(line)
        peer.send({"jsonrpc": "2.0", "id": f"sentinel-{n}", "method": "_test/echo", "params": {}})
        got = []
        while (msg := await peer.recv()) != {"jsonrpc": "2.0", "id": f"sentinel-{n}", "result": {}}:
            got.append(msg)
        out[name] = got
    stream.close()
    await stream.wait_closed()
    return out


def test_wire_differences_ts_vs_testy(ts_sdk: str, engine: ModuleType) -> None:
    async def body() -> None:
        init = {"protocolVersion": 1, "clientInfo": {"name": "raw", "version": "0"}}
        ts = await wire_replies(["node", str(PEERS_TS / "agent.mjs")], init)
        fast = await wire_replies(fast_testy(engine), init)
        # both ignore blank and whitespace-only lines (the Rust SDK answers -32700)
        assert ts["blank"] == fast["blank"] == ts["whitespace"] == fast["whitespace"] == []
        # both answer invalid JSON with -32700 (acp_fast adds the offending line as data)
        assert ts["invalid_json"] == [{"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}]
        assert fast["invalid_json"] == [{"jsonrpc": "2.0", "id": None, "error": {
            "code": -32700, "message": "Parse error", "data": {"line": "{not json"}}}]
        # batches: the TS SDK rejects every batch; acp_fast answers it with one array
        rejected = [{"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600, "message": "Invalid request: JSON-RPC batches are not supported"}}]
        assert ts["batch"] == ts["empty_batch"] == rejected
        assert fast["batch"] == [[{"jsonrpc": "2.0", "id": 10, "result": {"a": 1}},
                                  {"jsonrpc": "2.0", "id": 11, "result": {"b": 2}}]]
        assert fast["empty_batch"] == [{"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600, "message": "Invalid request", "data": "empty batch"}}]
        # -32600: the TS SDK echoes the message as data, acp_fast names the failed rule
        assert ts["no_jsonrpc"][0]["error"]["data"] == {"id": 12, "method": "_test/echo", "params": {}}
        assert fast["no_jsonrpc"][0]["error"] == {"code": -32600, "message": "Invalid request",
                                                  "data": "invalid jsonrpc version"}
        assert ts["method_number"][0]["error"]["code"] == fast["method_number"][0]["error"]["code"] == -32600
        assert fast["method_number"][0]["error"]["data"] == "invalid method"
        # fractional ids: accepted by the TS v1 SDK, rejected by acp_fast
        assert ts["fractional_id"] == [{"jsonrpc": "2.0", "id": 1.5, "result": {}}]
        assert fast["fractional_id"] == [{"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600, "message": "Invalid request", "data": "invalid id"}}]

    run(body)


def test_probe_script_is_json(ts_sdk: str) -> None:
    """The probe rejects an unknown scenario (guards the harness itself)."""
    import subprocess

    proc = subprocess.run(check=False, args=[ts_sdk, PROBE, "no-such", "--", "true"], capture_output=True, text=True,
                          env=env(), timeout=30)
    assert proc.returncode == 2 and "unknown scenario" in proc.stderr
    assert json.dumps({}) == "{}"
