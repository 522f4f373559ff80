"""Connection (acp_fast.jsonrpc) rules, on both engine twins, over in-memory pairs.

The ``engine`` fixture (tests/conftest.py) runs every test on both twins.

Every test drives a real ``Connection`` through ``memory_pair()`` (the same asyncio
``Protocol`` callbacks as the OS transports). The far end is either another
``Connection`` or a ``RawPeer`` that writes and reads raw lines, so the bytes on the wire
are checked exactly. Child processes and sockets: ``test_transport.py``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from wire_messages import err, note, ok, req

from acp_fast import engine as _engine
from acp_fast.errors import JsonRpcError
from acp_fast.jsonrpc import Connection, RequestContext
from acp_fast.transport import Stream, memory_pair

HANG_GUARD = 30  # seconds; only stops a hung test, never asserts speed


def run(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(fn(*args), HANG_GUARD)

    return asyncio.run(guarded())


class RawPeer:
    """The far end of a memory pair, speaking raw lines."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self._buf = b""
        self.lines: asyncio.Queue[Any] = asyncio.Queue()
        self.chunks: list[bytes] = []
        self.eof = asyncio.Event()
        stream.attach(self._data, self._eof, lambda ok: None)

    def _data(self, data: bytes) -> None:
        self.chunks.append(data)
        *lines, self._buf = (self._buf + data).split(b"\n")
        for line in lines:
            self.lines.put_nowait(json.loads(line))

    def _eof(self, exc: BaseException | None) -> None:
        self.eof.set()

    def send(self, *items: Any) -> None:
        """Write items (objects are JSON-encoded, bytes go as is) in one chunk."""
        data = b"".join(i if isinstance(i, bytes) else json.dumps(i).encode() + b"\n" for i in items)
        self.stream.write(data)

    async def recv(self) -> Any:
        return await self.lines.get()

    async def probe(self, ident: Any = "probe") -> None:
        """Assert nothing was written before the answer to a fresh ``echo`` request."""
        self.send(req(ident, "echo", {"probe": True}))
        got = await self.recv()
        assert got == {"jsonrpc": "2.0", "id": ident, "result": {"probe": True}}, got


def with_peer(engine: Any, **kwargs: Any) -> tuple[Connection, RawPeer]:
    a, b = memory_pair()
    conn = Connection(a, engine=engine, **kwargs)
    conn.on_request("echo", lambda ctx: ctx.params)
    return conn, RawPeer(b)


def record_writes(conn: Connection) -> list[bytes]:
    """The chunks ``conn`` hands its stream from now on (still written)."""
    writes: list[bytes] = []
    real_write = conn.stream.write

    def spy(data: bytes) -> None:
        writes.append(data)
        real_write(data)

    conn.stream.write = spy  # type: ignore[method-assign]
    return writes


def two(engine: Any, **kwargs: Any) -> tuple[Connection, Connection]:
    a, b = memory_pair()
    return Connection(a, engine=engine, **kwargs), Connection(b, engine=engine, **kwargs)


# ---------------------------------------------------------------------------------------
# requests, ids, responses
# ---------------------------------------------------------------------------------------


def test_request_roundtrip_between_two_connections(engine: Any) -> None:
    async def main() -> None:
        client, agent = two(engine)
        agent.on_request("add", lambda ctx: ctx.params["a"] + ctx.params["b"])
        assert await client.request("add", {"a": 2, "b": 3}) == 5
        assert client.pending_requests == 0

    run(main)


