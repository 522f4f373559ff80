"""The conductor driven by the official SDK clients (TS 2.4.0, Python 0.12.1), real processes.

Each client spawns ``acp-fast conductor agent PROXY… TESTY`` as its agent, with the
pass-through example proxy in front of ``acp-fast testy`` (both on the ``engine`` fixture's
twin). The clients cannot tell the chain from Testy itself: same streams, same answers,
cancellation through every hop.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from interop_support import HERE, PEERS_PY, PEERS_TS, REPO, fast_testy, json_line

PASSTHROUGH = [sys.executable, str(REPO / "examples" / "proxies" / "passthrough.py")]


def conductor(engine: ModuleType, n_proxies: int = 1) -> list[str]:
    """``acp-fast conductor agent`` with ``n_proxies`` pass-through proxies in front of Testy."""
    proxy = shlex.join(PASSTHROUGH)
    return [sys.executable, "-m", "acp_fast.cli.main", "conductor", "agent",
            *[proxy] * n_proxies, shlex.join(fast_testy(engine))]


def conductor_env(engine: ModuleType) -> dict[str, str]:
    return {"ACP_FAST_NO_EXTENSIONS": "1"} if engine.IMPLEMENTATION == "py" else {}


@pytest.mark.usefixtures("ts_sdk")
def test_ts_v1_client_through_the_conductor(ts_sdk: str, engine: ModuleType) -> None:
    out = json_line([ts_sdk, str(PEERS_TS / "client.mjs"), "--n", "300", "--permission", "--m", "30",
                     "--inflight", "4", "--inflight-m", "40", "--", *conductor(engine)],
                    ACP_CHUNK="64", **conductor_env(engine))
    assert out["protocolVersion"] == 1 and out["agentInfo"]["name"] == "test-agent"
    assert out["permissionRequests"] == 1 and out["updatesReceived"] == 301 and out["updatesOk"]
    assert out["textBytes"] == 300 * 64 + len("permission:allow") and out["textOk"]
    assert out["stopReason"] == "end_turn" and out["agentExit"] == 0


@pytest.mark.seed("S000-75")
@pytest.mark.usefixtures("ts_sdk")
def test_ts_v2_client_through_three_proxies(ts_sdk: str, engine: ModuleType) -> None:
    out = json_line([ts_sdk, str(PEERS_TS / "client_v2.mjs"), "--n", "300", "--m", "30", "--",
                     *conductor(engine, 3)], **conductor_env(engine))
    assert out["protocolVersion"] == 2
    assert out["updates"] == {"user_message": 1, "state_update:running": 1, "agent_message_chunk": 300,
                              "state_update:idle": 1}
    assert out["updatesOk"] and out["textOk"] and out["stopReason"] == "end_turn" and out["agentExit"] == 0


@pytest.mark.seed("S004-10")
@pytest.mark.usefixtures("ts_sdk")
def test_ts_cancellation_through_the_conductor(ts_sdk: str, engine: ModuleType) -> None:
    def probe(scenario: str) -> dict[str, Any]:
        out = json_line([ts_sdk, str(HERE / "ts_probe.mjs"), scenario, "--", *conductor(engine)],
                        **conductor_env(engine))
        assert "thrown" not in out, out
        return out

    assert probe("v1-cancel")["result"] == {"stopReason": "cancelled"}
    assert probe("v1-cancel-request")["error"]["code"] == -32800  # re-issued on every hop


@pytest.mark.usefixtures("pysdk")
def test_pysdk_client_through_the_conductor(engine: ModuleType) -> None:
    out = json_line([sys.executable, str(PEERS_PY / "client.py"), "--n", "200", "--permission", "--m", "20",
                     "--rtt-method", "prompt", "--", *conductor(engine)], ACP_CHUNK="50", **conductor_env(engine))
    assert out["protocolVersion"] == 1 and out["agentInfo"]["name"] == "test-agent"
    assert out["permissionRequests"] == 1 and out["updatesReceived"] == 201 and out["updatesOk"]
    assert out["textOk"] and out["stopReason"] == "end_turn" and out["agentExit"] == 0


# -- chains mixing acp_fast proxies and the TypeScript SDK proxy (peers/ts/proxy.mjs) -----------
#
# The TS SDK 2.4.0 has no API to write a proxy: its schema generates the types of
# `proxy/initialize` and `proxy/successor` (PROXY_METHODS, `/unstable` entrypoint) but its agent
# and client APIs do not route them, and its JSON-RPC connection class is not exported. The
# TS proxy is therefore written on the SDK's public agent app with raw "*" request and
# notification fallbacks, sending envelopes with `client.request` / `client.notify`; see the
# header of peers/ts/proxy.mjs. Each TS proxy writes a JSON summary of what it forwarded
# (ACP_TS_PROXY_LOG), which proves it was in the path.

TS_PROXY = PEERS_TS / "proxy.mjs"


def mixed_conductor(engine: ModuleType, kinds: str, logs: Path, *, spelling: str = "underscore") -> list[str]:
    """``acp-fast conductor agent`` with proxies ``kinds`` ("t": the TS proxy, "f": the acp_fast
    pass-through), in that order, in front of Testy; TS proxy i logs to ``logs/ts<i>.json``."""
    proxies = []
    for i, kind in enumerate(kinds):
        if kind == "t":
            proxies.append(shlex.join([f"ACP_TS_PROXY_LOG={logs / f'ts{i}.json'}", f"ACP_TS_PROXY_NAME=ts{i}",
                                       "node", str(TS_PROXY)]))
        else:
            proxies.append(shlex.join([sys.executable, "-m", "acp_fast.conductor.passthrough",
                                       "--engine", engine.IMPLEMENTATION]))
    return [sys.executable, "-m", "acp_fast.cli.main", "conductor", "--proxy-methods", spelling, "agent",
            *proxies, shlex.join(fast_testy(engine))]


def ts_summaries(kinds: str, logs: Path) -> list[dict[str, Any]]:
    out = []
    for i, kind in enumerate(kinds):
        if kind == "t":
            path = logs / f"ts{i}.json"
            assert path.is_file(), f"TS proxy {i} wrote no summary"
            out.append(json.loads(path.read_text()))
    return out


def fast_client(engine: ModuleType, *args: str) -> list[str]:
    """The acp_fast benchmark client (v1, or v2 with ``--v2``), checking every chunk and echo."""
    return [sys.executable, "-m", "acp_fast.benchmark.client", "--loop", "asyncio", *args]


@pytest.mark.usefixtures("ts_sdk")
@pytest.mark.parametrize(("version", "kinds", "spelling"), [
    pytest.param(1, "tft", "spec", id="v1-ts,fast,ts-spec"),
    pytest.param(2, "t", "underscore", id="v2-ts-underscore"),
])
def test_acp_fast_client_through_ts_proxies(engine: ModuleType, tmp_path: Path, version: int, kinds: str,
                                            spelling: str) -> None:
    extra = ["--permission"] if version == 1 else ["--v2"]
    out = json_line(fast_client(engine, *extra, "--n", "200", "--m", "15", "--inflight", "4", "--inflight-m", "20",
                                "--", *mixed_conductor(engine, kinds, tmp_path, spelling=spelling)),
                    ACP_CHUNK="40", **conductor_env(engine))
    assert out["protocolVersion"] == version and out["agentInfo"]["name"] == "test-agent"
    assert out["engine"] == engine.IMPLEMENTATION
    assert out["updatesOk"] and out["textOk"] and out["stopReason"] == "end_turn" and out["agentExit"] == 0
    assert out["updatesReceived"] == 200 + (version == 1)  # + the permission outcome chunk
    assert out["roundTripsPerSec"] > 0 and out["requestsPerSec"] > 0  # every echo checked by the client
    summaries = ts_summaries(kinds, tmp_path)
    for s in summaries:
        assert s["initialize"] == 1 and s["spelling"] == ("proxy/successor" if spelling == "spec" else "_proxy/successor")
        assert s["fromPredecessor"]["session/prompt"] == 1 and s["fromPredecessor"]["_test/echo"] == 15 + 20
        assert s["fromSuccessor"]["session/update"] >= 200
        if version == 1:
            assert s["fromSuccessor"]["session/request_permission"] == 1
        else:
            assert s["fromSuccessor"]["session/update"] == 203  # user_message, running, 200 chunks, idle


@pytest.mark.usefixtures("ts_sdk")
@pytest.mark.parametrize(("version", "kinds"), [pytest.param(1, "t", id="v1-ts"),
                                                pytest.param(2, "ftf", id="v2-fast,ts,fast")])
def test_ts_client_through_ts_proxies(ts_sdk: str, engine: ModuleType, tmp_path: Path, version: int,
                                      kinds: str) -> None:
    client = "client.mjs" if version == 1 else "client_v2.mjs"
    extra = ["--permission", "--inflight", "4", "--inflight-m", "20"] if version == 1 else []
    out = json_line([ts_sdk, str(PEERS_TS / client), "--n", "200", "--m", "10", *extra, "--",
                     *mixed_conductor(engine, kinds, tmp_path)], ACP_CHUNK="32", **conductor_env(engine))
    assert out["protocolVersion"] == version and out["agentInfo"]["name"] == "test-agent"
    assert out["updatesOk"] and out["textOk"] and out["stopReason"] == "end_turn" and out["agentExit"] == 0
    if version == 1:
        assert out["permissionRequests"] == 1 and out["updatesReceived"] == 201
    else:
        assert out["updates"] == {"user_message": 1, "state_update:running": 1, "agent_message_chunk": 200,
                                  "state_update:idle": 1}
    (summary,) = ts_summaries(kinds, tmp_path)
    assert summary["initialize"] == 1 and summary["fromPredecessor"]["session/prompt"] == 1


@pytest.mark.usefixtures("ts_sdk")
def test_ts_proxy_cancellation_errors_and_callbacks(ts_sdk: str, engine: ModuleType, tmp_path: Path) -> None:
    """Through a TS proxy: `$/cancel_request` re-issued on every hop (-32800 back), `session/cancel`
    forwarded, errors (code, message, data) and a v2 permission request exactly as Testy sends
    them directly."""
    def probe(scenario: str, *agent: str) -> dict[str, Any]:
        out = json_line([ts_sdk, str(HERE / "ts_probe.mjs"), scenario, "--", *agent], **conductor_env(engine))
        assert "thrown" not in out, out
        out.pop("agentExit", None)
        return out

    chain = mixed_conductor(engine, "t", tmp_path)
    assert probe("v1-cancel", *chain)["result"] == {"stopReason": "cancelled"}
    assert probe("v1-cancel-request", *chain)["error"]["code"] == -32800
    summary = json.loads((tmp_path / "ts0.json").read_text())
    assert summary["cancelled"] == 1  # the handler's signal fired: the proxy re-issued the cancellation
    assert "$/cancel_request" not in summary["fromPredecessor"]  # hop-local, never forwarded
    direct = fast_testy(engine)
    errors = probe("v1-errors", *chain)
    assert errors == probe("v1-errors", *direct)
    assert errors["unknown"]["code"] == -32601
    perm = probe("v2-permission", *mixed_conductor(engine, "tt", tmp_path))
    assert perm == probe("v2-permission", *direct)
    assert perm["asked"] and perm["stopReason"] == "end_turn"


@pytest.mark.usefixtures("pysdk", "ts_sdk")
def test_pysdk_client_through_a_ts_and_a_fast_proxy(engine: ModuleType, tmp_path: Path) -> None:
    out = json_line([sys.executable, str(PEERS_PY / "client.py"), "--n", "150", "--permission", "--m", "10", "--",
                     *mixed_conductor(engine, "tf", tmp_path)], ACP_CHUNK="50", **conductor_env(engine))
    assert out["protocolVersion"] == 1 and out["permissionRequests"] == 1 and out["updatesReceived"] == 151
    assert out["updatesOk"] and out["textOk"] and out["stopReason"] == "end_turn" and out["agentExit"] == 0
    (summary,) = ts_summaries("tf", tmp_path)
    assert summary["fromSuccessor"]["session/request_permission"] == 1
