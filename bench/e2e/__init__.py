"""End-to-end ACP benchmarks over real OS pipes: a client process driving an agent process.

``python -m bench.e2e [--quick] [--json PATH]`` runs every registered *pair* (a client
command and an agent command, see :mod:`bench.e2e.pairs`) through the workloads of
:mod:`bench.e2e.suite` — streaming 20,000 small notifications, sequential and 64-in-flight
request round trips with p50/p99, 1 MiB notifications, peak RSS of both processes and
start-up time — repeated R times, and prints a markdown table of medians.

It needs no acp_fast import: the peers live in ``peers/`` (official TypeScript and Python
SDKs, installed by ``scripts/install_peers.sh``); pairs whose peer is missing are reported as
``skipped: <peer> not installed (<how to install>)``.

Extension point for other implementations (e.g. acp_fast): :func:`register_pair` with a client
command following the client CLI contract of ``peers/ts/client.mjs`` and an agent command
behaving like ``peers/ts/agent.mjs``; or ``--add-pair NAME 'CLIENT' 'AGENT'`` on the command line.
"""

from __future__ import annotations

from .pairs import (
    PAIRS,
    PYSDK_PEER,
    REPO_ROOT,
    TS_PEER,
    Pair,
    Requirement,
    get_pairs,
    register_pair,
    requirement_module,
)
from .report import markdown, write_json
from .suite import METRICS, Metric, Row, Settings, run_suite

__all__ = [
    "METRICS",
    "Metric",
    "PAIRS",
    "PYSDK_PEER",
    "Pair",
    "REPO_ROOT",
    "Requirement",
    "Row",
    "Settings",
    "TS_PEER",
    "get_pairs",
    "markdown",
    "register_pair",
    "requirement_module",
    "run_suite",
    "write_json",
]
