"""Charts of a benchmark run (matplotlib, optional: `pip install matplotlib`).

One panel per question a reader has (how fast does it stream, how much CPU per message, how
many round trips, requests in flight, 1 MiB frames, memory), horizontal bars grouped by event
loop, acp_fast in one colour and each official SDK in its own fixed colour (`SERIES`),
the floor (what the machine does with no protocol library, where the run measured one) as a
dashed line across its loop's group, and the ratio of acp_fast to the best SDK written on
acp_fast's bar. [`write_png`][acp_fast.benchmark.chart.write_png] draws the suite (`acp-fast bench --png`),
[`write_remote_png`][acp_fast.benchmark.chart.write_remote_png] the remote rows (`acp-fast bench --remote --png`).

The layout is computed without matplotlib ([`suite_panels`][acp_fast.benchmark.chart.suite_panels], [`remote_panels`][acp_fast.benchmark.chart.remote_panels]: lists of
[`Panel`][acp_fast.benchmark.chart.Panel]), then drawn by [`figure`][acp_fast.benchmark.chart.figure]; the drawn artists carry ids (`gid`) that say
what they show: `bar:SERIES:LOOP`, `note:LOOP` (the ratio on acp_fast's bar),
`reference:LOOP` (the floor line).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .suite import Measurement

__all__ = ["ACP_FAST", "SERIES", "Bar", "Group", "MissingMatplotlib", "Panel", "Series", "figure",
           "remote_panels", "suite_panels", "write_png", "write_remote_png"]


class MissingMatplotlib(RuntimeError):
    """matplotlib is not importable."""


@dataclass(frozen=True)
class Series:
    """Who a bar stands for, with its fixed colour."""

    key: str
    label: str
    color: str


#: acp_fast (its compiled twin; a pair of acp_fast processes).
ACP_FAST = Series("acp_fast", "acp_fast", "#0072B2")
#: Every series a chart may draw, in the order of the legend (colour-blind-safe palette).
SERIES = {s.key: s for s in (
    ACP_FAST,
    Series("acp_fast-pure", "acp_fast, pure-Python twin", "#56B4E9"),
    Series("pysdk", "official Python SDK", "#E69F00"),
    Series("ts", "official TypeScript SDK (Node.js)", "#009E73"),
    Series("gateway", "acp_fast", "#0072B2"),  # the gateway panel's acp_fast bar
)}
_PEERS = ("pysdk", "ts")
_REFERENCE_COLOR = "#333333"


@dataclass
class Bar:
    """One bar: a series' median on one loop; `note` (the ratio on acp_fast's bar) is written on it."""

    series: Series
    value: float
    note: str = ""


@dataclass
class Group:
    """The bars of one event loop, and the reference line across them (`(label with its value, value)`)."""

    loop: str
    bars: list[Bar] = field(default_factory=list)
    reference: tuple[str, float] | None = None


@dataclass
class Panel:
    """One question: its title, unit, direction (`"higher"`/`"lower"` is better), groups."""

    title: str
    unit: str
    better: str
    groups: list[Group]


def _ratio_note(better: str, value: float, other: float, name: str) -> str:
    """`"10.3× the TypeScript SDK"` / `"3.1× less than the Python SDK"` (unrounded ratio, one decimal)."""
    if value <= 0 or other <= 0:
        return ""
    if better == "higher":
        return f"{value / other:.1f}× {name}"
    r = other / value
    return f"{r:.1f}× less than {name}" if r >= 1 else f"{1 / r:.1f}× more than {name}"


_SHORT = {"pysdk": "Python SDK", "ts": "TS SDK", "direct": "direct stdio"}


def _note_vs_best_peer(panel: Panel) -> None:
    """Write the ratio of acp_fast to the best peer of its group on acp_fast's bar."""
    for group in panel.groups:
        peers = [b for b in group.bars if b.series.key in _PEERS]
        mine = next((b for b in group.bars if b.series is ACP_FAST), None)
        if mine is None or not peers:
            continue
        pick = max if panel.better == "higher" else min
        best = pick(peers, key=lambda b: b.value)
        mine.note = _ratio_note(panel.better, mine.value, best.value, _SHORT[best.series.key])


# -- the suite (acp-fast bench) ---------------------------------------------------------------

