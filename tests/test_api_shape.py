"""The shape of the builder API (issue "one way to do each thing"), on both engine twins.

One verb set (``serve`` / ``connect`` / ``connect_with`` / ``run``), ``build_session`` on v1
and v2, the one request-handle protocol, connection-owned background tasks, the one
exception hierarchy, frozen handler tables, and the connection-level guarantees that the
builders rely on: bounded writes (``SendBufferFull``), sessions released on close, a
notification about a request sees the request started, and every request answered whatever
the handler's result does.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

import package_path  # noqa: E402
import roles_agent  # noqa: E402
from roles_support import RawPeer, run, serve_in_memory  # noqa: E402

from acp_fast import AcpFastError, Agent, Client, Request, SendBufferFull  # noqa: E402
from acp_fast.errors import JsonRpcError  # noqa: E402
from acp_fast.jsonrpc import Connection  # noqa: E402
from acp_fast.protocol.errors import WireSurfaceError  # noqa: E402
from acp_fast.roles import HandlerTable, V1Session, V2Session  # noqa: E402
from acp_fast.transport import ChildExitError, memory_pair  # noqa: E402


def test_every_error_acp_fast_raises_is_an_acp_fast_error() -> None:
    for cls in (JsonRpcError, WireSurfaceError, ChildExitError, SendBufferFull):
        assert issubclass(cls, AcpFastError), cls


def test_builder_tables_are_frozen_snapshots() -> None:
    agent = Agent.v2().on_request("session/new", lambda p, cx: {"sessionId": "a"})
    table = agent.table()
    assert isinstance(table, HandlerTable) and table.version == 2 and table.role == "agent"
    agent.on_request("session/new", lambda p, cx: {"sessionId": "b"})
    assert table.requests["session/new"](None, None) == {"sessionId": "a"}  # not the later one
    with pytest.raises(TypeError):
        table.requests["x"] = print  # type: ignore[index]


def test_a_connection_refuses_a_table_of_another_role(engine: ModuleType) -> None:
    """`HandlerTable.role` says which connection type may run the table: a client's table on
    an agent's connection (or an agent's on a proxy's) is refused before anything runs."""
    from acp_fast import Client, Proxy
    from acp_fast.roles import AgentConnection, ProxyConnection

    async def body() -> None:
        for connection_type, table in ((AgentConnection, Client.v2().table()),
                                       (ProxyConnection, Agent.v2().table())):
            a, _b = memory_pair()
            raw = Connection(a, engine=engine)
            with pytest.raises(ValueError, match=f"a {table.role}'s handler table cannot run"):
                connection_type(raw, table)
            raw.close()
        a, _b = memory_pair()
        raw = Connection(a, engine=engine, lazy=True)
        assert ProxyConnection(raw, Proxy.v2().table()).role == "proxy"  # its own role's table
        raw.close()

    run(body)


def test_chaining_keeps_the_builder_type() -> None:
    from acp_fast import Proxy

    proxy = Proxy.v2().with_info("p", "1").on_successor_request("_x", lambda p, cx: None)
    assert type(proxy).__name__ == "ProxyBuilder"


def test_connect_is_an_async_context_manager_and_build_session_works_on_both_versions(engine: ModuleType) -> None:
    async def body() -> None:
        for version, agent, handle in ((1, roles_agent.v1_agent({}), V1Session), (2, roles_agent.v2_agent({}), V2Session)):
            client = Client.builder() if version == 1 else Client.v2()
            async with client.connect(serve_in_memory(agent, engine), engine=engine) as conn:
                await conn.initialize()
                opened = await conn.build_session("/tmp")
                assert type(opened.session) is handle
                assert opened.response["sessionId"] == opened.session.session_id
                request = opened.session.send_prompt("hello")
                assert isinstance(request, Request)  # the one handle protocol
                await request
            assert conn.closed.done()

    run(body)


def test_engine_may_be_named(engine: ModuleType) -> None:
    async def body() -> None:
        async with Client.v2().connect(serve_in_memory(roles_agent.v2_agent({}), engine),
                                       engine=engine.IMPLEMENTATION) as conn:
            assert conn.raw.engine.IMPLEMENTATION == engine.IMPLEMENTATION
            await conn.initialize()
        with pytest.raises(ValueError, match="engine must be"):
            async with Client.v2().connect(memory_pair()[0], engine="fast"):  # type: ignore[arg-type]
                pass

    run(body)


def test_start_task_is_owned_by_the_connection(engine: ModuleType) -> None:
    async def body() -> None:
        started: list[asyncio.Task[Any]] = []
        agent = Agent.v2()

        @agent.on_request("session/new")
        def new_session(params: Any, cx: Any) -> Any:
            started.append(cx.start_task(asyncio.sleep(3600)))  # outlives the handler
            return {"sessionId": "s"}

        async with Client.v2().connect(serve_in_memory(agent, engine), engine=engine) as conn:
            await conn.initialize()
            await conn.build_session("/tmp")
            assert len(started) == 1 and not started[0].done()
        for _ in range(20):  # the agent side sees EOF and closes
            if started[0].done():
                break
            await asyncio.sleep(0.01)
        assert started[0].cancelled()

    run(body)


