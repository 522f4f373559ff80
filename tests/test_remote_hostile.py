"""Hostile bytes on the remote layer: what a client sends the server, what an agent writes to
it, what a server sends our client.

The property (issue 31): no byte sequence on any path (POST body, WebSocket text or binary
frame, SSE resume header, any header) yields a 5xx, a traceback in the log, a dropped socket
or a stuck connection; malformed JSON gets the error the engine gives the same line on
stdio; every request that reaches the server is answered exactly once on a stream the client
reads (one test per route); a line of the agent that is not JSON-RPC reaches the client by
one rule on every outlet. ``scripts/fuzz_remote.py`` checks the same property on random
input; a short run of it is a test here too.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import httpx
import pytest
import websockets

from remote_hostile import REPO, HostileHttp, HostileServer, RawAgents, log_trap

from acp_fast import JsonRpcError
from acp_fast.jsonrpc import Connection
from acp_fast.testy import build
from acp_fast.transport.remote import AcpApp, ServerPolicy, asgi_app, served
from acp_fast.transport.remote._wire import SseParser
from acp_fast.transport.remote.client import connect_url

BOUND = 30.0
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}
NEW = {"jsonrpc": "2.0", "id": "new", "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}
JSON = {"content-type": "application/json"}
#: The issue's frame: deep nesting with one newline in it.
NESTED = b"[" * 100_000 + b"\n" + b"]" * 100_000


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), BOUND))


def serve_testy(engine: ModuleType, **policy: Any) -> AcpApp:
    return asgi_app(build((1, 2)), policy=ServerPolicy(**policy), engine=engine)


def engine_reply(engine: ModuleType, payload: bytes) -> bytes:
    """What the engine answers ``payload`` with as one stdio line (a newline inside it is
    whitespace or, in a string, as invalid as a tab)."""
    (frame,) = engine.Decoder(lazy=True).feed(payload.strip().replace(b"\n", b"\t") + b"\n")
    reply: bytes = engine.error_reply(frame)
    return reply


class Streams:
    """Every message read from a connection's SSE streams: the connection stream, and each
    session stream opened with :meth:`open`."""

    def __init__(self, c: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        self.c, self.url, self.headers = c, url, headers
        self.seen: list[tuple[str | None, Any]] = []
        self.events: list[tuple[str | None, bytes]] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.open(None)

    def open(self, session: str | None) -> None:
        headers = {**self.headers, "accept": "text/event-stream"}
        if session is not None:
            headers["acp-session-id"] = session
        self.tasks.append(asyncio.ensure_future(self._read(session, headers)))

    async def _read(self, session: str | None, headers: dict[str, str]) -> None:
        parser = SseParser()
        async with self.c.stream("GET", self.url, headers=headers) as resp:
            assert resp.status_code == 200, resp.status_code
            async for chunk in resp.aiter_bytes():
                for data in parser.feed(chunk):
                    self.events.append((session, data))
                    try:
                        value = json.loads(data)
                    except ValueError:  # a line of the agent that is not JSON: kept in events
                        continue
                    for m in value if isinstance(value, list) else [value]:
                        self.seen.append((session, m))

    def answers(self, ident: Any) -> list[tuple[str | None, Any]]:
        return [(s, m) for s, m in self.seen if "method" not in m and m.get("id") == ident]

    async def answered(self, ident: Any, settle: float = 0.3) -> list[tuple[str | None, Any]]:
        """Every answer to ``ident`` (waiting for the first, then ``settle`` seconds more)."""
        while not self.answers(ident):
            for task in self.tasks:
                if task.done():
                    task.result()
            await asyncio.sleep(0.01)
        await asyncio.sleep(settle)
        return self.answers(ident)

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()


async def http_session(c: httpx.AsyncClient, url: str) -> tuple[dict[str, str], Streams, str]:
    r = await c.post(url, json=INIT)
    h = {"acp-connection-id": r.headers["acp-connection-id"]}
    streams = Streams(c, url, h)
    assert (await c.post(url, json=NEW, headers=h)).status_code == 202
    ((_, reply),) = await streams.answered("new", settle=0)
    sid: str = reply["result"]["sessionId"]
    streams.open(sid)
    return h, streams, sid


def prompt(ident: Any, sid: str | None, text: str = "echo hi") -> dict[str, Any]:
    params: dict[str, Any] = {"prompt": [{"type": "text", "text": text}]}
    if sid is not None:
        params["sessionId"] = sid
    return {"jsonrpc": "2.0", "id": ident, "method": "session/prompt", "params": params}


# ---------------------------------------------------------------------------------------
# the cases
# ---------------------------------------------------------------------------------------


def test_deep_nesting_with_a_newline_is_one_parse_error_on_every_path(engine: ModuleType) -> None:
    """The issue's body, POSTed and sent as a text frame: the engine's -32700 for that line
    (a 400 body; a frame on the socket), nothing logged, and the connection keeps working;
    the same nesting without a newline and as a binary frame too."""

    async def main() -> None:
        async with served(serve_testy(engine)) as where, httpx.AsyncClient() as c:
            with log_trap() as bad:
                h, streams, sid = await http_session(c, where.http_url)
                for body in (NESTED, NESTED.replace(b"\n", b"")):
                    r = await c.post(where.http_url, content=body, headers={**h, **JSON})
                    assert r.status_code == 400 and r.content == engine_reply(engine, body)
                    assert r.json()["error"]["code"] == -32700 and r.json()["id"] is None
                r = await c.post(where.http_url, content=body, headers=JSON)  # no connection yet
                assert r.status_code == 400 and r.content == engine_reply(engine, body)
                await c.post(where.http_url, json=prompt(5, sid), headers=h)
                assert [s for s, _ in await streams.answered(5)] == [sid]
                async with websockets.connect(where.ws_url, max_size=None) as ws:
                    await ws.send(json.dumps(INIT))
                    await ws.recv()
                    for frame in (NESTED, NESTED.replace(b"\n", b"")):
                        await ws.send(frame.decode())
                        assert (await ws.recv()).encode() + b"\n" == engine_reply(engine, frame)
                    await ws.send(NESTED)  # binary: ignored
                    await ws.send(json.dumps({"jsonrpc": "2.0", "id": 6, "method": "_test/echo", "params": {}}))
                    assert json.loads(await ws.recv()) == {"jsonrpc": "2.0", "id": 6, "result": {}}
                streams.stop()
            assert bad == []

    run(main)


def test_hostile_headers_and_resume_cursors_are_never_a_5xx(engine: ModuleType) -> None:
    """Junk in ``Last-Event-ID``, ``Acp-Session-Id``, ``Acp-Connection-Id``, ``Host``,
    ``Origin``, ``Content-Type`` and ``Accept``: a 4xx each (or a 202 where the junk is only
    a session id that the server routes), nothing logged, the connection keeps working."""
    junk = [b"\xff\xfe", b"x" * 5000, b"-1", b"1" * 5000, b"\xd9\xa3", b"1e3", b"0x10", b"[::1", b"\x7f"]

    async def main() -> None:
        async with served(serve_testy(engine)) as where, httpx.AsyncClient() as c:
            url = where.http_url
            with log_trap() as bad:
                h, streams, sid = await http_session(c, url)
                statuses = set()
                for value in junk:
                    for name in ("last-event-id", "acp-session-id", "accept"):
                        headers = {**h, "accept": "text/event-stream", name: value}
                        async with c.stream("GET", url, headers=headers) as r:
                            statuses.add(r.status_code)
                            assert r.status_code in (400, 404, 406, 409), (name, value, r.status_code)
                    for name in ("acp-session-id", "acp-connection-id", "host", "origin", "content-type"):
                        r = await c.post(url, json={"jsonrpc": "2.0", "id": "j", "method": "_test/echo"},
                                         headers={**h, name: value})
                        statuses.add(r.status_code)
                        assert r.status_code < 500, (name, value, r.status_code)
                assert {404, 409, 421, 415} <= statuses
                await c.post(url, json=prompt(7, sid), headers=h)
                assert len(await streams.answered(7)) == 1
                streams.stop()
            assert bad == []

    run(main)


# ---------------------------------------------------------------------------------------
# every request answered exactly once, on a stream the client reads: one test per route
# ---------------------------------------------------------------------------------------


def _routes() -> dict[str, tuple[Any, dict[str, str], str]]:
    """route -> (body, extra headers ("SID": the live session), where the answer comes:
    "body" of the POST, "connection" or "session" stream)."""
    echo = {"jsonrpc": "2.0", "id": 9, "method": "_test/echo", "params": {}}
    return {
        "connection-scoped request": (echo, {}, "connection"),
        "session request, header": (prompt(9, None), {"acp-session-id": "SID"}, "session"),
        "session request, params": (prompt(9, "SID"), {}, "session"),
        "session request, both": (prompt(9, "SID"), {"acp-session-id": "SID"}, "session"),
        "unknown session, header": (prompt(9, None), {"acp-session-id": "no-such-session"}, "connection"),
        "unknown session, params": (prompt(9, "no-such-session"), {}, "connection"),
        "non-session request with the header": (echo, {"acp-session-id": "SID"}, "session"),
        "batch": ([echo, {"jsonrpc": "2.0", "method": "_test/note"}], {}, "connection"),
        "batch with an invalid entry": ([echo, {"jsonrpc": "1.0", "id": 3}], {}, "connection"),
        "malformed body": (b'{"jsonrpc":"2.0","id":9,"method"', {}, "body"),
        "invalid request": ({"jsonrpc": "2.0", "id": 9, "method": 5}, {}, "body"),
        "session method without a session": (prompt(9, None), {}, "body"),
        "session ids that differ": (prompt(9, "SID"), {"acp-session-id": "other"}, "body"),
    }


@pytest.mark.parametrize("route", list(_routes()))
def test_each_http_route_answers_a_request_once(engine: ModuleType, route: str) -> None:
    body, extra, where_answered = _routes()[route]

    async def main() -> None:
        async with served(serve_testy(engine)) as where, httpx.AsyncClient() as c:
            url = where.http_url
            with log_trap() as bad:
                h, streams, sid = await http_session(c, url)
                headers = {**h, **JSON, **{k: v.replace("SID", sid) for k, v in extra.items()}}
                content = body if isinstance(body, bytes) else json.dumps(body).replace("SID", sid).encode()
                r = await c.post(url, content=content, headers=headers)
                if where_answered == "body":
                    assert r.status_code == 400 and r.json()["error"]["code"] < 0 and r.json()["id"] is None
                    await c.post(url, json={"jsonrpc": "2.0", "id": "fence", "method": "_test/echo"}, headers=h)
                    await streams.answered("fence")
                    assert streams.answers(9) == []  # answered by the 400 alone
                else:
                    assert r.status_code == 202
                    answers = await streams.answered(9)
                    assert [s for s, _ in answers] == [None if where_answered == "connection" else sid], answers
                    if route == "batch with an invalid entry":
                        nulls = [m for _, m in streams.seen if "method" not in m and m.get("id") is None]
                        assert len(nulls) == 1 and nulls[0]["error"]["code"] == -32600
                streams.stop()
            assert bad == []

    run(main)


@pytest.mark.parametrize("batches", [False, True], ids=["plain", "batch-frames"])
def test_each_websocket_route_answers_a_request_once(engine: ModuleType, batches: bool) -> None:
    """A request, a malformed frame, a batch, a pretty-printed frame: one answer each on the
    socket (the agent's engine answers the malformed one as on stdio); a response, a
    notification and a binary frame: none."""

    async def main() -> None:
        async with served(serve_testy(engine)) as where:
            headers = {"Acp-Batch-Frames": "1"} if batches else {}
            async with websockets.connect(where.ws_url, additional_headers=headers) as ws:
                await ws.send(json.dumps(INIT))
                await ws.recv()
                sends: list[Any] = [
                    {"jsonrpc": "2.0", "id": 1, "method": "_test/echo"},
                    '{"jsonrpc":"2.0","id":2,',
                    [{"jsonrpc": "2.0", "id": 3, "method": "_test/echo"}, {"jsonrpc": "2.0", "id": 4, "x": 1}],
                    json.dumps({"jsonrpc": "2.0", "id": 5, "method": "_test/echo"}, indent=2),
                    {"jsonrpc": "2.0", "id": 6, "result": {}},
                    {"jsonrpc": "2.0", "method": "_test/note"},
                    b"binary",
                    {"jsonrpc": "2.0", "id": "last", "method": "_test/echo"},
                ]
                for item in sends:
                    await ws.send(item if isinstance(item, (str, bytes)) else json.dumps(item))
                got: list[Any] = []
                while not any(m.get("id") == "last" for m in got):
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    got.extend(frame if isinstance(frame, list) else [frame])
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(ws.recv(), 0.3)
            ids = sorted(json.dumps(m.get("id")) for m in got)
            assert ids == sorted(json.dumps(i) for i in [1, None, 3, None, 5, "last"]), got
            assert {m["error"]["code"] for m in got if m.get("id") is None} == {-32700, -32600}

    run(main)


# ---------------------------------------------------------------------------------------
# the successor envelope of a $/ method is connection-scoped
# ---------------------------------------------------------------------------------------


def test_the_remote_layer_knows_the_conductors_successor_envelopes() -> None:
    from acp_fast.conductor.names import SUCCESSOR
    from acp_fast.transport.remote._wire import SUCCESSOR_METHODS

    assert SUCCESSOR_METHODS == SUCCESSOR


@pytest.mark.parametrize("envelope", ["_proxy/successor", "proxy/successor"])
def test_wrapped_dollar_method_never_takes_the_session_header(engine: ModuleType, envelope: str) -> None:
    """A ``$/cancel_request`` inside a successor envelope (``{"method", "params"}``) is
    connection-scoped like a bare one: the agent gets it unchanged (no ``sessionId`` filled
    in from the header), and a ``sessionId`` of its own that differs from the header is no
    400; the same envelope around a session method does take the header."""

    async def main() -> None:
        agents = RawAgents()
        async with served(AcpApp(agents, engine=engine)) as where, httpx.AsyncClient() as c:
            url = where.http_url
            r = await c.post(url, json=INIT)
            h = {"acp-connection-id": r.headers["acp-connection-id"], "acp-session-id": "s1", **JSON}
            agent = await agents.agents.get()
            wrapped = {"jsonrpc": "2.0", "method": envelope,
                       "params": {"method": "$/cancel_request", "params": {"requestId": 4}}}
            body = json.dumps(wrapped, separators=(",", ":")).encode()
            assert (await c.post(url, content=body, headers=h)).status_code == 202
            assert await agent.until(lambda line: b"requestId" in line) == body
            other = dict(wrapped, params={**wrapped["params"], "sessionId": "other"})
            body = json.dumps(other, separators=(",", ":")).encode()
            assert (await c.post(url, content=body, headers=h)).status_code == 202
            assert await agent.until(lambda line: b'"other"' in line) == body
            session_method = {"jsonrpc": "2.0", "method": envelope, "params": {"method": "session/cancel"}}
            assert (await c.post(url, json=session_method, headers=h)).status_code == 202
            line = await agent.until(lambda line: b"session/cancel" in line)
            assert json.loads(line)["params"]["sessionId"] == "s1"

    run(main)


# ---------------------------------------------------------------------------------------
# a line of the agent that is not JSON-RPC: one rule on every outlet
# ---------------------------------------------------------------------------------------

BAD_LINES = [b"this is not json", b'{"jsonrpc":"2.0","id":1,"result":1,"error":{}}', b"\xff\xfe{", b"[1,\r2"]
NOTE = b'{"jsonrpc":"2.0","method":"n","params":{"sessionId":"s1"}}'


@pytest.mark.parametrize("outlet", ["sse", "websocket", "websocket-batch-frames"])
def test_agent_line_that_is_not_jsonrpc_reaches_the_client_alone(engine: ModuleType, outlet: str) -> None:
    """Every outlet forwards such a line as the pipe would give it: alone (never inside a
    batch), on the connection's own channel, in order with the rest; the only changes are
    the ones the outlet's text needs (invalid UTF-8 replaced in a text frame, a CR a tab in an
    event stream, where a reader would end the line)."""

    async def main() -> None:
        agents = RawAgents()
        async with served(AcpApp(agents, engine=engine)) as where, httpx.AsyncClient() as c:
            with log_trap() as bad:
                if outlet == "sse":
                    r = await c.post(where.http_url, json=INIT)
                    h = {"acp-connection-id": r.headers["acp-connection-id"]}
                    agent = await agents.agents.get()
                    streams = Streams(c, where.http_url, h)
                    await asyncio.sleep(0.1)
                    agent.write(*BAD_LINES, NOTE)
                    while len(streams.events) < len(BAD_LINES):
                        await asyncio.sleep(0.01)
                    await asyncio.sleep(0.2)
                    got = [data for _, data in streams.events]  # the notification: on its session's
                    assert got == [line.replace(b"\r", b"\t") for line in BAD_LINES]
                    streams.stop()
                else:
                    headers = {"Acp-Batch-Frames": "1"} if outlet.endswith("batch-frames") else {}
                    async with websockets.connect(where.ws_url, additional_headers=headers) as ws:
                        agent = await agents.agents.get()
                        agent.write(*BAD_LINES, NOTE, NOTE)
                        frames = [await asyncio.wait_for(ws.recv(), 5) for _ in range(len(BAD_LINES) + 1)]
                        expected = [line.decode("utf-8", "replace") for line in BAD_LINES]
                        assert frames[:-1] == expected
                        tail = json.loads(frames[-1])
                        if headers:
                            assert tail == [json.loads(NOTE)] * 2  # the two notifications: one batch
                        else:
                            assert tail == json.loads(NOTE)
            assert bad == []

    run(main)


@pytest.mark.parametrize("wire", ["http", "ws"])
def test_our_client_answers_an_agent_line_that_is_not_json_as_on_stdio(engine: ModuleType, wire: str) -> None:
    """Through the server and our client, a garbage line of the agent is answered as the
    client's engine answers it on stdio: a -32700 with id ``null`` reaches the agent."""

    async def main() -> None:
        agents = RawAgents()
        async with served(AcpApp(agents, engine=engine)) as where:
            conn = Connection(await connect_url(where.ws_url if wire == "ws" else where.http_url), engine=engine)
            assert await conn.request("initialize", {"protocolVersion": 1}) == {"protocolVersion": 1}
            agent = await agents.agents.get()
            agent.write(b"garbage from the agent")
            line = await agent.until(lambda line: b"-32700" in line)
            reply = json.loads(line)
            assert reply["id"] is None and reply["error"]["data"]["line"] == "garbage from the agent"
            conn.close()
            await asyncio.wait_for(conn.wait_closed(), 10)

    run(main)


