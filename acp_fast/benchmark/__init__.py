"""End-to-end ACP benchmarks over real OS pipes (``acp-fast bench``).

A client process drives an agent process the way an editor runs an ACP agent. Each *pair*
(:mod:`.pairs`) is a client command following the client CLI contract of ``peers/README.md``
and an agent command behaving like the peers' test agent; :mod:`.suite` runs the workloads
(streaming 100-byte ``agent_message_chunk`` notifications, sequential and 64-in-flight
``_test/echo`` round trips with p50/p99, 1 MiB notifications, peak RSS of both processes,
start-up to the ``initialize`` response) R times, interleaving the pairs; :mod:`.report`
prints medians with ratios against the official Python SDK pair and the PASS/MISS table of
:mod:`.targets`; :mod:`.chart` draws a PNG. :mod:`.probe` measures any single ACP agent as a
client sees it (``acp-fast bench --agent CMD``).

acp_fast's own peers: :mod:`.client` (the benchmark client, v1 and ``--v2``) and the fallback
test agent :mod:`.agent` (used while ``acp-fast testy`` is not available).
"""

from __future__ import annotations

from typing import Any

# Lazy exports: ``python -m acp_fast.benchmark.client`` / ``.agent`` run as benchmark peers
# and must not pay for the harness (subprocess, threading, statistics, ...) in their start-up
# time and peak RSS.
_EXPORTS = {
    "BASELINE": "pairs", "DEFAULT_PAIRS": "pairs", "PAIRS": "pairs", "PYSDK_PEER": "pairs",
    "REPO_ROOT": "pairs", "TS_PEER": "pairs", "Pair": "pairs", "Requirement": "pairs",
    "acp_fast_agent": "pairs", "configure": "pairs", "get_pairs": "pairs", "register_pair": "pairs",
    "requirement_module": "pairs",
    "markdown": "report", "targets_markdown": "report", "write_json": "report",
    "METRICS": "suite", "Metric": "suite", "Row": "suite", "Settings": "suite", "run_suite": "suite",
    "TARGETS": "targets", "Target": "targets", "evaluate": "targets",
}

__all__ = [  # noqa: RUF022 - grouped by module as in _EXPORTS
    "BASELINE", "DEFAULT_PAIRS", "PAIRS", "PYSDK_PEER", "REPO_ROOT", "TS_PEER", "Pair", "Requirement",
    "acp_fast_agent", "configure", "get_pairs", "register_pair", "requirement_module",
    "markdown", "targets_markdown", "write_json",
    "METRICS", "Metric", "Row", "Settings", "run_suite",
    "TARGETS", "Target", "evaluate",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))
