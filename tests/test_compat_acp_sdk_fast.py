"""The official Python SDK on acp_fast's connection: the connection drop-in (``acp_fast.compat.acp_sdk.fast``).

* SDK agent (``peers/pysdk/agent.py``'s ``TestAgent``, unchanged) and SDK client both on the
  drop-in, in-process over memory streams: typed methods, streaming order, permission
  round trip, errors as the SDK maps them, request ids from 0;
* the wire as a raw peer sees it: bad JSON answered, batches answered as one array,
  -32602 for invalid params (the SDK's ``ValidationError`` mapping), end of input;
* the outbound ``session_update`` fast path sends exactly the SDK's JSON;
* ``strict_initialization`` (acp_fast's initialization guard);
* the SDK's asyncio stream-pair form and ``activate.install`` (the switch from outside).

Everything runs on both engine twins.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from peer_rule import require_module  # noqa: E402

acp = require_module("acp", what="the official Python SDK (agent-client-protocol) is not installed")

from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    RequestPermissionResponse,
    SessionNotification,
)
from acp.utils import serialize_params
from compat_sdk_agent import load_test_agent
from roles_support import RawPeer

from acp_fast.compat.acp_sdk import fast
from acp_fast.transport import memory_pair

TIMEOUT = 60.0  # only turns a hang into a failure


def run(coro_fn: Any, *args: Any) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro_fn(*args), TIMEOUT)

    return asyncio.run(guarded())


class RecordingClient:
    """A minimal ``acp.Client``: records updates (optionally yielding), allows every permission."""

    def __init__(self, yield_every: int = 0) -> None:
        self.updates: list[Any] = []
        self.yield_every = yield_every

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.yield_every and len(self.updates) % self.yield_every == 0:
            await asyncio.sleep(0.001)  # a handler that suspends must not let later updates overtake it
        self.updates.append(update)

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id))

    def texts(self) -> list[str]:
        return [u.content.text for u in self.updates if isinstance(u, AgentMessageChunk)]


def test_sdk_agent_and_sdk_client_both_on_the_connection_dropin(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        agent = fast.AgentSideConnection(load_test_agent()(), a, engine=engine)
        client = RecordingClient(yield_every=7)
        conn = fast.connect_to_agent(client, b, engine=engine)
        assert isinstance(conn, acp.core.ClientSideConnection) and isinstance(agent, acp.core.AgentSideConnection)
        init = await conn.initialize(protocol_version=1)
        assert isinstance(init, acp.schema.InitializeResponse) and init.agent_info.name == "pysdk-test-agent"
        session = await conn.new_session(cwd="/")
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("stream 300")])
        # prompt returned after every update before its response was handled, in order
        assert response.stop_reason == "end_turn" and len(client.texts()) == 300
        assert client.texts() == sorted(client.texts(), key=lambda t: client.texts().index(t))
        assert [len(t) for t in client.texts()] == [100] * 300
        client.updates.clear()
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("permission 2")])
        assert client.texts()[0] == "permission:allow" and len(client.texts()) == 3
        assert await conn.ext_method("test/echo", {"x": [1, "2"]}) == {"x": [1, "2"]}
        big = {"blob": "b" * (10 * 1024 * 1024)}  # 10 MiB each way
        assert await conn.ext_method("test/echo", big) == big
        with pytest.raises(acp.RequestError) as exc:
            await conn.ext_method("no/such", {})
        assert exc.value.code == -32601
        await conn.close()
        with pytest.raises(ConnectionError):
            await conn.new_session(cwd="/")
        await agent.close()

    run(body)


def test_notifications_are_handled_in_order_even_when_handlers_suspend(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        agent = fast.AgentSideConnection(load_test_agent()(), a, engine=engine)
        client = RecordingClient(yield_every=3)
        conn = fast.connect_to_agent(client, b, engine=engine)
        await conn.initialize(protocol_version=1)
        session = await conn.new_session(cwd="/")
        for i in range(50):
            await agent.session_update(session.session_id, acp.update_agent_message_text(f"n{i}"))
        await conn._conn._conn.settled()  # the FIFO barrier prompt() uses
        await asyncio.sleep(0.05)
        await conn._conn._conn.settled()
        assert client.texts() == [f"n{i}" for i in range(50)]
        await conn.close()
        await agent.close()

    run(body)


def test_wire_seen_by_a_raw_peer(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        agent = fast.AgentSideConnection(load_test_agent()(), a, engine=engine)
        peer = RawPeer(b)
        peer.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"initialize"\n')
        bad = await peer.recv()
        assert bad["id"] is None and bad["error"]["code"] == -32700
        # invalid params: the SDK's ValidationError mapping, -32602 with the pydantic errors
        bad_params = await peer.request(2, "session/new", {"mcpServers": []})
        assert bad_params["error"]["code"] == -32602 and bad_params["error"]["data"]["errors"]
        ok = await peer.request(3, "initialize", {"protocolVersion": 1})
        assert ok["result"]["protocolVersion"] == 1 and ok["id"] == 3
        missing = await peer.request("x", "no/such", {})
        assert missing["error"] == {"code": -32601, "message": "Method not found", "data": {"method": "no/such"}}
        peer.send([{"jsonrpc": "2.0", "id": 10, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}},
                   {"jsonrpc": "2.0", "method": "_test/note", "params": {}},
                   {"jsonrpc": "2.0", "id": 11, "method": "_test/echo", "params": {"k": 1}}])
        reply = await peer.recv()
        assert isinstance(reply, list) and [r["id"] for r in reply] == [10, 11]
        assert "sessionId" in reply[0]["result"] and reply[1]["result"] == {"k": 1}
        peer.stream.close()
        await agent._conn.main_loop()  # returns at end of input
        await agent.close()

    run(body)


def test_client_request_ids_start_at_zero_and_eof_fails_pending(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        conn = fast.connect_to_agent(RecordingClient(), a, engine=engine)
        peer = RawPeer(b)
        task = asyncio.ensure_future(conn.initialize(protocol_version=1))
        first = await peer.recv()
        assert first["id"] == 0 and first["method"] == "initialize"
        assert first["params"]["protocolVersion"] == 1
        peer.send({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}})
        assert (await task).protocol_version == 1
        task = asyncio.ensure_future(conn.new_session(cwd="/"))
        second = await peer.recv()
        assert second["id"] == 1
        peer.send({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "Authentication required"}})
        with pytest.raises(acp.RequestError) as exc:
            await task
        assert exc.value.code == -32000 and exc.value.data is None
        task = asyncio.ensure_future(conn.new_session(cwd="/"))
        await peer.recv()
        peer.stream.close()
        with pytest.raises(ConnectionError):
            await task
        await conn.close()

    run(body)


UPDATES = [
    acp.update_agent_message_text("hello"),
    acp.update_agent_thought_text("hmm"),
    acp.update_user_message_text("hi"),
    acp.start_tool_call("t1", "read", kind="read", status="pending"),
    acp.update_tool_call("t1", status="completed", content=[acp.tool_content(acp.text_block("x"))]),
    acp.update_plan([acp.plan_entry("step", priority="high", status="pending")]),
    acp.update_agent_message(acp.image_block("AAAA", "image/png")),
    acp.update_agent_message(acp.resource_link_block("f", "file:///f")),
    AgentMessageChunk(session_update="agent_message_chunk", content=acp.text_block("id"), message_id="m1"),
    AgentMessageChunk(session_update="agent_message_chunk", content=acp.schema.TextContentBlock(
        type="text", text="annotated", annotations=acp.schema.Annotations(priority=0.5))),
    AgentMessageChunk(session_update="agent_message_chunk", content=acp.schema.TextContentBlock(
        type="text", text="meta", field_meta={"k": 1})),
]


@pytest.mark.parametrize("update", UPDATES, ids=lambda u: type(u).__name__)
def test_plain_text_chunk_shortcut_is_pydantics_dump(update: Any) -> None:
    from acp_fast.compat.acp_sdk import _models

    assert _models.ENABLED  # the pinned SDK's models are what the shortcut assumes
    dumped = _models.dump_update(update)
    expected = update.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)
    if dumped is not None:  # same keys, same order, same values
        assert json.dumps(dumped) == json.dumps(expected)
    plain = (type(update).__name__.endswith("Chunk") and type(update.content).__name__ == "TextContentBlock"
             and update.message_id is None and update.field_meta is None and update.content.annotations is None
             and update.content.field_meta is None)
    assert (dumped is not None) == plain


@pytest.mark.parametrize("update", UPDATES, ids=lambda u: type(u).__name__)
def test_outbound_session_update_is_the_sdks_json(engine: ModuleType, update: Any) -> None:
    async def body() -> None:
        a, b = memory_pair()
        agent = fast.AgentSideConnection(load_test_agent()(), a, engine=engine)
        peer = RawPeer(b)
        await agent.session_update("s1", update)
        await agent.session_update(session_id="s1", update=update, source="meta")  # the SDK's own path
        fast_params = (await peer.recv())["params"]
        meta_params = (await peer.recv())["params"]
        expected = serialize_params(SessionNotification(session_id="s1", update=update))
        assert json.dumps(fast_params) == json.dumps(expected)  # the same JSON, keys in the same order
        assert meta_params == serialize_params(SessionNotification(session_id="s1", update=update,
                                                                   field_meta={"source": "meta"}))
        await agent.close()

    run(body)


def test_strict_initialization_refuses_requests_before_initialize(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        agent = fast.AgentSideConnection(load_test_agent()(), a, engine=engine, strict_initialization=True)
        peer = RawPeer(b)
        early = await peer.request(1, "session/new", {"cwd": "/", "mcpServers": []})
        assert early["error"]["code"] == -32600 and "initialization must complete" in early["error"]["data"]
        assert "result" in await peer.request(2, "initialize", {"protocolVersion": 1})
        assert "result" in await peer.request(3, "session/new", {"cwd": "/", "mcpServers": []})
        again = await peer.request(4, "initialize", {"protocolVersion": 1})
        assert again["error"]["code"] == -32600
        await agent.close()

        c, d = memory_pair()
        conn = fast.connect_to_agent(RecordingClient(), c, engine=engine, strict_initialization=True)
        with pytest.raises(acp.RequestError) as exc:
            await conn.new_session(cwd="/")
        assert exc.value.code == -32600
        await conn.close()
        d.close()

    run(body)


def test_asyncio_stream_pair_form_and_activate(engine: ModuleType) -> None:
    async def body() -> None:
        accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await accepted.put((reader, writer))

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        c_reader, c_writer = await asyncio.open_connection("127.0.0.1", port)
        s_reader, s_writer = await accepted.get()
        agent = fast.AgentSideConnection(load_test_agent()(), s_writer, s_reader, engine=engine)
        client = RecordingClient()
        conn = fast.connect_to_agent(client, c_writer, c_reader, engine=engine)
        await conn.initialize(protocol_version=1)
        big = {"blob": "z" * (10 * 1024 * 1024)}  # a 10 MiB message, far above asyncio's 64 KiB readline limit
        assert await conn.ext_method("test/echo", big) == big
        await conn.close()
        await agent.close()
        server.close()
        await server.wait_closed()

    run(body)


def test_activate_replaces_the_sdk_entry_points_in_a_child() -> None:
    import subprocess

    code = ("import acp, acp.core, acp.connection;"
            "from acp_fast.compat.acp_sdk import activate, fast;"
            "activate.install('connection');"
            "assert acp.run_agent is fast.run_agent and acp.connect_to_agent is fast.connect_to_agent;"
            "assert acp.core.ClientSideConnection is fast.ClientSideConnection;"
            "assert acp.connection.Connection is fast.Connection;"
            "assert acp.spawn_agent_process is fast.spawn_agent_process;"
            "activate.install('connection');"
            "print('ok')")
    repo = str(Path(__file__).resolve().parent.parent)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo, timeout=60,
                         check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


_IMPORTS_PROBE = """
import asyncio, json, socket, sys
import acp
stock = set(sys.modules)
from acp_fast.compat.acp_sdk import activate
activate.install(sys.argv[1])
at_install = sorted(set(sys.modules) - stock)

