"""The remote server with an in-process agent: a POST body is decoded once.

The server decodes every POST (to route it and check its session); for an agent in the same
process (``asgi_app``) it hands those frames to the agent's connection (``Stream.write_frames``
→ ``Connection.feed_frames``) instead of the bytes, which the agent would decode again. The
frames go only where they are what the agent's own decoder would make of the line: a line the
server rewrote, a line over the agent's line limit, an agent with other depth or batch limits
and an agent of the other engine twin get the bytes, and answer exactly as before.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import httpx
import pytest

from acp_fast.jsonrpc import Connection
from acp_fast.remote import AcpApp, asgi_app, served
from acp_fast.testy import build
from acp_fast.transport import Stream

BOUND = 30.0
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}
NEW = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), BOUND))


@pytest.fixture
def fed(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often any agent connection was fed bytes and frames."""
    counts = {"data": 0, "frames": 0}
    feed_data, feed_frames = Connection.feed_data, Connection.feed_frames

    def data(self: Connection, chunk: bytes) -> None:
        counts["data"] += 1
        feed_data(self, chunk)

    def frames(self: Connection, frames: list[Any]) -> None:
        counts["frames"] += 1
        feed_frames(self, frames)

    monkeypatch.setattr(Connection, "feed_data", data)
    monkeypatch.setattr(Connection, "feed_frames", frames)
    return counts


