"""The fleet end to end: fronts and agent hosts through a real Redis, with the acp_fast client.

A ``redis-server`` runs on a free loopback port for the module (``tests/helpers/redis_server.py``;
missing, the module is skipped on a developer's machine and fails where the peers are required).
Each test starts its own fleet under a fresh key prefix: agent hosts running Testy in-process
and fronts (``FleetFront``) served on 127.0.0.1 port 0, in the test's event loop. What is checked:

* a connection through a front to a host: initialize, ``session/new``, a prompt whose streamed
  updates arrive in order, over Streamable HTTP (SSE) and over WebSocket;
* any front, any request: two fronts, each request of one connection on a different front
  (the client's POSTs alternate; its SSE streams are on the other front);
* an SSE reader that resumes on another front with ``Last-Event-ID`` gets exactly the lines it
  missed, and 409 outside the window;
* every host full, and no host alive: a new connection gets 503 with a clear body;
* DELETE ends the agent and frees the slot; an agent that exits ends the SSE stream.

These run on the compiled twin only (the fleet's own code is twin-independent). Every test body
is bounded in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

import peer_rule  # noqa: E402
import haproxy_lb  # noqa: E402
import redis_server  # noqa: E402
from redis_server import server  # noqa: E402,F401  (the module fixture)

peer_rule.require_module("redis.asyncio", "redis", "redis-py (the fleet extra) is not installed")

# Run once in CI, with the compiled twin: the fleet's code is the same on both twins (deselected
# with --no-c-extensions / ACP_FAST_NO_EXTENSIONS=1).
pytestmark = pytest.mark.c_extension

import httpx  # noqa: E402

from acp_fast import Client, JsonRpcError  # noqa: E402
from acp_fast.fleet import STREAM_START, ConnectionEnded, RedisStore, StoreLimits, StoreUnavailable  # noqa: E402
from acp_fast.fleet.front import FleetFront  # noqa: E402
from acp_fast.fleet.host import AgentHost  # noqa: E402
from acp_fast.remote import ServerPolicy, served  # noqa: E402
from acp_fast.remote.metrics import HostMetrics, ServerMetrics  # noqa: E402
from acp_fast.remote._wire import CONNECTION_ID_HEADER, SseParser  # noqa: E402
from acp_fast.remote.client import connect_url  # noqa: E402
from acp_fast.remote.server import servable_opener  # noqa: E402
from acp_fast.testy import build as build_testy  # noqa: E402

#: Seconds any one test body may take: a hang fails the test instead of the run.
BOUND = 30.0
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}
NEW = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}




def run(body: Callable[[], Awaitable[None]], bound: float = BOUND) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(body(), bound)

    asyncio.run(bounded())


class Fleet:
    """Stores, hosts and fronts of one test, under one key prefix."""

    def __init__(self, url: str, limits: StoreLimits | None = None) -> None:
        self.url = url
        self.prefix = f"t{secrets.token_hex(4)}:"
        self.limits = limits
        self.stores: list[RedisStore] = []
        self.hosts: list[AgentHost] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.fronts: list[str] = []  # base URLs
        self.requests: list[int] = []  # the HTTP requests each front was given

    def store(self, limits: StoreLimits | None = None) -> RedisStore:
        store = RedisStore(self.url, limits=limits or self.limits, prefix=self.prefix, socket_timeout=2.0,
                           connect_timeout=2.0)
        self.stores.append(store)
        return store

    async def host(self, slots: int = 4, ttl: float = 3.0, limits: StoreLimits | None = None) -> AgentHost:
        opener, twin = servable_opener(build_testy((1, 2)))
        host = AgentHost(self.store(limits), opener, slots=slots, ttl=ttl)
        self.hosts.append(host)
        self.tasks.append(asyncio.ensure_future(host.run()))
        await asyncio.wait_for(host.wait_registered(), 5.0)
        return host

    async def front(self, stack: contextlib.AsyncExitStack, policy: ServerPolicy | None = None,
                    metrics: ServerMetrics | None = None, resume_grace: float = 30.0) -> str:
        app = FleetFront(self.store(), init_timeout=5.0, push_timeout=2.0, policy=policy, metrics=metrics,
                         resume_grace=resume_grace)
        index = len(self.requests)
        self.requests.append(0)

        async def counted(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.requests[index] += 1
            await app(scope, receive, send)

        where = await stack.enter_async_context(served(counted))
        self.fronts.append(where.http_url)
        return str(where.http_url)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(BaseException):
                await task
        for store in self.stores:
            with contextlib.suppress(Exception):
                await store.close()


@contextlib.asynccontextmanager
async def fleet(url: str, hosts: int = 1, fronts: int = 1, slots: int = 4,
                limits: StoreLimits | None = None, policy: ServerPolicy | None = None,
                resume_grace: float = 30.0) -> AsyncIterator[Fleet]:
    f = Fleet(url, limits)
    try:
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(hosts):
                await f.host(slots)
            for _ in range(fronts):
                await f.front(stack, policy, resume_grace=resume_grace)
            yield f
    finally:
        await f.close()


async def used(f: Fleet, total: int) -> list[int]:
    """The used slots of each live host, once they add up to ``total`` (or after 2 s)."""
    for _ in range(100):
        slots = [h.used for h in await f.stores[0].live_hosts()]
        if sum(slots) == total:
            break
        await asyncio.sleep(0.02)
    return slots


def chunks(record: list[Any]) -> list[str]:
    return [u.payload["content"]["text"] for u in record if u.kind == "agent_message_chunk"]


def numbers(texts: list[str]) -> list[int]:
    """The index each Testy chunk starts with, in arrival order."""
    return [int(re.match(r"\d+", text).group()) for text in texts]  # type: ignore[union-attr]


async def one_turn(url: str, n: int = 200) -> None:
    """initialize, session/new, a prompt of ``n`` streamed chunks: all arrive, in order."""
    record: list[Any] = []
    client = Client.builder().on_session_update(lambda u, cx: record.append(u))
    async with client.connect(connect_url(url)) as cx:
        init = await cx.initialize()
        assert init["protocolVersion"] in (1, 2)
        session = (await cx.build_session("/tmp")).session
        assert await session.send_prompt(f"stream {n} chunks") == {"stopReason": "end_turn"}
        got = chunks(record)
        assert numbers(got) == list(range(n))
        assert await cx.send_request("_test/echo", {"n": 1}) == {"n": 1}


# --- one front, one host ---------------------------------------------------------------------


@pytest.mark.parametrize("wire", ["http", "ws"])
def test_a_turn_through_a_front_and_a_host(server: redis_server.RedisServer, wire: str) -> None:
    async def body() -> None:
        async with fleet(server.url) as f:
            url = f.fronts[0] if wire == "http" else f.fronts[0].replace("http://", "ws://")
            await one_turn(url)
            await one_turn(url, 3)  # a second connection
            # both ended with the client: their agents are gone, their slots free
            assert await used(f, 0) == [0]
            assert f.hosts[0].connections == 0

    run(body)


def test_a_new_connection_joins_the_hosts_blocked_read_at_once(server: redis_server.RedisServer,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A host blocked in its read of its queues re-makes that read when a connection's agent
    has started (a poke; here an agent that takes 0.2 s to start, after the host's read was
    made anew without it), so the connection's first message is read at once, not when the
    read would end (here: a 30-second read, with the test bounded at 10 s)."""
    import acp_fast.fleet.host as host_module

    monkeypatch.setattr(host_module, "_POLL", 30.0)

    async def body() -> None:
        f = Fleet(server.url)
        try:
            async with contextlib.AsyncExitStack() as stack:
                slow = RedisStore(server.url, prefix=f.prefix, socket_timeout=70.0)  # slices of 35 s
                f.stores.append(slow)
                testy, _ = servable_opener(build_testy((1, 2)))

                async def opener() -> Any:  # an agent that takes a while to start (a child process)
                    await asyncio.sleep(0.2)
                    return await testy()

                host = AgentHost(slow, opener, slots=4, ttl=3.0)
                f.hosts.append(host)
                f.tasks.append(asyncio.ensure_future(host.run()))
                await asyncio.wait_for(host.wait_registered(), 5.0)
                await f.front(stack)
                for _ in range(2):  # the first connection, and one more while the host reads
                    await asyncio.wait_for(one_turn(f.fronts[0].replace("http://", "ws://"), 3), 10.0)
        finally:
            await f.close()

    run(body)


