"""Interop of acp_fast's remote server (``acp_fast.remote``) with the official SDKs'
remote clients, real processes over real sockets.

The server serves Testy (``acp_fast.testy``, v1 and v2) through :func:`asgi_app` on each ASGI
server (uvicorn, hypercorn, granian: ``tests/helpers/remote_servers.py``; a case runs as
``<case>@<server>``: all of them on the default server, each SDK on each transport on the
others; the Python SDK's httpx client also with HTTP/2 without TLS on the servers that speak
it), bound to ``127.0.0.1`` port 0 in a thread of the test process, on
each engine twin. The clients are ``peers/pysdk/remote_client.py`` (Python SDK 0.12.1: Streamable
HTTP ``acp.http`` and WebSocket ``acp.ws``, ACP v1 only) and ``peers/ts/remote_client.mjs``
(TS SDK 2.4.0: ``http-stream`` and ``ws-stream``, v1 and v2). Each client process runs the
``suite`` scenario: a 1,000-update streamed prompt (all arrive, in order), a permission
request answered mid-prompt, ``session/cancel`` during a long stream, and ``$/cancel_request``
for the in-flight prompt where the SDK can send it (the TS SDK; the Python SDK has no API for
it and says so). Then an agent that dies mid-turn: every client's pending prompt must fail at
once (those runs also pass a bearer token, which the server requires there). Malformed input,
raw bytes POSTed with httpx and a bad WebSocket text frame sent with ``websockets``, is
answered with a JSON-RPC error and the connection keeps working.

All client processes of one engine run once, a few at a time, in a module fixture; the tests
then read their JSON lines. Each scenario is bounded inside the client (``--timeout``) and
each process by a timeout (killed when it runs over).

Notes on the peers (what they do, not what the server does):

* The Python SDK's HTTP client over HTTP/2 (httpx/httpcore with h2) sometimes leaves an SSE
  event that has reached its socket unread until the next bytes arrive on the connection;
  seen with the SDK's own ASGI app on hypercorn too, and with strace the server's write is
  immediate. The servers that speak HTTP/2 send SSE keep-alive comments every second here
  (``ServerPolicy.keepalive``) so such a stall costs at most that.
* The TS SDK's HTTP client (Node's ``fetch``) against hypercorn over HTTP/1.1 fails a
  request now and then with ``fetch failed`` (3 of 16 runs of the suite, at the start of a
  scenario; never on uvicorn or granian in as many runs): that case is left out on hypercorn
  (``LEFT_OUT``), which the Python SDK's HTTP/1.1 and HTTP/2 cases still cover.
* Over WebSocket on granian 2.8, a scenario of either SDK times out now and then when the
  machine is loaded (both SDKs, both twins: in 3 runs of this module at load ~9 on 2 cores,
  a 1,000-update stream and a ``session/cancel`` each once got no result within 15 s, with
  ~2,400 updates received); never on uvicorn or hypercorn in the same runs. Not yet
  explained; the WebSocket cases are left out on granian (``LEFT_OUT``), whose WebSocket
  path ``tests/test_remote_server.py`` and the malformed-frame case below still cover.
* The servers of one engine share one thread: the compiled engine decodes lazy payloads with
  one module-level parser that only the GIL guards, and a decode that triggers a garbage
  collection whose finalizers run Python code can hand the GIL to another thread in the
  middle of it (seen here as ``ValueError: invalid JSON in a validated span`` when three
  server threads ran at once).
* The server's queues are kept small here (``queue_high``) so that a cancelled stream ends
  after a few hundred queued updates instead of about a megabyte of them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import websockets

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "helpers"))

from interop_support import env
from remote_servers import DEFAULT_SERVER, HTTP2_SERVERS, SERVERS, require_server
from remote_clients_support import (
    Recorder,
    ServedThread,
    dying_agent,
    pysdk_available,
    pysdk_client,
    run_peers,
    ts_available,
    ts_client,
)

from acp_fast import testy
from acp_fast.remote import ServerPolicy, asgi_app

TOKEN = "interop-secret"
#: seconds a client allows each scenario (a hang becomes a failure record, not a stuck test)
SCENARIO_TIMEOUT = "15"
#: seconds before a client process is killed
PROCESS_TIMEOUT = 70.0
#: bytes of agent output the server queues per connection before pausing the agent
QUEUE_HIGH = 64 * 1024
#: a prompt of the dying agent must fail within this many seconds
DIES_WITHIN = 5.0

#: case -> (sdk, transport, protocol, HTTP/2 without TLS): the suite runs, on every server
#: (the HTTP/2 case on the servers that speak it)
SUITE_CASES = {
    "pysdk-http-v1": ("pysdk", "http", 1, False),
    "pysdk-ws-v1": ("pysdk", "ws", 1, False),
    "pysdk-http2-v1": ("pysdk", "http", 1, True),
    "ts-http-v1": ("ts", "http", 1, False),
    "ts-http-v2": ("ts", "http", 2, False),
    "ts-ws-v1": ("ts", "ws", 1, False),
    "ts-ws-v2": ("ts", "ws", 2, False),
}
#: case -> (sdk, transport, protocol): the runs against the agent that dies mid-turn
DYING_CASES = {
    "pysdk-http-v1": ("pysdk", "http", 1),
    "pysdk-ws-v1": ("pysdk", "ws", 1),
    "ts-http-v1": ("ts", "http", 1),
    "ts-ws-v2": ("ts", "ws", 2),
}
#: The cases every other server runs besides the default one, which runs them all: each SDK on
#: each transport once (the protocol version is the agent's business, not the server's). The
#: whole set on every server took 112 s instead of 30 s for this module; this one ~60 s.
OTHER_SERVERS_RUN = frozenset({"pysdk-http-v1", "pysdk-ws-v1", "pysdk-http2-v1", "ts-http-v2", "ts-ws-v2"})
#: (case, server) pairs left out, with the reason (see the notes in the module's text).
LEFT_OUT = {
    ("ts-http-v2", "hypercorn"): "the TS SDK's fetch fails now and then against hypercorn's HTTP/1.1",
    ("pysdk-ws-v1", "granian"): "a WebSocket scenario on granian times out now and then under load",
    ("ts-ws-v2", "granian"): "a WebSocket scenario on granian times out now and then under load",
}


def _cases(server: str, cases: dict[str, Any]) -> list[str]:
    return [case for case, spec in cases.items()
            if (server == DEFAULT_SERVER or case in OTHER_SERVERS_RUN) and (case, server) not in LEFT_OUT
            and not (len(spec) == 4 and spec[3] and server not in HTTP2_SERVERS)]


#: ``<case>@<server>`` -> (sdk, server, transport, protocol, h2c)
SUITES = {f"{case}@{server}": (SUITE_CASES[case][0], server, *SUITE_CASES[case][1:])
          for server in SERVERS for case in _cases(server, SUITE_CASES)}
#: ``<case>@<server>`` -> (sdk, server, transport, protocol): the runs against the agent that dies mid-turn
DYING = {f"{case}@{server}": (DYING_CASES[case][0], server, *DYING_CASES[case][1:])
         for server in SERVERS for case in _cases(server, DYING_CASES)}


def _peer(sdk: str, request: pytest.FixtureRequest) -> None:
    """Skips or fails (``tests/helpers/peer_rule.py``) when ``sdk``'s client cannot run."""
    request.getfixturevalue("pysdk" if sdk == "pysdk" else "ts_sdk")