class Events:
    """The connection's SSE stream, decoded."""

    def __init__(self, c: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        self.messages: asyncio.Queue[Any] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._read(c, url, headers))

    async def _read(self, c: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        from acp_fast.remote._wire import SseParser

        parser = SseParser()
        async with c.stream("GET", url, headers={**headers, "accept": "text/event-stream"}) as resp:
            async for chunk in resp.aiter_bytes():
                for data in parser.feed(chunk):
                    self.messages.put_nowait(json.loads(data))

    async def reply(self, ident: object) -> Any:
        while True:
            got = await self.messages.get()
            for m in got if isinstance(got, list) else [got]:  # a batch reply: its entries
                if isinstance(m, dict) and m.get("id") == ident:
                    return m

    def stop(self) -> None:
        self.task.cancel()


async def _start(c: httpx.AsyncClient, url: str) -> tuple[dict[str, str], Events]:
    r = await c.post(url, json=INIT)
    assert r.status_code == 200, r.text
    h = {"acp-connection-id": r.headers["acp-connection-id"]}
    return h, Events(c, url, h)


def test_posts_reach_the_agent_as_frames_and_rewritten_lines_as_bytes(engine: ModuleType,
                                                                       fed: dict[str, int]) -> None:
    async def main() -> None:
        async with served(asgi_app(build((1, 2)), engine=engine)) as where, httpx.AsyncClient() as c:
            url = where.http_url
            h, events = await _start(c, url)
            await c.post(url, json=NEW, headers=h)
            sid = (await events.reply(1))["result"]["sessionId"]
            before = dict(fed)
            echo = {"jsonrpc": "2.0", "id": 2, "method": "_test/echo", "params": {"text": "é\\u00e9"}}
            assert (await c.post(url, json=echo, headers=h)).status_code == 202
            assert (await events.reply(2))["result"] == echo["params"]
            batch = [dict(echo, id=3), {"jsonrpc": "2.0", "id": 4}, dict(echo, id=5)]
            assert (await c.post(url, json=batch, headers=h)).status_code == 202
            assert (await events.reply(3))["result"] == echo["params"]
            assert fed == {"data": before["data"], "frames": before["frames"] + 2}
            # the header fills params.sessionId: the agent gets the rewritten line's bytes
            session = Events(c, url, {**h, "acp-session-id": sid})
            cancel = {"jsonrpc": "2.0", "id": 6, "method": "session/set_mode", "params": {"modeId": "x"}}
            assert (await c.post(url, json=cancel, headers={**h, "acp-session-id": sid})).status_code == 202
            await session.reply(6)
            assert fed == {"data": before["data"] + 1, "frames": before["frames"] + 2}
            events.stop()
            session.stop()

    run(main)


def _limited_agent(engine: ModuleType, lazy: bool = False, **limits: int) -> Callable[[Stream], Awaitable[None]]:
    async def serve(stream: Stream) -> None:
        conn = Connection(stream, engine=engine, decoder=engine.Decoder(lazy=lazy, **limits))
        conn.on_request("initialize", lambda ctx: {"protocolVersion": 1})
        conn.on_request("_test/echo", lambda ctx: ctx.params)
        await conn.wait_closed()

    return serve


@pytest.mark.parametrize(("limits", "params"), [
    ({"max_line_size": 200}, {"text": "x" * 300}),
    ({"max_depth": 3}, {"a": {"b": {"c": [1]}}}),
    ({"max_batch_size": 2}, None),
])
def test_what_the_agents_own_limits_refuse_is_refused_as_before(engine: ModuleType, fed: dict[str, int],
                                                                 limits: dict[str, int], params: Any) -> None:
    """A line over the agent's own limits reaches it as bytes and gets the agent's error, as on
    stdio; a line within them is answered (and went as frames)."""

    async def main() -> None:
        async with served(asgi_app(_limited_agent(engine, **limits), engine=engine)) as where, \
                httpx.AsyncClient() as c:
            url = where.http_url
            h, events = await _start(c, url)
            small = {"jsonrpc": "2.0", "id": 1, "method": "_test/echo", "params": {"n": 1}}
            assert (await c.post(url, json=small, headers=h)).status_code == 202
            assert (await events.reply(1))["result"] == {"n": 1}
            if params is None:  # a batch over the agent's batch limit: one -32600 for it
                body: Any = [dict(small, id=i) for i in (2, 3, 4)]
            else:
                body = dict(small, id=2, params=params)
            assert (await c.post(url, json=body, headers=h)).status_code == 202
            error = (await events.reply(None))["error"]
            code = -32700 if "max_depth" in limits else -32600
            assert error["code"] == code, error
            events.stop()

    run(main)
    if "max_line_size" in limits:
        assert fed["frames"] >= 1 and fed["data"] >= 1  # the short one as frames, the long one as bytes
    else:
        assert fed["frames"] == 0  # other depth or batch limits: never frames


@pytest.mark.parametrize("lazy", [False, True])
def test_posts_queued_for_the_agent_keep_their_own_frames(engine: ModuleType, fed: dict[str, int],
                                                          lazy: bool) -> None:
    """POSTs sent before the agent reads any of them (one decoder decodes them all, their
    frames wait in the pipe together) each reach the agent with their own params, for an
    eager and a lazy agent alike."""

    async def main() -> None:
        async with served(asgi_app(_limited_agent(engine, lazy=lazy), engine=engine)) as where, \
                httpx.AsyncClient() as c:
            url = where.http_url
            h, events = await _start(c, url)
            posts = [{"jsonrpc": "2.0", "id": i, "method": "_test/echo", "params": {"n": i, "pad": "x" * (i * 999)}}
                     for i in range(1, 9)]
            sent = await asyncio.gather(*(c.post(url, json=p, headers=h) for p in posts))
            assert [r.status_code for r in sent] == [202] * 8
            for p in posts:
                assert (await events.reply(p["id"]))["result"] == p["params"]
            events.stop()

    run(main)
    assert fed["frames"] >= 1 and fed["data"] == 1  # initialize alone went as bytes


def test_an_agent_of_the_other_twin_gets_bytes(engine: ModuleType, fed: dict[str, int]) -> None:
    names = {"acp_fast._engine_c": "acp_fast._engine_py", "acp_fast._engine_py": "acp_fast._engine_c"}
    try:
        other = importlib.import_module(names[engine.__name__])
    except ImportError:
        pytest.skip("the compiled twin is not built")

    async def main() -> None:
        agent = asgi_app(build((1, 2)), engine=other)
        async with served(AcpApp(agent.opener, engine=engine)) as where, httpx.AsyncClient() as c:
            url = where.http_url
            h, events = await _start(c, url)
            echo = {"jsonrpc": "2.0", "id": 2, "method": "_test/echo", "params": {"n": 2}}
            assert (await c.post(url, json=echo, headers=h)).status_code == 202
            assert (await events.reply(2))["result"] == {"n": 2}
            events.stop()

    run(main)
    assert fed == {"frames": 1, "data": 1}  # the router's hand-over of initialize; the echo as bytes


@pytest.mark.parametrize("workload", ["roundtrip", "burst"])
def test_the_in_process_benchmark_runs(workload: str, fed: dict[str, int]) -> None:
    """``bench/remote_in_cpu.py`` (instruction counts of the frame path) keeps working: every
    POST answered 202 and every reply seen (it asserts both), the echoes as frames."""
    from bench import remote_in_cpu

    asyncio.run(asyncio.wait_for(remote_in_cpu.run(workload, 20), BOUND))
    assert fed["frames"] >= 2 and fed["data"] == 0
