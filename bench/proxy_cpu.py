"""In-process cost of one message a proxy forwards (or handles), for instruction counts.

A built proxy (`Proxy.v2()`) on an in-memory stream, after `_proxy/initialize`; the far end of
the stream plays both the conductor's sides (the predecessor's plain messages and the
successor's `_proxy/successor` envelopes). No child process and no pipe, so the figures are
repeatable under `valgrind --tool=callgrind`. Workloads (`N` messages each):

- `successor`: `N` wrapped `session/update` notifications from the successor, fed to the
  proxy's JSON-RPC connection in 256 KiB reads: each is unwrapped and forwarded plain.
- `predecessor`: `N` plain `session/update` notifications from the predecessor: each is
  wrapped and forwarded.
- `requests`: `N` requests from the predecessor and `N` from the successor (`_x/ask`), fed
  in rounds of 100; the far end answers every forwarded request and waits for every answer.
- `handled`: the `successor` and `requests` traffic with handlers on the proxy's successor
  side (`on_successor_notification` / `on_successor_request`) that answer or drop it.
- `chain`: the whole chain in one process: a v2 `Client` → `Conductor([Proxy.v2(), Testy])`
  (in-process components over memory pairs), one `stream N chunks` prompt; every update
  crosses the conductor twice and the proxy once (unwrapped, forwarded).

Usage (the difference of two runs cancels start-up)::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m bench.proxy_cpu successor --n 20000
    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m bench.proxy_cpu successor --n 10000
    # (instructions of the first - the second) / 10000 = instructions per message

Without valgrind it prints the wall-clock time per message too (noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

READ = 256 * 1024
ROUND = 100
SESSION = "sess-1"


def _line(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _update(i: int) -> dict[str, Any]:
    text = str(i) + "x" * 90
    return {"sessionId": SESSION, "update": {"sessionUpdate": "agent_message_chunk",
                                              "content": {"type": "text", "text": text}}}


class _FarEnd:
    """The conductor's end of the proxy's stream: counts what the proxy writes and answers
    every request it forwards (``{"ok": true}``)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.bytes = 0
        self.answers = 0
        self.want = 0
        self.answer = False
        self.done: asyncio.Future[None] | None = None
        self._tail = b""
        stream.attach(self._data, lambda exc: None, lambda writable: None)

    def _data(self, data: bytes) -> None:
        self.bytes += len(data)
        if not self.answer:
            return
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()
        out = []
        for raw in lines:
            msg = json.loads(raw)
            if "method" in msg and "id" in msg:
                out.append(_line({"jsonrpc": "2.0", "id": msg["id"], "result": {"ok": True}}))
            elif "id" in msg:
                self.answers += 1
        if out:
            self.stream.write(b"".join(out))
        if self.done is not None and self.answers >= self.want and not self.done.done():
            self.done.set_result(None)

    async def until_answered(self, count: int) -> None:
        self.want = self.answers + count
        self.done = asyncio.get_running_loop().create_future()
        if self.answers >= self.want:
            return
        await self.done


async def _initialized(handled: bool) -> tuple[Any, _FarEnd]:
    from acp_fast import Proxy
    from acp_fast.transport import memory_pair

    proxy = Proxy.v2()
    if handled:
        proxy.on_successor_notification("session/update", lambda p, cx: None)
        proxy.on_successor_request("_x/ask", lambda p, cx: {"handled": True})
    a, b = memory_pair()
    b._wt.set_write_buffer_limits(1 << 30)  # type: ignore[attr-defined]
    a._wt.set_write_buffer_limits(1 << 30)  # type: ignore[attr-defined]
    conn = proxy.bind(_connection(a))
    far = _FarEnd(b)
    far.answer = True
    b.write(_line({"jsonrpc": "2.0", "id": 0, "method": "_proxy/initialize", "params": {
        "protocolVersion": 2, "info": {"name": "bench", "version": "1"}, "capabilities": {}}}))
    await _settle()
    # the proxy sent initialize on (wrapped) and the far end answered it; the proxy answered us
    await far.until_answered(0)
    return conn, far