def _url(where: Any, transport: str, run: str) -> str:
    """The endpoint, naming the client run for the server's :class:`Recorder`."""
    return str(where.ws_url if transport == "ws" else where.http_url) + f"?case={run}"


class Servers:
    """Testy and the dying agent on each installed ASGI server of one engine (one thread, see
    ``ServedThread``): ``testy[server]``, ``dying[server]``; and what each received and sent
    per client run (:class:`Recorder`, by the run's name)."""

    def __init__(self, names: list[str], served: ServedThread, recorders: dict[tuple[str, str], Recorder]) -> None:
        self.testy = dict(zip(names, served.where[0::2]))
        self.dying = dict(zip(names, served.where[1::2]))
        self.recorders = recorders

    def seen(self, run: str) -> Recorder:
        """The recorder of the server that ``run`` (``suite:<case>``, ``dies:<case>``) used."""
        kind, case = run.split(":", 1)
        if kind == "dies":
            return self.recorders["dying", DYING[case][1]]
        return self.recorders["testy", SUITES[case][1]]


def _recorded(recorders: dict[tuple[str, str], Recorder], key: tuple[str, str],
              make: Callable[[], Any]) -> Callable[[], Recorder]:
    def factory() -> Recorder:
        recorders[key] = Recorder(make())
        return recorders[key]

    return factory


