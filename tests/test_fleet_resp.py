"""The fleet store's lean Redis client (`acp_fast.fleet._resp`), against a real redis-server.

What the store's streaming path relies on: replies reach their own callers through one
pipelined connection, error replies do not break it, scripts run whether or not the server
knows them, a blocking command holds a connection of its own and one abandoned never hands its
reply to the next command, every reply is bounded by the socket timeout, a lost connection is
replaced by the next call, and the URL's user, password and database are honoured.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

import peer_rule  # noqa: E402
import redis_server  # noqa: E402
from redis_server import own_server, server  # noqa: E402,F401  (the fixtures)

peer_rule.require_module("hiredis", "hiredis", "hiredis (the fleet extra) is not installed")

from acp_fast.fleet._resp import ReplyError, RespClient, Script  # noqa: E402

T = TypeVar("T")

#: The socket timeout of the clients under test: a frozen server is noticed within it.
TIMEOUT = 0.5


def run(body: Callable[[], Awaitable[T]], bound: float = 10.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(body(), bound)

    return asyncio.run(bounded())


def client(url: str, max_connections: int = 64) -> RespClient:
    return RespClient(url, socket_timeout=TIMEOUT, connect_timeout=TIMEOUT, max_connections=max_connections)


async def connected(c: RespClient) -> int:
    """The server's count of connected clients (this one's shared connection included)."""
    info: bytes = await c.call("INFO", "clients")
    line = next(x for x in info.decode().splitlines() if x.startswith("connected_clients:"))
    return int(line.split(":")[1])


def test_concurrent_calls_share_one_connection_and_each_gets_its_own_reply(
        server: redis_server.RedisServer) -> None:
    async def body() -> None:
        c = client(server.url)
        await c.call("DEL", "resp:n")
        before = await connected(c)
        got = await asyncio.gather(*(c.call("INCR", "resp:n") for _ in range(300)))
        assert sorted(got) == list(range(1, 301))
        assert got == list(range(1, 301))  # in order: one pipelined connection
        assert await connected(c) == before  # no connection more
        assert await c.pipeline([("SET", "resp:k", b"v\r\n\x00"), ("GET", "resp:k"), ("STRLEN", "resp:k")]) == [
            b"OK", b"v\r\n\x00", 4]
        await c.close()

    run(body)


def test_an_error_reply_raises_and_the_connection_goes_on(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        c = client(server.url)
        await c.call("SET", "resp:s", "text")
        with pytest.raises(ReplyError, match="WRONGTYPE"):
            await c.call("LPUSH", "resp:s", "x")
        with pytest.raises(ReplyError, match="WRONGTYPE"):  # the first error of a pipeline, after all replies
            await c.pipeline([("LPUSH", "resp:s", "x"), ("SET", "resp:after", "1")])
        assert await c.call("GET", "resp:after") == b"1"  # the rest of the pipeline ran, in step
        await c.close()

    run(body)


def test_a_script_runs_whether_or_not_the_server_knows_it(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        c = client(server.url)
        script = Script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        await c.call("DEL", "resp:sc")
        await c.call("SCRIPT", "FLUSH")
        await c.call("CONFIG", "RESETSTAT")
        assert await c.script(script, ["resp:sc"], [2]) == 2  # NOSCRIPT, then EVAL once
        assert await c.script(script, ["resp:sc"], [3]) == 5  # known now: EVALSHA only
        stats = (await c.call("INFO", "commandstats")).decode()
        calls = {name: int(rest.split("calls=")[1].split(",")[0]) for name, rest in
                 (x.split(":", 1) for x in stats.splitlines() if x.startswith("cmdstat_eval"))}
        assert calls == {"cmdstat_evalsha": 2, "cmdstat_eval": 1}
        with pytest.raises(ReplyError):
            await c.script(Script("return redis.call('NOSUCHCOMMAND')"), [], [])
        assert await c.pipeline([script.eval(["resp:sc"], [1])]) == [6]
        # in a pipeline (shared or blocking), a script the server forgot is run by EVAL after the rest
        for send in (c.pipeline, lambda cmds: c.blocking(cmds, 0.05)):
            await c.call("SCRIPT", "FLUSH")
            got = await send([script.call(["resp:sc"], [10]), ("XREAD", "COUNT", 1, "BLOCK", 20, "STREAMS",
                                                                  "resp:none", "0-0")])
            assert got[1] is None
            assert got[0] == int(await c.call("GET", "resp:sc")) and got[0] in (16, 26)
        with pytest.raises(ReplyError):  # another error reply in a pipeline still raises
            await c.pipeline([script.call(["resp:sc"], [1]), ("INCR", "resp:sc", "extra")])
        await c.close()

    run(body)


def test_blocking_commands_each_hold_a_connection_and_an_abandoned_one_is_closed(
        server: redis_server.RedisServer) -> None:
    async def body() -> None:
        c = client(server.url)
        await c.call("DEL", "resp:a", "resp:b", "resp:c")
        before = await connected(c)
        reads = [asyncio.ensure_future(c.blocking([("XREAD", "BLOCK", 2000, "STREAMS", key, "0-0")], 2.0))
                 for key in ("resp:a", "resp:b")]
        await asyncio.sleep(0.1)
        assert await connected(c) == before + 2
        await c.call("XADD", "resp:b", "1-0", "f", "b")
        await c.call("XADD", "resp:a", "1-0", "f", "a")
        a, b = await asyncio.gather(*reads)
        assert a[-1][0][0] == b"resp:a" and b[-1][0][0] == b"resp:b"
        assert await connected(c) == before + 2  # both kept, idle, for the next blocking commands
        # abandoned while blocked: its connection is closed, so its reply can reach no one else
        read = asyncio.ensure_future(c.blocking([("XREAD", "BLOCK", 2000, "STREAMS", "resp:c", "0-0")], 2.0))
        await asyncio.sleep(0.1)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read
        await c.call("XADD", "resp:c", "1-0", "f", "c")
        again = await c.blocking([("XREAD", "BLOCK", 200, "STREAMS", "resp:a", "1-0")], 0.2)
        assert again == [None]  # nothing after 1-0 in resp:a: not resp:c's entry
        assert await connected(c) == before + 1  # the abandoned one's connection is gone
        await c.close()

    run(body)


def test_a_frozen_server_times_every_call_out_and_a_thawed_one_serves_again(
        own_server: redis_server.RedisServer) -> None:
    async def body() -> None:
        c = client(own_server.url)
        assert await c.call("PING") == b"PONG"
        blocked = asyncio.ensure_future(c.blocking([("XREAD", "BLOCK", 100, "STREAMS", "resp:f", "0-0")], 0.1))
        await asyncio.sleep(0.05)
        own_server.freeze()
        try:
            for call in (c.call("PING"), blocked, c.script(Script("return 1"), [], [])):
                start = time.monotonic()
                with pytest.raises(TimeoutError):
                    await call
                assert time.monotonic() - start < TIMEOUT + 0.1 + 1.0
        finally:
            own_server.thaw()
        assert await c.call("PING") == b"PONG"
        assert await c.blocking([("XREAD", "BLOCK", 10, "STREAMS", "resp:f", "0-0")], 0.01) == [None]
        await c.close()

    run(body)


def test_a_lost_connection_fails_its_callers_and_the_next_call_connects_again(
        own_server: redis_server.RedisServer) -> None:
    async def body() -> None:
        c = client(own_server.url)
        assert await c.call("PING") == b"PONG"
        idle = await c.blocking([("PING",)], 0)  # leaves an idle blocking connection
        assert idle == [b"PONG"]
        blocked = asyncio.ensure_future(c.blocking([("XREAD", "BLOCK", 5000, "STREAMS", "resp:l", "0-0")], 5.0))
        await asyncio.sleep(0.1)
        own_server.kill()
        start = time.monotonic()
        with pytest.raises(ConnectionError):
            await blocked
        assert time.monotonic() - start < 1.0
        with pytest.raises(ConnectionError):
            await c.call("PING")  # refused
        own_server.start()
        await asyncio.sleep(0.05)
        # the connections from before the restart were noticed closed: no call fails for them
        assert await c.call("PING") == b"PONG"
        assert await c.blocking([("PING",)], 0) == [b"PONG"]
        await c.close()

    run(body)


def test_the_url_user_password_and_database_are_used(server: redis_server.RedisServer) -> None:
    async def body() -> None:
        admin = client(server.url)
        await admin.call("ACL", "SETUSER", "resp-user", "on", ">resp-pw", "~*", "&*", "+@all")
        base = f"127.0.0.1:{server.port}"
        c = client(f"redis://resp-user:resp-pw@{base}/3")
        await c.call("SET", "resp:db", "three")
        assert await c.call("ACL", "WHOAMI") == b"resp-user"
        assert await admin.call("GET", "resp:db") is None  # not database 0
        await admin.call("SELECT", 3)
        assert await admin.call("GET", "resp:db") == b"three"
        with pytest.raises(ConnectionError, match="refused"):
            await client(f"redis://resp-user:wrong@{base}/0").call("PING")
        await admin.call("ACL", "DELUSER", "resp-user")
        await admin.call("DEL", "resp:db")
        await c.close()
        await admin.close()

    run(body)


def test_connections_are_bounded_and_a_client_follows_its_event_loop(server: redis_server.RedisServer) -> None:
    c = client(server.url, max_connections=2)

    async def body() -> None:
        assert await c.call("PING") == b"PONG"
        first = asyncio.ensure_future(c.blocking([("XREAD", "BLOCK", 300, "STREAMS", "resp:m", "0-0")], 0.3))
        await asyncio.sleep(0.05)
        with pytest.raises(ConnectionError, match="too many connections"):
            await c.blocking([("PING",)], 0)
        assert await first == [None]
        assert await c.blocking([("PING",)], 0) == [b"PONG"]  # the idle one, again

    run(body)
    run(body)  # a second event loop: the first loop's connections are replaced, not reused
