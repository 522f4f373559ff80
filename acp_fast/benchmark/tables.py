"""Rendering of a run: the results table, the goals table (`tabulate`) and the JSON document.

The JSON a run writes ([`write_json`][acp_fast.benchmark.tables.write_json]) is read back by [`read_json`][acp_fast.benchmark.tables.read_json], so the tables can
be printed again from it (`acp-fast bench --from-json PATH`); [`dump_json`][acp_fast.benchmark.tables.dump_json],
[`load_json`][acp_fast.benchmark.tables.load_json] and [`markdown_table`][acp_fast.benchmark.tables.markdown_table] are shared with the other benchmark scripts of the
source tree (`bench/report.py`, `scripts/bench_sdk_dropin.py`).

Tables come out in tabulate's `"github"` format by default (`TABLEFMT`); pass
`tablefmt="pipe"` (`MARKDOWN`) for markdown with alignment colons, as pasted in the README.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..jsontypes import Json, JsonObject
from .pairs import CEILING, FLOOR, PAIRS
from .suite import Measurement, RunConfig
from .targets import verdicts

__all__ = ["CHAIN_COLUMNS", "COLUMNS", "MARKDOWN", "RAN_NOTE", "TABLEFMT", "BenchJSON", "BenchJSONError",
           "chains_table", "dump_json", "format_value", "goals_changed", "goals_table", "load_json", "markdown_table",
           "portable_paths", "read_json", "results_table", "write_json"]

#: tabulate format of the tables as a run prints them
TABLEFMT = "github"
#: tabulate format of ``--markdown``: GitHub markdown with alignment colons (numbers right-aligned)
MARKDOWN = "pipe"

#: (workload, column header) of the results table, in order
COLUMNS: tuple[tuple[str, str], ...] = (
    ("stream", "notif/s ↑"),
    ("stream_cpu_client", "client CPU µs/msg ↓"),
    ("stream_cpu_agent", "agent CPU µs/msg ↓"),
    ("stream_cpu_sum", "sum CPU µs/msg ↓"),
    ("rtt_seq", "seq rt/s ↑"),
    ("inflight", "64 in flight req/s ↑"),
    ("large", "1 MiB notif MiB/s ↑"),
    ("rss_client", "RSS client MiB ↓"),
    ("rss_agent", "RSS agent MiB ↓"),
    ("startup", "start-up ms ↓"),
)


#: (workload, column header) of the proxy-chain table, after the pair's throughput and its share of direct
CHAIN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("stream_cpu_conductor_hop", "conductor CPU µs/msg/hop ↓"),
    ("stream_cpu_chain", "agent side CPU µs/msg ↓"),
    ("stream_cpu_agent", "agent CPU µs/msg ↓"),
    ("rss_conductor", "RSS conductor MiB ↓"),
    ("large_rss_conductor", "RSS conductor, 1 MiB frames ↓"),
)


def markdown_table(rows: Sequence[Sequence[str]], headers: Sequence[str], align: Sequence[str],
                   tablefmt: str = TABLEFMT) -> str:
    """`rows` under `headers` (`tabulate`; cells as given, no number parsing), each column
    aligned `"left"` or `"right"` as in `align`."""
    from tabulate import tabulate

    return str(tabulate([list(r) for r in rows], headers=list(headers), tablefmt=tablefmt, colalign=list(align),
                        disable_numparse=True))



def format_value(v: float | None) -> str:
    """A compact cell: thousands separators for rates, one or two decimals for small values."""
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def _cell(row: Measurement | None) -> str:
    if row is None:
        return "—"
    if row.invalid:
        return "ERROR"
    cell = format_value(row.median)
    if row.errors:
        cell += f" !{len(row.errors)}"
    return cell


def _has_ran(rows: Sequence[Measurement]) -> bool:
    """Whether the run recorded what its processes ran (runs saved before it did not: their
    tables come out as they were)."""
    return any(r.ran or r.invalid for r in rows)


def _ran(rows: Sequence[Measurement], pair: str, loop: str) -> str:
    """The `ran` cell of a variant: what its processes reported (`?` for a run without it)."""
    for r in rows:
        if r.pair == pair and r.loop == loop and not r.skipped:
            return r.ran or "?"
    return "?"


#: The note under a table with a ``ran`` column.
RAN_NOTE = ("ran: the engine twin each process of the row reported itself, in order (client, conductor, "
            "proxies, agent; c compiled, py pure, sdk an official Python SDK peer, node a Node.js peer), "
            "each on the row's loop and importing this acp_fast, checked after every run; a row whose "
            "processes disagree with its label shows ERROR instead of figures.")


def results_table(rows: Sequence[Measurement], config: RunConfig, *, tablefmt: str = TABLEFMT) -> str:
    """A line per pair and loop, a column per metric (`COLUMNS`; medians of the runs;
    `!k`: k runs failed), after the `ran` column (what the processes reported they ran; a row
    whose processes disagree with its label has `ERROR` for figures). Skipped pairs and errors
    are listed under the table."""
    by_key = {(r.pair, r.loop, r.workload): r for r in rows if not r.skipped}
    show_ran = _has_ran(rows)
    variants: list[tuple[str, str]] = []
    for r in rows:
        if not r.skipped and (r.pair, r.loop) not in variants:
            variants.append((r.pair, r.loop))
    out: list[str] = []
    if variants:
        body = []
        for pair, loop in variants:
            p = PAIRS.get(pair)
            name = f"{pair} — {FLOOR if pair == 'floor/floor' else CEILING}" if p is not None and p.ceiling else pair
            body.append([name, loop, *([_ran(rows, pair, loop)] if show_ran else []),
                         *(_cell(by_key.get((pair, loop, w))) for w, _ in COLUMNS)])
        out.append(markdown_table(body, ["pair (client/agent)", "loop", *(["ran"] if show_ran else []),
                                         *(h for _, h in COLUMNS)],
                                  ["left", "left", *(["left"] if show_ran else []), *("right" for _ in COLUMNS)],
                                  tablefmt))
    else:
        out.append("(no runnable pair)")
    out.append("")
    out.append(
        f"Medians of {config.repeat} run(s); N={config.n:,} × {config.chunk} B agent_message_chunk, "
        f"M={config.m:,} sequential _test/echo, {config.inflight_m:,} with {config.inflight} in flight, "
        f"{config.large_n} × 1 MiB, warm-up {config.warmup}. CPU µs/msg: user+sys CPU of each process "
        f"during the streaming prompt ÷ N. "
        + (f"Client on CPU {config.pin[0]}, agent on CPU {config.pin[1]}." if config.pin else "Not pinned (< 2 CPUs).")
    )
    if show_ran:
        out.append(RAN_NOTE)
    chains = chains_table(rows, tablefmt=tablefmt)
    if chains:
        out.extend(["", chains])
    for r in rows:
        if r.skipped:
            out.append(f"- {r.pair}: {r.skipped}")
    seen: set[str] = set()
    for r in rows:
        if r.invalid and f"{r.pair} [{r.loop}]" not in seen:
            seen.add(f"{r.pair} [{r.loop}]")
            out.append(f"- {r.pair} [{r.loop}]: ERROR, no figures: {r.invalid}")
    for r in rows:
        if r.invalid:
            continue
        for e in r.errors:
            key = f"{r.pair} [{r.loop}] {e}"
            if key not in seen:
                seen.add(key)
                out.append(f"- {r.pair} [{r.loop}]: {e[:300]}")
    return "\n".join(out)


def chains_table(rows: Sequence[Measurement], *, tablefmt: str = TABLEFMT) -> str:
    """The proxy-chain rows (pairs with `hops`, [`chains`][acp_fast.benchmark.chains]): throughput, its share of the
    direct pair's on the same loop, the conductor's CPU per notification per hop, the whole agent
    side's CPU per notification and the conductor's peak RSS; `""` without chain rows."""
    from .chains import DIRECT

    show_ran = _has_ran(rows)
    by_key = {(r.pair, r.loop, r.workload): r for r in rows if not r.skipped}
    variants: list[tuple[str, str]] = []
    for r in rows:
        p = PAIRS.get(r.pair)
        if not r.skipped and getattr(p, "hops", None) is not None and (r.pair, r.loop) not in variants:
            variants.append((r.pair, r.loop))
    if not variants:
        return ""
    body = []
    for pair, loop in variants:
        stream = by_key.get((pair, loop, "stream"))
        direct = by_key.get((DIRECT, loop, "stream"))
        share = "—"
        if stream is not None and direct is not None and stream.median and direct.median:
            share = f"{100.0 * stream.median / direct.median:.0f} %"
        body.append([pair, loop, *([_ran(rows, pair, loop)] if show_ran else []),
                     str(getattr(PAIRS.get(pair), "hops", "?")), _cell(stream), share,
                     *(_cell(by_key.get((pair, loop, w))) for w, _ in CHAIN_COLUMNS)])
    table = markdown_table(body, ["proxy chain", "loop", *(["ran"] if show_ran else []), "hops", "notif/s ↑",
                                  f"of {DIRECT}", *(h for _, h in CHAIN_COLUMNS)],
                           ["left", "left", *(["left"] if show_ran else []), "right", "right", "right",
                            *("right" for _ in CHAIN_COLUMNS)], tablefmt)
    return (table + "\n\nProxy chains: the client spawns `acp-fast conductor agent PROXY… AGENT`; hops = proxies + 1 "
            "(conductor forwards per notification). Conductor CPU and RSS are the client's /proc readings of the "
            "process it spawned (CPU: thread run time during the streaming prompt; RSS: VmHWM); agent side = "
            "conductor + proxies + agent. The chain shares the agent's CPU when pinned.")


def goals_table(rows: Sequence[Measurement], loops: Sequence[str], *, tablefmt: str = TABLEFMT) -> str:
    """The PASS/MISS table of `GOALS` for each loop."""
    body = []
    for v in verdicts(rows, loops):
        measured = v["shown"] + ("×" if v["unit"] == "×" and v["shown"] != "—" else
                                 (f" {v['unit']}" if v["shown"] != "—" else ""))
        goal = f"≥ {v['goal']:g}×" if v["unit"] == "×" else f"≤ {v['goal']:g} {v['unit']}"
        body.append([v["label"], v["loop"], v["pair"], v["reference"] or "—", measured, goal, v["result"]])
    return markdown_table(body, ["goal (issues 7 §3, 10, 11)", "loop", "pair", "vs", "measured", "goal", "result"],
                          ["left", "left", "left", "left", "right", "right", "left"], tablefmt)


def write_json(path: str | os.PathLike[str], rows: Sequence[Measurement], raw: Sequence[JsonObject],
               config: RunConfig, meta: JsonObject) -> None:
    """Writes `{"meta", "config", "rows", "goals", "raw"}` to `path`."""
    doc = {
        "meta": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(), **meta},
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in config.__dict__.items()},
        "rows": [r.to_json() for r in rows],
        "goals": verdicts(rows, config.loops),
        "raw": list(raw),
    }
    dump_json(path, doc)


class BenchJSONError(ValueError):
    """The file is not (readable as) the JSON of the benchmark producer asked for; the message says
    which file and why."""


def portable_paths(doc: Json) -> Json:
    """`doc` with this machine's paths in its strings made portable, so that a result file can
    be kept and compared across machines: this interpreter becomes `python`, the working
    folder `.` and the home folder `~` (longest first; other strings unchanged)."""
    places = sorted({(sys.executable, "python"), (os.path.realpath(sys.executable), "python"),
                     (os.getcwd() + os.sep, ""), (os.getcwd(), "."),
                     (os.path.expanduser("~") + os.sep, "~" + os.sep)},
                    key=lambda pair: -len(pair[0]))
    places = [(old, new) for old, new in places if old not in ("", os.sep)]

    def fix(value: Json) -> Json:
        if isinstance(value, str):
            for old, new in places:
                value = value.replace(old, new)
            return value
        if isinstance(value, dict):
            return {fix(k): fix(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [fix(v) for v in value]
        return value

    return fix(doc)


def dump_json(path: str | os.PathLike[str], doc: Json) -> None:
    """Writes `doc` to `path` (indented, UTF-8, a final newline), creating its folder; this
    machine's paths are made portable first ([`portable_paths`][acp_fast.benchmark.tables.portable_paths])."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(portable_paths(doc), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def load_json(path: str | os.PathLike[str], what: str, required: Iterable[str] = ()) -> JsonObject:
    """The JSON object in `path`, which must hold the keys `required`; otherwise
    [`BenchJSONError`][acp_fast.benchmark.tables.BenchJSONError] saying that `path` is not `what` (e.g. `"an acp-fast bench JSON"`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchJSONError(f"{path}: cannot read it: {exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BenchJSONError(f"{path}: not {what}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BenchJSONError(f"{path}: not {what}: a JSON {type(doc).__name__}, not an object")
    missing = [k for k in required if k not in doc]
    if missing:
        raise BenchJSONError(f"{path}: not {what}: no {', '.join(repr(k) for k in missing)} "
                             f"(it has: {', '.join(map(repr, list(doc)[:8])) or 'nothing'})")
    return doc


@dataclass
class BenchJSON:
    """A run read back from its JSON ([`read_json`][acp_fast.benchmark.tables.read_json])."""

    rows: list[Measurement]
    config: RunConfig
    meta: JsonObject
    goals: list[JsonObject] | None  #: as stored (``None``: the file has none)


def read_json(path: str | os.PathLike[str]) -> BenchJSON:
    """The rows, config, meta and stored goals of the JSON [`write_json`][acp_fast.benchmark.tables.write_json] wrote (keys a newer
    or older version wrote and this one does not know are ignored); [`BenchJSONError`][acp_fast.benchmark.tables.BenchJSONError] when
    `path` is not such a file."""
    what = "an acp-fast bench JSON (the --json of a suite run)"
    doc = load_json(path, what, ("config", "rows"))
    if doc.get("mode") == "agent":
        raise BenchJSONError(f"{path}: the JSON of an --agent probe, not of a suite run")
    try:
        if not isinstance(doc["rows"], list):
            raise ValueError("rows: expected a list")
        rows = [Measurement.from_json(r) for r in doc["rows"]]
        config = RunConfig.from_json(doc["config"])
        meta = doc.get("meta") or {}
        goals = doc.get("goals")
        if not isinstance(meta, dict) or not (goals is None or isinstance(goals, list)):
            raise ValueError("meta must be an object and goals a list")
    except ValueError as exc:
        raise BenchJSONError(f"{path}: not {what}: {exc}") from None
    return BenchJSON(rows, config, meta, goals)


def goals_changed(stored: Sequence[JsonObject] | None, rows: Sequence[Measurement],
                  loops: Sequence[str]) -> bool:
    """Whether the goals `stored` with a run differ from the verdicts recomputed from its rows
    (the goal definitions changed since the run); `False` when none were stored."""
    if stored is None:
        return False
    return bool(json.loads(json.dumps(verdicts(rows, loops), ensure_ascii=False)) != list(stored))
