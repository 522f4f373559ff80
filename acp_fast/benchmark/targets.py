"""The performance goals of issue 7 §3 and issue 10 (proxy chains) and their PASS/MISS verdicts
from one run's medians.

Only public-API pairs take part (never the raw ceiling; the floor row only as the reference of
a "fraction of the floor" goal, the bound a user's pair is measured against). A goal is either a ratio of two
pairs' medians of one workload (`higher`-is-better metrics: pair ÷ reference; `lower`:
reference ÷ pair, so above 1 always means better) or a bound on one pair's median. Goals are
judged per event loop, each pair against the reference on the *same* loop (a node-only pair
such as `ts/ts` is the reference on every loop). A goal whose pairs were not both measured is
`n/a`. Ratios are compared unrounded and shown with `DECIMALS` decimals, more when
that is what it takes for the shown value to be on the right side of the goal (never
"5.00× MISS" for 4.997).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..jsontypes import JsonObject
from .suite import METRICS, Measurement

__all__ = ["DECIMALS", "GOALS", "Goal", "format_measured", "ratio", "verdicts"]

#: decimals of a verdict's measured value (at least)
DECIMALS = 2


@dataclass(frozen=True)
class Goal:
    """`pair`'s `workload` against `reference` (ratio ≥ `goal`) or, without a
    reference, its median against `goal` (≤ for lower-is-better metrics)."""

    label: str
    pair: str
    workload: str
    goal: float
    reference: str | None = None


GOALS: tuple[Goal, ...] = (
    Goal("agent CPU per notification, compiled", "acp_fast/acp_fast", "stream_cpu_agent", 2.0),
    Goal("client CPU per notification, compiled (same feeder)", "acp_fast/acp_fast", "stream_cpu_client", 1.5),
    Goal("streaming vs Python SDK", "acp_fast/acp_fast", "stream", 12.0, "pysdk/pysdk"),
    Goal("streaming vs TS SDK", "acp_fast/acp_fast", "stream", 10.0, "ts/ts"),
    Goal("summed CPU per notification vs Python SDK", "acp_fast/acp_fast", "stream_cpu_sum", 20.0, "pysdk/pysdk"),
    Goal("pure twin streaming vs Python SDK", "acp_fast-pure/acp_fast-pure", "stream", 3.0, "pysdk/pysdk"),
    Goal("sequential round trips vs Python SDK", "acp_fast/acp_fast", "rtt_seq", 3.0, "pysdk/pysdk"),
    Goal("sequential round trips vs TS SDK", "acp_fast/acp_fast", "rtt_seq", 1.5, "ts/ts"),
    Goal("64 requests in flight vs Python SDK", "acp_fast/acp_fast", "inflight", 5.0, "pysdk/pysdk"),
    Goal("64 requests in flight vs TS SDK", "acp_fast/acp_fast", "inflight", 4.0, "ts/ts"),
    Goal("client peak RSS, compiled", "acp_fast/acp_fast", "rss_client", 30.0),
    Goal("agent peak RSS, compiled", "acp_fast/acp_fast", "rss_agent", 30.0),
    Goal("client peak RSS, pure twin", "acp_fast-pure/acp_fast-pure", "rss_client", 30.0),
    Goal("agent peak RSS, pure twin", "acp_fast-pure/acp_fast-pure", "rss_agent", 30.0),
    # issue 10: proxy chains through acp-fast conductor (.chains), against the direct pair
    Goal("streaming through the conductor, 1 pass-through proxy, vs direct", "acp_fast/conductor-1p/acp_fast",
         "stream", 0.5, "acp_fast/acp_fast"),
    Goal("streaming through the conductor, 3 pass-through proxies, vs direct", "acp_fast/conductor-3p/acp_fast",
         "stream", 0.25, "acp_fast/acp_fast"),
    Goal("conductor CPU per forwarded notification per hop, 1 proxy", "acp_fast/conductor-1p/acp_fast",
         "stream_cpu_conductor_hop", 1.0),
    Goal("conductor CPU per forwarded notification per hop, 3 proxies", "acp_fast/conductor-3p/acp_fast",
         "stream_cpu_conductor_hop", 1.0),
    Goal("conductor peak RSS, 1 proxy", "acp_fast/conductor-1p/acp_fast", "rss_conductor", 30.0),
    Goal("conductor peak RSS, 3 proxies", "acp_fast/conductor-3p/acp_fast", "rss_conductor", 30.0),
    # issue 11: the official Python SDK on acp_fast (.pairs_sdk), both sides switched, vs the stock SDK
    Goal("SDK streaming, transport drop-in, vs stock SDK", "pysdk-transport/pysdk-transport", "stream", 1.3,
         "pysdk/pysdk"),
    Goal("SDK streaming, connection drop-in, vs stock SDK", "pysdk-fast/pysdk-fast", "stream", 5.0, "pysdk/pysdk"),
    Goal("SDK sequential round trips, connection drop-in, vs stock SDK", "pysdk-fast/pysdk-fast", "rtt_seq", 2.0,
         "pysdk/pysdk"),
    # issue 23: how close to the floor (.floor: no protocol library; a fraction of it, never a claim)
    Goal("streaming, fraction of the floor", "acp_fast/acp_fast", "stream", 0.6, "floor/floor"),
    Goal("1 MiB frames, fraction of the floor", "acp_fast/acp_fast", "large", 0.7, "floor/floor"),
)


def ratio(row: Measurement | None, ref: Measurement | None) -> float | None:
    """How many times better `row`'s median is than `ref`'s (None when either is missing)."""
    if row is None or ref is None or not row.median or not ref.median:
        return None
    return row.median / ref.median if row.better != "lower" else ref.median / row.median


def format_measured(value: float, goal: float, ok: bool, decimals: int = DECIMALS) -> str:
    """`value` with `decimals` decimals, or more when the rounded value would sit on the
    wrong side of `goal` for the verdict `ok` (4.997 with goal 5 and a MISS: `4.997`)."""
    for d in range(decimals, decimals + 6):
        text = f"{value:.{d}f}"
        shown = float(text)
        if ok == (shown >= goal) or (shown == goal and ok):
            return text
    return repr(value)


def _lookup(rows: Sequence[Measurement], pair: str, loop: str, workload: str) -> Measurement | None:
    for r in rows:
        if r.skipped is None and r.pair == pair and r.workload == workload and r.loop in (loop, "node"):
            return r
    return None


def verdicts(rows: Sequence[Measurement], loops: Sequence[str], goals: Sequence[Goal] = GOALS) -> list[JsonObject]:
    """One dict per goal and loop: `label, loop, pair, reference, workload, goal, measured,
    shown, unit, result` (`"PASS"`, `"MISS"` or `"n/a"`); `measured` is the unrounded
    ratio or median, `shown` its text."""
    out = []
    for loop in loops:
        for g in goals:
            row = _lookup(rows, g.pair, loop, g.workload)
            metric = next(m for m in METRICS if m.workload == g.workload)
            lower = metric.better == "lower"
            if g.reference is not None:
                value = ratio(row, _lookup(rows, g.reference, loop, g.workload))
                ok = None if value is None else value >= g.goal
                unit = "×"
            else:
                value = None if row is None else row.median
                ok = None if value is None else (value <= g.goal if lower else value >= g.goal)
                unit = metric.unit
            if value is None or ok is None:
                shown = "—"
            elif g.reference is None and lower:  # a bound from above: flip the side test
                shown = format_measured(-value, -g.goal, ok).lstrip("-")
            else:
                shown = format_measured(value, g.goal, ok)
            out.append({"label": g.label, "loop": loop, "pair": g.pair, "reference": g.reference,
                        "workload": g.workload, "goal": g.goal, "measured": value, "shown": shown, "unit": unit,
                        "result": "n/a" if ok is None else ("PASS" if ok else "MISS")})
    return out
