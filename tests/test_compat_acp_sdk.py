"""The official Python SDK (``acp``) on the acp_fast transport drop-in (``acp_fast.compat.acp_sdk``).

* an SDK agent (``peers/pysdk/agent.py``'s, unchanged) on the drop-in, driven by acp_fast's
  v1 client, in a real process and in-process over memory streams (wire-level checks:
  bad JSON answered with -32700, batches unpacked and answered as one array, long lines);
* an SDK client on the drop-in (``spawn_agent_process``) driving ``acp-fast testy``;
* the same agent and client tests on the connection drop-in (``acp_fast.compat.acp_sdk.fast``,
  its own tests are in ``test_compat_acp_sdk_fast.py``);
* SDK client and SDK agent both on the drop-in over TCP and Unix sockets (10 MiB each way);
* the transport alone: coalesced writes, backpressure, receive bounds, timeouts, close.

Everything runs on both engine twins.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from peer_rule import require_module  # noqa: E402

acp = require_module("acp", what="the official Python SDK (agent-client-protocol) is not installed")

from compat_sdk_agent import load_test_agent
from roles_support import RawPeer

from acp_fast import Client, JsonRpcError
from acp_fast.compat.acp_sdk import (
    StreamTransport,
    spawn_agent_process,
    tcp_transport,
    unix_transport,
)
from acp_fast.transport import memory_pair, serve_tcp, serve_unix, spawn

REPO = Path(__file__).resolve().parent.parent
HELPER = str(Path(__file__).parent / "helpers" / "compat_sdk_agent.py")
TIMEOUT = 60.0  # only turns a hang into a failure


def run(coro_fn: Any, *args: Any) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro_fn(*args), TIMEOUT)

    return asyncio.run(guarded())


def child_env(**extra: str) -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), out.get("PYTHONPATH")) if p)
    for name in ("ACP_N", "ACP_CHUNK"):
        out.pop(name, None)
    out.update(extra)
    return out


def init_v1() -> dict[str, Any]:
    return {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}


class InProcessAgent:
    """The SDK test agent on one end of a memory pair; a :class:`RawPeer` on the other."""

    def __init__(self, engine: ModuleType, **options: Any) -> None:
        a, b = memory_pair()
        self.transport = StreamTransport(a, engine=engine, **options)
        self.agent = load_test_agent()()
        self.task = asyncio.get_running_loop().create_task(acp.run_agent(self.agent, self.transport))
        self.peer = RawPeer(b)

    async def close(self) -> None:
        self.peer.stream.close()  # EOF: run_agent returns and closes its connection
        await self.task
        await self.peer.closed()


# ---------------------------------------------------------------------------------------
# SDK agent on the drop-in <- acp_fast client
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("switch", [pytest.param([], id="transport"), pytest.param(["--fast"], id="connection")])
def test_sdk_agent_process_on_dropin_driven_by_acp_fast_client(engine: ModuleType, switch: list[str]) -> None:
    async def body() -> None:
        record: list[Any] = []
        arrived = asyncio.Event()
        client = Client.builder().on_session_update(lambda u, cx: (record.append(u), arrived.set()))

        @client.on_request("session/request_permission")
        def permission(params: dict[str, Any], cx: Any) -> dict[str, Any]:
            return {"outcome": {"outcome": "selected", "optionId": params["options"][0]["optionId"]}}

        def texts() -> list[str]:
            return [u.payload["content"]["text"] for u in record if u.kind == "agent_message_chunk"]

        async def main(cx: Any) -> None:
            init = await cx.initialize()
            assert init["protocolVersion"] == 1 and init["agentInfo"]["name"] == "pysdk-test-agent"
            session = (await cx.build_session(str(REPO))).session
            assert await session.send_prompt("stream 6 chunks") == {"stopReason": "end_turn"}
            assert texts() == ["x" * 10] * 6 and all(u.known for u in record)
            record.clear()
            assert await session.send_prompt("permission 1") == {"stopReason": "end_turn"}
            assert texts() == ["permission:allow", "x" * 10]
            big = {"blob": "y" * (70 * 1024)}  # over asyncio's 64 KiB readline limit
            assert await cx.send_request("_test/echo", big) == big
            with pytest.raises(JsonRpcError) as exc:
                await cx.send_request("_no/such_method", {})
            assert exc.value.code == -32601
            arrived.clear()
            turn = session.send_prompt("100000000")
            await arrived.wait()
            session.cancel_active_work()
            assert await turn == {"stopReason": "cancelled"}

        stream = await spawn([sys.executable, HELPER, "--engine", engine.IMPLEMENTATION, *switch],
                             env=child_env(ACP_CHUNK="10"), cwd=REPO)
        await client.connect_with(stream, main, engine=engine)
        await stream.wait_closed()
        assert stream.returncode == 0, stream.stderr_tail.decode(errors="replace")

    run(body)


@pytest.mark.parametrize("switch", [pytest.param([], id="acp.run_agent+stdio_transport"),
                                    pytest.param(["--run-agent"], id="compat.run_agent"),
                                    pytest.param(["--fast"], id="fast.run_agent")])
def test_sdk_agent_process_on_dropin_answers_what_the_stock_sdk_drops(engine: ModuleType, switch: list[str]) -> None:
    """The stock SDK logs and ignores a bad line and dies on a batch; on the drop-in both are answered."""

    async def body() -> None:
        stream = await spawn([sys.executable, HELPER, "--engine", engine.IMPLEMENTATION, *switch], env=child_env(),
                             cwd=REPO)
        peer = RawPeer(stream)
        peer.send_raw(b"{not json")
        peer.send([{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_v1()},
                   {"jsonrpc": "2.0", "id": 2, "method": "_test/echo", "params": {"b": True}}])
        assert (await peer.recv())["error"]["code"] == -32700
        reply = await peer.recv()
        assert [r["id"] for r in reply] == [1, 2] and reply[1]["result"] == {"b": True}
        stream.close()
        await stream.wait_closed()
        assert stream.returncode == 0, stream.stderr_tail.decode(errors="replace")

    run(body)


def test_bad_json_is_answered_on_the_wire_and_the_agent_lives_on(engine: ModuleType) -> None:
    async def body() -> None:
        t = InProcessAgent(engine)
        t.peer.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": ')
        reply = await t.peer.recv()
        assert reply["id"] is None and reply["error"]["code"] == -32700
        t.peer.send_raw(b'{"jsonrpc": "1.0", "id": 2, "method": "initialize"}')
        reply = await t.peer.recv()
        assert reply["id"] is None and reply["error"]["code"] == -32600
        t.peer.send_raw(b"[]")
        reply = await t.peer.recv()
        assert reply["error"]["code"] == -32600 and reply["error"]["data"] == "empty batch"
        reply = await t.peer.request(3, "initialize", init_v1())
        assert reply["id"] == 3 and reply["result"]["agentInfo"]["name"] == "pysdk-test-agent"
        await t.close()

    run(body)


def test_batch_entries_reach_the_sdk_and_one_reply_array_comes_back(engine: ModuleType) -> None:
    async def body() -> None:
        t = InProcessAgent(engine)
        t.peer.send([
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_v1()},
            {"jsonrpc": "2.0", "method": "_test/note", "params": {}},
            {"jsonrpc": "2.0", "id": "1", "method": "_test/echo", "params": {"k": [1, None]}},
            {"jsonrpc": "2.0", "id": 7},  # invalid: answered in its slot
            {"jsonrpc": "2.0", "id": 8, "method": "_no/such", "params": {}},
        ])
        reply = await t.peer.recv()
        assert isinstance(reply, list) and [r["id"] for r in reply] == [1, "1", None, 8]
        assert reply[0]["result"]["agentInfo"]["name"] == "pysdk-test-agent"
        assert reply[1]["result"] == {"k": [1, None]}
        assert reply[2]["error"]["code"] == -32600 and reply[3]["error"]["code"] == -32601
        # a batch of notifications gets no reply at all: the next line is the echo's answer
        t.peer.send([{"jsonrpc": "2.0", "method": "_test/note", "params": {}}] * 2)
        reply = await t.peer.request(9, "_test/stats", {})
        assert reply["id"] == 9 and reply["result"]["notesReceived"] == 3
        # a single-entry batch is answered as an array too
        t.peer.send([{"jsonrpc": "2.0", "id": 10, "method": "_test/echo", "params": {"a": 1}}])
        assert await t.peer.recv() == [{"jsonrpc": "2.0", "id": 10, "result": {"a": 1}}]
        await t.close()

    run(body)


def test_long_lines_are_delivered_or_bounded_never_fatal(engine: ModuleType) -> None:
    async def body() -> None:
        t = InProcessAgent(engine, max_line_size=256 * 1024)
        blob = "z" * (70 * 1024)
        reply = await t.peer.request(1, "_test/echo", {"blob": blob})
        assert reply == {"jsonrpc": "2.0", "id": 1, "result": {"blob": blob}}
        t.peer.send({"jsonrpc": "2.0", "id": 2, "method": "_test/echo", "params": {"blob": "z" * (300 * 1024)}})
        reply = await t.peer.recv()
        assert reply["id"] is None and reply["error"]["code"] == -32600 and reply["error"]["data"] == "line too long"
        assert t.transport._decoder.buffered <= 256 * 1024
        reply = await t.peer.request(3, "_test/echo", {"after": True})
        assert reply["result"] == {"after": True}
        await t.close()

    run(body)


# ---------------------------------------------------------------------------------------
# SDK client on the drop-in -> acp-fast testy; SDK pair over TCP
# ---------------------------------------------------------------------------------------


class RecordingClient:
    """A minimal ``acp.Client``: records updates, allows every permission."""

    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        return acp.schema.RequestPermissionResponse(
            outcome=acp.schema.AllowedOutcome(outcome="selected", option_id=options[0].option_id))

    def texts(self) -> list[str]:
        return [u.content.text for u in self.updates if getattr(u, "session_update", None) == "agent_message_chunk"]


@pytest.mark.parametrize("dropin", ["transport", "connection"])
def test_sdk_client_on_dropin_drives_testy(engine: ModuleType, dropin: str) -> None:
    from acp_fast.compat.acp_sdk import fast

    spawner = spawn_agent_process if dropin == "transport" else fast.spawn_agent_process

    async def body() -> None:
        client = RecordingClient()
        env = {"PYTHONPATH": str(REPO), "ACP_CHUNK": "20"}
        async with spawner(client, sys.executable, "-m", "acp_fast.cli.main", "testy", "--engine",
                                       engine.IMPLEMENTATION, env=env, cwd=REPO) as (conn, process):
            init = await conn.initialize(protocol_version=1)
            assert init.protocol_version == 1 and init.agent_info.name == "test-agent"
            session = await conn.new_session(cwd=str(REPO))
            response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("stream 40")])
            assert response.stop_reason == "end_turn"
            assert len(client.texts()) == 40 and all(len(t) == 20 for t in client.texts())
            client.updates.clear()
            response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("permission stream 2")])
            assert response.stop_reason == "end_turn" and client.texts()[0] == "permission:allow"
            big = {"blob": "q" * (70 * 1024)}
            assert await conn.ext_method("test/echo", big) == big
            with pytest.raises(acp.RequestError) as exc:
                await conn.ext_method("no/such", {})
            assert exc.value.code == -32601
            assert process.pid > 0 and process.returncode is None
        assert await process.wait() == 0 and process.returncode == 0

    run(body)


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_sdk_client_and_sdk_agent_both_on_dropin_over_sockets(engine: ModuleType, family: str,
                                                             tmp_path: Path) -> None:
    async def body() -> None:
        served: list[Any] = []

        async def on_stream(stream: Any) -> None:
            served.append(asyncio.current_task())
            await acp.run_agent(load_test_agent()(), StreamTransport(stream, engine=engine))

        if family == "tcp":
            server = await serve_tcp(on_stream)
            transport = tcp_transport("127.0.0.1", server.sockets[0].getsockname()[1], engine=engine)
        else:
            path = tmp_path / "agent.sock"
            server = await serve_unix(on_stream, path)
            transport = unix_transport(path, engine=engine)
        client = RecordingClient()
        conn = acp.connect_to_agent(client, transport)
        init = await conn.initialize(protocol_version=1)
        assert init.agent_info.name == "pysdk-test-agent"
        session = await conn.new_session(cwd=str(REPO))
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("permission 25")])
        assert response.stop_reason == "end_turn"
        assert client.texts()[0] == "permission:allow" and len(client.texts()) == 26
        big = {"blob": "m" * (10 * 1024 * 1024)}  # a 10 MiB message each way
        assert await conn.ext_method("test/echo", big) == big
        await conn.close()
        await served[0]  # the agent sees EOF: run_agent returns
        server.close()
        await server.wait_closed()

    run(body)


# ---------------------------------------------------------------------------------------
# The transport alone
# ---------------------------------------------------------------------------------------


def test_sends_in_one_turn_are_one_write_and_params_null_is_omitted(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        transport = StreamTransport(a, engine=engine)
        writes: list[bytes] = []
        real_write = a.write
        a.write = lambda data: (writes.append(bytes(data)), real_write(data))  # type: ignore[method-assign]
        peer = RawPeer(b)
        for i in range(100):
            await transport.send({"jsonrpc": "2.0", "method": "n", "params": {"i": i}})
        await transport.send({"jsonrpc": "2.0", "id": 5, "method": "m", "params": None})
        await transport.send({"jsonrpc": "2.0", "id": 5, "error": {"code": -32602, "message": "bad", "data": None}})
        assert writes == []  # nothing written before the turn ends
        got = [await peer.recv() for _ in range(102)]
        assert len(writes) == 1
        assert [g["params"]["i"] for g in got[:100]] == list(range(100))
        assert got[100] == {"jsonrpc": "2.0", "id": 5, "method": "m"}
        assert got[101] == {"jsonrpc": "2.0", "id": 5, "error": {"code": -32602, "message": "bad", "data": None}}
        await transport.close()

    run(body)


def test_send_waits_while_the_peer_does_not_read(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        transport = StreamTransport(a, engine=engine)
        peer = RawPeer(b)
        b.pause_reading()
        line = {"jsonrpc": "2.0", "method": "n", "params": {"pad": "p" * 1000}}
        sent = [0]

        async def flood() -> None:
            for _ in range(2000):
                await transport.send(line)
                sent[0] += 1

        task = asyncio.get_running_loop().create_task(flood())
        for _ in range(50):
            await asyncio.sleep(0)
        assert not task.done() and sent[0] < 2000
        assert a.writing_paused and a.get_write_buffer_size() < 256 * 1024
        b.resume_reading()
        await task
        for _ in range(2000):
            assert (await peer.recv())["params"]["pad"] == "p" * 1000
        await transport.close()

    run(body)


def test_reading_pauses_while_the_sdk_does_not_receive(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        transport = StreamTransport(a, engine=engine, max_pending=8)
        for i in range(40):
            b.write(json.dumps({"jsonrpc": "2.0", "method": "n", "params": {"i": i}}).encode() + b"\n")
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        assert a.reading_paused and len(transport._inbox) <= 8 + 1
        got = [(await transport.receive())["params"]["i"] for _ in range(40)]  # type: ignore[index]
        assert got == list(range(40)) and not a.reading_paused
        b.close()
        assert await transport.receive() is None
        await transport.close()

    run(body)


def test_receive_timeout_and_close(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        transport = StreamTransport(a, engine=engine, receive_timeout=0.01)
        with pytest.raises(asyncio.TimeoutError):
            await transport.receive()
        peer = RawPeer(b)
        await transport.send({"jsonrpc": "2.0", "method": "bye"})
        await transport.close()
        assert (await peer.recv())["method"] == "bye"
        await peer.closed()
        assert await transport.receive() is None
        with pytest.raises(ConnectionError):
            await transport.send({"jsonrpc": "2.0", "method": "late"})

    run(body)


def test_helpers_keep_the_sdk_parameters(engine: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    from acp_fast.compat import acp_sdk
    from acp_fast.compat.acp_sdk import connect

    assert acp_sdk.TESTED_SDK_VERSIONS is connect.TESTED_SDK_VERSIONS  # re-exported by the package

    async def body() -> None:
        with pytest.raises(TypeError, match="unsupported transport_kwargs"):
            async with spawn_agent_process(RecordingClient(), sys.executable, transport_kwargs={"bogus": 1}):
                pass
        # receive_timeout moves to the transport (the SDK's Connection ignores it for a Transport);
        # limit becomes the line bound; the child gets the SDK's trimmed environment plus env
        async with spawn_agent_process(RecordingClient(), sys.executable, "-c", "import time; time.sleep(30)",
                                       env={"ACP_DROPIN_PROBE": "1"}, receive_timeout=12.5,
                                       transport_kwargs={"limit": 4096, "shutdown_timeout": 0.2},
                                       transport_options={"engine": engine}) as (conn, process):
            transport = conn._conn._transport
            assert isinstance(transport, StreamTransport)
            assert transport._receive_timeout == 12.5 and transport._decoder.max_line_size == 4096
            # the environment is the child's own only once it has exec'd the interpreter (before
            # that, /proc shows the forking parent's): wait for its command line, bounded
            deadline = time.monotonic() + 10
            while b"time.sleep(30)" not in Path(f"/proc/{process.pid}/cmdline").read_bytes():
                assert time.monotonic() < deadline, "the child never exec'd"
                await asyncio.sleep(0.01)
            with open(f"/proc/{process.pid}/environ", "rb") as f:
                environ = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            assert environ[b"ACP_DROPIN_PROBE"] == b"1" and b"PYTHONPATH" not in environ
        assert process.returncode is not None  # killed after the 0.2 s grace

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    run(body)
    monkeypatch.setattr(connect, "TESTED_SDK_VERSIONS", ("0.0.0",))
    monkeypatch.setattr(connect, "_warned_version", [])
    with pytest.warns(RuntimeWarning, match="tested with agent-client-protocol 0.0.0"):
        connect.check_sdk_version()


@pytest.mark.parametrize("on_invalid", [None, "reply"])
def test_a_childs_banner_is_skipped_unless_told_to_reply(engine: ModuleType, on_invalid: str | None) -> None:
    async def body() -> None:
        a, b = memory_pair()
        a.reads_child_stdout = True  # as a spawned agent's stdout
        transport = StreamTransport(a, engine=engine, on_invalid=on_invalid)  # type: ignore[arg-type]
        peer = RawPeer(b)
        peer.send_raw(b"Starting my-agent v1.2 ...")
        peer.notify("n", {"k": 1})
        assert await transport.receive() == {"jsonrpc": "2.0", "method": "n", "params": {"k": 1}}
        await transport.send({"jsonrpc": "2.0", "method": "marker"})
        first = await peer.recv()
        if on_invalid is None:
            assert first == {"jsonrpc": "2.0", "method": "marker"}  # nothing answered the banner
        else:
            assert first["error"]["code"] == -32700 and (await peer.recv())["method"] == "marker"
        await transport.close()

    run(body)
