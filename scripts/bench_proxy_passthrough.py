#!/usr/bin/env python3
"""CPU cost of one pass-through ``Proxy.v2()`` per forwarded message (two processes).

The proxy runs in a child process (``--child``): a ``Proxy.v2()`` with no handlers but one
predecessor request, ``_bench/cpu``, that answers ``time.process_time()`` of the proxy
process. This driver plays the conductor on the proxy's stdio with raw bytes: it sends
``_proxy/initialize``, answers the proxy's wrapped ``initialize``, then for each direction
pushes N messages through and reads the N forwarded ones back:

* ``s->p notif``: ``session/update`` inside ``_proxy/successor`` (the agent's stream);
* ``p->s notif``: plain ``session/update`` from the predecessor (forwarded wrapped);
* ``s->p req``: ``_x/echo`` requests inside ``_proxy/successor``, answered by the driver
  (forwarded request + forwarded response: one round trip through the proxy).

For each: proxy CPU µs per message = Δ ``_bench/cpu`` / N; median of ``--repeat`` runs
(each a fresh child). The child runs this interpreter and the ``acp_fast`` this script imports
(the installed one; the checkout's only when none is installed), whatever the working
directory, and answers ``_bench/runtime`` with its engine twin, loop and package: a child that
runs anything else than ``--engine`` on ``--loop`` from that package stops the script.
Prints ``/proc/loadavg`` before and after::

    python scripts/bench_proxy_passthrough.py [-n 20000] [--repeat 3] [--loop asyncio uvloop]
        [--kind "s->p notif" …] [--size TEXT_BYTES] [--engine c|py]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
try:  # the installed acp_fast (this script's folder, not the working directory, is on sys.path)
    import acp_fast  # noqa: F401
except ImportError:  # a bare checkout: its own
    sys.path.insert(0, str(_ROOT))

SIZE = 0
UPDATE = {"sessionId": "sess-0001", "update": {
    "sessionUpdate": "agent_message_chunk", "messageId": "m-1",
    "content": {"type": "text", "text": "Hello, this is a streamed chunk of an agent message. " * 2}}}


def child(loop: str) -> None:
    from acp_fast import IMPLEMENTATION, Proxy, run_agent_stdio
    from acp_fast.transport.loop import loop_name

    package = os.path.dirname(os.path.realpath(sys.modules["acp_fast"].__file__ or ""))
    proxy = Proxy.v2().on_request("_bench/cpu", lambda params, cx: time.process_time())
    proxy.on_request("_bench/runtime", lambda params, cx: {"engine": IMPLEMENTATION, "loop": loop_name(),
                                                          "acp_fast": package})
    run_agent_stdio(proxy, loop=loop)


class Driver:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.w = proc.stdin
        self.r = proc.stdout
        self.next_id = 100

    def send(self, obj: object) -> None:
        self.w.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    async def line(self) -> dict:
        data = await self.r.readline()
        if not data:
            raise EOFError("proxy closed its stdout")
        return json.loads(data)  # type: ignore[no-any-return]

    async def call(self, method: str, params: object = None) -> object:
        self.next_id += 1
        rid = self.next_id
        msg: dict = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        while True:
            got = await self.line()
            if got.get("id") == rid and "method" not in got:
                if "error" in got:
                    raise RuntimeError(got["error"])
                return got["result"]

    async def init(self) -> None:
        self.send({"jsonrpc": "2.0", "id": 1, "method": "_proxy/initialize",
                   "params": {"protocolVersion": 2, "info": {"name": "bench", "version": "1"}}})
        while True:
            got = await self.line()
            if got.get("method") == "_proxy/successor":  # the wrapped initialize
                self.send({"jsonrpc": "2.0", "id": got["id"], "result": {
                    "protocolVersion": 2, "info": {"name": "agent", "version": "1"}, "capabilities": {}}})
            elif got.get("id") == 1:
                assert "result" in got, got
                return

    async def pump(self, lines: list[bytes], expect: int, answer: bool) -> None:
        async def reader() -> None:
            seen = 0
            while seen < expect:
                data = await self.r.readline()
                if not data:
                    raise EOFError("proxy closed its stdout")
                if answer and b'"id"' in data and b'"method"' in data:
                    got = json.loads(data)
                    self.w.write(b'{"jsonrpc":"2.0","id":' + json.dumps(got["id"]).encode()
                                 + b',"result":{"ok":true}}\n')
                    continue
                seen += 1

        task = asyncio.ensure_future(reader())
        for i in range(0, len(lines), 256):
            self.w.write(b"".join(lines[i:i + 256]))
            await self.w.drain()
            if task.done():
                break
        await task


def workload(kind: str, n: int) -> tuple[list[bytes], bool]:
    if SIZE:
        UPDATE["update"]["content"]["text"] = "x" * SIZE  # type: ignore[index]
    if kind == "s->p notif":
        line = json.dumps({"jsonrpc": "2.0", "method": "_proxy/successor",
                           "params": {"method": "session/update", "params": UPDATE}},
                          separators=(",", ":")).encode() + b"\n"
        return [line] * n, False
    if kind == "p->s notif":
        line = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": UPDATE},
                          separators=(",", ":")).encode() + b"\n"
        return [line] * n, False
    lines = [json.dumps({"jsonrpc": "2.0", "id": 10_000 + i, "method": "_proxy/successor",
                         "params": {"method": "_x/echo", "params": UPDATE}},
                        separators=(",", ":")).encode() + b"\n" for i in range(n)]
    return lines, True


async def one_run(kind: str, n: int, loop: str, env: dict[str, str], engine: str) -> float:
    from acp_fast.benchmark.runtime import PACKAGE_DIR

    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--child", "--loop", loop,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, limit=1 << 24)
    d = Driver(proc)
    try:
        await d.init()
        ran = await d.call("_bench/runtime")
        want = {"engine": engine, "loop": loop, "acp_fast": PACKAGE_DIR}
        if ran != want:  # a number for something else than what this run says it measures: none
            raise SystemExit(f"the proxy ran {ran}, not {want}")
        lines, answer = workload(kind, n)
        warm = min(2000, n)
        await d.pump(lines[:warm], warm, answer)
        before = await d.call("_bench/cpu")
        await d.pump(lines, n, answer)
        after = await d.call("_bench/cpu")
        assert isinstance(before, float) and isinstance(after, float)
        return (after - before) / n * 1e6
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        await proc.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("-n", type=int, default=20_000, help="messages per run (default 20000)")
    p.add_argument("--repeat", type=int, default=3, help="runs per cell (median; default 3)")
    p.add_argument("--loop", nargs="+", default=["asyncio", "uvloop"])
    p.add_argument("--kind", nargs="+", default=["s->p notif", "p->s notif", "s->p req"])
    p.add_argument("--engine", choices=("c", "py"), default="c")
    p.add_argument("--size", type=int, default=0, help="text bytes per update (default: ~110)")
    args = p.parse_args()
    global SIZE
    SIZE = args.size
    if args.child:
        child(args.loop[0])
        return
    from acp_fast.benchmark.runtime import child_env

    env = {**os.environ, **child_env()}  # the child (a script) imports the acp_fast this one did
    env["ACP_FAST_NO_EXTENSIONS"] = "1" if args.engine == "py" else "0"
    with open("/proc/loadavg") as f:
        print("loadavg before:", f.read().strip())
    print(f"engine={args.engine} n={args.n} repeat={args.repeat} size={args.size or 'default'}")
    for loop in args.loop:
        for kind in args.kind:
            runs = [asyncio.run(one_run(kind, args.n, loop, env, args.engine)) for _ in range(args.repeat)]
            print(f"{loop:8} {kind:11} proxy CPU µs/msg median {statistics.median(runs):6.2f}"
                  f"  runs {' '.join(f'{r:.2f}' for r in runs)}")
    with open("/proc/loadavg") as f:
        print("loadavg after:", f.read().strip())


if __name__ == "__main__":
    main()