async def first_use():
    left, right = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=left)
    conn = acp.connect_to_agent(object(), writer, reader)
    await conn.close()
    right.close()

asyncio.run(first_use())
print(json.dumps({"install": at_install, "used": sorted(set(sys.modules) - stock)}))
"""
#: What activating must not import (it is imported on first use): acp_fast's connection,
#: transports, child processes, loops, guard, builder API, the drop-in's own transport, the engine.
_HEAVY = ("acp_fast.engine", "acp_fast._engine_c", "acp_fast._engine_py", "acp_fast.jsonrpc", "acp_fast.transport", "acp_fast.protocol", "acp_fast.roles", "acp_fast.conductor",
          "acp_fast.compat.acp_sdk.transport", "acp_fast.compat.acp_sdk._streams", "uvloop", "shlex")
#: Light after all: the table of protocol facts (method names as string constants) and the one
#: generated table it reads, which the drop-in's connection module imports at module level.
_LIGHT = ("acp_fast.protocol", "acp_fast.protocol.facts", "acp_fast.protocol._session_scope")


@pytest.mark.parametrize("mode", ["transport", "connection"])
def test_activating_imports_nothing_heavy_until_first_use(mode: str) -> None:
    """``import acp`` + ``activate.install(mode)`` adds only ``acp_fast``'s light modules (no SDK module
    the stock ``import acp`` does not import, nothing of acp_fast's connection or transports, no
    uvloop); the first connection made through the SDK's entry point imports them."""
    import subprocess

    repo = str(Path(__file__).resolve().parent.parent)
    out = subprocess.run([sys.executable, "-c", _IMPORTS_PROBE, mode], capture_output=True, text=True, cwd=repo,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])

    def heavy(names: list[str]) -> list[str]:
        return [n for n in names if n not in _LIGHT and any(n == h or n.startswith(h + ".") for h in _HEAVY)]

    at_install = seen["install"]
    assert heavy(at_install) == [], f"activating imported: {heavy(at_install)}"
    others = [n for n in at_install if n.split(".")[0] != "acp_fast"]
    assert others == [], f"activating imported modules the stock import acp does not: {others}"
    used = seen["used"]
    assert "acp_fast.transport.stream" in used and "acp_fast.compat.acp_sdk.transport" in used, used
    assert "acp_fast.engine" in used, used
    if mode == "connection":
        assert "acp_fast.jsonrpc" in used, used