@pytest.fixture(scope="module")
def servers(engine: ModuleType) -> Iterator[Servers]:
    """On each installed ASGI server: Testy (v1 and v2; keep-alive every second where HTTP/2
    is spoken) and the agent that dies mid-turn behind a bearer token. (A server that is not
    installed: its tests go through the peer rule, see :func:`_on`.)"""
    names = [s for s in SERVERS if importlib.util.find_spec(s) is not None]
    recorders: dict[tuple[str, str], Recorder] = {}
    apps: list[tuple[Callable[[], Any], str]] = []
    for name in names:
        keepalive = 1.0 if name in HTTP2_SERVERS else ServerPolicy().keepalive
        apps.append((_recorded(recorders, ("testy", name), lambda k=keepalive: asgi_app(
            testy.build(), policy=ServerPolicy(queue_high=QUEUE_HIGH, keepalive=k), engine=engine)), name))
        apps.append((_recorded(recorders, ("dying", name), lambda: asgi_app(
            dying_agent(3), policy=ServerPolicy(token=TOKEN), engine=engine)), name))
    with ServedThread(apps) as served:
        yield Servers(names, served, recorders)


def _on(server: str) -> str:
    """``server``, or the peer rule when it is not installed."""
    return require_server(server)


@pytest.fixture(scope="module")
def runs(servers: Servers) -> dict[str, dict[str, Any]]:
    """Every client process of this engine, run once: ``{"suite:<case>": json, "dies:<case>": json}``."""
    have = {"pysdk": pysdk_available(), "ts": ts_available()}
    commands: dict[str, list[str]] = {}
    for case, (sdk, server, transport, protocol, h2c) in SUITES.items():
        if not have[sdk] or server not in servers.testy:
            continue
        where = servers.testy[server]
        extra = ["--timeout", SCENARIO_TIMEOUT, "--protocol", str(protocol)]
        if sdk == "pysdk":
            extra += ["--h2c"] if h2c else []
            commands[f"suite:{case}"] = pysdk_client(_url(where, transport, f"suite:{case}"), "suite", "1000",
                                                     *extra)
        else:
            commands[f"suite:{case}"] = ts_client(_url(where, transport, f"suite:{case}"), "suite", "1000", *extra)
    for case, (sdk, server, transport, protocol) in DYING.items():
        if not have[sdk] or server not in servers.dying:
            continue
        make = pysdk_client if sdk == "pysdk" else ts_client
        commands[f"dies:{case}"] = make(_url(servers.dying[server], transport, f"dies:{case}"), "stream", "1000",
                                        "--token", TOKEN,
                                        "--timeout", SCENARIO_TIMEOUT, "--protocol", str(protocol))
    return run_peers(commands, env(), timeout=PROCESS_TIMEOUT, parallel=4)


def _suite(runs: dict[str, dict[str, Any]], case: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    sdk, server, transport, protocol, _ = SUITES[case]
    _peer(sdk, request)
    _on(server)
    out = runs[f"suite:{case}"]
    assert "peerFailed" not in out, out
    assert out["transport"] == transport and out["protocol"] == protocol
    return out["results"]  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------
# The SDK clients' suite against Testy
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(SUITES))
def test_stream_of_1000_updates_arrives_in_order(runs: dict[str, dict[str, Any]], servers: Servers, case: str,
                                                  request: pytest.FixtureRequest) -> None:
    r = _suite(runs, case, request)["stream"]
    assert r["ok"], json.dumps(r)
    seen = servers.seen(f"suite:{case}")  # our side: the prompts came in, the updates went out
    assert seen.methods(f"suite:{case}")[:3] == ["initialize", "session/new", "session/prompt"]
    assert seen.sent_count(f"suite:{case}", b'"session/update"') >= 1000
    assert seen.sent_count(f"suite:{case}", b'"end_turn"') >= 2  # this turn's and the permission one's
    assert r["protocolVersion"] == SUITES[case][3] and r["agentName"] == "test-agent"
    assert r["updatesReceived"] == 1000 and r["inOrder"], r
    assert r["stopReason"] == "end_turn"
    if SUITES[case][0] == "pysdk":
        # The Python SDK's prompt() returns once the response arrived and every update read
        # before it was handled: no update of the turn may come after its response. (The TS
        # SDK may run notification handlers after it resolved a later response; its v2 turn
        # ends with the idle update, counted above.)
        assert r["updatesAtResponse"] == 1000, r