def test_a_hosts_routes_follow_each_lines_session_when_two_sessions_interleave(
        server: redis_server.RedisServer) -> None:
    """Each call the agent writes is routed to the session its params name, also when the
    updates of two turns interleave (the host reads a session from a line's start and keeps
    the last one: a switch of session must never keep the previous route); an entry is marked
    batchable only when none of its lines is a request of the agent's."""

    async def body() -> None:
        import redis.asyncio

        window = StoreLimits(output_entries=1 << 20, output_bytes=64 << 20)  # every entry kept, to be read back
        async with fleet(server.url, limits=window) as f:
            client = Client.builder()

            @client.on_request("session/request_permission")
            def permission(params: dict[str, Any], cx: Any) -> dict[str, Any]:
                return {"outcome": {"outcome": "selected", "optionId": "allow"}}

            async with client.connect(connect_url(f.fronts[0].replace("http://", "ws://"))) as cx:
                await cx.initialize()
                a = (await cx.build_session("/tmp")).session
                b = (await cx.build_session("/tmp")).session
                # Testy yields every 125 chunks of 2,000 bytes: the turns interleave
                await asyncio.gather(a.send_prompt("stream 2000 chunks of 2000 bytes"),
                                     b.send_prompt("permission stream 2000 chunks of 2000 bytes"))
                r = redis.asyncio.Redis.from_url(server.url)
                (key,) = [k async for k in r.scan_iter(match=f"{f.prefix}{{*}}:out")]
                await r.aclose()
                cid = key.decode()[len(f.prefix) + 1:-len("}:out")]
                store = f.stores[0]
                after, routed, marked = STREAM_START, [], []
                while entries := await store.read_output(cid, after):
                    for entry in entries:
                        # an entry none of whose lines has a route carries no routes (None)
                        routed += zip(entry.lines, entry.routes or [None] * len(entry.lines))
                        requests = [line for line in entry.lines if b'"method"' in line and b'"id"' in line]
                        marked.append((entry.batchable, bool(requests)))
                    after = entries[-1].cursor
        sessions, replies = [], []
        for line, route in routed:
            message = json.loads(line)
            sid = message.get("params", {}).get("sessionId") if "method" in message else None
            if sid is not None:
                assert route == sid, (route, line[:120])
                sessions.append(sid)
            elif message.get("result", {}).get("stopReason"):  # a prompt's reply: its request's session
                replies.append(route)
        assert sorted(replies) == sorted([a.session_id, b.session_id])
        assert sorted(set(sessions)) == sorted({a.session_id, b.session_id})
        assert (True, True) not in marked and (False, True) in marked  # the permission request's entry
        assert (True, False) in marked  # the updates' entries
        switches = sum(1 for x, y in zip(sessions, sessions[1:]) if x != y)
        assert switches >= 2, f"the two turns' updates did not interleave ({switches} switches)"

    run(body)


@pytest.mark.parametrize("wire", ["http", "ws"])
def test_a_turn_many_times_the_replay_window_arrives_whole(server: redis_server.RedisServer, wire: str) -> None:
    """The host paces its agent by what the readers have read: a turn of about 30 windows
    (a window of 16 KiB and 64 entries) arrives whole, in order, over SSE and WebSocket."""

    async def body() -> None:
        async with fleet(server.url, limits=StoreLimits(output_entries=64, output_bytes=16 * 1024)) as f:
            url = f.fronts[0] if wire == "http" else f.fronts[0].replace("http://", "ws://")
            await one_turn(url, 3000)

    run(body)


