"""In-process cost of one streamed ``session/update`` on each side, for instruction counts.

No child process and no pipe: what remains is the per-update work of acp_fast itself, so the
figures are repeatable under ``valgrind --tool=callgrind`` (instructions do not depend on what
else the machine runs). Three workloads:

* ``client``: a v1 ``Client`` (builder API, ``on_session_update`` reading every text, as the
  benchmark client does) after ``initialize`` and ``session/new`` against a scripted peer;
  then ``N`` pre-encoded ``agent_message_chunk`` lines (100-byte texts, each different) are
  handed to its JSON-RPC connection in 256 KiB reads, as a pipe delivers them.
* ``agent``: Testy (the benchmark agent; ``--agent readme``: the README's agent of the
  ``acp_fast/acp_fast-readme`` row) on an in-memory stream, asked to ``stream N chunks``: a
  fresh update dict and text per chunk, ``cx.send_session_update``, ``cx.drain()`` every
  ~256 KiB; the peer only counts bytes.
* ``frames``: minor page faults (``getrusage``) per 1 MiB frame, on the reading side (a
  ``Client`` fed 1 MiB updates in 256 KiB reads) and on the writing side (an agent
  connection sending 1 MiB updates to a sink), after a warm-up.

Usage (the difference of two runs cancels start-up)::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m bench.stream_cpu client --n 20000
    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m bench.stream_cpu client --n 10000
    # (instructions of the first - the second) / 10000 = instructions per update
    python -m bench.stream_cpu frames --n 50

Without valgrind it prints the wall-clock time per update too (noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from typing import Any

SESSION = "sess-1"
READ = 256 * 1024


def _line(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _update_line(i: int, size: int) -> bytes:
    head = str(i)
    text = head + "x" * (size - len(head))
    return _line({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": SESSION, "update": {"sessionUpdate": "agent_message_chunk",
                                         "content": {"type": "text", "text": text}}}})


class _Sink:
    """The far end of a memory stream: counts bytes; answers ``initialize``/``session/new``
    when scripted as an agent."""

    def __init__(self, stream: Any, answer: bool, count_only: bool = False) -> None:
        self.stream = stream
        self.count_only = count_only
        self.bytes = 0
        self.lines = 0
        self.answer = answer
        self.session: str | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tail = b""
        stream.attach(self._data, lambda exc: None, lambda writable: None)

    def _data(self, data: bytes) -> None:
        self.bytes += len(data)
        if self.count_only:
            return
        self.lines += data.count(b"\n")
        if self.answer:
            for raw in (self._tail + data).split(b"\n")[:-1]:
                msg = json.loads(raw)
                if msg.get("method") == "initialize":
                    self.stream.write(_line({"jsonrpc": "2.0", "id": msg["id"], "result": {
                        "protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}}))
                elif msg.get("method") == "session/new":
                    self.stream.write(_line({"jsonrpc": "2.0", "id": msg["id"], "result": {"sessionId": SESSION}}))
            self._tail = data[data.rfind(b"\n") + 1:]
        elif self.session is None:
            for raw in data.split(b"\n")[:-1]:
                result = json.loads(raw).get("result")
                if type(result) is dict and "sessionId" in result:
                    self.session = result["sessionId"]
                    self.done.set_result(None)
        elif b'"stopReason"' in data and not self.done.done():
            self.done.set_result(None)


async def client(n: int, size: int, total: int) -> dict[str, Any]:
    from acp_fast import Client
    from acp_fast.transport import memory_pair

    a, b = memory_pair()
    _Sink(b, answer=True)
    seen = [0, 0]

    def on_update(u: Any, cx: Any) -> None:
        seen[0] += 1
        if u.kind == "agent_message_chunk":
            content = u.payload.get("content")
            if type(content) is dict and content.get("type") == "text":
                seen[1] += len(content["text"])

    async with Client.builder().on_session_update(on_update).connect(a) as conn:
        await conn.initialize()
        await conn.build_session("/tmp")
        lines = [_update_line(i, size) for i in range(max(n, total))]  # the same work for any n
        data = b"".join(lines[:n])
        feed = conn.raw.feed_data
        t0 = time.perf_counter()
        for i in range(0, len(data), READ):
            feed(data[i:i + READ])
        secs = time.perf_counter() - t0
    assert seen[0] == n, seen
    return {"updates": seen[0], "textBytes": seen[1], "usPerUpdate": round(secs / n * 1e6, 3)}


async def agent(n: int, size: int, which: str = "testy") -> dict[str, Any]:
    import os

    from acp_fast import testy
    from acp_fast.benchmark import readme_agent
    from acp_fast.transport import memory_pair

    os.environ["ACP_CHUNK"] = str(size)
    a, b = memory_pair()
    b._wt.set_write_buffer_limits(1 << 30)  # type: ignore[attr-defined]
    built = readme_agent.build(size) if which == "readme" else testy.build((1,))
    task = asyncio.ensure_future(built.serve(a))
    peer = _Sink(b, answer=False)
    b.write(_line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}))
    b.write(_line({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}))
    await peer.done
    peer.done = asyncio.get_running_loop().create_future()
    t0 = time.perf_counter()
    b.write(_line({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {
        "sessionId": peer.session, "prompt": [{"type": "text", "text": f"stream {n} chunks"}]}}))
    await peer.done
    secs = time.perf_counter() - t0
    b.close()
    task.cancel()
    return {"lines": peer.lines, "bytes": peer.bytes, "usPerUpdate": round(secs / n * 1e6, 3)}


def _minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


async def frames(n: int, size: int, side: str = "both") -> dict[str, Any]:
    """Minor page faults per 1 MiB frame read (a ``Client``) and written (a ``Connection``)."""
    from acp_fast import Client
    from acp_fast.jsonrpc import Connection
    from acp_fast.transport import memory_pair

    size = size if size > 1000 else 1 << 20
    warm = 5
    # reading: the reads are made before measuring (their bytes are the transport's)
    a, b = memory_pair()
    _Sink(b, answer=True)
    seen = [0]

    def on_update(u: Any, cx: Any) -> None:
        seen[0] += len(u.payload["content"]["text"])

    reads = []
    read_faults = write_faults = text_faults = read_cpu = write_cpu = 0.0
    for i in range(n + warm if side != "write" else 0):
        line = _update_line(i, size)
        reads.append([line[j:j + READ] for j in range(0, len(line), READ)])
    async with Client.builder().on_session_update(on_update).connect(a) as conn:
        await conn.initialize()
        await conn.build_session("/tmp")
        feed = conn.raw.feed_data
        f0, c0 = _minflt(), time.process_time()
        for i, chunks in enumerate(reads):
            if i == warm:
                f0, c0 = _minflt(), time.process_time()
            for chunk in chunks:
                feed(chunk)
        read_faults = (_minflt() - f0) / n
        read_cpu = (time.process_time() - c0) / n
    assert seen[0] == len(reads) * size, seen
    del reads
    if side == "read":
        n = 0
    # writing: a fresh text per frame, as an agent makes it (its str's pages are the user's:
    # counted separately and subtracted)
    a, b = memory_pair()
    sink = _Sink(b, answer=False, count_only=True)
    conn2 = Connection(a)
    pad = "y" * size
    text_faults = 0
    f0, c0 = _minflt(), time.process_time()
    for i in range(n + warm):
        if i == warm:
            f0, c0 = _minflt(), time.process_time()
            text_faults = 0
        t0 = _minflt()
        text = str(i) + pad[len(str(i)):]
        text_faults += _minflt() - t0
        conn2.notify("session/update", {"sessionId": SESSION, "update": {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}})
        del text
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    if n:
        write_cpu = (time.process_time() - c0) / n
        write_faults = (_minflt() - f0 - text_faults) / n
        assert sink.bytes > n * size
    conn2.close()
    return {"frames": n, "readFaultsPerFrame": round(read_faults, 1), "writeFaultsPerFrame": round(write_faults, 1),
            "textFaultsPerFrame": round(text_faults / max(n, 1), 1),
            "readCpuUsPerFrame": round(read_cpu * 1e6, 1), "writeCpuUsPerFrame": round(write_cpu * 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("client", "agent", "frames"))
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--side", choices=("read", "write", "both"), default="both", help="frames: which side runs")
    ap.add_argument("--agent", choices=("testy", "readme"), default="testy",
                    help="agent: Testy, or the README's agent (the acp_fast/acp_fast-readme row)")
    ap.add_argument("--total", type=int, default=20000,
                    help="client: lines built whatever --n is (so that two runs differ only in feeding)")
    args = ap.parse_args()
    if args.what == "client":
        print(asyncio.run(client(args.n, args.size, args.total)))
    elif args.what == "agent":
        print(asyncio.run(agent(args.n, args.size, args.agent)))
    else:
        print(asyncio.run(frames(args.n, args.size, args.side)))


if __name__ == "__main__":
    main()