@pytest.mark.parametrize("case", list(SUITES))
def test_permission_request_answered_mid_prompt(runs: dict[str, dict[str, Any]], servers: Servers, case: str,
                                                request: pytest.FixtureRequest) -> None:
    r = _suite(runs, case, request)["permission"]
    assert r["ok"], json.dumps(r)
    seen = servers.seen(f"suite:{case}")  # our side: one request out, its answer in
    assert seen.sent_count(f"suite:{case}", b'"session/request_permission"') == 1
    answers = [b for b in seen.received[f"suite:{case}"] if b'"outcome"' in b and b'"method"' not in b]
    assert len(answers) == 1 and b'"allow"' in answers[0], answers
    assert r["permissionRequests"] == 1 and r["permissionOutcome"] == "allow", r
    assert r["stopReason"] == "end_turn"


@pytest.mark.parametrize("case", list(SUITES))
def test_session_cancel_ends_the_turn_cancelled(runs: dict[str, dict[str, Any]], servers: Servers, case: str,
                                                request: pytest.FixtureRequest) -> None:
    r = _suite(runs, case, request)["cancel"]
    assert r["ok"], json.dumps(r)
    seen = servers.seen(f"suite:{case}")  # our side: the cancel came in, a cancelled turn went out
    assert "session/cancel" in seen.methods(f"suite:{case}")
    assert seen.sent_count(f"suite:{case}", b'"cancelled"') >= 1
    assert r["cancelSent"] and r["stopReason"] == "cancelled", r


@pytest.mark.parametrize("case", list(SUITES))
def test_cancel_request_for_the_inflight_prompt(runs: dict[str, dict[str, Any]], servers: Servers, case: str,
                                                request: pytest.FixtureRequest) -> None:
    r = _suite(runs, case, request)["rpc-cancel"]
    seen = servers.seen(f"suite:{case}")
    cancels = seen.methods(f"suite:{case}").count("$/cancel_request")
    if SUITES[case][0] == "pysdk":
        # the Python SDK 0.12.1 has no way to send $/cancel_request: the client says so
        assert r["supported"] is False and "cancel_request" in r["reason"]
        assert cancels == 0
        return
    assert r["ok"], json.dumps(r)
    assert cancels == 1 and seen.sent_count(f"suite:{case}", b"-32800") == 1  # our side: in once, answered once
    assert r["cancelSent"] and r["honoured"], r
    assert r["error"]["code"] == -32800  # the prompt request itself ends "request cancelled"
    assert r["echoAfter"]  # and the connection goes on
    if SUITES[case][3] == 2:  # the held prompt's work ends idle, cancelled
        assert r["stopReason"] == "cancelled"


@pytest.mark.parametrize("server", HTTP2_SERVERS)
def test_python_sdk_client_over_http2(runs: dict[str, dict[str, Any]], server: str,
                                      request: pytest.FixtureRequest) -> None:
    results = _suite(runs, f"pysdk-http2-v1@{server}", request)
    for name in ("stream", "permission", "cancel"):
        assert results[name]["ok"], results[name]
        assert results[name]["httpVersions"] == ["HTTP/2"], results[name]


