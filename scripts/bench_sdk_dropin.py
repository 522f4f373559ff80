#!/usr/bin/env python3
"""Issue 11 targets: the official Python SDK, stock vs the transport drop-in vs the connection drop-in.

Each round runs, for every mode, the SDK peers of ``peers/pysdk`` unchanged (``client.py``
spawning ``agent.py``, both through ``peers/pysdk/dropin.py MODE``, so both sides are
switched alike) on the same event loop (``--loop``, default asyncio, passed to both sides),
over real pipes. The modes are interleaved within a round (in an order rotated every round)
so that machine load hits them alike. Per run the client reports:

* streaming: ``--n`` ``session/update`` notifications of ``ACP_CHUNK`` bytes (default 100):
  notifications/s and CPU µs per notification on each side (client ``process_time``,
  agent ``_test/stats``, measured around the prompt only);
* sequential round trips: ``--m`` ``_test/echo`` requests one after the other: round trips/s
  and the median round-trip latency.

Then the import time of the SDK, stock (``import acp``) vs with a drop-in active
(``import acp`` + ``activate.install(MODE)``, which imports ``acp_fast`` and the drop-in's
light modules only: acp_fast's connection and transports wait for first use), as the
median over ``--import-runs`` fresh interpreters, alternating, minus the median of a bare
interpreter start (wall and CPU). ``--imports-only`` measures just that. acp_fast's
modules are byte-compiled first (``compileall``, into their ``__pycache__``), as an
installed package's are and as the SDK's are: otherwise, with ``PYTHONDONTWRITEBYTECODE``
set (as CI sets it), every run would compile acp_fast's sources and measure that instead.

Prints one table of medians with the ratios against the stock SDK and the issue's goals;
``--json PATH`` writes everything (every run, the machine's load average before/after).

Usage:
  python scripts/bench_sdk_dropin.py [--rounds 3] [--n 20000] [--m 3000] [--loop asyncio]
                                     [--import-runs 15] [--imports-only] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / "peers" / "pysdk"
MODES = ("stock", "transport", "connection")
GOALS = {  # issue 11: ratio against the stock SDK
    ("streaming", "transport"): 1.3,
    ("streaming", "connection"): 5.0,
    ("round trips", "connection"): 2.0,
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("ACP_FAST_NO_EXTENSIONS", None)
    env.pop("ACP_N", None)
    return env


def run_pair(mode: str, n: int, m: int, loop: str, warmup: int) -> dict[str, Any]:
    launcher = [sys.executable, str(PEERS / "dropin.py"), mode]
    argv = [*launcher, str(PEERS / "client.py"), "--n", str(n), "--m", str(m), "--rtt-method", "echo",
            "--warmup", str(warmup), "--loop", loop, "--", *launcher, str(PEERS / "agent.py"), "--loop", loop]
    out = subprocess.run(argv, capture_output=True, text=True, env=_env(), cwd=REPO, timeout=900, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{mode}: exit {out.returncode}\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    if not result.get("updatesOk") or result.get("agentExit") != 0:
        raise RuntimeError(f"{mode}: bad run {result}")
    if result.get("loop") != loop or result.get("agentLoop") not in (None, loop):
        raise RuntimeError(f"{mode}: ran on {result.get('loop')}/{result.get('agentLoop')}, not {loop}")
    return result


def import_seconds(code: str) -> tuple[float, float]:
    """(wall, CPU) seconds of a fresh interpreter running ``code`` (CPU: user + system of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=_env(), cwd=REPO, check=True, timeout=120)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


IMPORTS = {
    "bare interpreter": "pass",
    "stock: import acp": "import acp",
    "transport drop-in": "import acp; from acp_fast.compat.acp_sdk import activate; activate.install('transport')",
    "connection drop-in": "import acp; from acp_fast.compat.acp_sdk import activate; activate.install('connection')",
}


