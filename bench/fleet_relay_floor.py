"""The floor pair of the fleet's round trip: a relay front and a relay host, nothing else.

A fleet round trip crosses a front (WebSocket in, Redis out), Redis, a host (Redis in, the
agent's stream out and back) and Redis again. This script runs that path with no fleet logic
at all: the *relay front* is an ASGI app under uvicorn that appends each WebSocket message to
one Redis stream and sends each line of the other stream as a text frame; the *relay host*
reads the first stream, writes each entry to an in-process Testy (as `acp-fast host --testy`
runs it) and appends what Testy writes, one entry per flush, to the second. Both use the
fleet store's own lean Redis client (`acp_fast.fleet._resp`), blocked in `XREAD BLOCK`.
No connection record, no routes, no bounds, no read marks, no slots, one connection.

It measures sequential round trips (`acp_fast.benchmark.remote_client URL roundtrips N`, the
same client as the `fleet` rows of `acp-fast bench --remote`) against three servers, each run
in turn, `--rounds` times:

* `serve`: single-process `acp-fast serve --testy` (Testy in-process);
* `relay`: the relay front + relay host + Redis (the bare floor);
* `script`: the same relay, but each append is one small Lua script that checks the stream's
  length against a bound before its `XADD` (`EVALSHA`, one per direction): what keeping any
  bound inside Redis costs at the least, with one script call per write;
* `store`: the same relay, but every Redis step is the fleet store's own call
  (`create_connection`, `push_input`, `read_inputs`, `append_output`, `follow_output`: its
  Lua scripts, connection record and bounds), still with no front or host logic (no routes,
  read marks, TTL touches, pacing or host checks): the floor of a relay that keeps the
  issue's bounds with this store;
* `fleet`: `acp-fast serve --redis` + `acp-fast host --redis --testy` + Redis.

and prints each one's median round trip and its processes' CPU per round trip (user + system,
from psutil, over the client's run: warm-up included, divided by every round trip it made;
steadier than wall time on a shared machine), and what `relay`, `script`, `store` and `fleet` add
to `serve`: `relay` is the floor of any fleet on this machine, `script` the floor of one that
keeps its bounds in Redis with a script per write, `store` the floor of one built on this
store, and `fleet - store` what the front's and host's own logic costs.

    python bench/fleet_relay_floor.py [--n 2000] [--rounds 3]

Needs `redis-server` (>= 7) on PATH and the `fleet`, `remote` and `bench` extras; it starts every
server on a free loopback port and stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

IN, OUT = "relay:in", "relay:out"
#: Round trips the client makes before it starts timing.
WARMUP = 200
#: The `script` row's append: a length check, then the `XADD` (a bound no run reaches: its
#: cost is the check's, the refusal never happens).
_BOUNDED_ADD = """
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
return redis.call('XADD', KEYS[1], '*', 'd', ARGV[1])
"""
#: The host id of the `store` relay.
_HOST = "floor"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lean(url: str) -> Any:
    from acp_fast.fleet._resp import RespClient

    return RespClient(url, socket_timeout=5.0, connect_timeout=5.0, max_connections=8)


def _adder(redis: Any, key: str, scripted: bool) -> Callable[[bytes], Awaitable[object]]:
    """An append of one entry to `key`: a plain `XADD`, or the `script` row's bounded one."""
    if not scripted:
        return lambda data: redis.call("XADD", key, "*", "d", data)
    from acp_fast.fleet._resp import Script

    bounded = Script(_BOUNDED_ADD)
    return lambda data: redis.script(bounded, (key,), (data, 1 << 40))


async def _flushes(stream: Any, write: Callable[[bytes], Awaitable[object]]) -> None:
    """Hand `write` the whole lines the agent's `stream` wrote (without the last newline),
    all that waits each time: one call per flush."""
    buffer = bytearray()
    wake = asyncio.Event()

    def on_data(data: bytes) -> None:
        buffer.extend(data)
        wake.set()

    stream.attach(on_data, lambda exc: None, lambda ok: None)
    while True:
        await wake.wait()
        wake.clear()
        end = buffer.rfind(b"\n")
        if end >= 0:
            data = bytes(buffer[:end])
            del buffer[:end + 1]
            await write(data)