# ---------------------------------------------------------------------------------------
# An agent that dies mid-turn
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(DYING))
def test_agent_dying_mid_turn_fails_the_pending_prompt_at_once(runs: dict[str, dict[str, Any]], servers: Servers,
                                                               case: str, request: pytest.FixtureRequest) -> None:
    sdk, server, transport, protocol = DYING[case]
    _peer(sdk, request)
    _on(server)
    r = runs[f"dies:{case}"]
    assert "peerFailed" not in r, r
    # our side: the prompt in, at most the agent's 3 updates out (a session stream opened after
    # the agent died gets none), then the end: the socket closed 1011, the SSE streams ended
    seen = servers.seen(f"dies:{case}")
    assert "session/prompt" in seen.methods(f"dies:{case}")
    assert seen.sent_count(f"dies:{case}", b'"session/update"') <= 3
    if transport == "ws":
        assert seen.sent_count(f"dies:{case}", b"websocket.close 1011") == 1
    else:
        assert seen.sent_count(f"dies:{case}", b"sse.end") >= 1
    assert r["protocolVersion"] == protocol and r["agentName"] == "dying-agent", r  # the token was accepted
    assert not r["ok"] and r["phase"] == "prompt", r
    assert "timeout" not in r["error"].get("type", "") + r["error"]["message"], r
    assert r["seconds"] < DIES_WITHIN, r


# ---------------------------------------------------------------------------------------
# Malformed input, with raw clients
# ---------------------------------------------------------------------------------------

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}
JSON_HEADERS = {"Content-Type": "application/json"}


async def _sse_message(lines: Any) -> dict[str, Any]:
    """The next ``data:`` message of an SSE line iterator."""
    async for line in lines:
        if line.startswith("data:"):
            return json.loads(line[5:])  # type: ignore[no-any-return]
    raise AssertionError("the SSE stream ended")


@pytest.mark.parametrize("server", SERVERS)
def test_malformed_post_answered_with_jsonrpc_error_and_connection_survives(servers: Servers, server: str) -> None:
    url = servers.testy[_on(server)].http_url

    async def body() -> None:
        async with httpx.AsyncClient(timeout=20.0) as client:
            r = await client.post(url, json=INIT, headers=JSON_HEADERS)
            assert r.status_code == 200 and r.json()["result"]["protocolVersion"] == 1
            named = {**JSON_HEADERS, "Acp-Connection-Id": r.headers["acp-connection-id"]}
            async with client.stream("GET", url, headers={**named, "Accept": "text/event-stream"}) as sse:
                assert sse.status_code == 200
                lines = sse.aiter_lines()
                for raw, code in ((b'{"jsonrpc":"2.0","id":7,"method":', -32700), (b"\xff\xfe not json", -32700),
                                  (b'{"jsonrpc":"2.0","result":', -32700), (b'{"hello":"world"}', -32600),
                                  (b"42", -32600)):
                    bad = await client.post(url, content=raw, headers=named)
                    assert bad.status_code == 400, (raw, bad.status_code, bad.text)
                    err = bad.json()
                    assert err["jsonrpc"] == "2.0" and err["id"] is None and err["error"]["code"] == code, (raw, err)
                    ok = await client.post(url, json={"jsonrpc": "2.0", "id": 8, "method": "_test/echo",
                                                      "params": {"after": raw.decode("latin-1")}}, headers=named)
                    assert ok.status_code == 202
                    reply = await asyncio.wait_for(_sse_message(lines), 10)
                    assert reply == {"jsonrpc": "2.0", "id": 8, "result": {"after": raw.decode("latin-1")}}

    asyncio.run(asyncio.wait_for(body(), 60))


@pytest.mark.parametrize("server", SERVERS)
def test_malformed_websocket_frame_answered_with_jsonrpc_error_and_socket_survives(servers: Servers,
                                                                                    server: str) -> None:
    url = servers.testy[_on(server)].ws_url

    async def body() -> None:
        async with websockets.connect(url, open_timeout=10) as ws:
            await ws.send(json.dumps(INIT))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["result"]["protocolVersion"] == 1
            for raw, code in (('{"jsonrpc":"2.0","id":7,"method":', -32700), ("not json at all", -32700),
                              ('{"hello":"world"}', -32600)):
                await ws.send(raw)
                err = json.loads(await asyncio.wait_for(ws.recv(), 10))
                assert err["id"] is None and err["error"]["code"] == code, (raw, err)
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": 8, "method": "_test/echo", "params": {"after": raw}}))
                reply = json.loads(await asyncio.wait_for(ws.recv(), 10))
                assert reply == {"jsonrpc": "2.0", "id": 8, "result": {"after": raw}}

    asyncio.run(asyncio.wait_for(body(), 60))
