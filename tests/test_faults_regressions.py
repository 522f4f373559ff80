"""Regression tests for the connection and role defects of issue 8 (1, 2, 3, 5, 6, 7).

Each test reproduces its defect the way the issue describes it (a new user, or a hostile
peer on raw pipes), scaled down to a few seconds. Tests that fail on the code they were
written against carry ``xfail(strict=True)`` naming the defect: the day a fix lands they
XPASS, the suite turns red, and the mark is dropped. The engine defects (4, 8, 9, 10, 12)
and the transport one (11) have their own regression tests next to their fixes.

Every test runs on both engine twins (the ``engine`` fixture of ``tests/conftest.py``); in
child processes the twin is selected with ``ACP_FAST_TEST_ENGINE`` or testy's ``--engine``.
Memory is the child's peak resident set (``VmHWM`` of ``/proc/PID/status``) minus its
resident set once warmed up; no test measures time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from fault_support import (  # noqa: E402
    HANG,
    RawChild,
    agent_argv,
    child_env,
    count_ids,
    key,
    req,
    cmd_testy,
)

from acp_fast import Agent, Client  # noqa: E402
from acp_fast.transport import memory_pair, spawn  # noqa: E402

# ---------------------------------------------------------------------------------------
# bounds (KiB of peak-RSS growth over the warmed-up child)
# ---------------------------------------------------------------------------------------

#: Allowed growth of an agent whose peer sends or withholds tens of MiB. The transport's
#: write high-water mark is 256 KiB, a pipe holds 64 KiB, the engine reads 256 KiB at a
#: time and pauses reading past 1024 queued handlers of ~1 KiB lines: a bounded agent stays
#: within a few MiB (measured: ~0.2 MiB). 16 MiB leaves room for allocator and interpreter
#: noise, and is well below what each test pushes (20-28 MiB), so unbounded buffering of
#: that traffic cannot pass.
PEER_FLOOD_BOUND_KIB = 16 * 1024

#: Defect 1: 20,000 ``session/update`` chunks of 1 KiB (20 MiB of text) streamed at a client
#: that reads nothing (measured today without drain: ~48 MiB of growth).
STREAM_N, STREAM_SIZE = 20_000, 1024
#: Defect 2: 28 MiB of 1 KiB echo requests (448 writes of 64 lines) while the agent waits
#: on its own ``session/request_permission`` (measured today: growth ~= the flood).
FLOOD_LINES_PER_CHUNK, FLOOD_CHUNKS = 64, 448
#: Defect 3: 24 MiB of response lines before ``initialize`` (measured today: 78-114 MiB for 32).
PRE_INIT_CHUNKS = 384
#: How long a test lets a streaming agent run while its client reads nothing before it
#: looks; only bounds the test's length (a bounded agent is blocked by then, an unbounded
#: one has grown past the bound whatever the window).
PUSH_WINDOW = 1.0
#: A flood counts as blocked (the agent stopped reading) once the writer made no progress
#: for this long; only bounds the test's length: an agent that keeps reading keeps the
#: writer moving, so it cannot stop the flood early.
STALL = 1.0

PAD = "p" * 1000


def push_until_blocked(flood: Any) -> None:
    """Let ``flood`` run until it is all written or the child stopped taking it."""
    last, since = -1, time.monotonic()
    while not flood.done:
        if flood.written_bytes != last:
            last, since = flood.written_bytes, time.monotonic()
        elif time.monotonic() - since > STALL:
            break
        time.sleep(0.05)


def growth_kib(child: RawChild, base_rss: int) -> int:
    return child.status()["hwm"] - base_rss


def warm_rss(child: RawChild, method: str = "_fault/rss") -> int:
    """Ask one request (so the stack is imported and warm), then read VmRSS."""
    child.send(req("warm", method))
    child.response("warm")
    return child.status()["rss"]


def session_updates(child: RawChild) -> int:
    return sum(1 for m in child.lines if isinstance(m, dict) and m.get("method") == "session/update")


def run(coro_fn: Any, *args: Any) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro_fn(*args), HANG)

    return asyncio.run(guarded())


V1_INIT = {"protocolVersion": 1, "clientInfo": {"name": "fault-client", "version": "0"}}


# ---------------------------------------------------------------------------------------
# defect 1: backpressure on the public send API
# ---------------------------------------------------------------------------------------


def test_d1_streaming_with_drain_stays_bounded_while_the_client_reads_nothing(engine: ModuleType) -> None:
    """The README pattern with ``await cx.drain()``: the loop blocks, memory stays flat,
    and once the client reads, every update arrives."""
    with RawChild(agent_argv(), child_env(engine.IMPLEMENTATION)) as child:
        base = warm_rss(child)
        child.stop_reading()
        child.send(req(1, "_fault/stream", {"n": STREAM_N, "size": STREAM_SIZE, "drain": True}))
        time.sleep(PUSH_WINDOW)
        assert not child.stderr_has("done"), "drain() did not block while the client read nothing"
        child.start_reading()
        assert child.response(1)["result"] == {"sent": STREAM_N}
        assert session_updates(child) == STREAM_N
        assert growth_kib(child, base) <= PEER_FLOOD_BOUND_KIB


def test_d1_non_awaiting_send_loop_is_bounded_and_never_drops(engine: ModuleType) -> None:
    """The README pattern without ``drain()``: past a high-water mark the send must raise
    or follow a documented policy; memory stays bounded and nothing is dropped silently
    (every update is delivered, or the send raised and what was sent before arrives)."""
    with RawChild(agent_argv(), child_env(engine.IMPLEMENTATION)) as child:
        base = warm_rss(child)
        child.stop_reading()
        child.send(req(1, "_fault/stream", {"n": STREAM_N, "size": STREAM_SIZE, "drain": False}))
        child.wait_for(lambda: child.stderr_has("done") or child.stderr_has("raised"), what="the send loop")
        child.start_reading()
        result = child.response(1)["result"]
        peak = growth_kib(child, base)  # VmHWM: the peak of the whole run, unread phase included
        delivered = session_updates(child)
        if "raised" in result:
            assert delivered == result["sent"], "updates sent before the send raised were lost"
        else:
            assert result["sent"] == STREAM_N and delivered == STREAM_N, "updates were dropped"
        assert peak <= PEER_FLOOD_BOUND_KIB, f"agent grew by {peak} KiB while its client read nothing"


# ---------------------------------------------------------------------------------------
# defect 2: inbound buffering while a request of ours is outstanding
# ---------------------------------------------------------------------------------------


def echo_flood(first_id: int) -> Any:
    for i in range(FLOOD_CHUNKS):
        base = first_id + i * FLOOD_LINES_PER_CHUNK
        yield b"".join(req(base + j, "_test/echo", {"p": PAD}) for j in range(FLOOD_LINES_PER_CHUNK))


def test_d2_request_flood_while_testy_waits_on_permission_is_bounded(engine: ModuleType) -> None:
    """Testy v1 asks ``session/request_permission``; the client does not answer, floods
    echo requests and reads nothing. The agent must stay bounded, and once the client
    reads and answers, the prompt completes and every echo is answered exactly once."""
    with RawChild(cmd_testy(engine.IMPLEMENTATION, "1"), child_env(engine.IMPLEMENTATION)) as child:
        child.send(req(1, "initialize", V1_INIT))
        child.response(1)
        child.send(req(2, "session/new", {"cwd": "/tmp", "mcpServers": []}))
        sid = child.response(2)["result"]["sessionId"]
        base = warm_rss(child, "_test/stats")
        child.send(req(4, "session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "permission stream 1"}]}))
        child.wait_for(lambda: any(isinstance(m, dict) and m.get("method") == "session/request_permission"
                                   for m in child.lines), what="the permission request")
        ask = next(m for m in child.lines if isinstance(m, dict) and m.get("method") == "session/request_permission")
        child.stop_reading()
        flood = child.send_in_background(echo_flood(1000))
        push_until_blocked(flood)
        flood.stop()
        peak_during = growth_kib(child, base)
        child.start_reading()
        assert flood.wait(HANG), "the flood writer never finished once the client read again"
        child.send(json.dumps({"jsonrpc": "2.0", "id": ask["id"], "result": {
            "outcome": {"outcome": "selected", "optionId": "allow"}}}).encode() + b"\n")
        assert child.response(4)["result"] == {"stopReason": "end_turn"}
        sent = flood.written_chunks * FLOOD_LINES_PER_CHUNK
        child.wait_for(lambda: sum(1 for k in count_ids(child.lines) if k.isdigit() and int(k) >= 1000) >= sent,
                       what="every echo answer")
        counts = count_ids(child.lines)
        assert all(counts[key(1000 + i)] == 1 for i in range(sent))
        assert peak_during <= PEER_FLOOD_BOUND_KIB, f"testy grew by {peak_during} KiB while waiting on permission"
        assert growth_kib(child, base) <= PEER_FLOOD_BOUND_KIB


# ---------------------------------------------------------------------------------------
# defect 3: the protocol router buffers everything before the first call-shaped frame
# ---------------------------------------------------------------------------------------


def response_flood() -> Any:
    for i in range(PRE_INIT_CHUNKS):
        yield b"".join(json.dumps({"jsonrpc": "2.0", "id": i * 64 + j, "result": {"p": PAD}}).encode() + b"\n"
                       for j in range(64))


def test_d3_responses_before_initialize_are_not_buffered_by_the_router(engine: ModuleType) -> None:
    # The router answers nothing before initialize, so the baseline is a twin testy process,
    # warmed up by an initialize and an echo.
    with RawChild(cmd_testy(engine.IMPLEMENTATION), child_env(engine.IMPLEMENTATION)) as ref, \
            RawChild(cmd_testy(engine.IMPLEMENTATION), child_env(engine.IMPLEMENTATION)) as child:
        ref.send(req("init", "initialize", V1_INIT))
        ref.response("init")
        base = warm_rss(ref, "_test/echo")
        child.start_reading()
        flood = child.send_in_background(response_flood())
        assert flood.wait(HANG) and flood.error is None
        child.send(req("init", "initialize", V1_INIT))
        assert child.response("init")["result"]["protocolVersion"] == 1
        child.send(req("after", "_test/echo", {"ok": True}))
        assert child.response("after")["result"] == {"ok": True}
        assert [m for m in child.lines if not isinstance(m, dict) or m.get("id") not in ("init", "after")] == []
        assert growth_kib(child, base) <= PEER_FLOOD_BOUND_KIB


# ---------------------------------------------------------------------------------------
# defect 5: exceptions in the answer path (see also the handler matrix in test_faults.py)
# ---------------------------------------------------------------------------------------


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() of this exception fails")


class ItemsRaise(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise RuntimeError("items() of this result fails")


def _defect5_handler(kind: str, is_async: bool) -> Any:
    def sync(params: Any, cx: Any) -> Any:
        if kind == "str":
            raise StrRaises
        return ItemsRaise(a=1)

    async def coro(params: Any, cx: Any) -> Any:
        await asyncio.sleep(0)
        return sync(params, cx)

    return coro if is_async else sync


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", ["str", "items"], ids=["str-raises", "items-raises"])
def test_d5_every_request_answered_when_str_or_items_raise(engine: ModuleType, kind: str, is_async: bool) -> None:
    """The bad request and the one after it in the same read are each answered exactly
    once (-32603 / the echo), and the connection closes after EOF."""

    async def body() -> None:
        agent = Agent.builder()
        agent.on_request("_fault/bad", _defect5_handler(kind, is_async))
        agent.on_request("_fault/echo", lambda params, cx: params)

        async def aecho(params: Any, cx: Any) -> Any:
            await asyncio.sleep(0)
            return params

        agent.on_request("_fault/aecho", aecho)
        a, b = memory_pair()
        served = asyncio.ensure_future(agent.serve(a, engine=engine))
        got: list[Any] = []
        buf = [b""]

        def data(chunk: bytes) -> None:
            *lines, buf[0] = (buf[0] + chunk).split(b"\n")
            got.extend(json.loads(line) for line in lines if line)

        eof = asyncio.get_running_loop().create_future()
        b.attach(data, lambda exc: eof.done() or eof.set_result(None), lambda w: None)
        b.write(req("bad", "_fault/bad") + req("next", "_fault/echo", {"n": 1}))
        for _ in range(5):  # later reads: a probe answered after everything before it
            await asyncio.sleep(0)
        b.write(req("probe", "_fault/aecho", {}))
        while not any(m.get("id") == "probe" for m in got):
            await asyncio.sleep(0.01)
        for _ in range(5):
            await asyncio.sleep(0)
        counts = count_ids(got)
        assert counts[key("bad")] == 1 and counts[key("next")] == 1, got
        bad = next(m for m in got if m["id"] == "bad")
        assert bad["error"]["code"] == -32603
        assert next(m for m in got if m["id"] == "next")["result"] == {"n": 1}
        b.close()
        await asyncio.wait_for(served, 5)  # the agent's connection closes after EOF

    run(body)


# ---------------------------------------------------------------------------------------
# defect 6: a notification about a request must see the request as started
# ---------------------------------------------------------------------------------------


def test_d6_testy_v1_cancel_in_the_same_read_as_the_prompt(engine: ModuleType) -> None:
    from acp_fast import testy

    async def body() -> None:
        a, b = memory_pair()
        served = asyncio.ensure_future(testy.build((1,)).serve(a, engine=engine))
        got: list[Any] = []
        buf = [b""]

        def data(chunk: bytes) -> None:
            *lines, buf[0] = (buf[0] + chunk).split(b"\n")
            got.extend(json.loads(line) for line in lines if line)

        b.attach(data, lambda exc: None, lambda w: None)

        async def answer(rid: Any) -> Any:
            while not any(m.get("id") == rid and "method" not in m for m in got):
                await asyncio.sleep(0.005)
            return next(m for m in got if m.get("id") == rid and "method" not in m)

        b.write(req(1, "initialize", V1_INIT))
        await answer(1)
        b.write(req(2, "session/new", {"cwd": "/tmp", "mcpServers": []}))
        sid = (await answer(2))["result"]["sessionId"]
        # one write = one read on a memory pair: the prompt and its cancel arrive together
        b.write(req(3, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "stream 50"}]})
                + json.dumps({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}).encode()
                + b"\n")
        reply = await answer(3)
        b.close()
        await served
        assert reply["result"] == {"stopReason": "cancelled"}

    run(body)


def test_d6_async_request_handler_has_started_when_a_notification_of_the_same_read_runs(
        engine: ModuleType) -> None:
    async def body() -> None:
        started: set[str] = set()
        seen: list[bool] = []
        agent = Agent.builder()

        async def work(params: Any, cx: Any) -> Any:
            started.add(params["job"])
            await asyncio.sleep(0)
            return "done"

        agent.on_request("_fault/work", work)
        agent.on_notification("_fault/about", lambda params, cx: seen.append(params["job"] in started))
        a, b = memory_pair()
        served = asyncio.ensure_future(agent.serve(a, engine=engine))
        b.attach(lambda d: None, lambda e: None, lambda w: None)
        b.write(b"".join(req(i, "_fault/work", {"job": str(i)}) + json.dumps(
            {"jsonrpc": "2.0", "method": "_fault/about", "params": {"job": str(i)}}).encode() + b"\n"
            for i in range(3)))
        while len(seen) < 3:
            await asyncio.sleep(0.005)
        b.close()
        await served
        assert seen == [True, True, True]

    run(body)


# ---------------------------------------------------------------------------------------
# defect 7: a v2 client's wait_idle when the agent dies mid-turn
# ---------------------------------------------------------------------------------------


def test_d7_v2_wait_idle_is_released_when_the_agent_dies_mid_turn(engine: ModuleType) -> None:
    async def body() -> Any:
        stream = await spawn(cmd_testy(engine.IMPLEMENTATION, "2"), env=child_env(engine.IMPLEMENTATION))
        states: list[str] = []
        client = Client.v2()

        @client.on_session_update
        def on_update(update: Any, cx: Any) -> None:
            if update.kind == "state_update":
                states.append(update.payload.get("state"))

        async def main(cx: Any) -> Any:
            await cx.initialize()
            session = (await cx.build_session("/tmp")).session
            epoch = session.idle_epoch
            await session.send_prompt("wait for cancel")
            while "running" not in states:
                await asyncio.sleep(0.005)
            idle = asyncio.ensure_future(session.wait_idle(after=epoch))
            os.killpg(stream.pid, signal.SIGKILL)  # the agent dies mid-turn
            await cx.wait_closed()
            done, _ = await asyncio.wait({idle}, timeout=2.0)  # after the close: generous
            if not done:
                idle.cancel()
                return "still waiting"
            return "released"

        return await client.connect_with(stream, main, engine=engine)

    assert run(body) == "released"
