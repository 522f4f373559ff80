"""Fixtures of the interop tests: the third-party peers in ``peers/`` must be installed.

``node`` (>= 20) with ``peers/ts/node_modules`` (``@agentclientprotocol/sdk`` 2.4.0) and the
Python SDK ``agent-client-protocol`` 0.12.1 are installed by ``bash scripts/install_peers.sh``.
When one is missing the tests that need it skip with the reason, or fail when the peers are
required (``tests/helpers/peer_rule.py``: ``ACP_FAST_REQUIRE_PEERS=1``, or ``CI=true`` with
the flag unset), so that the interop matrix cannot pass vacuously.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from interop_support import PEERS_TS, PYSDK_VERSION, TS_SDK_VERSION
from peer_rule import missing


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` executable (>= 20)."""
    exe = shutil.which("node")
    if exe is None:
        missing("node", "node is not on PATH")
    out = subprocess.run(check=False, args=[exe, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    if int(out.lstrip("v").split(".")[0]) < 20:
        missing("node", f"node {out} is too old (the TS SDK needs >= 20)")
    return exe  # type: ignore[return-value]


@pytest.fixture(scope="session")
def ts_sdk(node: str) -> str:
    """``node``, once ``peers/ts/node_modules`` holds the pinned TS SDK."""
    pkg = PEERS_TS / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
    if not pkg.is_file():
        missing("ts-sdk", "the TypeScript SDK is not installed in peers/ts/node_modules")
    version = json.loads(pkg.read_text())["version"]
    if version != TS_SDK_VERSION:
        missing("ts-sdk", f"peers/ts has @agentclientprotocol/sdk {version}, not {TS_SDK_VERSION}")
    return node


@pytest.fixture(scope="session")
def pysdk() -> str:
    """The pinned official Python SDK, importable by this interpreter."""
    from importlib import metadata

    try:
        version = metadata.version("agent-client-protocol")
    except metadata.PackageNotFoundError:
        missing("acp", "the Python SDK agent-client-protocol is not installed")
    if version != PYSDK_VERSION:
        missing("acp", f"agent-client-protocol {version} is installed, not {PYSDK_VERSION}")
    return version
