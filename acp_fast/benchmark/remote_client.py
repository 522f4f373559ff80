"""The acp_fast client of the remote benchmark rows (`acp-fast bench --remote`).

A v1 client on the public API, as a user's would be: it connects to a URL with
[`acp_fast.remote.connect_url`][acp_fast.remote.connect_url] (or spawns a stdio agent, for the direct row),
initializes, opens a session and runs one workload, reading every update's text:

`stream N`      one prompt `stream N`; counts the `agent_message_chunk` updates and
                  their text bytes; the stop reason must be `end_turn`;
`roundtrips N`  N sequential `_test/echo` requests, each answer checked.

Prints one JSON line: `{"ok", "workload", "n", "seconds", "rate", "cpuSeconds", "loop",
"engine", ...}` (`rate` per second; `cpuSeconds`: this process's CPU during the measured
part). The same command line as the peer clients in `peers/`: `URL WORKLOAD N`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..jsontypes import JsonObject

__all__ = ["main", "report"]


async def _run(target: str, workload: str, n: int, warmup: int) -> JsonObject:
    from .. import IMPLEMENTATION, Client, Context, SessionUpdate
    from ..transport.loop import loop_name
    from ..transport import spawn
    from ..remote import connect_url

    state = {"chunks": 0, "text": 0}
    client = Client.builder().with_info("acp-fast-remote-bench", "1")

    @client.on_session_update
    def on_update(update: SessionUpdate, cx: Context) -> None:
        if update.kind == "agent_message_chunk":
            content = update.payload.get("content")
            if type(content) is dict and type(content.get("text")) is str:
                state["chunks"] += 1
                state["text"] += len(content["text"])

    transport = connect_url(target) if "://" in target else spawn(target)
    async with client.connect(transport) as conn:
        await conn.initialize()
        session = (await conn.build_session(cwd=os.getcwd())).session
        if warmup:
            if workload == "stream":
                await session.send_prompt(f"stream {warmup}")
            else:
                for i in range(warmup):
                    await conn.send_request("_test/echo", {"i": i})
        state["chunks"] = state["text"] = 0
        cpu0, t0 = time.process_time(), time.perf_counter()
        if workload == "stream":
            reply = await session.send_prompt(f"stream {n}")
            stop = reply.get("stopReason") if isinstance(reply, dict) else None
            if stop != "end_turn" or state["chunks"] != n:
                raise RuntimeError(f"stream {n}: stop reason {stop!r}, {state['chunks']} chunks")
        else:
            for i in range(n):
                r = await conn.send_request("_test/echo", {"i": i})
                if r.get("i") != i:
                    raise RuntimeError(f"echo {i} answered {r!r}")
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    return {"ok": True, "sdk": "acp_fast", "workload": workload, "n": n, "seconds": round(seconds, 6),
            "rate": round(n / seconds, 1), "cpuSeconds": round(cpu, 6), "textBytes": state["text"],
            "loop": loop_name(), "engine": IMPLEMENTATION}


def main(argv: list[str] | None = None) -> int:
    """Command line: `python -m acp_fast.benchmark.remote_client TARGET stream|roundtrips N`."""
    parser = argparse.ArgumentParser(prog="python -m acp_fast.benchmark.remote_client")
    parser.add_argument("target", help="ws://…, http://… or a stdio agent command")
    parser.add_argument("workload", choices=("stream", "roundtrips"))
    parser.add_argument("n", type=int)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--loop", default="auto", help="auto, asyncio or uvloop")
    args = parser.parse_args(argv)
    return report(_run(args.target, args.workload, args.n, args.warmup), args.workload, args.loop)


def report(work: Coroutine[Any, Any, JsonObject], workload: str, loop: str) -> int:
    """Run a benchmark client's `work` on `loop` (at most 300 s) and print its JSON line
    (`{"ok": false, "error"}` when it failed: the harness reads the line); the exit status."""
    from ..transport.loop import run

    try:
        out = run(asyncio.wait_for(work, 300), loop=loop)
    except Exception as exc:  # reported, not raised: the harness reads the line
        out = {"ok": False, "workload": workload, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out), flush=True)
    return 0 if out.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
