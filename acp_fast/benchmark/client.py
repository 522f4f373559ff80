"""The acp_fast benchmark client: the client CLI contract of `peers/README.md` on acp_fast.

Same command line and the same one JSON line as `peers/ts/client.mjs` and
`peers/pysdk/client.py`, built on acp_fast's builder API (`Client.builder()` for v1,
`Client.v2()` with `--v2`) and the child-process transport (`acp_fast.transport.spawn`):

```bash
python -m acp_fast.benchmark.client [--v2] [--n N] [--m M] [--rtt-method echo|prompt|none]
    [--inflight K] [--inflight-m X] [--warmup W] [--permission] [--raw-updates] [--large]
    [--loop auto|asyncio|uvloop] [--hops H] [-- agent command...]
```

Every `session/update` goes through the read gate (`on_session_update`; `--raw-updates`
is accepted for CLI parity and has no effect); the text of every `agent_message_chunk` is read and its length summed (`textBytes`), every echo is
checked. `sdk` is `"acp_fast"`, `engine` the active engine twin (`"c"` or `"py"`;
`ACP_FAST_NO_EXTENSIONS=1` selects the pure one), `loop` the event loop; `agentLoop` and
`agentEngine` are what the agent's `_test/stats` says (`null` when it lacks them). Without an
agent command `acp-fast testy` is spawned (on the same `--loop`, this interpreter and this
`acp_fast`, whatever the working directory).

`startupMs` is the wall time from just before the agent is spawned to the decoded
`initialize` response: the agent's whole start (its interpreter, its imports, its first
read), as an editor waits for it. The client has done its own imports and built its connection
before it spawns the agent, so none of its own start-up is inside. `initMs` is the part after
the request was sent; `startupTreeCpuMs` the CPU time the spawned process and its descendants
had used by then (`/proc`, see below; `null` elsewhere), which contention on a shared
machine stretches far less than the wall time. An agent on a source tree without bytecode
caches (`PYTHONDONTWRITEBYTECODE`) compiles its modules in there: `acp-fast bench` compiles
them before it measures (`acp_fast.benchmark.bytecode`).

Beyond the contract, the client measures the process it spawned (the *child*) and that
child's descendants from `/proc` (Linux; the fields are `null` elsewhere), so that a
process between the client and the agent, such as `acp-fast conductor` and its proxies,
is measured too: `streamChildCpuUsPerMsg` is the child's own CPU time (every thread's
`/proc/PID/task/TID/schedstat` run time, nanosecond resolution) during the streaming
prompt ÷ N; `streamTreeCpuUsPerMsg` the same for the child and all its descendants (with
a conductor: conductor + proxies + agent); `childMaxRssKiB` the child's peak RSS
(`VmHWM` of `/proc/PID/status`, read before the connection closes; the kernel resets it
at `execve`, so unlike `ru_maxrss` it is the child's own peak). `--hops H` says that
the child forwards every notification H times (a conductor with k proxies: k + 1) and adds
`streamChildCpuUsPerHop` = `streamChildCpuUsPerMsg` ÷ H.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from acp_fast.transport.loop import LOOP_CHOICES as LOOPS
from acp_fast.transport.loop import loop_name
from acp_fast.transport.loop import run as run_loop
from acp_fast.protocol.facts import SESSION_REQUEST_PERMISSION

if TYPE_CHECKING:
    from acp_fast.jsontypes import Json, JsonObject

LARGE_CHUNK = 1048576

__all__ = ["main", "parse_args"]


class Args(argparse.Namespace):
    v2: bool
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
    env: dict[str, str]
    loop: str
    hops: int


def parse_args(argv: list[str]) -> Args:
    """Parse the client's command line (the options, then `--` and the agent command).

    Args:
        argv: the arguments without the program name.

    Returns:
        The options, with the workload sizes filled in from `ACP_N`/`ACP_CHUNK` where not given.
    """
    if "--" in argv:
        i = argv.index("--")
        opts, cmd = argv[:i], argv[i + 1:]
    else:
        opts, cmd = argv, []
    p = argparse.ArgumentParser(prog="acp_fast.benchmark.client",
                                description="ACP benchmark client on acp_fast (peers/README.md contract)")
    p.add_argument("--v2", action="store_true", help="speak draft ACP v2 (Client.v2())")
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--m", type=int, default=0)
    p.add_argument("--rtt-method", choices=["echo", "prompt", "none"], default="echo")
    p.add_argument("--inflight", type=int, default=0)
    p.add_argument("--inflight-m", type=int, default=None)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--permission", action="store_true")
    p.add_argument("--raw-updates", action="store_true",
                   help="accepted for CLI parity with the peers; no effect (updates go through on_session_update)")
    p.add_argument("--large", action="store_true")
    p.add_argument("--loop", choices=LOOPS, default="auto", help="event loop (default: auto, uvloop when installed)")
    p.add_argument("--hops", type=int, default=0,
                   help="the spawned process forwards each notification H times (a conductor with k proxies: "
                        "k + 1); reports its CPU per notification per hop")
    a = p.parse_args(opts, namespace=Args())
    env: dict[str, str] = {}
    if a.large and "ACP_CHUNK" not in os.environ:
        env["ACP_CHUNK"] = str(LARGE_CHUNK)
    a.chunk = int(env.get("ACP_CHUNK", os.environ.get("ACP_CHUNK", "100")))
    if a.n is None:
        a.n = 100 if a.large else int(os.environ.get("ACP_N", "1000"))
    if a.inflight_m is None:
        a.inflight_m = a.m
    a.inflight = max(0, a.inflight)
    if not cmd:  # Testy on this interpreter and this acp_fast, whatever the working directory
        from acp_fast.conductor.spec import same_acp_fast

        cmd, extra = same_acp_fast([sys.executable, "-m", "acp_fast.cli.main", "testy", "--loop", a.loop])
        env.update(extra)
    a.cmd = cmd
    a.env = env
    if a.v2 and (a.permission or a.rtt_method == "prompt"):
        p.error("--permission and --rtt-method prompt are v1-only")
    return a


# -- statistics (same definitions as peers/pysdk/_common.py) ----------------------------------


async def run_requests(m: int, inflight: int, one: Callable[[int], Awaitable[None]]) -> tuple[float, list[float]]:
    lat = [0.0] * m
    it = iter(range(m))
    perf = time.perf_counter

    async def worker() -> None:
        for i in it:
            t = perf()
            await one(i)
            lat[i] = (perf() - t) * 1000.0

    t0 = perf()
    await asyncio.gather(*(worker() for _ in range(min(inflight, m))))
    return (perf() - t0) * 1000.0, lat


def _percentile(s: list[float], p: float) -> float:
    return s[min(len(s) - 1, max(0, math.ceil(p * len(s)) - 1))]


def latency_summary(rate: str, prefix: str, total_ms: float, lat_ms: list[float]) -> JsonObject:
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


class _State:
    __slots__ = ("chunks", "first_update_at", "permission_requests", "text_bytes", "updates")

    def __init__(self) -> None:
        self.permission_requests = 0
        self.reset()

    def reset(self) -> None:
        self.updates = 0
        self.chunks = 0
        self.text_bytes = 0
        self.first_update_at = 0.0


async def _stats(cx: Any) -> JsonObject | None:
    try:
        return await cx.send_request("_test/stats", {})  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - agent without the _test/stats extension
        return None


async def _cpu(cx: Any) -> tuple[float, float | None]:
    s = await _stats(cx)
    agent = None if s is None else float(s["userCpuUs"] + s["systemCpuUs"])
    return time.process_time() * 1e6, agent


# -- the spawned process and its descendants, from /proc (Linux) --------------------------------


def _task_cpu_ns(pid: int) -> int | None:
    """Run time of every thread of `pid` in ns (`schedstat`), `None` when unreadable."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total = 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total


