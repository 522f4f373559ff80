"""The remote layer's guards, each tested by what breaking it would change (issue 31: seven
guards were broken by hand and no remote test failed).

* the Host check on the WebSocket upgrade (DNS rebinding), with a raw upgrade request;
* the WebSocket frame limit: an oversized text or binary frame closes the socket with 1009
  and never reaches the agent;
* backpressure to the agent: a POST is held while the agent does not read its input;
* idle reaping closes the agent (in-process: its stream ends; gateway: the child exits);
* connection ids: distinct, full-entropy, from ``secrets``, never the same in two apps;
* TLS hostname checking on every client path: a certificate naming another host is refused;
* the ``$/`` exemption from the session header, by behaviour: a ``$/cancel_request`` whose own
  ``sessionId`` differs from the header still cancels, and reaches the agent unchanged;
* ``$/cancel_request`` over the network with Python alone (HTTP and WebSocket);
* the constant-time token compare (``hmac.compare_digest``), at unit level.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import websockets

from remote_hostile import RawAgents, gateway_children

from acp_fast import Client, JsonRpcError
from acp_fast.testy import build
from acp_fast.transport.remote import AcpApp, ServerPolicy, asgi_app, gateway_app, served
from acp_fast.transport.remote import server as remote_server
from acp_fast.transport.remote.client import RemoteConnectError, connect_url
from acp_fast.transport.remote._wire import SseParser

BOUND = 30.0
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}
NEW = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}
#: A prompt that streams until it is cancelled.
ENDLESS = "stream 100000000 chunks"


def run(body: Callable[[], Awaitable[None]], bound: float = BOUND) -> None:
    asyncio.run(asyncio.wait_for(body(), bound))


def prompt(ident: Any, sid: str, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}}


async def raw_upgrade(port: int, host: str) -> bytes:
    """The status line the server answers a WebSocket upgrade with ``Host: host``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write((f"GET /acp HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    return line


# ---------------------------------------------------------------------------------------
# the WebSocket upgrade: Host, frame limit
# ---------------------------------------------------------------------------------------


def test_host_check_on_the_websocket_upgrade(engine: ModuleType) -> None:
    """A DNS-rebinding name on the upgrade gets 421 and no socket (the default policy:
    loopback names only); a loopback name gets its 101."""

    async def main() -> None:
        app = asgi_app(build((1,)), engine=engine)
        async with served(app) as where:
            for host in ("attacker.example", f"attacker.example:{where.port}", "127.0.0.1.nip.io", ""):
                assert (await raw_upgrade(where.port, host)).startswith(b"HTTP/1.1 421"), host
            assert app.connections == 0
            for host in (f"127.0.0.1:{where.port}", "localhost", f"[::1]:{where.port}"):
                assert (await raw_upgrade(where.port, host)).startswith(b"HTTP/1.1 101"), host

    run(main)


@pytest.mark.parametrize("kind", ["text", "binary"])
def test_oversized_websocket_frame_closes_1009_before_the_agent(engine: ModuleType, kind: str) -> None:
    """A frame over ``max_body`` (but within what the ASGI server itself would take) closes
    the socket with 1009 and never reaches the agent; one at the limit is delivered."""

    async def main() -> None:
        agents = RawAgents()
        async with served(AcpApp(agents, policy=ServerPolicy(max_body=4096), engine=engine)) as where:
            async with websockets.connect(where.ws_url) as ws:
                agent = await agents.agents.get()
                fits = json.dumps({"jsonrpc": "2.0", "method": "fits", "params": {"x": "a" * 3000}})
                await ws.send(fits)
                await agent.until(lambda line: b'"fits"' in line)
                big = json.dumps({"jsonrpc": "2.0", "method": "big", "params": {"x": "a" * 5000}})
                await ws.send(big if kind == "text" else big.encode())
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), 10)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
            await asyncio.sleep(0.2)
            assert not any(b'"big"' in line for line in agent.lines)

    run(main)


# ---------------------------------------------------------------------------------------
# backpressure to the agent, idle reaping
# ---------------------------------------------------------------------------------------


