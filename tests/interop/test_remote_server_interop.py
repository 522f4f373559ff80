"""Interop of acp_fast's remote server (``acp_fast.remote``) with the official SDKs'
remote clients, real processes over real sockets.

The server serves Testy (``acp_fast.testy``, v1 and v2) through :func:`asgi_app` on uvicorn
(HTTP/1.1 and WebSocket) and on hypercorn (HTTP/2 without TLS, for the Python SDK's httpx
client with HTTP/2), bound to ``127.0.0.1`` port 0 in a thread of the test process, on each
engine twin. The clients are ``peers/pysdk/remote_client.py`` (Python SDK 0.12.1: Streamable
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
  immediate. The hypercorn server here sends SSE keep-alive comments every second
  (``ServerPolicy.keepalive``) so such a stall costs at most that.
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
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import websockets

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "helpers"))

from interop_support import env
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

#: case -> (sdk, server, transport, protocol): the suite runs
SUITES = {
    "pysdk-http-v1": ("pysdk", "uvicorn", "http", 1),
    "pysdk-ws-v1": ("pysdk", "uvicorn", "ws", 1),
    "pysdk-http2-v1": ("pysdk", "hypercorn", "http", 1),
    "ts-http-v1": ("ts", "uvicorn", "http", 1),
    "ts-http-v2": ("ts", "uvicorn", "http", 2),
    "ts-ws-v1": ("ts", "uvicorn", "ws", 1),
    "ts-ws-v2": ("ts", "uvicorn", "ws", 2),
}
#: case -> (sdk, transport, protocol): the runs against the agent that dies mid-turn
DYING = {
    "pysdk-http-v1": ("pysdk", "http", 1),
    "pysdk-ws-v1": ("pysdk", "ws", 1),
    "ts-http-v1": ("ts", "http", 1),
    "ts-ws-v2": ("ts", "ws", 2),
}


def _peer(sdk: str, request: pytest.FixtureRequest) -> None:
    """Skips or fails (``tests/helpers/peer_rule.py``) when ``sdk``'s client cannot run."""
    request.getfixturevalue("pysdk" if sdk == "pysdk" else "ts_sdk")


def _url(where: Any, transport: str, run: str) -> str:
    """The endpoint, naming the client run for the server's :class:`Recorder`."""
    return str(where.ws_url if transport == "ws" else where.http_url) + f"?case={run}"


class Servers:
    """The three servers of one engine (one thread, see ``ServedThread``), and what each
    received and sent per client run (:class:`Recorder`, by the run's name)."""

    def __init__(self, served: ServedThread, recorders: dict[str, Recorder]) -> None:
        self.testy, self.testy_h2, self.dying = served.where
        self.recorders = recorders

    def seen(self, run: str) -> Recorder:
        """The recorder of the server that ``run`` (``suite:<case>``, ``dies:<case>``) used."""
        if run.startswith("dies:"):
            return self.recorders["dying"]
        return self.recorders["hypercorn" if SUITES[run.split(":", 1)[1]][1] == "hypercorn" else "testy"]


def _recorded(recorders: dict[str, Recorder], name: str, make: Any) -> Any:
    def factory() -> Recorder:
        recorders[name] = Recorder(make())
        return recorders[name]

    return factory


@pytest.fixture(scope="module")
def servers(engine: ModuleType) -> Iterator[Servers]:
    """Testy (v1 and v2) on uvicorn and on hypercorn (HTTP/2, keep-alive every second), and
    the agent that dies mid-turn on uvicorn behind a bearer token; each recorded."""
    recorders: dict[str, Recorder] = {}
    with ServedThread([
        (_recorded(recorders, "testy", lambda: asgi_app(
            testy.build(), policy=ServerPolicy(queue_high=QUEUE_HIGH), engine=engine)), "uvicorn"),
        (_recorded(recorders, "hypercorn", lambda: asgi_app(
            testy.build(), policy=ServerPolicy(queue_high=QUEUE_HIGH, keepalive=1.0), engine=engine)), "hypercorn"),
        (_recorded(recorders, "dying", lambda: asgi_app(
            dying_agent(3), policy=ServerPolicy(token=TOKEN), engine=engine)), "uvicorn"),
    ]) as served:
        yield Servers(served, recorders)


@pytest.fixture(scope="module")
def runs(servers: Servers) -> dict[str, dict[str, Any]]:
    """Every client process of this engine, run once: ``{"suite:<case>": json, "dies:<case>": json}``."""
    have = {"pysdk": pysdk_available(), "ts": ts_available()}
    commands: dict[str, list[str]] = {}
    for case, (sdk, server, transport, protocol) in SUITES.items():
        if not have[sdk]:
            continue
        where = servers.testy_h2 if server == "hypercorn" else servers.testy
        extra = ["--timeout", SCENARIO_TIMEOUT, "--protocol", str(protocol)]
        if sdk == "pysdk":
            extra += ["--h2c"] if server == "hypercorn" else []
            commands[f"suite:{case}"] = pysdk_client(_url(where, transport, f"suite:{case}"), "suite", "1000",
                                                     *extra)
        else:
            commands[f"suite:{case}"] = ts_client(_url(where, transport, f"suite:{case}"), "suite", "1000", *extra)
    for case, (sdk, transport, protocol) in DYING.items():
        if not have[sdk]:
            continue
        make = pysdk_client if sdk == "pysdk" else ts_client
        commands[f"dies:{case}"] = make(_url(servers.dying, transport, f"dies:{case}"), "stream", "1000",
                                        "--token", TOKEN,
                                        "--timeout", SCENARIO_TIMEOUT, "--protocol", str(protocol))
    return run_peers(commands, env(), timeout=PROCESS_TIMEOUT, parallel=4)


def _suite(runs: dict[str, dict[str, Any]], case: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    sdk, _, transport, protocol = SUITES[case]
    _peer(sdk, request)
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
    assert r["ok"], r
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
    assert r["ok"], r
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
    assert r["ok"], r
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
    assert r["ok"], r
    assert cancels == 1 and seen.sent_count(f"suite:{case}", b"-32800") == 1  # our side: in once, answered once
    assert r["cancelSent"] and r["honoured"], r
    assert r["error"]["code"] == -32800  # the prompt request itself ends "request cancelled"
    assert r["echoAfter"]  # and the connection goes on
    if SUITES[case][3] == 2:  # the held prompt's work ends idle, cancelled
        assert r["stopReason"] == "cancelled"


def test_python_sdk_client_over_http2_on_hypercorn(runs: dict[str, dict[str, Any]],
                                                   request: pytest.FixtureRequest) -> None:
    results = _suite(runs, "pysdk-http2-v1", request)
    for name in ("stream", "permission", "cancel"):
        assert results[name]["ok"], results[name]
        assert results[name]["httpVersions"] == ["HTTP/2"], results[name]


# ---------------------------------------------------------------------------------------
# An agent that dies mid-turn
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(DYING))
def test_agent_dying_mid_turn_fails_the_pending_prompt_at_once(runs: dict[str, dict[str, Any]], servers: Servers,
                                                               case: str, request: pytest.FixtureRequest) -> None:
    sdk, transport, protocol = DYING[case]
    _peer(sdk, request)
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


def test_malformed_post_answered_with_jsonrpc_error_and_connection_survives(servers: Servers) -> None:
    url = servers.testy.http_url

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


def test_malformed_websocket_frame_answered_with_jsonrpc_error_and_socket_survives(servers: Servers) -> None:
    url = servers.testy.ws_url

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
