"""MCP-over-ACP (seed 000, issue 12): ``with_mcp_servers`` on v2 session setup, the agent's
``mcp`` ``ClientSession`` over ``mcp/message``, and a v2 proxy's global MCP server.

Both engine twins (``engine`` fixture); the MCP side is the ``mcp`` package.
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

require_module("mcp", what="the MCP package (mcp) is not installed")

from mcp.server.mcpserver import Context as McpContext
from mcp.server.mcpserver import MCPServer
from roles_support import run, serve_in_memory

from acp_fast.errors import JsonRpcError
from acp_fast.roles import Agent, Client, Context, Proxy
from acp_fast.roles import mcp as acp_mcp


def tools_server() -> MCPServer:
    server = MCPServer("tools")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return server


class Recorder:
    """An agent that records the setup requests it receives and, on a prompt, lists and
    calls the tools of every ACP-transport MCP server its session declared."""

    def __init__(self) -> None:
        self.setups: list[tuple[str, Any]] = []
        self.declared: dict[str, list[dict[str, Any]]] = {}
        self.results: list[Any] = []
        self.prompts: list[Any] = []
        self.fail_setup = False
        self.call_during_setup = False
        self.gate: asyncio.Event | None = None
        self.conn: Any = None
        self._next = 0

    async def use_tools(self, conn: Any, declarations: list[dict[str, Any]]) -> list[Any]:
        outcome = []
        for declaration in declarations:
            async with acp_mcp.open_mcp_session(conn, declaration) as session:
                tools = await session.list_tools()
                called = await session.call_tool("add", {"a": 2, "b": 40})
                outcome.append((declaration["name"], [t.name for t in tools.tools], called.structured_content,
                                [c.text for c in called.content if c.type == "text"]))
        return outcome

    def agent(self) -> Any:
        agent = Agent.v2()

        async def setup(method: str, params: Any, cx: Context) -> Any:
            self.setups.append((method, params))
            self.conn = cx.connection
            if self.call_during_setup:  # the routes exist before the setup request is published
                self.results.append(await self.use_tools(cx.connection, acp_mcp.acp_mcp_servers(params)))
            if self.gate is not None:
                await self.gate.wait()
            if self.fail_setup:
                raise JsonRpcError(-32602, "setup refused")
            if method == "session/resume":
                session_id = params["sessionId"]
            else:
                self._next += 1
                session_id = f"s{self._next}"
            self.declared[session_id] = acp_mcp.acp_mcp_servers(params)
            return {"sessionId": session_id} if method != "session/resume" else {}

        for method in ("session/new", "session/resume", "session/fork"):
            agent.on_request(method, lambda p, cx, m=method: setup(m, p, cx))

        async def prompt(params: Any, cx: Context) -> Any:
            self.prompts.append(params)
            self.results.append(await self.use_tools(cx.connection, self.declared[params["sessionId"]]))
            return {"messageId": "m1"}

        agent.on_request("session/prompt", prompt)
        return agent


@pytest.mark.seed("S000-53")
def test_client_serves_mcp_tool_to_agent_over_acp(engine: ModuleType) -> None:
    """The agent lists and calls the client's in-process tool ``add`` over mcp/message."""
    async def body() -> None:
        rec = Recorder()

        async def main(cx: Any) -> Any:
            await cx.initialize()
            opened = await cx.build_session("/tmp", with_mcp_servers=[tools_server()])
            await opened.session.send_prompt("use the tool")
            return opened

        opened = await Client.v2().connect_with(serve_in_memory(rec.agent(), engine), main, engine=engine)
        (method, params), = rec.setups
        assert method == "session/new"
        (decl,) = params["mcpServers"]
        assert decl["type"] == "acp" and decl["name"] == "tools" and decl["serverId"].startswith("acp-fast-mcp-")
        assert set(decl) == {"type", "name", "serverId"}
        assert rec.results == [[("tools", ["add"], {"result": 42}, ["42"])]]
        assert opened.response == {"sessionId": "s1"}

    run(body)