#: pair of the suite -> series drawn
SUITE_PAIRS = {"acp_fast/acp_fast": "acp_fast", "acp_fast-pure/acp_fast-pure": "acp_fast-pure",
               "pysdk/pysdk": "pysdk", "ts/ts": "ts"}
#: the pair drawn as the reference line
SUITE_FLOOR = "floor/floor"
_FLOOR_LABEL = "floor"

#: (workloads summed for the value, title, unit, better)
SUITE_QUESTIONS: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (("stream",), "Streaming 100-byte updates", "notifications/s", "higher"),
    (("stream_cpu_sum",), "CPU per streamed update, client + agent", "µs", "lower"),
    (("rtt_seq",), "Sequential round trips", "requests/s", "higher"),
    (("inflight",), "Requests, 64 in flight", "requests/s", "higher"),
    (("large",), "1 MiB updates", "MiB/s", "higher"),
    (("rss_client", "rss_agent"), "Memory: peak RSS, client + agent", "MiB", "lower"),
)


def _loops_of(loops: Iterable[str]) -> list[str]:
    present = set(loops)
    return [x for x in ("asyncio", "uvloop") if x in present] + sorted(present - {"asyncio", "uvloop", "node"})


def suite_panels(rows: Sequence[Measurement]) -> list[Panel]:
    """The six panels of a suite run (`SUITE_QUESTIONS`), from its measurements.

    A Node.js row (no Python loop) is drawn in every loop's group; a value is drawn only when
    every workload it sums has a median.
    """
    medians = {(r.pair, r.loop, r.workload): r.median for r in rows if not r.skipped and r.median is not None}
    loops = _loops_of(loop for (_, loop, _) in medians)

    def value(pair: str, loop: str, workloads: tuple[str, ...]) -> float | None:
        parts = [medians.get((pair, loop, w), medians.get((pair, "node", w))) for w in workloads]
        return None if any(p is None for p in parts) else float(sum(p for p in parts if p is not None))

    panels = []
    for workloads, title, unit, better in SUITE_QUESTIONS:
        groups = []
        for loop in loops:
            group = Group(loop)
            for pair, key in SUITE_PAIRS.items():
                v = value(pair, loop, workloads)
                if v is not None:
                    group.bars.append(Bar(SERIES[key], v))
            floor = value(SUITE_FLOOR, loop, workloads) if loop != "node" else None
            if floor is not None:
                group.reference = (f"{_FLOOR_LABEL} {_fmt(floor)}", floor)
            if group.bars:
                groups.append(group)
        panel = Panel(title, unit, better, groups)
        _note_vs_best_peer(panel)
        panels.append(panel)
    return panels


# -- the remote rows (acp-fast bench --remote) --------------------------------------------------

#: (transport, workload, title, unit, better, reference (pair, transport, label) or None)
REMOTE_QUESTIONS: tuple[tuple[str, str, str, str, str, tuple[str, str, str] | None], ...] = (
    ("ws", "stream", "WebSocket: streaming", "updates/s", "higher", None),
    ("http", "stream", "Streamable HTTP: streaming", "updates/s", "higher", None),
    ("ws", "roundtrips", "WebSocket: sequential round trips", "round trips/s", "higher",
     ("floor", "ws", "floor: ASGI echo")),
    ("http", "roundtrips", "Streamable HTTP: sequential round trips", "round trips/s", "higher",
     ("floor", "tcp", "floor: TCP ping-pong")),
    ("ws", "gateway", "Gateway: a stdio agent served over WebSocket", "updates/s", "higher",
     ("direct", "stdio", "direct stdio pair")),
    ("ws", "connections", "Memory: server RSS per WebSocket connection", "KiB", "lower", None),
)
_REMOTE_SERIES = {"acp_fast": "acp_fast", "pysdk": "pysdk", "ts": "ts", "gateway": "gateway"}


def _median(row: Mapping[str, Any]) -> float | None:
    if row.get("invalid"):
        return None
    m = row.get("median")
    if isinstance(m, (int, float)):
        return float(m)
    runs = row.get("runs") or []
    return float(statistics.median(runs)) if runs else None