def measure_imports(runs: int) -> tuple[dict[str, list[tuple[float, float]]], dict[str, dict[str, float]],
                                         float, float]:
    """Every run's (wall, CPU) per entry of :data:`IMPORTS`, alternating; the medians minus a bare start."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "acp_fast")], check=True, timeout=600,
                   stdout=subprocess.DEVNULL)
    imports: dict[str, list[tuple[float, float]]] = {name: [] for name in IMPORTS}
    for _ in range(runs):
        for name, code in IMPORTS.items():
            imports[name].append(import_seconds(code))
    bare_wall = statistics.median(w for w, _ in imports["bare interpreter"])
    bare_cpu = statistics.median(c for _, c in imports["bare interpreter"])
    import_ms = {name: {"wall": round((statistics.median(w for w, _ in v) - bare_wall) * 1000, 1),
                        "cpu": round((statistics.median(c for _, c in v) - bare_cpu) * 1000, 1)}
                 for name, v in imports.items() if name != "bare interpreter"}
    return imports, import_ms, bare_wall, bare_cpu


def print_imports(runs: int, import_ms: dict[str, dict[str, float]], bare_wall: float, bare_cpu: float) -> None:
    print(f"\nImport time (median of {runs} fresh interpreters, minus a bare start of "
          f"{bare_wall * 1000:.1f} ms wall / {bare_cpu * 1000:.1f} ms CPU):")
    stock_import = import_ms["stock: import acp"]
    for name, ms in import_ms.items():
        print(f"  {name:<20} {ms['wall']:>8.1f} ms wall {ms['cpu']:>8.1f} ms CPU  "
              f"({ms['wall'] / stock_import['wall']:.2f}x the stock wall, "
              f"{ms['cpu'] / stock_import['cpu']:.2f}x the stock CPU)")


def imports_only(args: argparse.Namespace) -> int:
    load_before = os.getloadavg()
    imports, import_ms, bare_wall, bare_cpu = measure_imports(args.import_runs)
    load_after = os.getloadavg()
    print(f"load average {load_before[0]:.2f} -> {load_after[0]:.2f} on {os.cpu_count()} CPUs")
    print_imports(args.import_runs, import_ms, bare_wall, bare_cpu)
    if args.json is not None:
        args.json.write_text(json.dumps({"importMs": import_ms, "importRuns": imports, "cpus": os.cpu_count(),
                                         "loadAverage": {"before": load_before, "after": load_after}}, indent=1))
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=20000, help="streamed notifications per run")
    ap.add_argument("--m", type=int, default=3000, help="sequential round trips per run")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    ap.add_argument("--import-runs", type=int, default=15)
    ap.add_argument("--imports-only", action="store_true", help="measure the import times only")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.imports_only:
        return imports_only(args)

    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for r in range(args.rounds):
        for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:  # rotated: no mode always runs last
            runs[mode].append(run_pair(mode, args.n, args.m, args.loop, args.warmup))
            print(f"round {r + 1}/{args.rounds} {mode}: {runs[mode][-1]['notificationsPerSec']} notif/s, "
                  f"{runs[mode][-1]['roundTripsPerSec']} rt/s", file=sys.stderr)

    imports, import_ms, bare_wall, bare_cpu = measure_imports(args.import_runs)
    load_after = os.getloadavg()

    def med(mode: str, key: str) -> float:
        return float(statistics.median(float(run[key]) for run in runs[mode]))

    rows = []
    for mode in MODES:
        cpu = med(mode, "streamClientCpuUsPerMsg") + med(mode, "streamAgentCpuUsPerMsg")
        rows.append({
            "mode": mode,
            "notificationsPerSec": med(mode, "notificationsPerSec"),
            "streamClientCpuUsPerMsg": med(mode, "streamClientCpuUsPerMsg"),
            "streamAgentCpuUsPerMsg": med(mode, "streamAgentCpuUsPerMsg"),
            "streamCpuUsPerMsgBothSides": round(cpu, 2),
            "roundTripsPerSec": med(mode, "roundTripsPerSec"),
            "p50RttUs": med(mode, "p50RttUs"),
        })
    stock = rows[0]

    print(f"\nPython SDK pairs (client.py + agent.py of peers/pysdk), loop {args.loop}, medians of "
          f"{args.rounds} runs, n={args.n} chunks of {os.environ.get('ACP_CHUNK', '100')} B, m={args.m} "
          f"sequential echo round trips; load average {load_before[0]:.2f} -> {load_after[0]:.2f} on "
          f"{os.cpu_count()} CPUs\n")
    header = (f"{'mode':<12}{'notif/s':>10}{'x':>7}{'client µs/msg':>15}{'agent µs/msg':>14}{'both':>8}"
              f"{'x cpu':>7}{'rt/s':>9}{'x':>7}{'p50 rt µs':>11}")
    print(header)
    for row in rows:
        print(f"{row['mode']:<12}{row['notificationsPerSec']:>10.0f}"
              f"{row['notificationsPerSec'] / stock['notificationsPerSec']:>7.2f}"
              f"{row['streamClientCpuUsPerMsg']:>15.2f}{row['streamAgentCpuUsPerMsg']:>14.2f}"
              f"{row['streamCpuUsPerMsgBothSides']:>8.2f}"
              f"{stock['streamCpuUsPerMsgBothSides'] / row['streamCpuUsPerMsgBothSides']:>7.2f}"
              f"{row['roundTripsPerSec']:>9.0f}{row['roundTripsPerSec'] / stock['roundTripsPerSec']:>7.2f}"
              f"{row['p50RttUs']:>11.0f}")
    print("\nGoals (issue 11), ratio vs stock (throughput; CPU per message both sides in brackets):")
    by_mode = {row["mode"]: row for row in rows}
    verdicts = []
    for (what, mode), goal in GOALS.items():
        row = by_mode[mode]
        if what == "streaming":
            ratio = row["notificationsPerSec"] / stock["notificationsPerSec"]
            cpu_ratio = stock["streamCpuUsPerMsgBothSides"] / row["streamCpuUsPerMsgBothSides"]
            ok = ratio >= goal and cpu_ratio >= goal
            print(f"  {what:<12} {mode:<11} goal >= {goal}x: {ratio:.2f}x ({cpu_ratio:.2f}x)  "
                  f"{'met' if ok else 'NOT met'}")
        else:
            ratio = row["roundTripsPerSec"] / stock["roundTripsPerSec"]
            p50_ratio = stock["p50RttUs"] / row["p50RttUs"]
            ok = ratio >= goal
            print(f"  {what:<12} {mode:<11} goal >= {goal}x: {ratio:.2f}x (p50 latency {p50_ratio:.2f}x)  "
                  f"{'met' if ok else 'NOT met'}")
        verdicts.append({"what": what, "mode": mode, "goal": goal, "ratio": round(ratio, 3), "met": ok})
    print_imports(args.import_runs, import_ms, bare_wall, bare_cpu)
    if args.json is not None:
        args.json.write_text(json.dumps({
            "loop": args.loop, "rounds": args.rounds, "n": args.n, "m": args.m, "runs": runs, "medians": rows,
            "goals": verdicts, "importMs": import_ms, "importRuns": imports,
            "loadAverage": {"before": load_before, "after": load_after}, "cpus": os.cpu_count(),
        }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