_ENV_PROBE = """
import sys
from acp_fast.compat.acp_sdk import activate
assert activate.install_from_env() == sys.argv[1]
assert "acp" not in sys.modules and activate.installed() is None, "installed before acp was imported"
from acp import run_agent
import acp.core
from acp_fast.compat.acp_sdk import connect, fast
expected = fast.run_agent if sys.argv[1] == "connection" else connect.run_agent
assert run_agent is expected and acp.core.run_agent is expected, run_agent
assert activate.installed() == sys.argv[1]
assert activate.install_from_env() == sys.argv[1]
other = "transport" if sys.argv[1] == "connection" else "connection"
try:
    activate.install(other)
except ValueError:
    print("ok")
"""


@pytest.mark.parametrize("mode", ["transport", "connection"])
def test_install_from_env_waits_for_the_processs_own_import_acp(mode: str) -> None:
    """With ``ACP_FAST_SDK_DROPIN`` set, a process that has not imported ``acp`` does not import it
    (nor pay for it): the drop-in is installed as its own ``import acp`` finishes."""
    import os
    import subprocess

    repo = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "ACP_FAST_SDK_DROPIN": mode}
    out = subprocess.run([sys.executable, "-c", _ENV_PROBE, mode], capture_output=True, text=True, cwd=repo,
                         env=env, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_low_level_connection_handlers_and_observers(engine: ModuleType) -> None:
    from acp.connection import StreamDirection

    async def body() -> None:
        a, b = memory_pair()
        seen: list[tuple[str, str, Any]] = []
        calls: list[tuple[str, Any, bool]] = []

        async def handler(method: str, params: Any, is_notification: bool) -> Any:
            calls.append((method, params, is_notification))
            if method == "boom":
                raise ValueError('{"why": "json text"}')
            return {"echo": params}

        conn = fast.Connection(handler, a, observers=[lambda e: seen.append((e.direction.value, e.message.get(
            "method", "<response>"), e.message.get("id")))], engine=engine)
        peer = RawPeer(b)
        assert (await peer.request(7, "hello", {"x": 1}))["result"] == {"echo": {"x": 1}}
        boom = await peer.request(8, "boom", {})
        # the SDK's mapping of an unexpected exception: -32603, data parsed from str(exc) when it is JSON
        assert boom["error"] == {"code": -32603, "message": "Internal error", "data": {"why": "json text"}}
        peer.notify("note", {"n": 1})
        request = asyncio.ensure_future(conn.send_request("ask", {"q": 2}))
        asked = await peer.recv()
        assert asked["id"] == 0 and asked["params"] == {"q": 2}
        peer.send({"jsonrpc": "2.0", "id": 0, "result": "answer"})
        assert await request == "answer"
        await conn.send_notification("told")
        assert (await peer.recv()) == {"jsonrpc": "2.0", "method": "told"}  # params None: omitted
        assert ("note", {"n": 1}, True) in calls
        assert (StreamDirection.INCOMING.value, "hello", 7) in seen and (StreamDirection.OUTGOING.value, "ask", 0) in seen
        assert (StreamDirection.INCOMING.value, "<response>", 0) in seen
        assert (StreamDirection.OUTGOING.value, "<response>", 7) in seen
        await conn.close()

    run(body)


def test_request_handlers_are_bounded_by_the_connections_backlog(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        release = asyncio.Event()

        async def handler(method: str, params: Any, is_notification: bool) -> Any:
            await release.wait()
            return params

        conn = fast.Connection(handler, a, engine=engine, max_backlog=8)
        peer = RawPeer(b)
        for i in range(40):
            peer.send({"jsonrpc": "2.0", "id": i, "method": "slow", "params": {"i": i}})
            await asyncio.sleep(0)
        for _ in range(20):
            await asyncio.sleep(0)
        rpc = conn._conn
        assert rpc is not None and rpc.reading_paused  # the handlers' Tasks count in its backlog
        assert rpc.running_handlers < 40
        release.set()
        answers = [await peer.recv() for _ in range(40)]
        assert sorted(r["id"] for r in answers) == list(range(40))
        await conn.close()

    run(body)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="asyncio.eager_task_factory is new in Python 3.12")
def test_connections_work_under_the_eager_task_factory(engine: ModuleType) -> None:
    # The SDK's own regression test for this reads its private receive loop's attributes
    # (expected to fail on the drop-in); this is the behaviour it protects: a connection
    # made while tasks start eagerly reads, answers and streams.
    async def body() -> None:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined,unused-ignore]
        a, b = memory_pair()
        agent = fast.AgentSideConnection(load_test_agent()(), a, engine=engine)
        client = RecordingClient(yield_every=5)
        conn = fast.connect_to_agent(client, b, engine=engine)
        assert (await conn.initialize(protocol_version=1)).protocol_version == 1
        session = await conn.new_session(cwd="/")
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("stream 40")])
        assert response.stop_reason == "end_turn" and len(client.texts()) == 40
        await conn.close()
        await agent.close()

    run(body)
