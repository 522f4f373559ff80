"""The fleet store (``acp_fast.fleet``) against a real Redis: every primitive and every bound.

A ``redis-server`` runs on a free loopback port for the module (``tests/helpers/redis_server.py``;
a missing binary or redis-py skips the module on a developer's machine and fails it where the
peers are required); each test works under its own key prefix. What is checked:

* the host registry: slots claimed up to the count and never beyond, also when many claims
  race; released slots; heartbeats, and a host whose TTL ran out is dead everywhere (alive,
  listed, claimable, its heartbeat) until it registers again;
* the connection registry: unguessable ids, look-up, touch, delete, expiry with the TTL (the
  streams too), ids of any other shape unknown;
* the output stream: one entry per batch, cursors in order, reads from a cursor, a blocking read
  woken by a write and one that times out, both bounds of the replay window (entries, bytes),
  cursors outside the window (trimmed, beyond the end, malformed);
* the input queue: order, consumption, both bounds with ``InputQueueFull`` (nothing queued, no
  silent drop), racing pushes never overfilling it, a batch larger than the queue;
* Redis unreachable (nothing listening, killed during a blocking read, frozen): every call raises
  ``StoreUnavailable`` naming the URL (never its password) within the socket timeout, and the
  store works again once Redis is back.

Short TTLs and timeouts keep the module within a few seconds; every await is bounded.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

import peer_rule  # noqa: E402
import redis_server  # noqa: E402
from redis_server import own_server, server  # noqa: E402,F401  (the fixtures)

redis_asyncio = peer_rule.require_module("redis.asyncio", "redis", "redis-py (the fleet extra) is not installed")

from acp_fast.fleet import (  # noqa: E402
    ALL_STREAMS,
    STREAM_START,
    ConnectionEnded,
    CursorOutOfWindow,
    HostState,
    InputQueueFull,
    RedisStore,
    StoreLimits,
    StoreUnavailable,
    UnknownConnection,
)
from acp_fast.remote import MissingExtraError  # noqa: E402

T = TypeVar("T")

#: Seconds any one test body may take: a hang fails the test instead of the run.
BOUND = 10.0
#: The socket timeout of the stores under test: a frozen server is noticed within it.
SOCKET_TIMEOUT = 0.5




def run(body: Callable[[], Awaitable[T]], bound: float = BOUND) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(body(), bound)

    return asyncio.run(bounded())


def make(url: str, **limits: Any) -> RedisStore:
    """A store under a fresh key prefix (tests share the module's server)."""
    return RedisStore(url, limits=StoreLimits(**limits), prefix=f"t{secrets.token_hex(4)}:",
                      socket_timeout=SOCKET_TIMEOUT, connect_timeout=SOCKET_TIMEOUT)


def raw(url: str) -> Any:
    """A plain redis-py client, to look at the keys the store documents."""
    return redis_asyncio.Redis.from_url(url)


# --- host registry ------------------------------------------------------------------------


def test_hosts_register_claim_and_release_their_slots(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url)
        await store.register_host("h1", 2, 5.0)
        await store.register_host("h2", 1, 5.0)
        assert sorted(await store.live_hosts()) == [HostState("h1", 2, 0), HostState("h2", 1, 0)]
        assert [await store.claim_slot("h1") for _ in range(3)] == [True, True, False]
        assert await store.claim_slot("h2") and not await store.claim_slot("h2")
        hosts = {h.host_id: h for h in await store.live_hosts()}
        assert hosts["h1"].free == 0 and hosts["h1"].used == 2 and hosts["h2"].free == 0
        await store.release_slot("h1")
        assert await store.claim_slot("h1")
        for _ in range(5):  # never below 0
            await store.release_slot("h2")
        assert [h.used for h in await store.live_hosts() if h.host_id == "h2"] == [0]
        await store.release_slot("nobody")  # an unknown host: nothing
        assert not await store.claim_slot("nobody")
        await store.unregister_host("h2")
        assert [h.host_id for h in await store.live_hosts()] == ["h1"]
        assert not await store.host_alive("h2") and not await store.claim_slot("h2")
        assert not await store.heartbeat("h2", 5.0)
        # registering again is a new life: its slots count from 0
        await store.register_host("h1", 3, 5.0)
        assert await store.live_hosts() == [HostState("h1", 3, 0)]
        for bad in ("", "a b", "x" * 65, "h}1", "é"):
            with pytest.raises(ValueError):
                await store.register_host(bad, 1, 1.0)
        with pytest.raises(ValueError):
            await store.register_host("h3", 0, 1.0)
        await store.close()

    run(body)


def test_racing_claims_never_take_a_host_above_its_slots(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        # four clients (as four fronts), with default timeouts: the burst opens many connections
        prefix = f"t{secrets.token_hex(4)}:"
        stores = [RedisStore(server.url, prefix=prefix) for _ in range(4)]
        first = stores[0]
        await first.register_host("a", 7, 30.0)  # a heartbeat TTL no burst outlasts, even under load
        await first.register_host("b", 3, 30.0)
        claims = [stores[i % 4].claim_slot("ab"[i % 2]) for i in range(200)]
        won = await asyncio.gather(*claims)
        assert sum(won[0::2]) == 7 and sum(won[1::2]) == 3
        assert sorted(await first.live_hosts()) == [HostState("a", 7, 7), HostState("b", 3, 3)]
        # releases racing with claims: still never above
        mixed = [first.release_slot("a") for _ in range(4)] + [stores[i % 4].claim_slot("a") for i in range(100)]
        taken = sum(1 for r in (await asyncio.gather(*mixed))[4:] if r)
        assert taken <= 4
        assert [h.used for h in await first.live_hosts() if h.host_id == "a"] == [7 - 4 + taken]
        for store in stores:
            await store.close()

    run(body)


def test_racing_claims_never_take_the_fleet_above_its_maximum(server: redis_server.RedisServer) -> None:
    """`fleet_max` counts the taken slots of every live host in the claim's script: claims
    racing from four clients on two hosts take exactly the maximum; a dead host's slots do
    not count."""

    async def body() -> None:
        prefix = f"t{secrets.token_hex(4)}:"
        stores = [RedisStore(server.url, prefix=prefix) for _ in range(4)]
        first = stores[0]
        await first.register_host("a", 50, 30.0)  # a heartbeat TTL no burst outlasts, even under load
        await first.register_host("b", 50, 30.0)
        won = await asyncio.gather(*[stores[i % 4].claim_slot("ab"[i % 2], 30) for i in range(100)])
        assert sum(won) == 30
        assert sum(h.used for h in await first.live_hosts()) == 30
        assert not await first.claim_slot("a", 30) and await first.claim_slot("a", 31)
        assert await first.claim_slot("a")  # no maximum: only the host's slots
        await first.register_host("c", 5, 0.2)
        assert await first.claim_slot("c", 40)
        assert not await first.claim_slot("a", 33)  # 32 on a and b, 1 on c
        await asyncio.sleep(0.3)  # c is dead: its slot no longer counts
        assert await first.claim_slot("a", 33)
        for store in stores:
            await store.close()

    run(body)


def test_a_host_whose_heartbeat_stops_is_dead_until_it_registers_again(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url)
        ttl = 0.3
        await store.register_host("alive", 2, ttl)
        await store.register_host("dies", 2, ttl)
        assert await store.claim_slot("dies")
        for _ in range(3):  # heartbeats keep "alive" alive past its TTL
            await asyncio.sleep(ttl / 2)
            assert await store.heartbeat("alive", ttl)
        assert await store.host_alive("alive")
        # "dies" sent none: dead everywhere
        assert not await store.host_alive("dies")
        assert not await store.claim_slot("dies")
        assert [h.host_id for h in await store.live_hosts()] == ["alive"]
        assert not await store.heartbeat("dies", ttl)  # it must register again
        await store.register_host("dies", 2, ttl)
        assert await store.host_alive("dies") and await store.claim_slot("dies")
        assert sorted(await store.live_hosts())[1] == HostState("dies", 2, 1)
        await store.close()

    run(body)


# --- connection registry ------------------------------------------------------------------


def test_connections_are_created_looked_up_touched_and_deleted(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url)
        ids = [await store.create_connection("h1") for _ in range(20)]
        assert len(set(ids)) == 20
        assert all(len(i) == 32 and all(c.isalnum() or c in "-_" for c in i) for i in ids)
        cid = ids[0]
        assert await store.connection_host(cid) == "h1"
        assert await store.touch_connection(cid)
        assert await store.delete_connection(cid)
        assert not await store.delete_connection(cid)
        assert await store.connection_host(cid) is None
        assert not await store.touch_connection(cid)
        for call in (store.append_output(cid, [b"x"]), store.push_input(cid, [b"x"]),
                     store.read_output(cid, STREAM_START), store.read_input(cid, STREAM_START)):
            with pytest.raises(UnknownConnection):
                await call
        # ids of another shape (another connection's keys cannot be reached through them)
        for bad in ("", "a}b", "{" + ids[1] + "}", ids[1] + ":x", "x" * 65, "é"):
            assert await store.connection_host(bad) is None
            assert not await store.touch_connection(bad) and not await store.delete_connection(bad)
            with pytest.raises(UnknownConnection):
                await store.append_output(bad, [b"x"])
        assert await store.connection_host(ids[1]) == "h1"
        await store.close()

    run(body)


def test_a_connection_expires_with_its_streams_unless_touched(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        ttl = 0.4
        store = make(server.url, connection_ttl=ttl)
        look = raw(server.url)
        cid = await store.create_connection("h1")
        await store.append_output(cid, [b"out"])
        await store.push_input(cid, [b"in"])
        keys = [f"{store.prefix}{{{cid}}}:{k}" for k in ("conn", "out", "in", "ob")]
        assert await look.exists(*keys) == 4
        for _ in range(3):  # a reader's touches keep it, every key of it
            await asyncio.sleep(ttl / 2)
            assert await store.touch_connection(cid)
        assert await look.exists(*keys) == 4
        await asyncio.sleep(ttl / 2)
        await store.push_input(cid, [b"more in"])  # and a client's request, every key of it
        assert min([await look.pttl(key) for key in keys]) > ttl * 1000 * 0.6
        await asyncio.sleep(ttl / 2)
        assert await store.connection_host(cid) == "h1"
        await store.append_output(cid, [b"more"])  # the agent's output alone keeps nothing alive
        await asyncio.sleep(ttl / 2 + 0.1)  # gone, streams too
        assert await store.connection_host(cid) is None
        assert await look.exists(*keys) == 0
        await look.aclose()
        await store.close()

    run(body)


def test_every_key_of_a_connection_expires_also_when_it_ends_without_output(
        server: redis_server.RedisServer) -> None:
    """The end marker (with or without error responses for the requests in flight) is the
    first write of the output stream and of its byte index: both take the record's TTL."""

    async def body() -> None:
        store = make(server.url)
        look = raw(server.url)
        for fail in (False, True):
            cid = await store.create_connection("h1")
            await store.push_input(cid, [b'{"jsonrpc":"2.0","id":7,"method":"x"}'], ["7"])
            assert await store.end_output(cid, "the host is gone", fail_pending=fail)
            keys = [f"{store.prefix}{{{cid}}}:{k}" for k in ("conn", "out", "in", "rd", "ob")]
            ttls = {key.rsplit(":", 1)[1]: await look.pttl(key) for key in keys}
            assert {k for k, t in ttls.items() if t != -2} == {"conn", "out", "in", "ob"}, ttls
            assert all(t > 0 for t in ttls.values() if t != -2), ttls  # none kept for ever
        await look.aclose()
        await store.close()

    run(body)


# --- the output stream --------------------------------------------------------------------


def test_output_batches_are_entries_read_from_cursors(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url, read_count=3)
        cid = await store.create_connection("h1")
        assert await store.read_output(cid, STREAM_START) == []
        batches = [[b'{"n":%d}' % i, b'{"m":"%d"}' % i][: 1 + i % 2] for i in range(5)]
        cursors = [await store.append_output(cid, batch) for batch in batches]
        assert cursors == [f"{i}-0" for i in range(1, 6)]
        first = await store.read_output(cid, STREAM_START)
        assert [e.cursor for e in first] == cursors[:3] and [e.lines for e in first] == batches[:3]
        rest = await store.read_output(cid, first[-1].cursor)
        assert [e.lines for e in rest] == batches[3:]
        assert await store.read_output(cid, cursors[-1]) == []
        with pytest.raises(ValueError):
            await store.append_output(cid, [])
        await store.close()

    run(body)


def test_a_blocking_output_read_wakes_on_a_write_and_times_out_otherwise(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url)
        cid = await store.create_connection("h1")
        start = time.monotonic()
        assert await store.read_output(cid, STREAM_START, block=0.3) == []
        assert 0.25 <= time.monotonic() - start < 2.0
        # longer than the socket timeout: waited in slices, no error
        start = time.monotonic()
        assert await store.read_output(cid, STREAM_START, block=SOCKET_TIMEOUT * 1.5) == []
        assert time.monotonic() - start >= SOCKET_TIMEOUT * 1.4

        async def later() -> None:
            await asyncio.sleep(0.1)
            await store.append_output(cid, [b"late"])

        writer = asyncio.ensure_future(later())
        start = time.monotonic()
        got = await store.read_output(cid, STREAM_START, block=5.0)
        assert [e.lines for e in got] == [[b"late"]] and time.monotonic() - start < 2.0
        await writer
        # the input queue's blocking read too
        writer = asyncio.ensure_future(asyncio.sleep(0.1))
        pusher = asyncio.ensure_future(_push_later(store, cid))
        got = await store.read_input(cid, STREAM_START, block=5.0)
        assert [e.lines for e in got] == [[b"typed"]]
        await writer
        await pusher
        await store.close()

    run(body)


async def _push_later(store: RedisStore, cid: str) -> None:
    await asyncio.sleep(0.1)
    await store.push_input(cid, [b"typed"])


def test_the_replay_window_is_bounded_in_entries(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        cap = 5
        store = make(server.url, output_entries=cap)
        look = raw(server.url)
        node = int((await look.config_get("stream-node-max-entries"))["stream-node-max-entries"])
        cid = await store.create_connection("h1")
        appended = 3 * (cap + node)
        for i in range(appended):
            await store.append_output(cid, [b"%d" % i])
        length = await look.xlen(f"{store.prefix}{{{cid}}}:out")
        assert cap <= length <= cap + node, (length, appended)  # MAXLEN ~: up to one node more
        index = await look.zrange(f"{store.prefix}{{{cid}}}:ob", 0, -1)  # the byte index: bounded too
        assert [int(n) for n in index] == list(range(appended - cap, appended + 1))
        with pytest.raises(CursorOutOfWindow):
            await store.read_output(cid, STREAM_START)
        last = f"{appended}-0"
        tail = await store.read_output(cid, f"{appended - cap}-0")
        assert [e.cursor for e in tail][-1] == last and len(tail) == cap
        await look.aclose()
        await store.close()

    run(body)


def test_the_replay_window_is_bounded_in_bytes_and_keeps_the_newest_entry(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        cap = 1000
        store = make(server.url, output_bytes=cap)
        look = raw(server.url)
        cid = await store.create_connection("h1")
        key = f"{store.prefix}{{{cid}}}:out"
        for i in range(60):
            await store.append_output(cid, [b"%02d" % i + b"x" * 48, b"y" * 49])  # 100 bytes joined
            kept = sum(len(f[b"d"]) for _, f in await look.xrange(key))
            assert kept <= cap and kept >= min(cap, 100 * (i + 1)) - 99, (i, kept)
        entries = await store.read_output(cid, "50-0")  # the window: 51..60
        assert [e.cursor for e in entries] == [f"{i}-0" for i in range(51, 61)]
        index = f"{store.prefix}{{{cid}}}:ob"  # the byte index: the kept entries, by their offsets
        assert await look.zrange(index, 0, -1, withscores=True) == [
            (b"%d" % i, float(100 * (i - 1))) for i in range(51, 61)]
        with pytest.raises(CursorOutOfWindow):
            await store.read_output(cid, "49-0")  # 50 was trimmed
        with pytest.raises(CursorOutOfWindow):  # a reader that follows finds it too (what it read starts at 51)
            await store.follow_output(cid, "49-0", block=1.0)
        assert [e.cursor for e in await store.follow_output(cid, "50-0", block=1.0, count=2)] == ["51-0", "52-0"]
        # one batch larger than the window alone: it stays, alone
        await store.append_output(cid, [b"z" * (3 * cap)])
        assert [len(f[b"d"]) for _, f in await look.xrange(key)] == [3 * cap]
        assert [e.cursor for e in await store.read_output(cid, "60-0")] == ["61-0"]
        assert await look.zrange(index, 0, -1) == [b"61"]
        assert await store.delete_connection(cid)
        assert await look.exists(key, index) == 0
        await look.aclose()
        await store.close()

    run(body)


def test_the_window_a_host_keeps_is_noted_by_its_first_append_for_readers_elsewhere(
        server: redis_server.RedisServer) -> None:
    async def body() -> None:
        host = make(server.url, output_entries=64, output_bytes=5000)
        reader = RedisStore(server.url, prefix=host.prefix)  # a front's store: the default limits
        cid = await host.create_connection("h1")
        assert await reader.output_window(cid) is None  # nothing appended yet
        await host.append_output(cid, [b"first"])
        await host.append_output(cid, [b"second"])
        assert await reader.output_window(cid) == (64, 5000) != (reader.limits.output_entries,
                                                                  reader.limits.output_bytes)
        assert await reader.output_window("unknown-connection") is None
        assert await host.delete_connection(cid)
        assert await reader.output_window(cid) is None
        await reader.close()
        await host.close()

    run(body)


def test_cursors_outside_the_window_are_reported_without_waiting(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url)
        cid = await store.create_connection("h1")
        for i in range(3):
            await store.append_output(cid, [b"%d" % i])
        for bad in ("4-0", "99-0", "abc", "", "1-1", "-1-0", "01-0", "1-0-0", "1", "-0", "\u0661-0", "+1-0",
                    " 1-0", "1-0\n", "1" * 19 + "-0"):
            start = time.monotonic()
            with pytest.raises(CursorOutOfWindow) as caught:
                await store.read_output(cid, bad, block=5.0)
            assert caught.value.cursor == bad and time.monotonic() - start < 1.0
        assert [e.cursor for e in await store.read_output(cid, "2-0", block=5.0)] == ["3-0"]
        await store.close()

    run(body)


def test_a_cursor_is_n_dash_zero_in_ascii_digits_without_a_leading_zero() -> None:
    """Every cursor the store is handed (and every one a front reads in a client's header) is
    parsed by string methods; they take exactly the shape `(0|[1-9][0-9]{0,17})-0` (checked
    against that pattern on edge cases)."""
    import re

    from acp_fast.fleet.store import cursor_number as _seq

    shape = re.compile(r"(0|[1-9][0-9]{0,17})-0")
    cases = ["0-0", "1-0", "10-0", "9" * 18 + "-0", "9" * 19 + "-0", "00-0", "01-0", "-0", "", "0", "1-1",
             "1-00", "a-0", "1a-0", "\u0661-0", "\u00b2-0", "+1-0", " 1-0", "1-0 ", "1-0\n", "1_0-0", "-1-0"]
    for case in cases:
        assert _seq(case) == (int(case[:-2]) if shape.fullmatch(case) else None), case


def test_a_request_id_is_named_by_its_json_text_whichever_side_names_it() -> None:
    """Fronts name the requests they push, hosts the ones their agent answers: both by
    `request_json`, which must give the JSON text of every id (an int's digits without the
    encoder; a bool, a float, a string or null through it)."""
    import json

    from acp_fast.fleet.store import request_json

    for ident in (0, 7, -3, 10**30, True, False, 1.5, 2.0, "7", "", "a\"b", "é", None):
        assert request_json(ident) == json.dumps(ident), ident
    assert request_json(7) != request_json("7")


# --- the input queue ----------------------------------------------------------------------


def test_the_input_queue_is_consumed_in_order(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url, read_count=2)
        cid = await store.create_connection("h1")
        sent = [[b'{"id":%d}' % i] for i in range(5)]
        cursors = [await store.push_input(cid, batch) for batch in sent]
        got: list[list[bytes]] = []
        after = STREAM_START
        while entries := await store.read_input(cid, after):
            got += [e.lines for e in entries]
            after = entries[-1].cursor
        assert got == sent and after == cursors[-1]
        with pytest.raises(ValueError):
            await store.read_input(cid, "nope")
        await store.close()

    run(body)


def test_the_input_queue_is_bounded_in_entries_with_backpressure(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url, input_entries=3)
        cid = await store.create_connection("h1")
        for i in range(3):
            await store.push_input(cid, [b"%d" % i])
        with pytest.raises(InputQueueFull) as full:
            await store.push_input(cid, [b"3"])
        assert full.value.connection_id == cid
        queued = await store.read_input(cid, STREAM_START)
        assert [e.lines for e in queued] == [[b"0"], [b"1"], [b"2"]]  # nothing dropped, nothing added
        # reading does not free room: consuming does (the next read names what was consumed)
        with pytest.raises(InputQueueFull):
            await store.push_input(cid, [b"3"])
        assert [e.lines for e in await store.read_input(cid, queued[0].cursor)] == [[b"1"], [b"2"]]
        assert await store.push_input(cid, [b"3"]) == "4-0"
        with pytest.raises(InputQueueFull):
            await store.push_input(cid, [b"4"])
        assert [e.lines for e in await store.read_input(cid, "4-0")] == []
        for i in range(3):
            await store.push_input(cid, [b"again %d" % i])
        await store.close()

    run(body)


def test_the_input_queue_is_bounded_in_bytes_with_backpressure(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url, input_bytes=100)
        cid = await store.create_connection("h1")
        await store.push_input(cid, [b"a" * 30, b"b" * 29])  # 60 bytes joined
        with pytest.raises(InputQueueFull):
            await store.push_input(cid, [b"c" * 41])
        await store.push_input(cid, [b"c" * 40])  # exactly 100
        with pytest.raises(InputQueueFull):
            await store.push_input(cid, [b"d"])
        with pytest.raises(ValueError):
            await store.push_input(cid, [b"e" * 101])  # never fits
        queued = await store.read_input(cid, STREAM_START)
        assert [e.lines for e in queued] == [[b"a" * 30, b"b" * 29], [b"c" * 40]]
        await store.read_input(cid, queued[0].cursor)
        await store.push_input(cid, [b"d" * 60])
        with pytest.raises(InputQueueFull):
            await store.push_input(cid, [b"e"])
        await store.close()

    run(body)


def test_racing_pushes_never_overfill_the_queue(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        # default timeouts (not make()'s 0.5 s): the burst opens many connections at once
        store = RedisStore(server.url, limits=StoreLimits(input_entries=10), prefix=f"t{secrets.token_hex(4)}:")
        cid = await store.create_connection("h1")
        others = [RedisStore(server.url, limits=store.limits, prefix=store.prefix) for _ in range(3)]
        pushers = [*others, store]
        results = await asyncio.gather(*(pushers[i % 4].push_input(cid, [b"%d" % i]) for i in range(80)),
                                       return_exceptions=True)
        won = [r for r in results if isinstance(r, str)]
        others_failed = [repr(r) for r in results if not isinstance(r, (str, InputQueueFull))]
        assert len(won) == 10 and not others_failed, others_failed
        assert sorted(won, key=lambda c: int(c[:-2])) == [f"{i}-0" for i in range(1, 11)]
        assert len(await store.read_input(cid, STREAM_START)) == 10
        for each in pushers:
            await each.close()

    run(body)


# --- Redis unavailable ----------------------------------------------------------------------


def _every_call(store: RedisStore, cid: str) -> list[Awaitable[Any]]:
    return [
        store.register_host("h", 1, 1.0), store.heartbeat("h", 1.0), store.unregister_host("h"),
        store.live_hosts(), store.host_alive("h"), store.claim_slot("h"), store.release_slot("h"),
        store.create_connection("h"), store.connection_host(cid), store.touch_connection(cid),
        store.delete_connection(cid), store.append_output(cid, [b"x"]), store.read_output(cid, STREAM_START),
        store.read_output(cid, STREAM_START, block=5.0), store.push_input(cid, [b"x"]),
        store.read_input(cid, STREAM_START, block=5.0),
    ]


async def _all_unavailable(store: RedisStore, cid: str, url: str) -> None:
    for call in _every_call(store, cid):
        start = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            await call
        assert caught.value.url == url and url in str(caught.value)
        assert time.monotonic() - start < SOCKET_TIMEOUT * 3, (call, time.monotonic() - start)


def test_nothing_listening_is_store_unavailable_on_every_call() -> None:
    async def body() -> None:
        url = f"redis://:secret-pw@127.0.0.1:{redis_server.free_port()}/0"
        store = RedisStore(url, socket_timeout=SOCKET_TIMEOUT, connect_timeout=SOCKET_TIMEOUT)
        assert "secret-pw" not in store.url and "***" in store.url
        await _all_unavailable(store, secrets.token_urlsafe(24), store.url)
        with pytest.raises(StoreUnavailable) as caught:
            await store.live_hosts()
        assert "secret-pw" not in str(caught.value)
        await store.close()

    run(body)


def test_redis_killed_during_a_blocking_read_fails_it_at_once_and_then_every_call(
        own_server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(own_server.url)
        cid = await store.create_connection("h1")
        reader = asyncio.ensure_future(store.read_output(cid, STREAM_START, block=5.0))
        await asyncio.sleep(0.1)
        own_server.kill()
        start = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await reader
        assert time.monotonic() - start < SOCKET_TIMEOUT * 2
        await _all_unavailable(store, cid, store.url)
        # Redis back (empty: nothing persisted): the same store works again
        own_server.start()
        await store.register_host("h1", 1, 5.0)
        assert await store.claim_slot("h1")
        assert await store.connection_host(cid) is None
        await store.close()

    run(body)


def test_a_frozen_redis_is_store_unavailable_within_the_socket_timeout(own_server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(own_server.url)
        cid = await store.create_connection("h1")
        reader = asyncio.ensure_future(store.read_output(cid, STREAM_START, block=5.0))
        await asyncio.sleep(0.1)
        own_server.freeze()
        try:
            start = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await reader
            assert time.monotonic() - start < SOCKET_TIMEOUT * 2
            for call in (store.append_output(cid, [b"x"]), store.push_input(cid, [b"x"])):
                start = time.monotonic()
                with pytest.raises(StoreUnavailable):
                    await call
                assert time.monotonic() - start < SOCKET_TIMEOUT * 2
        finally:
            own_server.thaw()
        await asyncio.sleep(0.05)
        assert await store.append_output(cid, [b"after"]) == "1-0"
        assert [e.lines for e in await store.read_output(cid, STREAM_START)] == [[b"after"]]
        await store.close()

    run(body)


def test_a_read_asks_for_fewer_entries_with_count(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url, read_count=4)
        cid = await store.create_connection("h1")
        for k in range(6):
            await store.append_output(cid, [b"%d" % k])
        assert [e.lines for e in await store.read_output(cid, STREAM_START, count=2)] == [[b"0"], [b"1"]]
        assert len(await store.read_output(cid, STREAM_START)) == 4  # limits.read_count
        assert len(await store.read_output(cid, STREAM_START, count=100)) == 4  # never more
        got = await store.follow_output(cid, "2-0", block=1.0, count=1, mark=(None, "2-0"))
        assert [e.lines for e in got] == [[b"2"]]
        assert [e.lines for e in await store.follow_output(cid, "3-0", block=1.0, count=3)] == [[b"3"], [b"4"], [b"5"]]
        for bad in (0, -1):
            with pytest.raises(ValueError):
                await store.read_output(cid, STREAM_START, count=bad)
        await store.close()

    run(body)


def test_a_dropped_reader_shortens_the_ttl_to_its_grace_unless_another_attached_since(
        server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url, connection_ttl=60.0)
        r = raw(server.url)
        cid = await store.create_connection("h1")
        await store.append_output(cid, [b"x"])
        keys = [f"{store.prefix}{{{cid}}}:{k}" for k in ("conn", "out", "in")]

        async def ttls() -> list[int]:
            return [await r.pttl(k) for k in keys]

        assert await store.push_input(cid, [b"y"])  # the input queue exists too
        assert [await store.attach_reader(cid) for _ in range(2)] == [1, 2]
        # reader 1 dropped after reader 2 attached (a resume elsewhere came first): no change
        assert not await store.detach_reader(cid, 1, 2.0)
        assert min(await ttls()) > 50_000
        # the last reader dropped: every key within the grace
        assert await store.detach_reader(cid, 2, 2.0)
        assert all(0 < t <= 2_000 for t in await ttls()), await ttls()
        # never lengthened: a longer grace leaves the shorter TTL
        assert await store.detach_reader(cid, 2, 30.0)
        assert all(0 < t <= 2_000 for t in await ttls()), await ttls()
        # a reader attaching again restarts the full TTL
        assert await store.attach_reader(cid) == 3
        assert min(await ttls()) > 50_000
        assert await store.attach_reader("nope") == 0 and not await store.detach_reader("nope", 1, 1.0)
        assert not await store.detach_reader(cid, 0, 1.0)
        with pytest.raises(ValueError):
            await store.detach_reader(cid, 3, 0.0)
        await r.aclose()
        await store.close()

    run(body)


def test_new_connections_survive_a_loop_that_stalls_between_their_sends(
        server: redis_server.RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop busy for longer than the health-check interval between two writes of a new
    connection (as under load) must not desynchronise its replies: redis-py's connect sequence
    pipelines commands, each write preceded by a health check whose PING would read the reply
    of the command before it. Each write here waits longer than the interval first."""
    from acp_fast.fleet.redis_store import HEALTH_CHECK_IDLE

    sent: list[Any] = []
    original = redis_asyncio.Connection.send_command

    async def stalled(self: Any, *args: Any, **kwargs: Any) -> None:
        sent.append(args[0])
        await asyncio.sleep(HEALTH_CHECK_IDLE * 1.5)
        await original(self, *args, **kwargs)

    monkeypatch.setattr(redis_asyncio.Connection, "send_command", stalled)

    async def body() -> None:
        store = RedisStore(server.url, prefix=f"t{secrets.token_hex(4)}:", socket_timeout=5.0, connect_timeout=5.0)
        # several connections at once (each opens its own socket and runs the connect sequence)
        cids = await asyncio.gather(*[store.create_connection("h1") for _ in range(4)])
        assert len(set(cids)) == 4
        assert all(await asyncio.gather(*[store.connection_host(c) for c in cids]))
        await store.close()

    run(body, bound=30.0)
    assert sent, "the stall never ran: the test no longer exercises redis-py's writes"


# --- construction -------------------------------------------------------------------------


def test_limits_must_be_positive() -> None:
    for field in ("output_entries", "output_bytes", "input_entries", "input_bytes", "read_count", "connection_ttl"):
        with pytest.raises(ValueError):
            StoreLimits(**{field: 0})


def test_without_redis_py_the_store_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)
    with pytest.raises(MissingExtraError, match=r"acp-fast\[fleet\]"):
        RedisStore("redis://127.0.0.1:1/0")


# --- what fronts and hosts add: the host inbox, routes, the end marker ---------------------


def test_a_host_learns_of_its_connections_from_its_inbox(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url)
        await store.register_host("h1", 4, 5.0)
        await store.register_host("h2", 4, 5.0)
        assert await store.read_assigned("h1", STREAM_START) == []
        mine = [await store.create_connection("h1") for _ in range(2)]
        other = await store.create_connection("h2")
        got = await store.read_assigned("h1", STREAM_START)
        assert [cid for _, cid in got] == mine
        assert [cid for _, cid in await store.read_assigned("h2", STREAM_START)] == [other]
        assert await store.read_assigned("h1", got[-1][0]) == []
        # a blocking read wakes on the next connection, and times out without one
        start = time.monotonic()
        assert await store.read_assigned("h1", got[-1][0], block=0.2) == []
        assert time.monotonic() - start >= 0.15
        waiting = asyncio.ensure_future(store.read_assigned("h1", got[-1][0], block=5.0))
        await asyncio.sleep(0.05)
        late = await store.create_connection("h1")
        assert [cid for _, cid in await waiting] == [late]
        # registering again is a new life: the inbox of the old one is gone
        await store.register_host("h1", 4, 5.0)
        assert await store.read_assigned("h1", STREAM_START) == []
        await store.close()

    run(body)


def test_output_entries_keep_their_routes_and_batchable_mark(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url)
        cid = await store.create_connection("h")
        await store.append_output(cid, [b"a", b"b", b"c"], [None, "s1", ""])
        await store.append_output(cid, [b"d"])
        first, second = await store.read_output(cid, STREAM_START)
        assert first.routes == [None, "s1", ""] and first.lines == [b"a", b"b", b"c"]
        assert second.routes is None
        assert not first.batchable and not second.batchable  # not said: unknown
        await store.append_output(cid, [b"e", b"f"], [None, None], batchable=True)
        await store.append_output(cid, [b"g"], batchable=True)
        third, fourth = await store.read_output(cid, second.cursor)
        assert (third.batchable, third.routes, fourth.batchable, fourth.routes) == (True, [None, None], True, None)
        with pytest.raises(ValueError):
            await store.append_output(cid, [b"a", b"b"], ["s1"])
        await store.close()

    run(body)


def test_readers_learn_the_end_of_the_output_after_every_entry_before_it(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url)
        cid = await store.create_connection("h")
        last = await store.append_output(cid, [b"1"])
        waiting = asyncio.ensure_future(store.read_output(cid, last, block=5.0))
        await asyncio.sleep(0.05)
        start = time.monotonic()
        assert await store.end_output(cid, "the agent exited (code 3)")
        with pytest.raises(ConnectionEnded) as ended:
            await waiting
        assert time.monotonic() - start < 2.0 and "code 3" in ended.value.reason
        # a reader behind the marker gets what precedes it first, then the end
        assert [e.lines for e in await store.read_output(cid, STREAM_START)] == [[b"1"]]
        with pytest.raises(ConnectionEnded):
            await store.read_output(cid, last)
        assert await store.end_output(cid, "again")  # once: a second mark changes nothing
        with pytest.raises(ConnectionEnded) as ended:
            await store.read_output(cid, last)
        assert "code 3" in ended.value.reason
        assert not await store.end_output("no-such-connection", "x")
        await store.close()

    run(body)


def test_the_end_of_the_input_wakes_the_host_and_refuses_later_pushes(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url, input_entries=2)
        cid = await store.create_connection("h")
        first = await store.push_input(cid, [b"a"])
        await store.push_input(cid, [b"b"])  # the queue is full now: the marker still goes in
        assert await store.end_input(cid, "the client ended the connection")
        with pytest.raises(UnknownConnection):
            await store.push_input(cid, [b"c"])
        assert [e.lines for e in await store.read_input(cid, STREAM_START)] == [[b"a"], [b"b"]]
        with pytest.raises(ConnectionEnded) as ended:
            await store.read_input(cid, "2-0")
        assert ended.value.reason == "the client ended the connection"
        # a blocked host read wakes for the marker
        other = await store.create_connection("h")
        waiting = asyncio.ensure_future(store.read_input(other, STREAM_START, block=5.0))
        await asyncio.sleep(0.05)
        start = time.monotonic()
        await store.end_input(other, "bye")
        with pytest.raises(ConnectionEnded):
            await waiting
        assert time.monotonic() - start < 2.0 and first == "1-0"
        assert not await store.end_input("no-such-connection", "x")
        await store.close()

    run(body)


def test_read_marks_move_forward_and_the_backlog_is_the_slowest_readers(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url)
        cid = await store.create_connection("h")
        cursors = [await store.append_output(cid, [b"x" * n]) for n in (10, 20, 30)]
        both = {None: cursors[2], "s1": cursors[2]}  # both streams have lines in the last entry
        assert await store.output_backlog(cid, both) == (3, 60)
        await store.mark_read(cid, cursors[1], None)
        assert await store.output_backlog(cid, {None: cursors[2]}) == (1, 30)
        assert await store.output_backlog(cid, both) == (3, 60)  # s1's reader read nothing
        await store.mark_read(cid, cursors[0], "s1")
        assert await store.output_backlog(cid, both) == (2, 50)
        # s1's last lines were in entry 1, which its reader has: it waits for nothing
        assert await store.output_backlog(cid, {None: cursors[2], "s1": cursors[0]}) == (1, 30)
        await store.mark_read(cid, cursors[0], None)  # never back
        assert await store.output_backlog(cid, {None: cursors[2]}) == (1, 30)
        await store.mark_read(cid, "bogus", None)
        await store.mark_read(cid, "9-0", None)  # no such entry: nothing
        await store.mark_read(cid, cursors[2], ALL_STREAMS)  # a reader of every line
        assert await store.output_backlog(cid, both) == (0, 0)
        assert await store.output_backlog(cid, {}) == (0, 0)
        with pytest.raises(UnknownConnection):
            await store.output_backlog("no-such-connection", both)
        await store.close()

    run(body)


def test_a_host_reads_its_inbox_and_many_queues_in_one_read(server: redis_server.RedisServer) -> None:
    """read_inputs: the inbox and every queue named, one blocking read that wakes for any of
    them; consumed entries leave their queue (room again); the end marker and an unknown
    connection are reported per connection."""

    async def body() -> None:
        store = make(server.url, input_entries=2)
        await store.register_host("h", 4, 5.0)
        a, b, c = [await store.create_connection("h") for _ in range(3)]
        got = await store.read_inputs("h", STREAM_START, {})
        assert [cid for _, cid in got.assigned] == [a, b, c] and not got.entries and not got.ended
        inbox = got.assigned[-1][0]
        await store.push_input(a, [b"a1"])
        await store.push_input(b, [b"b1", b"b2"])
        after = {a: STREAM_START, b: STREAM_START, c: STREAM_START}
        got = await store.read_inputs("h", inbox, after, block=1.0)
        assert {cid: [e.lines for e in es] for cid, es in got.entries.items()} == {a: [[b"a1"]], b: [[b"b1", b"b2"]]}
        after.update({cid: es[-1].cursor for cid, es in got.entries.items()})
        # a blocked read wakes for a push into any of the queues, or a new connection
        waiting = asyncio.ensure_future(store.read_inputs("h", inbox, after, consumed=(a, b), block=5.0))
        await asyncio.sleep(0.05)
        start = time.monotonic()
        await store.push_input(c, [b"c1"])
        got = await waiting
        assert [e.lines for e in got.entries[c]] == [[b"c1"]] and time.monotonic() - start < 2.0
        await store.push_input(a, [b"a2"])
        await store.push_input(a, [b"a3"])  # a1 was consumed: room for two again
        with pytest.raises(InputQueueFull):
            await store.push_input(a, [b"a4"])
        d = await store.create_connection("h")
        got = await store.read_inputs("h", inbox, {b: after[b]}, block=5.0)
        assert [cid for _, cid in got.assigned] == [d]
        # the end of an input, an unknown connection, a connection deleted under the host
        assert await store.end_input(b, "bye")
        assert await store.delete_connection(c)
        got = await store.read_inputs("h", got.assigned[-1][0], {b: after[b], "no-such": STREAM_START, c: "1-0"},
                                      consumed=(c, "no-such"))
        assert isinstance(got.ended[b], ConnectionEnded) and got.ended[b].reason == "bye"
        assert isinstance(got.ended["no-such"], UnknownConnection) and isinstance(got.ended[c], UnknownConnection)
        await store.close()

    run(body)


def test_a_reader_follows_the_output_in_one_round_trip_and_a_paused_host_wakes_for_its_marks(
        server: redis_server.RedisServer) -> None:
    async def body() -> None:
        store = make(server.url)
        cid = await store.create_connection("h")
        first = await store.append_output(cid, [b"1"])
        got = await store.follow_output(cid, STREAM_START, block=1.0)
        assert [e.cursor for e in got] == [first]
        start = time.monotonic()
        assert await store.follow_output(cid, first, block=0.2, mark=(None, first)) == []
        assert 0.15 <= time.monotonic() - start < 2.0
        assert await store.output_backlog(cid, {None: first}) == (0, 0)  # the mark moved with the read
        notice = await store.wait_read(cid, STREAM_START, block=1.0)  # the latest move, at once
        assert notice != STREAM_START
        waiting = asyncio.ensure_future(store.wait_read(cid, notice, block=5.0))
        second = await store.append_output(cid, [b"2"])
        await asyncio.sleep(0.05)
        assert not waiting.done()
        start = time.monotonic()
        got = await store.follow_output(cid, first, block=1.0)
        await store.follow_output(cid, second, block=0.01, mark=(ALL_STREAMS, second))
        assert await waiting != notice and time.monotonic() - start < 2.0
        assert await store.wait_read(cid, await waiting, block=0.1) == await waiting  # the wait ran out
        for bad in ("9-0", "x"):
            with pytest.raises(CursorOutOfWindow):
                await store.follow_output(cid, bad, block=0.05)
        with pytest.raises(UnknownConnection):
            await store.follow_output("no-such-connection", STREAM_START, block=0.05)
        await store.close()

    run(body)


def test_an_entry_appended_just_after_an_empty_wait_is_read_next_not_out_of_window(
        server: redis_server.RedisServer) -> None:
    """A reader's wait that ends empty, then an append before the reader looks at the record:
    the cursor is still in the window (the entry is read by the next call), never
    `CursorOutOfWindow` (a race seen under load with hundreds of readers)."""

    async def body() -> None:
        store = make(server.url)
        writer = RedisStore(server.url, prefix=store.prefix)
        cid = await store.create_connection("h1")
        first = await store.append_output(cid, [b"one"])
        client = store._lean
        wait = client.blocking

        async def late(*args: Any, **kwargs: Any) -> Any:
            got = await wait(*args, **kwargs)
            if not got[-1]:
                await writer.append_output(cid, [b"late"])
            return got

        client.blocking = late  # type: ignore[method-assign]
        got = await store.follow_output(cid, first, block=0.05)  # [] or, within the block, the entry
        client.blocking = wait  # type: ignore[method-assign]
        if not got:
            got = await store.follow_output(cid, first, block=0.05)
        assert [e.lines for e in got] == [[b"late"]]
        await writer.close()
        await store.close()

    run(body)