def test_v2_wait_idle_fails_when_the_connection_closes(engine: ModuleType) -> None:
    """A v2 client whose agent dies mid-turn is released, not left waiting forever."""
    async def body() -> None:
        a, b = memory_pair()
        peer = RawPeer(a)

        async def main(conn: Any) -> Any:
            init = asyncio.ensure_future(conn.initialize())
            req = await peer.recv()
            peer.send({"jsonrpc": "2.0", "id": req["id"], "result": {
                "protocolVersion": 2, "info": {"name": "a", "version": "1"}, "capabilities": {}}})
            await init
            setup = conn.build_session("/tmp")
            req = await peer.recv()
            peer.send({"jsonrpc": "2.0", "id": req["id"], "result": {"sessionId": "s"}})
            session = (await setup).session
            peer.send({"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "running"}}})
            waiter = asyncio.ensure_future(session.wait_idle())
            await asyncio.sleep(0.01)
            assert not waiter.done()
            a.close()  # the agent dies mid-turn
            with pytest.raises(JsonRpcError) as info:
                await waiter
            assert info.value.code == -32603
            with pytest.raises(JsonRpcError):  # and later waits fail at once
                await session.wait_idle()

        await Client.v2().connect_with(b, main, engine=engine)

    run(body)


def test_send_buffer_is_bounded_for_a_peer_that_does_not_read(engine: ModuleType) -> None:
    """A send loop that never awaits is stopped with SendBufferFull; nothing is dropped."""
    async def body() -> None:
        a, b = memory_pair()
        b.pause_reading()  # the peer reads nothing
        conn = Connection(a, engine=engine, max_write_buffer=1 << 20)
        sent = 0
        with pytest.raises(SendBufferFull) as info:
            for i in range(100_000):
                conn.notify("n", {"i": i, "text": "x" * 200})
                sent += 1
                if i % 64 == 0:
                    await asyncio.sleep(0)  # let the transport take what it can
        assert info.value.limit == 1 << 20
        assert sent < 100_000 and info.value.buffered > 1 << 20
        conn.close()

    run(body)


def test_drain_lets_a_send_loop_continue_when_the_peer_reads(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        sender = Connection(a, engine=engine, max_write_buffer=1 << 18)
        receiver = Connection(b, engine=engine)
        seen: list[int] = []
        receiver.on_notification("n", lambda msg: seen.append(msg.params["i"]))
        for i in range(5000):
            sender.notify("n", {"i": i, "text": "x" * 200})
            if i % 100 == 99:
                await sender.drain()
        await sender.drain()
        while len(seen) < 5000:
            await asyncio.sleep(0.001)
        assert seen == list(range(5000))  # nothing lost, in order
        sender.close()
        receiver.close()

    run(body)


class _BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class _BadItems(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise RuntimeError("no items")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_request_is_answered_whatever_the_handler_returns(engine: ModuleType, mode: str) -> None:
    async def body() -> None:
        a, b = memory_pair()
        server = Connection(a, engine=engine)

        def handler(kind: str) -> Any:
            def sync(ctx: Any) -> Any:
                if kind == "bad-str":
                    raise _BadStr()
                if kind == "bad-items":
                    return _BadItems(x=1)
                return {"ok": kind}

            async def asynchronous(ctx: Any) -> Any:
                return sync(ctx)

            return sync if mode == "sync" else asynchronous

        for kind in ("bad-str", "bad-items", "fine"):
            server.on_request(kind, handler(kind))
        peer = RawPeer(b)
        lines = b"".join(
            b'{"jsonrpc":"2.0","id":%d,"method":"%s"}\n' % (i, kind.encode())
            for i, kind in enumerate(("bad-str", "bad-items", "fine"), 1))
        b.write(lines)  # one read: a failure must not drop the later frames
        replies = {}
        for _ in range(3):
            reply = await peer.recv()
            replies[reply["id"]] = reply
        assert replies[1]["error"]["code"] == -32603 and "_BadStr" in replies[1]["error"]["data"]
        assert replies[2]["error"]["code"] == -32603 and "no items" in replies[2]["error"]["data"]
        assert replies[3]["result"] == {"ok": "fine"}
        server.close()

    run(body)


def test_a_notification_about_a_request_sees_the_request_started(engine: ModuleType) -> None:
    """A cancel notification read together with its prompt runs after the prompt started."""
    async def body() -> None:
        a, b = memory_pair()
        server = Connection(a, engine=engine)
        events: list[str] = []
        cancelled = asyncio.Event()

        async def prompt(ctx: Any) -> Any:
            events.append("prompt started")
            cancelled.clear()  # a handler that resets its cancel state when it starts
            await cancelled.wait()
            return {"stopReason": "cancelled"}

        def cancel(msg: Any) -> None:
            events.append("cancel")
            cancelled.set()

        server.on_request("session/prompt", prompt)
        server.on_notification("session/cancel", cancel)
        peer = RawPeer(b)
        b.write(b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{}}\n'
                b'{"jsonrpc":"2.0","method":"session/cancel","params":{}}\n')  # one read
        reply = await asyncio.wait_for(peer.recv(), 5)
        assert reply["result"] == {"stopReason": "cancelled"}
        assert events == ["prompt started", "cancel"]
        server.close()

    run(body)


def test_the_router_keeps_nothing_of_responses_sent_before_initialize(engine: ModuleType) -> None:
    from acp_fast.roles import routers

    gc.collect()  # first frames left by earlier tests in this process are not this router's
    earlier = {id(o) for o in gc.get_objects() if isinstance(o, routers._FirstFrame)}

    async def body() -> None:
        a, b = memory_pair()
        router = Agent.protocol_router().with_v2(roles_agent.v2_agent({}))
        served = asyncio.ensure_future(router.serve(a, engine=engine))
        peer = RawPeer(b)
        junk = b'{"jsonrpc":"2.0","id":7,"result":"' + b"x" * 1000 + b'"}\n'
        for _ in range(2000):  # ~2 MB of responses before the first call
            b.write(junk)
        await asyncio.sleep(0.05)
        gc.collect()
        # only the decoder's partial line may be held: no chunk of the junk is kept
        kept = [o for o in gc.get_objects() if isinstance(o, routers._FirstFrame) and id(o) not in earlier]
        assert len(kept) == 1 and kept[0].frames == []
        peer.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": 2, "info": {"name": "c", "version": "1"}, "capabilities": {}}})
        reply = await peer.recv()
        assert reply["id"] == 1 and reply["result"]["protocolVersion"] == 2
        b.close()
        await asyncio.wait_for(served, 5)

    run(body)


def test_typed_method_descriptors_register_like_names(engine: ModuleType) -> None:
    from acp_fast.protocol import methods_v1, methods_v2

    async def body() -> None:
        agent = Agent.v2().on_request(methods_v2.session.new, lambda p, cx: {"sessionId": p["cwd"]})
        assert "session/new" in agent.table().requests
        with pytest.raises(ValueError, match="ACP v1 method"):
            agent.on_request(methods_v1.session.new, lambda p, cx: {})
        with pytest.raises(ValueError, match="is a notification"):
            agent.on_request(methods_v2.session.cancel, lambda p, cx: {})  # type: ignore[call-overload]
        async with Client.v2().connect(serve_in_memory(agent, engine), engine=engine) as conn:
            await conn.initialize()
            assert (await conn.build_session("/typed")).session.session_id == "/typed"

    run(body)


def test_mypy_checks_handlers_against_typed_descriptors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``on_request(methods.session.prompt, fn)`` type-checks fn's params and result."""
    mypy_api = pytest.importorskip("mypy.api", reason="mypy is in the test extra")
    source = tmp_path / "typed_handlers.py"
    source.write_text(
        "from acp_fast import Agent\n"
        "from acp_fast.protocol import methods_v2 as methods\n"
        "from acp_fast.protocol.types_v2 import NewSessionRequest, NewSessionResponse\n"
        "from acp_fast.roles import Context\n"
        "def good(params: NewSessionRequest, cx: Context) -> NewSessionResponse:\n"
        "    return {'sessionId': params['cwd']}\n"
        "def bad(params: NewSessionRequest, cx: Context) -> int:\n"
        "    return 1\n"
        "Agent.v2().on_request(methods.session.new, good)\n"
        "Agent.v2().on_request(methods.session.new, bad)  # BAD\n"
        "Agent.v2().on_request(methods.session.cancel, good)  # BAD\n"
    )
    import acp_fast

    if not package_path.INSTALLED:  # the checkout under test (mypy finds an installed one itself)
        monkeypatch.setenv("MYPYPATH", str(package_path.PACKAGE_ROOT))
    out, err, _status = mypy_api.run(["--strict", "--no-incremental", "--follow-imports=silent",
                                      "--cache-dir", str(tmp_path / "cache"), str(source)])
    assert "Cannot find implementation" not in out, out + err
    flagged = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    bad_lines = {i for i, text in enumerate(source.read_text().splitlines(), 1) if "# BAD" in text}
    assert flagged == bad_lines, out


def test_connection_passes_its_batch_limit_to_the_engine(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        server = Connection(a, engine=engine, max_batch_size=3)
        server.on_request("x", lambda ctx: 1)
        peer = RawPeer(b)
        b.write(b"[" + b",".join(b'{"jsonrpc":"2.0","id":%d,"method":"x"}' % i for i in range(4)) + b"]\n")
        reply = await peer.recv()
        assert reply["id"] is None and reply["error"]["code"] == -32600
        b.write(b"[" + b",".join(b'{"jsonrpc":"2.0","id":%d,"method":"x"}' % i for i in range(3)) + b"]\n")
        assert [r["id"] for r in await peer.recv()] == [0, 1, 2]
        server.close()

    run(body)