def test_post_held_while_the_agent_does_not_read() -> None:
    """An agent that stops reading its input: the POST whose body crosses the stream's
    buffer limit is held (no 202) instead of the server buffering without bound; once the
    agent reads again it gets its 202 and the agent every body, in order."""

    async def main() -> None:
        agents = RawAgents()
        async with served(AcpApp(agents)) as where, httpx.AsyncClient(timeout=30) as c:
            url = where.http_url
            r = await c.post(url, json=INIT)
            h = {"acp-connection-id": r.headers["acp-connection-id"]}
            agent = await agents.agents.get()
            agent.stream.pause_reading()
            accepted = 0
            held = None
            for i in range(40):  # 16 KiB each: the memory stream pauses its writer past 64 KiB
                body = {"jsonrpc": "2.0", "method": "_note", "params": {"i": i, "pad": "x" * 16384}}
                post = asyncio.ensure_future(c.post(url, json=body, headers=h))
                done, _ = await asyncio.wait({post}, timeout=0.5)
                if not done:
                    held = post
                    break
                assert post.result().status_code == 202
                accepted += 1
            assert held is not None, "every POST was taken while the agent read nothing"
            assert accepted <= 8, accepted
            agent.stream.resume_reading()
            assert (await asyncio.wait_for(held, 10)).status_code == 202
            await agent.until(lambda line: b'"i":%d,' % accepted in line)
            notes = [json.loads(line)["params"]["i"] for line in agent.lines if b'"_note"' in line]
            assert notes == list(range(accepted + 1))

    run(main)


def test_idle_reaping_closes_the_in_process_agent() -> None:
    """An HTTP connection nobody reads is closed after ``idle_timeout``: it is forgotten
    and its agent's stream ends (not merely dropped from the table)."""

    async def main() -> None:
        agents = RawAgents()
        app = AcpApp(agents, policy=ServerPolicy(idle_timeout=0.4))
        async with served(app) as where, httpx.AsyncClient() as c:
            r = await c.post(where.http_url, json=INIT)
            assert r.status_code == 200
            agent = await agents.agents.get()
            await asyncio.wait_for(agent.eof.wait(), 10)
            assert app.connections == 0
            r = await c.post(where.http_url, json=NEW, headers={"acp-connection-id": r.headers["acp-connection-id"]})
            assert r.status_code == 404

    run(main)


def _gateway_children() -> set[int]:
    return set(gateway_children(os.getpid()))


def test_idle_reaping_ends_the_gateway_child() -> None:
    """The same for ``acp-fast serve -- AGENT``: the reaped connection's child exits."""
    agent = [sys.executable, "-m", "acp_fast.cli.main", "testy"]

    async def main() -> None:
        app = gateway_app(agent, policy=ServerPolicy(idle_timeout=0.4))
        async with served(app) as where, httpx.AsyncClient() as c:
            before = _gateway_children()
            r = await c.post(where.http_url, json=INIT)
            assert r.status_code == 200
            deadline = time.monotonic() + 15
            new: set[int] = set()
            while not new and time.monotonic() < deadline:  # a child being listed can be missed once
                new = _gateway_children() - before
                await asyncio.sleep(0.05)
            assert len(new) == 1, new
            (child,) = new
            while child in _gateway_children() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert child not in _gateway_children(), "the reaped connection's child still runs"
            assert app.connections == 0

    run(main, 40)


# ---------------------------------------------------------------------------------------
# connection ids
# ---------------------------------------------------------------------------------------


def _ids(n: int) -> list[str]:
    async def main() -> list[str]:
        out = []
        async with served(AcpApp(RawAgents())) as where, httpx.AsyncClient() as c:
            for _ in range(n):
                r = await c.post(where.http_url, json=INIT)
                out.append(r.headers["acp-connection-id"])
        return out

    return asyncio.run(asyncio.wait_for(main(), BOUND))


