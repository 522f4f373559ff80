"""In-process cost of one client→agent message of the remote server, for instruction counts.

The ASGI app of ``acp_fast.remote`` (``asgi_app`` over Testy, both versions, as ``acp-fast serve
--testy`` serves it) is called directly with ASGI ``receive``/``send`` callables: no HTTP
server, no socket, no client process. What remains is the server's per-message work (reading
the POST, decoding and checking it, handing it to the in-process agent, routing the reply to
the SSE stream) and Testy's. Two workloads, after ``initialize`` and with the connection
stream open:

* ``roundtrip``: ``N`` sequential ``_test/echo`` POSTs, each awaited until its reply is on
  the SSE stream (the remote ``roundtrips`` row, without the network);
* ``burst``: ``N`` ``_test/echo`` POSTs one after the other without waiting for replies, then
  every reply (client→agent messages streaming in).

Usage (the difference of two runs cancels start-up)::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m bench.remote_in_cpu roundtrip --n 4000
    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m bench.remote_in_cpu roundtrip --n 2000
    # (instructions of the first - the second) / 2000 = instructions per message

``--metrics``: the app with metrics (`acp_fast.remote.metrics.ServerMetrics`, no scrape
endpoint), for the A/B of their cost per request.

Without valgrind it prints the wall-clock time per message too (noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

INIT = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}'
HOST = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]


async def _post(app: Any, body: bytes, headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[bytes, bytes]]:
    scope = {"type": "http", "method": "POST", "path": "/acp", "headers": [*HOST, *headers]}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"])


class _Reader:
    """The connection's SSE stream: counts the replies whose ids it sees."""

    def __init__(self, app: Any, cid: bytes) -> None:
        self.seen = 0
        self.wake = asyncio.Event()
        self.gone = asyncio.Event()
        scope = {"type": "http", "method": "GET", "path": "/acp",
                 "headers": [*HOST, (b"accept", b"text/event-stream"), (b"acp-connection-id", cid)]}
        self.task = asyncio.ensure_future(app(scope, self._receive, self._send))

    async def _receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        body = message.get("body")
        if body:
            self.seen += body.count(b'"id":')
            self.wake.set()

    async def until(self, count: int) -> None:
        while self.seen < count:
            self.wake.clear()
            await self.wake.wait()


async def run(workload: str, n: int, metrics: bool = False) -> float:
    from acp_fast.remote import asgi_app
    from acp_fast.remote.metrics import ServerMetrics
    from acp_fast.testy import build

    app = asgi_app(build((1, 2)), metrics=ServerMetrics() if metrics else None)
    status, headers = await _post(app, INIT, [])
    assert status == 200, status
    cid = headers[b"acp-connection-id"]
    reader = _Reader(app, cid)
    named = [(b"acp-connection-id", cid)]
    bodies = [json.dumps({"jsonrpc": "2.0", "id": i + 1, "method": "_test/echo",
                          "params": {"text": f"message {i:06d} " + "x" * 80}}).encode() for i in range(n)]
    start = time.perf_counter()
    if workload == "roundtrip":
        for i, body in enumerate(bodies):
            status, _ = await _post(app, body, named)
            assert status == 202, status
            await reader.until(i + 1)
    else:
        for body in bodies:
            status, _ = await _post(app, body, named)
            assert status == 202, status
        await reader.until(n)
    elapsed = time.perf_counter() - start
    reader.gone.set()
    await app.aclose()
    await reader.task
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=("roundtrip", "burst"))
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--metrics", action="store_true", help="the app with metrics (acp_fast.remote.metrics)")
    args = parser.parse_args()
    elapsed = asyncio.run(run(args.workload, args.n, args.metrics))
    print(f"{args.workload}: {args.n} messages, {elapsed / max(args.n, 1) * 1e6:.1f} us/message (wall)")


if __name__ == "__main__":
    main()
