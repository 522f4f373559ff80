"""`acp-fast bench`: end-to-end benchmarks of acp_fast against the official ACP SDKs.

Two modes:

* **suite** (default): the workloads of [`acp_fast.benchmark.suite`][acp_fast.benchmark.suite] for pairs of client
  and agent processes side by side in one run, on asyncio and on uvloop (`--loops`; both
  Python sides of a pair on the same loop), client and agent pinned to different CPUs:
  acp_fast compiled ↔ compiled and pure ↔ pure (the agent is `acp-fast testy` streaming
  through the public API), the official Python SDK ↔ itself, the TypeScript SDK ↔ itself
  (needs node and `peers/ts/node_modules`), the cross-fed pairs (acp_fast client fed by
  each SDK's agent, each SDK's client fed by the acp_fast agent), a raw-ceiling row and the
  floor row (no protocol library: a pre-encoded writer, an asyncio reader decoding each line
  with orjson; the reference of the "fraction of the floor" goals).
  Medians of 3 runs (`--runs`), CPU µs per message per side, load average and a CPU
  calibration before and after (with a warning when the machine was busy), the results
  table and the PASS/MISS table of the goals on stdout; `--json PATH`, `--png PATH`.
  Needs the `bench` extra (psutil, tabulate, tqdm).
* **from JSON** (`--from-json PATH`): prints the tables and notes of a saved run again from
  the `--json` it wrote, without running anything (and redraws `--png`); with
  `--markdown` (also for a run) the tables come out as GitHub markdown with aligned columns,
  ready to paste.
* **probe** (`--agent 'CMD'`): any ACP agent measured the way a client sees it (start-up
  to `initialize` response, `session/new`, time to first update, updates/s, turn time).

Also runnable as `python -m acp_fast.cli.bench`.
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
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from acp_fast.benchmark.suite import Measurement, RunConfig

    from ..jsontypes import Json, JsonObject
    from . import Subparsers

__all__ = ["AGENT_NOTES", "add_parser", "main", "report_text", "run"]

_DESCRIPTION = __doc__.split("\n\n")[0] if __doc__ else ""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("suite mode")
    g.add_argument("--quick", action="store_true",
                   help="short run (a few minutes): one repetition, N=3,000, fewer round trips, 3 × 1 MiB")
    g.add_argument("--pairs", help="comma-separated pair names, 'default' or 'all' (default: the "
                                   "default pairs; see --list)")
    g.add_argument("--list", action="store_true", help="list the registered pairs and exit")
    g.add_argument("--add-pair", nargs=3, action="append", metavar=("NAME", "CLIENT", "AGENT"), default=[],
                   help="register an extra pair from two shell-quoted commands (repeatable)")
    g.add_argument("--peers", metavar="DIR", help="the peers/ folder of the acp-fast source tree (a checkout or the "
                                                  "sdist; the wheel has no peers), with the TypeScript SDK installed "
                                                  "by `npm ci` in DIR/ts (default: $ACP_FAST_PEERS, else peers/ of the "
                                                  "source tree or of the working directory)")
    g.add_argument("--acp-agent", metavar="CMD",
                   help="acp_fast agent command for the acp_fast pairs (default: acp-fast testy)")
    g.add_argument("--repeat", "-r", type=int, help="repetitions (median reported; default 3, --quick 1; "
                                                   "--runs is the same)")
    g.add_argument("--loops", help="comma-separated event loops of the Python sides (default: asyncio,uvloop; "
                                   "uvloop only when it imports)")
    g.add_argument("--no-pin", action="store_true", help="do not pin client and agent to different CPUs")
    g.add_argument("--n", type=int, help="notifications in the streaming prompt")
    g.add_argument("--m", type=int, help="sequential round trips")
    g.add_argument("--inflight", type=int, help="requests kept in flight")
    g.add_argument("--inflight-m", type=int, help="requests of the in-flight phase")
    g.add_argument("--large-n", type=int, help="number of 1 MiB notifications")
    g.add_argument("--warmup", type=int, help="unmeasured chunks/echoes before measuring")
    g.add_argument("--png", metavar="PATH", help="also draw a bar chart (needs matplotlib)")
    g.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    g = p.add_argument_group("remote rows")
    g.add_argument("--remote", action="store_true",
                   help="the remote rows instead of the suite: WebSocket and Streamable HTTP servers and clients "
                        "(acp_fast, the Python SDK, the TS SDK), the gateway, 1,000 connections "
                        "(acp_fast.benchmark.remote; uses --quick, --repeat/--runs, --loops, --n, --m, --peers, --json, "
                        "--png)")
    g.add_argument("--servers", metavar="S,S",
                   help="with --remote: the ASGI servers acp_fast's rows run on, comma-separated, the first the "
                        "goals' (uvicorn, hypercorn, granian; default: acp-fast serve's default)")
    g = p.add_argument_group("probe mode")
    g.add_argument("--agent", metavar="CMD|URL",
                   help="measure this ACP agent command (or remote agent: ws(s):// or http(s):// URL) instead of the suite")
    g.add_argument("--prompt", default="stream 1000 chunks", help="prompt text of the turn (default: %(default)r)")
    g.add_argument("--runs", type=int, default=None,
                   help="runs (default 3; medians reported); in suite mode the same as --repeat")
    g.add_argument("--protocol", choices=("auto", "1", "2"), default="auto",
                   help="auto: v2 first, v1 if the agent answers 1 (Client.protocol_connector())")
    g = p.add_argument_group("both")
    g.add_argument("--timeout", type=float, help="seconds allowed per client invocation / probe run")
    g.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    g = p.add_argument_group("from a saved run")
    g.add_argument("--from-json", metavar="PATH",
                   help="run nothing: print the tables of the suite run (or --remote run) that wrote this --json "
                        "file again (with --png: redraw its chart)")
    g.add_argument("--markdown", action="store_true",
                   help="tables as GitHub markdown with alignment colons (tabulate 'pipe'), notes as a list")


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Registers `bench` on the `acp-fast` subparsers (called by `acp_fast.cli.main`)."""
    p = subparsers.add_parser("bench", help="end-to-end benchmarks (acp_fast vs the official SDKs, or any agent)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(p)
    p.set_defaults(func=run)
    return p


def _err(msg: str) -> None:
    sys.stderr.write(f"acp-fast bench: {msg}\n")
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    """Runs the parsed command; returns the exit status."""
    if getattr(args, "from_json", None):
        return _run_from_json(args)
    if args.agent:
        return _run_probe(args)
    if getattr(args, "remote", False):
        return _run_remote(args)
    return _run_suite(args)


def _run_remote(args: argparse.Namespace) -> int:
    from acp_fast.benchmark.remote import main as remote_main

    argv: list[str] = ["--quick"] if args.quick else []
    rounds = args.repeat or args.runs
    for flag, value in (("--rounds", rounds), ("--n", args.n), ("--m", args.m), ("--loops", args.loops),
                        ("--servers", args.servers), ("--peers", args.peers), ("--json", args.json),
                        ("--png", args.png)):
        if value is not None:
            argv += [flag, str(value)]
    return remote_main(argv)


def _run_probe(args: argparse.Namespace) -> int:
    from acp_fast.benchmark.probe import probe, probe_markdown

    cmd = shlex.split(args.agent)
    if not cmd:
        _err("--agent needs a command")
        return 2
    progress = not args.no_progress

    def on_run(i: int, rec: JsonObject | None, error: str | None) -> None:
        if not progress:
            return
        if rec is None:
            _err(f"[{i}/{runs}] FAILED: {error}")
        else:
            sys.stderr.write(f"[{i}/{runs}] v{rec['protocol']} start→init {rec['startup_ms']:.0f} ms, "
                             f"{rec['updates']} updates in {rec['turn_ms']:.0f} ms, stop {rec['stop_reason']}\n")
            sys.stderr.flush()

    runs = args.runs or 3
    result = probe(cmd, args.prompt, runs=max(1, runs), timeout_s=args.timeout or 60.0,
                   protocol=args.protocol, on_run=on_run)
    print(probe_markdown(result))
    if args.json:
        _write(args.json, {"mode": "agent", **result.to_json()})
        print(f"JSON written to {args.json}")
    return 0 if result.runs else 1


def _write(path: str, doc: JsonObject) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


#: what the suite needs beyond the core package (the ``bench`` extra)
BENCH_EXTRA = ("psutil", "tabulate", "tqdm")


def missing_extra() -> list[str]:
    """The modules of the `bench` extra that do not import."""
    import importlib.util

    return [m for m in BENCH_EXTRA if importlib.util.find_spec(m) is None]


def _loops(spec: str | None) -> tuple[list[str], list[str]]:
    """`(loops, notes)` from `--loops` (default: asyncio and, when it imports, uvloop)."""
    from ..transport.loop import LOOP_CHOICES as LOOPS
    from ..transport.loop import available_loops

    have = available_loops()
    if spec is None:
        return have, ([] if "uvloop" in have else ["uvloop does not import: asyncio rows only "
                                                      "(pip install uvloop for the uvloop rows)"])
    loops = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [x for x in loops if x not in LOOPS or x == "auto"]
    if bad or not loops:
        raise ValueError(f"--loops: expected a comma-separated subset of asyncio,uvloop, got {spec!r}")
    notes = [f"{x} does not import: its rows are skipped" for x in loops if x not in have]
    return [x for x in loops if x in have], notes


def _run_suite(args: argparse.Namespace) -> int:
    import os

    missing = missing_extra()
    if missing:
        _err(f"the suite needs the bench extra, missing: {', '.join(missing)}. "
             f"Install it with: pip install 'acp-fast[bench]'  (or: pip install {' '.join(missing)})")
        return 2

    from acp_fast.benchmark import machine
    from acp_fast.benchmark import pairs as pairs_mod
    from acp_fast.benchmark.bytecode import bench_folders, ensure_bytecode
    from acp_fast.benchmark.progress import Progress
    from acp_fast.benchmark.runner import pin_plan
    from acp_fast.benchmark.suite import STEPS, RunConfig, run_pairs
    from acp_fast.benchmark.tables import MARKDOWN, TABLEFMT, portable_paths, write_json

    if args.acp_agent:
        os.environ["ACP_FAST_BENCH_AGENT"] = args.acp_agent
    pairs_mod.configure(args.peers)  # picks up the peers folder and the acp_fast agent now
    for name, client, agent in args.add_pair:
        pairs_mod.register_pair(name, shlex.split(client), shlex.split(agent), replace=True)
    if args.list:
        for p in pairs_mod.PAIRS.values():
            state = p.missing() or "ready"
            default = " default" if p.name in pairs_mod.DEFAULT_PAIRS else ""
            print(f"{p.name:30} v{p.protocol}{default}  {p.description or ''}  [{state}]")
            print(f"{'':30}      client: {shlex.join(p.client_cmd)}")
            print(f"{'':30}      agent:  {shlex.join(p.agent_cmd)}")
        return 0
    try:
        loops, loop_notes = _loops(args.loops)
    except ValueError as exc:
        _err(str(exc))
        return 2
    if not loops:
        _err("no event loop to run on")
        return 2

    pin = None if args.no_pin else pin_plan()
    config = RunConfig.quick() if args.quick else RunConfig()
    repeat = args.repeat if args.repeat is not None else args.runs
    overrides = {
        "repeat": repeat, "n": args.n, "m": args.m, "inflight": args.inflight,
        "inflight_m": args.inflight_m, "large_n": args.large_n, "warmup": args.warmup,
        "timeout_s": args.timeout,
    }
    config = dataclasses.replace(config, loops=tuple(loops), pin=pin,
                                 **{k: v for k, v in overrides.items() if v is not None})
    if config.large_repeat is not None and repeat is not None:
        config = dataclasses.replace(config, large_repeat=min(config.large_repeat, config.repeat))
    spec = [s.strip() for s in (args.pairs or "default").split(",") if s.strip()]
    names: list[str] = []
    for s in spec:
        names.extend(pairs_mod.DEFAULT_PAIRS if s == "default" else [s])
    try:
        selected = pairs_mod.get_pairs(names)
    except KeyError as exc:
        _err(str(exc.args[0]))
        return 2

    variants = [v for p in selected if p.missing() is None for v in p.variants(config.loops)]
    large_reps = config.repeat if config.large_repeat is None else min(config.large_repeat, config.repeat)
    total = len(variants) * (config.repeat * (len(STEPS) - 1) + large_reps)
    progress = Progress(total=total, enabled=not args.no_progress)
    kind, agent_cmd = pairs_mod.acp_fast_agent()
    agent_note = AGENT_NOTES[kind]
    for note in loop_notes:
        _err(note)
    for p in selected:
        msg = p.missing()
        if msg:
            # always shown, even with --no-progress: a skipped peer must never go unnoticed
            sys.stderr.write(f"{p.name}: {msg}\n")
    bytecode = ensure_bytecode(bench_folders())  # the start-up rows measure a start, not the compiler
    if bytecode.compiled:
        progress.note(f"compiled the bytecode of {bytecode.compiled} Python files the processes import "
                      "(missing or stale)")
    t0 = time.perf_counter()
    before = machine.snapshot()
    progress.note(f"acp_fast agent: {agent_note}: {shlex.join(agent_cmd)}; loops {', '.join(config.loops)}; "
                  f"load {before.load_text()}; calibration {before.calibration_ms:.0f} ms")
    rows, raw = run_pairs(selected, config, on_start=progress.start, on_tick=progress.tick, on_done=progress.done)
    progress.close()
    after = machine.snapshot()
    elapsed = time.perf_counter() - t0
    warnings = machine.busy_warnings(before, after)

    command = "acp-fast bench " + shlex.join(sys.argv[2:] if len(sys.argv) > 1 and sys.argv[1] == "bench"
                                             else sys.argv[1:])
    meta = {"command": command, "elapsed_s": elapsed, "quick": args.quick,
            "before": before.to_json(), "after": after.to_json(), "busy": warnings,
            "acp_fast_agent": {"kind": kind, "argv": list(agent_cmd)}, "baseline": pairs_mod.BASELINE,
            "cpus_allowed": machine.cpu_count(), "harness": _harness(),
            "sdk_tracing": machine.sdk_tracing_note(),
            "bytecode": {"compiled": bytecode.compiled, "uncached": portable_paths(bytecode.uncached)}}
    print(report_text(rows, config, meta, tablefmt=MARKDOWN if args.markdown else TABLEFMT))
    for w in warnings:
        _err(f"warning: machine busy: {w}")
    if meta["sdk_tracing"]:
        _err(f"warning: {meta['sdk_tracing']}")
    if args.json:
        write_json(args.json, rows, raw, config, meta)
        print(f"JSON written to {args.json}")
    if args.png:
        from acp_fast.benchmark.chart import MissingMatplotlib, write_png

        try:
            write_png(args.png, rows, title=f"acp-fast bench ({'quick' if args.quick else 'full'}, "
                                             f"medians of {config.repeat}; load {before.load_text()})")
        except MissingMatplotlib as exc:
            print(f"chart skipped: {exc}")
            _err(f"--png: chart skipped: {exc}")
        else:
            print(f"chart written to {args.png}")
    failed = any(r.errors and not r.runs for r in rows)
    return 1 if failed else 0


def _harness() -> JsonObject:
    """What the harness runs (every process of a row must run the same: the `ran` column)."""
    from acp_fast import IMPLEMENTATION
    from acp_fast.benchmark import registry
    from acp_fast.benchmark.runtime import PACKAGE_DIR

    from acp_fast.benchmark.tables import portable_paths

    # as saved in the JSON, so that --from-json prints the same
    return cast("JsonObject", portable_paths({"acp_fast": PACKAGE_DIR, "engine": IMPLEMENTATION,
                                              "python": sys.executable,
                                              "peers": str(registry.PEERS) if registry.PEERS_FROM else None,
                                              "peers_from": registry.PEERS_FROM}))


def _path(p: Json) -> str:
    text = str(p)
    return text if text.startswith(("/", "~")) or text == "python" else f"./{text}"


def _harness_note(harness: Json) -> str | None:
    if not isinstance(harness, dict):
        return None  # a run saved before the harness was recorded
    peers = (f"{_path(harness.get('peers'))} (from {harness.get('peers_from')})" if harness.get("peers")
             else "none found (pass --peers DIR)")
    return (f"Harness: {_path(harness.get('python'))}, acp_fast from {_path(harness.get('acp_fast'))} "
            f"(engine {harness.get('engine')}); every Python process of a row runs that interpreter and that "
            f"package, whatever the working directory; peers: {peers}")


def _bytecode_note(bytecode: Json) -> str | None:
    if not isinstance(bytecode, dict) or not bytecode.get("uncached"):
        return None  # all cached, or a run saved before the bytecode was recorded
    files = [str(f) for f in cast("list[Json]", bytecode["uncached"])]
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return (f"WARNING: {len(files)} Python files have no bytecode cache and could not be given one ({shown}): "
            "a process importing them compiles them at each start, inside its start-up ms")


#: the ``acp_fast agent:`` note of the report, per kind of :func:`~acp_fast.benchmark.pairs.acp_fast_agent`
AGENT_NOTES = {"testy": "acp-fast testy (public API: cx.send_session_update per chunk)", "override": "--acp-agent"}

GOALS_HEADING = ("Goals (medians of this run; public-API pairs only, each against the reference on the same loop; "
                 "ratios compared unrounded, shown with at least 2 decimals):")


def _snapshot_text(snap: Json) -> tuple[str, str, str]:
    """(load text, calibration ms, time stamp) of a snapshot's JSON (`?` for what it lacks)."""
    from acp_fast.benchmark.machine import Snapshot

    if not isinstance(snap, dict):
        return "?", "?", "?"
    load = snap.get("load")
    try:
        text = Snapshot(None if load is None else tuple(load), 0.0, "").load_text()
    except (TypeError, ValueError):
        text = "?"
    cal = snap.get("calibration_ms")
    return text, "?" if not isinstance(cal, (int, float)) else f"{cal:.0f}", str(snap.get("at", "?"))


def report_text(rows: Sequence[Measurement], config: RunConfig, meta: JsonObject, *,
                tablefmt: str | None = None) -> str:
    """What a suite run prints on stdout before "JSON written to": the results (and chain)
    table, the goals table and the notes from `meta` (command, run, agent, load, warnings).
    The same text whether `rows`, `config` and `meta` come from the run or from its JSON."""
    from acp_fast.benchmark.tables import MARKDOWN, TABLEFMT, goals_table, results_table

    fmt = tablefmt or TABLEFMT
    md = fmt == MARKDOWN
    before, after = meta.get("before"), meta.get("after")
    load_before, cal_before, started = _snapshot_text(before)
    load_after, cal_after, _ = _snapshot_text(after)
    quick = bool(meta.get("quick"))
    elapsed = meta.get("elapsed_s")
    cpus = meta.get("cpus_allowed", meta.get("cpus", "?"))
    pin = config.pin
    agent = meta.get("acp_fast_agent")
    kind = agent.get("kind") if isinstance(agent, dict) else None
    command = str(meta.get("command", "?"))
    notes = [
        f"Command: `{command}`" if md else f"Command: {command}",
        f"Run: {'quick' if quick else 'full'}, "
        f"{f'{elapsed:.0f}' if isinstance(elapsed, (int, float)) else '?'} s, started {started}; loops: "
        f"{', '.join(config.loops)}; {cpus} CPUs"
        + (f", client on CPU {pin[0]} and agent on CPU {pin[1]}" if pin else ", not pinned"),
        f"acp_fast agent: {AGENT_NOTES.get(str(kind), str(kind or '?'))}",
        *filter(None, [_harness_note(meta.get("harness"))]),
        f"Load average (1/5/15 min): {load_before} before, {load_after} after; "
        f"CPU calibration {cal_before} ms before, {cal_after} ms after",
    ]
    for w in meta.get("busy") or []:
        notes.append(f"WARNING: machine busy: {w}; throughput ratios are unreliable, compare CPU µs/msg")
    if meta.get("sdk_tracing"):
        notes.append(f"WARNING: {meta['sdk_tracing']}")
    notes.extend(filter(None, [_bytecode_note(meta.get("bytecode"))]))
    if quick:
        notes.append("(quick: one repetition, small N and little warm-up, so JIT peers (node) run cold: "
                     "ratios are indicative; judge the goals on a full run)")
    return "\n".join([results_table(rows, config, tablefmt=fmt), "", GOALS_HEADING, "",
                      goals_table(rows, config.loops, tablefmt=fmt), "",
                      *(f"- {n}" if md else n for n in notes)])


def _run_from_json(args: argparse.Namespace) -> int:
    import importlib.util

    from acp_fast.benchmark.tables import MARKDOWN, TABLEFMT, BenchJSONError, goals_changed, read_json

    if importlib.util.find_spec("tabulate") is None:
        _err("--from-json needs tabulate (part of the bench extra): pip install tabulate")
        return 2
    if _is_remote_json(args.from_json):
        return _remote_from_json(args)
    try:
        doc = read_json(args.from_json)
    except BenchJSONError as exc:
        _err(str(exc))
        return 2
    print(report_text(doc.rows, doc.config, doc.meta, tablefmt=MARKDOWN if args.markdown else TABLEFMT))
    if goals_changed(doc.goals, doc.rows, doc.config.loops):
        msg = (f"the goals stored in {args.from_json} differ from the ones recomputed from its rows: the goal "
               f"definitions changed since the run (the table above shows the current definitions)")
        print(f"{'- ' if args.markdown else ''}WARNING: {msg}")
        _err(f"warning: {msg}")
    if args.png:
        from acp_fast.benchmark.chart import MissingMatplotlib, write_png

        load, _, _ = _snapshot_text(doc.meta.get("before"))
        try:
            write_png(args.png, doc.rows, title=f"acp-fast bench ({'quick' if doc.meta.get('quick') else 'full'}, "
                                                 f"medians of {doc.config.repeat}; load {load})")
        except MissingMatplotlib as exc:
            _err(f"--png: chart skipped: {exc}")
            return 1
        print(f"chart written to {args.png}")
    return 0


def _is_remote_json(path: str) -> bool:
    """Whether `path` holds the JSON of a `--remote` run (its rows name a transport)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    rows = doc.get("rows") if isinstance(doc, dict) else None
    return "verdicts" in doc and isinstance(rows, list) and bool(rows) and isinstance(rows[0], dict) \
        and "transport" in rows[0]


def _remote_from_json(args: argparse.Namespace) -> int:
    from acp_fast.benchmark.chart import MissingMatplotlib
    from acp_fast.benchmark.remote import read_json, render, write_chart
    from acp_fast.benchmark.tables import BenchJSONError

    try:
        rows, cfg, load = read_json(args.from_json)
    except BenchJSONError as exc:
        _err(str(exc))
        return 2
    print(render(rows, cfg))
    if args.png:
        try:
            write_chart(args.png, rows, cfg, load)
        except MissingMatplotlib as exc:
            _err(f"--png: chart skipped: {exc}")
            return 1
        print(f"chart written to {args.png}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m acp_fast.cli.bench [options]`."""
    p = argparse.ArgumentParser(prog="acp-fast bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