def test_connection_ids_are_unpredictable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids are drawn from :mod:`secrets` (at least 16 bytes), and look it: all distinct, no
    two sharing a 4-character prefix or suffix (a counter or a clock would), the characters
    of 64 ids spread over the URL-safe alphabet with more than 5.5 bits of entropy each
    (hex gives 4, a counter less), and two fresh apps never hand out the same id (a seeded
    generator would)."""
    first, second = _ids(64), _ids(16)
    ids = first + second
    assert len(set(ids)) == len(ids)
    assert all(len(i) >= 32 for i in ids)
    for ends in ([i[:4] for i in first], [i[-4:] for i in first]):
        assert len(set(ends)) == len(ends), ends
    counts = collections.Counter("".join(first))
    total = sum(counts.values())
    entropy = -sum(n / total * math.log2(n / total) for n in counts.values())
    assert entropy > 5.5, entropy
    drawn: list[int] = []
    real = remote_server.secrets.token_urlsafe

    def spy(nbytes: int | None = None) -> str:
        drawn.append(nbytes or 32)
        return real(nbytes)

    monkeypatch.setattr(remote_server.secrets, "token_urlsafe", spy)
    third = _ids(2)
    assert len(drawn) == 2 and min(drawn) >= 16, drawn
    assert not set(third) & set(ids)


# ---------------------------------------------------------------------------------------
# TLS: the hostname is checked on every client path
# ---------------------------------------------------------------------------------------


def _certificate(tmp: Path, san: str) -> tuple[str, str]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "1", "-subj", "/CN=elsewhere.example", "-addext",
                        f"subjectAltName={san}"], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.fail(f"openssl is needed to make a test certificate: {exc!r}")
    return str(cert), str(key)


def test_tls_certificate_for_another_name_is_refused_on_every_client_path(
        tmp_path: Path, engine: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's certificate is trusted (``SSL_CERT_FILE``) but names another host than
    the one dialled: ``wss://``, ``https://`` over HTTP/1.1 and with HTTP/2 allowed each
    refuse it (the certificate is good for ``elsewhere.example`` only, not 127.0.0.1)."""
    cert, key = _certificate(tmp_path, "DNS:elsewhere.example")
    monkeypatch.setenv("SSL_CERT_FILE", cert)

    async def main() -> None:
        app = asgi_app(build((1,)), engine=engine)
        async with served(app, certfile=cert, keyfile=key) as where:
            with pytest.raises(RemoteConnectError) as refused:
                await connect_url(where.ws_url)
            assert "match" in str(refused.value) or "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
            for http2 in (False, True):
                async with Client.builder().connect(connect_url(where.http_url, http2=http2), engine=engine) as cx:
                    with pytest.raises(JsonRpcError) as failed:
                        await cx.initialize()
                    assert "CERTIFICATE_VERIFY_FAILED" in str(failed.value.message), failed.value
            assert app.connections == 0

    run(main)


# ---------------------------------------------------------------------------------------
# $/ methods over the network
# ---------------------------------------------------------------------------------------


class _Sse:
    def __init__(self, c: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        self.messages: list[Any] = []
        self.task = asyncio.ensure_future(self._read(c, url, {**headers, "accept": "text/event-stream"}))

    async def _read(self, c: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        parser = SseParser()
        try:
            async with c.stream("GET", url, headers=headers) as resp:
                async for chunk in resp.aiter_bytes():
                    for data in parser.feed(chunk):
                        value = json.loads(data)
                        self.messages.extend(value if isinstance(value, list) else [value])
        except httpx.TransportError:  # the server stopped at the end of the test
            pass

    async def until(self, pred: Callable[[Any], bool]) -> Any:
        while True:
            for m in self.messages:
                if pred(m):
                    return m
            if self.task.done():
                self.task.result()
                raise AssertionError("the stream ended")
            await asyncio.sleep(0.01)


def _is_update(m: Any) -> bool:
    return m.get("method") == "session/update"


def test_cancel_request_over_http_whatever_its_session(engine: ModuleType) -> None:
    """``$/cancel_request`` for an endless prompt, POSTed with the session header and a
    ``sessionId`` of its own that differs (connection-scoped: no 400): the prompt ends
    -32800, answered once; the connection works on."""

    async def main() -> None:
        async with served(asgi_app(build((1,)), engine=engine)) as where, httpx.AsyncClient() as c:
            url = where.http_url
            r = await c.post(url, json=INIT)
            h = {"acp-connection-id": r.headers["acp-connection-id"]}
            conn = _Sse(c, url, h)
            await c.post(url, json=NEW, headers=h)
            sid = (await conn.until(lambda m: m.get("id") == 1))["result"]["sessionId"]
            hs = {**h, "acp-session-id": sid}
            session = _Sse(c, url, hs)
            assert (await c.post(url, json=prompt(2, sid, ENDLESS), headers=hs)).status_code == 202
            await session.until(_is_update)
            cancel = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 2, "sessionId": "x"}}
            assert (await c.post(url, json=cancel, headers=hs)).status_code == 202
            answer = await session.until(lambda m: m.get("id") == 2)
            assert answer["error"]["code"] == -32800, answer
            await asyncio.sleep(0.3)
            assert [m for m in conn.messages + session.messages if m.get("id") == 2] == [answer]
            await c.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "_test/echo", "params": {}}, headers=h)
            assert (await conn.until(lambda m: m.get("id") == 3))["result"] == {}

    run(main)


