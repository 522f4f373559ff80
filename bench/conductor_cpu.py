"""Conductor CPU per forwarded notification per hop (the issue's "≤ 1 µs" target).

Runs ``acp-fast conductor agent <raw proxy>×P "acp-fast testy --stream preencoded"`` as a
child process for each chain length P, drives it as a raw client over its stdio (initialize,
``session/new``, one ``stream N`` prompt), and reads the conductor's CPU time (user + system,
all threads, from ``/proc/<pid>/task/*/schedstat``, nanoseconds) around the streaming prompt
only. Each notification crosses P + 1 hops of the conductor (agent → proxy P-1 … proxy 0 →
client), so the figure is ``conductor CPU ÷ (N × (P + 1))``. The proxies are
``bench/raw_proxy.py`` (cheap raw-line pass-throughs), the agent re-sends one pre-encoded
line (a fast producer), so the conductor reads large chunks as it would under load.

Usage::

    python -m bench.conductor_cpu                 # P = 0, 1, 3; N = 200000; 3 runs each
    python -m bench.conductor_cpu --n 50000 --proxies 1 --runs 5 --engine py --loop asyncio

The conductor and the agent run this interpreter and the ``acp_fast`` this module imported,
whatever the working directory (``acp_fast.benchmark.runtime``), through the reporting launcher:
each reports its engine twin, loop and package after every run, and a run where either
disagrees with ``--engine`` / ``--loop`` stops the script instead of printing a number.

Prints one line per chain length: the median over runs of µs per notification per hop,
the runs, notifications/s seen by the client, the load average and what ran.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from acp_fast.benchmark.launch import REPORT_ENV, read_reports
from acp_fast.benchmark.runtime import PACKAGE_DIR, Process, RuntimeMismatch, check, child_env, launch, summary
from acp_fast.transport.loop import resolve_loop

REPO = Path(__file__).resolve().parent.parent
RAW_PROXY = Path(__file__).resolve().parent / "raw_proxy.py"


def cpu_ns(pid: int) -> int:
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


class Client:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.buf = b""
        self.lines: list[bytes] = []

    def send(self, rid: int, method: str, params: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                          "params": params}).encode() + b"\n")
        self.proc.stdin.flush()

    def until(self, rid: int) -> tuple[dict[str, object], int]:
        """Read until the response ``rid``; returns it and how many lines came before."""
        assert self.proc.stdout is not None
        seen = 0
        fd = self.proc.stdout.fileno()
        while True:
            while self.lines:
                line = self.lines.pop(0)
                if line.startswith(b'{"jsonrpc":"2.0","method"'):
                    seen += 1
                    continue
                msg = json.loads(line)
                if msg.get("id") == rid and "method" not in msg:
                    return msg, seen
                seen += 1
            data = os.read(fd, 1 << 20)
            if not data:
                raise EOFError("the conductor closed its output")
            parts = (self.buf + data).split(b"\n")
            self.buf = parts.pop()
            self.lines.extend(p for p in parts if p)


def one_run(proxies: int, n: int, engine: str, loop: str) -> tuple[float, float, str]:
    py = sys.executable
    fd, report = tempfile.mkstemp(prefix="acp-fast-bench-", suffix=".jsonl")
    os.close(fd)
    env = {**os.environ, **child_env(), REPORT_ENV: report}
    if engine != "auto":
        env["ACP_FAST_NO_EXTENSIONS"] = "1" if engine == "py" else "0"
    agent = shlex.join(launch("agent", "acp_fast.cli.main", "testy", "--stream", "preencoded", "--engine", engine,
                              "--loop", loop))
    comps = [f"{py} {RAW_PROXY}"] * proxies + [agent]
    proc = subprocess.Popen([*launch("conductor", "acp_fast.cli.main", "conductor", "--loop", loop, "agent", *comps)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=REPO)
    try:
        c = Client(proc)
        c.send(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        reply, _ = c.until(0)
        assert "result" in reply, reply
        c.send(1, "session/new", {"cwd": str(REPO), "mcpServers": []})
        reply, _ = c.until(1)
        sid = reply["result"]["sessionId"]  # type: ignore[index]
        c.send(2, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "warmup 2000"}]})
        c.until(2)
        before = cpu_ns(proc.pid)
        t0 = time.perf_counter()
        c.send(3, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": f"stream {n}"}]})
        reply, seen = c.until(3)
        wall = time.perf_counter() - t0
        cpu = cpu_ns(proc.pid) - before
        assert "result" in reply and seen >= n, (reply, seen)
        try:  # the conductor and the agent ran what this run says it measures
            ran = check(read_reports(report), (Process("conductor"), Process("agent")),
                        engine=None if engine == "auto" else engine, loop=loop)
        except RuntimeMismatch as exc:
            raise SystemExit(f"proxies={proxies}: the processes did not run what this run measures: {exc}") from None
        return cpu / 1e3 / (n * (proxies + 1)), n / wall, summary(ran)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.unlink(report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.conductor_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000, help="notifications per run (default 200000)")
    parser.add_argument("--proxies", default="0,1,3", help="chain lengths (default 0,1,3)")
    parser.add_argument("--runs", type=int, default=3, help="runs per chain length (median; default 3)")
    parser.add_argument("--engine", choices=("auto", "c", "py"), default="auto",
                        help="engine of the conductor and the agent (default auto)")
    parser.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="auto",
                        help="event loop of the conductor and the agent (default auto: uvloop when installed)")
    args = parser.parse_args(argv)
    loop = resolve_loop(args.loop)
    print(f"acp_fast from {PACKAGE_DIR} on {sys.executable}; loop {loop}", flush=True)
    for p in (int(x) for x in args.proxies.split(",")):
        load0 = os.getloadavg()[0]
        results = [one_run(p, args.n, args.engine, loop) for _ in range(args.runs)]
        per_hop = [r[0] for r in results]
        rates = [r[1] for r in results]
        print(f"proxies={p} hops={p + 1} N={args.n}: conductor CPU {statistics.median(per_hop):.3f} µs "
              f"per notification per hop (runs: {', '.join(f'{x:.3f}' for x in per_hop)}); "
              f"client sees {statistics.median(rates) / 1e3:.0f}k notifications/s; "
              f"load {load0:.2f}→{os.getloadavg()[0]:.2f}; ran (conductor + agent): "
              f"{', '.join(sorted({r[2] for r in results}))}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
