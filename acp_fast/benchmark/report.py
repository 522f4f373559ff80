"""Rendering of benchmark rows: the markdown table and the JSON document."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .suite import METRICS, Row, Settings
from .targets import evaluate, ratio

__all__ = ["format_value", "markdown", "targets_markdown", "write_json"]


def format_value(v: float | None, unit: str | None) -> str:
    """A compact cell: thousands separators for rates, one decimal for small values."""
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.1f}" if abs(v) >= 1 else f"{v:.3f}"


def _spread(row: Row) -> str:
    if len(row.runs) < 2 or not row.median:
        return ""
    lo, hi = min(row.runs), max(row.runs)
    return f" ±{(hi - lo) / 2 / row.median * 100:.0f}%"


def markdown(rows: Sequence[Row], settings: Settings, *, spread: bool = True,
             baseline: str | None = "pysdk/pysdk") -> str:
    """One table: a line per metric, a column per pair (median of the runs; ``±x%`` is half the
    min–max range relative to the median; ``(×k)`` is how many times better than the
    ``baseline`` pair; ``!`` marks a metric with failed runs). Skipped pairs are listed under
    the table."""
    skipped = [r for r in rows if r.skipped]
    by_key = {(r.pair, r.workload): r for r in rows if not r.skipped}
    pairs: list[str] = []
    for r in rows:
        if not r.skipped and r.pair not in pairs:
            pairs.append(r.pair)
    out: list[str] = []
    if pairs:
        out.append("| workload | unit | " + " | ".join(pairs) + " |")
        out.append("|---|---|" + "---:|" * len(pairs))
        for m in METRICS:
            cells = []
            for p in pairs:
                row = by_key.get((p, m.workload))
                if row is None:
                    cells.append("—")
                    continue
                cell = format_value(row.median, row.unit) + (_spread(row) if spread else "")
                if baseline and p != baseline:
                    k = ratio(row, by_key.get((baseline, m.workload)))
                    if k is not None:
                        cell += f" (×{k:.1f})" if k >= 0.995 or k < 0.095 else f" (×{k:.2f})"
                if row.errors:
                    cell += f" !{len(row.errors)}"
                cells.append(cell)
            arrow = "↑" if m.better == "higher" else "↓"
            out.append(f"| {m.label} {arrow} | {m.unit} | " + " | ".join(cells) + " |")
    else:
        out.append("(no runnable pair)")
    out.append("")
    out.append(
        f"Medians of {settings.repeat} runs; N={settings.n:,} × {settings.chunk} B, M={settings.m:,} sequential, "
        f"{settings.inflight_m:,} requests with {settings.inflight} in flight, {settings.large_n} × 1 MiB, "
        f"warm-up {settings.warmup}. ↑ higher is better, ↓ lower is better"
        + (f"; (×k) = k times better than {baseline}." if baseline and baseline in pairs else ".")
    )
    for r in skipped:
        out.append(f"- {r.pair}: {r.skipped}")
    errs = [r for r in rows if r.errors]
    if errs:
        seen: set[str] = set()
        for r in errs:
            for e in r.errors:
                key = f"{r.pair} {e}"
                if key not in seen:
                    seen.add(key)
                    out.append(f"- {r.pair}: {e[:300]}")
    return "\n".join(out)


def targets_markdown(rows: Sequence[Row]) -> str:
    """The PASS/MISS table of :data:`~acp_fast.benchmark.targets.TARGETS` for this run."""
    out = ["| target | pair | vs | measured | goal | result |", "|---|---|---|---:|---:|---|"]
    for t in evaluate(rows):
        v = t["measured"]
        measured = "—" if v is None else (f"{v:.1f}×" if t["unit"] == "×" else f"{v:.1f} {t['unit']}")
        goal = f"≥ {t['goal']:g}×" if t["unit"] == "×" else f"≤ {t['goal']:g} {t['unit']}"
        out.append(f"| {t['label']} | {t['pair']} | {t['reference'] or '—'} | {measured} | {goal} | "
                   f"**{t['result']}** |")
    return "\n".join(out)


def write_json(path: str | os.PathLike[str], rows: Sequence[Row], raw: Sequence[dict[str, Any]],
               settings: Settings, meta: dict[str, Any]) -> None:
    """Writes ``{"meta", "settings", "rows", "raw"}`` to ``path``."""
    doc = {
        "meta": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            **meta,
        },
        "settings": settings.__dict__,
        "rows": [r.to_json() for r in rows],
        "targets": evaluate(rows),
        "raw": list(raw),
    }
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