async def _relay_host(url: str, scripted: bool = False) -> None:
    """Redis `IN` -> Testy in-process -> Redis `OUT`, one entry per flush."""
    from acp_fast.remote.server import servable_opener
    from acp_fast.testy import build

    opener, _ = servable_opener(build((1,)))
    stream = await opener()
    redis = _lean(url)
    await redis.call("DEL", IN, OUT)
    pump = asyncio.ensure_future(_flushes(stream, _adder(redis, OUT, scripted)))
    after: Any = b"$"
    print("ready", flush=True)
    try:
        while True:
            (got,) = await redis.blocking([("XREAD", "BLOCK", 5000, "STREAMS", IN, after)], 5.0)
            for eid, fields in (got[0][1] if got else ()):
                stream.write(fields[1] + b"\n")
                after = eid
    finally:
        pump.cancel()


async def _store_host(url: str) -> None:
    """The `store` relay's host: the fleet store's own calls (`read_inputs`, `append_output`:
    its scripts, record and bounds) around an in-process Testy, and nothing else."""
    from acp_fast.fleet import STREAM_START, RedisStore
    from acp_fast.remote.server import servable_opener
    from acp_fast.testy import build

    store = RedisStore(url, prefix="floor:")
    await store.register_host(_HOST, 4, 60.0)
    opener, _ = servable_opener(build((1,)))
    inbox = STREAM_START
    links: dict[str, Any] = {}
    consumed: set[str] = set()
    reads = 0
    print("ready", flush=True)

    async def serve(cid: str) -> None:
        stream = await opener()
        links[cid] = [stream, STREAM_START]
        await _flushes(stream, lambda data: store.append_output(cid, data.split(b"\n")))

    tasks = []
    while True:
        after = {cid: link[1] for cid, link in links.items()}
        reads += 1
        free = consumed if reads % 16 == 0 else set()  # frees now and then, as a host frees lazily
        got = await store.read_inputs(_HOST, inbox, after, consumed=free, block=1.0)
        if free:
            consumed = set()
        for cursor, cid in got.assigned:
            inbox = cursor
            tasks.append(asyncio.ensure_future(serve(cid)))
            await asyncio.sleep(0.01)
        for cid, entries in got.entries.items():
            stream = links[cid][0]
            for entry in entries:
                stream.write(b"\n".join(entry.lines) + b"\n")
                links[cid][1] = entry.cursor
            consumed.add(cid)


def _store_front(url: str) -> Any:
    """The `store` relay's front: a connection made by the store; each WebSocket message is a
    `push_input`, each line `follow_output` reads is a text frame (no routes, marks or checks)."""
    from acp_fast.fleet import STREAM_START, RedisStore

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await _not_websocket(scope, receive, send)
            return
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        store = RedisStore(url, prefix="floor:")
        cid = await store.create_connection(_HOST)

        async def reader() -> None:
            after = STREAM_START
            while True:
                for entry in await store.follow_output(cid, after, block=1.0):
                    for line in entry.lines:
                        await send({"type": "websocket.send", "text": line.decode()})
                    after = entry.cursor

        task = asyncio.ensure_future(reader())
        try:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                await store.push_input(cid, [text.encode() if text is not None else message.get("bytes") or b""])
        finally:
            task.cancel()
            await store.close()

    return app


