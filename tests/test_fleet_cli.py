"""``acp-fast host`` and ``acp-fast serve --redis``: a fleet of processes through a real Redis.

One ``redis-server`` on a free loopback port (``tests/helpers/redis_server.py``), two agent
hosts as processes (one runs Testy in-process, ``--testy``; one runs a command per connection,
``-- acp-fast testy``, a child under the child-process policy) and one front as a process
(``serve --redis``, port 0). The acp_fast client runs turns through the front over Streamable
HTTP and WebSocket, enough connections that both hosts serve some. A host killed with
``kill -9`` mid-turn: the pending prompt fails within its heartbeat TTL with a JSON-RPC error
naming the host, over SSE and over WebSocket. The command-line checks (``--redis`` with a
command, ``host`` without one) exit 2 with a message. Bounded in time.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

import peer_rule  # noqa: E402
import redis_server  # noqa: E402
from fleet_processes import CLI, start, stop  # noqa: E402
from redis_server import server  # noqa: E402,F401  (the module fixture)

peer_rule.require_module("redis.asyncio", "redis", "redis-py (the fleet extra) is not installed")

# Run once in CI, with the compiled twin: the fleet's code is the same on both twins (deselected
# with --no-c-extensions / ACP_FAST_NO_EXTENSIONS=1).
pytestmark = pytest.mark.c_extension

from acp_fast import Client, JsonRpcError  # noqa: E402
from acp_fast.fleet import RedisStore  # noqa: E402
from acp_fast.fleet.front import FleetFront  # noqa: E402
from acp_fast.remote import served  # noqa: E402
from acp_fast.remote.client import connect_url  # noqa: E402

async def turns(url: str, count: int) -> None:
    for _ in range(count):
        record: list[object] = []
        client = Client.builder().on_session_update(lambda u, cx: record.append(u))
        async with client.connect(connect_url(url)) as cx:
            await cx.initialize()
            session = (await cx.build_session("/tmp")).session
            assert await session.send_prompt("stream 50 chunks") == {"stopReason": "end_turn"}
            assert len(record) == 50


def test_hosts_and_a_front_as_processes(server: redis_server.RedisServer) -> None:
    prefix = f"cli{os.getpid()}:"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for extra in (["--testy"], ["--", *CLI, "testy"]):
            proc, _ = start(["host", "--redis", server.url, "--prefix", prefix, "--slots", "2", *extra],
                            "registered at")
            procs.append(proc)
        proc, line = start(["serve", "--redis", server.url, "--prefix", prefix, "--port", "0"], "listening on")
        procs.append(proc)
        found = re.search(r"(http://\S+)", line)
        assert found is not None
        http = found.group(1)

        async def body() -> None:
            # two connections at once, and the next ones while a slot may not be back yet: 4 slots
            await asyncio.gather(turns(http, 2), turns(http.replace("http://", "ws://"), 2))

        asyncio.run(asyncio.wait_for(body(), 60.0))
    finally:
        for proc in procs:
            stop(proc)


@pytest.mark.parametrize("args", [["serve", "--redis", "redis://127.0.0.1:1/0", "--testy"],
                                  ["host", "--redis", "redis://127.0.0.1:1/0"],
                                  ["serve", "--redis", "redis://127.0.0.1:1/0", "--resume-grace", "0"]])
def test_what_a_role_cannot_take_exits_2(args: list[str]) -> None:
    done = subprocess.run([*CLI, *args], capture_output=True, timeout=60, check=False)
    assert done.returncode == 2 and b"acp-fast" in done.stderr


@pytest.mark.parametrize("wire", ["http", "ws"])
def test_a_dead_host_fails_the_pending_request_naming_it(server: redis_server.RedisServer, wire: str) -> None:
    prefix = f"dead{os.getpid()}{wire}:"
    host_id = f"doomed-{wire}"
    proc, _ = start(["host", "--redis", server.url, "--prefix", prefix, "--host-id", host_id, "--ttl", "1",
                     "--testy"], "registered at")
    try:
        async def body() -> None:
            store = RedisStore(server.url, prefix=prefix, socket_timeout=2.0)
            asked = asyncio.Event()
            client = Client.builder().on_session_update(lambda u, cx: None)

            @client.on_request("session/request_permission")
            async def permission(params: object, cx: object) -> object:
                asked.set()
                await asyncio.Event().wait()  # never answered: the turn stays pending
                raise AssertionError("unreachable")

            async with served(FleetFront(store, host_check=0.2)) as where:
                url = where.http_url if wire == "http" else where.ws_url
                async with client.connect(connect_url(url)) as cx:
                    await cx.initialize()
                    session = (await cx.build_session("/tmp")).session
                    turn = asyncio.ensure_future(session.send_prompt("permission stream 3"))
                    await asyncio.wait_for(asked.wait(), 10.0)
                    proc.kill()  # kill -9: no goodbye, the heartbeat just stops
                    killed = time.monotonic()
                    with pytest.raises(JsonRpcError) as failed:
                        await asyncio.wait_for(turn, 10.0)
                    assert host_id in str(failed.value)
                    assert time.monotonic() - killed < 5.0  # within the TTL (1 s) and the checks
            await store.close()

        asyncio.run(asyncio.wait_for(body(), 60.0))
    finally:
        stop(proc)


def test_host_metrics_port(server: redis_server.RedisServer) -> None:
    """``acp-fast host --metrics-port 0``: its slots and heartbeats in the Prometheus format."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    proc, line = start(["host", "--redis", server.url, "--prefix", f"cm{os.getpid()}:", "--slots", "5", "--ttl", "0.6",
                        "--metrics-port", "0", "--testy"], ready="metrics at")
    try:
        url = re.search(r"http://\S+/metrics", line)
        assert url is not None, line
        samples: dict[str, float] = {}
        for _ in range(50):  # registered, then a heartbeat every 0.2 s
            text = httpx.get(url.group(), timeout=5.0).text
            samples = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
                       if not s.labels or s.labels.get("outcome") == "sent"}
            if samples.get("acp_fast_host_heartbeats_total", 0) >= 1:
                break
            time.sleep(0.1)
        assert samples["acp_fast_host_slots"] == 5 and samples["acp_fast_host_slots_used"] == 0
        assert samples["acp_fast_host_heartbeats_total"] >= 1
    finally:
        stop(proc)


def test_a_host_freezes_its_start_up_heap_once_registered(server: redis_server.RedisServer,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`acp-fast host` leaves its start-up heap out of the collector's scans (`gc.freeze`)
    once it is registered."""
    import gc

    import acp_fast.cli.host as host_cli
    from acp_fast.cli.loops import freeze_startup_heap
    from acp_fast.fleet.host import AgentHost
    from acp_fast.remote.server import servable_opener
    from acp_fast.testy import build

    frozen = gc.get_freeze_count()
    freeze_startup_heap()
    assert gc.get_freeze_count() > frozen  # what the command calls freezes
    gc.unfreeze()

    calls: list[bool] = []

    async def body() -> None:
        store = RedisStore(server.url, prefix="freeze:")
        host = AgentHost(store, servable_opener(build((1,)))[0], slots=1, ttl=5.0)
        monkeypatch.setattr(host_cli, "freeze_startup_heap", lambda: calls.append(True))
        serving = asyncio.ensure_future(host_cli._serve(host))
        for _ in range(200):
            if calls:
                break
            await asyncio.sleep(0.01)
        assert [h.host_id for h in await store.live_hosts()] == [host.host_id]  # registered by then
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        await store.close()

    asyncio.run(asyncio.wait_for(body(), 10.0))
    assert calls == [True]
