"""Workloads, metrics and the repeat loop of the end-to-end benchmark.

Each repetition runs, for every pair, two client invocations ("steps"):

`main`   `--n N --m M --inflight K --inflight-m X --warmup W`: one prompt streaming N
           `agent_message_chunk` notifications of 100-byte text (workload a), M sequential
           `_test/echo` round trips (b), X echo requests with K = 64 in flight (c); the client
           also reports the spawn-to-initialize time (f: the agent's start, its modules' bytecode
           compiled beforehand by `acp-fast bench`, `bytecode`) and both processes'
           peak RSS (e).
`large`  `--large --n L`: the agent sends L notifications of 1 MiB text each (d), with the
           peak RSS of both processes at that size.

Every pair runs on every event loop asked for ([`variants`][acp_fast.benchmark.pairs.Pair.variants]: both Python
sides on the same loop), with client and agent pinned to different CPUs when there are two.
Variants are interleaved inside each repetition (r1: all variants, r2: all variants, ...), so
slow drifts of the shared machine's load spread over all of them instead of hitting one.
Every metric is reported as a [`Measurement`][acp_fast.benchmark.suite.Measurement] `{pair, loop, workload, unit, runs: [...],
median}` (median of the R runs that succeeded). The client's own checks (every notification
received, every text byte counted, every echo answered with its params) must pass, otherwise
the run counts as failed. Pairs through a conductor ([`chains`][acp_fast.benchmark.chains]) also get the metrics
marked `chain_only`: the conductor's CPU per notification per hop, the whole agent side's
CPU per notification and the conductor's peak RSS.

After every run, what each process of the pair reported about itself (its engine twin, its
loop, the `acp_fast` it imported: [`runtime`][acp_fast.benchmark.runtime]) is checked against the pair's label. A
disagreement is not a failed run among others but a row that measured something else: the
variant stops, every one of its measurements loses its figures and carries the reason
(`Measurement.invalid`), so that no number stands for what did not run. Otherwise each
measurement records what ran (`Measurement.ran`, e.g. `c ×2`) and the raw record of the
run its `processes`.
"""

from __future__ import annotations

import functools
import os
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..jsontypes import Json, JsonObject
from .pairs import Pair, Variant
from .runner import Invocation, InvocationError, run_client
from .runtime import RuntimeMismatch, check, summary

__all__ = ["METRICS", "Measurement", "Metric", "RunConfig", "Step", "run_pairs"]


@dataclass(frozen=True)
class RunConfig:
    """Sizes, repeat count, event loops and CPU pinning of one `acp-fast bench` session."""

    repeat: int = 3
    n: int = 20_000  #: notifications in the streaming prompt (workload a)
    chunk: int = 100  #: text bytes per streamed notification
    m: int = 5_000  #: sequential round trips (workload b)
    inflight: int = 64  #: requests kept in flight (workload c)
    inflight_m: int = 20_000  #: requests of the in-flight phase
    large_n: int = 100  #: 1 MiB notifications (workload d)
    warmup: int = 5_000  #: unmeasured chunks and echoes before the measured part (JIT warm-up)
    timeout_s: float = 180.0  #: per client invocation
    large_repeat: int | None = None  #: repetitions of the large-frame step (default: ``repeat``)
    loops: tuple[str, ...] = ("asyncio",)  #: event loops of the Python sides, one variant each
    pin: tuple[int, int] | None = None  #: CPUs of (client, agent); ``None``: not pinned

    @classmethod
    def quick(cls, **kw: Any) -> RunConfig:
        """A couple of minutes for the default pairs on both loops on a quiet 2-core machine:
        one repetition of a smaller main step (N = 3,000) and of 3 × 1 MiB frames."""
        return cls(repeat=1, n=3_000, m=150, inflight_m=600, large_n=3, warmup=100, timeout_s=60.0,
                   large_repeat=1, **kw)

    @classmethod
    def from_json(cls, d: Mapping[str, Json]) -> RunConfig:
        """The config of a run from its JSON (`"config"` of [`write_json`][acp_fast.benchmark.tables.write_json]): lists
        back to tuples, missing keys at their defaults, keys this version does not know ignored.
        Raises `ValueError` when a value has the wrong type."""
        if not isinstance(d, Mapping):
            raise ValueError(f"config: expected an object, got {type(d).__name__}")
        kw: dict[str, Any] = {}
        try:
            for f in fields(cls):
                if f.name not in d:
                    continue
                v = d[f.name]
                if f.name == "loops":
                    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
                        raise ValueError(f"a list of loop names, got {v!r}")
                    kw[f.name] = tuple(v)
                elif f.name == "pin":
                    if v is not None and (not isinstance(v, (list, tuple)) or len(v) != 2):
                        raise ValueError(f"[client CPU, agent CPU] or null, got {v!r}")
                    kw[f.name] = None if v is None else (_int(v[0]), _int(v[1]))
                elif f.name == "large_repeat":
                    kw[f.name] = None if v is None else _int(v)
                elif f.name == "timeout_s":
                    kw[f.name] = _float(v)
                else:
                    kw[f.name] = _int(v)
        except ValueError as exc:
            raise ValueError(f"config.{f.name}: {exc}") from None
        return cls(**kw)