# ---------------------------------------------------------------------------------------
# a hostile server: what our client makes of it
# ---------------------------------------------------------------------------------------

HOSTILE = [NESTED, b"[1,\n2", b"\xff\xfe not utf-8", b"{\r}", b"1e400", b'{"jsonrpc":"2.0","method":"n","x":' + b"[" * 600]


@pytest.mark.parametrize("wire", ["http", "ws"])
def test_hostile_server_bytes_are_answered_and_the_connection_lives(engine: ModuleType, wire: str) -> None:
    """SSE events and WebSocket frames of deep nesting with a newline, invalid UTF-8, CRs,
    huge numbers, a binary frame: each reaches our client's connection as one line, which
    answers the ones it must as on stdio (-32700, id ``null``, to the server); nothing is
    logged with a traceback and a request made afterwards is answered."""
    hostile: list[Any] = list(HOSTILE)
    if wire == "ws":  # a text frame must be UTF-8 (the protocol fails the socket otherwise)
        hostile = [h.decode("utf-8", "replace") for h in hostile] + [b"\x00binary"]

    async def main() -> None:
        server = HostileServer(hostile)
        async with served(server) as where:  # type: ignore[arg-type]
            with log_trap() as bad:
                url = where.ws_url if wire == "ws" else where.http_url
                conn = Connection(await connect_url(url), engine=engine)
                assert await conn.request("initialize", {"protocolVersion": 1}) == {"protocolVersion": 1}
                assert await asyncio.wait_for(conn.request("_test/echo", {"n": 1}), 10) == {"n": 1}
                deadline = time.monotonic() + 5
                while sum(b"-3260" in b or b"-32700" in b for b in server.received) < 6 \
                        and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                errors = [json.loads(b) for b in server.received if b"-32700" in b or b"-32600" in b]
                assert len(errors) == 6 and all(e["id"] is None for e in errors), server.received
                conn.close()
                await asyncio.wait_for(conn.wait_closed(), 10)
            assert bad == []

    run(main)