def test_an_agent_waits_for_a_reader_that_comes_late(server: redis_server.RedisServer) -> None:
    """Nobody reads the session's stream while a turn of about 20 windows streams: the host
    pauses the agent within the window, and the reader that comes later gets every update
    from the start, then the reply (nothing trimmed, nothing lost)."""

    async def body() -> None:
        async with fleet(server.url, limits=StoreLimits(output_entries=64, output_bytes=16 * 1024)) as f, \
                httpx.AsyncClient(timeout=10.0) as http:
            url = f.fronts[0]
            r = await http.post(url, json=INIT)
            cid = r.headers[CONNECTION_ID_HEADER]
            head = {CONNECTION_ID_HEADER: cid, "accept": "text/event-stream"}
            assert (await http.post(url, json=NEW, headers={CONNECTION_ID_HEADER: cid})).status_code == 202
            (created,), _ = await _events(http, url, head, 1)
            sid = created["result"]["sessionId"]
            prompt = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                      "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "stream 2000 chunks"}]}}
            assert (await http.post(url, json=prompt, headers={CONNECTION_ID_HEADER: cid})).status_code == 202
            await asyncio.sleep(0.5)  # the turn would be over by now, were the agent not paused
            got, _ = await _events(http, url, {**head, "acp-session-id": sid}, 2001)
            texts = [m["params"]["update"]["content"]["text"] for m in got if m.get("method") == "session/update"]
            assert numbers(texts) == list(range(2000)) and got[-1]["id"] == 2

    run(body)


def test_read_marks_and_input_frees_catch_up_when_the_connection_goes_quiet(server: redis_server.RedisServer) -> None:
    """A reader moves its read mark, and a host frees the input its agent took, lazily (not
    in every round trip); once a connection goes quiet with its WebSocket still open, both
    catch up: the mark reaches the last entry and the input queue is empty."""

    async def body() -> None:
        import redis.asyncio

        async with fleet(server.url) as f:
            client = Client.builder()
            async with client.connect(connect_url(f.fronts[0].replace("http://", "ws://"))) as cx:
                await cx.initialize()
                session = (await cx.build_session("/tmp")).session
                for _ in range(3):
                    assert await session.send_prompt("stream 5 chunks") == {"stopReason": "end_turn"}
                r = redis.asyncio.Redis.from_url(server.url)
                try:
                    (key,) = [k async for k in r.scan_iter(match=f"{f.prefix}{{*}}:conn")]
                    deadline = time.monotonic() + 5.0
                    while True:
                        out_seq, mark, in_seq, in_done = await r.hmget(key, "out_seq", "rd:*", "in_seq", "in_done")
                        if mark == out_seq and in_done == in_seq or time.monotonic() > deadline:
                            break
                        await asyncio.sleep(0.01)
                    assert (mark, in_done) == (out_seq, in_seq) and int(in_seq) >= 5
                finally:
                    await r.aclose()

    run(body)


def test_a_reader_moves_its_mark_by_the_window_of_the_host_not_its_own(server: redis_server.RedisServer) -> None:
    """A host given a smaller replay window than its front's (64 entries against 4,096): the
    front's reader moves its read mark every sixteenth of the host's window, in the round
    trips of its reads; a mark by the front's own window would lag until the host paused its
    agent for it (a round trip's output then waited for the front's reads to come back empty)."""

    async def body() -> None:
        import redis.asyncio

        small = StoreLimits(output_entries=64, output_bytes=16 * 1024)
        f = Fleet(server.url)
        try:
            async with contextlib.AsyncExitStack() as stack:
                await f.host(limits=small)
                front = await f.front(stack)
                r = redis.asyncio.Redis.from_url(server.url)
                stack.push_async_callback(r.aclose)
                async with Client.builder().connect(connect_url(front.replace("http://", "ws://"))) as cx:
                    await cx.initialize()
                    session = (await cx.build_session("/tmp")).session
                    (key,) = [k async for k in r.scan_iter(match=f"{f.prefix}{{*}}:conn")]
                    lags = []
                    for _ in range(60):
                        assert await session.send_prompt("stream 1 chunks") == {"stopReason": "end_turn"}
                        out_seq, mark = await r.hmget(key, "out_seq", "rd:*")
                        lags.append(int(out_seq) - int(mark or 0))
                    assert int(out_seq) >= 60 and await r.hmget(key, "win", "win_bytes") == [b"64", b"16384"]
                    # a sixteenth of the window, and the entries of the read that moves it (the
                    # front's own window would let it lag by 256 entries: the host paused at 32)
                    assert max(lags) <= 64 // 16 + 4, lags
        finally:
            await f.close()

    run(body)


def test_a_waiting_reader_uses_no_pooled_redis_connection(server: redis_server.RedisServer) -> None:
    """A reader that waits (a read mark owed, quiet reads, its TTL touches, its host checks)
    calls Redis through the store's lean client only (one shared connection) beside its own
    blocking read: a front's idle readers cost Redis a connection each, not a burst of pooled
    ones on top (2,000 readers that went quiet at once exceeded Redis's client limit so)."""

    async def body() -> None:
        async with fleet(server.url, limits=StoreLimits(connection_ttl=0.8)) as f:
            store = f.stores[1]  # the front's (the host's is the first)
            async with Client.builder().connect(connect_url(f.fronts[0].replace("http://", "ws://"))) as cx:
                await cx.initialize()
                session = (await cx.build_session("/tmp")).session
                assert await session.send_prompt("stream 3 chunks") == {"stopReason": "end_turn"}
                pooled = store._redis
                used: list[str] = []

                class Watched:
                    def __getattr__(self, name: str) -> Any:
                        used.append(name)
                        return getattr(pooled, name)

                store._redis = Watched()  # type: ignore[assignment]
                try:
                    await asyncio.sleep(0.7)  # a mark owed, then quiet reads of 0.2 s each
                    assert await cx.send_request("_test/echo", {"n": 1}) == {"n": 1}
                    await asyncio.sleep(0.3)
                finally:
                    store._redis = pooled
                assert used == []

    run(body)