@dataclass(frozen=True)
class Step:
    """One client invocation per pair and repetition."""

    name: str
    args: Callable[[RunConfig], list[str]]
    env: Callable[[RunConfig], dict[str, str]]


STEPS: tuple[Step, ...] = (
    Step(
        "main",
        lambda s: ["--n", str(s.n), "--m", str(s.m), "--rtt-method", "echo", "--inflight", str(s.inflight),
                   "--inflight-m", str(s.inflight_m), "--warmup", str(s.warmup)],
        lambda s: {"ACP_CHUNK": str(s.chunk)},
    ),
    Step(
        "large",
        lambda s: ["--large", "--n", str(s.large_n), "--m", "0", "--warmup", "0"],
        lambda s: {"ACP_CHUNK": "1048576"},
    ),
)


def _kib_to_mib(v: Any) -> float | None:
    return None if v is None else round(float(v) / 1024.0, 1)


# Peak RSS: the largest RSS sampled by the harness (psutil, every 20 ms) is preferred.
# getrusage's ru_maxrss (what the processes report themselves) is not: Linux carries the
# pre-exec high-water mark across execve, so a child started by fork+exec (asyncio's
# subprocess_exec does that) reports at least its parent's RSS at fork time, e.g. an agent
# spawned by a 230 MiB client says 230 MiB while it never used 30. ru_maxrss is the fallback
# where the harness could not sample.
def _agent_rss(inv: Invocation) -> float | None:
    v = inv.agent_rss_kib if inv.agent_rss_kib is not None else inv.result.get("agentMaxRssKiB")
    return _kib_to_mib(v)


def _client_rss(inv: Invocation) -> float | None:
    v = inv.client_rss_kib if inv.client_rss_kib is not None else inv.result.get("clientMaxRssKiB")
    return _kib_to_mib(v)


def _child_rss(inv: Invocation) -> float | None:
    # VmHWM of the spawned process (the conductor in chain rows), read by the client: exact, no sampling
    return _kib_to_mib(inv.result.get("childMaxRssKiB"))


def _cpu_sum(inv: Invocation) -> float | None:
    c, a = inv.result.get("streamClientCpuUsPerMsg"), inv.result.get("streamAgentCpuUsPerMsg")
    return None if c is None or a is None else round(float(c) + float(a), 2)


def _per_frame_ms(inv: Invocation) -> float | None:
    r = inv.result
    if r.get("promptMs") is None or not r.get("n"):
        return None
    return round(float(r["promptMs"]) / float(r["n"]), 3)


def _field(name: str) -> Callable[[Invocation], float | None]:
    def get(inv: Invocation) -> float | None:
        v = inv.result.get(name)
        return None if v is None else float(v)

    return get