BROKEN_REPLIES = {
    "not HTTP": b"garbage\r\n\r\n",
    "short body": b"HTTP/1.1 202 Accepted\r\nContent-Length: 50\r\n\r\nabc",
    "bad chunk": b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "bad header": b"HTTP/1.1 202 Accepted\r\nNo colon here\r\n\r\n",
    "status 999": b"HTTP/1.1 999 What\r\nContent-Length: 0\r\n\r\n",
    "closed": b"",
}


@pytest.mark.parametrize("broken", list(BROKEN_REPLIES))
def test_broken_http_reply_fails_its_request_once_and_the_next_works(engine: ModuleType, broken: str) -> None:
    """Our client's lean HTTP/1.1 path (and h11 under it) given a broken reply to a POST: the
    request in it fails at once with one -32603 naming the failure, nothing is logged with a
    traceback, and the next request (a fresh connection) is answered."""

    async def main() -> None:
        server = HostileHttp([BROKEN_REPLIES[broken]])
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        try:
            with log_trap() as bad:
                conn = Connection(await connect_url(f"http://127.0.0.1:{port}/acp"), engine=engine)
                assert await conn.request("initialize", {"protocolVersion": 1}) == {"protocolVersion": 1}
                with pytest.raises(JsonRpcError) as failed:
                    await asyncio.wait_for(conn.request("_test/echo", {}), 10)
                assert failed.value.code == -32603
                assert await asyncio.wait_for(conn.request("_test/echo", {}), 10) == {}
                conn.close()
                await asyncio.wait_for(conn.wait_closed(), 10)
            assert bad == []
        finally:
            listener.close()

    run(main)


# ---------------------------------------------------------------------------------------
# the fuzz, briefly
# ---------------------------------------------------------------------------------------


def test_fuzz_remote_short_run_finds_nothing(engine_impl: Any) -> None:
    """``scripts/fuzz_remote.py`` (a CI stage with ``--count 1000``) on a short run."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "fuzz_remote.py"), "--seed", "3", "--count", "150",
                           "--engine", engine_impl.tag], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("fuzz_remote: seed 3: 150 POST bodies, 150 WebSocket frames, 0 findings"), proc.stdout
