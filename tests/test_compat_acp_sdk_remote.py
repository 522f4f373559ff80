"""The official Python SDK's remote agents on acp_fast's server: ``create_asgi_app``.

The SDK test agent of ``peers/pysdk/agent.py`` (its remote server's numbering variant), served by
``acp_fast.compat.acp_sdk.create_asgi_app`` (the SDK's own call, the drop-in's module):

* the SDK's own remote clients (``peers/pysdk/remote_client.py``: ``acp.http.create_http_stream``
  and ``acp.ws.create_websocket_stream``) run their whole suite against it (streaming in
  order, a permission request mid-prompt, ``session/cancel``);
* the remote layer's security cases hold for it: a forged ``Host`` (421), a foreign
  ``Origin`` on a POST and on the upgrade (403), a body over the limit (413), hostile bytes
  (400 with the engine's JSON-RPC error, the server still serving), SSE resumption with
  ``Last-Event-ID`` (what was missed, once; 409 outside the window).

Needs the pinned SDK with its HTTP extra (peer rule: a skip here, a failure under CI).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from collections.abc import Awaitable
from typing import Any

import httpx
import pytest
import websockets

from peer_rule import require_pysdk
import remote_peers
from remote_peers import PEERS
from remote_clients_support import ServedThread, pysdk_client, run_peers

from acp_fast.remote import ServerPolicy, served

HANG_GUARD = 30.0
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}
N = 300


@pytest.fixture(scope="module")
def sdk() -> None:
    require_pysdk()


def _numbering_agent() -> Any:
    """``peers/pysdk/remote_server.py``'s ``RemoteAgent``: the test agent whose chunks carry
    their index (``--number``), so the SDK client can check their order."""
    spec = importlib.util.spec_from_file_location("pysdk_remote_server", PEERS / "pysdk" / "remote_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.RemoteAgent.number = True
    return module.RemoteAgent


def _app(**policy: Any) -> Any:
    from acp_fast.compat.acp_sdk import create_asgi_app

    agent = _numbering_agent()
    return create_asgi_app(lambda conn: agent(), policy=ServerPolicy(**policy))


def run(coro: Awaitable[Any]) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, HANG_GUARD)

    return asyncio.run(guarded())


def test_dropin_is_the_sdk_call_and_lazy() -> None:
    """``create_asgi_app`` takes the SDK's one positional argument and is reached from the
    package without importing the SDK or the remote layer before it is asked for."""
    import subprocess
    import sys

    code = ("import sys, acp_fast.compat.acp_sdk as m; "
            "assert 'acp' not in sys.modules and 'acp_fast.remote.server' not in sys.modules; "
            "f = m.create_asgi_app; import inspect; "
            "p = list(inspect.signature(f).parameters.values()); "
            "assert p[0].name == 'agent_factory' and all(x.kind != x.POSITIONAL_OR_KEYWORD for x in p[1:]); "
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_sdk_clients_run_their_suite_against_the_dropin(sdk: None, scheme: str) -> None:
    """The SDK's HTTP and WebSocket clients, unchanged, against the SDK agent on the drop-in:
    every scenario of their suite passes and the N streamed updates arrive once, in order."""
    with ServedThread([(_app, "uvicorn")]) as servers:
        where = servers.where[0]
        url = where.http_url if scheme == "http" else where.ws_url
        env = {**os.environ, "ACP_CHUNK": "10"}
        result = run_peers({"suite": pysdk_client(url, "suite", str(N))}, env, timeout=90)["suite"]
    assert result.get("ok") is True, result
    stream = result["results"]["stream"]
    assert stream["updatesReceived"] == N and stream["inOrder"] is True, stream
    assert result["results"]["permission"]["permissionOutcome"], result["results"]["permission"]
    assert result["results"]["cancel"]["stopReason"] == "cancelled", result["results"]["cancel"]


async def _events(c: httpx.AsyncClient, url: str, headers: dict[str, str], count: int) -> list[tuple[str, Any]]:
    """The first ``count`` events of an SSE stream: ``(id, message)`` each."""
    out: list[tuple[str, Any]] = []
    ident = ""
    async with c.stream("GET", url, headers={**headers, "accept": "text/event-stream"}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("id:"):
                ident = line[3:].strip()
            elif line.startswith("data:"):
                out.append((ident, json.loads(line[5:])))
                if len(out) == count:
                    break
    return out


def test_security_cases_hold_for_an_sdk_agent(sdk: None) -> None:
    """Host, Origin, the body limit and hostile bytes, on an SDK agent served by the drop-in."""

    async def main() -> None:
        async with served(_app(max_body=512 * 1024)) as where, httpx.AsyncClient(timeout=10) as c:
            url = where.http_url
            forged = await c.post(url, json=INIT, headers={"host": "evil.example"})
            assert forged.status_code == 421
            foreign = await c.post(url, json=INIT, headers={"origin": "https://evil.example"})
            assert foreign.status_code == 403
            with pytest.raises(websockets.InvalidStatus) as info:
                async with websockets.connect(where.ws_url, origin=websockets.Origin("https://evil.example")):
                    pass
            assert info.value.response.status_code == 403
            big = await c.post(url, content=b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"x":"'
                               + b"y" * (512 * 1024) + b'"}}', headers={"content-type": "application/json"})
            assert big.status_code == 413
            hostile = await c.post(url, content=b"[" * 100_000 + b"\n" + b"]" * 100_000,
                                   headers={"content-type": "application/json"})
            assert hostile.status_code == 400
            assert hostile.json()["error"]["code"] in (-32700, -32600)
            ok = await c.post(url, json=INIT)
            assert ok.status_code == 200 and ok.json()["result"]["protocolVersion"] == 1

    run(main())


def test_sse_resumption_for_an_sdk_agent(sdk: None) -> None:
    """Replies on the connection stream carry ``id:`` cursors; a reader back with
    ``Last-Event-ID`` gets what it missed once, and a cursor outside the window gets 409."""

    async def main() -> None:
        async with served(_app()) as where, httpx.AsyncClient(timeout=10) as c:
            url = where.http_url
            r = await c.post(url, json=INIT)
            h = {"acp-connection-id": r.headers["acp-connection-id"]}

            async def new_session(ident: int) -> None:
                req = {"jsonrpc": "2.0", "id": ident, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}}
                assert (await c.post(url, json=req, headers=h)).status_code == 202

            await new_session(1)
            await new_session(2)
            first = await _events(c, url, h, 2)
            assert [m["id"] for _, m in first] == [1, 2]
            await new_session(3)
            again = await _events(c, url, {**h, "last-event-id": first[0][0]}, 2)
            assert [m["id"] for _, m in again] == [2, 3]  # everything after event 1, once
            late = await c.get(url, headers={**h, "accept": "text/event-stream", "last-event-id": "999"})
            assert late.status_code == 409

    run(main())


_ENTRY_POINTS = """
import sys
from acp_fast.compat.acp_sdk import activate
import acp.http.asgi  # imported before the switch: replaced in place
activate.install(sys.argv[1])
from acp.http.asgi import create_asgi_app  # the others are imported after it
from acp.http import create_http_stream
from acp.ws import create_websocket_stream
import acp.http.client, acp.ws.client
found = [f.__module__ for f in (create_asgi_app, create_http_stream, create_websocket_stream)]
assert [acp.http.asgi.create_asgi_app, acp.http.client.create_http_stream,
        acp.ws.client.create_websocket_stream] == [create_asgi_app, create_http_stream, create_websocket_stream]