def _connection(stream: Any) -> Any:
    from acp_fast.jsonrpc import Connection

    return Connection(stream, lazy=True)


async def _settle(turns: int = 20) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


def _feed(conn: Any, data: bytes) -> None:
    feed = conn.raw.feed_data
    for i in range(0, len(data), READ):
        feed(data[i:i + READ])


async def notifications(what: str, n: int, total: int, handled: bool) -> dict[str, Any]:
    conn, far = await _initialized(handled)
    far.answer = False
    lines = []
    for i in range(max(n, total)):  # the same work for any n
        if what == "predecessor":
            lines.append(_line({"jsonrpc": "2.0", "method": "session/update", "params": _update(i)}))
        else:
            lines.append(_line({"jsonrpc": "2.0", "method": "_proxy/successor", "params": {
                "method": "session/update", "params": _update(i)}}))
    data = b"".join(lines[:n])
    before = far.bytes
    t0 = time.perf_counter()
    _feed(conn, data)
    await _settle()
    secs = time.perf_counter() - t0
    if not handled:
        assert far.bytes - before > len(data) // 2, (far.bytes, before)
    conn.close()
    return {"messages": n, "bytesOut": far.bytes - before, "usPerMessage": round(secs / n * 1e6, 3)}


async def requests(n: int, total: int, handled: bool) -> dict[str, Any]:
    conn, far = await _initialized(handled)
    rounds = []
    for r in range(max(n, total) // ROUND):
        chunk = []
        for j in range(ROUND):
            i = r * ROUND + j
            chunk.append(_line({"jsonrpc": "2.0", "id": 2 * i + 1, "method": "_x/ask", "params": {"n": i}}))
            chunk.append(_line({"jsonrpc": "2.0", "id": 2 * i + 2, "method": "_proxy/successor",
                                "params": {"method": "_x/ask", "params": {"n": i}}}))
        rounds.append(b"".join(chunk))
    t0 = time.perf_counter()
    for data in rounds[:n // ROUND]:
        waiting = far.until_answered(2 * ROUND)
        _feed(conn, data)
        await waiting
    secs = time.perf_counter() - t0
    conn.close()
    return {"requests": 2 * (n // ROUND) * ROUND, "answers": far.answers, "usPerRequest": round(secs / (2 * n) * 1e6, 3)}


async def chain(n: int) -> dict[str, Any]:
    from acp_fast import Client, Proxy, testy
    from acp_fast.conductor import Conductor

    seen = [0]

    def on_update(update: Any, cx: Any) -> None:
        seen[0] += 1

    async with Conductor([Proxy.v2(), testy.build()]) as upstream:
        async with Client.v2().on_session_update(on_update).connect(upstream) as conn:
            await conn.initialize()
            opened = await conn.build_session("/tmp")
            t0 = time.perf_counter()
            await opened.session.send_prompt(f"stream {n} chunks")
            await opened.session.wait_idle()  # v2: the prompt's answer comes first, the idle state last
            await conn.raw.settled()
            secs = time.perf_counter() - t0
    assert seen[0] >= n, seen
    return {"updates": seen[0], "usPerUpdate": round(secs / n * 1e6, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("successor", "predecessor", "requests", "handled", "chain"))
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--total", type=int, default=20000,
                    help="messages built whatever --n is (so that two runs differ only in feeding)")
    args = ap.parse_args()
    if args.what == "chain":
        print(asyncio.run(chain(args.n)))
    elif args.what == "requests":
        print(asyncio.run(requests(args.n, args.total, False)))
    elif args.what == "handled":
        print(asyncio.run(notifications("successor", args.n, args.total, True)))
        print(asyncio.run(requests(args.n, args.total, True)))
    else:
        print(asyncio.run(notifications(args.what, args.n, args.total, False)))


if __name__ == "__main__":
    main()