def test_outgoing_ids_are_ints_allocated_by_us(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        h1, h2 = conn.request("a"), conn.request("b", [1])
        assert (await peer.recv(), await peer.recv()) == (req(1, "a"), req(2, "b", [1]))
        assert (h1.id, h2.id) == (1, 2)
        peer.send(ok(2, "two"), ok(1, "one"))
        assert (await h1, await h2) == ("one", "two")

    run(main)


def test_peer_ids_of_any_type_are_echoed_verbatim(engine: Any) -> None:
    async def main() -> None:
        _conn, peer = with_peer(engine)
        for ident in ("abc", None, 2**63 - 1, -7, 0, "1"):
            peer.send(req(ident, "echo", [ident]))
            assert await peer.recv() == ok(ident, [ident])

    run(main)


def test_pending_table_is_typed_string_1_does_not_answer_int_1(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        handle = conn.request("m")
        assert (await peer.recv())["id"] == 1
        peer.send(ok("1", "wrong"))
        await peer.probe()
        assert not handle.done()
        peer.send(ok(1, "right"))
        assert await handle == "right"

    with caplog.at_level(logging.WARNING, "acp_fast.jsonrpc"):
        run(main)
    assert "unknown request id '1'" in caplog.text


def test_unknown_id_response_is_logged_and_dropped(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        _conn, peer = with_peer(engine)
        peer.send(ok(42, None), err(43, -1, "x"))
        await peer.probe()  # nothing written back, connection alive

    with caplog.at_level(logging.WARNING, "acp_fast.jsonrpc"):
        run(main)
    assert "unknown request id 42" in caplog.text and "unknown request id 43" in caplog.text


def test_duplicate_response_first_wins_second_dropped(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        handle = conn.request("m")
        await peer.recv()
        peer.send(ok(1, "first"), ok(1, "second"))
        assert await handle == "first"
        await peer.probe()

    with caplog.at_level(logging.WARNING, "acp_fast.jsonrpc"):
        run(main)
    assert caplog.text.count("unknown request id 1") == 1


def test_error_response_raises_jsonrpc_error_with_data(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        handle = conn.request("m")
        await peer.recv()
        peer.send(err(1, -32042, "Custom", {"k": [1]}))
        with pytest.raises(JsonRpcError) as info:
            await handle
        assert (info.value.code, info.value.message, info.value.data) == (-32042, "Custom", {"k": [1]})

    run(main)


# ---------------------------------------------------------------------------------------
# handlers
# ---------------------------------------------------------------------------------------


def test_unhandled_request_gets_32601_with_method_as_data(engine: Any) -> None:
    async def main() -> None:
        _conn, peer = with_peer(engine)
        peer.send(req(5, "unknown/request"))
        assert await peer.recv() == err(5, -32601, "Method not found", "unknown/request")

    run(main)


def test_unhandled_notification_is_ignored(engine: Any) -> None:
    async def main() -> None:
        _conn, peer = with_peer(engine)
        peer.send(note("nobody/listens", {"a": 1}))
        await peer.probe()

    run(main)


def test_fallback_handlers_get_unregistered_methods(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        seen: list[str] = []
        conn.on_any_request(lambda ctx: f"fallback:{ctx.method}")
        conn.on_any_notification(lambda msg: seen.append(msg.method))
        peer.send(req(1, "x/y"), note("n/1"))
        assert await peer.recv() == ok(1, "fallback:x/y")
        await peer.probe()
        assert seen == ["n/1"]

    run(main)


def test_decorator_registration_and_context_fields(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)

        @conn.on_request("ctx")
        def ctx_fields(ctx: RequestContext) -> Any:
            assert ctx.connection is conn and ctx.message.method == "ctx"
            return [ctx.id, ctx.method, ctx.params, ctx.cancelled]

        peer.send(req("i", "ctx", {"p": 1}))
        assert await peer.recv() == ok("i", ["i", "ctx", {"p": 1}, False])

    run(main)


def test_handler_returning_none_answers_null(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        conn.on_request("none", lambda ctx: None)
        peer.send(req(1, "none"))
        assert await peer.recv() == ok(1, None)

    run(main)


def test_handler_raising_jsonrpc_error_answers_it(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)

        def bad(ctx: RequestContext) -> None:
            raise JsonRpcError.invalid_params({"field": "x"})

        async def auth(ctx: RequestContext) -> None:
            raise JsonRpcError(-32000)

        conn.on_request("bad", bad)
        conn.on_request("auth", auth)
        peer.send(req(1, "bad"), req(2, "auth"))
        assert await peer.recv() == err(1, -32602, "Invalid params", {"field": "x"})
        assert await peer.recv() == err(2, -32000, "Authentication required")

    run(main)


def test_handler_exception_answers_32603_and_logs_traceback(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)

        def boom(ctx: RequestContext) -> None:
            raise ValueError("boom")

        async def aboom(ctx: RequestContext) -> None:
            await asyncio.sleep(0)
            raise KeyError("k")

        conn.on_request("boom", boom)
        conn.on_request("aboom", aboom)
        peer.send(req(1, "boom"), req(2, "aboom"))
        assert await peer.recv() == err(1, -32603, "Internal error", "ValueError: boom")
        assert await peer.recv() == err(2, -32603, "Internal error", "KeyError: 'k'")

    with caplog.at_level(logging.ERROR, "acp_fast.jsonrpc"):
        run(main)
    assert "Traceback" in caplog.text and "ValueError: boom" in caplog.text


def test_unencodable_result_answers_32603(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        conn.on_request("obj", lambda ctx: object())
        peer.send(req(1, "obj"))
        got = await peer.recv()
        assert got["id"] == 1 and got["error"]["code"] == -32603
        assert got["error"]["data"].startswith("result could not be encoded")

    run(main)


def test_sync_handlers_run_inline_and_coroutines_become_tasks(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        where: list[Any] = []

        def sync(ctx: RequestContext) -> None:
            where.append(asyncio.current_task())

        async def coro(ctx: RequestContext) -> None:
            where.append(asyncio.current_task())

        conn.on_request("sync", sync)
        conn.on_request("coro", coro)
        conn.on_notification("n", lambda msg: where.append(asyncio.current_task()))
        peer.send(*[req(i, "sync") for i in range(50)], *[note("n") for _ in range(50)])
        for _ in range(50):
            await peer.recv()
        await peer.probe()
        assert where == [None] * 100  # no Task per message
        peer.send(req("c", "coro"))
        await peer.recv()
        assert where[-1] is not None

    run(main)


@pytest.mark.seed("S000-04")
def test_lines_of_one_read_are_coalesced_into_one_write(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        writes = record_writes(conn)
        peer.send(*[req(i, "echo", [i]) for i in range(20)])
        for i in range(20):
            assert await peer.recv() == ok(i, [i])
        assert len(writes) == 1 and writes[0].count(b"\n") == 20
        # requests/notifications made in one loop turn: one write, separate objects
        for i in range(5):
            conn.request("r", [i]).detach()
            conn.notify("n", [i])
        await asyncio.sleep(0)
        assert len(writes) == 2 and writes[1].count(b"\n") == 10 and not writes[1].startswith(b"[")

    run(main)


def test_notifications_complete_in_arrival_order_sync_and_async(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        order: list[int] = []

        async def slow(msg: Any) -> None:
            for _ in range(msg.params["i"] % 3):
                await asyncio.sleep(0)
            order.append(msg.params["i"])

        conn.on_notification("slow", slow)
        conn.on_notification("fast", lambda msg: order.append(msg.params["i"]))
        peer.send(*[note("slow" if i % 2 else "fast", {"i": i}) for i in range(40)])
        peer.send(*[note("slow" if i % 3 else "fast", {"i": i}) for i in range(40, 80)])
        await peer.probe()  # a request waits behind queued notifications (one FIFO)
        assert order == list(range(80))

    run(main)


def test_handler_may_await_its_own_request_to_the_peer(engine: Any) -> None:
    async def main() -> None:
        client, agent = two(engine)
        answers: list[Any] = []

        async def prompt(ctx: RequestContext) -> Any:
            allowed = await ctx.connection.request("session/request_permission", {"tool": "rm"})
            return {"stopReason": "end_turn", "allowed": allowed}

        async def update(msg: Any) -> None:  # an async notification handler blocks the FIFO
            answers.append(await agent.request("fs/read", {"n": msg.params["n"]}))

        agent.on_request("session/prompt", prompt)
        agent.on_notification("update", update)
        client.on_request("session/request_permission", lambda ctx: ctx.params["tool"] == "rm")
        client.on_request("fs/read", lambda ctx: ctx.params["n"] * 2)
        assert await client.request("session/prompt") == {"stopReason": "end_turn", "allowed": True}
        for n in range(3):
            client.notify("update", {"n": n})
        assert await client.request("session/prompt") == {"stopReason": "end_turn", "allowed": True}
        assert answers == [0, 2, 4]

    run(main)


def test_deferred_responder_answers_later_and_second_answer_is_ignored(
    engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        held: list[Any] = []
        conn.on_request("later", lambda ctx: held.append(ctx.defer()) or "ignored return value")
        peer.send(req(1, "later"))
        await peer.probe()
        responder = held[0]
        assert responder.respond({"done": True}) is True
        assert responder.respond("again") is False
        assert responder.respond_error(JsonRpcError(-1)) is False
        assert await peer.recv() == ok(1, {"done": True})
        await peer.probe()

    with caplog.at_level(logging.WARNING, "acp_fast.jsonrpc"):
        run(main)
    assert "answered twice" in caplog.text


def test_dropped_responder_is_reported_and_answered_once(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        conn.on_request("forget", lambda ctx: ctx.defer() and None)
        peer.send(req(1, "forget"))
        # every request gets one answer (the Rust SDK sends none for a standalone request;
        # acp_fast answers it like a batch slot, protocol.md §2.11)
        reply = await peer.recv()
        assert reply["id"] == 1 and reply["error"]["code"] == -32603
        assert reply["error"]["data"] == "request handler dropped its responder for `forget`"
        await peer.probe()

    with caplog.at_level(logging.ERROR, "acp_fast.jsonrpc"):
        run(main)
    assert any(r.levelno == logging.ERROR and "dropped its responder" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------
# batches (protocol.md §2)
# ---------------------------------------------------------------------------------------


def batch_handlers(conn: Connection) -> None:
    def bad_params(ctx: RequestContext) -> None:
        raise JsonRpcError.invalid_params()

    def handler_error(ctx: RequestContext) -> None:
        raise RuntimeError("handler failed")

    def note_error(msg: Any) -> None:
        raise RuntimeError("notification handler failed")

    conn.on_request("ok", lambda ctx: {"ok": ctx.id})
    conn.on_request("bad_params", bad_params)
    conn.on_request("handler_error", handler_error)
    conn.on_notification("note_ok", lambda msg: None)
    conn.on_notification("note_bad_params", note_error)
    conn.on_notification("note_error", note_error)


@pytest.mark.seed("S000-02")
def test_batch_mixed_example_gives_exactly_four_replies(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        batch_handlers(conn)
        peer.send(json.dumps([
            req(1, "ok"), note("note_ok"), 17, req(2, "bad_params", {"x": 1}), req(3, "handler_error"),
            {"jsonrpc": "2.0", "id": 99, "result": None, "error": {"code": 1, "message": "m"}},
            note("note_bad_params", {"x": 1}), note("note_error"),
        ]).encode() + b"\n")
        reply = await peer.recv()
        assert reply == [
            ok(1, {"ok": 1}),
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid request", "data": "not an object"}},
            err(2, -32602, "Invalid params"),
            err(3, -32603, "Internal error", "RuntimeError: handler failed"),
        ]
        await peer.probe()

    run(main)


def test_notification_only_batch_writes_nothing(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        batch_handlers(conn)
        seen: list[int] = []
        conn.on_notification("n", lambda msg: seen.append(msg.params[0]))
        peer.send(json.dumps([note("n", [1]), note("n", [2]), note("note_error")]).encode() + b"\n")
        handle = conn.request("m")
        await peer.recv()  # our request
        peer.send(json.dumps([ok(1, "via batch"), {"jsonrpc": "2.0", "id": 7, "result": 1, "error": {}}]).encode() + b"\n")
        assert await handle == "via batch"
        await peer.probe()  # no empty array, no error for the malformed response entry
        assert seen == [1, 2]

    run(main)


def test_incomplete_batch_does_not_block_a_later_standalone_request(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        gate = asyncio.Event()

        async def slow(ctx: RequestContext) -> str:
            await gate.wait()
            return "slow done"

        conn.on_request("slow", slow)
        peer.send(json.dumps([req(1, "slow"), req(2, "echo", ["fast"])]).encode() + b"\n")
        peer.send(req(3, "echo", ["standalone"]))
        assert await peer.recv() == ok(3, ["standalone"])  # nothing of the batch was emitted early
        gate.set()
        assert await peer.recv() == [ok(1, "slow done"), ok(2, ["fast"])]

    run(main)


def test_empty_batch_gets_one_invalid_request_object(engine: Any) -> None:
    async def main() -> None:
        _conn, peer = with_peer(engine)
        peer.send(b"[]\n")
        assert await peer.recv() == {"jsonrpc": "2.0", "id": None,
                                     "error": {"code": -32600, "message": "Invalid request", "data": "empty batch"}}

    run(main)


def test_batch_duplicate_ids_keep_distinct_slots(engine: Any) -> None:
    async def main() -> None:
        _conn, peer = with_peer(engine)
        peer.send(json.dumps([req(21, "echo", ["a"]), req(21, "echo", ["b"])]).encode() + b"\n")
        assert await peer.recv() == [ok(21, ["a"]), ok(21, ["b"])]

    run(main)


def test_batch_dropped_responder_slot_gets_32603_fallback(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        conn.on_request("forget", lambda ctx: ctx.defer() and None)

        async def forget_later(ctx: RequestContext) -> None:
            responder = ctx.defer()
            await asyncio.sleep(0)
            del responder

        conn.on_request("forget_later", forget_later)
        peer.send(json.dumps([req(1, "forget"), req(2, "echo", [2]), req(3, "forget_later")]).encode() + b"\n")
        assert await peer.recv() == [
            err(1, -32603, "Internal error", "request handler dropped its responder for `forget`"),
            ok(2, [2]),
            err(3, -32603, "Internal error", "request handler dropped its responder for `forget_later`"),
        ]

    with caplog.at_level(logging.ERROR, "acp_fast.jsonrpc"):
        run(main)
    assert caplog.text.count("dropped its responder") == 2


def test_batch_reply_waits_for_async_notification_handlers_in_order(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        order: list[str] = []

        async def slow(msg: Any) -> None:
            await asyncio.sleep(0)
            order.append(msg.params[0])

        conn.on_notification("slow", slow)
        conn.on_request("mark", lambda ctx: order.append(ctx.params[0]))
        peer.send(json.dumps([note("slow", ["n1"]), req(1, "mark", ["r1"]), note("slow", ["n2"]),
                              req(2, "mark", ["r2"])]).encode() + b"\n")
        assert await peer.recv() == [ok(1, None), ok(2, None)]
        assert order == ["n1", "r1", "n2", "r2"]

    run(main)


# ---------------------------------------------------------------------------------------
# malformed lines and the on_invalid policy
# ---------------------------------------------------------------------------------------


def test_standalone_malformed_lines_are_answered(engine: Any) -> None:
    async def main() -> None:
        _conn, peer = with_peer(engine)
        peer.send(b"not json\n", {"jsonrpc": "1.0", "id": 1, "method": "x"}, {"jsonrpc": "2.0", "method": 5})
        assert await peer.recv() == err(None, -32700, "Parse error", {"line": "not json"})
        assert await peer.recv() == err(None, -32600, "Invalid request", "invalid jsonrpc version")
        assert await peer.recv() == err(None, -32600, "Invalid request", "invalid method")

    run(main)


def test_malformed_response_shaped_lines_are_never_answered(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        _conn, peer = with_peer(engine)
        peer.send({"jsonrpc": "2.0", "id": 1, "error": {"code": "x"}}, {"jsonrpc": "2.0", "result": 1})
        await peer.probe()

    with caplog.at_level(logging.WARNING, "acp_fast.jsonrpc"):
        run(main)
    assert "malformed response dropped" in caplog.text


def test_banner_line_policy_reply_answers_and_skip_skips(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        _conn, peer = with_peer(engine)  # memory stream: default "reply"
        peer.send(b"Starting agent v1.0...\n")
        assert await peer.recv() == err(None, -32700, "Parse error", {"line": "Starting agent v1.0..."})
        _conn2, peer2 = with_peer(engine, on_invalid="skip")
        peer2.send(b"Starting agent v1.0...\n", b'{"level":"info"}\n', b"[1]\n")
        # a batch is JSON-RPC: its invalid entries are still answered
        assert await peer2.recv() == [err(None, -32600, "Invalid request", "not an object")]
        await peer2.probe()
        with pytest.raises(ValueError):
            with_peer(engine, on_invalid="ignore")

    with caplog.at_level(logging.WARNING, "acp_fast.jsonrpc"):
        run(main)
    assert "Starting agent" in caplog.text


# ---------------------------------------------------------------------------------------
# cancellation (protocol.md §4.1)
# ---------------------------------------------------------------------------------------


def test_incoming_cancel_marks_the_request_and_handler_answers_32800(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        observed: list[bool] = []
        forwarded: list[Any] = []

        async def wait(ctx: RequestContext) -> None:
            await ctx.wait_cancelled()
            observed.append(ctx.cancelled)
            ctx.raise_if_cancelled()

        async def race(ctx: RequestContext) -> Any:
            return await ctx.run_until_cancelled(asyncio.Event().wait())

        conn.on_request("wait", wait)
        conn.on_request("race", race)
        conn.on_notification("$/cancel_request", lambda msg: forwarded.append(msg.params))
        peer.send(req(1, "wait"), req("r", "race"))
        await peer.probe()
        peer.send(note("$/cancel_request", {"requestId": 1}), note("$/cancel_request", {"requestId": "r"}))
        replies = [await peer.recv(), await peer.recv()]
        assert sorted(replies, key=str) == sorted(
            [err(1, -32800, "Request cancelled"), err("r", -32800, "Request cancelled")], key=str)
        assert observed == [True]
        assert forwarded == [{"requestId": 1}, {"requestId": "r"}]  # still reaches a handler

    run(main)


def test_task_free_forwarding_with_cancel_and_done_callbacks(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    # a handler that forwards each request to the peer and answers from callbacks (no task):
    # add_cancel_callback passes the peer's cancellation on, add_done_callback answers
    async def main() -> None:
        conn, peer = with_peer(engine)
        cancels: list[Any] = []
        contexts: dict[Any, RequestContext] = {}

        def forward(ctx: RequestContext) -> None:
            contexts[ctx.id] = ctx
            responder = ctx.defer()
            pending = conn.request("inner/" + ctx.method, ctx.params)
            ctx.add_cancel_callback(pending.cancel)
            ctx.add_cancel_callback(lambda: cancels.append(ctx.id))
            ctx.add_cancel_callback(lambda: 1 / 0)  # logged, the others still run

            def answered(fut: asyncio.Future[Any]) -> None:
                exc = fut.exception()
                if exc is not None:
                    responder.respond_error(exc)
                else:
                    responder.respond(fut.result())

            pending.add_done_callback(answered)

        for method in ("a", "b", "c"):
            conn.on_request(method, forward)
        conn.on_request("boom", lambda ctx: ctx.defer().respond_error(RuntimeError("boom")))
        peer.send(req(10, "a", [1]), req(11, "b"), req(12, "c"))
        assert [await peer.recv() for _ in range(3)] == [req(1, "inner/a", [1]), req(2, "inner/b"), req(3, "inner/c")]
        peer.send(ok(1, {"x": 1}), err(2, -32001, "nope", {"why": 2}))
        assert await peer.recv() == ok(10, {"x": 1})
        assert await peer.recv() == err(11, -32001, "nope", {"why": 2})
        peer.send(note("$/cancel_request", {"requestId": 12}))
        assert await peer.recv() == note("$/cancel_request", {"requestId": 3})  # passed on, at once
        assert cancels == [12]
        late: list[str] = []
        contexts[12].add_cancel_callback(lambda: late.append("late"))  # already cancelled: runs soon
        await asyncio.sleep(0)
        assert late == ["late"] and cancels == [12]
        peer.send(err(3, -32800, "Request cancelled"))
        assert await peer.recv() == err(12, -32800, "Request cancelled")
        # a deferred answer with an exception that is not a JsonRpcError: -32603, as from a raising handler
        peer.send(req(13, "boom"))
        reply = await peer.recv()
        assert reply["id"] == 13 and reply["error"]["code"] == -32603
        await peer.probe()
        assert conn.pending_requests == 0

    with caplog.at_level(logging.ERROR, "acp_fast.jsonrpc"):
        run(main)
    assert "cancel callback of request 12" in caplog.text and "ZeroDivisionError" in caplog.text


def test_incoming_cancel_matches_typed_ids_only(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        state: dict[Any, RequestContext] = {}

        async def wait(ctx: RequestContext) -> bool:
            state[ctx.id] = ctx
            await ctx.wait_cancelled()
            return True

        conn.on_request("wait", wait)
        peer.send(req(1, "wait"))
        await peer.probe()
        for bogus in ("1", True, 1.0, [1], None, 2):
            peer.send(note("$/cancel_request", {"requestId": bogus}))
        peer.send(note("$/cancel_request", {}), note("$/cancel_request", [1]), note("$/cancel_request"))
        await peer.probe()
        assert not state[1].cancelled
        peer.send(note("$/cancel_request", {"requestId": 1}))
        assert await peer.recv() == ok(1, True)

    with caplog.at_level(logging.WARNING, "acp_fast.jsonrpc"):
        run(main)
    assert "malformed $/cancel_request" in caplog.text


def test_cancel_after_completion_is_ignored(engine: Any) -> None:
    async def main() -> None:
        _conn, peer = with_peer(engine)
        peer.send(req(1, "echo", [1]))
        assert await peer.recv() == ok(1, [1])
        peer.send(note("$/cancel_request", {"requestId": 1}))
        await peer.probe()

    run(main)


def test_outgoing_cancel_is_sent_once_and_the_real_answer_still_arrives(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        handle = conn.request("long")
        assert await peer.recv() == req(1, "long")
        assert handle.cancel() is True
        assert handle.cancel() is False
        assert await peer.recv() == note("$/cancel_request", {"requestId": 1})
        peer.send(err(1, -32800, "Request cancelled"))
        with pytest.raises(JsonRpcError) as info:
            await handle
        assert info.value.code == -32800
        assert handle.cancel() is False  # answered: nothing more is sent
        await peer.probe()

    run(main)


def test_cancelling_the_awaiting_task_sends_cancel_and_drops_the_late_answer(
    engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        handle = conn.request("long")
        waiter = asyncio.ensure_future(handle)
        assert await peer.recv() == req(1, "long")
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await peer.recv() == note("$/cancel_request", {"requestId": 1})
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(conn.request("longer"), 0.01)  # wait_for cancels too
        assert await peer.recv() == req(2, "longer")
        assert await peer.recv() == note("$/cancel_request", {"requestId": 2})
        peer.send(err(1, -32800, "Request cancelled"), ok(2, "late"))
        await peer.probe()
        assert conn.pending_requests == 0

    with caplog.at_level(logging.WARNING, "acp_fast.jsonrpc"):
        run(main)
    assert "unknown request id" not in caplog.text


def test_detached_request_sends_no_cancel_and_ignores_its_answer(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        handle = conn.request("fire")
        handle.detach()
        assert handle.cancel() is False
        assert await peer.recv() == req(1, "fire")
        peer.send(err(1, -1, "whatever"))
        await peer.probe()
        with pytest.raises(asyncio.CancelledError):
            await handle

    with caplog.at_level(logging.WARNING, "acp_fast.jsonrpc"):
        run(main)
    assert "unknown request id" not in caplog.text


def test_request_timeout_raises_and_sends_cancel(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        with pytest.raises(asyncio.TimeoutError):
            await conn.request("never", timeout=0.01)
        assert await peer.recv() == req(1, "never")
        assert await peer.recv() == note("$/cancel_request", {"requestId": 1})
        fast = conn.request("fast", timeout=60)
        assert await peer.recv() == req(2, "fast")
        peer.send(ok(2, "in time"), ok(1, "late"))
        assert await fast == "in time"
        await peer.probe()

    run(main)


# ---------------------------------------------------------------------------------------
# EOF and closing (protocol.md §1.1.10)
# ---------------------------------------------------------------------------------------

EOF_ERROR = {"code": -32603, "message": "Incoming transport closed"}


def test_eof_fails_pending_requests_with_incoming_transport_closed(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        h1, h2 = conn.request("session/prompt"), conn.request("fs/read")
        await peer.recv()
        peer.stream.close()
        for handle, method in ((h1, "session/prompt"), (h2, "fs/read")):
            with pytest.raises(JsonRpcError) as info:
                await handle
            assert info.value.to_dict() == {**EOF_ERROR, "data": {"reason": "incoming_transport_closed", "method": method}}
        late = conn.request("after/eof")  # fails at once, nothing written
        assert late.done()
        with pytest.raises(JsonRpcError) as info:
            await late
        assert info.value.data == {"reason": "incoming_transport_closed", "method": "after/eof"}
        await conn.wait_closed()
        assert conn.eof and conn.transport_error is None

    run(main)


def test_eof_on_an_error_names_the_cause_in_each_failed_request(engine: Any) -> None:
    """A stream that ends on an error (a lost network path, say): the pending and the later
    requests fail as at a clean EOF, and their data also carries the error's text."""

    async def main() -> None:
        conn, peer = with_peer(engine)
        handle = conn.request("session/prompt")
        await peer.recv()
        lost = ConnectionResetError("the network path was lost")
        conn.feed_eof(lost)
        expected = {"reason": "incoming_transport_closed", "method": "session/prompt",
                    "cause": "the network path was lost"}
        with pytest.raises(JsonRpcError) as info:
            await handle
        assert info.value.to_dict() == {**EOF_ERROR, "data": expected}
        with pytest.raises(JsonRpcError) as info:
            await conn.request("after/eof")
        assert info.value.data == {**expected, "method": "after/eof"}
        assert conn.transport_error is lost

    run(main)


def test_eof_still_flushes_answers_of_running_handlers(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        gate = asyncio.Event()

        async def slow(ctx: RequestContext) -> str:
            await gate.wait()
            ctx.connection.notify("progress", {"last": True})
            return "answered after EOF"

        conn.on_request("slow", slow)
        # the last line has no newline: it is still handled at EOF
        peer.send(req(1, "slow"), req(2, "echo", ["sync"]), json.dumps(req(3, "echo", ["tail"])).encode())
        peer.stream._wt.write_eof()  # half-close: we stop writing, keep reading
        assert await peer.recv() == ok(2, ["sync"])
        assert await peer.recv() == ok(3, ["tail"])
        await asyncio.sleep(0)
        assert not conn.closed.done()  # waits for the running handler
        late = conn.request("after/eof")  # while still open after EOF: fails at once
        assert late.done()
        with pytest.raises(JsonRpcError) as info:
            await late
        assert info.value.to_dict() == {**EOF_ERROR, "data": {"reason": "incoming_transport_closed", "method": "after/eof"}}
        gate.set()
        assert await peer.recv() == note("progress", {"last": True})
        assert await peer.recv() == ok(1, "answered after EOF")
        await conn.wait_closed()
        await peer.eof.wait()

    run(main)


def test_close_fails_pending_cancels_handlers_and_flushes(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        cancelled = asyncio.Event()

        async def forever(ctx: RequestContext) -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        conn.on_request("forever", forever)
        peer.send(req(1, "forever"))
        await peer.probe()
        handle = conn.request("pending")
        conn.notify("bye")
        async with conn:
            pass
        assert conn.closed.done() and cancelled.is_set()
        with pytest.raises(JsonRpcError) as info:
            await handle
        assert info.value.to_dict() == {"code": -32603, "message": "Connection closed",
                                        "data": {"reason": "connection_closed", "method": "pending"}}
        assert await peer.recv() == req(1, "pending")
        assert await peer.recv() == note("bye")
        await peer.eof.wait()
        assert peer.lines.empty()  # the cancelled handler answered nothing
        assert conn.notify("after") is False
        with pytest.raises(JsonRpcError):
            await conn.request("after")

    run(main)


def test_eof_waits_for_deferred_responders(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        held: list[Any] = []
        conn.on_request("later", lambda ctx: held.append(ctx.defer()))
        peer.send(req(1, "later"))
        peer.stream._wt.write_eof()  # the peer cannot probe after its EOF: poll the state
        while not conn.eof:
            await asyncio.sleep(0)
        assert not conn.closed.done()
        held[0].respond("late but delivered")
        assert await peer.recv() == ok(1, "late but delivered")
        await conn.wait_closed()

    run(main)


# ---------------------------------------------------------------------------------------
# backpressure
# ---------------------------------------------------------------------------------------


def test_slow_reader_pauses_the_writer_and_buffers_stay_bounded(engine: Any) -> None:
    async def main() -> None:
        writer, reader = two(engine, max_backlog=8)
        gate = asyncio.Event()
        got: list[int] = []
        max_queue = 0

        async def hold(msg: Any) -> None:
            nonlocal max_queue
            max_queue = max(max_queue, len(reader._queue))
            await gate.wait()
            got.append(msg.params["i"])

        reader.on_notification("hold", hold)
        payload = "x" * 1000
        sent = 0
        while not writer.writing_paused:
            writer.notify("hold", {"i": sent, "pad": payload})
            sent += 1
            if sent % 16 == 0:
                await asyncio.sleep(0)
            assert sent < 5_000, "the writer never saw backpressure"
        assert reader.reading_paused
        # bounded: the reader holds one read's worth of frames above max_backlog, the
        # rest waits in the writer's transport buffer (about its high-water mark)
        assert len(reader._queue) <= 8 + 65
        assert writer.stream.get_write_buffer_size() <= 64 * 1024 + 16 * 1100
        drained = asyncio.ensure_future(writer.drain())
        await asyncio.sleep(0)
        assert not drained.done()
        gate.set()
        await drained
        while len(got) < sent:
            await asyncio.sleep(0)
        assert got == list(range(sent))
        assert not reader.reading_paused and not writer.writing_paused
        assert max_queue <= 8 + 65

    run(main)


def test_reading_is_not_paused_while_a_handler_awaits_the_peer(engine: Any) -> None:
    async def main() -> None:
        client, agent = two(engine, max_backlog=2)
        results: list[Any] = []

        async def needs_peer(msg: Any) -> None:  # blocks the FIFO until the peer answers
            results.append(await agent.request("client/answer", msg.params))

        agent.on_notification("n", needs_peer)
        client.on_request("client/answer", lambda ctx: ctx.params["i"])
        for i in range(50):  # far above max_backlog: the reader must keep reading responses
            client.notify("n", {"i": i})
        await client.drain()
        while len(results) < 50:
            await asyncio.sleep(0)
        assert results == list(range(50))

    run(main)


# ---------------------------------------------------------------------------------------
# engine options
# ---------------------------------------------------------------------------------------


def test_lazy_mode_passes_raw_json_through(engine: Any) -> None:
    async def main() -> None:
        client, agent = two(engine, lazy=True)
        agent.on_request("fwd", lambda ctx: ctx.message.params_raw)
        msg = await client.request("fwd", {"deep": [1, {"x": "é"}]}, raw=True)
        assert isinstance(msg.result_raw, engine.RawJson)
        assert msg.result == {"deep": [1, {"x": "é"}]}
        assert client.engine is engine

    run(main)


def test_default_engine_is_the_selected_one() -> None:
    async def main() -> None:
        a, _ = memory_pair()
        assert Connection(a).engine is _engine

    run(main)


def test_detached_error_answer_is_silent_and_connection_goes_on(engine: Any) -> None:
    async def main() -> None:
        client, agent = two(engine)
        client.request("missing").detach()  # answered -32601 later: nobody is told
        gc.collect()
        agent.on_request("ping", lambda ctx: "pong")
        assert await client.request("ping") == "pong"

    run(main)


def test_settled_waits_for_queued_async_notification_handlers(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        done: list[int] = []
        inside: list[None] = []

        async def slow(msg: Any) -> None:
            await conn.settled()  # from inside the FIFO: returns at once
            for _ in range(3):
                await asyncio.sleep(0)
            done.append(msg.params[0])

        conn.on_notification("slow", slow)
        await conn.settled()  # nothing running
        peer.send(*[note("slow", [i]) for i in range(5)])
        while conn._runner is None:
            await asyncio.sleep(0)
        await conn.settled()
        assert done == [0, 1, 2, 3, 4] and not inside

    run(main)


# -- long reads: decoded and handled in line-aligned slices, as one read -------------------

SLICE = 16 * 1024  # acp_fast.jsonrpc._SLICE: the largest piece a long read is decoded in


class RecordingDecoder:
    """An engine decoder that records the pieces it is fed (passed as ``decoder=``)."""

    def __init__(self, engine: Any) -> None:
        self.inner = engine.Decoder()
        self.pieces: list[bytes] = []

    def feed(self, data: bytes) -> list[Any]:
        self.pieces.append(bytes(data))
        return self.inner.feed(data)

    def feed_eof(self) -> list[Any]:
        return self.inner.feed_eof()

    @property
    def closed(self) -> bool:
        return bool(self.inner.closed)


def _updates(first: int, count: int) -> list[dict[str, Any]]:
    return [note("u", {"i": i, "text": "x" * 150}) for i in range(first, first + count)]


def test_a_long_read_is_decoded_in_line_aligned_slices_and_answered_in_one_write(engine: Any) -> None:
    async def main() -> None:
        a, b = memory_pair()
        decoder = RecordingDecoder(engine)
        conn = Connection(a, engine=engine, decoder=decoder)
        conn.on_request("echo", lambda ctx: ctx.params)
        seen: list[int] = []
        conn.on_notification("u", lambda msg: seen.append(msg.params["i"]))
        peer = RawPeer(b)
        writes = record_writes(conn)
        big = "y" * (3 * SLICE)  # a line longer than a slice, between short ones
        peer.send(req(0, "echo", [0]), *_updates(0, 400), req(1, "echo", [big]), *_updates(400, 400),
                  req(2, "echo", [2]))
        for ident, result in ((0, [0]), (1, [big]), (2, [2])):
            assert await peer.recv() == ok(ident, result)
        assert seen == list(range(800))
        data = b"".join(decoder.pieces)
        assert data.count(b"\n") == 803 and len(data) > 10 * SLICE
        *slices, rest = decoder.pieces
        assert len(slices) > 3  # the read was cut ...
        assert all(p.endswith(b"\n") and len(p) <= SLICE for p in slices)  # ... at line ends ...
        assert rest.startswith(b'{"jsonrpc": "2.0", "id": 1,')  # ... up to the line longer than a slice
        assert len(writes) == 1 and writes[0].count(b"\n") == 3  # one read: its answers in one write

    run(main)


def test_a_handler_started_early_in_a_long_read_runs_before_later_frames(engine: Any) -> None:
    async def main() -> None:
        conn, peer = with_peer(engine)
        order: list[str] = []
        # the request ends the first slice: k updates and the request fill it, one more would not
        size = len(json.dumps(_updates(0, 1)[0]).encode()) + 1
        k = (SLICE - len(json.dumps(req(1, "starts")).encode()) - 1) // size

        async def starts(ctx: RequestContext) -> str:
            order.append("started")
            await asyncio.sleep(0)
            return "done"

        conn.on_request("starts", starts)
        conn.on_notification("u", lambda msg: order.append("after") if msg.params["i"] == k else None)
        peer.send(*_updates(0, k), req(1, "starts"), *_updates(k, 100))
        assert await peer.recv() == ok(1, "done")
        await peer.probe()
        assert order == ["started", "after"]

    run(main)


def test_a_long_read_of_short_lines_does_not_drive_the_cyclic_gc(engine: Any) -> None:
    """Each slice's messages are freed before the next is decoded, so a 256 KiB read of
    updates (~1,500 messages, several objects each) stays below the first generation's
    threshold; decoded at once, it triggers a collection every 700 objects."""

    async def main() -> None:
        conn, peer = with_peer(engine)
        got: list[int] = []
        conn.on_notification("u", lambda msg: got.append(msg.params["i"]))
        collections: list[int] = []

        def count(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                collections.append(info["generation"])

        line = json.dumps(_updates(0, 1)[0]).encode() + b"\n"
        data = b"".join(line.replace(b'"i": 0', b'"i": %d' % i) for i in range(256 * 1024 // len(line)))
        threshold = gc.get_threshold()
        gc.collect()
        gc.set_threshold(700, 10, 10)
        gc.callbacks.append(count)
        try:
            peer.stream.write(data)
            await peer.probe()
        finally:
            gc.callbacks.remove(count)
            gc.set_threshold(*threshold)
        assert got == list(range(data.count(b"\n")))
        assert len(collections) <= 1, collections

    run(main)
