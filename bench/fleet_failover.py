"""The fleet's failover time: `kill -9` of the front that carries a turn, to the client's next
update on another front.

A `redis-server` on a free loopback port, one agent host (`acp-fast host --testy`, with a
replay window larger than the turn) and two fronts (`acp-fast serve --redis`), all processes.
The acp_fast client connects to the first front with the second as `failover`
([`connect_url`][acp_fast.remote.client.connect_url]), prompts `stream N of SIZE`, and at
update `--kill-at` kills the first front (`SIGKILL`, from inside its update handler). The turn
must complete with every update once, in order; the failover time is the longest stall between
two updates after the kill (the updates already in the client's socket arrive first, then the
resume on the other front). Each trial uses fresh processes; the median of the trials is printed.

Usage::

    python -m bench.fleet_failover --wire ws --trials 5
    python -m bench.fleet_failover --wire http --trials 5 --n 1000 --size 20000 --kill-at 100
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

CLI = [sys.executable, "-m", "acp_fast.cli.main"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(argv: list[str], ready: str) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode(errors="replace")
        if re.search(ready, line):
            return proc, line
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"{argv[:4]} did not get ready")


async def _turn(urls: list[str], n: int, size: int, kill_at: int, victim: int) -> float:
    from acp_fast import Client
    from acp_fast.remote.client import connect_url

    stamps: list[float] = []
    indices: list[int] = []
    killed: list[float] = []
    client = Client.builder().with_info("failover-bench", "1")

    @client.on_session_update
    def on_update(update: object, cx: object) -> None:
        if getattr(update, "kind", None) != "agent_message_chunk":
            return
        text = update.payload["content"]["text"]  # type: ignore[attr-defined]
        indices.append(int(re.match(r"\d+", text).group()))  # type: ignore[union-attr]
        stamps.append(time.monotonic())
        if len(indices) == kill_at:
            os.kill(victim, signal.SIGKILL)
            killed.append(time.monotonic())

    async with client.connect(await connect_url(urls[0], failover=urls[1:])) as conn:
        await conn.initialize()
        session = (await conn.build_session(cwd="/tmp")).session
        await session.send_prompt(f"stream {n} of {size}")
    if indices != list(range(n)):
        raise RuntimeError(f"updates lost or repeated: {len(indices)} received")
    after = [t for t in stamps if t >= killed[0]]
    return max(b - a for a, b in zip([killed[0], *after], after))


def trial(wire: str, n: int, size: int, kill_at: int) -> float:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server (Redis >= 7) is not on PATH")
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    procs = [subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        time.sleep(0.3)
        host, _ = _start([*CLI, "host", "--redis", url, "--testy", "--versions", "1", "--window-bytes",
                          str(4 * n * size)], "registered")
        procs.append(host)
        fronts = [_start([*CLI, "serve", "--redis", url, "--port", "0"], r"listening on") for _ in range(2)]
        procs += [p for p, _ in fronts]
        urls = [re.search(r"(http://\S+) and (ws://\S+)", line).group(1 if wire == "http" else 2)  # type: ignore[union-attr]
                for _, line in fronts]
        return asyncio.run(asyncio.wait_for(_turn(urls, n, size, kill_at, fronts[0][0].pid), 120))
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wire", choices=("ws", "http"), default="ws")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--n", type=int, default=1000, help="updates of the turn")
    parser.add_argument("--size", type=int, default=20_000, help="bytes of each update's text")
    parser.add_argument("--kill-at", type=int, default=100, help="the update at which the front is killed")
    args = parser.parse_args()
    times = [trial(args.wire, args.n, args.size, args.kill_at) * 1000 for _ in range(args.trials)]
    load = os.getloadavg()[0]
    print(f"failover over {args.wire}: kill -9 of the front at update {args.kill_at} of {args.n} ({args.size} B): "
          f"median {statistics.median(times):.0f} ms of {args.trials} "
          f"({', '.join(f'{t:.0f}' for t in times)}); every update once, in order; load {load:.2f}")


if __name__ == "__main__":
    main()