@dataclass(frozen=True)
class Metric:
    """One reported number, extracted from one step's invocation."""

    workload: str
    step: str
    unit: str
    better: str  #: "higher" or "lower"
    extract: Callable[[Invocation], float | None]
    label: str
    chain_only: bool = False  #: only measured for pairs through a conductor (:mod:`.chains`)

    def applies(self, pair: Pair) -> bool:
        """Whether `pair` reports this metric (chain metrics: pairs with `hops`)."""
        return not self.chain_only or getattr(pair, "hops", None) is not None


METRICS: tuple[Metric, ...] = (
    Metric("stream", "main", "notif/s", "higher", _field("notificationsPerSec"),
           "(a) streaming N × 100 B agent_message_chunk"),
    Metric("stream_cpu_client", "main", "µs/msg", "lower", _field("streamClientCpuUsPerMsg"),
           "(a) client CPU per notification"),
    Metric("stream_cpu_agent", "main", "µs/msg", "lower", _field("streamAgentCpuUsPerMsg"),
           "(a) agent CPU per notification"),
    Metric("stream_cpu_sum", "main", "µs/msg", "lower", _cpu_sum, "(a) client + agent CPU per notification"),
    Metric("rtt_seq", "main", "rt/s", "higher", _field("roundTripsPerSec"), "(b) sequential _test/echo"),
    Metric("rtt_p50", "main", "µs", "lower", _field("p50RttUs"), "(b) round trip p50"),
    Metric("rtt_p99", "main", "µs", "lower", _field("p99RttUs"), "(b) round trip p99"),
    Metric("inflight", "main", "req/s", "higher", _field("requestsPerSec"), "(c) _test/echo, 64 in flight"),
    Metric("inflight_p99", "main", "µs", "lower", _field("inflightP99RttUs"), "(c) 64 in flight, latency p99"),
    Metric("large", "large", "MiB/s", "higher", _field("textMiBPerSec"), "(d) 1 MiB notifications"),
    Metric("large_frame", "large", "ms", "lower", _per_frame_ms, "(d) time per 1 MiB notification"),
    Metric("rss_client", "main", "MiB", "lower", _client_rss, "(e) client peak RSS, streaming run"),
    Metric("rss_agent", "main", "MiB", "lower", _agent_rss, "(e) agent peak RSS, streaming run"),
    Metric("large_rss_client", "large", "MiB", "lower", _client_rss, "(e) client peak RSS, 1 MiB frames"),
    Metric("large_rss_agent", "large", "MiB", "lower", _agent_rss, "(e) agent peak RSS, 1 MiB frames"),
    Metric("startup", "main", "ms", "lower", _field("startupMs"),
           "(f) spawn → initialize response, bytecode cached (.bytecode)"),
    # chains (.chains): the conductor is the process the client spawns, measured by the client from /proc
    Metric("stream_cpu_conductor_hop", "main", "µs/msg/hop", "lower", _field("streamChildCpuUsPerHop"),
           "(a) conductor CPU per forwarded notification per hop", chain_only=True),
    Metric("stream_cpu_chain", "main", "µs/msg", "lower", _field("streamTreeCpuUsPerMsg"),
           "(a) agent side CPU per notification: conductor + proxies + agent", chain_only=True),
    Metric("rss_conductor", "main", "MiB", "lower", _child_rss, "(e) conductor peak RSS, streaming run",
           chain_only=True),
    Metric("large_rss_conductor", "large", "MiB", "lower", _child_rss, "(e) conductor peak RSS, 1 MiB frames",
           chain_only=True),
)


