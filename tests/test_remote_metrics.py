"""The remote server's metrics (``acp_fast.remote.metrics``): a real session over Streamable
HTTP and WebSocket, refusals of every status the server gives, then a scrape of ``/metrics``
parsed with ``prometheus_client.parser`` and each series checked against what the client saw.

Engine behaviour (the server decodes POST bodies and the agent's output) runs on both twins
through the ``engine`` fixture; the ASGI server is uvicorn (the servers' differences are the
business of ``test_remote_server.py``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families

from acp_fast.remote import ServerPolicy, asgi_app, gateway_app, served
from acp_fast.remote._wire import SseParser
from acp_fast.remote.metrics import ServerMetrics, method_label
from acp_fast.testy import build

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from scripted_agent import scripted_agent  # noqa: E402

HANG_GUARD = 60.0
TOKEN = "s3cret"
AUTH = {"authorization": f"Bearer {TOKEN}"}
JSON = {"content-type": "application/json"}


def run(coro: Awaitable[Any]) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, HANG_GUARD)

    return asyncio.run(guarded())


def body(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def init(i: int = 0) -> bytes:
    return body({"jsonrpc": "2.0", "id": i, "method": "initialize",
                 "params": {"protocolVersion": 1, "clientCapabilities": {}}})


NEW = body({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}})


def prompt(pid: int, sid: str, text: str) -> bytes:
    return body({"jsonrpc": "2.0", "id": pid, "method": "session/prompt",
                 "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}})


class Lines:
    """One SSE stream's events (their `data`, as bytes) and `id:` cursors."""

    def __init__(self, c: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        self.data: list[bytes] = []
        self.ids: list[str] = []
        self.status: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._more = asyncio.Event()
        self.task = asyncio.ensure_future(self._read(c, url, {**headers, "accept": "text/event-stream"}))

    async def _read(self, c: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        parser = SseParser()
        try:
            async with c.stream("GET", url, headers=headers) as resp:
                self.status.set_result(resp.status_code)
                async for chunk in resp.aiter_bytes():
                    for data in parser.feed(chunk):
                        self.data.append(data)
                        self.ids.append(parser.last_event_id or "")
                    self._more.set()
        except httpx.TransportError:
            pass

    async def until(self, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        seen = 0
        while True:
            for data in self.data[seen:]:
                m = json.loads(data)
                if pred(m):
                    return m  # type: ignore[no-any-return]
            seen = len(self.data)
            self._more.clear()
            await self._more.wait()

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def scrape(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape by name and labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name, frozenset(sample.labels.items())] = sample.value
    return out


def scrape_now(metrics: ServerMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """A scrape of `metrics` alone, as its ASGI app would answer it."""
    from prometheus_client import generate_latest

    return scrape(generate_latest(metrics.registry()).decode())


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def eventually(check: Callable[[], bool], what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def test_a_session_over_both_transports_and_every_refusal_in_one_scrape(engine: ModuleType) -> None:
    """initialize, session/new and a streamed prompt over Streamable HTTP (SSE) and over a
    WebSocket; refusals 401, 403, 421, 413 (a body, a frame), 503, 409 (a second reader, a
    resume out of the window), 404; a resume served. The scrape counts each of them as the
    client saw them: connections, requests by method and outcome with their latency, messages
    and bytes each way (the bytes the client sent and received), refusals by status, resumes."""
    metrics = ServerMetrics()
    policy = ServerPolicy(token=TOKEN, max_body=64 * 1024, max_connections=2, replay_window=1024)
    app = asgi_app(build((1, 2)), policy=policy, engine=engine, metrics=metrics)
    sent_in: list[bytes] = []
    received: list[bytes] = []

    async def main() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        async with served(app) as where, served(metrics.asgi_app()) as m, httpx.AsyncClient() as c:
            url = where.http_url

            async def post(data: bytes, headers: dict[str, str]) -> httpx.Response:
                r = await c.post(url, content=data, headers={**AUTH, **JSON, **headers})
                if r.status_code in (200, 202):
                    sent_in.append(data)
                return r

            # Streamable HTTP: a session and a streamed prompt
            r = await post(init(), {})
            assert r.status_code == 200
            received.append(r.content.rstrip(b"\n"))
            h = {**AUTH, "acp-connection-id": r.headers["acp-connection-id"]}
            conn = Lines(c, url, h)
            assert await conn.status == 200
            assert (await post(NEW, h)).status_code == 202
            sid = (await conn.until(lambda m: m.get("id") == 1))["result"]["sessionId"]
            session = Lines(c, url, {**h, "acp-session-id": sid})
            assert await session.status == 200
            assert (await post(prompt(2, sid, "stream 40"), {**h, "acp-session-id": sid})).status_code == 202
            assert (await session.until(lambda m: m.get("id") == 2))["result"]["stopReason"] == "end_turn"
            # refusals: a second reader (409), a resume out of the window (409), one served
            second = await c.get(url, headers={**h, "accept": "text/event-stream"})
            assert second.status_code == 409
            await session.stop()
            late = await c.get(url, headers={**h, "acp-session-id": sid, "accept": "text/event-stream",
                                              "last-event-id": "1"})
            assert late.status_code == 409  # 40 updates of 100 bytes: the first is out of 1 KiB
            resumed = Lines(c, url, {**h, "acp-session-id": sid, "last-event-id": session.ids[-1]})
            assert await resumed.status == 200
            await resumed.stop()
            received.extend(conn.data + session.data)
            # the other refusals
            assert (await c.post(url, content=init(), headers=JSON)).status_code == 401
            assert (await c.post(url, content=init(), headers={**AUTH, **JSON, "origin": "http://evil.example"})
                    ).status_code == 403
            assert (await c.post(url, content=init(), headers={**AUTH, **JSON, "host": "evil.example"})
                    ).status_code == 421
            assert (await c.post(url, content=b" " * (64 * 1024 + 1), headers={**AUTH, **JSON, **h})
                    ).status_code == 413
            assert (await c.post(url, content=NEW, headers={**AUTH, **JSON, "acp-connection-id": "nope"})
                    ).status_code == 404
            # WebSocket: the same session (the cap of 2 is then reached)
            async with websockets.connect(where.ws_url, additional_headers=AUTH) as ws:
                for data in (init(), NEW):
                    await ws.send(data.decode())
                    sent_in.append(data)
                    received.append((await ws.recv()).encode())
                ws_sid = json.loads(received[-1])["result"]["sessionId"]
                await ws.send(prompt(2, ws_sid, "stream 30").decode())
                sent_in.append(prompt(2, ws_sid, "stream 30"))
                while True:
                    frame = (await ws.recv()).encode()
                    received.append(frame)
                    if json.loads(frame).get("id") == 2:
                        break
                assert (await c.post(url, content=init(), headers={**AUTH, **JSON})).status_code == 503
            async with websockets.connect(where.ws_url, additional_headers=AUTH, max_size=None) as ws:
                await ws.send("x" * (64 * 1024 + 1))  # a frame over the limit: closed 1009
                with pytest.raises(websockets.ConnectionClosed):
                    await ws.recv()
            await conn.stop()
            assert (await c.delete(url, headers=h)).status_code == 202
            await eventually(lambda: app.connections == 0, "every connection closed")
            text = (await c.get(f"http://127.0.0.1:{m.port}/metrics")).text
        return scrape(text)

    s = run(main())
    assert value(s, "acp_fast_connections_open", transport="http") == 0
    assert value(s, "acp_fast_connections_opened_total", transport="http") == 1
    assert value(s, "acp_fast_connections_opened_total", transport="websocket") == 2
    assert value(s, "acp_fast_connections_closed_total", cause="client") == 2
    assert value(s, "acp_fast_connections_closed_total", cause="too_big") == 1
    for method in ("initialize", "session/new", "session/prompt"):
        assert value(s, "acp_fast_requests_total", method=method, outcome="ok") == 2, method
        assert value(s, "acp_fast_request_duration_seconds_count", method=method) == 2, method
        assert value(s, "acp_fast_request_duration_seconds_bucket", method=method, le="+Inf") == 2, method
        assert value(s, "acp_fast_request_duration_seconds_sum", method=method) > 0, method
    assert value(s, "acp_fast_messages_total", direction="in") == len(sent_in) == 6
    assert value(s, "acp_fast_bytes_total", direction="in") == sum(map(len, sent_in))
    assert value(s, "acp_fast_messages_total", direction="out") == len(received)
    assert len(received) > 70  # both streamed turns
    assert value(s, "acp_fast_bytes_total", direction="out") == sum(map(len, received))
    refusals = {status: value(s, "acp_fast_refusals_total", status=str(status))
                for status in (401, 403, 404, 409, 413, 421, 503)}
    assert refusals == {401: 1, 403: 1, 404: 1, 409: 2, 413: 2, 421: 1, 503: 1}
    assert value(s, "acp_fast_sse_resumes_total", outcome="served") == 1
    assert value(s, "acp_fast_sse_resumes_total", outcome="refused") == 1
    assert value(s, "acp_fast_backpressure_pauses_total") == 0


def test_backpressure_pauses_and_their_time(engine: ModuleType) -> None:
    """A prompt that streams while nobody reads its session's stream pauses the agent at the
    queue bound: the scrape counts the pause and its time, going on and then ended."""
    metrics = ServerMetrics()
    app = asgi_app(build((1, 2)), policy=ServerPolicy(queue_high=4096), engine=engine, metrics=metrics)

    async def main() -> None:
        async with served(app) as where, httpx.AsyncClient() as c:
            url = where.http_url
            r = await c.post(url, content=init(), headers=JSON)
            h = {"acp-connection-id": r.headers["acp-connection-id"]}
            conn = Lines(c, url, h)
            await c.post(url, content=NEW, headers={**JSON, **h})
            sid = (await conn.until(lambda m: m.get("id") == 1))["result"]["sessionId"]
            await c.post(url, content=prompt(2, sid, "stream 300"), headers={**JSON, **h})
            await eventually(lambda: value(scrape_now(metrics), "acp_fast_backpressure_pauses_total") == 1, "a pause")
            await asyncio.sleep(0.2)
            assert value(scrape_now(metrics), "acp_fast_backpressure_paused_seconds_total") >= 0.2  # still paused
            session = Lines(c, url, {**h, "acp-session-id": sid})
            await session.until(lambda m: m.get("id") == 2)
            s = scrape_now(metrics)
            assert value(s, "acp_fast_backpressure_pauses_total") >= 1
            assert value(s, "acp_fast_backpressure_paused_seconds_total") >= 0.2
            await session.stop()
            await conn.stop()

    run(main())


def test_agent_exits_by_cause_and_unanswered_requests(tmp_path: Path) -> None:
    """Gateway children: one stopped by the server (DELETE), one that fails on its own with a
    non-zero status mid-request (that request is counted unanswered), one that exits 0."""
    agent = scripted_agent(tmp_path, """
        if m['params'].get('cwd') == '/ok':
            sys.exit(0)
        sys.stderr.write('boom\\n'); sys.stderr.flush(); sys.exit(3)
    """)
    metrics = ServerMetrics()
    app = gateway_app(agent, metrics=metrics)

    async def main() -> None:
        async with served(app) as where, httpx.AsyncClient() as c:
            url = where.http_url
            r = await c.post(url, content=init(), headers=JSON)
            assert (await c.delete(url, headers={"acp-connection-id": r.headers["acp-connection-id"]})).status_code == 202
            for cwd in ("/tmp", "/ok"):
                r = await c.post(url, content=init(), headers=JSON)
                h = {**JSON, "acp-connection-id": r.headers["acp-connection-id"]}
                request = body({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}})
                assert (await c.post(url, content=request, headers=h)).status_code == 202
            await eventually(lambda: sum(v for (name, _), v in scrape_now(metrics).items()
                                         if name == "acp_fast_agent_exits_total") == 3, "three exits")
        s = scrape_now(metrics)
        assert {cause: value(s, "acp_fast_agent_exits_total", cause=cause) for cause in ("stopped", "failed", "exited", "signal")} == {
            "stopped": 1, "failed": 1, "exited": 1, "signal": 0}
        assert value(s, "acp_fast_connections_closed_total", cause="client") == 1
        assert value(s, "acp_fast_connections_closed_total", cause="agent") == 2
        assert value(s, "acp_fast_requests_total", method="session/new", outcome="unanswered") == 2
        assert value(s, "acp_fast_requests_total", method="initialize", outcome="ok") == 3
        assert value(s, "acp_fast_request_duration_seconds_count", method="session/new") == 0

    run(main())


def test_without_metrics_a_connection_counts_nothing(engine: ModuleType) -> None:
    """An app without metrics keeps its connections plain: none of the counting paths."""
    from acp_fast.remote.server import _Connection

    app = asgi_app(build((1, 2)), engine=engine)

    async def main() -> None:
        async with served(app) as where, httpx.AsyncClient() as c:
            r = await c.post(where.http_url, content=init(), headers=JSON)
            assert r.status_code == 200
            (conn,) = app._conns.values()
            assert type(conn) is _Connection and not hasattr(conn, "in_messages")

    assert app.metrics is None
    run(main())


def test_method_label_is_bounded() -> None:
    """A method the schemas define keeps its name; any other is `other`."""
    assert method_label("session/prompt") == "session/prompt"
    assert method_label("_proxy/initialize") == "_proxy/initialize"
    assert method_label("session/update") == "other"  # a notification, never a request
    assert method_label("x" * 100) == "other"


def test_buckets_are_checked() -> None:
    with pytest.raises(ValueError):
        ServerMetrics(buckets=())
    with pytest.raises(ValueError):
        ServerMetrics(buckets=(1.0, 1.0))


@pytest.mark.parametrize("transport", ["http", "websocket", "websocket-batches"])
def test_a_response_cut_across_reads_is_still_counted(tmp_path: Path, transport: str) -> None:
    """A gateway child writes its answer in pieces (a notification's end and the response's
    start in one write, the rest later): the response is found whole, answered `ok` (on a
    WebSocket among the splitter's lines, or with batch frames among the decoder's frames)."""
    agent = scripted_agent(tmp_path, """
        note = json.dumps({'jsonrpc': '2.0', 'method': '_note', 'params': {}})
        reply = json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': {'sessionId': 's'}})
        for piece in (note[:10], note[10:] + '\\n' + reply[:12], reply[12:30], reply[30:] + '\\n'):
            put(piece); time.sleep(0.1)
    """)
    metrics = ServerMetrics()
    app = gateway_app(agent, metrics=metrics)

    async def main() -> None:
        async with served(app) as where, httpx.AsyncClient() as c:
            if transport == "http":
                url = where.http_url
                r = await c.post(url, content=init(), headers=JSON)
                h = {"acp-connection-id": r.headers["acp-connection-id"]}
                conn = Lines(c, url, h)
                assert (await c.post(url, content=NEW, headers={**JSON, **h})).status_code == 202
                assert (await conn.until(lambda m: m.get("id") == 1))["result"] == {"sessionId": "s"}
                await conn.stop()
            else:
                batches = {"acp-batch-frames": "1"} if transport.endswith("batches") else {}
                async with websockets.connect(where.ws_url, additional_headers=batches) as ws:
                    await ws.send(init().decode())
                    await ws.recv()
                    await ws.send(NEW.decode())
                    while True:
                        frame = json.loads(await ws.recv())
                        if any(m.get("id") == 1 for m in (frame if isinstance(frame, list) else [frame])):
                            break
            s = scrape_now(metrics)
            assert value(s, "acp_fast_requests_total", method="session/new", outcome="ok") == 1
            assert value(s, "acp_fast_request_duration_seconds_count", method="session/new") == 1
            assert value(s, "acp_fast_request_duration_seconds_sum", method="session/new") >= 0.3

    run(main())