def _descendants(pid: int) -> list[int]:
    """The pids under `pid` (children, their children, ...), from the ppid of every /proc entry."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            out.append(c)
            todo.append(c)
    return out


def _tree_cpu(pid: int | None) -> tuple[int, int] | None:
    """`(child ns, child + descendants ns)` of CPU time, or `None` without /proc."""
    if pid is None:
        return None
    own = _task_cpu_ns(pid)
    if own is None:
        return None
    total = own
    for d in _descendants(pid):
        total += _task_cpu_ns(d) or 0
    return own, total


def _peak_rss_kib(pid: int | None) -> int | None:
    """`VmHWM` of `pid` in KiB (its own peak RSS since exec), `None` when unreadable."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _tree_per_msg(a: tuple[int, int] | None, b: tuple[int, int] | None, n: int, hops: int) -> JsonObject:
    if a is None or b is None or n <= 0:
        return {"streamChildCpuUsPerMsg": None, "streamTreeCpuUsPerMsg": None}
    child = (b[0] - a[0]) / 1000.0 / n
    out: JsonObject = {"streamChildCpuUsPerMsg": round(child, 3),
                           "streamTreeCpuUsPerMsg": round((b[1] - a[1]) / 1000.0 / n, 3)}
    if hops > 0:
        out["streamChildCpuUsPerHop"] = round(child / hops, 3)
    return out


