"""The benchmark charts (acp_fast.benchmark.chart), drawn from the committed JSON of the last runs.

Structure, not pixels: one panel per question, horizontal bars grouped by loop, one fixed colour
per series (acp_fast and each official SDK), the ratio to the best SDK written on acp_fast's bar
(recomputed here from the JSON's medians), and the floor line wherever the JSON has a floor.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from acp_fast.benchmark.chart import (  # noqa: E402
    REMOTE_QUESTIONS,
    SERIES,
    SUITE_PAIRS,
    SUITE_QUESTIONS,
    figure,
    remote_panels,
    suite_panels,
    write_png,
    write_remote_png,
)
from acp_fast.benchmark.tables import read_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
E2E = ROOT / "docs" / "bench" / "e2e.json"
REMOTE = ROOT / "docs" / "bench" / "remote.json"
PNG = b"\x89PNG\r\n\x1a\n"


def _bars(ax: Any) -> Iterator[tuple[str, str, float, tuple[float, ...]]]:
    """``(series, loop, width, colour)`` of every bar of a panel."""
    for patch in ax.patches:
        gid = patch.get_gid() or ""
        if gid.startswith("bar:"):
            _, series, loop = gid.split(":")
            assert patch.get_x() == 0  # horizontal: every bar starts at the axis
            yield series, loop, patch.get_width(), tuple(patch.get_facecolor())


def _notes(ax: Any) -> dict[str, str]:
    """The ratio written on acp_fast's bar, per loop (after the value when written beside the bar)."""
    return {t.get_gid().split(":", 1)[1]: t.get_text().split("   ")[-1] for t in ax.texts
            if (t.get_gid() or "").startswith("note:")}


def _references(ax: Any) -> dict[str, float]:
    out = {}
    for c in ax.collections:
        gid = c.get_gid() or ""
        if gid.startswith("reference:"):
            out[gid.split(":", 1)[1]] = float(c.get_segments()[0][0][0])
    return out


def _check_colours(axes: list[Any]) -> None:
    """Every series has one colour in every panel, and no two series of the legend share one."""
    import matplotlib.colors as mcolors

    for ax in axes:
        for series, _, _, colour in _bars(ax):
            assert colour == mcolors.to_rgba(SERIES[series].color), series
    drawn = {SERIES[s].label: SERIES[s].color for ax in axes for s, *_ in _bars(ax)}
    assert len(set(drawn.values())) == len(drawn), drawn


def _ratio(better: str, mine: float, peers: dict[str, float]) -> str:
    names = {"pysdk": "Python SDK", "ts": "TS SDK"}
    if better == "higher":
        name, best = max(peers.items(), key=lambda kv: kv[1])
        return f"{mine / best:.1f}× {names[name]}"
    name, best = min(peers.items(), key=lambda kv: kv[1])
    return f"{best / mine:.1f}× less than {names[name]}" if best >= mine else f"{mine / best:.1f}× more than {names[name]}"


def test_suite_chart_from_the_committed_json(tmp_path: Path) -> None:
    doc = read_json(E2E)
    medians = {(r.pair, r.loop, r.workload): r.median for r in doc.rows if r.median is not None}
    fig = figure(suite_panels(doc.rows))
    axes = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title(loc="left").split("\n")[0] for ax in axes] == [q[1] for q in SUITE_QUESTIONS]
    _check_colours(axes)
    for ax, (workloads, _, _, better) in zip(axes, SUITE_QUESTIONS):
        def value(pair: str, loop: str, workloads: tuple[str, ...] = workloads) -> float | None:
            parts = [medians.get((pair, loop, w), medians.get((pair, "node", w))) for w in workloads]
            return None if None in parts else sum(p for p in parts if p is not None)

        bars = {(s, loop): width for s, loop, width, _ in _bars(ax)}
        loops = sorted({loop for _, loop in bars})
        assert loops == ["asyncio", "uvloop"]
        notes, refs = _notes(ax), _references(ax)
        for loop in loops:
            # a bar per series the JSON has, at its median (the TS SDK's Node.js run in both groups)
            expected = {(key, loop): value(pair, loop) for pair, key in SUITE_PAIRS.items()
                        if value(pair, loop) is not None}
            assert {k: v for k, v in bars.items() if k[1] == loop} == pytest.approx(expected)
            peers = {k: v for (k, lp), v in expected.items() if k in ("pysdk", "ts") and lp == loop}
            assert notes[loop] == _ratio(better, expected[("acp_fast", loop)], peers)
            floor = value("floor/floor", loop)
            if floor is None:
                assert loop not in refs
            else:
                assert refs[loop] == pytest.approx(floor)
    # the floor is drawn where the run measured one, and only there
    assert [bool(_references(ax)) for ax in axes] == [True, True, False, False, True, True]
    write_png(tmp_path / "bench.png", doc.rows, title="from the committed JSON")
    assert (tmp_path / "bench.png").read_bytes()[:8] == PNG


def test_remote_chart_from_the_committed_json(tmp_path: Path) -> None:
    rows = json.loads(REMOTE.read_text(encoding="utf-8"))["rows"]
    fig = figure(remote_panels(rows, rss_goal=200.0))
    axes = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title(loc="left").split("\n")[0] for ax in axes] == [q[2] for q in REMOTE_QUESTIONS]
    _check_colours(axes)
    by = {(r["pair"], r["transport"], r["workload"], r["loop"]): r["median"] for r in rows}
    for ax, (transport, workload, _, _, better, ref) in zip(axes, REMOTE_QUESTIONS):
        notes, refs = _notes(ax), _references(ax)
        for loop in ("asyncio", "uvloop"):
            if workload == "gateway":
                direct = by[("direct", "stdio", "stream", loop)]
                assert notes[loop] == f"{by[('gateway', 'ws', 'stream', loop)] / direct:.1f}× direct stdio"
                assert refs[loop] == pytest.approx(direct)
                continue
            peers = {p: by[(p, transport, workload, loop)] for p in ("pysdk", "ts") if (p, transport, workload, loop) in by}
            if peers:
                assert notes[loop] == _ratio(better, by[("acp_fast", transport, workload, loop)], peers)
            else:
                assert loop not in notes
            if ref is not None:
                assert refs[loop] == pytest.approx(by[(ref[0], ref[1], workload, loop)])
            elif workload == "connections":
                assert refs[loop] == 200.0  # the goal
            else:
                assert loop not in refs
    write_remote_png(tmp_path / "remote.png", rows, rss_goal=200.0)
    assert (tmp_path / "remote.png").read_bytes()[:8] == PNG


def test_the_command_redraws_both_charts_from_their_json(tmp_path: Path) -> None:
    for name, source in (("bench.png", E2E), ("remote.png", REMOTE)):
        r = subprocess.run([sys.executable, "-m", "acp_fast.cli.bench", "--from-json", str(source), "--png",
                            str(tmp_path / name)], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        assert f"chart written to {tmp_path / name}" in r.stdout
        assert (tmp_path / name).read_bytes()[:8] == PNG
