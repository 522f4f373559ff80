"""Performance targets of acp_fast (issue 4) and their PASS/MISS evaluation from one run's medians.

A target is either a ratio of two pairs' medians of one workload (``higher``-is-better
metrics: pair ÷ reference; ``lower``: reference ÷ pair, so above 1 always means faster) or
an absolute bound on one pair's median. A target whose pairs were not both measured is
``n/a`` (e.g. the TS peer is not installed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .suite import Row

__all__ = ["TARGETS", "Target", "evaluate", "ratio"]


@dataclass(frozen=True)
class Target:
    """``pair``'s ``workload`` against ``reference`` (ratio ≥ ``goal``) or, without a
    reference, its median against ``goal`` (≤ for lower-is-better metrics)."""

    label: str
    pair: str
    workload: str
    goal: float
    reference: str | None = None


TARGETS: tuple[Target, ...] = (
    Target("compiled streaming ≥ 12× Python SDK", "acp_fast/acp_fast", "stream", 12.0, "pysdk/pysdk"),
    Target("compiled streaming ≥ 10× TS SDK", "acp_fast/acp_fast", "stream", 10.0, "ts/ts"),
    Target("pure streaming ≥ 3× Python SDK", "acp_fast-pure/acp_fast-pure", "stream", 3.0, "pysdk/pysdk"),
    Target("sequential round trips ≥ 2× Python SDK", "acp_fast/acp_fast", "rtt_seq", 2.0, "pysdk/pysdk"),
    Target("64 in flight ≥ 5× Python SDK", "acp_fast/acp_fast", "inflight", 5.0, "pysdk/pysdk"),
    Target("client peak RSS ≤ 30 MiB (compiled)", "acp_fast/acp_fast", "rss_client", 30.0),
    Target("agent peak RSS ≤ 30 MiB (compiled)", "acp_fast/acp_fast", "rss_agent", 30.0),
    Target("client peak RSS ≤ 30 MiB (pure)", "acp_fast-pure/acp_fast-pure", "rss_client", 30.0),
    Target("agent peak RSS ≤ 30 MiB (pure)", "acp_fast-pure/acp_fast-pure", "rss_agent", 30.0),
)


def ratio(row: Row | None, ref: Row | None) -> float | None:
    """How many times better ``row``'s median is than ``ref``'s (None when either is missing)."""
    if row is None or ref is None or not row.median or not ref.median:
        return None
    return row.median / ref.median if row.better != "lower" else ref.median / row.median


def evaluate(rows: Sequence[Row], targets: Sequence[Target] = TARGETS) -> list[dict[str, Any]]:
    """One dict per target: ``label, pair, reference, workload, goal, measured, unit, result``
    (``"PASS"``, ``"MISS"`` or ``"n/a"``); ``measured`` is the ratio or the median."""
    by_key = {(r.pair, r.workload): r for r in rows if not r.skipped}
    out = []
    for t in targets:
        row = by_key.get((t.pair, t.workload))
        if t.reference is not None:
            value = ratio(row, by_key.get((t.reference, t.workload)))
            ok = None if value is None else value >= t.goal
            unit = "×"
        else:
            value = None if row is None else row.median
            if value is None:
                ok = None
            else:
                ok = value <= t.goal if row is not None and row.better == "lower" else value >= t.goal
            unit = row.unit if row is not None and row.unit else ""
        out.append({"label": t.label, "pair": t.pair, "reference": t.reference, "workload": t.workload,
                    "goal": t.goal, "measured": None if value is None else round(value, 2), "unit": unit,
                    "result": "n/a" if ok is None else ("PASS" if ok else "MISS")})
    return out
