"""The state of the machine around a benchmark run: load average, CPU calibration, busy check,
and what of this interpreter's environment changes a peer's speed ([`sdk_tracing_note`][acp_fast.benchmark.machine.sdk_tracing_note]).

The shared machine's speed moves between runs; CPU µs per message is robust to that, wall
throughput is not. [`snapshot`][acp_fast.benchmark.machine.snapshot] is taken before and after the run; [`busy_warnings`][acp_fast.benchmark.machine.busy_warnings]
says when the numbers should not be trusted (load average above 0.7 × CPUs, or the
calibration loop's time drifting by more than 15 % between before and after).
"""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import asdict, dataclass

from ..jsontypes import JsonObject

__all__ = ["CALIBRATION_LOOPS", "LOAD_PER_CPU", "MAX_DRIFT", "SDK_TRACERS", "Snapshot", "busy_warnings", "calibrate",
           "cpu_count", "sdk_tracing_note", "snapshot"]

#: iterations of the calibration loop
CALIBRATION_LOOPS = 3_000_000
#: load average per CPU above which the machine counts as busy
LOAD_PER_CPU = 0.7
#: relative change of the calibration time (before → after) above which the machine counts as busy
MAX_DRIFT = 0.15
#: The tracing packages the official Python SDK (``acp.telemetry``) opens a span with for every
#: request and notification when it can import them (module → distribution). Its own install
#: (``agent-client-protocol``, with or without ``[http]``) brings neither.
SDK_TRACERS = {"opentelemetry.trace": "opentelemetry-api", "logfire": "logfire"}


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def calibrate(loops: int = CALIBRATION_LOOPS) -> float:
    """Milliseconds of wall time for a fixed pure-Python loop: a gauge of the machine's speed
    *now* (contention on a shared host shows up here); the best of three."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        x = 0
        for i in range(loops):
            x += i & 7
        best = min(best, time.perf_counter() - t0)
    return best * 1000.0


@dataclass(frozen=True)
class Snapshot:
    """Load average (1, 5, 15 min; `None` where unknown), calibration time, time stamp."""

    load: tuple[float, float, float] | None
    calibration_ms: float
    at: str

    def load_text(self) -> str:
        """The three load averages with two decimals, or `"n/a"` when unknown."""
        return "n/a" if self.load is None else " ".join(f"{x:.2f}" for x in self.load)

    def to_json(self) -> JsonObject:
        """The snapshot as a JSON-ready dict (one key per field)."""
        return asdict(self)


def snapshot() -> Snapshot:
    """The machine's state now (the calibration runs first, then the load is read)."""
    cal = calibrate()
    try:
        one, five, fifteen = os.getloadavg()
        load: tuple[float, float, float] | None = (round(one, 2), round(five, 2), round(fifteen, 2))
    except (AttributeError, OSError):
        load = None
    return Snapshot(load, round(cal, 1), time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def busy_warnings(before: Snapshot, after: Snapshot, cpus: int | None = None) -> list[str]:
    """Why the machine looked busy around the run (empty when it did not)."""
    cpus = cpus or cpu_count()
    out = []
    limit = LOAD_PER_CPU * cpus
    for name, snap in (("before", before), ("after", after)):
        if snap.load is not None and snap.load[0] > limit:
            out.append(f"load average {snap.load[0]:.2f} {name} the run is above {limit:.2f} "
                       f"({LOAD_PER_CPU:g} × {cpus} CPUs)")
    if before.calibration_ms > 0:
        drift = (after.calibration_ms - before.calibration_ms) / before.calibration_ms
        if abs(drift) > MAX_DRIFT:
            out.append(f"CPU calibration drifted {drift * 100:+.0f} % ({before.calibration_ms:.0f} → "
                       f"{after.calibration_ms:.0f} ms; limit ±{MAX_DRIFT * 100:.0f} %)")
    return out


def sdk_tracing_note() -> str | None:
    """A note when the Python SDK peers of a run (they run this interpreter) trace every message.

    With `opentelemetry-api` (the `mcp` package brings it, so the `test` extra does) or
    `logfire` importable, `acp` opens a span per request and notification: its rows, and
    those of the drop-ins (the SDK's own code on acp_fast), are slower than with the SDK's
    default install, so ratios against them are too flattering. `None` when neither imports.
    """
    found = [dist for module, dist in SDK_TRACERS.items() if _importable(module)]
    if not found:
        return None
    return (f"the Python SDK traces every message in this interpreter ({', '.join(found)} importable; "
            "its default install has neither): its rows and the drop-ins' are slower than a user's "
            "default install's; run the benchmark in a venv with only the bench (and remote) extra")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        return False
