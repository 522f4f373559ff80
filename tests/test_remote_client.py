"""The remote client transport (``connect_url``) against the official SDKs' remote servers.

Peers (``tests/helpers/remote_peers.py``): the Python SDK 0.12.1's ASGI app on uvicorn
(``peers/pysdk/remote_server.py``, ACP v1) and the TypeScript SDK 2.4.0's ``AcpServer``
(``peers/ts/remote_server.mjs``, v1 and draft v2), both over Streamable HTTP and WebSocket,
on 127.0.0.1, requiring a bearer token, numbering the streamed chunks (``--number``) so that
order can be checked. Both engine twins (``engine`` fixture).

Covered: initialize, session/new, a prompt streaming 1,000 updates received in order, a
permission request answered mid-prompt, ``session/cancel``, the server killed mid-turn (the
pending prompt fails at once, closing does not hang), a wrong token (401), a refused POST
failing its request at once, the URL rules and the missing-extra error.

Resuming (against our own server, Testy in process): a session stream cut inside an event
mid-prompt is resumed with ``Last-Event-ID`` and every update arrives once, in order; a resume
refused with 409 ends the connection at once; a server gone uses up the attempts and ends it
within their delays.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from types import ModuleType
from typing import Any

import httpx
import pytest
import remote_peers
from raw_http import ACCEPTED, SSE_HEAD, RawHttp, initialize_reply, sse_event
from remote_faults import ConnectProxy, CutSse, TcpProxy
from remote_peers import KINDS, REPO, RemotePeer

from acp_fast import Client, JsonRpcError
from acp_fast.jsonrpc import Connection
from acp_fast.testy import build as build_testy
from acp_fast.remote import AcpApp, ServerPolicy, asgi_app, served
from acp_fast.remote._wire import CONNECTION_ID_HEADER, MissingExtraError, SseParser
from acp_fast.remote import client as remote_client
from acp_fast.remote.client import RemoteConnectError, RemoteConnectionLost, connect_url, resolve_url

TOKEN = "t0ken-for-tests"
WIRES = ("http", "ws")
AGENT_NAMES = {"pysdk": "pysdk-test-agent", "ts": "ts-sdk-test-agent"}
CHUNK = "x" * 10  # ACP_CHUNK=10 (remote_peers.start)
#: Wall-time bound of one test body: only turns a hang into a failure.
BOUND = 30.0


def run(body: Callable[[], Awaitable[None]], bound: float = BOUND) -> None:
    async def guarded() -> None:
        await asyncio.wait_for(body(), bound)

    asyncio.run(guarded())


@pytest.fixture(scope="module")
def shared_peers() -> Iterator[dict[str, RemotePeer]]:
    """The module's servers, started on first use (one per peer kind), stopped at its end."""
    servers: dict[str, RemotePeer] = {}
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(params=KINDS)
def peer(request: pytest.FixtureRequest, shared_peers: dict[str, RemotePeer]) -> RemotePeer:
    """A peer server (token required, chunks numbered), shared by the module's tests."""
    kind = str(request.param)
    if kind not in shared_peers:
        shared_peers[kind] = remote_peers.start(kind, token=TOKEN)
    return shared_peers[kind]