@pytest.mark.seed("S000-51")
def test_resume_and_fork_declare_their_servers_too(engine: ModuleType) -> None:
    async def body() -> None:
        rec = Recorder()

        async def main(cx: Any) -> Any:
            await cx.initialize()
            opened = await cx.build_session("/tmp", mcp_servers=[{"type": "http", "name": "h", "url": "http://x/"}])
            resumed = await cx.resume_session(opened.session.session_id, "/tmp", with_mcp_servers=[tools_server()])
            forked = await opened.session.fork("/tmp", with_mcp_servers=[acp_mcp.McpServer(tools_server, "forked")])
            await resumed.session.send_prompt("x")
            await forked.session.send_prompt("y")
            return sorted(acp_mcp.attachments(cx))

        ids = await Client.v2().connect_with(serve_in_memory(rec.agent(), engine), main, engine=engine)
        methods = [m for m, _ in rec.setups]
        assert methods == ["session/new", "session/resume", "session/fork"]
        new, resume, fork = (p["mcpServers"] for _, p in rec.setups)
        assert new == [{"type": "http", "name": "h", "url": "http://x/"}]
        assert [d["name"] for d in resume] == ["tools"] and [d["name"] for d in fork] == ["forked"]
        assert resume[0]["serverId"] != fork[0]["serverId"]  # connection-scoped, never reused
        assert sorted([resume[0]["serverId"], fork[0]["serverId"]]) == ids
        assert rec.results == [[("tools", ["add"], {"result": 42}, ["42"])],
                               [("forked", ["add"], {"result": 42}, ["42"])]]
        assert rec.setups[2][1]["sessionId"] == "s1"  # fork of the source session

    run(body)


@pytest.mark.seed("S000-50", "S000-51")
def test_session_setup_builders_take_with_mcp_server(engine: ModuleType) -> None:
    """The builder form (seed 000): ``build_session_from(params).with_mcp_server(s).start_session()``,
    likewise for resume and fork; the request's own params are kept and the declaration appended."""
    async def body() -> None:
        rec = Recorder()

        async def main(cx: Any) -> Any:
            await cx.initialize()
            http = {"type": "http", "name": "h", "url": "http://x/"}
            setup = cx.build_session_from({"cwd": "/tmp", "mcpServers": [http], "_meta": {"k": 1}})
            opened = await setup.with_mcp_server(tools_server()).start_session()
            assert setup.params["mcpServers"] == [http]  # the builder's params are not rewritten
            sid = opened.session.session_id
            await cx.resume_session_from({"sessionId": sid, "cwd": "/tmp"}).with_mcp_server(
                acp_mcp.McpServer(tools_server, "resumed")).start_session()
            forked = await cx.fork_session_from({"sessionId": sid, "cwd": "/tmp"}).with_mcp_server(
                acp_mcp.McpServer(tools_server, "forked")).start_session()
            await opened.session.send_prompt("x")
            await forked.session.send_prompt("y")
            return sorted(acp_mcp.attachments(cx))

        ids = await Client.v2().connect_with(serve_in_memory(rec.agent(), engine), main, engine=engine)
        assert [m for m, _ in rec.setups] == ["session/new", "session/resume", "session/fork"]
        new, resume, fork = (p["mcpServers"] for _, p in rec.setups)
        assert new[0] == {"type": "http", "name": "h", "url": "http://x/"}
        assert [d["name"] for d in new] == ["h", "tools"] and new[1]["type"] == "acp"
        assert rec.setups[0][1]["_meta"] == {"k": 1}
        assert [d["name"] for d in resume] == ["resumed"] and [d["name"] for d in fork] == ["forked"]
        assert sorted(d["serverId"] for d in (new[1], resume[0], fork[0])) == ids
        # the resume re-declared s1's servers: its prompt uses "resumed", the fork's "forked"
        assert rec.results == [[("resumed", ["add"], {"result": 42}, ["42"])],
                               [("forked", ["add"], {"result": 42}, ["42"])]]

    run(body)


