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

Every process runs this interpreter and the ``acp_fast`` this script imports (the installed one;
the checkout's only when none is installed), whatever the working directory: the drop-in sides
run through the reporting launcher (``acp_fast.benchmark.launch``) and each must report the
compiled twin, the run's loop and that package, or the script stops (a number for something
else is never printed); the stock sides never import acp_fast.

Prints one table of medians with the ratios against the stock SDK and the issue's goals;
``--json PATH`` writes everything (every run, the machine's load average before/after).
``--from-json PATH`` runs nothing and prints the same report from such a file; with
``--markdown`` the report comes out as a GitHub markdown table (the README's), a list of the
goals and a table of the import times.

Usage:
  python scripts/bench_sdk_dropin.py [--rounds 3] [--n 20000] [--m 3000] [--loop asyncio]
                                     [--import-runs 15] [--imports-only] [--json out.json]
  python scripts/bench_sdk_dropin.py --from-json out.json [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / "peers" / "pysdk"
try:  # the installed acp_fast (this script's folder, not the working directory, is on sys.path)
    import acp_fast  # noqa: F401
except ImportError:  # a bare checkout: its own
    sys.path.insert(0, str(REPO))
MODES = ("stock", "transport", "connection")
GOALS = {  # issue 11: ratio against the stock SDK
    ("streaming", "transport"): 1.3,
    ("streaming", "connection"): 5.0,
    ("round trips", "connection"): 2.0,
}


def _env() -> dict[str, str]:
    from acp_fast.benchmark.runtime import child_env

    env = {**os.environ, **child_env()}  # the children import the acp_fast this script did
    env.pop("ACP_FAST_NO_EXTENSIONS", None)
    env.pop("ACP_N", None)
    return env


def _python_c(code: str) -> list[str]:
    """This interpreter running ``code`` without the working directory on ``sys.path``."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-c", code]
    return [sys.executable, "-c", "import sys;del sys.path[0];" + code]  # Python 3.10: no -P


def run_pair(mode: str, n: int, m: int, loop: str, warmup: int) -> dict[str, Any]:
    from acp_fast.benchmark.launch import REPORT_ENV, read_reports
    from acp_fast.benchmark.runtime import Process, RuntimeMismatch, check, launch_script

    dropin = str(PEERS / "dropin.py")

    def side(role: str, program: str) -> list[str]:
        if mode == "stock":  # the stock SDK never imports acp_fast (the launcher would)
            return [sys.executable, dropin, mode, str(PEERS / program)]
        return list(launch_script(role, dropin, mode, str(PEERS / program)))

    argv = [*side("client", "client.py"), "--n", str(n), "--m", str(m), "--rtt-method", "echo",
            "--warmup", str(warmup), "--loop", loop, "--", *side("agent", "agent.py"), "--loop", loop]
    kind = "sdk" if mode == "stock" else "acp_fast"
    fd, report = tempfile.mkstemp(prefix="acp-fast-bench-", suffix=".jsonl")
    os.close(fd)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env={**_env(), REPORT_ENV: report}, cwd=REPO,
                             timeout=900, check=False)
        reports = read_reports(report)
    finally:
        os.unlink(report)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{mode}: exit {out.returncode}\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    if not result.get("updatesOk") or result.get("agentExit") != 0:
        raise RuntimeError(f"{mode}: bad run {result}")
    try:  # both sides on the run's loop; the drop-in sides on the compiled twin of this acp_fast
        check(reports, (Process("client", kind), Process("agent", kind)), engine=None if mode == "stock" else "c",
              loop=loop, result=result)
    except RuntimeMismatch as exc:
        raise RuntimeError(f"{mode}: the processes did not run what this run measures: {exc}") from None
    return result


def import_seconds(code: str) -> tuple[float, float]:
    """(wall, CPU) seconds of a fresh interpreter running ``code`` (CPU: user + system of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(_python_c(code), env=_env(), cwd=REPO, check=True, timeout=120)
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
    from acp_fast.benchmark.runtime import PACKAGE_DIR

    subprocess.run([sys.executable, "-m", "compileall", "-q", PACKAGE_DIR], check=True, timeout=600,
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


#: ``"kind"`` of the JSON this script writes (older files have none)
KIND = "bench_sdk_dropin"
#: README labels of the modes
LABELS = {"stock": "stock SDK", "transport": "transport drop-in", "connection": "connection drop-in"}


def medians(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row of medians per mode (:data:`MODES` order)."""
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
    return rows


def goal_verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:data:`GOALS` judged on ``rows``: what, mode, goal, ratio (and the CPU or p50 ratio), met."""
    stock = rows[0]
    by_mode = {row["mode"]: row for row in rows}
    out = []
    for (what, mode), goal in GOALS.items():
        row = by_mode[mode]
        if what == "streaming":
            ratio = row["notificationsPerSec"] / stock["notificationsPerSec"]
            other = stock["streamCpuUsPerMsgBothSides"] / row["streamCpuUsPerMsgBothSides"]
            ok = ratio >= goal and other >= goal
        else:
            ratio = row["roundTripsPerSec"] / stock["roundTripsPerSec"]
            other = stock["p50RttUs"] / row["p50RttUs"]
            ok = ratio >= goal
        out.append({"what": what, "mode": mode, "goal": goal, "ratio": ratio, "other": other, "met": ok})
    return out


def _import_lines(doc: dict[str, Any], markdown: bool) -> list[str]:
    runs, import_ms = doc["importRunsCount"], doc["importMs"]
    bare_wall, bare_cpu = doc["bareSeconds"]["wall"], doc["bareSeconds"]["cpu"]
    head = (f"Import time (median of {runs} fresh interpreters, minus a bare start of "
            f"{bare_wall * 1000:.1f} ms wall / {bare_cpu * 1000:.1f} ms CPU):")
    stock_import = import_ms["stock: import acp"]
    if markdown:
        from acp_fast.benchmark.tables import MARKDOWN, markdown_table

        body = [[name, f"{ms['wall']:.1f}", f"{ms['cpu']:.1f}", f"{ms['wall'] / stock_import['wall']:.2f}×",
                 f"{ms['cpu'] / stock_import['cpu']:.2f}×"] for name, ms in import_ms.items()]
        return ["", head, "", markdown_table(body, ["", "wall ms", "CPU ms", "× stock wall", "× stock CPU"],
                                             ["left", "right", "right", "right", "right"], MARKDOWN)]
    lines = ["", head]
    for name, ms in import_ms.items():
        lines.append(f"  {name:<20} {ms['wall']:>8.1f} ms wall {ms['cpu']:>8.1f} ms CPU  "
                     f"({ms['wall'] / stock_import['wall']:.2f}x the stock wall, "
                     f"{ms['cpu'] / stock_import['cpu']:.2f}x the stock CPU)")
    return lines


def render(doc: dict[str, Any], markdown: bool = False) -> str:
    """The report this script prints, from its JSON document (:func:`build_doc`)."""
    load = doc["loadAverage"]
    cpus = doc["cpus"]
    lines: list[str] = []
    if "medians" not in doc:  # --imports-only
        lines.append(f"load average {load['before'][0]:.2f} -> {load['after'][0]:.2f} on {cpus} CPUs")
        return "\n".join(lines + _import_lines(doc, markdown))
    rows = doc["medians"]
    stock = rows[0]
    chunk = doc.get("chunk", "?")
    if markdown:
        from acp_fast.benchmark.tables import MARKDOWN, markdown_table

        command = doc.get("command")
        lines.append(f"SDK agent + SDK client, both switched, {doc['loop']}, N = {doc['n']:,} × {chunk} B streaming "
                     f"and {doc['m']:,} round trips, medians of {doc['rounds']}, load {load['before'][0]:.1f} → "
                     f"{load['after'][0]:.1f} on {cpus} CPUs" + (f", `{command}`" if command else "") + ":")
        lines.append("")
        body = []
        for row in rows:
            x = "" if row is stock else f" ({row['notificationsPerSec'] / stock['notificationsPerSec']:.2f}×)"
            xc = ("" if row is stock else
                  f" ({stock['streamCpuUsPerMsgBothSides'] / row['streamCpuUsPerMsgBothSides']:.2f}×)")
            xr = "" if row is stock else f" ({row['roundTripsPerSec'] / stock['roundTripsPerSec']:.2f}×)"
            body.append([LABELS.get(row["mode"], row["mode"]), f"{row['notificationsPerSec']:,.0f}{x}",
                         f"{row['streamClientCpuUsPerMsg']:.1f} + {row['streamAgentCpuUsPerMsg']:.1f}{xc}",
                         f"{row['roundTripsPerSec']:,.0f}{xr}", f"{row['p50RttUs']:,.0f}"])
        lines.append(markdown_table(body, ["", "notifications/s", "CPU µs/msg (client + agent)", "round trips/s",
                                           "p50 round trip µs"], ["left", "right", "right", "right", "right"],
                                    MARKDOWN))
        lines.append("")
        lines.append("Goals (issue 11), ratio vs stock (throughput; CPU per message both sides in brackets):")
        lines.append("")
        for v in goal_verdicts(rows):
            extra = f"({v['other']:.2f}×)" if v["what"] == "streaming" else f"(p50 latency {v['other']:.2f}×)"
            lines.append(f"- {v['what']}, {LABELS.get(v['mode'], v['mode'])}: goal ≥ {v['goal']}×: "
                         f"{v['ratio']:.2f}× {extra} {'met' if v['met'] else 'NOT met'}")
        return "\n".join(lines + _import_lines(doc, markdown))
    lines.append(f"\nPython SDK pairs (client.py + agent.py of peers/pysdk), loop {doc['loop']}, medians of "
                 f"{doc['rounds']} runs, n={doc['n']} chunks of {chunk} B, m={doc['m']} "
                 f"sequential echo round trips; load average {load['before'][0]:.2f} -> {load['after'][0]:.2f} on "
                 f"{cpus} CPUs\n")
    lines.append(f"{'mode':<12}{'notif/s':>10}{'x':>7}{'client µs/msg':>15}{'agent µs/msg':>14}{'both':>8}"
                 f"{'x cpu':>7}{'rt/s':>9}{'x':>7}{'p50 rt µs':>11}")
    for row in rows:
        lines.append(f"{row['mode']:<12}{row['notificationsPerSec']:>10.0f}"
                     f"{row['notificationsPerSec'] / stock['notificationsPerSec']:>7.2f}"
                     f"{row['streamClientCpuUsPerMsg']:>15.2f}{row['streamAgentCpuUsPerMsg']:>14.2f}"
                     f"{row['streamCpuUsPerMsgBothSides']:>8.2f}"
                     f"{stock['streamCpuUsPerMsgBothSides'] / row['streamCpuUsPerMsgBothSides']:>7.2f}"
                     f"{row['roundTripsPerSec']:>9.0f}{row['roundTripsPerSec'] / stock['roundTripsPerSec']:>7.2f}"
                     f"{row['p50RttUs']:>11.0f}")
    lines.append("\nGoals (issue 11), ratio vs stock (throughput; CPU per message both sides in brackets):")
    for v in goal_verdicts(rows):
        if v["what"] == "streaming":
            lines.append(f"  {v['what']:<12} {v['mode']:<11} goal >= {v['goal']}x: {v['ratio']:.2f}x "
                         f"({v['other']:.2f}x)  {'met' if v['met'] else 'NOT met'}")
        else:
            lines.append(f"  {v['what']:<12} {v['mode']:<11} goal >= {v['goal']}x: {v['ratio']:.2f}x "
                         f"(p50 latency {v['other']:.2f}x)  {'met' if v['met'] else 'NOT met'}")
    return "\n".join(lines + _import_lines(doc, markdown))


def build_doc(*, imports: dict[str, list[tuple[float, float]]], import_ms: dict[str, dict[str, float]],
              bare_wall: float, bare_cpu: float, load_before: Any, load_after: Any,
              runs: dict[str, list[dict[str, Any]]] | None = None, loop: str | None = None,
              rounds: int | None = None, n: int | None = None, m: int | None = None,
              command: str | None = None) -> dict[str, Any]:
    """The JSON document of a run (``runs`` None: ``--imports-only``): what :func:`render` prints
    and every measurement behind it."""
    doc: dict[str, Any] = {"kind": KIND}
    if runs is not None:
        rows = medians(runs)
        doc.update({"loop": loop, "rounds": rounds, "n": n, "m": m, "chunk": os.environ.get("ACP_CHUNK", "100"),
                    "runs": runs, "medians": rows,
                    "goals": [{"what": v["what"], "mode": v["mode"], "goal": v["goal"], "ratio": round(v["ratio"], 3),
                               "met": v["met"]} for v in goal_verdicts(rows)]})
    doc.update({"importMs": import_ms, "importRuns": {k: [list(x) for x in v] for k, v in imports.items()},
                "importRunsCount": len(imports["bare interpreter"]),
                "bareSeconds": {"wall": bare_wall, "cpu": bare_cpu},
                "loadAverage": {"before": list(load_before), "after": list(load_after)}, "cpus": os.cpu_count(),
                "command": command, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "python": sys.version.split()[0]})
    return doc


def _acp_fast_tables() -> Any:
    from acp_fast.benchmark import tables

    return tables


def read_doc(path: Path) -> dict[str, Any]:
    """A JSON document of this script (also one written before it had ``"kind"``), with what
    older files lack recomputed from their runs; raises ``BenchJSONError`` otherwise."""
    tables = _acp_fast_tables()
    what = "a bench_sdk_dropin.py JSON (its --json)"
    doc: dict[str, Any] = tables.load_json(path, what, ("importMs", "importRuns", "loadAverage", "cpus"))
    if doc.get("kind", KIND) != KIND:
        raise tables.BenchJSONError(f"{path}: not {what}: its \"kind\" is {doc['kind']!r}")
    try:
        imports = doc["importRuns"]
        doc.setdefault("importRunsCount", len(imports["bare interpreter"]))
        doc.setdefault("bareSeconds", {"wall": statistics.median(w for w, _ in imports["bare interpreter"]),
                                       "cpu": statistics.median(c for _, c in imports["bare interpreter"])})
        if "medians" in doc or "runs" in doc:
            for key in ("loop", "rounds", "n", "m", "runs"):
                if key not in doc:
                    raise KeyError(key)
            doc["medians"] = medians(doc["runs"])  # the stored ones are the same numbers
        render(doc)  # every key render needs is there
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as exc:
        raise tables.BenchJSONError(f"{path}: not {what}: {type(exc).__name__}: {exc}") from None
    return doc


def write_doc(path: Path, doc: dict[str, Any]) -> None:
    _acp_fast_tables().dump_json(path, doc)


def imports_only(args: argparse.Namespace) -> int:
    load_before = os.getloadavg()
    imports, import_ms, bare_wall, bare_cpu = measure_imports(args.import_runs)
    load_after = os.getloadavg()
    doc = build_doc(imports=imports, import_ms=import_ms, bare_wall=bare_wall, bare_cpu=bare_cpu,
                    load_before=load_before, load_after=load_after, command=_command())
    print(render(doc, args.markdown))
    if args.json is not None:
        write_doc(args.json, doc)
    return 0


def _command() -> str:
    return "python scripts/bench_sdk_dropin.py " + shlex.join(sys.argv[1:])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=20000, help="streamed notifications per run")
    ap.add_argument("--m", type=int, default=3000, help="sequential round trips per run")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    ap.add_argument("--import-runs", type=int, default=15)
    ap.add_argument("--imports-only", action="store_true", help="measure the import times only")
    ap.add_argument("--json", type=Path, default=None, help="also write every measurement as JSON")
    ap.add_argument("--from-json", type=Path, default=None, metavar="PATH",
                    help="run nothing: print the report of the run that wrote this --json file")
    ap.add_argument("--markdown", action="store_true", help="the report as GitHub markdown (tables, a list)")
    args = ap.parse_args(argv)
    if args.from_json is not None:
        tables = _acp_fast_tables()
        try:
            doc = read_doc(args.from_json)
        except tables.BenchJSONError as exc:
            print(f"bench_sdk_dropin.py: {exc}", file=sys.stderr)
            return 2
        print(render(doc, args.markdown))
        stored = doc.get("goals")
        if stored is not None and "medians" in doc:
            now = [{"what": v["what"], "mode": v["mode"], "goal": v["goal"], "ratio": round(v["ratio"], 3),
                    "met": v["met"]} for v in goal_verdicts(doc["medians"])]
            if now != stored:
                msg = (f"WARNING: the goals stored in {args.from_json} differ from the ones recomputed from its "
                       f"runs: the goal definitions changed since the run (the report shows the current ones)")
                print(msg)
                print(msg, file=sys.stderr)
        return 0
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
    doc = build_doc(imports=imports, import_ms=import_ms, bare_wall=bare_wall, bare_cpu=bare_cpu,
                    load_before=load_before, load_after=load_after, runs=runs, loop=args.loop,
                    rounds=args.rounds, n=args.n, m=args.m, command=_command())
    print(render(doc, args.markdown))
    if args.json is not None:
        write_doc(args.json, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
