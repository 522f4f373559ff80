"""The floor under the fleet's added round-trip latency: what Redis costs through redis-py here.

A fleet round trip (client -> front -> Redis -> host -> agent -> host -> Redis -> front ->
client) crosses Redis twice in sequence: the front's push wakes the host's blocked read, the
host's append wakes the front's blocked read. This script measures, on this machine:

* `rt`: one redis-py asyncio round trip (`PING`, and a small `EVAL`), sequential;
* `wake`: a write in one process until a reader blocked in `XREAD BLOCK` in another has the
  entry (one-way: the write's trip to Redis, Redis, and the wake-up reply to the reader);
* `hops`: two processes ping-ponging through two streams, each side blocked in `XREAD BLOCK`
  and answering with an `XADD` — the fleet's two sequential hops with no front, host or agent
  work: the floor of what the fleet adds to a single-process round trip.

The rows marked `lean` do the same through the store's own client for its streaming path
(`acp_fast.fleet._resp`): the floor under the fleet as it is built; the others go through
redis-py, which the store uses for everything else.

Each figure is the median of `--runs` runs (each the median of `--n` samples), microseconds.

    python bench/fleet_floor.py [--n 2000] [--runs 3]

Needs `redis-server` (>= 7) on PATH and the `fleet` extra; it starts its own Redis on a free
loopback port and stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _loop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a core dependency
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _rt(url: str, n: int) -> tuple[float, float]:
    from redis.asyncio import Redis

    r = Redis.from_url(url)
    script = "return redis.call('HINCRBY', KEYS[1], 'n', 1)"
    await r.ping()
    pings, evals = [], []
    for _ in range(n):
        t = time.perf_counter()
        await r.ping()
        pings.append(time.perf_counter() - t)
    for _ in range(n):
        t = time.perf_counter()
        await r.eval(script, 1, "floor:h")  # type: ignore[misc]
        evals.append(time.perf_counter() - t)
    await r.aclose()
    return statistics.median(pings) * 1e6, statistics.median(evals) * 1e6


def _lean(url: str) -> Any:
    from acp_fast.fleet._resp import RespClient

    return RespClient(url, socket_timeout=5.0, connect_timeout=5.0, max_connections=8)


async def _rt_lean(url: str, n: int) -> float:
    r = _lean(url)
    await r.call("PING")
    pings = []
    for _ in range(n):
        t = time.perf_counter()
        await r.call("PING")
        pings.append(time.perf_counter() - t)
    await r.close()
    return statistics.median(pings) * 1e6


def _echo_lean(url: str, n: int, ready: multiprocessing.synchronize.Event) -> None:
    """`_echo` through the lean client."""
    _loop()

    async def main() -> None:
        r = _lean(url)
        after = b"0-0"
        ready.set()
        for _ in range(n):
            (got,) = await r.blocking([("XREAD", "BLOCK", 5000, "STREAMS", "floor:in", after)], 5.0)
            after = got[0][1][-1][0]
            await r.call("XADD", "floor:out", "*", "t", got[0][1][-1][1][1])
        await r.close()

    asyncio.run(main())


async def _hops_lean(url: str, n: int) -> float:
    r = _lean(url)
    await r.call("DEL", "floor:in", "floor:out")
    ready = multiprocessing.Event()
    p = multiprocessing.Process(target=_echo_lean, args=(url, n, ready))
    p.start()
    ready.wait()
    await asyncio.sleep(0.2)
    after = b"0-0"
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        await r.call("XADD", "floor:in", "*", "t", b"x")
        (got,) = await r.blocking([("XREAD", "BLOCK", 5000, "STREAMS", "floor:out", after)], 5.0)
        lat.append(time.perf_counter() - t)
        after = got[0][1][-1][0]
    await r.close()
    p.join()
    return statistics.median(lat) * 1e6


def _echo(url: str, n: int, ready: multiprocessing.synchronize.Event) -> None:
    """The other side: blocked in XREAD BLOCK on `in`, answers each entry with an XADD on `out`."""
    _loop()

    async def main() -> None:
        from redis.asyncio import Redis

        r = Redis.from_url(url)
        after = "0-0"
        ready.set()
        for _ in range(n):
            got = await r.xread({"floor:in": after}, block=5000)
            after = got[0][1][-1][0]
            await r.xadd("floor:out", {"t": got[0][1][-1][1][b"t"]})
        await r.aclose()

    asyncio.run(main())


def _wake_reader(url: str, n: int, ready: multiprocessing.synchronize.Event,
                 out: multiprocessing.queues.Queue[float]) -> None:
    """Blocked in XREAD BLOCK; records now - the writer's timestamp (CLOCK_MONOTONIC is system-wide)."""
    _loop()

    async def main() -> None:
        from redis.asyncio import Redis

        r = Redis.from_url(url)
        after = "0-0"  # the writer emptied the stream: every entry it writes is read
        ready.set()
        lat: list[float] = []
        while len(lat) < n:  # a read under load may take more than one entry
            got = await r.xread({"floor:wake": after}, block=5000)
            now = time.perf_counter()
            after = got[0][1][-1][0]
            lat.extend(now - float(fields[b"t"]) for _, fields in got[0][1])
        out.put(statistics.median(lat) * 1e6)
        await r.aclose()

    asyncio.run(main())