@pytest.mark.seed("S000-52")
def test_failed_setup_removes_the_attachment(engine: ModuleType) -> None:
    async def body() -> None:
        rec = Recorder()
        rec.fail_setup = True

        async def main(cx: Any) -> Any:
            await cx.initialize()
            sent = cx.build_session("/tmp", with_mcp_servers=[tools_server()])
            attachment = sent.mcp
            assert attachment.state == "pending" and len(acp_mcp.attachments(cx)) == 1  # before the answer
            with pytest.raises(JsonRpcError) as err:
                await sent
            assert err.value.code == -32602
            assert attachment.state == "removed" and acp_mcp.attachments(cx) == {}
            server_id = attachment.hosts[0].server_id
            # the route is gone: an mcp/message for the removed server id fails -33001
            with pytest.raises(JsonRpcError) as err:
                await rec.conn.send_request("mcp/message", {
                    "serverId": server_id, "requestId": "r1", "method": "tools/list"})
            return server_id, err.value.code

        server_id, code = await Client.v2().connect_with(serve_in_memory(rec.agent(), engine), main, engine=engine)
        assert rec.setups[0][1]["mcpServers"][0]["serverId"] == server_id
        assert code == -33001

    run(body)


@pytest.mark.seed("S000-52")
def test_cancelled_setup_with_error_response_removes_the_attachment(engine: ModuleType) -> None:
    async def body() -> None:
        rec = Recorder()
        rec.gate = asyncio.Event()
        rec.fail_setup = True

        async def main(cx: Any) -> Any:
            await cx.initialize()
            sent = cx.build_session("/tmp", with_mcp_servers=[tools_server()])
            assert sent.cancel()  # $/cancel_request; the agent still answers (with an error)
            rec.gate.set()
            with pytest.raises(JsonRpcError):
                await sent
            return sent.mcp.state, acp_mcp.attachments(cx)

        state, left = await Client.v2().connect_with(serve_in_memory(rec.agent(), engine), main, engine=engine)
        assert state == "removed" and left == {}

    run(body)


