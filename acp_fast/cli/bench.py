"""``acp-fast bench``: end-to-end benchmarks of acp_fast against the official ACP SDKs.

Two modes:

* **suite** (default): the workloads of :mod:`acp_fast.benchmark.suite` for pairs of client
  and agent processes side by side in one run: acp_fast compiled ↔ compiled, pure ↔ pure
  (``ACP_FAST_NO_EXTENSIONS=1`` on both processes), the official Python SDK ↔ itself, the
  TypeScript SDK ↔ itself (needs node and ``peers/ts/node_modules``) and the mixed pairs
  acp_fast client ← TS agent and TS client ← acp_fast agent. Medians of ≥ 3 runs, a live
  progress display on stderr, a markdown table with ratios against the Python SDK pair and
  the PASS/MISS table of the targets on stdout; ``--json PATH``, ``--png PATH``.
* **probe** (``--agent 'CMD'``): any ACP agent measured the way a client sees it (start-up
  to ``initialize`` response, ``session/new``, time to first update, updates/s, turn time).

Also runnable as ``python -m acp_fast.cli.bench``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "main", "run"]

_DESCRIPTION = __doc__.split("\n\n")[0] if __doc__ else ""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("suite mode")
    g.add_argument("--quick", action="store_true",
                   help="short run (under a minute): N=5,000, fewer round trips, one 1 MiB repetition")
    g.add_argument("--pairs", help="comma-separated pair names, 'default' or 'all' (default: the six "
                                   "default pairs; see --list)")
    g.add_argument("--list", action="store_true", help="list the registered pairs and exit")
    g.add_argument("--add-pair", nargs=3, action="append", metavar=("NAME", "CLIENT", "AGENT"), default=[],
                   help="register an extra pair from two shell-quoted commands (repeatable)")
    g.add_argument("--peers", metavar="DIR", help="folder of the official-SDK peers (default: peers/ of the "
                                                  "source tree or $ACP_FAST_PEERS)")
    g.add_argument("--acp-agent", metavar="CMD",
                   help="acp_fast agent command for the acp_fast pairs (default: acp-fast testy)")
    g.add_argument("--repeat", "-r", type=int, help="repetitions (median reported; default 3)")
    g.add_argument("--n", type=int, help="notifications in the streaming prompt")
    g.add_argument("--m", type=int, help="sequential round trips")
    g.add_argument("--inflight", type=int, help="requests kept in flight")
    g.add_argument("--inflight-m", type=int, help="requests of the in-flight phase")
    g.add_argument("--large-n", type=int, help="number of 1 MiB notifications")
    g.add_argument("--warmup", type=int, help="unmeasured chunks/echoes before measuring")
    g.add_argument("--png", metavar="PATH", help="also draw a bar chart (needs matplotlib)")
    g.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    g = p.add_argument_group("probe mode")
    g.add_argument("--agent", metavar="CMD", help="measure this ACP agent command instead of the suite")
    g.add_argument("--prompt", default="stream 1000 chunks", help="prompt text of the turn (default: %(default)r)")
    g.add_argument("--runs", type=int, default=3, help="runs (default 3; medians reported)")
    g.add_argument("--protocol", choices=("auto", "1", "2"), default="auto",
                   help="auto: v2 first, v1 if the agent answers 1 (Client.protocol_connector())")
    g = p.add_argument_group("both")
    g.add_argument("--timeout", type=float, help="seconds allowed per client invocation / probe run")
    g.add_argument("--json", metavar="PATH", help="also write the results as JSON")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Registers ``bench`` on the ``acp-fast`` subparsers (called by ``acp_fast.cli.main``)."""
    p = subparsers.add_parser("bench", help="end-to-end benchmarks (acp_fast vs the official SDKs, or any agent)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(p)
    p.set_defaults(func=run)
    return p  # type: ignore[no-any-return]


def _err(msg: str) -> None:
    sys.stderr.write(f"acp-fast bench: {msg}\n")
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    """Runs the parsed command; returns the exit status."""
    if args.agent:
        return _run_probe(args)
    return _run_suite(args)


def _run_probe(args: argparse.Namespace) -> int:
    from acp_fast.benchmark.probe import probe, probe_markdown

    cmd = shlex.split(args.agent)
    if not cmd:
        _err("--agent needs a command")
        return 2
    progress = not args.no_progress

    def on_run(i: int, rec: dict[str, Any] | None, error: str | None) -> None:
        if not progress:
            return
        if rec is None:
            _err(f"[{i}/{args.runs}] FAILED: {error}")
        else:
            sys.stderr.write(f"[{i}/{args.runs}] v{rec['protocol']} start→init {rec['startup_ms']:.0f} ms, "
                             f"{rec['updates']} updates in {rec['turn_ms']:.0f} ms, stop {rec['stop_reason']}\n")
            sys.stderr.flush()

    result = probe(cmd, args.prompt, runs=max(1, args.runs), timeout_s=args.timeout or 60.0,
                   protocol=args.protocol, on_run=on_run)
    print(probe_markdown(result))
    if args.json:
        _write(args.json, {"mode": "agent", **result.to_json()})
        print(f"JSON written to {args.json}")
    return 0 if result.runs else 1


def _write(path: str, doc: dict[str, Any]) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _run_suite(args: argparse.Namespace) -> int:
    import os

    from acp_fast.benchmark import pairs as pairs_mod
    from acp_fast.benchmark.progress import Progress
    from acp_fast.benchmark.report import markdown, targets_markdown, write_json
    from acp_fast.benchmark.suite import (
        STEPS,
        Settings,
        calibrate,
        load_text,
        now_iso,
        run_suite,
    )

    if args.acp_agent:
        os.environ["ACP_FAST_BENCH_AGENT"] = args.acp_agent
    pairs_mod.configure(args.peers)  # picks up the peers folder and the acp_fast agent now
    for name, client, agent in args.add_pair:
        pairs_mod.register_pair(name, shlex.split(client), shlex.split(agent), replace=True)
    if args.list:
        for p in pairs_mod.PAIRS.values():
            state = p.missing() or "ready"
            default = " default" if p.name in pairs_mod.DEFAULT_PAIRS else ""
            print(f"{p.name:28} v{p.protocol}{default}  {p.description or ''}  [{state}]")
            print(f"{'':28}      client: {shlex.join(p.client_cmd)}")
            print(f"{'':28}      agent:  {shlex.join(p.agent_cmd)}")
        return 0

    settings = Settings.quick() if args.quick else Settings()
    overrides = {
        "repeat": args.repeat, "n": args.n, "m": args.m, "inflight": args.inflight,
        "inflight_m": args.inflight_m, "large_n": args.large_n, "warmup": args.warmup,
        "timeout_s": args.timeout,
    }
    settings = dataclasses.replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    if settings.large_repeat is not None and args.repeat is not None:
        settings = dataclasses.replace(settings, large_repeat=min(settings.large_repeat, settings.repeat))
    spec = [s.strip() for s in (args.pairs or "default").split(",") if s.strip()]
    names: list[str] = []
    for s in spec:
        names.extend(pairs_mod.DEFAULT_PAIRS if s == "default" else [s])
    try:
        selected = pairs_mod.get_pairs(names)
    except KeyError as exc:
        _err(str(exc.args[0]))
        return 2

    runnable = [p for p in selected if p.missing() is None]
    large_reps = settings.repeat if settings.large_repeat is None else min(settings.large_repeat, settings.repeat)
    total = len(runnable) * (settings.repeat * (len(STEPS) - 1) + large_reps)
    progress = Progress(total=total, enabled=not args.no_progress)
    kind, agent_cmd = pairs_mod.acp_fast_agent()
    agent_note = {"testy": "acp-fast testy", "fallback": "fallback agent (acp-fast testy not available)",
                  "override": "--acp-agent"}[kind]
    progress.note(f"acp_fast agent: {agent_note}: {shlex.join(agent_cmd)}")
    for p in selected:
        msg = p.missing()
        if msg:
            # always shown, even with --no-progress: a skipped peer must never go unnoticed
            sys.stderr.write(f"{p.name}: {msg}\n")
    t0 = time.perf_counter()
    started = now_iso()
    load0 = load_text()
    cal0 = calibrate()
    rows, raw = run_suite(selected, settings, on_start=progress.start, on_tick=progress.tick,
                          on_done=progress.done)
    cal1 = calibrate()
    elapsed = time.perf_counter() - t0
    load1 = load_text()

    print(markdown(rows, settings, baseline=pairs_mod.BASELINE))
    print()
    print("Targets (medians of this run):")
    print()
    print(targets_markdown(rows))
    print(f"\n({'quick' if args.quick else 'full'} run, {elapsed:.0f} s; acp_fast agent: {agent_note}; "
          f"load average {load0} before, {load1} after; CPU calibration {cal0:.0f}/{cal1:.0f} ms "
          f"before/after, ~180 ms on a quiet machine)")
    if args.quick:
        print("(quick: small N and little warm-up, so JIT peers (node) run cold: ratios are indicative; "
              "judge the targets on a full run)")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("(PYTHONDONTWRITEBYTECODE is set: Python processes whose sources have no cached bytecode "
              "compile them at every start, which inflates (f) for an uninstalled acp_fast)")
    meta = {"started": started, "elapsed_s": round(elapsed, 1), "quick": args.quick,
            "calibration_ms": [round(cal0, 1), round(cal1, 1)], "loadavg": [load0, load1],
            "acp_fast_agent": {"kind": kind, "argv": list(agent_cmd)}, "baseline": pairs_mod.BASELINE}
    if args.json:
        write_json(args.json, rows, raw, settings, meta)
        print(f"JSON written to {args.json}")
    if args.png:
        from acp_fast.benchmark.chart import MissingMatplotlib, write_png

        try:
            write_png(args.png, rows, title=f"acp-fast bench ({'quick' if args.quick else 'full'}, "
                                             f"medians of {settings.repeat}; load {load0})")
        except MissingMatplotlib as exc:
            print(f"chart skipped: {exc}")
            _err(f"--png: chart skipped: {exc}")
        else:
            print(f"chart written to {args.png}")
    failed = any(r.errors and not r.runs for r in rows)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m acp_fast.cli.bench [options]``."""
    p = argparse.ArgumentParser(prog="acp-fast bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