def remote_panels(rows: Iterable[Mapping[str, Any]], *, rss_goal: float | None = None) -> list[Panel]:
    """The panels of the remote rows (`REMOTE_QUESTIONS`), from their rows (`remote.json`'s
    `rows`, or `RemoteResult` as dicts); `rss_goal` draws that goal across the memory panel."""
    by: dict[tuple[str, str, str, str], float] = {}
    for r in rows:
        v = _median(r)
        if v is not None:
            workload = "gateway" if r.get("pair") == "gateway" else str(r.get("workload"))
            by[(str(r.get("pair")), str(r.get("transport")), workload, str(r.get("loop")))] = v
    loops = _loops_of(k[3] for k in by)
    panels = []
    for transport, workload, title, unit, better, ref in REMOTE_QUESTIONS:
        groups = []
        for loop in loops:
            group = Group(loop)
            for pair, key in _REMOTE_SERIES.items():
                v = by.get((pair, transport, workload, loop))
                if v is not None:
                    group.bars.append(Bar(SERIES[key], v))
            if ref is not None:
                rv = by.get((ref[0], ref[1], "stream" if workload == "gateway" else workload, loop))
                if rv is not None:
                    group.reference = (f"{ref[2]} {_fmt(rv)}", rv)
            elif workload == "connections" and rss_goal is not None:
                group.reference = (f"goal ≤ {rss_goal:g} {unit}", rss_goal)
            if group.bars:
                groups.append(group)
        panel = Panel(title, unit, better, groups)
        _note_vs_best_peer(panel)
        for group in groups:  # the gateway against the direct pair
            for b in group.bars:
                if b.series.key == "gateway" and group.reference is not None:
                    b.note = _ratio_note(better, b.value, group.reference[1], _SHORT["direct"])
        panels.append(panel)
    return panels


# -- drawing ------------------------------------------------------------------------------------


def _fmt(v: float) -> str:
    if v >= 100_000:
        return f"{v / 1000:,.0f}k"
    if v >= 10_000:
        return f"{v / 1000:.1f}k"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingMatplotlib(f"matplotlib is not installed ({exc}); pip install matplotlib") from None
    return plt


#: the figure's width in inches: the README's column (about 880 px) at 100 dpi
WIDTH_IN = 8.8
_FONT = 8.0
_CLEAR = {"facecolor": "white", "edgecolor": "none", "pad": 0.3}


