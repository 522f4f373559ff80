"""End-to-end ACP benchmarks over real OS pipes (`acp-fast bench`).

A client process drives an agent process the way an editor runs an ACP agent. Each *pair*
([`pairs`][acp_fast.benchmark.pairs]) is a client command following the client CLI contract of `peers/README.md`
and an agent command behaving like the peers' test agent, run on every event loop asked for
(both Python sides on the same loop) with client and agent pinned to different CPUs;
[`suite`][acp_fast.benchmark.suite] runs the workloads (streaming 100-byte `agent_message_chunk` notifications with
the CPU µs per message of each side, sequential and 64-in-flight `_test/echo` round trips,
1 MiB notifications, peak RSS of both processes, start-up to the `initialize` response,
the processes' bytecode compiled beforehand by `bytecode`) R times, interleaving the
pairs; [`machine`][acp_fast.benchmark.machine] records load and a CPU calibration around the run; [`tables`][acp_fast.benchmark.tables]
prints the medians and the PASS/MISS verdicts of [`targets`][acp_fast.benchmark.targets]; [`chart`][acp_fast.benchmark.chart] draws a PNG.
[`probe`][acp_fast.benchmark.probe] measures any single ACP agent as a client sees it (`acp-fast bench --agent
CMD`).

acp_fast's own peers: [`client`][acp_fast.benchmark.client] (the benchmark client, v1 and `--v2`) and the test agent
`acp-fast testy` ([`acp_fast.testy`][acp_fast.testy]), both on the public API. Every acp_fast process of a
row runs the harness's interpreter and package whatever the working directory, through
[`launch`][acp_fast.benchmark.launch], and reports the engine twin and loop it runs; [`runtime`][acp_fast.benchmark.runtime] builds those
commands and checks the reports against the row (a disagreement is an error, not a number).

The harness needs the `bench` extra (`pip install 'acp-fast[bench]'`: psutil, tabulate,
tqdm); the client does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # resolved on first access (module __getattr__ below)
    from .pairs import (
        BASELINE,
        CEILING,
        DEFAULT_PAIRS,
        PAIRS,
        PYSDK_PEER,
        REPO_ROOT,
        TS_PEER,
        Pair,
        Requirement,
        Variant,
        acp_fast_agent,
        configure,
        get_pairs,
        register_pair,
        requirement_module,
    )
    from .suite import METRICS, Measurement, Metric, RunConfig, run_pairs
    from .tables import goals_table, results_table, write_json
    from .targets import GOALS, Goal, verdicts

# Lazy exports: ``python -m acp_fast.benchmark.client`` runs as a benchmark peer and must not
# pay for the harness (subprocess, threading, psutil, ...) in its start-up time and peak RSS.
_EXPORTS = {
    "BASELINE": "pairs", "CEILING": "pairs", "DEFAULT_PAIRS": "pairs", "PAIRS": "pairs", "PYSDK_PEER": "pairs",
    "REPO_ROOT": "pairs", "TS_PEER": "pairs", "Pair": "pairs", "Requirement": "pairs", "Variant": "pairs",
    "acp_fast_agent": "pairs", "configure": "pairs", "get_pairs": "pairs", "register_pair": "pairs",
    "requirement_module": "pairs",
    "goals_table": "tables", "results_table": "tables", "write_json": "tables",
    "METRICS": "suite", "Measurement": "suite", "Metric": "suite", "RunConfig": "suite", "run_pairs": "suite",
    "GOALS": "targets", "Goal": "targets", "verdicts": "targets",
}

__all__ = [  # noqa: RUF022 - grouped by module as in _EXPORTS
    "BASELINE", "CEILING", "DEFAULT_PAIRS", "PAIRS", "PYSDK_PEER", "REPO_ROOT", "TS_PEER", "Pair", "Requirement",
    "Variant", "acp_fast_agent", "configure", "get_pairs", "register_pair", "requirement_module",
    "goals_table", "results_table", "write_json",
    "METRICS", "Measurement", "Metric", "RunConfig", "run_pairs",
    "GOALS", "Goal", "verdicts",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))
