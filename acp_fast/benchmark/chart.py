"""Bar chart of one benchmark run (matplotlib, optional: ``pip install matplotlib``)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from .suite import METRICS, Measurement

__all__ = ["CHART_WORKLOADS", "MissingMatplotlib", "write_png"]

#: The workloads drawn, one panel each.
CHART_WORKLOADS = ("stream", "stream_cpu_sum", "rtt_seq", "inflight", "rss_agent", "startup")


class MissingMatplotlib(RuntimeError):
    """matplotlib is not importable."""


def write_png(path: str | os.PathLike[str], rows: Sequence[Measurement], title: str = "") -> None:
    """One panel per workload of :data:`CHART_WORKLOADS`, a bar per pair and loop (median, with the
    min–max range of the runs as error bar).

    Raises:
        MissingMatplotlib: matplotlib is not installed (nothing is written).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingMatplotlib(f"matplotlib is not installed ({exc}); pip install matplotlib") from None
    by_key = {(f"{r.pair} [{r.loop}]", r.workload): r for r in rows if not r.skipped}
    pairs: list[str] = []
    for r in rows:
        label = f"{r.pair} [{r.loop}]"
        if not r.skipped and label not in pairs:
            pairs.append(label)
    metrics = [m for m in METRICS if m.workload in CHART_WORKLOADS]
    cols = 3
    nrows = (len(metrics) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.6 * nrows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, m in zip(axes.flat, metrics):
        vals, lo, hi = [], [], []
        for p in pairs:
            row = by_key.get((p, m.workload))
            v = row.median if row is not None and row.median is not None else 0.0
            vals.append(v)
            lo.append(v - min(row.runs) if row is not None and row.runs else 0.0)
            hi.append(max(row.runs) - v if row is not None and row.runs else 0.0)
        x = range(len(pairs))
        ax.bar(x, vals, yerr=[lo, hi], capsize=3, color=[colors[i % len(colors)] for i in x])
        ax.set_xticks(list(x))
        ax.set_xticklabels(pairs, rotation=30, ha="right", fontsize=7)
        ax.set_title(f"{m.label} ({m.unit}, {'higher' if m.better == 'higher' else 'lower'} is better)",
                     fontsize=8)
        for i, v in enumerate(vals):
            if v:
                ax.annotate(f"{v:,.0f}" if v >= 100 else f"{v:.1f}", (i, v), ha="center", va="bottom", fontsize=6)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=110)
    plt.close(fig)