def figure(panels: Sequence[Panel], title: str = "", *, reference_legend: str = "") -> Any:
    """A matplotlib figure of `panels`: two columns, a shared legend of the series drawn
    (and of the reference line, as `reference_legend` when given) under `title`.

    Raises:
        MissingMatplotlib: matplotlib is not installed.
    """
    plt = _pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    cols = 2
    nrows = max(1, (len(panels) + cols - 1) // cols)
    bars = [max(1, sum(len(g.bars) for g in p.groups) + len(p.groups)) for p in panels]
    axes_h = [max(bars[i:i + cols]) * 0.2 for i in range(0, len(panels), cols)]  # inches of bars per row
    gap, head, foot = 0.75, (0.85 if title else 0.6), 0.3  # title + ticks between rows; legend; last ticks
    total = sum(axes_h) + gap * (nrows - 1) + 0.4 + head + foot
    fig, axes = plt.subplots(nrows, cols, figsize=(WIDTH_IN, total), squeeze=False,
                             gridspec_kw={"height_ratios": axes_h})
    fig.subplots_adjust(left=0.65 / WIDTH_IN, right=1 - 0.2 / WIDTH_IN, top=1 - (head + 0.4) / total,
                        bottom=foot / total, wspace=0.3, hspace=gap / (sum(axes_h) / nrows))
    used: dict[str, Series] = {}
    for ax, panel in zip(axes.flat, panels):
        _draw_panel(ax, panel)
        for g in panel.groups:
            for b in g.bars:
                used.setdefault(b.series.color + b.series.label, b.series)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles: list[Any] = [Patch(color=s.color, label=s.label) for s in used.values()]
    if reference_legend:
        handles.append(Line2D([], [], color=_REFERENCE_COLOR, linestyle="--", label=reference_legend))
    if title:
        fig.suptitle(title, fontsize=_FONT + 2, y=1 - 0.08 / total, va="top")
    fig.legend(handles=handles, loc="upper center", ncol=min(3, len(handles)), fontsize=_FONT, frameon=False,
               bbox_to_anchor=(0.5, 1 - (head - 0.6) / total), columnspacing=1.2, handlelength=1.5)
    return fig


def _draw_panel(ax: Any, panel: Panel) -> None:
    y = 0.0
    ticks, tick_labels = [], []
    extent = 0.0
    layout: list[tuple[Group, list[float]]] = []
    for group in panel.groups:
        ys = [y + i for i in range(len(group.bars))]
        layout.append((group, ys))
        ticks.append((ys[0] + ys[-1]) / 2)
        tick_labels.append(group.loop)
        extent = max([extent, *(b.value for b in group.bars),
                      *([group.reference[1]] if group.reference else [])])
        y = ys[-1] + 2.0
    xmax = extent * 1.5 if extent > 0 else 1.0
    for group, ys in layout:
        for b, yy in zip(group.bars, ys):
            (rect,) = ax.barh(yy, b.value, height=0.8, color=b.series.color)
            rect.set_gid(f"bar:{b.series.key}:{group.loop}")
            label = _fmt(b.value)
            mine = bool(b.note)
            inside = mine and b.value > 0.55 * xmax
            if inside:  # the ratio in the bar, the value after it
                t = ax.text(b.value - 0.015 * xmax, yy, b.note, va="center", ha="right", fontsize=_FONT,
                            color="white", fontweight="bold", zorder=4)
                t.set_gid(f"note:{group.loop}")
                ax.text(b.value + 0.015 * xmax, yy, label, va="center", ha="left", fontsize=_FONT,
                        fontweight="bold", zorder=4, bbox=_CLEAR)
            else:
                t = ax.text(b.value + 0.015 * xmax, yy, f"{label}   {b.note}" if mine else label, va="center",
                            ha="left", fontsize=_FONT, fontweight="bold" if mine else "normal",
                            color=ACP_FAST.color if mine else "#222222", zorder=4, bbox=_CLEAR)
                if mine:
                    t.set_gid(f"note:{group.loop}")
        if group.reference is not None:
            name, rv = group.reference
            line = ax.vlines(rv, ys[0] - 0.55, ys[-1] + 0.55, colors=_REFERENCE_COLOR, linestyles="--",
                             linewidth=1.1, zorder=3)
            line.set_gid(f"reference:{group.loop}")
            ax.text(rv, ys[-1] + 0.6, name, ha="left" if rv < 0.2 * xmax else "center",
                    va="top", fontsize=_FONT - 1, color=_REFERENCE_COLOR, zorder=4, bbox=_CLEAR)
    ax.set_xlim(0, xmax)
    ax.set_ylim(y - 2.0 + 1.2, -0.7)
    ax.set_yticks(ticks)
    ax.set_yticklabels(tick_labels, fontsize=_FONT + 0.5)
    ax.tick_params(axis="x", labelsize=_FONT - 0.5)
    ax.xaxis.set_major_formatter(_tick_formatter())
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"{panel.title}\n{panel.unit}, {'higher' if panel.better == 'higher' else 'lower'} is better",
                 fontsize=_FONT + 1.5, loc="left")


def _tick_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v / 1000:g}k" if v >= 10_000 else f"{v:,g}")


def _save(fig: Any, path: str | os.PathLike[str]) -> None:
    fig.savefig(os.fspath(path), dpi=150)
    _pyplot().close(fig)


def write_png(path: str | os.PathLike[str], rows: Sequence[Measurement], title: str = "") -> None:
    """The suite's chart ([`suite_panels`][acp_fast.benchmark.chart.suite_panels]) as a PNG.

    Raises:
        MissingMatplotlib: matplotlib is not installed (nothing is written).
    """
    _save(figure(suite_panels(rows), title, reference_legend="floor: no protocol library (orjson per line)"),
          path)


def write_remote_png(path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]], title: str = "", *,
                     rss_goal: float | None = None) -> None:
    """The remote rows' chart ([`remote_panels`][acp_fast.benchmark.chart.remote_panels]) as a PNG.

    Raises:
        MissingMatplotlib: matplotlib is not installed (nothing is written).
    """
    _save(figure(remote_panels(rows, rss_goal=rss_goal), title,
                 reference_legend="reference (named on the line)"), path)