def test_unknown_server_id_and_malformed_envelope_are_binding_errors(engine: ModuleType) -> None:
    """mcp/message to a client: a removed / unknown server id is -33001, a malformed
    envelope -32602; a live server answers with the inner outcome carrier."""
    async def body() -> None:
        a_end = None
        agent = Agent.v2()
        seen: dict[str, Any] = {}

        def new_session(params: Any, cx: Context) -> Any:
            seen["decl"] = params["mcpServers"][0]
            seen["cx"] = cx.connection
            return {"sessionId": "s"}

        agent.on_request("session/new", new_session)
        del a_end

        async def main(cx: Any) -> Any:
            await cx.initialize()
            await cx.build_session("/tmp", with_mcp_servers=[tools_server()])
            conn = seen["cx"]
            server_id = seen["decl"]["serverId"]
            out: dict[str, Any] = {}
            for label, params in (
                ("unknown", {"serverId": "nope", "requestId": "r1", "method": "tools/list"}),
                ("malformed", {"serverId": server_id, "method": "tools/list"}),
            ):
                with pytest.raises(JsonRpcError) as err:
                    await conn.send_request("mcp/message", params)
                out[label] = err.value.code
            # an inner MCP error is a successful outer response with the error carrier
            async with acp_mcp.open_mcp_session(conn, server_id) as session:
                tools = await session.list_tools()
                out["tools"] = [t.name for t in tools.tools]
            carrier = await conn.send_request("mcp/message", {
                "serverId": server_id, "requestId": "raw-1", "method": "no/such_method",
                "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                     "io.modelcontextprotocol/clientCapabilities": {}}}})
            out["inner_error"] = carrier
            return out

        out = await Client.v2().connect_with(serve_in_memory(agent, engine), main, engine=engine)
        assert out["unknown"] == -33001 and out["malformed"] == -32602
        assert out["tools"] == ["add"]
        assert set(out["inner_error"]) == {"error"} and out["inner_error"]["error"]["code"] == -32601

    run(body)


def test_a_builders_own_mcp_message_handlers_get_what_the_binding_does_not_serve(engine: ModuleType) -> None:
    """The binding's ``mcp/message`` handlers are dynamic handlers of the connection (its
    state is ``connection.mcp``): a client's own ``mcp/message`` request handler gets the
    requests for server ids no attached server has (and malformed ones) instead of -33001 /
    -32602, and an agent's own notification handler the notifications no open MCP session
    owns; the attached server and the open session still get theirs."""
    async def body() -> None:
        agent = Agent.v2()
        seen: dict[str, Any] = {}
        notes: list[Any] = []

        def new_session(params: Any, cx: Context) -> Any:
            seen["decl"] = params["mcpServers"][0]
            seen["cx"] = cx.connection
            return {"sessionId": "s"}

        agent.on_request("session/new", new_session)
        agent.on_notification("mcp/message", lambda p, cx: notes.append(p))
        agent.on_request("_x/ping", lambda p, cx: "pong")
        client = Client.v2().on_request("mcp/message", lambda p, cx: {"result": {"mine": p.get("serverId")}})

        async def main(cx: Any) -> Any:
            await cx.initialize()
            await cx.build_session("/tmp", with_mcp_servers=[tools_server()])
            conn = seen["cx"]
            server_id = seen["decl"]["serverId"]
            out: dict[str, Any] = {"state": (type(cx.mcp).__name__, sorted(cx.mcp.routes.hosts) == [server_id])}
            out["unknown"] = await conn.send_request(
                "mcp/message", {"serverId": "nope", "requestId": "r1", "method": "tools/list"})
            out["malformed"] = await conn.send_request("mcp/message", {"serverId": server_id})
            async with acp_mcp.open_mcp_session(conn, server_id) as session:
                out["tools"] = [t.name for t in (await session.list_tools()).tools]
                cx.send_notification("mcp/message", {"serverId": "other", "requestId": "x", "method": "n"})
                await cx.send_request("_x/ping")  # a round trip: the notification was handled
            return out

        out = await client.connect_with(serve_in_memory(agent, engine), main, engine=engine)
        assert out["state"] == ("McpState", True)
        assert out["unknown"] == {"result": {"mine": "nope"}}
        assert out["malformed"] == {"result": {"mine": seen["decl"]["serverId"]}}
        assert out["tools"] == ["add"]
        assert notes == [{"serverId": "other", "requestId": "x", "method": "n"}]

    run(body)


def test_with_mcp_servers_needs_v2(engine: ModuleType) -> None:
    async def body() -> None:
        agent = Agent.builder().on_request("session/new", lambda p, cx: {"sessionId": "s"})

        async def main(cx: Any) -> Any:
            await cx.initialize()
            with pytest.raises(TypeError, match="v2"):
                cx.build_session("/tmp", with_mcp_servers=[tools_server()])

        await Client.builder().connect_with(serve_in_memory(agent, engine), main, engine=engine)

    run(body)


@pytest.mark.seed("S000-50")
def test_agent_can_use_the_server_during_setup(engine: ModuleType) -> None:
    """Routes are installed and the runner started before session/new is published: the
    agent calls the tool while handling session/new, before it answers."""
    async def body() -> None:
        rec = Recorder()
        rec.call_during_setup = True

        async def main(cx: Any) -> Any:
            await cx.initialize()
            sent = cx.build_session("/tmp", with_mcp_servers=[tools_server()])
            opened = await sent
            return sent.mcp.state, opened.response

        state, response = await Client.v2().connect_with(serve_in_memory(rec.agent(), engine), main, engine=engine)
        assert rec.results == [[("tools", ["add"], {"result": 42}, ["42"])]]
        assert state == "attached" and response == {"sessionId": "s1"}

    run(body)


def _without_servers(params: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in params.items() if k != "mcpServers"})


@pytest.mark.seed("S000-54")
def test_proxy_global_server_is_added_to_setup_requests_only(engine: ModuleType) -> None:
    """Proxy.v2().with_mcp_server: one connection-scoped id added to the mcpServers of
    session/new, session/resume and session/fork; the rest of each request is unchanged
    (compared as encoded JSON), other requests are untouched, and the agent reaches both the
    proxy's server and the client's own server through the chain."""
    from acp_fast.conductor import Conductor

    async def body() -> None:
        rec = Recorder()
        proxy = Proxy.v2().with_mcp_server(tools_server(), name="proxy-tools")
        extra = {"additionalDirectories": ["/a", "/b"], "_meta": {"k": [1, {"z": None}]}, "_x": "kept"}
        http = {"type": "http", "name": "h", "url": "http://x/", "headers": []}
        sent: list[dict[str, Any]] = []

        async def main(cx: Any) -> Any:
            await cx.initialize()
            opened = await cx.build_session("/tmp", mcp_servers=[http], **extra)
            sent.append({"cwd": "/tmp", "mcpServers": [http], **extra})
            sid = opened.session.session_id
            await cx.resume_session(sid, "/tmp", **extra)
            sent.append({"sessionId": sid, "cwd": "/tmp", **extra})
            forked = await cx.fork_session(sid, "/tmp", with_mcp_servers=[acp_mcp.McpServer(tools_server(), "mine")])
            sent.append({"sessionId": sid, "cwd": "/tmp", "mcpServers": forked_decl(cx)})
            await forked.session.send_prompt("go", _meta={"p": 1})

        def forked_decl(cx: Any) -> list[Any]:
            return [h.declaration for h in acp_mcp.attachments(cx).values()]

        async with Conductor([proxy, rec.agent()], engine=engine) as upstream:
            await Client.v2().connect_with(upstream, main, engine=engine)

        assert [m for m, _ in rec.setups] == ["session/new", "session/resume", "session/fork"]
        received = [p for _, p in rec.setups]
        ids = set()
        for before, after in zip(sent, received):
            assert _without_servers(after) == _without_servers(before)
            *kept, added = after["mcpServers"]
            assert kept == before.get("mcpServers", [])
            assert added["type"] == "acp" and added["name"] == "proxy-tools" and set(added) == {"type", "name", "serverId"}
            ids.add(added["serverId"])
        assert len(ids) == 1  # one connection-scoped server id
        # session/prompt passed through untouched
        assert rec.prompts == [{"sessionId": "s2", "prompt": [{"type": "text", "text": "go"}], "_meta": {"p": 1}}]
        assert rec.results == [[("mine", ["add"], {"result": 42}, ["42"]),
                                ("proxy-tools", ["add"], {"result": 42}, ["42"])]]

    run(body)


def test_core_imports_nothing_from_mcp_unless_used() -> None:
    """A session without MCP servers never imports the mcp package (nor anyio/pydantic), nor
    ``secrets`` (with hashlib, hmac and random: ~0.8 MiB of every process's peak RSS)."""
    import subprocess

    code = (
        "import asyncio, sys\n"
        "from acp_fast.roles import Agent, Client, Proxy\n"
        "from acp_fast.transport import memory_pair\n"
        "async def main():\n"
        "    a, b = memory_pair()\n"
        "    agent = Agent.v2().on_request('session/new', lambda p, cx: {'sessionId': 's'})\n"
        "    task = asyncio.ensure_future(agent.serve(a))\n"
        "    async with Client.v2().connect(b) as conn:\n"
        "        await conn.initialize()\n"
        "        await conn.build_session('/tmp', mcp_servers=[])\n"
        "    Proxy.v2()\n"
        "    task.cancel()\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'anyio', 'pydantic',\n"
        "                                                        'secrets', 'hashlib', 'random')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout.strip() == "[]", out.stdout


def test_progress_notifications_and_cancellation_cross_the_binding(engine: ModuleType) -> None:
    """A tool's progress reaches the agent's progress callback as an mcp/message
    notification; cancelling the agent's call sends $/cancel_request, the provider cancels
    the tool and answers -32800, and the server's active request is gone."""
    async def body() -> None:
        cancelled = asyncio.Event()
        server = MCPServer("slow")

        @server.tool()
        async def slow(ctx: McpContext) -> str:
            await ctx.report_progress(1, 2, "half way")
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return "never"

        agent = Agent.v2()
        seen: dict[str, Any] = {}
        agent.on_request("session/new", lambda p, cx: seen.update(decl=p["mcpServers"][0], conn=cx.connection)
                         or {"sessionId": "s"})

        async def main(cx: Any) -> Any:
            await cx.initialize()
            sent = cx.build_session("/tmp", with_mcp_servers=[server])
            await sent
            progress: list[Any] = []
            got_progress = asyncio.Event()

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append((value, total, message))
                got_progress.set()

            async with acp_mcp.open_mcp_session(seen["conn"], seen["decl"]) as session:
                call = asyncio.ensure_future(session.call_tool("slow", {}, progress_callback=on_progress))
                await got_progress.wait()
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                await asyncio.wait_for(cancelled.wait(), 10)
                host = sent.mcp.hosts[0]
                while host._active:  # the provider answered -32800 and forgot the request
                    await asyncio.sleep(0.01)
                # the server still serves after a cancelled call
                tools = await session.list_tools()
            return progress, [t.name for t in tools.tools]

        progress, tools = await Client.v2().connect_with(serve_in_memory(agent, engine), main, engine=engine)
        assert progress == [(1.0, 2.0, "half way")]
        assert tools == ["slow"]

    run(body)


# -- the compatibility polyfill (acp_fast.conductor.mcp_polyfill) ---------------------------


def http_agent(record: dict[str, Any]) -> Any:
    """A v2 agent with HTTP MCP servers only: it uses each ``http`` declaration through the
    mcp package's streamable HTTP client."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    agent = Agent.v2()
    agent.on_request("initialize", lambda p, cx: {
        "protocolVersion": 2, "info": {"name": "http-agent", "version": "0"},
        "capabilities": {"session": {"mcp": {"http": {}}}}})

    def new_session(params: Any, cx: Context) -> Any:
        record["setup"] = params
        return {"sessionId": "s1"}

    async def prompt(params: Any, cx: Context) -> Any:
        out = []
        for decl in record["setup"]["mcpServers"]:
            if decl["type"] != "http" or not decl["url"].startswith("http://127.0.0.1:"):
                continue
            async with streamable_http_client(decl["url"]) as (read, write), ClientSession(read, write) as session:
                await session.discover()
                tools = await session.list_tools()
                called = await session.call_tool("add", {"a": 2, "b": 40})
                out.append((decl["name"], [t.name for t in tools.tools], called.structured_content))
        record["results"] = out
        return {"messageId": "m1"}

    agent.on_request("session/new", new_session)
    agent.on_request("session/prompt", prompt)
    return agent


@pytest.mark.seed("S000-55")
@pytest.mark.parametrize("component", ["in-process", "child"])
def test_polyfill_bridges_acp_declarations_to_http_for_agents_without_the_capability(
        engine: ModuleType, component: str) -> None:
    """The polyfill in front of an agent without the acp transport (in process, and as the
    ``python -m acp_fast.conductor.mcp_polyfill`` component): each native declaration
    becomes an HTTP one, in place, that reaches the client's MCP server."""
    from roles_support import agent_env

    from acp_fast.conductor import Conductor, mcp_polyfill

    polyfill: Any = (mcp_polyfill.router() if component == "in-process"
                     else [sys.executable, "-m", "acp_fast.conductor.mcp_polyfill"])

    async def body() -> None:
        record: dict[str, Any] = {}
        stdio = {"type": "stdio", "name": "fs", "command": "/bin/true", "args": [], "env": []}
        extra = {"additionalDirectories": ["/a"], "_meta": {"k": 1}}

        async def main(cx: Any) -> Any:
            init = await cx.initialize()
            sent = cx.build_session("/tmp", mcp_servers=[stdio], with_mcp_servers=[tools_server()], **extra)
            await sent
            await (await sent).session.send_prompt("go")
            return init, sent.mcp.declarations

        async with Conductor([polyfill, http_agent(record)], engine=engine, env=agent_env(engine)) as upstream:
            init, declared = await Client.v2().connect_with(upstream, main, engine=engine)

        # the client sees the capability the polyfill provides; the agent has http only
        assert init["capabilities"]["session"]["mcp"] == {"http": {}, "acp": {}}
        setup = record["setup"]
        fs, bridged = setup["mcpServers"]
        assert fs == stdio  # other declarations unchanged, in place
        assert bridged["type"] == "http" and bridged["name"] == "tools" and bridged["headers"] == []
        assert bridged["url"].endswith("/mcp/" + declared[0]["serverId"])
        assert _without_servers(setup) == json.dumps({"cwd": "/tmp", **extra})
        assert record["results"] == [("tools", ["add"], {"result": 42})]

    run(body)


def test_polyfill_passes_declarations_through_to_agents_with_the_capability(engine: ModuleType) -> None:
    from acp_fast.conductor import Conductor, mcp_polyfill

    async def body() -> None:
        rec = Recorder()
        agent = rec.agent().on_request("initialize", lambda p, cx: {
            "protocolVersion": 2, "info": {"name": "native", "version": "0"},
            "capabilities": {"session": {"mcp": {"acp": {}}}}})

        async def main(cx: Any) -> Any:
            init = await cx.initialize()
            sent = cx.build_session("/tmp", with_mcp_servers=[tools_server()])
            opened = await sent
            await opened.session.send_prompt("go")
            return init, sent.mcp.declarations

        async with Conductor([mcp_polyfill.router(), agent], engine=engine) as upstream:
            init, declared = await Client.v2().connect_with(upstream, main, engine=engine)

        assert init["capabilities"] == {"session": {"mcp": {"acp": {}}}}
        assert rec.setups[0][1] == {"cwd": "/tmp", "mcpServers": declared}
        assert rec.results == [[("tools", ["add"], {"result": 42}, ["42"])]]

    run(body)


def test_polyfill_v1_rewrites_capability_and_declarations(engine: ModuleType) -> None:
    """v1 (from _proxy/initialize): ``mcpCapabilities.acp`` is advertised upstream and an
    ``acp`` declaration becomes an ``http`` one with the v1-required ``headers``."""
    from acp_fast.conductor import Conductor, mcp_polyfill

    async def body() -> None:
        seen: dict[str, Any] = {}
        agent = Agent.builder()
        agent.on_request("initialize", lambda p, cx: {
            "protocolVersion": 1, "agentInfo": {"name": "v1", "version": "0"},
            "agentCapabilities": {"mcpCapabilities": {"http": True, "sse": False}}})
        agent.on_request("session/new", lambda p, cx: seen.update(setup=p) or {"sessionId": "s"})
        http = {"type": "http", "name": "h", "url": "http://x/", "headers": []}
        acp = {"type": "acp", "name": "tools", "serverId": "srv-1"}

        async def main(cx: Any) -> Any:
            init = await cx.initialize()
            await cx.build_session("/tmp", mcp_servers=[acp, http])
            return init

        async with Conductor([mcp_polyfill.router(), agent], engine=engine) as upstream:
            init = await Client.builder().connect_with(upstream, main, engine=engine)

        assert init["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": False, "acp": True}
        bridged, kept = seen["setup"]["mcpServers"]
        assert kept == http
        assert bridged["type"] == "http" and bridged["name"] == "tools" and bridged["headers"] == []
        assert bridged["url"].startswith("http://127.0.0.1:") and bridged["url"].endswith("/mcp/srv-1")

    run(body)


def test_bad_servers_fail_early_and_a_failed_runner_answers_backend_failed(engine: ModuleType) -> None:
    """Not a server: TypeError before anything is published. A factory that raises: the
    runner stops and every mcp/message for it is answered -33002 (never left pending)."""
    async def body() -> None:
        agent = Agent.v2()
        seen: dict[str, Any] = {}
        agent.on_request("session/new", lambda p, cx: seen.update(p=p, conn=cx.connection) or {"sessionId": "s"})

        def broken() -> Any:
            raise RuntimeError("no server today")

        async def main(cx: Any) -> Any:
            await cx.initialize()
            with pytest.raises(TypeError, match="not an mcp Server"):
                cx.build_session("/tmp", with_mcp_servers=["not a server"])
            assert acp_mcp.attachments(cx) == {}
            await cx.build_session("/tmp", with_mcp_servers=[acp_mcp.McpServer(broken, "broken")])
            (decl,) = seen["p"]["mcpServers"]
            codes = []
            for n in range(2):
                with pytest.raises(JsonRpcError) as err:
                    await seen["conn"].send_request("mcp/message", {
                        "serverId": decl["serverId"], "requestId": f"r{n}", "method": "tools/list"})
                codes.append(err.value.code)
            return decl, codes

        decl, codes = await Client.v2().connect_with(serve_in_memory(agent, engine), main, engine=engine)
        assert decl["name"] == "broken" and codes == [-33002, -33002]

    run(body)
