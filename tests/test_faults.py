"""Fault injection: every request gets exactly one response, and memory stays bounded.

The invariant of issue 8, checked under hostile peers and broken handlers:

* **one response per request**: counted per id on the raw wire (batch replies flattened),
  or, where we are the requesting side, one outcome per request handle (a result, or the
  -32603 "transport closed" error once the peer is gone) and no hang;
* **bounded memory**: a child agent's peak resident set (``VmHWM`` of ``/proc/PID/status``)
  grows by at most a stated bound over its warmed-up resident set, whatever the peer does.

Faults: a peer killed mid-line and mid-turn, EOF with requests in flight, a peer that stops
reading (both directions), oversize lines, malformed floods, huge batches, handler
exceptions of every kind, cancellation races, 10,000 concurrent requests. Handlers that
raise a ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``,
``SystemExit``) are *not* turned into answers: they end the agent process, as they are
meant to; the invariant then holds on the requesting side (each request fails once with
-32603 when the agent's stdout closes).

Child agents are ``tests/helpers/fault_agent.py`` (the public builder API on stdio) and
testy; in-process tests use ``memory_pair``. Every test runs on both engine twins. The
regressions for the individual defects of issue 8 are in ``test_faults_regressions.py``;
``scripts/soak.py`` runs the same faults for longer with a seed.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
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
    note,
    req,
    responses,
)

from acp_fast import Agent, JsonRpcError  # noqa: E402
from acp_fast.jsonrpc import Connection, RequestContext  # noqa: E402
from acp_fast.transport import memory_pair, spawn  # noqa: E402

# ---------------------------------------------------------------------------------------
# bounds
# ---------------------------------------------------------------------------------------

#: Peak-RSS growth (KiB) allowed to an agent under a flood of standalone lines, oversize
#: lines or a peer that stops reading. Reading pauses past 1024 queued handlers or a
#: 256 KiB write buffer, a pipe holds 64 KiB and a read takes at most 256 KiB, so a bounded
#: agent stays within a few MiB (measured: 0.2-2.5 MiB); 16 MiB leaves room for allocator
#: noise and stays below every flood sent while nobody reads (>= 20 MiB), so buffering one
#: cannot pass.
FLOOD_BOUND_KIB = 16 * 1024
#: Peak-RSS growth (KiB) allowed per request of a batch: a batch is dispatched as a whole,
#: so all its handlers are alive at once (task, frame, context) and the reply holds one entry
#: per request (measured: 2.2-2.5 KiB per request at 250 and 1,000 requests, both twins).
BATCH_REQUEST_KIB = 3
#: Peak-RSS growth (KiB) allowed per KiB of a batch line that is rejected whole: the line is
#: buffered and scanned, never dispatched (measured: 3-6.5 KiB per KiB for 200,000 entries
#: in a 391 KiB line). One reply or one object per entry would be >= 40 KiB per KiB.
REJECTED_LINE_FACTOR = 8
#: Fixed part of both batch bounds: allocator and read-buffer noise (measured growth has no
#: fixed part beyond ~0.1 MiB).
BATCH_SLACK_KIB = 1536


def batch_bound_kib(requests: int) -> int:
    """Peak-RSS growth allowed while a batch of ``requests`` requests is handled: 1,000
    requests -> 4.4 MiB against ~2.5 MiB measured. An agent that keeps 8 KiB per handled
    request (``fault_agent.py`` with ``FAULT_LEAK_KIB=8``: ~8 MiB more for 1,000) exceeds it with room to spare
    (a 4 KiB leak measured 3.8-5.6 MiB: too close to the bound to be a steady check), see
    ``test_batch_bound_sees_a_per_request_leak``."""
    return BATCH_SLACK_KIB + requests * BATCH_REQUEST_KIB


def rejected_batch_bound_kib(line_bytes: int) -> int:
    """Peak-RSS growth allowed while a batch line of ``line_bytes`` bytes is rejected whole."""
    return BATCH_SLACK_KIB + REJECTED_LINE_FACTOR * line_bytes // 1024

#: Bytes our own write buffer may hold while the peer reads nothing and we await drain():
#: the stream's 256 KiB high-water mark plus one message, rounded up.
OWN_WRITE_BUFFER_BOUND = 1024 * 1024
#: A flood counts as blocked once the writer made no progress for this long (only bounds
#: the test's length: an agent that keeps reading keeps the writer moving).
STALL = 1.0

PAD = "p" * 1000
CONCURRENT = 10_000


def warm_rss(child: RawChild) -> int:
    child.send(req("warm", "_fault/rss"))
    child.response("warm")
    return child.status()["rss"]


def growth_kib(child: RawChild, base: int) -> int:
    return child.status()["hwm"] - base


def push_until_blocked(flood: Any) -> None:
    last, since = -1, time.monotonic()
    while not flood.done:
        if flood.written_bytes != last:
            last, since = flood.written_bytes, time.monotonic()
        elif time.monotonic() - since > STALL:
            break
        time.sleep(0.05)


def run(coro_fn: Any, *args: Any) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro_fn(*args), HANG)

    return asyncio.run(guarded())


def assert_once(counts: Any, ids: Any) -> None:
    bad = {rid: counts[key(rid)] for rid in ids if counts[key(rid)] != 1}
    assert not bad, f"ids not answered exactly once (id: count): {dict(list(bad.items())[:10])}"


# ---------------------------------------------------------------------------------------
# 10,000 concurrent requests; huge batches (child agent, raw pipes)
# ---------------------------------------------------------------------------------------

METHODS = ("_fault/echo", "_fault/aecho", "_fault/sleep", "_fault/unknown")


def test_ten_thousand_concurrent_requests_each_answered_once(engine: ModuleType) -> None:
    with RawChild(agent_argv(), child_env(engine.IMPLEMENTATION)) as child:
        base = warm_rss(child)
        ids = range(1, CONCURRENT + 1)
        child.send(b"".join(req(i, METHODS[i % 4], {"i": i, "s": 0.01}) for i in ids))
        child.wait_for(lambda: len(responses(child.lines)) >= CONCURRENT + 1, what="10,000 answers")
        counts = count_ids(child.lines)
        assert_once(counts, ids)
        assert len(responses(child.lines)) == CONCURRENT + 1
        for r in responses(child.lines):
            if r["id"] == "warm":
                continue
            if r["id"] % 4 == 3:
                assert r["error"]["code"] == -32601
            else:
                assert r["result"] == {"i": r["id"], "s": 0.01}
        assert growth_kib(child, base) <= FLOOD_BOUND_KIB


#: Requests in the largest batch the engine takes whole (its default max_batch_size is 1024
#: entries: these 1000 requests plus 10 notifications and 10 malformed entries).
BATCH_N = 1000


def send_huge_batch(child: RawChild) -> list[Any]:
    """Send the ``BATCH_N``-request batch (plus notifications and malformed entries) and a
    request after it; return the batch replies once the batch is answered."""
    entries: list[Any] = []
    for i in range(BATCH_N):
        entries.append(json.loads(req(i, METHODS[i % 4], {"i": i, "s": 0.01})))
        if i % 100 == 0:  # notifications and a malformed entry ride along
            entries.append(json.loads(note("_fault/ignored", {"i": i})))
            entries.append(7)
    child.send(json.dumps(entries).encode() + b"\n")
    child.send(req("after", "_fault/echo", {"after": True}))
    child.response("after")  # not queued behind the batch (its handlers are still running)
    child.wait_for(lambda: any(isinstance(m, list) for m in child.lines), what="the batch reply")
    return [m for m in child.lines if isinstance(m, list)]


def test_huge_batch_gets_one_reply_with_one_entry_per_request(engine: ModuleType) -> None:
    with RawChild(agent_argv(), child_env(engine.IMPLEMENTATION)) as child:
        base = warm_rss(child)
        replies = send_huge_batch(child)
        assert len(replies) == 1, "one batch, one reply"
        counts = count_ids(replies)
        assert_once(counts, range(BATCH_N))
        assert counts[key(None)] == BATCH_N // 100  # one error per malformed entry
        assert len(replies[0]) == BATCH_N + BATCH_N // 100  # nothing for notifications
        assert growth_kib(child, base) <= batch_bound_kib(BATCH_N)


def test_batch_bound_sees_a_per_request_leak(engine: ModuleType) -> None:
    """The bound above is tight enough to matter: the same batch against an agent that keeps
    8 KiB per handled request (750 of the 1,000: the unknown method is not handled) fails it."""
    with RawChild(agent_argv(), child_env(engine.IMPLEMENTATION, FAULT_LEAK_KIB="8")) as child:
        base = warm_rss(child)
        replies = send_huge_batch(child)
        assert len(replies) == 1 and len(replies[0]) == BATCH_N + BATCH_N // 100
        assert growth_kib(child, base) > batch_bound_kib(BATCH_N)


def test_over_large_batch_gets_one_error_and_the_connection_survives(engine: ModuleType) -> None:
    """Batch amplification: 2×10^5 tiny entries get one -32600, not one reply each."""
    with RawChild(agent_argv(), child_env(engine.IMPLEMENTATION)) as child:
        base = warm_rss(child)
        line = b"[" + b",".join([b"7"] * 200_000) + b"]\n"  # (10^6 was the audit's case: slow on the pure twin)
        child.send(line)
        child.send(req("after", "_fault/echo", {"after": True}))
        child.response("after")
        errors = [m for m in child.lines if isinstance(m, dict) and m.get("id") is None and "error" in m]
        assert len(errors) == 1 and errors[0]["error"]["code"] == -32600
        assert "batch too large" in errors[0]["error"]["data"]
        assert not any(isinstance(m, list) for m in child.lines)
        assert growth_kib(child, base) <= rejected_batch_bound_kib(len(line))


# ---------------------------------------------------------------------------------------
# EOF with requests in flight (child agent, raw pipes)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("tail", ["", "half-line"])
def test_eof_with_requests_in_flight_answers_every_one_then_exits(engine: ModuleType, tail: str) -> None:
    """The client closes its end right behind its requests (``half-line``: it died in the
    middle of writing one): every complete request is answered once, the unterminated
    last line gets its one parse error, and the agent exits cleanly."""
    with RawChild(agent_argv(), child_env(engine.IMPLEMENTATION)) as child:
        child.start_reading()
        ids = list(range(600))
        lines = [req(i, METHODS[i % 3], {"i": i, "s": 0.05}) for i in ids]
        batch = json.dumps([json.loads(req(1000 + i, METHODS[i % 3], {"i": i, "s": 0.05})) for i in range(100)])
        cut = req("cut", "_fault/echo", {"i": 0})[:25] if tail else b""
        child.send(b"".join(lines) + batch.encode() + b"\n" + cut)
        child.close_stdin()  # EOF right behind the requests
        child.wait_eof()
        assert child.proc.wait(HANG) == 0
        counts = count_ids(child.lines)
        assert_once(counts, ids + [1000 + i for i in range(100)])
        assert counts[key("cut")] == 0
        assert counts[key(None)] == (1 if tail else 0)
        assert len(responses(child.lines)) == len(ids) + 100 + (1 if tail else 0)  # nothing else


# ---------------------------------------------------------------------------------------
# a peer killed mid-line / mid-turn, or exiting with our requests in flight
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["midline", "exit", "sigkill-mid-turn"])
def test_agent_death_fails_each_request_of_ours_exactly_once(engine: ModuleType, how: str) -> None:
    """Our ``Connection`` (the client side) over a real child that dies: every request in
    flight resolves exactly once (-32603), updates read before the death were delivered,
    the half line is not mistaken for a message, and the connection closes."""

    async def body() -> None:
        stream = await spawn(agent_argv(), env=child_env(engine.IMPLEMENTATION))
        conn = Connection(stream, engine=engine)
        updates: list[Any] = []
        conn.on_notification("session/update", updates.append)
        assert await conn.request("_fault/echo", {"x": 1}) == {"x": 1}
        slow = [conn.request("_fault/sleep", {"s": 60}) for _ in range(50)]
        streaming = conn.request("_fault/stream", {"n": 10**9, "size": 100, "drain": True})
        while len(updates) < 10:  # mid-turn: the stream is running
            await asyncio.sleep(0.005)
        if how == "sigkill-mid-turn":
            os.kill(stream.pid, signal.SIGKILL)
            last = []
        else:
            last = [conn.request("_fault/die", {"how": how.split("-")[0]})]
        outcomes = await asyncio.gather(*slow, streaming, *last, return_exceptions=True)
        assert len(outcomes) == len(slow) + 1 + len(last)
        for outcome in outcomes:
            assert isinstance(outcome, JsonRpcError) and outcome.code == -32603, outcome
        await conn.wait_closed()
        assert conn.pending_requests == 0
        with pytest.raises(JsonRpcError):  # and a request after the death fails at once
            await conn.request("_fault/echo", {})

    run(body)


@pytest.mark.parametrize("method", ["_fault/kbd", "_fault/akbd", "_fault/sysexit"])
def test_base_exception_in_a_handler_ends_the_agent_and_each_request_resolves_once(
        engine: ModuleType, method: str) -> None:
    """``KeyboardInterrupt`` / ``SystemExit`` are not answered: they stop the agent (that is
    what they are for). The requester still sees one outcome per request and no hang."""

    async def body() -> None:
        stream = await spawn(agent_argv(), env=child_env(engine.IMPLEMENTATION))
        conn = Connection(stream, engine=engine)
        assert await conn.request("_fault/echo", {"x": 1}) == {"x": 1}
        handles = [conn.request("_fault/sleep", {"s": 60}) for _ in range(5)] + [conn.request(method)]
        outcomes = await asyncio.gather(*handles, return_exceptions=True)
        for outcome in outcomes:  # -32800: the dying agent's shutdown cancelled the handler first
            assert isinstance(outcome, JsonRpcError) and outcome.code in (-32603, -32800), outcome
        await conn.wait_closed()
        assert stream.returncode not in (None, 0)

    run(body)


# ---------------------------------------------------------------------------------------
# a peer that stops reading
# ---------------------------------------------------------------------------------------


def test_client_that_stops_reading_while_flooding_requests_leaves_the_agent_bounded(
        engine: ModuleType) -> None:
    """No request of the agent's own is outstanding: reading pauses with writing, the
    flood blocks, and once the client reads again every request is answered once.
    (With the agent's own request outstanding: defect 2 in test_faults_regressions.py.)"""
    with RawChild(agent_argv(), child_env(engine.IMPLEMENTATION)) as child:
        base = warm_rss(child)
        child.stop_reading()
        chunks = 320  # 20 MiB of 1 KiB echo requests, 64 per write
        flood = child.send_in_background(
            b"".join(req(i * 64 + j, "_fault/echo", {"p": PAD}) for j in range(64)) for i in range(chunks))
        push_until_blocked(flood)
        assert not flood.done, "the agent took the whole flood while nobody read its answers"
        peak = growth_kib(child, base)
        child.start_reading()
        assert flood.wait(HANG)
        total = chunks * 64
        child.wait_for(lambda: len(responses(child.lines)) >= total + 1, what="every echo answer")
        assert_once(count_ids(child.lines), range(total))
        assert peak <= FLOOD_BOUND_KIB and growth_kib(child, base) <= FLOOD_BOUND_KIB


def test_agent_that_stops_reading_blocks_our_draining_sender(engine: ModuleType) -> None:
    """We are the client; the agent never reads its stdin. Requests sent in a loop that
    awaits ``drain()`` block with our write buffer bounded; when the agent dies, every
    request of ours fails exactly once and the sender is released."""

    async def body() -> None:
        stream = await spawn([sys.executable, "-c", "import time; time.sleep(120)"])
        conn = Connection(stream, engine=engine)
        handles: list[Any] = []

        async def sender() -> None:
            for i in range(2000):  # 8 MiB if nothing blocked
                handles.append(conn.request("_fault/echo", {"p": "q" * 4096, "i": i}))
                await conn.drain()

        task = asyncio.ensure_future(sender())
        for _ in range(100):
            await asyncio.sleep(0.01)
        assert not task.done(), "drain() did not block while the peer read nothing"
        assert stream.get_write_buffer_size() <= OWN_WRITE_BUFFER_BOUND
        assert len(handles) < 2000
        os.killpg(stream.pid, signal.SIGKILL)
        await asyncio.wait_for(task, HANG)
        outcomes = await asyncio.gather(*handles, return_exceptions=True)
        for outcome in outcomes:
            assert isinstance(outcome, JsonRpcError) and outcome.code == -32603, outcome
        await conn.wait_closed()

    run(body)


# ---------------------------------------------------------------------------------------
# oversize lines and malformed floods (child agent, raw pipes)
# ---------------------------------------------------------------------------------------

#: Lines each answered by exactly one ``id: null`` error reply (protocol.md: a malformed
#: line is reported to the peer, never fatal).
JUNK = [b"hello", b"[", b"{", b"{}", b"[]", b"1", b'"s"', b"null", b'{"jsonrpc":"2.0","id":7}',
        b'{"jsonrpc":"1.0","id":8,"method":"x"}', b'{"jsonrpc":"2.0","id":9,"method":5}',
        b"\xff\xfe\x00garbage", b"[[[[[[[[[[", b'{"jsonrpc":"2.0","method":"n","params":3}',
        b'{"jsonrpc":"2.0","id":{},"method":"x"}', b'{"a":1}', b'{"jsonrpc":"2.0","id":11,"method":"x"}garbage']
#: Lines answered by nothing: blank lines and responses to requests we never sent.
SILENT = [b"", b"   ", b"\t", b'{"jsonrpc":"2.0","id":10,"result":1}',
          b'{"jsonrpc":"2.0","id":10,"result":1,"error":{}}']


def test_malformed_flood_answers_each_line_once_and_stays_bounded(engine: ModuleType) -> None:
    rng = random.Random(8)
    with RawChild(agent_argv(), child_env(engine.IMPLEMENTATION)) as child:
        base = warm_rss(child)
        child.start_reading()
        junk_lines = 0
        echo_ids: list[int] = []
        chunks = []
        for c in range(96):  # ~16 MiB in 96 writes
            parts = []
            while sum(map(len, parts)) < 170_000:
                r = rng.random()
                if r < 0.45:
                    parts.append(rng.choice(JUNK) + (b" " * rng.randrange(2000) if rng.random() < 0.5 else b""))
                    junk_lines += 1
                elif r < 0.55:
                    parts.append(rng.choice(SILENT))
                else:
                    echo_ids.append(len(echo_ids))
                    parts.append(req(echo_ids[-1], "_fault/echo", {"p": PAD[: rng.randrange(1000)]})[:-1])
            chunks.append(b"\n".join(parts) + b"\n")
        flood = child.send_in_background(chunks)
        assert flood.wait(HANG) and flood.error is None
        expected = len(echo_ids) + junk_lines + 1
        child.wait_for(lambda: len(responses(child.lines)) >= expected, what="every reply")
        child.send(req("probe", "_fault/echo", {}))
        child.response("probe")
        counts = count_ids(child.lines)
        assert_once(counts, echo_ids)
        assert counts[key(None)] == junk_lines
        assert len(responses(child.lines)) == expected + 1
        assert growth_kib(child, base) <= FLOOD_BOUND_KIB


def test_oversize_lines_are_answered_once_and_the_connection_lives_on(engine: ModuleType) -> None:
    limit = 1 << 20
    with RawChild(agent_argv(), child_env(engine.IMPLEMENTATION, FAULT_MAX_LINE=str(limit))) as child:
        base = warm_rss(child)
        child.start_reading()
        big = b'{"jsonrpc":"2.0","id":"big","method":"_fault/echo","params":{"p":"' + b"z" * (8 << 20) + b'"}}\n'
        chunks = []
        for i in range(3):  # 24 MiB of over-long lines, each followed by a good request
            chunks += [big[j:j + 65536] for j in range(0, len(big), 65536)]
            chunks.append(req(i, "_fault/echo", {"i": i}))
        flood = child.send_in_background(chunks)
        assert flood.wait(HANG) and flood.error is None
        child.send(req("probe", "_fault/echo", {}))
        child.response("probe")
        counts = count_ids(child.lines)
        assert_once(counts, [0, 1, 2, "probe"])
        assert counts[key("big")] == 0 and counts[key(None)] == 3  # one id-less error per long line
        assert all(r["error"]["code"] == -32600 for r in responses(child.lines) if r["id"] is None)
        assert growth_kib(child, base) <= FLOOD_BOUND_KIB


# ---------------------------------------------------------------------------------------
# handler exceptions of every kind (in process; str()/items() raising: defect 5, in
# test_faults_regressions.py)
# ---------------------------------------------------------------------------------------


class _Unencodable:
    pass


def _circular() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["self"] = d
    return d


def _raise(exc: BaseException) -> Any:
    raise exc


FAULTS: dict[str, tuple[Any, int | None]] = {
    # kind: (what the handler does, the error code expected; None: a result)
    "value-error": (lambda: _raise(ValueError("boom")), -32603),
    "jsonrpc-error": (lambda: _raise(JsonRpcError(-32602, data="bad params")), -32602),
    "jsonrpc-error-unencodable-data": (lambda: _raise(JsonRpcError(-32000, data=_Unencodable())), -32603),
    "unencodable-result": (lambda: _Unencodable(), -32603),
    "circular-result": (lambda: _circular(), -32603),
    "huge-int-result": (lambda: 2 ** 200, None),  # JSON has no size limit on integers
    "recursion-error": (lambda: _raise(RecursionError("deep")), -32603),
    "stop-iteration": (lambda: _raise(StopIteration()), -32603),
}


def _fault_handler(kind: str, is_async: bool) -> Any:
    action = FAULTS[kind][0]

    def sync(params: Any, cx: Any) -> Any:
        return action()

    async def coro(params: Any, cx: Any) -> Any:
        await asyncio.sleep(0)
        return action()

    return coro if is_async else sync


async def _serve(agent: Any, engine: ModuleType) -> tuple[Any, Any, list[Any]]:
    a, b = memory_pair()
    served = asyncio.ensure_future(agent.serve(a, engine=engine))
    got: list[Any] = []
    buf = [b""]

    def data(chunk: bytes) -> None:
        *lines, buf[0] = (buf[0] + chunk).split(b"\n")
        got.extend(json.loads(line) for line in lines if line)

    b.attach(data, lambda exc: None, lambda w: None)
    return served, b, got


async def _until(got: list[Any], rid: Any, guard: float = 10.0) -> None:
    """Wait for the response to ``rid`` in ``got`` (batch replies included)."""
    deadline = time.monotonic() + guard
    while not any(r.get("id") == rid for r in responses(got)):
        assert time.monotonic() < deadline, f"no answer to {rid!r} (hang guard); got {got!r:.2000}"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_handler_fault_answers_exactly_once_and_spares_its_neighbours(
        engine: ModuleType, kind: str, is_async: bool) -> None:
    async def body() -> None:
        agent = Agent.builder()
        agent.on_request("_fault/bad", _fault_handler(kind, is_async))
        agent.on_request("_fault/echo", lambda params, cx: params)

        async def aecho(params: Any, cx: Any) -> Any:
            await asyncio.sleep(0)
            return params

        agent.on_request("_fault/aecho", aecho)
        served, b, got = await _serve(agent, engine)
        # the faulty request in a batch, alone, and before a neighbour in the same read
        b.write(req("bad", "_fault/bad") + req("next", "_fault/echo", {"n": 1})
                + b"[" + req("in-batch", "_fault/bad")[:-1] + b","
                + req("batch-next", "_fault/aecho", {"b": 2})[:-1] + b"]\n")
        for _ in range(5):
            await asyncio.sleep(0)
        b.write(req("probe", "_fault/aecho", {}))
        await _until(got, "probe")
        await _until(got, "batch-next")
        counts = count_ids(got)
        assert_once(counts, ["bad", "next", "in-batch", "batch-next", "probe"])
        code = FAULTS[kind][1]
        for rid in ("bad", "in-batch"):
            answer = next(r for r in responses(got) if r["id"] == rid)
            if code is None:
                assert "result" in answer, answer
            else:
                assert answer["error"]["code"] == code, answer
        b.close()
        await asyncio.wait_for(served, HANG)  # the connection still closes after EOF

    run(body)


async def _raw_agent(engine: ModuleType) -> tuple[Connection, Any, list[Any]]:
    """A plain ``Connection`` on one end of a memory pair; the other end's lines go to ``got``."""
    a, b = memory_pair()
    conn = Connection(a, engine=engine)
    got: list[Any] = []
    buf = [b""]

    def data(chunk: bytes) -> None:
        *lines, buf[0] = (buf[0] + chunk).split(b"\n")
        got.extend(json.loads(line) for line in lines if line)

    b.attach(data, lambda exc: None, lambda w: None)
    return conn, b, got


def test_handler_cancelled_from_inside_answers_32800_once(engine: ModuleType) -> None:
    async def body() -> None:
        conn, b, got = await _raw_agent(engine)

        async def self_cancel(ctx: RequestContext) -> Any:
            raise asyncio.CancelledError

        async def awaits_a_cancelled_task(ctx: RequestContext) -> Any:
            inner = asyncio.ensure_future(asyncio.sleep(60))
            inner.cancel()
            return await inner

        conn.on_request("self-cancel", self_cancel)
        conn.on_request("inner-cancel", awaits_a_cancelled_task)
        conn.on_request("echo", lambda ctx: ctx.params)
        b.write(req(1, "self-cancel") + req(2, "inner-cancel") + req(3, "echo", {"v": 3}))
        await _until(got, 1)
        await _until(got, 2)
        b.write(req(4, "echo", {"v": 4}))
        await _until(got, 4)
        assert_once(count_ids(got), [1, 2, 3, 4])
        codes = {r["id"]: r.get("error", {}).get("code") for r in responses(got)}
        assert codes[1] == -32800 and codes[2] == -32800
        b.close()
        await asyncio.wait_for(conn.wait_closed(), HANG)

    run(body)


def test_dropped_responder_still_answers_once(engine: ModuleType) -> None:
    async def body() -> None:
        conn, b, got = await _raw_agent(engine)
        conn.on_request("drop", lambda ctx: ctx.defer() and None)  # the responder dies at once
        conn.on_request("echo", lambda ctx: ctx.params)
        b.write(req(1, "drop") + req(2, "echo", {"v": 2}))
        await _until(got, 2)
        b.write(req(3, "echo", {"v": 3}))
        await _until(got, 3)
        assert_once(count_ids(got), [1, 2, 3])
        b.close()
        await asyncio.wait_for(conn.wait_closed(), HANG)

    run(body)


# ---------------------------------------------------------------------------------------
# cancellation races (in process)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cancellation_races_answer_each_request_exactly_once(engine: ModuleType, seed: int) -> None:
    """``$/cancel_request`` before, with, right after, long after and twice for each
    request, in random reads: each request gets one answer (its result or -32800)."""
    rng = random.Random(seed)
    n = 400

    async def body() -> None:
        conn, b, got = await _raw_agent(engine)

        async def work(ctx: RequestContext) -> Any:
            delay = ctx.params["d"]
            if delay < 0:
                return ctx.params  # finishes before any cancel can land
            return await ctx.run_until_cancelled(asyncio.sleep(delay, ctx.params))

        def sync_work(ctx: RequestContext) -> Any:
            ctx.raise_if_cancelled()
            return ctx.params

        conn.on_request("work", work)
        conn.on_request("sync", sync_work)
        events: list[tuple[float, bytes]] = []
        sleepers: list[int] = []
        for i in range(n):
            t = rng.random() * 0.2
            method = "sync" if i % 5 == 0 else "work"
            params = {"d": rng.choice([-1, 0, 0.001, 0.01, 0.05, 10]), "i": i}
            if params["d"] == 10 and method == "work":
                sleepers.append(i)
            events.append((t, req(i, method, params)))
            cancel = note("$/cancel_request", {"requestId": i})
            for _ in range(rng.randrange(3)):
                events.append((max(0.0, t + rng.choice([-0.01, 0, 0, 0.001, 0.02, 0.1])), cancel))
            events.append((t + 0.3, cancel))  # after everything finished or was cancelled
        events.sort(key=lambda e: e[0])
        start = time.monotonic()
        batch: list[bytes] = []
        for at, line in events:
            if batch and at > time.monotonic() - start:
                b.write(b"".join(batch))
                batch = []
                await asyncio.sleep(max(0.0, at - (time.monotonic() - start)))
            batch.append(line)
        b.write(b"".join(batch))
        b.write(req("probe", "sync", {}))
        await _until(got, "probe")
        while len(responses(got)) < n + 1:  # the 10 s sleepers all end by their late cancel
            await asyncio.sleep(0.01)
        counts = count_ids(got)
        assert_once(counts, range(n))
        for r in responses(got):
            assert "result" in r or r["error"]["code"] == -32800, r
        for rid in sleepers:  # the cancellation took effect: none of them waited its 10 s
            assert next(r for r in responses(got) if r["id"] == rid)["error"]["code"] == -32800
        b.close()
        await asyncio.wait_for(conn.wait_closed(), HANG)

    run(body)
