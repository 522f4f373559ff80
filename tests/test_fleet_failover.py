"""A front killed mid-turn loses nothing: the acp_fast client fails over to another front.

One ``redis-server`` on a free loopback port (``tests/helpers/redis_server.py``), two fronts as
processes (``serve --redis``, port 0: one can be ``kill -9``-ed) and one agent host in the
test's loop (Testy in-process; a replay window larger than the turn, so that what the dead
front had not delivered is still there). The client is given both fronts
(`connect_url(url, failover=[other])`). A prompt streams 1,000 updates of 20 KB (more than the
sockets between front and client hold, so that the kill leaves updates undelivered); at the
100th update the client's handler kills the front that carries it. The turn must complete on
the other front with every update, each once, in order (their texts are numbered), over SSE
(``Last-Event-ID``) and over WebSocket (acp_fast's resume header). The failover time (kill
to the first update after the stall it caused) is printed. Bounded in time; on the compiled
twin only, once in CI (about 2 s a transport).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

import peer_rule  # noqa: E402
import redis_server  # noqa: E402
from fleet_processes import start, stop  # noqa: E402
from redis_server import server  # noqa: E402,F401  (the module fixture)

peer_rule.require_module("redis.asyncio", "redis", "redis-py (the fleet extra) is not installed")

pytestmark = pytest.mark.c_extension

from acp_fast import Client  # noqa: E402
from acp_fast.fleet import RedisStore, StoreLimits  # noqa: E402
from acp_fast.fleet.host import AgentHost  # noqa: E402
from acp_fast.remote.client import connect_url  # noqa: E402
from acp_fast.remote.server import servable_opener  # noqa: E402
from acp_fast.testy import build as build_testy  # noqa: E402

#: Updates of the turn, their size, and the update at which the front is killed.
UPDATES = 1_000
SIZE = 20_000
KILL_AT = 100
BOUND = 60.0


@pytest.mark.parametrize("wire", ["http", "ws"])
def test_a_front_killed_mid_stream_loses_nothing(server: redis_server.RedisServer, wire: str) -> None:
    prefix = f"failover{os.getpid()}{wire}:"
    fronts = [start(["serve", "--redis", server.url, "--prefix", prefix, "--port", "0"], r"listening on http://")
              for _ in range(2)]
    try:
        urls = []
        for _, line in fronts:
            found = re.search(r"listening on (http://\S+) and (ws://\S+)", line)
            assert found is not None, line
            urls.append(found.group(1 if wire == "http" else 2))
        texts: list[str] = []
        stamps: list[float] = []
        killed: list[float] = []

        async def body() -> str:
            limits = StoreLimits(output_bytes=64 * 1024 * 1024, output_entries=100_000)
            store = RedisStore(server.url, prefix=prefix, limits=limits)
            host = AgentHost(store, servable_opener(build_testy((1,)))[0], slots=2)
            task = asyncio.ensure_future(host.run())
            try:
                await asyncio.wait_for(host.wait_registered(), 10.0)
                client = Client.builder().with_info("failover", "1")

                @client.on_session_update
                def on_update(update: object, cx: object) -> None:
                    if getattr(update, "kind", None) != "agent_message_chunk":
                        return
                    texts.append(update.payload["content"]["text"])  # type: ignore[attr-defined]
                    stamps.append(time.monotonic())
                    if len(texts) == KILL_AT:
                        os.kill(fronts[0][0].pid, signal.SIGKILL)
                        killed.append(time.monotonic())

                async with client.connect(await connect_url(urls[0], failover=[urls[1]])) as conn:
                    await conn.initialize()
                    session = (await conn.build_session(cwd="/tmp")).session
                    response = await session.send_prompt(f"stream {UPDATES} of {SIZE}")
                    return str(response.get("stopReason"))
            finally:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

        stop_reason = asyncio.run(asyncio.wait_for(body(), BOUND))
        assert killed, "the front was never killed"
        assert fronts[0][0].wait(timeout=10) == -signal.SIGKILL
        indices = [int(re.match(r"\d+", t).group()) for t in texts]  # type: ignore[union-attr]
        assert indices == list(range(UPDATES))  # every update, once, in order
        assert stop_reason == "end_turn"
        after = [t for t in stamps if t >= killed[0]]
        gaps = [b - a for a, b in zip([killed[0], *after], after)]
        print(f"\n{wire}: kill -9 of the front at update {KILL_AT}; {len(after)} updates after it; "
              f"failover (the longest stall after the kill) {max(gaps) * 1000:.0f} ms")
    finally:
        for proc, _ in fronts:
            stop(proc)