async def _not_websocket(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _relay_front(url: str, scripted: bool = False) -> Any:
    """The ASGI app: WebSocket messages -> Redis `IN`; Redis `OUT` -> one text frame a line."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await _not_websocket(scope, receive, send)
            return
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        redis = _lean(url)
        add = _adder(redis, IN, scripted)
        start = await redis.call("XREVRANGE", OUT, "+", "-", "COUNT", 1)

        async def reader() -> None:
            after = start[0][0] if start else b"0-0"
            while True:
                (got,) = await redis.blocking([("XREAD", "BLOCK", 5000, "STREAMS", OUT, after)], 5.0)
                for eid, fields in (got[0][1] if got else ()):
                    for line in fields[1].split(b"\n"):
                        await send({"type": "websocket.send", "text": line.decode()})
                    after = eid

        task = asyncio.ensure_future(reader())
        try:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                data = text.encode() if text is not None else message.get("bytes") or b""
                await add(data)
        finally:
            task.cancel()
            await redis.close()

    return app


def _role(argv: list[str]) -> None:
    import uvloop

    role, url = argv[0], argv[1]
    if role.endswith("host"):
        uvloop.run(_store_host(url) if role == "store-host" else _relay_host(url, role == "script-host"))
    else:
        import uvicorn

        port = int(argv[2])
        print("ready", flush=True)
        app = _store_front(url) if role == "store-front" else _relay_front(url, role == "script-front")
        uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", log_level="warning", lifespan="on")


class _Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, cmd: list[str], ready: str | None = None, port: int | None = None,
              env: dict[str, str] | None = None, cwd: str | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        self.procs.append(proc)
        deadline = time.monotonic() + 20
        if ready is not None:
            assert proc.stdout is not None
            while ready.encode() not in proc.stdout.readline():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{cmd[:4]} did not start")
        if port is not None:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"{cmd[:4]} did not listen") from None
                    time.sleep(0.05)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


def _roundtrips(url: str, n: int, warmup: int = WARMUP) -> float:
    """Microseconds per round trip of `n` sequential WebSocket round trips (after `warmup`)."""
    out = subprocess.run([sys.executable, "-m", "acp_fast.benchmark.remote_client", url, "roundtrips", str(n),
                          "--warmup", str(warmup), "--loop", "uvloop"], capture_output=True, text=True, timeout=300)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result.get("ok"):
        raise RuntimeError(f"the client failed against {url}: {result}")
    return 1e6 / float(result["rate"])  # microseconds per round trip


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (psutil, as the remote rows measure
    their processes), None when it is gone."""
    import psutil

    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "acp_fast.cli.main", *args]


_ROLES = ("host", "front", "script-host", "script-front", "store-host", "store-front")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in _ROLES:
        return _role(sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="round trips per run")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    server = shutil.which("redis-server")
    if server is None:
        sys.exit("redis-server is not on PATH")
    rows: dict[str, list[float]] = {"serve": [], "relay": [], "script": [], "store": [], "fleet": []}
    cpu: dict[str, dict[str, list[float]]] = {name: {} for name in rows}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in rows:
                procs = _Procs()
                try:
                    port = _free_port()
                    if name != "serve":
                        redis_port = _free_port()
                        procs.start([server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--dir", tmp], port=redis_port)
                        url = f"redis://127.0.0.1:{redis_port}/0"
                    if name == "serve":
                        procs.start(_cli("serve", "--testy", "--versions", "1", "--port", str(port), "--loop", "uvloop"),
                                    port=port)
                    elif name in ("relay", "script", "store"):
                        role = "" if name == "relay" else name + "-"
                        procs.start([sys.executable, __file__, role + "host", url], ready="ready")
                        procs.start([sys.executable, __file__, role + "front", url, str(port)], port=port)
                    else:
                        procs.start(_cli("host", "--redis", url, "--testy", "--versions", "1", "--slots", "4",
                                         "--loop", "uvloop"), ready="registered at")
                        procs.start(_cli("serve", "--redis", url, "--port", str(port), "--loop", "uvloop"), port=port)
                    labels = ("serve",) if name == "serve" else ("redis", "host", "front")
                    before = [_cpu_seconds(proc.pid) for proc in procs.procs]
                    rows[name].append(_roundtrips(f"ws://127.0.0.1:{port}/acp", args.n))
                    for label, proc, start in zip(labels, procs.procs, before):
                        end = _cpu_seconds(proc.pid)
                        if start is not None and end is not None:
                            cpu[name].setdefault(label, []).append(1e6 * (end - start) / (args.n + WARMUP))
                finally:
                    procs.stop()
                print(f"round {r + 1}/{args.rounds}: {name} {rows[name][-1]:.0f} us", file=sys.stderr)
    median = {name: statistics.median(values) for name, values in rows.items()}
    print(f"load average {load:.2f} at start; {args.rounds} rounds of {args.n} WebSocket round trips, uvloop")
    for name, values in rows.items():
        spent = ", ".join(f"{label} {statistics.median(us):.0f}" for label, us in cpu[name].items())
        print(f"{name:6} median {median[name]:7.0f} us per round trip   runs {[round(v) for v in values]}"
              + (f"   CPU us per round trip: {spent}" if spent else ""))
    added = {name: median[name] - median["serve"] for name in rows if name != "serve"}
    print("added to serve: " + ", ".join(
        f"{name}{' (the floor)' if name == 'relay' else ''} {us:.0f} us" for name, us in added.items()))


if __name__ == "__main__":
    main()