def test_a_reader_of_a_slow_trickle_keeps_its_connection_alive(server: redis_server.RedisServer) -> None:
    """An agent that writes a small update every few milliseconds, for longer than the
    connection TTL and with no client request meanwhile: the reader's short reads (a read mark
    owed) touch the connection as its waits do, so the turn completes (the connection would
    expire mid-turn otherwise)."""
    from acp_fast import Agent
    from acp_fast.protocol import methods_v1

    agent = Agent.builder()
    agent.on_request(methods_v1.session.new, lambda params, cx: {"sessionId": "trickle"})

    async def prompt(params: Any, cx: Any) -> Any:
        for i in range(300):  # about 1.2 s: twice the TTL, one small entry each
            cx.send_session_update("trickle", {"sessionUpdate": "agent_message_chunk",
                                               "content": {"type": "text", "text": str(i)}})
            await cx.drain()
            await asyncio.sleep(0.004)
        return {"stopReason": "end_turn"}

    agent.on_request(methods_v1.session.prompt, prompt)

    async def body() -> None:
        f = Fleet(server.url, StoreLimits(connection_ttl=0.6))
        try:
            async with contextlib.AsyncExitStack() as stack:
                opener, _ = servable_opener(agent)
                host = AgentHost(f.store(), opener, slots=2, ttl=3.0)
                f.hosts.append(host)
                f.tasks.append(asyncio.ensure_future(host.run()))
                await asyncio.wait_for(host.wait_registered(), 5.0)
                await f.front(stack)
                record: list[Any] = []
                client = Client.builder().on_session_update(lambda u, cx: record.append(u))
                async with client.connect(connect_url(f.fronts[0].replace("http://", "ws://"))) as cx:
                    await cx.initialize()
                    session = (await cx.build_session("/tmp")).session
                    assert await session.send_prompt("go") == {"stopReason": "end_turn"}
                assert numbers(chunks(record)) == list(range(300))
        finally:
            await f.close()

    run(body)


# --- any front, any request ------------------------------------------------------------------


def test_each_request_on_another_front(server: redis_server.RedisServer) -> None:
    """Two fronts behind HAProxy (round robin, each request balanced alone, no stickiness):
    the requests of one connection land on both fronts in turn, and the turn completes with
    every update in order."""

    async def body() -> None:
        async with fleet(server.url, hosts=2, fronts=2) as f:
            lb = haproxy_lb.HaProxy([int(httpx.URL(u).port or 0) for u in f.fronts]).start()
            try:
                await one_turn(f"http://127.0.0.1:{lb.port}/acp", 100)
            finally:
                lb.stop()
            assert all(n >= 2 for n in f.requests)  # both fronts served requests of the connection

    run(body)


# --- resuming on another front ----------------------------------------------------------------