@pytest.fixture(params=WIRES)
def wire(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def texts(record: list[Any]) -> list[str]:
    return [u.payload["content"]["text"] for u in record if u.kind == "agent_message_chunk"]


def numbered(first: int, *items: str) -> list[str]:
    return [f"{first + k}:{text}" for k, text in enumerate(items)]


def v1_client(record: list[Any], event: asyncio.Event, asked: list[str]) -> Any:
    def on_update(update: Any, cx: Any) -> None:
        record.append(update)
        event.set()

    client = Client.builder().on_session_update(on_update)

    @client.on_request("session/request_permission")
    def permission(params: dict[str, Any], cx: Any) -> dict[str, Any]:
        asked.append(params["toolCall"]["title"])
        return {"outcome": {"outcome": "selected", "optionId": "allow"}}

    return client


# ---------------------------------------------------------------------------------------
# against the peers
# ---------------------------------------------------------------------------------------


def test_v1_stream_permission_cancel(peer: RemotePeer, wire: str, engine: ModuleType) -> None:
    async def body() -> None:
        record: list[Any] = []
        got = asyncio.Event()
        asked: list[str] = []
        client = v1_client(record, got, asked)
        stream = await connect_url(peer.base(wire), token=TOKEN)  # bare base URL: /acp appended
        async with client.connect(stream, engine=engine) as cx:
            init = await cx.initialize()
            assert init["protocolVersion"] == 1 and init["agentInfo"]["name"] == AGENT_NAMES[peer.kind]
            session = (await cx.build_session(str(REPO))).session

            assert await session.send_prompt("stream 1000 chunks") == {"stopReason": "end_turn"}
            assert texts(record) == numbered(0, *[CHUNK] * 1000)  # all of them, in order, before the reply

            record.clear()
            assert await session.send_prompt("permission, then 3") == {"stopReason": "end_turn"}
            assert asked == ["Test tool"]
            assert texts(record) == numbered(1000, "permission:allow", CHUNK, CHUNK, CHUNK)

            record.clear()
            got.clear()
            turn = session.send_prompt("stream 100000000 chunks")
            await got.wait()
            session.cancel_active_work()  # session/cancel
            assert await turn == {"stopReason": "cancelled"}
            assert 0 < len(texts(record)) < 100000000
            conn_id = stream.get_extra_info("acp_connection_id")
            assert conn_id
        if wire == "http":  # closing sent DELETE: the server no longer knows the connection
            async with httpx.AsyncClient() as http:
                r = await http.post(peer.base("http") + "/acp", content=b'{"jsonrpc":"2.0","method":"_x"}',
                                    headers={"Content-Type": "application/json", CONNECTION_ID_HEADER: conn_id,
                                             "Authorization": f"Bearer {TOKEN}"})
            assert r.status_code == 404

    run(body)


def test_v2_stream(peer: RemotePeer, wire: str, engine: ModuleType) -> None:
    """Draft v2 on the TS peer; the Python SDK speaks v1 only and answers with version 1."""

    async def body() -> None:
        record: list[Any] = []
        client = Client.v2().on_session_update(lambda u, cx: record.append(u))
        async with client.connect(connect_url(peer.base(wire) + "/acp", token=TOKEN), engine=engine) as cx:
            if peer.kind == "pysdk":
                with pytest.raises(JsonRpcError) as exc:
                    await cx.initialize()
                assert exc.value.code == -32600 and "negotiated 1" in str(exc.value.data)
                return
            await cx.initialize()
            assert cx.negotiated_version == 2
            session: Any = (await cx.build_session(str(REPO))).session
            epoch = session.idle_epoch
            receipt = await session.send_prompt("stream 1000 chunks")
            stop = await session.wait_idle(after=epoch)
            assert "messageId" in receipt and stop is not None and stop.kind == "end_turn"
            assert texts(record) == numbered(0, *[CHUNK] * 1000)
            kinds = [u.kind for u in record]
            assert kinds[0] == "state_update" and kinds[-1] == "state_update" and "user_message" in kinds
            assert await cx.send_request("_test/echo", {"v": [2, None]}) == {"v": [2, None]}

    run(body)


@pytest.mark.parametrize("kind", KINDS)
def test_server_killed_mid_turn(kind: str, engine: ModuleType) -> None:
    """A connection over each wire, each mid-turn, when the server dies: every pending prompt
    fails at once, later calls fail at once, and closing returns."""
    server = remote_peers.start(kind)
    try:
        async def body() -> None:
            async with contextlib.AsyncExitStack() as stack:
                turns = []
                for wire in WIRES:
                    got = asyncio.Event()
                    client = v1_client([], got, [])
                    cx = await stack.enter_async_context(client.connect(connect_url(server.base(wire)), engine=engine))
                    await cx.initialize()
                    session = (await cx.build_session(str(REPO))).session
                    turn = session.send_prompt("stream 100000000 chunks")
                    await got.wait()
                    turns.append((cx, turn))
                server.kill()
                for cx, turn in turns:
                    with pytest.raises(JsonRpcError) as exc:
                        await asyncio.wait_for(turn, 5.0)
                    assert exc.value.code == -32603
                    with pytest.raises(JsonRpcError):
                        await asyncio.wait_for(cx.send_request("_test/echo", {}), 5.0)

        run(body, 20.0)
    finally:
        server.stop()


def test_wrong_token_is_refused(peer: RemotePeer, wire: str, engine: ModuleType) -> None:
    async def body() -> None:
        for token in ("wrong", None):
            if wire == "ws":
                with pytest.raises(RemoteConnectError) as refused:
                    await connect_url(peer.base("ws"), token=token)
                assert refused.value.status == 401 and "401" in str(refused.value)
                continue
            async with Client.builder().connect(connect_url(peer.base("http"), token=token), engine=engine) as cx:
                with pytest.raises(JsonRpcError) as exc:
                    await asyncio.wait_for(cx.initialize(), 5.0)
                assert exc.value.code == -32603 and "HTTP 401" in exc.value.message
                assert exc.value.data["status"] == 401 and exc.value.data["method"] == "initialize"

    run(body)


def test_refused_post_fails_its_request_at_once(peer: RemotePeer, wire: str, engine: ModuleType) -> None:
    """A prompt for a session the server does not know: the Python SDK's server refuses the
    POST (404, its session check), which fails the request at once; over its WebSocket and on
    the TS peer the agent answers with its own error."""

    async def body() -> None:
        async with Client.builder().connect(connect_url(peer.base(wire), token=TOKEN), engine=engine) as cx:
            await cx.initialize()
            with pytest.raises(JsonRpcError) as exc:
                await asyncio.wait_for(cx.send_request("session/prompt", {"sessionId": "nope", "prompt": []}), 5.0)
            expected = {("pysdk", "http"): -32603, ("pysdk", "ws"): -32602}.get((peer.kind, wire), -32002)
            assert exc.value.code == expected
            if expected == -32603:
                assert exc.value.data["status"] == 404 and "HTTP 404" in exc.value.message
            assert await cx.send_request("_test/echo", {"still": "usable"}) == {"still": "usable"}

    run(body)


def test_http_wrong_path_fails_initialize(peer: RemotePeer, engine: ModuleType) -> None:
    async def body() -> None:
        url = peer.base("http") + "/not-acp"
        async with Client.builder().connect(connect_url(url, token=TOKEN), engine=engine) as cx:
            with pytest.raises(JsonRpcError) as exc:
                await asyncio.wait_for(cx.initialize(), 5.0)
            assert exc.value.code == -32603 and exc.value.data["status"] == 404

    run(body)


# ---------------------------------------------------------------------------------------
# without a peer
# ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_nothing_listening(engine: ModuleType) -> None:
    async def body() -> None:
        port = free_port()
        with pytest.raises(RemoteConnectError) as refused:
            await connect_url(f"ws://127.0.0.1:{port}")
        assert refused.value.status is None
        async with Client.builder().connect(connect_url(f"http://127.0.0.1:{port}"), engine=engine) as cx:
            with pytest.raises(JsonRpcError) as exc:
                await asyncio.wait_for(cx.initialize(), 5.0)
            assert exc.value.code == -32603 and "initialize POST" in exc.value.message

    run(body)


def test_http_first_message_must_be_initialize(engine: ModuleType) -> None:
    async def body() -> None:
        conn = Connection(await connect_url(f"http://127.0.0.1:{free_port()}/acp"), engine=engine)
        try:
            with pytest.raises(JsonRpcError) as exc:
                await asyncio.wait_for(conn.request("session/new", {"cwd": "/", "mcpServers": []}), 5.0)
            assert exc.value.code == -32603 and "initialize" in exc.value.message
        finally:
            conn.close()
            await asyncio.wait_for(conn.wait_closed(), 5.0)

    run(body)


def test_bad_scheme(engine: ModuleType) -> None:
    async def body() -> None:
        with pytest.raises(ValueError, match="unsupported URL scheme 'ftp'"):
            async with Client.builder().connect(connect_url("ftp://127.0.0.1/acp"), engine=engine):
                pass

    run(body)


@pytest.mark.parametrize(("url", "expected"), [
    ("http://127.0.0.1:8000", ("http", "http://127.0.0.1:8000/acp")),
    ("https://example.test/", ("http", "https://example.test/acp")),
    ("WS://127.0.0.1:1/", ("websocket", "ws://127.0.0.1:1/acp")),
    ("wss://h.test/x/acp?k=v", ("websocket", "wss://h.test/x/acp?k=v")),
    ("http://[::1]:9/custom", ("http", "http://[::1]:9/custom")),
])
def test_resolve_url(url: str, expected: tuple[str, str]) -> None:
    assert resolve_url(url) == expected


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "file:///tmp/x", "http:///acp", "tcp://h:1"])
def test_resolve_url_refuses(url: str) -> None:
    with pytest.raises(ValueError):
        resolve_url(url)


