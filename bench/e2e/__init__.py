"""Compatibility wrapper: the end-to-end benchmark harness moved to :mod:`acp_fast.benchmark`
(so that the installed ``acp-fast bench`` console command can run it).

``python -m bench.e2e [options]`` is ``acp-fast bench [options]``; the names below are
re-exported from :mod:`acp_fast.benchmark` for code written against ``bench.e2e``.
"""

from __future__ import annotations

from acp_fast.benchmark import (
    METRICS,
    PAIRS,
    PYSDK_PEER,
    REPO_ROOT,
    TS_PEER,
    Metric,
    Pair,
    Requirement,
    Row,
    Settings,
    get_pairs,
    markdown,
    register_pair,
    requirement_module,
    run_suite,
    write_json,
)

__all__ = [
    "METRICS",
    "PAIRS",
    "PYSDK_PEER",
    "REPO_ROOT",
    "TS_PEER",
    "Metric",
    "Pair",
    "Requirement",
    "Row",
    "Settings",
    "get_pairs",
    "markdown",
    "register_pair",
    "requirement_module",
    "run_suite",
    "write_json",
]