def _cpu_per_msg(a: tuple[float, float | None], b: tuple[float, float | None], n: int) -> JsonObject:
    if n <= 0:
        return {}
    agent = None if a[1] is None or b[1] is None else round((b[1] - a[1]) / n, 2)
    return {"streamClientCpuUsPerMsg": round((b[0] - a[0]) / n, 2), "streamAgentCpuUsPerMsg": agent}


async def run(args: Args) -> JsonObject:
    from acp_fast import IMPLEMENTATION, Client, __version__
    from acp_fast.transport import spawn

    st = _State()
    perf = time.perf_counter

    def on_update(u: Any, cx: Any) -> None:
        if st.first_update_at == 0.0:
            st.first_update_at = perf()
        st.updates += 1
        if u.kind == "agent_message_chunk":
            st.chunks += 1
            content = u.payload.get("content")
            if type(content) is dict and content.get("type") == "text":
                st.text_bytes += len(content["text"])  # the decoded text, read for real

    def on_permission(params: Json, cx: Any) -> JsonObject:
        st.permission_requests += 1
        return {"outcome": {"outcome": "selected", "optionId": params["options"][0]["optionId"]}}

    builder = (Client.v2() if args.v2 else Client.builder()).with_info("acp-fast-bench-client", __version__)
    builder.on_session_update(on_update)
    if not args.v2:
        builder.on_request(SESSION_REQUEST_PERMISSION, on_permission)

    def on_stderr(data: bytes) -> None:
        sys.stderr.buffer.write(data)
        sys.stderr.flush()

    t_spawn = perf()
    stream = await spawn(args.cmd, env=args.env, on_stderr=on_stderr)
    child_pid: int | None = getattr(stream, "pid", None)
    out: JsonObject = {}

    async def main(cx: Any) -> JsonObject:
        t0 = perf()
        if args.v2:
            init = await cx.initialize({"capabilities": {}})
        else:
            init = await cx.initialize({"clientCapabilities": {"fs": {"readTextFile": False,
                                                                      "writeTextFile": False}}})
        t_init = perf()
        tree_init = _tree_cpu(child_pid)  # outside both timings: a /proc walk
        t_new0 = perf()
        if args.v2:
            session = (await cx.build_session(os.getcwd())).session
        else:
            session = (await cx.build_session(os.getcwd())).session
        t_new = perf()

        async def turn(text: str) -> str:
            if args.v2:
                epoch = session.idle_epoch
                await session.send_prompt(text)
                stop = await session.wait_idle(after=epoch)
                return "" if stop is None else stop.kind
            resp = await session.send_prompt(text)
            return resp.get("stopReason")  # type: ignore[no-any-return]

        async def echo(i: int) -> None:
            r = await cx.send_request("_test/echo", {"i": i})
            if r.get("i") != i:
                raise RuntimeError(f"echo mismatch at {i}: {r!r}")

        async def empty_prompt(i: int) -> None:
            await session.send_prompt("0")

        if args.warmup > 0:
            await turn(f"warmup {args.warmup}")
            if args.m > 0 and args.rtt_method == "echo":
                for i in range(args.warmup):
                    await echo(i)
            st.reset()

        out.update({
            "sdk": "acp_fast",
            "sdkVersion": __version__,
            "engine": IMPLEMENTATION,
            "loop": loop_name(),
            "agentCmd": " ".join(args.cmd),
            "protocolVersion": init.get("protocolVersion"),
            "agentInfo": init.get("info" if args.v2 else "agentInfo"),
            "startupMs": round((t_init - t_spawn) * 1000, 3),
            "initMs": round((t_init - t0) * 1000, 3),
            "startupTreeCpuMs": None if tree_init is None else round(tree_init[1] / 1e6, 3),
            "sessionNewMs": round((t_new - t_new0) * 1000, 3),
            "n": args.n,
            "chunkSize": args.chunk,
            "warmup": args.warmup,
            "rawUpdates": args.raw_updates,
        })

        if args.n > 0 or args.permission:
            text = f"{'permission ' if args.permission else ''}stream {args.n} chunks"
            cpu0 = await _cpu(cx)
            tree0 = _tree_cpu(child_pid)
            tp0 = perf()
            stop = await turn(text)
            tp1 = perf()
            tree1 = _tree_cpu(child_pid)
            cpu1 = await _cpu(cx)
            secs = tp1 - tp0
            expected = args.n + (1 if args.permission else 0)
            n_bytes = args.n * args.chunk
            out.update(
                updatesReceived=st.chunks,
                updatesOk=st.chunks == expected,
                textBytes=st.text_bytes,
                textOk=st.text_bytes >= n_bytes if args.permission else st.text_bytes == n_bytes,
                permissionRequests=st.permission_requests,
                stopReason=stop,
                promptMs=round(secs * 1000, 3),
                firstUpdateMs=round((st.first_update_at - tp0) * 1000, 3) if st.first_update_at else None,
                notificationsPerSec=round(args.n / secs) if args.n > 0 else None,
                textMiBPerSec=round(st.text_bytes / 1048576 / secs, 2) if args.n > 0 else None,
                **_cpu_per_msg(cpu0, cpu1, args.n),
                **_tree_per_msg(tree0, tree1, args.n, args.hops),
            )

        if args.m > 0 and args.rtt_method != "none":
            total_ms, lat_ms = await run_requests(args.m, 1, echo if args.rtt_method == "echo" else empty_prompt)
            out.update(rttMethod=args.rtt_method, m=args.m)
            out.update(latency_summary("roundTripsPerSec", "", total_ms, lat_ms))

        if args.inflight > 0 and args.inflight_m > 0:
            total_ms, lat_ms = await run_requests(args.inflight_m, args.inflight, echo)
            out.update(inflight=args.inflight, inflightM=args.inflight_m)
            out.update(latency_summary("requestsPerSec", "inflight", total_ms, lat_ms))

        stats = await _stats(cx)
        out["agentMaxRssKiB"] = None if stats is None else stats.get("maxRssKiB")
        out["agentLoop"] = None if stats is None else stats.get("loop")
        out["agentEngine"] = None if stats is None else stats.get("engine")
        out["agentCpuMs"] = None if stats is None else round((stats["userCpuUs"] + stats["systemCpuUs"]) / 1000)
        out["childMaxRssKiB"] = _peak_rss_kib(child_pid)
        if args.hops > 0:
            out["hops"] = args.hops
        ru = resource.getrusage(resource.RUSAGE_SELF)
        out["clientMaxRssKiB"] = ru.ru_maxrss
        out["clientCpuMs"] = round((ru.ru_utime + ru.ru_stime) * 1000)
        return out

    await builder.connect_with(stream, main)
    rc = getattr(stream, "returncode", None)
    out["agentExit"] = rc
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark client and print its one JSON result line on stdout.

    Args:
        argv: the arguments (default: `sys.argv[1:]`).

    Returns:
        The process exit status.
    """
    args = parse_args(sys.argv[1:] if argv is None else argv)
    result = run_loop(run(args), loop=args.loop)
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
