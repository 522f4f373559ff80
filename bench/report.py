"""Run the benchmark suite (or read its saved JSON) and print a markdown report.

Usage::

    python -m bench.report                      # 3 full runs, medians, markdown to stdout
    python -m bench.report --runs 5 --scale 0.2
    python -m bench.report --quick --runs 1     # CI-sized
    python -m bench.report --json a.json --json b.json   # no run: aggregate saved runs
    python -m bench.report --runs 3 --scale 0.25 --write-json docs/bench/engine.json
    python -m bench.report --from-json docs/bench/engine.json    # no run: the same report again
    python bench/report.py ...                  # same thing

``--write-json PATH`` saves what the report is made of (per scenario × corpus × implementation:
lines/s of every run, their median, the correctness flags and extra info; plus the command,
date, Python and load), and ``--from-json PATH`` renders the report from that file alone
(needs tabulate only, not pytest-benchmark, orjson or msgspec). ``--json`` is the other way
round: it *reads* pytest-benchmark's raw JSON of earlier runs.

Each run is one ``python -m pytest bench --benchmark-json=…`` process (fresh corpora, fresh
heap); raw JSON and logs land in ``bench/.results/<timestamp>/`` (git-ignored) unless
``--save-dir`` says otherwise. Per benchmark the run's median time gives lines/s; the
report shows the median of those over runs, because this machine kind is shared and noisy
(±50 % between runs): compare **ratios measured side by side in one run**, not absolute
numbers across reports.

Tables: throughput per scenario × corpus × implementation, with compiled ÷ pure and compiled
÷ best baseline (each ratio taken within a run, then the median over runs) and compiled ÷
each physical limit; objects per lazy message; the targets
with PASS/MISS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["LIMITS", "LIMITS_SOURCE", "TARGETS", "aggregate", "from_report_json", "main", "render",
           "report_json"]

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / ".results"

SCENARIOS = ("decode-eager", "decode-lazy", "route", "forward", "encode", "forwarder", "forwarder-route")
CORPORA = ("mixed", "small", "large")
IMPLS = ("c", "py", "orjson", "msgspec")
BASELINES = ("orjson", "msgspec")

#: Physical limits in lines/s per corpus, copied from the project's baseline notes.
LIMITS_SOURCE = (
    "measured on this machine kind (2 vCPU x86-64 with AVX-512, 24 GiB, Python 3.11.7, "
    "simdjson 3.12.3 as shipped by pysimdjson 7.0.2), full-size corpora"
)
LIMITS: dict[str, dict[str, float]] = {
    # pipe -> C read + memchr split + simdjson On-Demand routing (jsonrpc, id, method),
    # 1 MiB pipe: the ceiling for lazy decoding, routing and forwarding of a real stream.
    "routing limit (pipe)": {"mixed": 6.9e6, "small": 13.3e6, "large": 214e3},
    # simdjson On-Demand reading the routing fields only, per line, in memory (no pipe).
    "On-Demand (in memory)": {"mixed": 12.1e6, "small": 21.9e6, "large": 680e3},
    # estimate: fully decoded Python dicts handed to one Python handler per message.
    "dict limit": {"mixed": 1.33e6, "small": 2.7e6, "large": 53e3},
}

#: (label, kind, scenario, corpus, threshold). kind: "vs_py" / "vs_orjson" (ratio of the
#: compiled twin to that implementation), "rate" (compiled lines/s), "objects" (objects
#: beyond the frame per lazy message, compiled twin, worst corpus).
TARGETS: tuple[tuple[str, str, str, str, float], ...] = (
    ("compiled eager decode ≥ 4× pure (mixed)", "vs_py", "decode-eager", "mixed", 4.0),
    ("compiled eager decode ≥ 1.15× orjson baseline (mixed)", "vs_orjson", "decode-eager", "mixed", 1.15),
    ("compiled lazy decode ≥ 5M lines/s (mixed)", "rate", "decode-lazy", "mixed", 5e6),
    ("compiled route-only ≥ 5M lines/s (mixed)", "rate", "route", "mixed", 5e6),
    ("compiled forward ≥ 3M lines/s (mixed)", "rate", "forward", "mixed", 3e6),
    ("compiled forwarder (the conductor's path) ≥ 3M lines/s (mixed)", "rate", "forwarder", "mixed", 3e6),
    ("compiled forwarder route-only ≥ 5M lines/s (mixed)", "rate", "forwarder-route", "mixed", 5e6),
    ("objects per lazy message ≤ 1 beyond the frame (compiled, every corpus)",
     "objects", "objects", "*", 1.0),
)


# ---------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------


def run_suite(runs: int, save_dir: Path, scale: float | None, quick: bool,
              pytest_args: Sequence[str]) -> list[Path]:
    """Run ``python -m pytest bench`` ``runs`` times; returns the JSON paths written."""
    save_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if scale is not None:
        env["ACP_FAST_BENCH_SCALE"] = repr(scale)
    if quick:
        env["ACP_FAST_BENCH_QUICK"] = "1"
    paths = []
    for i in range(1, runs + 1):
        out = save_dir / f"run-{i}.json"
        log = save_dir / f"run-{i}.log"
        cmd = [sys.executable, "-m", "pytest", "bench", "-q", f"--benchmark-json={out}", *pytest_args]
        print(f"[bench.report] run {i}/{runs}: {' '.join(cmd)}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        with open(log, "wb") as fh:
            rc = subprocess.call(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT)
        tail = log.read_bytes().decode("utf-8", "replace").strip().splitlines()[-1:]
        print(f"[bench.report]   exit {rc} in {time.monotonic() - t0:.0f}s: {' '.join(tail)}",
              file=sys.stderr, flush=True)
        if not out.exists() or out.stat().st_size == 0:
            raise SystemExit(f"run {i} wrote no benchmark JSON (exit {rc}); see {log}")
        paths.append(out)
    return paths


# ---------------------------------------------------------------------------------------
# Aggregating
# ---------------------------------------------------------------------------------------


class Row:
    """One (scenario, corpus, impl) over all runs."""

    def __init__(self) -> None:
        self.by_run: dict[int, float] = {}  # run index -> lines/s
        self.correct: list[bool] = []
        self.lines = 0
        self.extra: list[dict[str, Any]] = []

    @property
    def rates(self) -> list[float]:
        return list(self.by_run.values())

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def ok(self) -> bool:
        return all(self.correct)


def aggregate(paths: Iterable[Path]) -> tuple[dict[tuple[str, str, str], Row], dict[str, Any]]:
    """Rows keyed by ``(scenario, corpus, impl)`` and facts about the runs."""
    rows: dict[tuple[str, str, str], Row] = defaultdict(Row)
    meta: dict[str, Any] = {"runs": 0, "scales": set(), "machine": None, "versions": None}
    for run, path in enumerate(paths):
        data = json.loads(Path(path).read_text())
        meta["runs"] += 1
        meta["machine"] = meta["machine"] or data.get("machine_info")
        load = (data.get("machine_info") or {}).get("acp_fast_bench_load")
        if load:
            meta.setdefault("load", []).append("→".join(f"{x:.1f}" for x in load))
        meta["datetime"] = data.get("datetime")
        for bench in data.get("benchmarks", []):
            info = bench.get("extra_info", {})
            if "impl" not in info:
                continue
            key = (info["scenario"], info["corpus"], info["impl"])
            row = rows[key]
            row.lines = info["lines"]
            row.by_run[run] = info["lines"] / bench["stats"]["median"]
            row.correct.append(bool(info.get("correct")))
            row.extra.append(info)
            meta["scales"].add(info.get("scale"))
    return rows, meta


# ---------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------


def _fmt_rate(rate: float | None) -> str:
    if rate is None:
        return "—"
    if rate >= 1e6:
        return f"{rate / 1e6:.2f}M"
    if rate >= 1e3:
        return f"{rate / 1e3:.0f}k"
    return f"{rate:.0f}"


def _fmt_ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def _rate(rows: dict[tuple[str, str, str], Row], scenario: str, corpus: str, impl: str) -> float | None:
    row = rows.get((scenario, corpus, impl))
    return row.rate if row and row.rates else None


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _ratio(rows: dict[tuple[str, str, str], Row], scenario: str, corpus: str, impl: str,
           others: Sequence[str]) -> float | None:
    """Median over runs of ``impl``'s rate ÷ the best of ``others`` in the *same* run.

    Strategy: the machine is shared, so rates swing between runs; a ratio of two numbers
    measured side by side in one run is what stays meaningful.
    """
    row = rows.get((scenario, corpus, impl))
    if not row or not row.by_run:
        return None
    ratios = []
    for run, rate in row.by_run.items():
        best = [r.by_run[run] for o in others
                if (r := rows.get((scenario, corpus, o))) is not None and run in r.by_run]
        if best:
            ratios.append(rate / max(best))
    return statistics.median(ratios) if ratios else None


def _objects(rows: dict[tuple[str, str, str], Row], corpus: str, impl: str, field: str) -> float | None:
    row = rows.get(("objects", corpus, impl))
    if not row or not row.extra:
        return None
    return statistics.median(e[field] for e in row.extra)


def _md(head: Sequence[str], body: list[list[str]], left: int = 1) -> list[str]:
    """A GitHub markdown table (``tabulate``): the first ``left`` columns left-aligned, the rest right."""
    from tabulate import tabulate

    align = ["left"] * left + ["right"] * (len(head) - left)
    return str(tabulate(body, headers=list(head), tablefmt="github", colalign=align,
                        disable_numparse=True)).splitlines()


def _throughput_table(rows: dict[tuple[str, str, str], Row]) -> list[str]:
    limit_names = list(LIMITS)
    head = ["scenario", "corpus", *IMPLS, "c ÷ py", "c ÷ best baseline",
            *[f"c ÷ {name}" for name in limit_names]]
    body: list[list[str]] = []
    for scenario in SCENARIOS:
        for corpus in CORPORA:
            if not any((scenario, corpus, impl) in rows for impl in IMPLS):
                continue
            cells = [scenario, corpus]
            for impl in IMPLS:
                row = rows.get((scenario, corpus, impl))
                cell = _fmt_rate(row.rate if row and row.rates else None)
                if row and row.rates and not row.ok:
                    cell += " ✗wrong"
                cells.append(cell)
            c = _rate(rows, scenario, corpus, "c")
            cells.append(_fmt_ratio(_ratio(rows, scenario, corpus, "c", ["py"])))
            cells.append(_fmt_ratio(_ratio(rows, scenario, corpus, "c", BASELINES)))
            for name in limit_names:
                cells.append(_fmt_ratio(_div(c, LIMITS[name][corpus])))
            body.append(cells)
    return _md(head, body, left=2)


def _lines_note(rows: dict[tuple[str, str, str], Row]) -> list[str]:
    """Say which rows were timed on fewer lines (the pure twin's prefix cap)."""
    notes = []
    for corpus in CORPORA:
        sizes = {impl: row.lines for (s, c, impl), row in rows.items() if c == corpus and s != "objects"}
        full = max(sizes.values(), default=0)
        short = sorted({n for n in sizes.values() if n < full})
        for n in short:
            who = ", ".join(sorted(i for i, m in sizes.items() if m == n))
            notes.append(f"{who} on {corpus}: timed on the first {n:,} of {full:,} lines (same stream).")
    return [" ".join(notes), ""] if notes else []


def _objects_table(rows: dict[tuple[str, str, str], Row]) -> list[str]:
    body: list[list[str]] = []
    for impl in IMPLS:
        if not any(("objects", c, impl) in rows for c in CORPORA):
            continue
        cells = [impl]
        for corpus in CORPORA:
            fed = _objects(rows, corpus, impl, "objects_beyond_frame")
            routed = _objects(rows, corpus, impl, "objects_per_msg_routed")
            cells.append("—" if fed is None else f"{fed:.2f} ({routed - 1:.2f})")
        body.append(cells)
    return _md(["impl", *(f"{c}: beyond frame (after route)" for c in CORPORA)], body)


def _target_rows(rows: dict[tuple[str, str, str], Row]) -> list[str]:
    body: list[list[str]] = []
    for label, kind, scenario, corpus, threshold in TARGETS:
        measured: float | None
        ok_rows = True
        if kind == "objects":
            values = [_objects(rows, c, "c", "objects_beyond_frame") for c in CORPORA]
            values = [v for v in values if v is not None]
            measured = max(values) if values else None
            shown = "—" if measured is None else f"{measured:.2f} (worst corpus)"
            passed = measured is not None and measured <= threshold
        else:
            c_row = rows.get((scenario, corpus, "c"))
            c = _rate(rows, scenario, corpus, "c")
            ok_rows = bool(c_row and c_row.ok)
            if kind == "rate":
                measured = c
                shown = _fmt_rate(measured) + " lines/s" if measured is not None else "—"
            else:
                other = "py" if kind == "vs_py" else "orjson"
                other_row = rows.get((scenario, corpus, other))
                ok_rows = ok_rows and bool(other_row and other_row.ok)
                measured = _ratio(rows, scenario, corpus, "c", [other])
                shown = _fmt_ratio(measured)
            passed = measured is not None and measured >= threshold
        if measured is None:
            verdict = "N/A (compiled twin not measured)"
        elif not ok_rows:
            verdict = "MISS (result incorrect)"
        else:
            verdict = "PASS" if passed else "MISS"
        body.append([label, shown, verdict])
    return _md(["target", "measured", "verdict"], body)


def render(rows: dict[tuple[str, str, str], Row], meta: dict[str, Any]) -> str:
    """The whole markdown report."""
    machine = meta.get("machine") or {}
    versions = machine.get("acp_fast_bench", {})
    scales = sorted(s for s in meta["scales"] if s is not None)
    missing = [i for i in IMPLS if not any(k[2] == i for k in rows)]
    lines = [
        "# acp_fast benchmark report",
        "",
        f"- runs: {meta['runs']} (lines/s = lines ÷ median time of a run, median over runs; "
        "ratios between implementations: per run, then the median over runs)",
        f"- corpus scale: {', '.join(map(str, scales)) or '?'} (1.0 = mixed/small 200k lines, large 5k)",
        f"- python {machine.get('python_version', platform.python_version())}, "
        f"{machine.get('cpu', {}).get('brand_raw', platform.processor() or '?')}, "
        f"{machine.get('cpu', {}).get('count', os.cpu_count())} CPUs; "
        + ", ".join(f"{k} {v}" for k, v in versions.items()),
    ]
    if meta.get("load"):
        lines.append(f"- 1-min load average per run (start→end, {meta.get('cpus') or os.cpu_count()} CPUs here): "
                     f"{', '.join(meta['load'])} (a load above ~1 means other processes shared the CPUs)")
    if missing:
        lines.append(f"- not measured: {', '.join(missing)}")
    lines += [
        "",
        "## Throughput (lines/s)",
        "",
        *_throughput_table(rows),
        "",
        *_lines_note(rows),
        "`✗wrong`: the result differed from the corpus ground truth (= the pure twin's output). "
        "orjson has no lazy mode: its decode-lazy row decodes everything. Limits: "
        + "; ".join(f"{name} {'/'.join(_fmt_rate(LIMITS[name][c]) for c in CORPORA)}"
                    for name in LIMITS)
        + f" lines/s (mixed/small/large), {LIMITS_SOURCE}.",
        "",
        "## Objects per lazy message (live allocations held per frame, minus the frame)",
        "",
        *_objects_table(rows),
        "",
        "## Targets",
        "",
        *_target_rows(rows),
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# The report's own JSON (--write-json / --from-json)
# ---------------------------------------------------------------------------------------

#: ``"kind"`` of the JSON :func:`report_json` writes
KIND = "bench.report"


def report_json(rows: dict[tuple[str, str, str], Row], meta: dict[str, Any],
                command: str | None = None) -> dict[str, Any]:
    """Everything :func:`render` reads, as JSON: rows in their order (their runs' lines/s by run
    index, the median, the correctness flags, every run's ``extra_info``) and the facts about the
    runs, with what :func:`render` would take from this machine filled in (Python, CPU, CPUs)."""
    machine = dict(meta.get("machine") or {})
    cpu = {k: v for k, v in (machine.get("cpu") or {}).items() if k != "flags"}
    cpu.setdefault("brand_raw", platform.processor() or "?")
    cpu.setdefault("count", os.cpu_count())
    machine["cpu"] = cpu
    machine.setdefault("python_version", platform.python_version())
    machine.setdefault("acp_fast_bench", {})
    return {
        "kind": KIND,
        "version": 1,
        "meta": {
            "command": command,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": meta.get("cpus") or os.cpu_count(),
            "runs": meta["runs"],
            "scales": sorted(x for x in meta["scales"] if x is not None),
            "datetime": meta.get("datetime"),
            "load": meta.get("load"),
            "machine": machine,
        },
        "rows": [
            {"scenario": s, "corpus": c, "impl": i, "lines": row.lines,
             "runs": [{"run": run, "lines_per_s": rate} for run, rate in row.by_run.items()],
             "median": row.rate if row.rates else None, "correct": row.correct, "extra": row.extra}
            for (s, c, i), row in rows.items()
        ],
    }


def from_report_json(path: Path) -> tuple[dict[tuple[str, str, str], Row], dict[str, Any]]:
    """The rows and facts :func:`render` needs, from a file :func:`report_json` wrote; raises
    ``acp_fast.benchmark.tables.BenchJSONError`` when ``path`` is not such a file."""
    from acp_fast.benchmark.tables import BenchJSONError, load_json

    what = "a bench.report JSON (written by --write-json)"
    doc = load_json(path, what)
    if doc.get("kind") != KIND:
        hint = " (a pytest-benchmark JSON: pass it with --json)" if "benchmarks" in doc else ""
        raise BenchJSONError(f"{path}: not {what}: its \"kind\" is {doc.get('kind')!r}, not {KIND!r}{hint}")
    try:
        meta = dict(doc["meta"])
        meta["scales"] = set(meta.get("scales") or [])
        meta["runs"] = int(meta["runs"])
        if meta.get("load") is None:
            meta.pop("load", None)
        rows: dict[tuple[str, str, str], Row] = defaultdict(Row)
        for d in doc["rows"]:
            row = rows[(str(d["scenario"]), str(d["corpus"]), str(d["impl"]))]
            row.lines = int(d["lines"])
            row.by_run = {int(r["run"]): float(r["lines_per_s"]) for r in d["runs"]}
            row.correct = [bool(x) for x in d["correct"]]
            row.extra = [dict(e) for e in d.get("extra") or []]
    except (KeyError, TypeError, ValueError) as exc:
        raise BenchJSONError(f"{path}: not {what}: {type(exc).__name__}: {exc}") from None
    return rows, meta


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="append", type=Path, default=[], metavar="PATH",
                        help="aggregate this pytest-benchmark JSON instead of running (repeatable)")
    parser.add_argument("--runs", type=int, default=3, help="suite runs to take medians over (default 3)")
    parser.add_argument("--scale", type=float, default=None, help="corpus size factor (default 1.0)")
    parser.add_argument("--quick", action="store_true", help="CI-sized runs (scale 0.05, short timings)")
    parser.add_argument("--save-dir", type=Path, default=None, help="where run JSON/logs go")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    parser.add_argument("--write-json", type=Path, default=None, metavar="PATH",
                        help="also write the report's data (per scenario/corpus/impl: every run and the median; "
                             "command, date, Python, load) as JSON, for --from-json")
    parser.add_argument("--from-json", type=Path, default=None, metavar="PATH",
                        help="run nothing: render the report from a --write-json file (needs tabulate only)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --), e.g. -- -k mixed")
    args = parser.parse_args(argv)

    if args.from_json is not None:
        from acp_fast.benchmark.tables import BenchJSONError

        try:
            rows, meta = from_report_json(args.from_json)
        except BenchJSONError as exc:
            print(f"python -m bench.report: {exc}", file=sys.stderr)
            return 2
        text = render(rows, meta)
        print(text)
        if args.out:
            args.out.write_text(text)
        return 0
    paths: list[Path] = list(args.json)
    if not paths:
        save_dir = args.save_dir or RESULTS / time.strftime("%Y%m%d-%H%M%S")
        paths = run_suite(args.runs, save_dir, args.scale, args.quick, args.pytest_args)
    rows, meta = aggregate(paths)
    text = render(rows, meta)
    print(text)
    if args.write_json is not None:
        import shlex

        from acp_fast.benchmark.tables import dump_json

        command = "python -m bench.report " + shlex.join(sys.argv[1:] if argv is None else argv)
        dump_json(args.write_json, report_json(rows, meta, command))
    if args.out:
        args.out.write_text(text)
    elif not args.json:
        (paths[0].parent / "report.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
