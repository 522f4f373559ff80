"""OpenTelemetry traces (`acp_fast.tracing`): spans captured with the SDK's in-memory exporter.

Every engine behaviour runs on both twins through the ``engine`` fixture. The spans go to a
tracer of a provider of each test's own (never the global provider: the official SDK's
spans, whose tracer follows the global provider, stay no-ops in the rest of the suite).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from acp_fast import tracing
from acp_fast.conductor import Conductor
from acp_fast.errors import JsonRpcError
from acp_fast.roles import Agent, Client, Proxy
from acp_fast.transport import memory_pair
from peer_rule import require_module
from roles_support import RawPeer, run, serve_in_memory

SID = "s-1"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
GOOD = f"00-{TRACE}-{PARENT}-01"


@pytest.fixture
def spans() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    """A tracer of a provider of this test's own, and the exporter its spans end in."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def agent(tracer: Any = None, record: list[Any] | None = None, ask: bool = False) -> Any:
    """A v1 agent: a session, a prompt that streams two chunks (and, if `ask`, asks the client's
    permission first); `record` gets every params object a handler sees."""
    seen = record if record is not None else []

    def new(params: Any, cx: Any) -> Any:
        seen.append(params)
        return {"sessionId": SID}

    async def prompt(params: Any, cx: Any) -> Any:
        seen.append(params)
        if ask:
            await cx.connection.send_request("session/request_permission", {
                "sessionId": SID, "toolCall": {"toolCallId": "t1"},
                "options": [{"optionId": "ok", "name": "OK", "kind": "allow_once"}]})
        for text in ("a", "b"):
            cx.send_session_update(SID, {"sessionUpdate": "agent_message_chunk",
                                         "content": {"type": "text", "text": text}})
        return {"stopReason": "end_turn"}

    def fail(params: Any, cx: Any) -> Any:
        raise JsonRpcError(-32002, "no such thing")

    built = (Agent.builder().on_request("session/new", new).on_request("session/prompt", prompt)
             .on_request("_test/fail", fail))
    return built if tracer is None else built.with_tracing(tracer)


def client(tracer: Any = None, notifications: bool = False) -> Any:
    built = Client.builder().on_request(
        "session/request_permission", lambda p, cx: {"outcome": {"outcome": "selected", "optionId": "ok"}})
    built.on_session_update(lambda update, cx: None)
    return built if tracer is None else built.with_tracing(tracer, notifications=notifications)


async def session_and_prompt(conn: Any) -> None:
    await conn.initialize()
    await conn.send_request("session/new", {"cwd": "/tmp", "mcpServers": []})
    result = await conn.send_request("session/prompt", {"sessionId": SID, "prompt": [{"type": "text", "text": "hi"}]})
    assert result == {"stopReason": "end_turn"}


def named(finished: Any, name: str, kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name and s.kind == kind]


