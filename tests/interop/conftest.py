"""Fixtures of the interop tests: the third-party peers in ``peers/`` must be installed.

``node`` (>= 20) with ``peers/ts/node_modules`` (``@agentclientprotocol/sdk`` 2.4.0) and the
Python SDK ``agent-client-protocol`` 0.12.1 are installed by ``bash scripts/install_peers.sh``.
When one is missing the tests that need it skip with the reason, or fail when the peers are
required (``tests/helpers/peer_rule.py``: ``ACP_FAST_REQUIRE_PEERS=1``, or ``CI=true`` with
the flag unset), so that the interop matrix cannot pass vacuously.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from interop_support import PEERS_TS
from peer_rule import require_node, require_pysdk, require_ts_sdk


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` executable (>= 20)."""
    return require_node()


@pytest.fixture(scope="session")
def ts_sdk(node: str) -> str:
    """``node``, once ``peers/ts/node_modules`` holds the pinned TS SDK."""
    return require_ts_sdk(PEERS_TS)


@pytest.fixture(scope="session")
def pysdk() -> str:
    """The pinned official Python SDK, importable by this interpreter."""
    return require_pysdk()