@pytest.mark.parametrize(("url", "module"), [("http://127.0.0.1:1", "httpx"), ("ws://127.0.0.1:1", "websockets")])
def test_missing_extra(monkeypatch: pytest.MonkeyPatch, url: str, module: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))

    async def body() -> None:
        with pytest.raises(MissingExtraError, match=rf"{module}.*acp-fast\[remote\]"):
            await connect_url(url)

    run(body)


# ---------------------------------------------------------------------------------------
# backpressure, against small local servers (memory stays bounded while nobody reads)
# ---------------------------------------------------------------------------------------

FLOOD_FRAMES = 2000
FLOOD_LINE = b'{"jsonrpc":"2.0","method":"_flood","params":{"t":"' + b"x" * 16000 + b'"}}'


def test_ws_backpressure_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection not reading stops the bridge reading the socket (the server's sends
    stall); the server not reading stops the bridge reading the connection (its writes pause),
    and closing then gives up on the unsent messages after ``CLOSE_TIMEOUT``.
    """
    monkeypatch.setattr(remote_client._bridge, "CLOSE_TIMEOUT", 0.5)
    from websockets.asyncio.server import ServerConnection, serve
    from websockets.exceptions import ConnectionClosed

    async def body() -> None:
        sent = 0
        flood = asyncio.Event()

        async def handler(ws: ServerConnection) -> None:
            nonlocal sent
            try:
                if ws.request is not None and ws.request.path == "/flood":
                    for _ in range(FLOOD_FRAMES):
                        await ws.send(FLOOD_LINE.decode())
                        sent += 1
                    flood.set()
                await ws.wait_closed()  # never reads
            except ConnectionClosed:
                pass

        async with serve(handler, "127.0.0.1", 0, close_timeout=0.5) as server:
            port = server.sockets[0].getsockname()[1]
            # incoming: the consumer pauses after its first chunk
            stream = await connect_url(f"ws://127.0.0.1:{port}/flood")
            received = 0

            def on_data(data: bytes) -> None:
                nonlocal received
                received += data.count(b"\n")
                if not resumed:
                    stream.pause_reading()

            resumed = False
            stream.attach(on_data, lambda exc: None, lambda writable: None)
            await asyncio.sleep(1.0)
            assert 0 < received < sent < FLOOD_FRAMES // 2, (received, sent)  # bounded: at most ~16 MiB in flight
            resumed = True
            stream.resume_reading()
            await asyncio.wait_for(flood.wait(), 15.0)
            while received < FLOOD_FRAMES:
                await asyncio.sleep(0.05)
            assert received == FLOOD_FRAMES
            stream.close()
            await asyncio.wait_for(stream.wait_closed(), 10.0)

            # outgoing: the server never reads; the stream's writer is paused before long
            stream = await connect_url(f"ws://127.0.0.1:{port}/sink")
            stream.attach(lambda data: None, lambda exc: None, lambda writable: None)
            written = 0
            while not stream.writing_paused and written < 64 * 1024 * 1024:
                stream.write(FLOOD_LINE + b"\n")
                written += len(FLOOD_LINE) + 1
                await asyncio.sleep(0)
            assert stream.writing_paused and written < 32 * 1024 * 1024, written
            stream.close()
            await asyncio.wait_for(stream.wait_closed(), 3.0)

    run(body)


class _MiniHttp(RawHttp):
    """A tiny HTTP/1.1 server for one Streamable HTTP connection: ``initialize`` answered
    200 with a connection id, other POSTs 202 (or :attr:`post_status`), the connection's
    SSE stream sending ``frames`` events (counted in :attr:`sent`), DELETE 202."""

    def __init__(self, frames: int) -> None:
        self.frames = frames
        self.sent = 0
        self.flooded = asyncio.Event()
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.deletes: list[str] = []
        self.post_status = 202
        self.refuse_initialize = False

    async def answer(self, method: str, headers: dict[str, str], body: bytes, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> bool:
        if method == "GET":
            await self.flood(writer)
            await reader.read()  # until the client goes
            return False
        if method == "POST" and b'"initialize"' in body:
            ident = body.split(b'"id":', 1)[1].split(b",", 1)[0]
            outcome = (b'"error":{"code":-32022,"message":"Unsupported protocol version"}'
                       if self.refuse_initialize else b'"result":{"protocolVersion":1}')
            initialize_reply(writer, b'{"jsonrpc":"2.0","id":' + ident + b"," + outcome + b"}")
        elif method == "POST":
            self.posts.append((headers, body))
            writer.write(b"HTTP/1.1 %d X\r\nContent-Length: 0\r\n\r\n" % self.post_status)
        else:
            self.deletes.append(headers.get("acp-connection-id", ""))
            writer.write(ACCEPTED)
        return True

    async def flood(self, writer: asyncio.StreamWriter) -> None:
        writer.write(SSE_HEAD)
        chunk = sse_event(FLOOD_LINE)
        for _ in range(self.frames):
            writer.write(chunk)
            await writer.drain()
            self.sent += 1
        self.flooded.set()


INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'


def test_http_sse_backpressure() -> None:
    """The consumer not reading stops the bridge reading the SSE stream (the server's
    writes stall); once it reads again, every event arrives."""

    async def body() -> None:
        mini = _MiniHttp(FLOOD_FRAMES)
        server = await asyncio.start_server(mini.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            stream = await connect_url(f"http://127.0.0.1:{port}")
            received = 0
            resumed = False

            def on_data(data: bytes) -> None:
                nonlocal received
                received += data.count(b"\n")
                if received > 1 and not resumed:  # the initialize reply, then the first events
                    stream.pause_reading()

            stream.attach(on_data, lambda exc: None, lambda writable: None)
            stream.write(INITIALIZE)
            await asyncio.sleep(1.0)
            assert 1 < received < mini.sent < FLOOD_FRAMES // 2, (received, mini.sent)
            resumed = True
            stream.resume_reading()
            await asyncio.wait_for(mini.flooded.wait(), 15.0)
            while received < FLOOD_FRAMES + 1:
                await asyncio.sleep(0.05)
            stream.close()
            await asyncio.wait_for(stream.wait_closed(), 10.0)
        finally:
            server.close()

    run(body)


def test_http_refused_posts_and_headers(engine: ModuleType) -> None:
    """A POST answered 500 fails its request at once; every POST names the connection, and
    one whose params carry a session id names the session."""

    async def body() -> None:
        mini = _MiniHttp(0)
        server = await asyncio.start_server(mini.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            conn = Connection(await connect_url(f"http://127.0.0.1:{port}", headers={"X-Extra": "1"}), engine=engine)
            assert await conn.request("initialize", {"protocolVersion": 1}) == {"protocolVersion": 1}
            mini.post_status = 500
            with pytest.raises(JsonRpcError) as exc:
                await asyncio.wait_for(conn.request("_x/y", {"sessionId": "s1"}), 5.0)
            assert exc.value.code == -32603 and exc.value.data["status"] == 500 and "HTTP 500" in exc.value.message
            mini.post_status = 202
            conn.notify("$/cancel_request", {"requestId": 7, "sessionId": "s1"})
            conn.notify("_note", {"a": 1})
            await asyncio.sleep(0.3)
            (h1, b1), (h2, b2), (h3, b3) = mini.posts
            assert all(h["acp-connection-id"] == "c1" and h["x-extra"] == "1" for h in (h1, h2, h3))
            assert h1["acp-session-id"] == "s1" and b'"_x/y"' in b1
            assert "acp-session-id" not in h2 and b'"$/cancel_request"' in b2  # connection-scoped
            assert "acp-session-id" not in h3 and h3["content-type"] == "application/json"
            conn.close()
            await asyncio.wait_for(conn.wait_closed(), 10.0)
        finally:
            server.close()

    run(body)


def test_http_initialize_refused_by_the_agent(engine: ModuleType) -> None:
    """The agent's error reply to ``initialize`` reaches the caller as is; a connection id the
    server sent with it is ended (DELETE), and no SSE stream is opened."""

    async def body() -> None:
        mini = _MiniHttp(3)
        mini.refuse_initialize = True
        server = await asyncio.start_server(mini.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            conn = Connection(await connect_url(f"http://127.0.0.1:{port}"), engine=engine)
            with pytest.raises(JsonRpcError) as exc:
                await asyncio.wait_for(conn.request("initialize", {"protocolVersion": 3}), 5.0)
            assert exc.value.code == -32022
            await asyncio.sleep(0.2)
            assert mini.deletes == ["c1"] and mini.sent == 0
            conn.close()
            await asyncio.wait_for(conn.wait_closed(), 10.0)
        finally:
            server.close()

    run(body)


# ---------------------------------------------------------------------------------------
# resuming a dropped SSE stream, against our own server (Testy in process, on uvicorn)
# ---------------------------------------------------------------------------------------

RESUME_PROMPT = "stream 1000 chunks of 10 bytes"
#: Seconds within which a failure must reach a pending request: the resume attempts'
#: delays, plus room for the requests themselves.
FAIL_BOUND = sum(remote_client.RESUME_DELAYS) + 2.0


def our_server(engine: ModuleType, **policy: Any) -> AcpApp:
    return asgi_app(build_testy((1, 2)), policy=ServerPolicy(**policy), engine=engine)


async def one_turn(opening: Awaitable[Any], engine: ModuleType) -> None:
    """Connect on ``opening`` (a ``connect_url`` call), initialize, stream a 300-chunk turn and
    answer one request: the connection works end to end."""
    client = Client.builder().on_session_update(lambda u, cx: None)
    async with client.connect(opening, engine=engine) as cx:
        await cx.initialize()
        session = (await cx.build_session("/tmp")).session
        assert await session.send_prompt("stream 300 chunks") == {"stopReason": "end_turn"}
        assert await cx.send_request("_test/echo", {"n": 1}) == {"n": 1}


def unanswering_client() -> tuple[Any, asyncio.Event]:
    """A client builder that leaves the agent's permission requests unanswered, and the
    event set when one arrives (a turn then waits, its streams quiet)."""
    asked = asyncio.Event()
    client = Client.builder().on_session_update(lambda u, cx: None)

    @client.on_request("session/request_permission")
    async def permission(params: dict[str, Any], cx: Any) -> dict[str, Any]:
        asked.set()
        await asyncio.Event().wait()  # never answered
        raise AssertionError("unreachable")

    return client, asked


def chunk_numbers(record: list[Any]) -> list[int]:
    """The index each streamed chunk starts with (Testy numbers them), in arrival order."""
    return [int(re.match(r"\d+", text).group()) for text in texts(record)]  # type: ignore[union-attr]


def test_sse_cursor_is_the_last_whole_event() -> None:
    """The cursor a resume sends: an ``id:`` line counts once its event is complete (a drop
    inside an event must resume before it), and it holds across events without one."""
    parser = SseParser()
    assert parser.feed(b"id: 1\ndata: a\n\nid: 2\nda") == [b"a"]
    assert parser.last_event_id == "1"
    assert parser.feed(b"ta: b\n\ndata: c\n\n") == [b"b", b"c"]
    assert parser.last_event_id == "2"


@pytest.mark.parametrize(("after", "batches"), [(300, False), (0, False), (0, True)],
                         ids=["mid-stream", "before-the-first-event", "inside-the-first-batch"])
def test_http_sse_resumed_after_a_drop(engine: ModuleType, after: int, batches: bool) -> None:
    """The session stream is cut inside an event (after ``after`` whole events) mid-prompt: the
    client resumes it with ``Last-Event-ID`` (the last whole event's id; ``0`` when none came
    yet on that stream) and receives every update once, in order, then the reply. With batch
    frames (the client's default against our server) the first event is a batch, cut in the
    middle: the resume replays all of it."""

    async def body() -> None:
        app = our_server(engine)
        cut = CutSse(app, after=after, batches=batches)
        record: list[Any] = []
        try:
            async with served(cut) as where:
                client = Client.builder().on_session_update(lambda u, cx: record.append(u))
                async with client.connect(connect_url(where.http_url), engine=engine) as cx:
                    await cx.initialize()
                    session = (await cx.build_session("/tmp")).session
                    assert await session.send_prompt(RESUME_PROMPT) == {"stopReason": "end_turn"}
                    assert cut.cut.is_set()
                    assert chunk_numbers(record) == list(range(1000))  # each once, in order
                    resumed = [h.get("last-event-id") for h in cut.session_gets()]
                    assert resumed == [None, cut.cut_after if after else remote_client.START_CURSOR]
                    assert after == 0 or int(cut.cut_after or 0) >= after  # the cut was mid-stream
                    assert await cx.send_request("_test/echo", {"after": "resume"}) == {"after": "resume"}
                    assert cx.raw.transport_error is None
        finally:
            await app.aclose()

    run(body)


def test_http_sse_resume_refused_409(engine: ModuleType) -> None:
    """Outside the replay window (here a window of one byte: nothing sent is kept) the resume
    gets 409: the connection ends, the pending prompt fails at once, the error names it."""

    async def body() -> None:
        app = our_server(engine, replay_window=1)
        cut = CutSse(app, after=300)
        try:
            async with served(cut) as where:
                client = Client.builder().on_session_update(lambda u, cx: None)
                async with client.connect(connect_url(where.http_url), engine=engine) as cx:
                    await cx.initialize()
                    session = (await cx.build_session("/tmp")).session
                    turn = asyncio.ensure_future(session.send_prompt(RESUME_PROMPT))
                    await asyncio.wait_for(cut.cut.wait(), 10.0)
                    cut_at = time.monotonic()
                    with pytest.raises(JsonRpcError) as exc:
                        await asyncio.wait_for(turn, FAIL_BOUND)
                    took = time.monotonic() - cut_at
                    assert exc.value.code == -32603 and took < 1.0, took
                    lost = cx.raw.transport_error
                    assert isinstance(lost, RemoteConnectionLost) and lost.status == 409
                    assert exc.value.data["cause"] == str(lost)
                    assert "409" in str(lost) and "cannot resume" in str(lost) and session.session_id in str(lost)
                    with pytest.raises(JsonRpcError):  # later calls fail at once too
                        await asyncio.wait_for(cx.send_request("_test/echo", {}), 1.0)
                    assert len(cut.session_gets()) == 2  # one resume, no more
        finally:
            await app.aclose()

    run(body)


def test_http_sse_resume_attempts_exhausted(engine: ModuleType) -> None:
    """The server gone mid-prompt (every connection dropped, nothing listening): the client
    tries ``len(RESUME_DELAYS)`` times, then the connection ends; the pending prompt fails
    within the attempts' delays, and closing returns. (The prompt waits on a permission
    request the client leaves unanswered: the streams are quiet when the server goes, so the
    drop is seen at once rather than after a backlog of updates.)"""

    async def body() -> None:
        app = our_server(engine)
        try:
            async with served(app) as where:
                proxy = await TcpProxy(where.port).start()
                try:
                    client, asked = unanswering_client()

                    async with client.connect(connect_url(proxy.url()), engine=engine) as cx:
                        await cx.initialize()
                        session = (await cx.build_session("/tmp")).session
                        turn = asyncio.ensure_future(session.send_prompt("permission stream 3 chunks"))
                        await asyncio.wait_for(asked.wait(), 10.0)
                        proxy.kill()
                        gone_at = time.monotonic()
                        with pytest.raises(JsonRpcError) as exc:
                            await asyncio.wait_for(turn, FAIL_BOUND)
                        took = time.monotonic() - gone_at
                        assert exc.value.code == -32603
                        assert sum(remote_client.RESUME_DELAYS) <= took < FAIL_BOUND, took
                        lost = cx.raw.transport_error
                        assert isinstance(lost, RemoteConnectionLost) and lost.status is None
                        assert f"{len(remote_client.RESUME_DELAYS)} attempts failed" in str(lost), lost
                    # leaving the block closed the connection (its DELETE refused): no hang
                finally:
                    await proxy.aclose()
        finally:
            await app.aclose()

    run(body)


def test_http_connection_closed_by_the_server(engine: ModuleType) -> None:
    """The server ends the connection (here a DELETE from elsewhere): its streams end cleanly,
    the resume learns from 404 that the connection is gone, and the pending prompt fails at
    once, with no transport error (the server closed it; nothing failed)."""

    async def body() -> None:
        app = our_server(engine)
        try:
            async with served(app) as where:
                client, asked = unanswering_client()

                stream = await connect_url(where.http_url)
                async with client.connect(stream, engine=engine) as cx:
                    await cx.initialize()
                    session = (await cx.build_session("/tmp")).session
                    turn = asyncio.ensure_future(session.send_prompt("permission stream 3 chunks"))
                    await asyncio.wait_for(asked.wait(), 10.0)
                    async with httpx.AsyncClient() as http:
                        r = await http.delete(where.http_url,
                                              headers={CONNECTION_ID_HEADER: str(stream.get_extra_info("acp_connection_id"))})
                    assert r.status_code == 202
                    closed_at = time.monotonic()
                    with pytest.raises(JsonRpcError) as exc:
                        await asyncio.wait_for(turn, FAIL_BOUND)
                    took = time.monotonic() - closed_at
                    assert exc.value.code == -32603 and took < 1.0, took
                    assert cx.raw.transport_error is None
        finally:
            await app.aclose()

    run(body)


# ---------------------------------------------------------------------------------------
# the lean HTTP/1.1 path of POSTs and SSE GETs (``_plainhttp``): cookies, reconnecting
# ---------------------------------------------------------------------------------------


class _Affinity:
    """ASGI middleware: sets an affinity cookie on the ``initialize`` reply and records the
    ``Cookie`` header of every later HTTP request (method, header or ``None``)."""

    def __init__(self, app: AcpApp) -> None:
        self.app = app
        self.path = app.path
        self.seen: list[tuple[str, str | None]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", ())}
        cookie = headers.get(b"cookie")
        first = b"acp-connection-id" not in headers
        if not first:
            self.seen.append((scope["method"], cookie.decode() if cookie is not None else None))

        async def sending(message: dict[str, Any]) -> None:
            if first and message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"set-cookie", b"affinity=worker-7; Path=/")]}
            await send(message)

        await self.app(scope, receive, sending)


def test_http_cookies_kept_on_every_request(engine: ModuleType) -> None:
    """A cookie the server sets on ``initialize`` (an affinity cookie, which the RFD allows)
    comes back on every later POST, SSE GET and the closing DELETE."""

    async def body() -> None:
        app = our_server(engine)
        affinity = _Affinity(app)
        try:
            async with served(affinity) as where:
                client = Client.builder().on_session_update(lambda u, cx: None)
                async with client.connect(connect_url(where.http_url), engine=engine) as cx:
                    await cx.initialize()
                    session = (await cx.build_session("/tmp")).session
                    assert await session.send_prompt("stream 3 chunks") == {"stopReason": "end_turn"}
                    assert await cx.send_request("_test/echo", {"n": 1}) == {"n": 1}
                await asyncio.sleep(0.1)
        finally:
            await app.aclose()
        methods = {m for m, _ in affinity.seen}
        assert {"POST", "GET", "DELETE"} <= methods, affinity.seen
        assert all(cookie == "affinity=worker-7" for _, cookie in affinity.seen), affinity.seen

    run(body)


def test_plain_http_reopens_a_connection_the_server_closed() -> None:
    """POSTs reuse one keep-alive connection; one closed meanwhile (a server's keep-alive
    timeout) is not reused: the next request opens a new one and succeeds."""
    from acp_fast.remote._plainhttp import PlainHttp

    async def body() -> None:
        app = our_server(engine_default())
        try:
            async with served(app) as where:
                plain = PlainHttp(where.http_url, httpx.Cookies(), connect_timeout=5.0, max_body=1 << 20,
                                  user_agent="test")
                opened = 0
                connect = plain._connect

                async def counting() -> Any:
                    nonlocal opened
                    opened += 1
                    return await connect()

                plain._connect = counting  # type: ignore[method-assign]
                init = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'
                reply, data = await plain.request("POST", {"content-type": "application/json"}, init)
                assert reply.status_code == 200 and b'"protocolVersion":1' in data
                cid = reply.headers["acp-connection-id"]
                echo = b'{"jsonrpc":"2.0","id":1,"method":"_test/echo","params":{}}'
                headers = {"content-type": "application/json", "acp-connection-id": cid}
                for _ in range(3):
                    reply, data = await plain.request("POST", headers, echo)
                    assert (reply.status_code, data) == (202, b"")
                assert opened == 1
                for conn in plain._idle:
                    assert conn.transport is not None
                    conn.transport.close()
                await asyncio.sleep(0.05)
                reply, _ = await plain.request("POST", headers, echo)
                assert reply.status_code == 202 and opened == 2
                reply, _ = await plain.request("DELETE", {"acp-connection-id": cid})
                assert reply.status_code == 202
                plain.close()
        finally:
            await app.aclose()

    run(body)


def engine_default() -> ModuleType:
    import acp_fast.engine as engine

    return engine


def test_websocket_through_a_proxy_from_the_environment(engine: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy the environment names for ``ws://`` is used (websockets' client speaks to it);
    without one the socket is opened directly. Both stream a turn and answer a request."""

    async def turn(url: str) -> None:
        await one_turn(connect_url(url), engine)

    async def body() -> None:
        app = our_server(engine)
        proxy = await ConnectProxy().start()
        try:
            async with served(app) as where:
                for name in ("ws_proxy", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
                             "WS_PROXY", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
                    monkeypatch.delenv(name, raising=False)
                await turn(where.ws_url)
                assert proxy.asked == []
                monkeypatch.setenv("ws_proxy", proxy.url())
                assert remote_client.ws_proxied(where.ws_url)
                await turn(where.ws_url)
                assert proxy.asked == [f"127.0.0.1:{where.port}"]
        finally:
            await proxy.aclose()
            await app.aclose()

    run(body)


def test_websocket_silently_dead_path_detected_by_pings(engine: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The network path stops carrying anything while every socket stays open: the client's
    ping gets no pong, the connection ends, the pending request fails, and the error says so."""
    monkeypatch.setattr(remote_client._websocket, "PING_INTERVAL", 0.2)
    monkeypatch.setattr(remote_client._websocket, "PING_TIMEOUT", 0.3)

    async def body() -> None:
        app = our_server(engine)
        try:
            async with served(app) as where:
                proxy = await TcpProxy(where.port).start()
                try:
                    client, asked = unanswering_client()

                    async with client.connect(connect_url(proxy.url().replace("http", "ws")), engine=engine) as cx:
                        await cx.initialize()
                        session = (await cx.build_session("/tmp")).session
                        await asyncio.sleep(0.5)  # quiet, answered pings keep it open
                        assert await cx.send_request("_test/echo", {"n": 1}) == {"n": 1}
                        turn = asyncio.ensure_future(session.send_prompt("permission stream 3 chunks"))
                        await asyncio.wait_for(asked.wait(), 10.0)
                        proxy.freeze()
                        frozen_at = time.monotonic()
                        with pytest.raises(JsonRpcError) as exc:
                            await asyncio.wait_for(turn, 5.0)
                        assert exc.value.code == -32603
                        assert time.monotonic() - frozen_at < 2.0
                        assert "no pong" in str(cx.raw.transport_error), cx.raw.transport_error
                        assert "no pong" in exc.value.data["cause"]  # the request names the cause
                finally:
                    await proxy.aclose()
        finally:
            await app.aclose()

    run(body)


def _self_signed(tmp: Any) -> tuple[str, str]:
    import subprocess

    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


def test_tls_on_every_client_path(tmp_path: Any, engine: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """``wss://`` (the sans-I/O link), ``https://`` over HTTP/1.1 (the lean POSTs and SSE GETs)
    and ``https://`` with HTTP/2 allowed (httpx) each verify the server's certificate against
    the trust store (here ``SSL_CERT_FILE``) and carry a turn; an untrusted certificate is
    refused."""
    cert, key = _self_signed(tmp_path)

    async def turn(opening: Awaitable[Any]) -> None:
        await one_turn(opening, engine)

    async def body() -> None:
        app = our_server(engine)
        try:
            async with served(app, certfile=cert, keyfile=key) as where:
                assert where.http_url.startswith("https://") and where.ws_url.startswith("wss://")
                with pytest.raises(RemoteConnectError):  # not trusted yet
                    await connect_url(where.ws_url)
                for http2 in (False, True):
                    async with Client.builder().connect(connect_url(where.http_url, http2=http2),
                                                        engine=engine) as cx:
                        with pytest.raises(JsonRpcError) as refused:
                            await cx.initialize()
                        assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value.message), refused.value
                monkeypatch.setenv("SSL_CERT_FILE", cert)
                await turn(connect_url(where.ws_url))
                await turn(connect_url(where.http_url, http2=False))
                await turn(connect_url(where.http_url, http2=True))
        finally:
            await app.aclose()

    run(body)


def test_outgoing_line_over_the_limit_ends_the_websocket(engine: ModuleType) -> None:
    """A line the connection writes that is over ``max_message_size`` is never sent: the
    stream ends, and the error it ends with names the size (the lines before it still go)."""

    async def body() -> None:
        app = our_server(engine)
        try:
            async with served(app) as where:
                stream = await connect_url(where.ws_url, max_message_size=200)
                ended: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
                got: list[bytes] = []
                stream.attach(got.append, lambda exc: ended.done() or ended.set_result(exc), lambda ok: None)
                stream.write(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n'
                             + b'{"jsonrpc":"2.0","method":"x","params":{"pad":"' + b"y" * 300 + b'"}}\n')
                exc = await asyncio.wait_for(ended, 5.0)
                assert isinstance(exc, RemoteConnectionLost) and "over max_message_size (200)" in str(exc), exc
                await asyncio.wait_for(stream.wait_closed(), 5.0)
        finally:
            await app.aclose()

    run(body)