@dataclass
class Measurement:
    """One metric of one pair on one event loop over all repetitions.

    `ran`: what the pair's processes reported they ran ([`summary`][acp_fast.benchmark.runtime.summary], e.g.
    `c ×2`); `invalid`: why the variant has no figures at all (its processes disagreed with
    its label: another twin, loop or package), else `None`.
    """

    pair: str
    workload: str
    unit: str | None
    loop: str = "asyncio"
    runs: list[float] = field(default_factory=list)
    median: float | None = None
    better: str | None = None
    errors: list[str] = field(default_factory=list)
    skipped: str | None = None
    ran: str | None = None
    invalid: str | None = None

    def to_json(self) -> JsonObject:
        """The measurement as a JSON-ready dict; `errors`, `skipped`, `ran` and `invalid`
        only when set."""
        d = asdict(self)
        if not self.errors:
            d.pop("errors")
        for key in ("skipped", "ran", "invalid"):
            if d[key] is None:
                d.pop(key)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Json]) -> Measurement:
        """The inverse of [`to_json`][acp_fast.benchmark.suite.Measurement.to_json]: `pair` and `workload` are required, the other keys
        default as in the class, keys this version does not know are ignored. Raises
        `ValueError` when a value has the wrong type."""
        if not isinstance(d, Mapping):
            raise ValueError(f"row: expected an object, got {type(d).__name__}")
        missing = [k for k in ("pair", "workload") if not isinstance(d.get(k), str)]
        if missing:
            raise ValueError(f"row without {' or '.join(missing)}: {str(dict(d))[:200]}")
        try:
            runs, errors = d.get("runs") or [], d.get("errors") or []
            if not isinstance(runs, list) or not isinstance(errors, list):
                raise ValueError("runs and errors must be lists")
            return cls(pair=d["pair"], workload=d["workload"], unit=_opt_str(d.get("unit")),
                       loop=str(d.get("loop", "asyncio")), runs=[_float(x) for x in runs],
                       median=None if d.get("median") is None else _float(d["median"]),
                       better=_opt_str(d.get("better")), errors=[str(e) for e in errors],
                       skipped=_opt_str(d.get("skipped")), ran=_opt_str(d.get("ran")),
                       invalid=_opt_str(d.get("invalid")))
        except ValueError as exc:
            raise ValueError(f"row {d['pair']} [{d.get('loop')}] {d['workload']}: {exc}") from None


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected an integer, got {v!r}")
    return v


def _float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected a number, got {v!r}")
    return float(v)


def _opt_str(v: Any) -> str | None:
    if v is not None and not isinstance(v, str):
        raise ValueError(f"expected a string or null, got {v!r}")
    return v


def _check(inv: Invocation, step: Step, loop: str) -> None:
    r = inv.result
    if loop in ("asyncio", "uvloop"):  # every Python side reports its loop: it must be the row's
        for key in ("loop", "agentLoop"):
            if r.get(key) not in (None, loop):
                raise RuntimeMismatch(f"{key} {r.get(key)!r}, the row's loop is {loop!r} ({step.name})")
    for key in ("updatesOk", "textOk"):
        if r.get(key) is False:
            raise InvocationError(f"client self-check failed: {key}=false ({step.name})")
    if r.get("stopReason") not in (None, "end_turn"):
        raise InvocationError(f"stopReason {r.get('stopReason')!r} ({step.name})")