def one(finished: Any, name: str, kind: SpanKind) -> ReadableSpan:
    found = named(finished, name, kind)
    assert len(found) == 1, [(s.name, s.kind) for s in finished]
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_a_trace_started_in_the_client_continues_in_the_agent(engine: ModuleType, spans: Any) -> None:
    tracer, exporter = spans

    async def body() -> None:
        stream = serve_in_memory(agent(tracer, ask=True), engine)
        async with client(tracer).connect(stream, engine=engine) as conn:
            await session_and_prompt(conn)
            await asyncio.sleep(0.05)

    run(body)
    finished = exporter.get_finished_spans()
    for method in ("initialize", "session/new", "session/prompt"):
        sent = one(finished, method, SpanKind.CLIENT)
        received = one(finished, method, SpanKind.SERVER)
        assert received.context.trace_id == sent.context.trace_id
        assert parent_of(received) == sent.context.span_id
        assert received.parent is not None and received.parent.is_remote
        assert sent.attributes is not None and received.attributes is not None
        for attrs in (sent.attributes, received.attributes):
            assert attrs["rpc.system"] == "jsonrpc" and attrs["rpc.method"] == method
        assert received.attributes["rpc.jsonrpc.request_id"] == sent.attributes["rpc.jsonrpc.request_id"]
    # the prompt turn: the agent's span of the received prompt, until its answer
    turn = one(finished, "session/prompt", SpanKind.SERVER)
    assert turn.attributes is not None and turn.attributes["acp.prompt_turn"] is True
    assert turn.attributes["acp.session.id"] == SID and turn.attributes["acp.stop_reason"] == "end_turn"
    prompt_out = one(finished, "session/prompt", SpanKind.CLIENT)
    assert prompt_out.attributes is not None and prompt_out.attributes["acp.stop_reason"] == "end_turn"
    assert "acp.prompt_turn" not in prompt_out.attributes
    # the other way: the agent's permission request, inside the turn, continues in the client
    asked = one(finished, "session/request_permission", SpanKind.CLIENT)
    answered = one(finished, "session/request_permission", SpanKind.SERVER)
    assert parent_of(asked) == turn.context.span_id
    assert parent_of(answered) == asked.context.span_id
    assert len({s.context.trace_id for s in finished if s.name != "initialize" and s.name != "session/new"}) == 1
    # no span per notification by default (two session/update chunks were streamed)
    assert not [s for s in finished if s.name == "session/update"]


def test_notification_spans_only_when_asked(engine: ModuleType, spans: Any) -> None:
    tracer, exporter = spans

    async def body() -> None:
        stream = serve_in_memory(agent(tracer), engine)
        async with client(tracer, notifications=True).connect(stream, engine=engine) as conn:
            await session_and_prompt(conn)
            await asyncio.sleep(0.05)

    run(body)
    updates = named(exporter.get_finished_spans(), "session/update", SpanKind.CONSUMER)
    assert len(updates) == 2
    assert all(s.attributes is not None and s.attributes["acp.session.id"] == SID for s in updates)


def test_an_error_answer_is_recorded_on_both_spans(engine: ModuleType, spans: Any) -> None:
    tracer, exporter = spans

    async def body() -> None:
        stream = serve_in_memory(agent(tracer), engine)
        async with client(tracer).connect(stream, engine=engine) as conn:
            await conn.initialize()
            with pytest.raises(JsonRpcError):
                await conn.send_request("_test/fail", {"x": 1})
            with pytest.raises(JsonRpcError):
                await conn.send_request("_test/absent", {})

    run(body)
    finished = exporter.get_finished_spans()
    for kind in (SpanKind.CLIENT, SpanKind.SERVER):
        failed = one(finished, "_test/fail", kind)
        assert failed.status.status_code is StatusCode.ERROR
        assert failed.attributes is not None and failed.attributes["rpc.jsonrpc.error_code"] == -32002
        absent = one(finished, "_test/absent", kind)
        assert absent.attributes is not None and absent.attributes["rpc.jsonrpc.error_code"] == -32601


