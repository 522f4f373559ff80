"""The conductor driven by the official SDK clients (TS 2.4.0, Python 0.12.1), real processes.

Each client spawns ``acp-fast conductor agent PROXY… TESTY`` as its agent, with the
pass-through example proxy in front of ``acp-fast testy`` (both on the ``engine`` fixture's
twin). The clients cannot tell the chain from Testy itself: same streams, same answers,
cancellation through every hop.
"""

from __future__ import annotations

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


@pytest.mark.usefixtures("ts_sdk")
def test_ts_v2_client_through_three_proxies(ts_sdk: str, engine: ModuleType) -> None:
    out = json_line([ts_sdk, str(PEERS_TS / "client_v2.mjs"), "--n", "300", "--m", "30", "--",
                     *conductor(engine, 3)], **conductor_env(engine))
    assert out["protocolVersion"] == 2
    assert out["updates"] == {"user_message": 1, "state_update:running": 1, "agent_message_chunk": 300,
                              "state_update:idle": 1}
    assert out["updatesOk"] and out["textOk"] and out["stopReason"] == "end_turn" and out["agentExit"] == 0


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
