"""2 fronts + 2 hosts hold K concurrent connections, one session each: all served? what memory?

Starts a `redis-server` on a free loopback port, two agent hosts (`acp-fast host --testy`,
K/2 slots each: Testy in-process) and two fronts (`acp-fast serve --redis`), then opens K
WebSocket connections, alternating fronts, each with `initialize` and `session/new`, and keeps
them all open; once all are held, each sends one `_test/echo` and checks its answer. Prints
how many were served and the RSS growth of each process (front, host, redis) per connection
it holds (fronts and hosts: K/2 each; redis: K), from before the connections to all held.

    python bench/fleet_connections.py [--connections 2000] [--loop uvloop]

File descriptors: every connection is a socket in the client, one in its front and one in
Redis, and a front holds a Redis connection per waiting reader (K/2 each); the script raises
its own soft `RLIMIT_NOFILE` to the hard limit (the processes it starts inherit it) and says
so; Redis's `maxclients` is set to K + 1000.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO

CLI = [sys.executable, "-m", "acp_fast.cli.main"]


def _rss(pid: int) -> int:
    """Resident bytes of a process (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


#: the last stderr lines of each process started (drained: a full pipe would stop it)
_TAILS: dict[int, collections.deque[str]] = {}


def _drain(pipe: IO[bytes], tail: collections.deque[str]) -> None:
    for raw in pipe:
        tail.append(raw.decode(errors="replace").rstrip())


def _start(args: list[str], ready: str) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen([*CLI, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode(errors="replace")
        if re.search(ready, line):
            tail = _TAILS[proc.pid] = collections.deque(maxlen=20)
            threading.Thread(target=_drain, args=(proc.stderr, tail), daemon=True).start()
            return proc, line
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"acp-fast {' '.join(args)} did not get ready")


async def _hold(urls: list[str], k: int) -> tuple[list[object], int]:
    """K WebSocket connections, alternating `urls`, each with a session; the held ones and how
    many then answered one echo each."""
    import websockets

    init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": 1, "clientCapabilities": {}}})
    new = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}})
    held: list[object] = []
    gate = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        async with gate:
            ws = await websockets.connect(urls[i % len(urls)], open_timeout=120, max_queue=None)
            await ws.send(init)
            await asyncio.wait_for(ws.recv(), 60)
            await ws.send(new)
            while True:
                got = json.loads(await asyncio.wait_for(ws.recv(), 60))
                if got.get("id") == 1:
                    break
            if "sessionId" in str(got.get("result")):
                held.append(ws)

    results = await asyncio.gather(*[one(i) for i in range(k)], return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        print(f"{len(errors)} connections failed, the first: {errors[0]!r}", file=sys.stderr)

    async def echo(i: int, ws: object) -> bool:
        async with gate:
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "_test/echo", "params": {"i": i}}))  # type: ignore[attr-defined]
            while True:  # the session's notifications may come first
                got = json.loads(await asyncio.wait_for(ws.recv(), 60))  # type: ignore[attr-defined]
                if got.get("id") == 2:
                    return bool(got.get("result") == {"i": i})

    answered = await asyncio.gather(*[echo(i, ws) for i, ws in enumerate(held)], return_exceptions=True)
    return held, sum(1 for a in answered if a is True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--loop", default="uvloop")
    args = ap.parse_args()
    k = args.connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"RLIMIT_NOFILE: soft {soft} -> {hard} (hard {hard}); inherited by the processes started here")
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("redis-server is not on PATH")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        procs["redis"] = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                           "--appendonly", "no", "--dir", tmp, "--maxclients", str(k + 1000)],
                                          stdout=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            slots = (k + 1) // 2
            for name in ("host1", "host2"):
                procs[name], _ = _start(["host", "--redis", url, "--testy", "--versions", "1", "--slots", str(slots),
                                         "--loop", args.loop], "registered at")
            fronts = []
            for name in ("front1", "front2"):
                procs[name], line = _start(["serve", "--redis", url, "--port", "0", "--loop", args.loop,
                                            "--max-connections", str(k)], "listening on")
                fronts.append(re.findall(r"ws://\S+", line)[0])
            before = {name: _rss(p.pid) for name, p in procs.items()}
            t0 = time.perf_counter()
            held, echoed = asyncio.run(_hold(fronts, k))
            seconds = time.perf_counter() - t0
            after = {name: _rss(p.pid) for name, p in procs.items()}
            print(f"{len(held)} of {k} connections served (a session each), {echoed} answered an echo with all "
                  f"held; {seconds:.1f} s; load average {os.getloadavg()[0]:.2f}")
            print(f"{'process':8} {'RSS before':>11} {'RSS held':>10} {'KiB per connection':>19}")
            for name in procs:
                share = len(held) if name == "redis" else len(held) / 2
                growth = (after[name] - before[name]) / max(share, 1) / 1024
                print(f"{name:8} {before[name] / 2**20:9.1f} M {after[name] / 2**20:8.1f} M {growth:19.1f}")
            if len(held) != k or echoed != k:
                for name, p in procs.items():
                    for line in _TAILS.get(p.pid, ()):
                        print(f"{name}: {line}")
                sys.exit(1)
        finally:
            for p in procs.values():
                p.terminate()
            for p in procs.values():
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    main()
