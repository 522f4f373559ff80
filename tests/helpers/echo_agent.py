"""A small JSON-RPC agent on its own stdio, started by tests as a child process.

It runs the real stack (``connect_stdio`` + ``Connection``) on the engine twin named by
``ACP_FAST_TEST_ENGINE`` (``py`` or ``c``). Environment knobs:

* ``ECHO_BANNER=text``: print ``text`` on stdout before speaking JSON-RPC;
* ``ECHO_MAX_BACKLOG=n``: the connection's ``max_backlog``;
* ``ECHO_IGNORE_EOF=1``: keep running after stdin EOF (to test the kill grace period).

Methods: see the handlers below.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import subprocess
import sys

from acp_fast.errors import JsonRpcError
from acp_fast.jsonrpc import Connection, RequestContext
from acp_fast.transport import connect_stdio


async def main() -> None:
    engine = importlib.import_module("acp_fast._engine_" + os.environ.get("ACP_FAST_TEST_ENGINE", "py"))
    banner = os.environ.get("ECHO_BANNER")
    if banner:
        os.write(1, banner.encode() + b"\n")
    conn = Connection(await connect_stdio(), engine=engine,
                      max_backlog=int(os.environ.get("ECHO_MAX_BACKLOG", "1024")))
    loop = asyncio.get_running_loop()
    gate = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, gate.set)
    stats = {"held": 0, "paused_seen": False, "max_queue": 0}

    conn.on_request("echo", lambda ctx: ctx.params)
    conn.on_request("env", lambda ctx: os.environ.get(ctx.params["name"]))
    conn.on_request("env_keys", lambda ctx: sorted(os.environ))
    conn.on_request("engine", lambda ctx: engine.IMPLEMENTATION)

    async def sleep_echo(ctx: RequestContext) -> object:
        await asyncio.sleep(0.01)
        return ctx.params

    async def ask_back(ctx: RequestContext) -> object:
        answer = await ctx.connection.request("client/ask", ctx.params)
        return {"answer": answer}

    async def wait_cancel(ctx: RequestContext) -> object:
        ctx.connection.notify("started", {"id": ctx.id})
        return await ctx.run_until_cancelled(asyncio.Event().wait())

    async def cancel_back(ctx: RequestContext) -> object:
        handle = ctx.connection.request("client/slow")
        handle.cancel()
        try:
            return {"result": await handle}
        except JsonRpcError as exc:
            return {"code": exc.code}

    def spew(ctx: RequestContext) -> None:
        n = ctx.params["bytes"]
        os.write(2, b"x" * (n - 4) + b"END\n")

    def die(ctx: RequestContext) -> None:
        os.write(2, b"dying on purpose\n")
        os._exit(ctx.params["code"])

    def grandchild(ctx: RequestContext) -> int:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        return proc.pid

    async def hold(msg: object) -> None:
        stats["held"] += 1
        stats["paused_seen"] = stats["paused_seen"] or conn.reading_paused
        stats["max_queue"] = max(stats["max_queue"], len(conn._queue))
        await gate.wait()

    conn.on_request("sleep_echo", sleep_echo)
    conn.on_request("ask_back", ask_back)
    conn.on_request("wait_cancel", wait_cancel)
    conn.on_request("cancel_back", cancel_back)
    conn.on_request("spew", spew)
    conn.on_request("die", die)
    conn.on_request("grandchild", grandchild)
    conn.on_request("stats", lambda ctx: stats)
    conn.on_notification("hold", hold)

    await conn.wait_closed()
    if os.environ.get("ECHO_IGNORE_EOF"):
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
