"""Helpers shared by the Python SDK peers: the client CLI, latency statistics, process stats.

Only the standard library here; the SDK itself is imported by ``agent.py`` and ``client.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

#: Chunk size the large-frames mode asks the agent for (1 MiB).
LARGE_CHUNK = 1048576


LOOPS = ("asyncio", "uvloop")


def loop_from_argv(argv: list[str]) -> str | None:
    """The value of ``--loop asyncio|uvloop`` (or ``--loop=...``) in ``argv``, else ``None``."""
    for i, a in enumerate(argv):
        value = argv[i + 1] if a == "--loop" and i + 1 < len(argv) else (a[7:] if a.startswith("--loop=") else None)
        if value is not None:
            if value not in LOOPS:
                raise SystemExit(f"--loop: expected one of {', '.join(LOOPS)}, got {value!r}")
            return value
    return None


def run(coro: Coroutine[Any, Any, Any], loop: str | None = None) -> Any:
    """Runs ``coro`` on ``loop`` (``"asyncio"`` or ``"uvloop"``, which must then be installed).

    Without ``loop``: uvloop when ``ACP_UVLOOP=1`` and uvloop is installed, else asyncio.
    """
    if loop is None:
        loop = "asyncio"
        if os.environ.get("ACP_UVLOOP") == "1":
            try:
                import uvloop  # type: ignore[import-not-found]  # noqa: F401
            except ImportError:
                pass
            else:
                loop = "uvloop"
    if loop == "uvloop":
        import uvloop  # type: ignore[import-not-found]

        return uvloop.run(coro)
    return asyncio.run(coro)


def loop_name() -> str:
    """``"uvloop"`` or ``"asyncio"``: the running loop's kind, for the JSON report."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


def process_stats() -> dict[str, Any]:
    """Peak RSS and CPU of this process, with the field names of the TS agent's ``_test/stats``."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    rss = None
    try:
        with open("/proc/self/statm", "rb") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        pass
    return {
        "maxRssKiB": ru.ru_maxrss,  # KiB on Linux
        "rssBytes": rss,
        "userCpuUs": round(ru.ru_utime * 1e6),
        "systemCpuUs": round(ru.ru_stime * 1e6),
    }


@dataclass(frozen=True)
class ClientArgs:
    """The client CLI shared with ``peers/ts/client.mjs`` (see its header)."""

    n: int
    m: int
    rtt_method: str
    inflight: int
    inflight_m: int
    warmup: int
    permission: bool
    raw_updates: bool
    large: bool
    chunk: int
    cmd: list[str]
    child_env: dict[str, str]
    loop: str | None


def parse_client_args(argv: list[str], default_agent: list[str]) -> ClientArgs:
    """Parses ``[options] [-- agent command...]``; ``default_agent`` is used without a command."""
    if "--" in argv:
        i = argv.index("--")
        opts, cmd = argv[:i], argv[i + 1 :]
    else:
        opts, cmd = argv, []
    p = argparse.ArgumentParser(prog="client.py", description="ACP v1 benchmark client (Python SDK)")
    p.add_argument("--n", type=int, default=None, help="chunks to ask for in the measured prompt")
    p.add_argument("--m", type=int, default=0, help="request round trips after the prompt")
    p.add_argument("--rtt-method", choices=["echo", "prompt", "none"], default="echo")
    p.add_argument("--inflight", type=int, default=0, help="in-flight phase: K echo requests kept in flight")
    p.add_argument("--inflight-m", type=int, default=None, help="requests of the in-flight phase (default M)")
    p.add_argument("--warmup", type=int, default=0, help="unmeasured prompt of W chunks and W echoes first")
    p.add_argument("--permission", action="store_true", help="prompt asks for session/request_permission")
    p.add_argument("--raw-updates", action="store_true", help="accepted for CLI parity; no effect here")
    p.add_argument("--large", action="store_true", help="agent gets ACP_CHUNK=1048576, N defaults to 100")
    p.add_argument("--loop", choices=LOOPS, default=None,
                   help="event loop (default: asyncio, or uvloop with ACP_UVLOOP=1)")
    a = p.parse_args(opts)
    child_env = dict(os.environ)
    if a.large and "ACP_CHUNK" not in child_env:
        child_env["ACP_CHUNK"] = str(LARGE_CHUNK)
    n = a.n if a.n is not None else (100 if a.large else int(os.environ.get("ACP_N", "1000")))
    return ClientArgs(
        n=n,
        m=a.m,
        rtt_method=a.rtt_method,
        inflight=max(0, a.inflight),
        inflight_m=a.inflight_m if a.inflight_m is not None else a.m,
        warmup=a.warmup,
        permission=a.permission,
        raw_updates=a.raw_updates,
        large=a.large,
        chunk=int(child_env.get("ACP_CHUNK", "100")),
        cmd=cmd or default_agent,
        child_env=child_env,
        loop=a.loop,
    )


async def run_requests(m: int, inflight: int, one: Callable[[int], Awaitable[None]]) -> tuple[float, list[float]]:
    """Runs ``one(i)`` for i in range(m) with ``inflight`` calls outstanding (1 = sequential).

    Returns the wall time in ms and each call's latency in ms (indexed by i).
    """
    lat = [0.0] * m
    it = iter(range(m))

    async def worker() -> None:
        for i in it:  # the shared iterator hands out each index once
            t = time.perf_counter()
            await one(i)
            lat[i] = (time.perf_counter() - t) * 1000.0

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(inflight, m))))
    return (time.perf_counter() - t0) * 1000.0, lat


def _percentile(sorted_ms: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..1) of an ascending list."""
    k = min(len(sorted_ms) - 1, max(0, math.ceil(p * len(sorted_ms)) - 1))
    return sorted_ms[k]


def latency_summary(rate: str, prefix: str, total_ms: float, lat_ms: list[float]) -> dict[str, Any]:
    """The JSON fields of one request phase (same names as the TS clients).

    ``rate`` names the throughput field (``roundTripsPerSec`` or ``requestsPerSec``);
    ``prefix`` goes before the other names (``""`` for the sequential phase, ``"inflight"``
    for the in-flight one: ``inflightP50RttUs``...).
    """
    m = len(lat_ms)
    s = sorted(lat_ms)

    def name(n: str) -> str:
        return prefix + n[0].upper() + n[1:] if prefix else n

    return {
        rate: round(m / (total_ms / 1000.0)),
        name("rttTotalMs"): round(total_ms, 3),
        name("meanRttUs"): round(sum(lat_ms) / m * 1000.0, 1),
        name("p50RttUs"): round(_percentile(s, 0.5) * 1000.0, 1),
        name("p99RttUs"): round(_percentile(s, 0.99) * 1000.0, 1),
        name("maxRttUs"): round(s[-1] * 1000.0, 1),
    }


def default_python_agent() -> list[str]:
    """The default agent command of the Python client: ``agent.py`` next to this file."""
    return [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent.py")]
