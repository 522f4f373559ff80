"""Command line of the end-to-end benchmark: ``python -m bench.e2e --help``."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time

from .pairs import PAIRS, get_pairs, register_pair
from .progress import Progress
from .report import markdown, write_json
from .suite import STEPS, Settings, calibrate, load_text, now_iso, run_suite


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.e2e",
        description="End-to-end ACP benchmarks: client and agent as two processes over OS pipes.",
    )
    p.add_argument("--quick", action="store_true",
                   help="CI-sized run (fewer round trips and large frames; under a minute)")
    p.add_argument("--pairs", help="comma-separated pair names or 'all' (default: all registered pairs, "
                                   "with --quick only the quick ones: pysdk/pysdk, ts/ts; see --list)")
    p.add_argument("--list", action="store_true", help="list the registered pairs and exit")
    p.add_argument("--add-pair", nargs=3, action="append", metavar=("NAME", "CLIENT", "AGENT"), default=[],
                   help="register an extra pair from two shell-quoted commands (repeatable)")
    p.add_argument("--repeat", "-r", type=int, help="repetitions per measurement (median reported; ≥3 advised)")
    p.add_argument("--n", type=int, help="notifications in the streaming prompt")
    p.add_argument("--m", type=int, help="sequential round trips")
    p.add_argument("--inflight", type=int, help="requests kept in flight")
    p.add_argument("--inflight-m", type=int, help="requests of the in-flight phase")
    p.add_argument("--large-n", type=int, help="number of 1 MiB notifications")
    p.add_argument("--warmup", type=int, help="unmeasured chunks/echoes before measuring")
    p.add_argument("--timeout", type=float, help="seconds allowed per client invocation")
    p.add_argument("--json", metavar="PATH", help="also write rows and raw results as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name, client, agent in args.add_pair:
        register_pair(name, shlex.split(client), shlex.split(agent), replace=True)
    if args.list:
        for p in PAIRS.values():
            state = p.missing() or "ready"
            quick = " quick" if p.quick else ""
            print(f"{p.name:26} v{p.protocol}{quick}  {p.description or ''}  [{state}]")
            print(f"{'':26}      client: {shlex.join(p.client_cmd)}")
            print(f"{'':26}      agent:  {shlex.join(p.agent_cmd)}")
        return 0

    settings = Settings.quick() if args.quick else Settings()
    overrides = {
        "repeat": args.repeat, "n": args.n, "m": args.m, "inflight": args.inflight,
        "inflight_m": args.inflight_m, "large_n": args.large_n, "warmup": args.warmup,
        "timeout_s": args.timeout,
    }
    settings = dataclasses.replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    try:
        names = [s.strip() for s in args.pairs.split(",") if s.strip()] if args.pairs else None
        pairs = get_pairs(names, quick=args.quick)
    except KeyError as exc:
        print(f"bench.e2e: {exc.args[0]}", file=sys.stderr)
        return 2

    runnable = [p for p in pairs if p.missing() is None]
    progress = Progress(total=settings.repeat * len(runnable) * len(STEPS), enabled=not args.no_progress)
    for p in pairs:
        msg = p.missing()
        if msg:
            progress.note(f"{p.name}: {msg}")
    t0 = time.perf_counter()
    started = now_iso()
    cal0 = calibrate()
    rows, raw = run_suite(pairs, settings, on_start=progress.start, on_tick=progress.tick, on_done=progress.done)
    cal1 = calibrate()
    elapsed = time.perf_counter() - t0

    print(markdown(rows, settings))
    print(f"\n({'quick' if args.quick else 'full'} run, {elapsed:.0f} s; load average {load_text()}; "
          f"CPU calibration {cal0:.0f}/{cal1:.0f} ms before/after, see bench/e2e/README.md)")
    if args.json:
        write_json(args.json, rows, raw, settings,
                   {"started": started, "elapsed_s": round(elapsed, 1), "quick": args.quick,
                    "calibration_ms": [round(cal0, 1), round(cal1, 1)]})
        print(f"JSON written to {args.json}")
    failed = any(r.errors and not r.runs for r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