def run_pairs(
    pairs: Iterable[Pair],
    config: RunConfig,
    *,
    on_start: Callable[[str], None] | None = None,
    on_tick: Callable[[str, float], None] | None = None,
    on_done: Callable[[str, str], None] | None = None,
) -> tuple[list[Measurement], list[JsonObject]]:
    """Runs every step of every runnable pair on every loop `config.repeat` times.

    Returns the measurements (a skipped pair gets one with `workload="*"` and the skip
    message) and the raw per-invocation records (client JSON, RSS samples, load average, CPUs,
    what each process reported). A variant whose processes disagree with its label
    ([`RuntimeMismatch`][acp_fast.benchmark.runtime.RuntimeMismatch]) is not run again and keeps no figures. The callbacks
    receive a step label like `"r2 ts/ts [node] main"` for progress displays.
    """
    runnable: list[Variant] = []
    rows: list[Measurement] = []
    for p in pairs:
        msg = p.missing()
        if msg is None:
            runnable.extend(p.variants(config.loops))
        else:
            rows.append(Measurement(pair=p.name, workload="*", loop="*", unit=None, skipped=msg))
    measured: dict[tuple[str, str, str], Measurement] = {
        (*v.key, m.workload): Measurement(pair=v.pair.name, loop=v.loop, workload=m.workload, unit=m.unit,
                                           better=m.better)
        for v in runnable
        for m in METRICS
        if m.applies(v.pair)
    }
    raw: list[JsonObject] = []
    invalid: dict[tuple[str, str], tuple[str, str]] = {}  # variant -> (reason, what ran)
    ran: dict[tuple[str, str], str] = {}
    for rep in range(1, config.repeat + 1):
        for v in runnable:
            for step in STEPS:
                if step.name == "large" and config.large_repeat is not None and rep > config.large_repeat:
                    continue
                if v.key in invalid:
                    continue
                label = f"r{rep}/{config.repeat} {v.label} {step.name}"
                if on_start:
                    on_start(label)
                env = {**step.env(config), **v.pair.env}
                record: JsonObject = {"pair": v.pair.name, "loop": v.loop, "step": step.name, "repeat": rep,
                                          "loadavg": _loadavg()}
                try:
                    inv = run_client(
                        v.client_cmd, step.args(config), v.agent_cmd,
                        env=env,
                        timeout_s=config.timeout_s,
                        pin=config.pin,
                        on_tick=functools.partial(on_tick, label) if on_tick else None,
                    )
                    record["reports"] = inv.reports
                    processes = check(inv.reports, v.pair.processes, engine=v.pair.engine, loop=v.loop,
                                      result=inv.result)
                    record["processes"] = processes
                    _check(inv, step, v.loop)
                except RuntimeMismatch as exc:
                    err = f"the processes disagree with the row: {exc}"
                    record.update(error=err, mismatch=True, result=inv.result, argv=inv.argv,
                                  processes=exc.processes)
                    raw.append(record)
                    invalid[v.key] = (err, summary(exc.processes) if exc.processes else "?")
                    for m in METRICS:
                        if m.applies(v.pair):
                            measured[v.key + (m.workload,)].errors.append(f"r{rep}: {err}")
                    if on_done:
                        on_done(label, f"ERROR: {err[:300]}")
                    continue
                except (InvocationError, OSError) as exc:
                    err = str(exc)
                    record["error"] = err
                    raw.append(record)
                    for m in METRICS:
                        if m.step == step.name and m.applies(v.pair):
                            measured[v.key + (m.workload,)].errors.append(f"r{rep}: {err}")
                    if on_done:
                        on_done(label, f"FAILED: {err[:200]}")
                    continue
                record.update(argv=inv.argv, result=inv.result, wall_s=round(inv.wall_s, 3),
                              client_rss_kib=inv.client_rss_kib, agent_rss_kib=inv.agent_rss_kib,
                              pinned=inv.pinned)
                raw.append(record)
                ran[v.key] = summary(processes)
                for m in METRICS:
                    if m.step == step.name and m.applies(v.pair):
                        value = m.extract(inv)
                        if value is not None:
                            measured[v.key + (m.workload,)].runs.append(value)
                if on_done:
                    on_done(label, _summary(step, inv))
    for key, row in measured.items():
        variant = (key[0], key[1])
        if variant in invalid:
            row.invalid, row.ran = invalid[variant]
            row.runs, row.median = [], None
        else:
            row.ran = ran.get(variant)
            if row.runs:
                row.median = statistics.median(row.runs)
        rows.append(row)
    return rows, raw


def _summary(step: Step, inv: Invocation) -> str:
    r = inv.result
    if step.name == "main":
        return (f"{r.get('notificationsPerSec')} notif/s, CPU {r.get('streamClientCpuUsPerMsg')}/"
                f"{r.get('streamAgentCpuUsPerMsg')} µs/msg, {r.get('roundTripsPerSec')} rt/s, "
                f"{r.get('requestsPerSec')} req/s @{r.get('inflight')}, startup {r.get('startupMs')} ms "
                f"({inv.wall_s:.1f} s)")
    return f"{r.get('textMiBPerSec')} MiB/s, {r.get('n')} × {r.get('chunkSize')} B ({inv.wall_s:.1f} s)"


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