def test_sse_resumes_on_another_front_with_exactly_the_missed_lines(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        async with fleet(server.url, fronts=2) as f:
            one, two = f.fronts
            async with httpx.AsyncClient(timeout=10.0) as http:
                r = await http.post(one, json=INIT)
                assert r.status_code == 200 and r.json()["id"] == 0
                cid = r.headers[CONNECTION_ID_HEADER]
                head = {CONNECTION_ID_HEADER: cid, "accept": "text/event-stream"}
                r = await http.post(two, json=NEW, headers={CONNECTION_ID_HEADER: cid})
                assert r.status_code == 202
                first, cursor = await _events(http, one, head, 1)  # the session/new reply
                assert first[0]["id"] == 1 and "sessionId" in first[0]["result"]
                sid = first[0]["result"]["sessionId"]
                prompt = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                          "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "stream 1000 chunks"}]}}
                assert (await http.post(one, json=prompt, headers={CONNECTION_ID_HEADER: cid})).status_code == 202
                # the session's stream, read on front two and dropped after some updates; resumed
                # on front one: the rest of the updates, then the reply
                session_head = {**head, "acp-session-id": sid}
                part, mid = await _events(http, two, session_head, 10)
                assert 10 <= len(part) < 1001  # dropped mid-turn: the resume has lines to give
                rest, _ = await _events(http, one, {**session_head, "last-event-id": mid}, 1001 - len(part))
                updates = [m for m in part + rest if m.get("method") == "session/update"]
                texts = [m["params"]["update"]["content"]["text"] for m in updates]
                assert numbers(texts) == list(range(1000))  # none lost, none twice
                assert (part + rest)[-1] == {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}
                # the connection stream from the start again, on front two: the same reply
                again, _ = await _events(http, two, {**head, "last-event-id": "0"}, 1)
                assert again == first
                r = await http.get(two, headers={**head, "last-event-id": "999-0"})
                assert r.status_code == 409
                for bogus in (b"bogus", b"1-0.\xb2", b"\xb9-0.1", b"1-0." + b"9" * 5000):  # no int() refusal
                    r = await http.get(two, headers={**head, "last-event-id": bogus})
                    assert r.status_code == 409, bogus
                assert (await http.delete(two, headers={CONNECTION_ID_HEADER: cid})).status_code == 202
                # ended at once; gone (404) once its host has freed it, which follows (a GET in
                # between replays the stream up to its end)
                for _ in range(100):
                    r = await http.get(one, headers={**head, "last-event-id": "999999-0"})
                    if r.status_code == 404:
                        break
                    await asyncio.sleep(0.02)
                assert r.status_code == 404

    run(body)


async def _events(http: httpx.AsyncClient, url: str, headers: dict[str, str], n: int) -> tuple[list[Any], str]:
    """The messages of an SSE stream up to the first body chunk that makes ``n`` or more, and
    the cursor after the last (a chunk ends with an event that has one); the reader then drops
    the stream (its response is closed)."""
    parser = SseParser()
    got: list[Any] = []
    async with http.stream("GET", url, headers=headers) as resp:
        assert resp.status_code == 200, resp.status_code
        async for chunk in resp.aiter_bytes():
            for data in parser.feed(chunk):
                got.append(json.loads(data))
            if len(got) >= n:
                break
    assert len(got) >= n, got
    assert parser.last_event_id is not None
    return got, parser.last_event_id


# --- slots --------------------------------------------------------------------------------------


def test_all_hosts_full_or_none_alive_is_503(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        async with fleet(server.url, hosts=2, slots=1) as f:
            url = f.fronts[0]
            async with httpx.AsyncClient(timeout=10.0) as http:
                ids = []
                for _ in range(2):
                    r = await http.post(url, json=INIT)
                    assert r.status_code == 200
                    ids.append(r.headers[CONNECTION_ID_HEADER])
                r = await http.post(url, json=INIT)
                assert r.status_code == 503 and "every agent host is full" in r.json()["error"]["message"]
                assert {h.connections for h in f.hosts} == {1}  # one each: never above its slots
                # a DELETE frees its slot
                assert (await http.delete(url, headers={CONNECTION_ID_HEADER: ids[0]})).status_code == 202
                assert sorted(await used(f, 1)) == [0, 1]
                r = await http.post(url, json=INIT)
                assert r.status_code == 200
                # no host alive
                for task in f.tasks:
                    task.cancel()
                await asyncio.gather(*f.tasks, return_exceptions=True)
                r = await http.post(url, json=INIT)
                assert r.status_code == 503 and "no agent host is alive" in r.json()["error"]["message"]

    run(body)


def test_max_connections_bounds_the_whole_fleet(server: redis_server.RedisServer) -> None:
    """The single-process server's `max_connections` on fronts: the connections of the whole
    fleet (2 hosts of 4 slots, a maximum of 3), whichever front opens them; the next gets 503."""

    async def body() -> None:
        async with fleet(server.url, hosts=2, fronts=2, slots=4, policy=ServerPolicy(max_connections=3)) as f:
            async with httpx.AsyncClient(timeout=10.0) as http:
                ids = []
                for k in range(3):
                    r = await http.post(f.fronts[k % 2], json=INIT)
                    assert r.status_code == 200
                    ids.append(r.headers[CONNECTION_ID_HEADER])
                for url in f.fronts:
                    r = await http.post(url, json=INIT)
                    assert r.status_code == 503 and "maximum of 3 connections" in r.json()["error"]["message"]
                assert sum(h.connections for h in f.hosts) == 3
                assert (await http.delete(f.fronts[1], headers={CONNECTION_ID_HEADER: ids[0]})).status_code == 202
                assert sum(await used(f, 2)) == 2
                assert (await http.post(f.fronts[1], json=INIT)).status_code == 200

    run(body)


def test_an_idle_connection_expires_on_its_host_and_is_404_on_every_front(server: redis_server.RedisServer) -> None:
    """The single-process server's idle timeout (the store's connection TTL, 1 s here): a
    connection with no request and no reader expires although its agent wrote (the
    initialize reply); its host closes the agent and frees the slot, and every front answers
    a request naming it as the single-process server does: 404."""

    async def body() -> None:
        async with fleet(server.url, fronts=2, limits=StoreLimits(connection_ttl=1.0)) as f:
            async with httpx.AsyncClient(timeout=10.0) as http:
                r = await http.post(f.fronts[0], json=INIT)
                assert r.status_code == 200
                cid = r.headers[CONNECTION_ID_HEADER]
                assert f.hosts[0].connections == 1
                for _ in range(200):  # the TTL, then the host's next quiet slice (1 s)
                    if f.hosts[0].connections == 0:
                        break
                    await asyncio.sleep(0.05)
                assert f.hosts[0].connections == 0
                assert await used(f, 0) == [0]
                head = {CONNECTION_ID_HEADER: cid}
                for url in f.fronts:
                    assert (await http.post(url, json=NEW, headers=head)).status_code == 404
                    r = await http.get(url, headers={**head, "accept": "text/event-stream"})
                    assert r.status_code == 404
                    assert (await http.delete(url, headers=head)).status_code == 404

    run(body)


def test_host_and_front_metrics_scraped(server: redis_server.RedisServer) -> None:
    """A host's series (slots total and used, connections taken, heartbeats) and a front's
    (connections opened, refusals), scraped over HTTP and parsed by `prometheus_client`."""
    from prometheus_client.parser import text_string_to_metric_families

    async def scrape(http: httpx.AsyncClient, url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        r = await http.get(url)
        assert r.status_code == 200
        return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in text_string_to_metric_families(r.text) for sample in family.samples}

    async def body() -> None:
        async with contextlib.AsyncExitStack() as stack:
            f = Fleet(server.url)
            stack.push_async_callback(f.close)
            host = await f.host(slots=3, ttl=0.6)  # a heartbeat every 0.2 s
            front_metrics = ServerMetrics()
            url = await f.front(stack, metrics=front_metrics)
            at_host = await stack.enter_async_context(served(HostMetrics(host).asgi_app()))
            at_front = await stack.enter_async_context(served(front_metrics.asgi_app()))
            async with httpx.AsyncClient(timeout=10.0) as http:
                got = await scrape(http, at_host.http_url)
                assert got[("acp_fast_host_slots", ())] == 3 and got[("acp_fast_host_slots_used", ())] == 0
                r = await http.post(url, json=INIT)
                assert r.status_code == 200
                assert (await http.post(url, json=NEW, headers={CONNECTION_ID_HEADER: "nope"})).status_code == 404
                await asyncio.sleep(0.5)
                got = await scrape(http, at_host.http_url)
                assert got[("acp_fast_host_slots_used", ())] == 1
                assert got[("acp_fast_host_connections_total", ())] == 1
                assert got[("acp_fast_host_heartbeats_total", (("outcome", "sent"),))] >= 1
                assert got[("acp_fast_host_heartbeats_total", (("outcome", "failed"),))] == 0
                got = await scrape(http, at_front.http_url)
                assert got[("acp_fast_connections_opened_total", (("transport", "http"),))] == 1
                assert got[("acp_fast_refusals_total", (("status", "404"),))] == 1

    run(body)


def test_two_fronts_and_two_hosts_hold_240_connections(server: redis_server.RedisServer) -> None:
    """240 WebSocket connections held at once, a session each, through 2 fronts (120 waiting
    readers each: more than redis-py's default pool of 100) on 2 hosts of 120 slots; with all
    held, each answers an echo. (Memory per connection at 2,000: bench/fleet_connections.py.)"""
    import websockets

    k = 240

    async def body() -> None:
        async with fleet(server.url, hosts=2, fronts=2, slots=k // 2) as f:
            urls = [u.replace("http://", "ws://") for u in f.fronts]
            gate = asyncio.Semaphore(32)

            async def answer(ws: Any, request: dict[str, Any]) -> Any:
                await ws.send(json.dumps(request))
                while True:  # the session's notifications may come first
                    got = json.loads(await ws.recv())
                    if got.get("id") == request["id"]:
                        return got.get("result")

            async def one(i: int, stack: contextlib.AsyncExitStack) -> Any:
                async with gate:
                    ws = await stack.enter_async_context(websockets.connect(urls[i % 2], max_queue=None))
                    assert (await answer(ws, INIT))["protocolVersion"] == 1
                    assert isinstance((await answer(ws, NEW))["sessionId"], str)
                    return ws

            async with contextlib.AsyncExitStack() as stack:
                held = await asyncio.gather(*[one(i, stack) for i in range(k)])
                assert sorted(h.connections for h in f.hosts) == [k // 2, k // 2]
                echoes = [answer(ws, {"jsonrpc": "2.0", "id": 2, "method": "_test/echo", "params": {"i": i}})
                          for i, ws in enumerate(held)]
                assert await asyncio.gather(*echoes) == [{"i": i} for i in range(k)]

    run(body, bound=60.0)


def test_a_full_input_queue_holds_the_post_then_refuses_it(server: redis_server.RedisServer) -> None:
    """Backpressure, never a silent drop: a connection whose agent does not read takes POSTs
    up to its queue's bound; the next waits ``push_timeout`` for room and gets 503; once the
    host consumed the queue, POSTs are taken again and the agent got every line, in order."""

    async def body() -> None:
        f = Fleet(server.url, StoreLimits(input_entries=2))
        store = f.store()
        try:
            cid = await store.create_connection("ghost")  # a host that does not read (yet)
            async with served(FleetFront(store, push_timeout=0.3)) as where, httpx.AsyncClient(timeout=10.0) as http:
                head = {CONNECTION_ID_HEADER: cid}
                notes = [{"jsonrpc": "2.0", "method": "_test/note", "params": {"n": n}} for n in range(4)]
                assert [(await http.post(where.http_url, json=notes[n], headers=head)).status_code
                        for n in range(2)] == [202, 202]
                r = await http.post(where.http_url, json=notes[2], headers=head)
                assert r.status_code == 503 and "input queue is full" in r.json()["error"]["message"]
                queued = await store.read_input(cid, "0-0")
                assert [json.loads(e.lines[0])["params"]["n"] for e in queued] == [0, 1]
                await store.read_input(cid, queued[-1].cursor)  # consumed: room again
                assert (await http.post(where.http_url, json=notes[3], headers=head)).status_code == 202
                again = await store.read_input(cid, queued[-1].cursor)
                assert [json.loads(e.lines[0])["params"]["n"] for e in again] == [3]
        finally:
            await f.close()

    run(body)


def test_redis_unreachable_is_503_with_a_clear_body() -> None:
    async def body() -> None:
        store = RedisStore(f"redis://127.0.0.1:{redis_server.free_port()}/0", socket_timeout=0.5, connect_timeout=0.5)
        async with served(FleetFront(store)) as where, httpx.AsyncClient(timeout=10.0) as http:
            r = await http.post(where.http_url, json=INIT)
            assert r.status_code == 503 and "fleet store is unavailable" in r.json()["error"]["message"]
            r = await http.post(where.http_url, json=NEW, headers={CONNECTION_ID_HEADER: "abc"})
            assert r.status_code == 503

    run(body)


# --- resumable WebSockets (acp_fast's resume header) -------------------------------------------


def test_a_resumable_websocket_goes_on_from_its_cursor_and_frames_on_any_front(
        server: redis_server.RedisServer) -> None:
    """Entries written straight to the store (no host): a resume upgrade naming a cursor and
    the frames received after it gets exactly the frames that follow, each entry's followed by
    its cursor in a binary frame; refusals are 400 (malformed), 404 (unknown), 409 (outside the
    window). A resumable socket that drops without a close frame leaves the connection open; a
    clean close ends it."""
    import websockets
    from websockets.exceptions import InvalidStatus

    from acp_fast.remote.client import RESUME_HEADER

    async def frames(ws: Any, count: int) -> list[str | bytes]:
        return [await asyncio.wait_for(ws.recv(), 5.0) for _ in range(count)]

    async def body() -> None:
        async with fleet(server.url, hosts=0, fronts=2) as f:
            store = f.store()
            cid = await store.create_connection("nohost")
            notes = [b'{"jsonrpc":"2.0","method":"n","params":{"k":%d}}' % k for k in range(4)]
            await store.append_output(cid, notes[:3])
            await store.append_output(cid, notes[3:])
            urls = [u.replace("http://", "ws://") for u in f.fronts]
            for front in urls:  # either front, the same frames from the same point
                async with websockets.connect(front, additional_headers={RESUME_HEADER: f"{cid} 0-0 1"}) as ws:
                    assert await frames(ws, 5) == [notes[1].decode(), notes[2].decode(), b"1-0", notes[3].decode(),
                                                   b"2-0"]
                    ws.transport.abort()  # dropped without a close frame: the connection stays
            await asyncio.sleep(0.2)
            assert await store.read_output(cid, "2-0") == []  # no end marker: still open
            async with websockets.connect(urls[1], additional_headers={RESUME_HEADER: f"{cid} 1-0 0"}) as ws:
                assert await frames(ws, 2) == [notes[3].decode(), b"2-0"]
            for value, status in ((f"{cid} 9-0 0", 409), ("nope 0-0 0", 404), (f"{cid} 0-0", 400),
                                  (f"{cid} 0-0 \xb2", 400), (f"{cid} 0-0 {'9' * 5000}", 400)):
                with pytest.raises(InvalidStatus) as refused:
                    async with websockets.connect(urls[0], additional_headers={RESUME_HEADER: value}):
                        pass
                assert refused.value.response.status_code == status, value
            with pytest.raises(ConnectionEnded):  # the clean close above ended it
                for _ in range(50):
                    await store.read_output(cid, "2-0")
                    await asyncio.sleep(0.02)

    run(body)


def test_a_waiting_reader_keeps_its_connection_alive(server: redis_server.RedisServer) -> None:
    """A connection TTL of 0.4 s, shorter than the front's host check (1 s), and a WebSocket
    quiet for 1.5 s: its reader restarts the TTL as it waits (within a quarter of the TTL), so
    the connection, its agent and its session live."""

    async def body() -> None:
        async with fleet(server.url, limits=StoreLimits(connection_ttl=0.4)) as f:
            client = Client.builder()
            async with client.connect(connect_url(f.fronts[0].replace("http://", "ws://"))) as cx:
                await cx.initialize()
                await asyncio.sleep(1.5)
                assert await cx.send_request("_test/echo", {"n": 2}) == {"n": 2}
                assert f.hosts[0].connections == 1

    run(body)


def test_a_reader_keeps_its_connection_alive_through_a_turn_longer_than_the_ttl(
        server: redis_server.RedisServer) -> None:
    """A connection TTL of 0.8 s and a turn that streams for longer: the agent's output alone
    restarts no TTL (the single-process server's idle rule), the reader's touches do (as
    entries arrive, and within a quarter of the TTL while it waits for the host to go on, the
    host check being longer), so the turn completes whole."""
    ttl, n = 0.8, 400_000

    async def body() -> None:
        async with fleet(server.url, fronts=0, limits=StoreLimits(connection_ttl=ttl)) as f:
            seen = [0]
            wrong: list[str] = []

            def on_update(update: Any, cx: Any) -> None:  # in order, none lost (none kept: n is large)
                if update.kind == "agent_message_chunk":
                    text = update.payload["content"]["text"]
                    if not text.startswith(str(seen[0])):
                        wrong.append(text[:20])
                    seen[0] += 1

            client = Client.builder().on_session_update(on_update)
            async with served(FleetFront(f.store(), host_check=1.0)) as where:
                async with client.connect(connect_url(where.ws_url)) as cx:
                    await cx.initialize()
                    session = (await cx.build_session("/tmp")).session
                    start = time.monotonic()
                    assert await session.send_prompt(f"stream {n} chunks") == {"stopReason": "end_turn"}
                    took = time.monotonic() - start
            assert seen[0] == n and not wrong, (seen[0], wrong[:3])
            assert took > 2 * ttl, f"the turn took {took:.2f} s: too short to outlive the TTL"

    run(body)


def test_a_store_failure_of_its_own_is_a_clear_503_not_a_traceback(server: redis_server.RedisServer,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A store error that is not one of the named refusals (an unexpected reply, say) before
    any response: the SSE GET and the resumable WebSocket upgrade both get 503 with a body."""
    import websockets
    from websockets.exceptions import InvalidStatus

    from acp_fast.fleet import StoreError
    from acp_fast.remote.client import RESUME_HEADER

    async def body() -> None:
        async with fleet(server.url, hosts=0, fronts=1) as f:
            cid = await f.store().create_connection("nohost")

            async def failing(*args: Any, **kwargs: Any) -> Any:
                raise StoreError("the fleet store at redis://… failed: an unexpected reply")

            for store in f.stores:
                monkeypatch.setattr(store, "read_output", failing)
            async with httpx.AsyncClient() as http:
                got = await http.get(f.fronts[0], headers={"Accept": "text/event-stream", CONNECTION_ID_HEADER: cid})
            assert got.status_code == 503 and b"unavailable" in got.content
            with pytest.raises(InvalidStatus) as refused:
                async with websockets.connect(f.fronts[0].replace("http://", "ws://"),
                                              additional_headers={RESUME_HEADER: f"{cid} 0-0 0"}):
                    pass
            assert refused.value.response.status_code == 503

    run(body)


def test_readers_waiting_at_the_same_place_share_one_read() -> None:
    """Readers of one connection on one front that wait at the same cursor for the same time
    share one store read (its entries go to each); a read elsewhere or for another wait is
    its own; when the reader whose task makes the read leaves, the others read on their own."""
    from acp_fast.fleet import Entry
    from acp_fast.fleet.front import SharedReads

    class Store:
        def __init__(self) -> None:
            self.calls: list[tuple[str, str, float]] = []
            self.release = asyncio.Event()

        async def follow_output(self, cid: str, after: str, *, block: float, count: int) -> list[Entry]:
            self.calls.append((cid, after, block))
            await self.release.wait()
            return [Entry(f"{int(after[:-2]) + 1}-0", [b"{}"], None, True)]

    async def body() -> None:
        store = Store()
        reads = SharedReads(store)  # type: ignore[arg-type]
        tasks = [asyncio.ensure_future(reads.follow("c", "1-0", 0.5, 4)) for _ in range(3)]
        other = asyncio.ensure_future(reads.follow("c", "2-0", 0.5, 4))
        longer = asyncio.ensure_future(reads.follow("c", "1-0", 5.0, 4))
        await asyncio.sleep(0.01)
        assert sorted(store.calls) == [("c", "1-0", 0.5), ("c", "1-0", 5.0), ("c", "2-0", 0.5)]
        store.release.set()
        got = await asyncio.gather(*tasks)
        assert all(entries is got[0] for entries in got) and got[0][0].cursor == "2-0"
        assert (await other)[0].cursor == "3-0" and (await longer)[0].cursor == "2-0"
        # the reader making the read leaves: each other reader reads on its own
        store.calls.clear()
        store.release.clear()
        first = asyncio.ensure_future(reads.follow("c", "5-0", 0.5, 4))
        await asyncio.sleep(0.01)
        rest = [asyncio.ensure_future(reads.follow("c", "5-0", 0.5, 4)) for _ in range(2)]
        await asyncio.sleep(0.01)
        assert len(store.calls) == 1
        first.cancel()
        await asyncio.sleep(0.01)
        assert len(store.calls) >= 2  # a reader took over (its read is its own or shared again)
        store.release.set()
        assert [entries[0].cursor for entries in await asyncio.gather(*rest)] == ["6-0", "6-0"]

    run(body)


def test_a_readers_entry_count_adapts_to_the_bytes_it_reads() -> None:
    """A reader asks for fewer entries after a read over `READ_BYTES`, twice as many after a
    full read under half of it (up to the store's most), else the same."""
    from acp_fast.fleet.front import READ_BYTES, _next_count

    most = 256
    assert _next_count(4, 4, 4 * READ_BYTES, most) == 1  # 4 MiB in 4 entries: one at a time
    assert _next_count(1, 1, 10 * READ_BYTES, most) == 1  # never below one
    assert _next_count(64, 64, 2 * READ_BYTES, most) == 32
    assert _next_count(4, 4, 1000, most) == 8  # full and small: grows
    assert _next_count(200, 200, 1000, most) == most
    assert _next_count(8, 3, 1000, most) == 8  # not full: the backlog is read, no need to grow
    assert _next_count(8, 8, READ_BYTES, most) == 8  # between half and all of it: kept


def test_a_dropped_resumable_websocket_frees_its_agent_after_the_grace_unless_resumed(
        server: redis_server.RedisServer) -> None:
    """Grace 0.6 s, idle timeout 300 s. A resumable WebSocket dropped without a close frame and
    never resumed: its connection expires after the grace and its host frees the slot (not after
    the idle timeout). One resumed on the other front within the grace: still served after
    several graces, since the resumed reader numbers itself after the dropped one."""
    import websockets

    from acp_fast.remote.client import RESUME_HEADER

    grace = 0.6

    async def opened(url: str, header: str) -> tuple[Any, str]:
        ws = await websockets.connect(url, additional_headers={RESUME_HEADER: header})
        cid = ws.response.headers[CONNECTION_ID_HEADER]
        await ws.send(json.dumps(INIT))
        return ws, cid

    async def until(ws: Any, rid: int) -> Any:
        while True:
            got = await asyncio.wait_for(ws.recv(), 5.0)
            if isinstance(got, str) and json.loads(got).get("id") == rid:
                return json.loads(got)

    async def body() -> None:
        async with fleet(server.url, fronts=2, resume_grace=grace) as f:
            urls = [u.replace("http://", "ws://") for u in f.fronts]
            store = f.stores[0]
            # never resumed: gone after the grace, the slot freed
            ws, gone = await opened(urls[0], "new")
            assert (await until(ws, 0))["result"]["protocolVersion"] == 1
            ws.transport.abort()
            assert await used(f, 1) == [1]
            for _ in range(100):
                if await store.connection_host(gone) is None:
                    break
                await asyncio.sleep(0.1)
            assert await store.connection_host(gone) is None, "the dropped connection outlived its grace"
            for _ in range(50):  # the host finds it expired at its next quiet read (a slice: 1 s here)
                if await used(f, 0) == [0]:
                    break
            assert await used(f, 0) == [0]
            # resumed within the grace, on the other front: lives on
            ws, kept = await opened(urls[0], "new")
            assert (await until(ws, 0))["result"]["protocolVersion"] == 1
            ws.transport.abort()
            back = await websockets.connect(urls[1], additional_headers={RESUME_HEADER: f"{kept} 0-0 0"})
            await asyncio.sleep(grace * 4)
            assert await store.connection_host(kept) is not None
            await back.send(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "_test/echo", "params": {"k": 1}}))
            assert (await until(back, 7))["result"] == {"k": 1}
            await back.close()

    run(body)


def test_redis_stopped_and_restarted_fails_open_connections_clearly_and_service_resumes() -> None:
    """A Redis of the test's own: a WebSocket open when it is killed ends (the client's pending
    request fails, nothing hangs); new connections get 503 while it is down; once it is back
    on the same port (empty: no persistence), the host registers again and a new connection
    runs a whole turn."""
    own = redis_server.RedisServer().start()

    async def body() -> None:
        async with fleet(own.url) as f:
            url = f.fronts[0].replace("http://", "ws://")
            client = Client.builder()
            async with client.connect(connect_url(url)) as cx:
                await cx.initialize()
                own.kill()
                with pytest.raises(JsonRpcError):
                    await asyncio.wait_for(cx.send_request("_test/echo", {"n": 1}), 10.0)
            async with httpx.AsyncClient(timeout=10.0) as http:
                r = await http.post(f.fronts[0], json=INIT)
                assert r.status_code == 503 and "unavailable" in r.json()["error"]["message"]
            own.start()
            for _ in range(100):  # the host notices (a failed heartbeat) and registers again
                try:
                    if await f.stores[0].live_hosts():
                        break
                except StoreUnavailable:  # this store's connection used just before the kill
                    pass
                await asyncio.sleep(0.1)
            await one_turn(f.fronts[0], 20)

    try:
        run(body)
    finally:
        own.kill()