print(" ".join(found))
"""


@pytest.mark.parametrize(("mode", "expected"), [
    ("connection", ["acp_fast.compat.acp_sdk.remote"] * 3),
    ("transport", ["acp.http.asgi", "acp.http.client", "acp.ws.client"]),
])
def test_connection_dropin_replaces_the_remote_entry_points(sdk: None, mode: str, expected: list[str]) -> None:
    """With the connection drop-in, the SDK's ``create_asgi_app``, ``create_http_stream`` and
    ``create_websocket_stream`` are acp_fast's however they are imported (a module imported
    before the switch, or after it); the transport drop-in leaves them the SDK's."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _ENTRY_POINTS, mode], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == expected, out.stderr


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_sdk_programs_unchanged_on_the_connection_dropin(sdk: None, scheme: str) -> None:
    """The SDK's remote server and client programs, unchanged, run by ``dropin.py connection``:
    the server is acp_fast's (a forged ``Host`` gets 421, which the SDK's app never answers),
    and the client's suite passes through acp_fast's client transports."""
    server = remote_peers.start("pysdk-connection")
    try:
        forged = httpx.post(server.base("http") + "/acp", json=INIT, headers={"host": "evil.example"}, timeout=10)
        assert forged.status_code == 421
        url = server.base(scheme) + "/acp"
        env = {**os.environ, "ACP_CHUNK": "10"}
        argv = [sys.executable, str(PEERS / "pysdk" / "dropin.py"), "connection", *pysdk_client(url, "suite", str(N))[1:]]
        result = run_peers({"suite": argv}, env, timeout=90)["suite"]
    finally:
        server.stop()
    assert result.get("ok") is True, result
    stream = result["results"]["stream"]
    assert stream["updatesReceived"] == N and stream["inOrder"] is True, stream


class _Texts:
    """An SDK client that keeps the text of every ``agent_message_chunk``."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            self.texts.append(update.content.text)


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_client_streams_on_acp_fast_run_an_sdk_client(sdk: None, scheme: str) -> None:
    """``create_http_stream`` / ``create_websocket_stream`` (the SDK's signatures) hand
    ``connect_to_agent`` an unopened transport that the connection drop-in runs on
    acp_fast's remote client: a whole turn, every chunk in order."""
    import acp

    from acp_fast.compat.acp_sdk import fast
    from acp_fast.compat.acp_sdk.remote import create_http_stream, create_websocket_stream

    async def main() -> None:
        async with served(_app()) as where:
            if scheme == "http":
                transport = create_http_stream(where.http_url)
            else:
                transport = await create_websocket_stream(where.ws_url)
            assert transport.unopened
            client = _Texts()
            conn = fast.connect_to_agent(client, transport)  # type: ignore[arg-type]
            assert isinstance(conn._conn, fast.Connection)  # acp_fast's connection, not the SDK's
            init = await conn.initialize(protocol_version=1)
            assert init.protocol_version == 1
            session = await conn.new_session(cwd="/", mcp_servers=[])
            done = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("stream 40 chunks")])
            assert done.stop_reason == "end_turn"
            assert [t.split(":", 1)[0] for t in client.texts] == [str(i) for i in range(40)]
            await conn.close()

    run(main())