def test_tracing_off_leaves_meta_untouched_and_opens_no_span(engine: ModuleType, spans: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    tracer, exporter = spans
    monkeypatch.setattr(tracing, "_ENV", [None])  # as without ACP_FAST_OTEL
    seen: list[Any] = []

    async def body() -> None:
        stream = serve_in_memory(agent(None, seen), engine)
        async with client(None).connect(stream, engine=engine) as conn:
            assert type(conn.raw) is not tracing.TracedConnection
            await session_and_prompt(conn)
            await conn.send_request("session/new", {"cwd": "/tmp", "mcpServers": [], "_meta": {"k": 1}})

    run(body)
    assert seen[0] == {"cwd": "/tmp", "mcpServers": []}
    assert "_meta" not in seen[1]
    assert seen[2]["_meta"] == {"k": 1}
    assert exporter.get_finished_spans() == ()


def test_the_environment_variable_turns_tracing_on(engine: ModuleType, spans: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    tracer, exporter = spans
    monkeypatch.setattr(tracing, "_ENV", [])
    monkeypatch.setenv(tracing.ENV_VAR, "1")
    on = tracing.env_tracing()
    assert on is not None
    monkeypatch.setattr(tracing, "_ENV", [tracing.Tracing(tracer)])  # the same, on this test's tracer
    seen: list[Any] = []

    async def body() -> None:
        stream = serve_in_memory(agent(None, seen), engine)
        async with client(None).connect(stream, engine=engine) as conn:
            await session_and_prompt(conn)

    run(body)
    assert tracing.parse_traceparent(seen[0]["_meta"]["traceparent"]) is not None
    assert named(exporter.get_finished_spans(), "session/new", SpanKind.SERVER)


def test_a_sent_request_keeps_its_meta_and_the_callers_object(engine: ModuleType, spans: Any) -> None:
    tracer, _ = spans
    seen: list[Any] = []
    params = {"cwd": "/tmp", "mcpServers": [], "_meta": {"mine": True, "traceparent": "stale"}}

    async def body() -> None:
        stream = serve_in_memory(agent(None, seen), engine)
        async with client(tracer).connect(stream, engine=engine) as conn:
            await conn.initialize()
            await conn.send_request("session/new", params)

    run(body)
    assert params["_meta"] == {"mine": True, "traceparent": "stale"}  # the caller's object unchanged
    meta = seen[0]["_meta"]
    assert meta["mine"] is True and tracing.parse_traceparent(meta["traceparent"]) is not None
    assert "tracestate" not in meta


def test_a_no_op_tracer_sends_no_context(engine: ModuleType) -> None:
    """Tracing on a no-op tracer (opentelemetry-api without an SDK): spans without a valid
    context, so nothing is added to `_meta` (never an all-zero `traceparent`)."""
    from opentelemetry.trace import NoOpTracer

    seen: list[Any] = []

    async def body() -> None:
        stream = serve_in_memory(agent(NoOpTracer(), seen), engine)
        async with client(NoOpTracer()).connect(stream, engine=engine) as conn:
            assert type(conn.raw) is tracing.TracedConnection
            await session_and_prompt(conn)

    run(body)
    assert seen[0] == {"cwd": "/tmp", "mcpServers": []} and "_meta" not in seen[1]


def test_an_unsampled_trace_still_carries_its_context(engine: ModuleType) -> None:
    """A sampler that records nothing: no span ends in the exporter, and the context (its
    sampled flag off) still reaches the agent, whose spans follow the client's decision."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

    exporter = InMemorySpanExporter()
    client_side = TracerProvider(sampler=ALWAYS_OFF)
    client_side.add_span_processor(SimpleSpanProcessor(exporter))
    agent_side = TracerProvider(sampler=ParentBased(root=ALWAYS_OFF))  # records what is sampled upstream
    agent_side.add_span_processor(SimpleSpanProcessor(exporter))
    seen: list[Any] = []

    async def body() -> None:
        stream = serve_in_memory(agent(agent_side.get_tracer("a"), seen, ask=True), engine)
        async with client(client_side.get_tracer("c")).connect(stream, engine=engine) as conn:
            await session_and_prompt(conn)

    run(body)
    parsed = tracing.parse_traceparent(seen[0]["_meta"]["traceparent"])
    assert parsed is not None and parsed[2] & 1 == 0  # not sampled (bit 0; bit 1 is "random")
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize("meta", [
    {"traceparent": "garbage"},
    {"traceparent": f"00-{'0' * 32}-{PARENT}-01"},          # all-zero trace id
    {"traceparent": f"00-{TRACE}-{'0' * 16}-01"},           # all-zero span id
    {"traceparent": f"ff-{TRACE}-{PARENT}-01"},             # version ff
    {"traceparent": f"00-{TRACE.upper()}-{PARENT}-01"},     # upper case
    {"traceparent": f"00-{TRACE}-{PARENT}-01-extra"},       # version 00 with a fifth field
    {"traceparent": 7},
    {"traceparent": None},
    "not an object",
], ids=["garbage", "zero-trace", "zero-span", "ff", "upper", "v00-extra", "number", "null", "meta-string"])
def test_a_bad_traceparent_is_ignored(engine: ModuleType, spans: Any, meta: Any) -> None:
    tracer, exporter = spans

    async def body() -> dict[str, Any]:
        a, b = memory_pair()
        task = asyncio.ensure_future(agent(tracer).serve(a, engine=engine))
        peer = RawPeer(b)
        for msg in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
                    {"jsonrpc": "2.0", "id": 2, "method": "session/new",
                     "params": {"cwd": "/tmp", "mcpServers": [], "_meta": meta}}):
            b.write(json.dumps(msg).encode() + b"\n")
            reply: dict[str, Any] = await peer.lines.get()
        b.close()
        await task
        return reply

    reply = run(body)
    assert reply["result"] == {"sessionId": SID}
    span = one(exporter.get_finished_spans(), "session/new", SpanKind.SERVER)
    assert span.parent is None and f"{span.context.trace_id:032x}" != TRACE


def test_a_good_traceparent_and_tracestate_are_continued(engine: ModuleType, spans: Any) -> None:
    tracer, exporter = spans
    seen: list[Any] = []

    async def body() -> None:
        a, b = memory_pair()
        traced = agent(tracer, seen, ask=False)
        task = asyncio.ensure_future(traced.serve(a, engine=engine))
        peer = RawPeer(b)
        for msg in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
                    {"jsonrpc": "2.0", "id": 2, "method": "session/new",
                     "params": {"cwd": "/tmp", "mcpServers": [], "_meta": {"traceparent": GOOD,
                                                                            "tracestate": "vendor=x"}}}):
            b.write(json.dumps(msg).encode() + b"\n")
            await peer.lines.get()
        b.close()
        await task

    run(body)
    span = one(exporter.get_finished_spans(), "session/new", SpanKind.SERVER)
    assert f"{span.context.trace_id:032x}" == TRACE and span.parent is not None
    assert f"{span.parent.span_id:016x}" == PARENT
    assert span.context.trace_state.get("vendor") == "x"
    assert seen[0]["_meta"]["traceparent"] == GOOD  # the handler sees the params as sent


def test_parse_traceparent() -> None:
    assert tracing.parse_traceparent(GOOD) == (int(TRACE, 16), int(PARENT, 16), 1)
    assert tracing.parse_traceparent(f"01-{TRACE}-{PARENT}-00-later") == (int(TRACE, 16), int(PARENT, 16), 0)
    assert tracing.parse_traceparent(GOOD + "x") is None
    assert tracing.parse_traceparent(b"00") is None
    assert tracing.parse_traceparent(f"00-{'0' * 32}-{PARENT}-01") is None
    assert tracing.parse_traceparent(f"00-{TRACE}-{'0' * 16}-01") is None
    assert tracing.parse_traceparent(f"ff-{TRACE}-{PARENT}-01") is None
    assert tracing.parse_traceparent(f"00-{TRACE}-{PARENT}-01-more") is None
    # the version-00 value of 55 characters: only lower-case hex digits, whatever int() takes
    assert tracing.parse_traceparent(f"00-{TRACE}-{PARENT}- 1") is None
    assert tracing.parse_traceparent(f"00-0x{TRACE[2:]}-{PARENT}-01") is None
    assert tracing.parse_traceparent(f"00-{TRACE[:10]}_{TRACE[11:]}-{PARENT}-01") is None
    assert tracing.parse_traceparent(f"00_{TRACE}-{PARENT}-01") is None
    assert tracing.parse_traceparent(f"00-{TRACE}-{PARENT}-ff") == (int(TRACE, 16), int(PARENT, 16), 255)
    assert tracing.parse_traceparent("x" * 600) is None


def test_a_plain_json_rpc_connection_can_be_traced(engine: ModuleType, spans: Any) -> None:
    """`instrument` on a JSON-RPC connection without a fallback handler: a request for an
    unknown method is answered -32601 at once, and its span ends with that code."""
    from acp_fast.jsonrpc import Connection

    tracer, exporter = spans

    async def body() -> Any:
        a, b = memory_pair()
        conn = tracing.instrument(Connection(a, engine=engine), tracing.Tracing(tracer))
        conn.on_request("known", lambda ctx: {"ok": True})
        peer = RawPeer(b)
        b.write(b'{"jsonrpc":"2.0","id":"x","method":"nope","params":{}}\n')
        b.write(b'{"jsonrpc":"2.0","id":1,"method":"known","params":{}}\n')
        replies = [await peer.lines.get(), await peer.lines.get()]
        finished = exporter.get_finished_spans()  # before the connection closes
        conn.close()
        await conn.wait_closed()
        return replies, finished

    replies, finished = run(body)
    assert replies[0]["error"]["code"] == -32601 and replies[1]["result"] == {"ok": True}
    nope = one(finished, "nope", SpanKind.SERVER)
    assert nope.attributes is not None and nope.attributes["rpc.jsonrpc.error_code"] == -32601
    assert nope.attributes["rpc.jsonrpc.request_id"] == "x"
    assert one(finished, "known", SpanKind.SERVER).status.status_code is StatusCode.UNSET


def test_through_a_conductor_chain_with_one_proxy(engine: ModuleType, spans: Any) -> None:
    tracer, exporter = spans

    async def body() -> None:
        proxy = Proxy.builder().with_tracing(tracer)
        async with Conductor([proxy, agent(tracer)], engine=engine) as upstream:
            async with client(tracer).connect(upstream, engine=engine) as conn:
                await session_and_prompt(conn)
                await asyncio.sleep(0.05)

    run(body)
    finished = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}

    def chain(span: ReadableSpan) -> list[ReadableSpan]:
        found = [span]
        while parent_of(found[-1]) is not None:
            found.append(by_id[parent_of(found[-1])])  # type: ignore[index]
        return found

    # the agent's span -> the proxy's forwarding -> the proxy's received span -> the client's
    prompts = named(finished, "session/prompt", SpanKind.SERVER)
    assert len(prompts) == 2 and len(named(finished, "session/prompt", SpanKind.CLIENT)) == 2
    longest = max((chain(s) for s in prompts), key=len)
    assert [s.kind for s in longest] == [SpanKind.SERVER, SpanKind.CLIENT, SpanKind.SERVER, SpanKind.CLIENT]
    assert all(s.name == "session/prompt" for s in longest)
    assert {s.context.trace_id for s in longest} == {longest[-1].context.trace_id}
    # the turn is the agent's, not the proxy's
    assert [bool(s.attributes and s.attributes.get("acp.prompt_turn")) for s in longest] == [True, False, False, False]


@pytest.mark.parametrize("scheme", ["ws", "http"])
def test_across_acp_fast_serve(engine: ModuleType, spans: Any, scheme: str) -> None:
    from acp_fast.remote import asgi_app, connect_url, served

    tracer, exporter = spans
    app = asgi_app(agent(tracer), engine=engine, otel=tracing.Tracing(tracer))

    async def body() -> None:
        async with served(app) as where:
            url = where.ws_url if scheme == "ws" else where.http_url
            async with client(tracer).connect(connect_url(url), engine=engine) as conn:
                await session_and_prompt(conn)
                await asyncio.sleep(0.05)

    run(body)
    finished = exporter.get_finished_spans()
    sent = one(finished, "session/prompt", SpanKind.CLIENT)
    relayed, at_agent = sorted(named(finished, "session/prompt", SpanKind.SERVER),
                               key=lambda s: s.instrumentation_scope is not None and s.parent is not None
                               and s.parent.span_id != sent.context.span_id)
    assert parent_of(relayed) == sent.context.span_id
    assert parent_of(at_agent) == relayed.context.span_id
    assert relayed.attributes is not None and "acp.connection.id" in relayed.attributes
    assert relayed.end_time is not None and at_agent.end_time is not None
    assert {s.context.trace_id for s in (sent, relayed, at_agent)} == {sent.context.trace_id}


def test_a_traced_client_drives_the_official_sdk_agent_unchanged(engine: ModuleType, spans: Any) -> None:
    """The official SDK (agent-client-protocol) neither reads nor writes trace context in
    `_meta` (it opens spans of its own, parented by whatever context is current): a traced
    client's `_meta` does not change what its agent does, and the SDK agent's answers carry
    no context back (the client's spans stay roots of their own)."""
    require_module("acp", what="the official Python SDK (agent-client-protocol) is not installed")
    from acp_fast.transport import spawn
    from package_path import pythonpath
    from roles_support import REPO

    tracer, exporter = spans

    async def body() -> None:
        stream = await spawn([sys.executable, str(REPO / "peers" / "pysdk" / "agent.py")],
                             env={"PYTHONPATH": pythonpath()})
        traced = client(tracer)
        texts: list[str] = []
        traced.on_session_update(lambda u, cx: texts.append(u.payload["content"]["text"]))
        async with traced.connect(stream, engine=engine) as conn:
            await conn.initialize()
            opened = await conn.send_request("session/new", {"cwd": "/tmp", "mcpServers": []})
            result = await conn.send_request("session/prompt", {"sessionId": opened["sessionId"], "prompt": [
                {"type": "text", "text": "2 permission"}]})
            assert result["stopReason"] == "end_turn"
        assert texts[0] == "permission:ok" and len(texts) == 3  # the SDK agent's turn, unchanged

    run(body)
    finished = exporter.get_finished_spans()
    assert {s.name for s in finished} == {"initialize", "session/new", "session/prompt", "session/request_permission"}
    # the client's requests: roots; the SDK agent's permission request reached the client with
    # no context (the SDK sends none), so its span is a root too, not a child of the turn
    assert all(s.parent is None for s in finished)
    assert one(finished, "session/request_permission", SpanKind.SERVER).context.trace_id != one(
        finished, "session/prompt", SpanKind.CLIENT).context.trace_id
    assert all(s.status.status_code is not StatusCode.ERROR for s in finished)


def test_the_readme_tracing_snippet_runs_and_prints_one_trace(tmp_path: Any) -> None:
    import re
    import subprocess

    from package_path import pythonpath
    from roles_support import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if ".with_tracing(tracer)" in b]
    assert len(blocks) == 1
    script = tmp_path / "traced.py"
    script.write_text(blocks[0])
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": pythonpath(), "PATH": ""}, check=True).stdout.splitlines()
    # the initialize pair, then the client's own span and everything under it
    assert [line.split(" (")[0] for line in out] == [
        "initialize", "  initialize", "fix the bug", "  session/new", "    session/new", "  session/prompt",
        "    session/prompt", "      session/request_permission", "        session/request_permission"]
    assert len({re.search(r"trace ([0-9a-f]{32})", line).group(1) for line in out[2:]}) == 1  # type: ignore[union-attr]
    assert "'acp.prompt_turn': True" in out[6] and "'acp.stop_reason': 'end_turn'" in out[6]


def test_asking_for_tracing_without_opentelemetry_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    monkeypatch.setattr(tracing, "_trace", None)
    with pytest.raises(tracing.MissingOtelError, match=r"acp-fast\[otel\]"):
        Agent.builder().with_tracing()


def test_serve_otel_is_one_process_only(capsys: pytest.CaptureFixture[str]) -> None:
    from acp_fast.cli import main as cli

    assert cli.main(["serve", "--otel", "--workers", "2", "--testy"]) == 2
    assert "--otel" in capsys.readouterr().err


def test_serve_otel_builds_a_traced_relay(monkeypatch: pytest.MonkeyPatch) -> None:
    """`acp-fast serve --otel`: the app it serves traces relayed requests."""
    from acp_fast.cli import main as cli
    from acp_fast.remote import runner

    made: list[Any] = []

    def fake_serve_app(app: Any, **kwargs: Any) -> Any:
        made.append(app)
        raise SystemExit(0)

    monkeypatch.setattr(runner, "serve_app", fake_serve_app)
    with pytest.raises(SystemExit):
        cli.main(["serve", "--otel", "--testy", "--port", "0"])
    assert made and isinstance(made[0].otel, tracing.Tracing)


def test_a_sent_span_ends_however_its_request_is_settled(engine: ModuleType, spans: Any,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A sent request's span ends once, as its handle is settled: by its answer, or by a
    timeout, the awaiting task's cancellation, `detach`, the connection's close, or at once
    for a request on a closed connection."""
    from acp_fast.jsonrpc import Connection

    tracer, exporter = spans

    async def body() -> Any:
        a, b = memory_pair()
        conn = tracing.instrument(Connection(a, engine=engine), tracing.Tracing(tracer))
        peer = RawPeer(b)
        answered = conn.request("answered", {"sessionId": SID})
        asked = await peer.recv()
        peer.send({"jsonrpc": "2.0", "id": asked["id"], "result": {"stopReason": "end_turn"}})
        assert await answered == {"stopReason": "end_turn"}
        with pytest.raises(asyncio.TimeoutError):
            await conn.request("timed_out", {}, timeout=0.01)
        waiting = asyncio.ensure_future(conn.request("cancelled", {}))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        conn.request("detached", {}).detach()
        pending = conn.request("closed", {})
        await asyncio.sleep(0.01)
        before_close = {s.name for s in exporter.get_finished_spans()}
        conn.close()
        await conn.wait_closed()
        with pytest.raises(JsonRpcError):
            await pending
        with pytest.raises(JsonRpcError):
            await conn.request("after_close", {})
        assert conn._otel_sent == {}  # type: ignore[attr-defined]
        return before_close

    before_close = run(body)
    assert before_close == {"answered", "timed_out", "cancelled", "detached"}
    finished = exporter.get_finished_spans()
    ok = one(finished, "answered", SpanKind.CLIENT)
    assert ok.status.status_code is StatusCode.UNSET
    assert ok.attributes is not None and ok.attributes["acp.stop_reason"] == "end_turn"
    for name, code, message in (("timed_out", -32603, "TimeoutError"), ("cancelled", -32800, "cancelled"),
                                ("detached", -32800, "cancelled"), ("closed", -32603, "Connection closed"),
                                ("after_close", -32603, "closed")):
        span = one(finished, name, SpanKind.CLIENT)
        assert span.status.status_code is StatusCode.ERROR, name
        assert span.attributes is not None and span.attributes["rpc.jsonrpc.error_code"] == code, name
        assert message in str(span.attributes["rpc.jsonrpc.error_message"]), name
    assert "ended span" not in caplog.text  # each span ended once


def test_raw_params_get_the_context_spliced_in(engine: ModuleType, spans: Any) -> None:
    """Raw JSON params: an object without `_meta` gets the context spliced in before its own
    bytes (which go on verbatim, never re-encoded); one with a `_meta` (even written with
    escapes) is decoded and gets it merged into that `_meta`, never a second `_meta` key."""
    from acp_fast._rawjson import RawJson
    from acp_fast.jsonrpc import Connection

    tracer, _ = spans
    sent = [b'{"cwd": "/tmp",  "mcpServers": [ ]}', b"{ }", b'{"a":1,"_meta":{"k":1}}', b'{"a":1,"\\u005fmeta":{"k":2}}',
            b'[1, 2]']

    async def body() -> list[bytes]:
        a, b = memory_pair()
        lines: list[bytes] = []
        got = asyncio.Event()

        def data(chunk: bytes) -> None:
            lines.extend(line for line in chunk.split(b"\n") if line)
            if len(lines) == len(sent):
                got.set()

        b.attach(data, lambda exc: None, lambda writable: None)
        conn = tracing.instrument(Connection(a, engine=engine), tracing.Tracing(tracer))
        for raw in sent:
            conn.request("m", RawJson(raw)).detach()
        await got.wait()
        conn.close()
        await conn.wait_closed()
        return lines

    lines = run(body)

    def no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        assert len({k for k, _ in pairs}) == len(pairs), pairs
        return dict(pairs)

    params = [json.loads(line, object_pairs_hook=no_twice)["params"] for line in lines]
    for p in params[:4]:
        assert tracing.parse_traceparent(p["_meta"]["traceparent"]) is not None
    assert b'"cwd": "/tmp",  "mcpServers": [ ]}' in lines[0]  # the caller's bytes, verbatim
    assert params[0]["cwd"] == "/tmp" and list(params[1]) == ["_meta"]
    assert params[2]["_meta"]["k"] == 1 and params[3]["_meta"]["k"] == 2 and params[3]["a"] == 1
    assert params[4] == [1, 2]


def test_a_handler_sends_with_the_received_trace_state(engine: ModuleType, spans: Any) -> None:
    """What a handler sends continues its span's trace, `tracestate` included."""
    from acp_fast.jsonrpc import Connection

    tracer, _ = spans

    async def body() -> Any:
        a, b = memory_pair()
        conn = tracing.instrument(Connection(a, engine=engine), tracing.Tracing(tracer))

        async def ask(ctx: Any) -> Any:
            return await conn.request("inner", {"x": 1})

        conn.on_request("ask", ask)
        peer = RawPeer(b)
        peer.send({"jsonrpc": "2.0", "id": 1, "method": "ask",
                   "params": {"_meta": {"traceparent": GOOD, "tracestate": "vendor=x"}}})
        inner = await peer.recv()
        peer.send({"jsonrpc": "2.0", "id": inner["id"], "result": {"ok": True}})
        answer = await peer.recv()
        conn.close()
        await conn.wait_closed()
        return inner, answer

    inner, answer = run(body)
    assert answer["result"] == {"ok": True}
    meta = inner["params"]["_meta"]
    parsed = tracing.parse_traceparent(meta["traceparent"])
    assert parsed is not None and f"{parsed[0]:032x}" == TRACE and meta["tracestate"] == "vendor=x"


class _Recorded:
    """A span stand-in that records what is set on it."""

    def __init__(self) -> None:
        self.attributes: dict[str, Any] = {}
        self.status: Any = None
        self.ended = 0

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def set_status(self, status: Any) -> None:
        self.status = status

    def end(self) -> None:
        self.ended += 1


@pytest.mark.parametrize(("line", "turn", "attributes"), [
    (b'{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}', True, {"acp.stop_reason": "end_turn"}),
    (b'{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}', False, {}),
    (b'{"jsonrpc":"2.0","id":3,"result":{"text":"an \\"error\\": word","stopReason":"refusal"}}', True,
     {"acp.stop_reason": "refusal"}),
    (b'{"jsonrpc":"2.0","id":3,"result":{"a":{"stopReason":1},"stopReason":"cancelled"}}', True,
     {"acp.stop_reason": "cancelled"}),
    (b'{"jsonrpc":"2.0","id":"x","error":{"code":-32002,"message":"no"}}', True, {"rpc.jsonrpc.error_code": -32002}),
    (b'{"jsonrpc":"2.0","id":"a\\"b","error":{"code":-32601,"message":"no"}}', False,
     {"rpc.jsonrpc.error_code": -32601}),
], ids=["turn", "not-a-turn", "error-in-a-text", "a-later-stop-reason", "error", "error-escaped-id"])
def test_end_with_line_reads_the_answer(line: bytes, turn: bool, attributes: dict[str, Any]) -> None:
    tracing._otel()
    span = _Recorded()
    tracing.end_with_line(span, line, turn)
    assert span.attributes == attributes and span.ended == 1
    assert (span.status is not None) == ("rpc.jsonrpc.error_code" in attributes)
