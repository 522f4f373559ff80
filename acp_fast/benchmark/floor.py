"""The floor row of `acp-fast bench`: what Python moves through a pipe here with no protocol
library at all, so that every run shows how close acp_fast comes to it.

* The **writer** (`python -m acp_fast.benchmark.floor writer`) re-sends one pre-encoded
  `session/update` line (`agent_message_chunk` with `ACP_CHUNK` bytes of text: 100, or
  1 MiB in the large step) with blocking writes: no JSON-RPC, no encoding per message.
* The **reader** (`python -m acp_fast.benchmark.floor [--n N] [--warmup W] [--large]
  [--loop L] -- WRITER...`) starts the writer with [`acp_fast.transport.spawn`][acp_fast.transport.spawn] (the same
  wide pipes as every acp_fast client's agent, on every loop), splits the lines of each chunk
  read and decodes each with orjson, reading the text's length: no dispatch, no validation
  beyond JSON.

It takes the client CLI contract's options (the round-trip ones are accepted and ignored) and
prints one JSON line with the streaming fields of the contract (`notificationsPerSec`,
`textMiBPerSec`, `streamClientCpuUsPerMsg`, `streamAgentCpuUsPerMsg`, ...). A ceiling
measured with a shortcut (nothing here is what a user's client or agent does): a reference,
never a comparison, and a target only as a fraction of it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from ..jsontypes import JsonObject
from ..transport._pipes import widen_pipe
from .remote_client import report

__all__ = ["line_for", "main"]

#: The text bytes of the large step's notifications (as the contract's ``--large``).
LARGE_CHUNK = 1048576


def line_for(chunk: int) -> bytes:
    """The pre-encoded `session/update` line the writer re-sends (`chunk` text bytes)."""
    text = "x" * chunk
    return (b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"floor","update":'
            b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"%s"}}}}\n'
            % text.encode())


def _writer() -> int:
    """Wait for `TOTAL` on stdin, write the line `TOTAL` times, then wait for stdin's end."""
    first = sys.stdin.buffer.readline()
    if not first.strip():
        return 0
    total = int(first)
    widen_pipe(1)  # as an acp_fast agent widens its stdout (on any loop)
    line = line_for(int(os.environ.get("ACP_CHUNK", "100")))
    per_write = max(1, (64 * 1024) // len(line))
    block = line * per_write
    sent = 0
    while sent < total:
        k = min(per_write, total - sent)
        view = memoryview(block if k == per_write else line * k)
        while view:
            view = view[os.write(1, view):]  # straight to the pipe, no buffer in between
        sent += k
    sys.stdin.buffer.read()
    return 0


class _Reader:
    def __init__(self, total: int, warmup: int, done: asyncio.Future[None]) -> None:
        import orjson

        self.loads = orjson.loads
        self.total = total
        self.warmup = warmup
        self.done = done
        self.buf = bytearray()
        self.count = 0
        self.text = 0
        self.t0 = 0.0
        self.cpu0 = 0.0
        self.pid = 0
        self.agent0: int | None = None

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        end = buf.rfind(b"\n")
        if end < 0:
            return
        lines = bytes(buf[:end]).split(b"\n")
        del buf[:end + 1]
        loads = self.loads
        for line in lines:
            msg = loads(line)
            text = msg["params"]["update"]["content"]["text"]
            self.count += 1
            if self.count <= self.warmup:
                if self.count == self.warmup:
                    self._start()
                continue
            self.text += len(text)
        if self.count >= self.total and not self.done.done():
            self.done.set_result(None)

    def _start(self) -> None:
        from .client import _task_cpu_ns

        self.t0 = time.perf_counter()
        self.cpu0 = time.process_time()
        self.agent0 = _task_cpu_ns(self.pid)

    def eof(self, exc: BaseException | None) -> None:
        if not self.done.done():
            self.done.set_exception(RuntimeError(f"the writer ended after {self.count} of {self.total} lines"))


def _stderr(data: bytes) -> None:
    sys.stderr.buffer.write(data)
    sys.stderr.flush()


async def _read(cmd: list[str], n: int, warmup: int, env: dict[str, str]) -> JsonObject:
    from ..transport.loop import loop_name
    from ..transport import spawn
    from .client import _task_cpu_ns

    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    warm = max(1, warmup)  # the clock starts at the first measured line's predecessor
    reader = _Reader(n + warm, warm, done)
    stream = await spawn(cmd, env=env, on_stderr=_stderr)
    reader.pid = stream.pid or 0
    stream.attach(reader.data_received, reader.eof, lambda writable: None)
    try:
        stream.write(b"%d\n" % (n + warm))
        await asyncio.wait_for(done, 300)
        seconds = time.perf_counter() - reader.t0
        cpu = time.process_time() - reader.cpu0
        agent1 = _task_cpu_ns(reader.pid)
    finally:
        stream.close()
        await stream.wait_closed()
    agent_us = None if agent1 is None or reader.agent0 is None else (agent1 - reader.agent0) / 1e3 / n
    return {"ok": True, "sdk": "floor", "engine": None, "loop": loop_name(), "n": n, "seconds": round(seconds, 6),
            "notificationsPerSec": round(n / seconds), "textBytes": reader.text,
            "textMiBPerSec": round(reader.text / seconds / 1048576, 2),
            "streamClientCpuUsPerMsg": round(cpu * 1e6 / n, 3),
            "streamAgentCpuUsPerMsg": None if agent_us is None else round(agent_us, 3)}


def main(argv: list[str] | None = None) -> int:
    """`writer`, or the reader's command line (see the module's text)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["writer"]:
        return _writer()
    opts, cmd = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
    p = argparse.ArgumentParser(prog="python -m acp_fast.benchmark.floor")
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--large", action="store_true")
    p.add_argument("--loop", default="auto")
    for ignored in ("--m", "--rtt-method", "--inflight", "--inflight-m", "--hops"):  # the contract's, unused here
        p.add_argument(ignored, default=None)
    a = p.parse_args(opts)
    env: dict[str, str] = {}
    if a.large and "ACP_CHUNK" not in os.environ:
        env["ACP_CHUNK"] = str(LARGE_CHUNK)
    n = a.n if a.n is not None else (100 if a.large else int(os.environ.get("ACP_N", "1000")))
    if not cmd:
        cmd = [sys.executable, "-m", "acp_fast.benchmark.floor", "writer"]
    return report(_read(cmd, n, a.warmup, env), "stream", a.loop)


if __name__ == "__main__":
    sys.exit(main())