def test_cancel_request_over_websocket(engine: ModuleType) -> None:
    async def main() -> None:
        async with served(asgi_app(build((1,)), engine=engine)) as where:
            async with websockets.connect(where.ws_url) as ws:
                await ws.send(json.dumps(INIT))
                await ws.recv()
                await ws.send(json.dumps(NEW))
                sid = json.loads(await ws.recv())["result"]["sessionId"]
                await ws.send(json.dumps(prompt(2, sid, ENDLESS)))
                assert _is_update(json.loads(await ws.recv()))
                await ws.send(json.dumps({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 2}}))
                while True:
                    m = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    if m.get("id") == 2:
                        break
                assert m["error"]["code"] == -32800, m

    run(main)


def test_dollar_methods_reach_the_agent_without_the_session_header(engine: ModuleType) -> None:
    """The bytes the agent gets for a ``$/`` notification POSTed with a session header are
    the bytes POSTed: nothing filled in; a session method POSTed alike gets the header's
    session filled in (the rule the exemption is an exception to)."""

    async def main() -> None:
        agents = RawAgents()
        async with served(AcpApp(agents, engine=engine)) as where, httpx.AsyncClient() as c:
            r = await c.post(where.http_url, json=INIT)
            h = {"acp-connection-id": r.headers["acp-connection-id"], "acp-session-id": "s1",
                 "content-type": "application/json"}
            agent = await agents.agents.get()
            body = b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":7}}'
            assert (await c.post(where.http_url, content=body, headers=h)).status_code == 202
            assert await agent.until(lambda line: b"$/cancel_request" in line) == body
            body = b'{"jsonrpc":"2.0","method":"session/cancel","params":{}}'
            assert (await c.post(where.http_url, content=body, headers=h)).status_code == 202
            line = await agent.until(lambda line: b"session/cancel" in line)
            assert json.loads(line)["params"] == {"sessionId": "s1"}

    run(main)


# ---------------------------------------------------------------------------------------
# the token compare
# ---------------------------------------------------------------------------------------


def test_token_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bearer token is compared with ``hmac.compare_digest`` (timing cannot show it),
    for a right and a wrong token alike."""
    calls: list[tuple[bytes, bytes]] = []
    real = remote_server.hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(remote_server.hmac, "compare_digest", spy)
    policy = ServerPolicy(token="s3cret")
    host = {b"host": b"127.0.0.1"}
    assert policy.refusal({**host, b"authorization": b"Bearer s3cret"}) is None
    assert policy.refusal({**host, b"authorization": b"Bearer s3creT"}) == (401, "missing or wrong bearer token")
    assert policy.refusal(host) == (401, "missing or wrong bearer token")
    assert calls == [(b"Bearer s3cret", b"Bearer s3cret"), (b"Bearer s3creT", b"Bearer s3cret"),
                     (b"", b"Bearer s3cret")]
