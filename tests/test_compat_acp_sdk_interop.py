"""Interop of an SDK agent on the acp_fast drop-in with clients nobody here wrote.

The agent is ``peers/pysdk/agent.py``'s, unchanged, served by ``tests/helpers/compat_sdk_agent.py``
on ``stdio_transport()`` (the transport drop-in) or with ``fast.run_agent`` (the connection
drop-in); the clients are the official SDKs' benchmark clients of ``peers/``
(``ts/client.mjs`` on the TypeScript SDK, ``pysdk/client.py`` on the stock Python SDK).

Skipped when the peer is not installed (``bash scripts/install_peers.sh``), except when the
peers are required (``tests/helpers/peer_rule.py``: ``ACP_FAST_REQUIRE_PEERS=1``, or ``CI``
with the flag unset): then a missing peer fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from peer_rule import missing, require_module  # noqa: E402

require_module("acp", what="the official Python SDK (agent-client-protocol) is not installed")

REPO = Path(__file__).resolve().parent.parent
HELPER = str(Path(__file__).parent / "helpers" / "compat_sdk_agent.py")
TS_CLIENT = REPO / "peers" / "ts" / "client.mjs"
TS_SDK = REPO / "peers" / "ts" / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
PY_CLIENT = REPO / "peers" / "pysdk" / "client.py"


def json_line(argv: list[str], **extra_env: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    for name in ("ACP_N", "ACP_CHUNK"):
        env.pop(name, None)
    env.update(extra_env)
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, cwd=REPO, timeout=60,
                          stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, (
        f"{argv} exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}")
    return json.loads(lines[-1])  # type: ignore[no-any-return]


DROPINS = [pytest.param([], id="transport"), pytest.param(["--fast"], id="connection")]


def agent(engine: ModuleType, switch: list[str]) -> list[str]:
    return [sys.executable, HELPER, "--engine", engine.IMPLEMENTATION, *switch]


@pytest.mark.parametrize("switch", DROPINS)
def test_ts_client_drives_sdk_agent_on_dropin(engine: ModuleType, switch: list[str]) -> None:
    node = shutil.which("node")
    if node is None or not TS_SDK.is_file():
        missing("ts-sdk", "node or the TypeScript SDK in peers/ts/node_modules is missing")
    out = json_line([str(node), str(TS_CLIENT), "--n", "200", "--permission", "--m", "30", "--inflight", "8",
                     "--inflight-m", "60", "--", *agent(engine, switch)], ACP_CHUNK="64")
    assert out["protocolVersion"] == 1 and out["agentInfo"]["name"] == "pysdk-test-agent"
    assert out["permissionRequests"] == 1 and out["updatesReceived"] == 201 and out["updatesOk"]
    assert out["textBytes"] == 200 * 64 + len("permission:allow") and out["textOk"]
    assert out["stopReason"] == "end_turn" and out["agentExit"] == 0


@pytest.mark.parametrize("switch", DROPINS)
def test_ts_client_gets_1mib_chunks_from_sdk_agent_on_dropin(engine: ModuleType, switch: list[str]) -> None:
    node = shutil.which("node")
    if node is None or not TS_SDK.is_file():
        missing("ts-sdk", "node or the TypeScript SDK in peers/ts/node_modules is missing")
    out = json_line([str(node), str(TS_CLIENT), "--large", "--n", "4", "--m", "0", "--", *agent(engine, switch)])
    assert out["chunkSize"] == 1048576 and out["textBytes"] == 4 * 1048576 and out["textOk"]


@pytest.mark.parametrize("switch", DROPINS)
def test_stock_sdk_client_drives_sdk_agent_on_dropin(engine: ModuleType, switch: list[str]) -> None:
    out = json_line([sys.executable, str(PY_CLIENT), "--n", "150", "--permission", "--m", "20", "--inflight", "4",
                     "--inflight-m", "40", "--", *agent(engine, switch)], ACP_CHUNK="50")
    assert out["agentInfo"]["name"] == "pysdk-test-agent" and out["updatesReceived"] == 151 and out["updatesOk"]
    assert out["textOk"] and out["stopReason"] == "end_turn" and out["agentExit"] == 0