async def _wake(url: str, n: int) -> float:
    from redis.asyncio import Redis

    r = Redis.from_url(url)
    await r.delete("floor:wake")
    ready = multiprocessing.Event()
    q: multiprocessing.queues.Queue[float] = multiprocessing.Queue()
    p = multiprocessing.Process(target=_wake_reader, args=(url, n, ready, q))
    p.start()
    ready.wait()
    await asyncio.sleep(0.2)
    for _ in range(n):
        await r.xadd("floor:wake", {"t": repr(time.perf_counter())})
        await asyncio.sleep(0.002)  # the reader is blocked again before the next write
    await r.aclose()
    p.join()
    return q.get()


async def _hops(url: str, n: int) -> float:
    from redis.asyncio import Redis

    r = Redis.from_url(url)
    await r.delete("floor:in", "floor:out")
    ready = multiprocessing.Event()
    p = multiprocessing.Process(target=_echo, args=(url, n, ready))
    p.start()
    ready.wait()
    await asyncio.sleep(0.2)
    after = "0-0"
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        await r.xadd("floor:in", {"t": b"x"})  # the front's push
        got = await r.xread({"floor:out": after}, block=5000)  # the front's read, woken by the host's append
        lat.append(time.perf_counter() - t)
        after = got[0][1][-1][0]
    await r.aclose()
    p.join()
    return statistics.median(lat) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    server = shutil.which("redis-server")
    if server is None:
        sys.exit("redis-server is not on PATH")
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                 "--dir", tmp], stdout=subprocess.DEVNULL)
        try:
            url = f"redis://127.0.0.1:{port}/0"
            for _ in range(50):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            _loop()
            rows: dict[str, list[float]] = {"rt PING": [], "rt EVAL": [], "wake (one way)": [], "hops (2 in sequence)": [],
                                            "rt PING (lean)": [], "hops (lean)": []}
            for _ in range(args.runs):
                ping, ev = asyncio.run(_rt(url, args.n))
                rows["rt PING"].append(ping)
                rows["rt EVAL"].append(ev)
                rows["wake (one way)"].append(asyncio.run(_wake(url, min(args.n, 500))))
                rows["hops (2 in sequence)"].append(asyncio.run(_hops(url, args.n)))
                rows["rt PING (lean)"].append(asyncio.run(_rt_lean(url, args.n)))
                rows["hops (lean)"].append(asyncio.run(_hops_lean(url, args.n)))
            print(f"load average {os.getloadavg()[0]:.2f}; {args.runs} runs of {args.n} (wake: {min(args.n, 500)})")
            for name, values in rows.items():
                print(f"{name:22} median {statistics.median(values):7.1f} us   runs {[round(v, 1) for v in values]}")
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
