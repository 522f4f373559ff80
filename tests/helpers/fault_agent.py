"""A hostile-environment test agent on its own stdio, for the fault-injection suite.

Started as a child process by ``tests/test_faults*.py`` and ``scripts/soak.py``. It runs the
public stack only: ``Agent.builder()`` (v1, no lifecycle checks, so extension methods work
without ``initialize``) served on ``connect_stdio`` through ``serve``, on the engine
twin named by ``ACP_FAST_TEST_ENGINE`` (``py`` or ``c``).

Environment knobs:

* ``FAULT_MAX_LINE=n``: serve only ``echo`` and ``rss`` on a plain ``jsonrpc.Connection``
  with ``max_line_size=n`` (the builders have no such knob);
* ``FAULT_V2=1``: serve the same handlers on ``Agent.v2()`` (unguarded), for v2 clients;
* ``FAULT_LEAK_KIB=n``: a deliberate per-request leak, to prove a memory bound bites: every
  ``echo``/``aecho``/``sleep`` handled keeps its params and ``n`` KiB of its own for the life of
  the process (the shape of a registry that is never pruned).

Requests (``_fault/...``):

* ``echo`` (sync) / ``aecho`` (async, one loop turn) return their params;
* ``sleep`` ``{"s": seconds}`` returns its params after sleeping;
* ``rss`` returns ``{"hwm": VmHWM KiB, "rss": VmRSS KiB}`` of this process;
* ``stream`` ``{"n", "size", "drain"}``: sends ``n`` ``session/update`` chunks of ``size``
  bytes with ``cx.send_session_update`` in a loop (awaiting ``cx.drain()`` after each when
  ``drain``), as the README's agent does; reports ``progress k`` every 1000 and ``done k``
  (or ``raised k <error>`` if a send raised) on stderr; returns ``{"sent": k}``;
* ``ask`` sends the request ``_fault/ask_back`` to the client and returns its answer;
* ``die`` ``{"how": "midline" | "exit"}``: write half a line and exit(3), or exit(0) at once;
* ``kbd`` / ``akbd``: raise ``KeyboardInterrupt`` (sync / async); ``sysexit``: ``SystemExit``.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from typing import Any


def proc_status() -> dict[str, int]:
    """VmHWM and VmRSS of this process, in KiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                key, value = line.split(":", 1)
                out["hwm" if key == "VmHWM" else "rss"] = int(value.split()[0])
    return out


#: what FAULT_LEAK_KIB keeps alive (empty without it)
LEAK = int(os.environ.get("FAULT_LEAK_KIB", "0")) * 1024
KEPT: list[Any] = []


def keep(params: Any) -> None:
    if LEAK:
        KEPT.append((params, b"\x01" * LEAK))  # written, so its pages are resident


def log(text: str) -> None:
    os.write(2, text.encode() + b"\n")


def build(v2: bool) -> Any:
    from acp_fast import Agent

    agent = Agent.v2().without_acp_version_guard() if v2 else Agent.builder()

    @agent.on_request("_fault/echo")
    def echo(params: Any, cx: Any) -> Any:
        keep(params)
        return params

    @agent.on_request("_fault/aecho")
    async def aecho(params: Any, cx: Any) -> Any:
        keep(params)
        await asyncio.sleep(0)
        return params

    @agent.on_request("_fault/sleep")
    async def sleep(params: Any, cx: Any) -> Any:
        keep(params)
        await asyncio.sleep(params["s"])
        return params

    @agent.on_request("_fault/rss")
    def rss(params: Any, cx: Any) -> Any:
        return proc_status()

    @agent.on_request("_fault/stream")
    async def stream(params: Any, cx: Any) -> Any:
        n, size, drain = params["n"], params["size"], params.get("drain", False)
        text = "x" * size
        sent = 0
        try:
            for i in range(n):
                cx.send_session_update("fault-session", {
                    "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
                sent = i + 1
                if drain:
                    await cx.drain()
                if sent % 1000 == 0:
                    log(f"progress {sent}")
        except Exception as exc:  # noqa: BLE001 - reported: the test decides whether it is allowed
            log(f"raised {sent} {type(exc).__name__}: {exc}")
            return {"sent": sent, "raised": type(exc).__name__}
        log(f"done {sent}")
        return {"sent": sent}

    @agent.on_request("_fault/ask")
    async def ask(params: Any, cx: Any) -> Any:
        return {"answer": await cx.send_request("_fault/ask_back", params)}

    @agent.on_request("_fault/die")
    def die(params: Any, cx: Any) -> Any:
        if params["how"] == "midline":
            os.write(1, b'{"jsonrpc":"2.0","id":')
            os._exit(3)
        os._exit(0)

    @agent.on_request("_fault/kbd")
    def kbd(params: Any, cx: Any) -> Any:
        raise KeyboardInterrupt

    @agent.on_request("_fault/akbd")
    async def akbd(params: Any, cx: Any) -> Any:
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    @agent.on_request("_fault/sysexit")
    def sysexit(params: Any, cx: Any) -> Any:
        raise SystemExit(4)

    return agent


async def main() -> None:
    from acp_fast.jsonrpc import Connection
    from acp_fast.transport import connect_stdio

    engine = importlib.import_module("acp_fast._engine_" + os.environ.get("ACP_FAST_TEST_ENGINE", "py"))
    agent = build(os.environ.get("FAULT_V2") == "1")
    max_line = os.environ.get("FAULT_MAX_LINE")
    if max_line is None:
        await agent.serve(connect_stdio(), engine=engine)
        return
    # The builders have no line-limit knob: serve the plain handlers on a Connection.
    conn = Connection(await connect_stdio(), engine=engine, max_line_size=int(max_line))
    conn.on_request("_fault/echo", lambda ctx: ctx.params)
    conn.on_request("_fault/rss", lambda ctx: proc_status())
    await conn.wait_closed()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
