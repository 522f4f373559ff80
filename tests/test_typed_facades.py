"""The builder API carries version and role in its types (checked with mypy --strict).

Each case is a small user program: the good ones must type-check with no ``cast``,
``isinstance`` or ``type: ignore``; each bad one must be refused by the checker at the line
marked ``# error``. One mypy run checks them all (separate files, one module each).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

REPO = Path(__file__).resolve().parent.parent

GOOD = {
    "v2_client_opens_v2_sessions": """
        from acp_fast import Client, spawn
        from acp_fast.roles import V2Session

        async def main() -> V2Session:
            async with Client.v2().connect(spawn(["agent"])) as conn:
                await conn.initialize()
                opened = await conn.build_session(cwd=".")
                resumed = await conn.resume_session(opened.session.session_id, ".")
                session: V2Session = resumed.session
                await session.wait_idle(after=session.idle_epoch)
                return session
    """,
    "v1_client_opens_v1_sessions": """
        from acp_fast import Client, spawn
        from acp_fast.roles import V1, ClientConnection, V1Session

        async def main(conn: ClientConnection[V1]) -> V1Session:
            return (await conn.build_session(cwd=".")).session

        async def run() -> V1Session:
            return await Client.builder().connect_with(spawn(["agent"]), main)
    """,
    "proxy_handlers_reach_the_successor": """
        from acp_fast import Proxy
        from acp_fast.jsontypes import Json, JsonObject
        from acp_fast.roles import ProxyContext

        async def prompt(params: JsonObject, cx: ProxyContext) -> Json:
            return await cx.send_to_successor("session/prompt", params, passthrough=True)

        proxy = Proxy.v2().on_request("session/prompt", prompt)
    """,
    "agent_session_serves_typed_prompts": """
        from acp_fast import Agent, Context
        from acp_fast.protocol import methods_v2, types_v2
        from acp_fast.roles import AgentSession, Deferred, PromptTurn

        session = AgentSession("s1")

        async def work(turn: PromptTurn) -> str | None:
            turn.insert()
            return None

        def prompt(params: types_v2.PromptRequest, cx: Context) -> Deferred[types_v2.PromptResponse]:
            return session.prompt(cx, params, work)

        agent = Agent.v2().on_request(methods_v2.session.prompt, prompt)
    """,
}

GOOD.update({
    "contexts_are_typed_by_their_builder": """
        from acp_fast import Agent, Client, Proxy
        from acp_fast.jsontypes import Json, JsonObject
        from acp_fast.roles import (V2, AgentConnection, ClientConnection, Context, ProxyConnection,
                                    ProxyContext, V2Session)

        def on_agent(params: JsonObject, cx: Context[AgentConnection[V2]]) -> Json:
            connection: AgentConnection[V2] = cx.connection
            return {"version": connection.version}

        async def on_client(params: JsonObject, cx: Context[ClientConnection[V2]]) -> Json:
            session: V2Session = (await cx.connection.build_session(cwd=".")).session
            return {"sessionId": session.session_id}

        async def on_proxy(params: JsonObject, cx: ProxyContext[ProxyConnection[V2]]) -> Json:
            return await cx.connection.send_to_successor("session/prompt", params, passthrough=True)

        def plain(params: JsonObject, cx: Context) -> Json:  # a bare Context fits every builder
            return None

        agent = Agent.v2().on_request("_x/a", on_agent).on_request("_x/p", plain)
        client = Client.v2().on_request("_x/c", on_client).on_request("_x/p", plain)
        proxy = Proxy.v2().on_request("_x/p", on_proxy).on_request("_x/q", plain)
    """,
})

BAD = {
    "v1_client_has_no_resume": """
        from acp_fast.roles import V1, ClientConnection

        async def main(conn: ClientConnection[V1]) -> None:
            await conn.resume_session("s1", ".")  # error
    """,
    "v1_session_is_not_v2": """
        from acp_fast.roles import V1, ClientConnection, V2Session

        async def main(conn: ClientConnection[V1]) -> V2Session:
            return (await conn.build_session(cwd=".")).session  # error
    """,
    "agent_context_has_no_successor": """
        from acp_fast import Context
        from acp_fast.jsontypes import JsonObject

        def prompt(params: JsonObject, cx: Context) -> None:
            cx.send_to_successor("session/prompt", params)  # error
    """,
    "agent_connection_does_not_initialize": """
        from acp_fast.roles import V2, AgentConnection

        def main(conn: AgentConnection[V2]) -> None:
            conn.initialize()  # error
    """,
    "prompt_handler_must_answer_a_prompt_response": """
        from acp_fast import Agent, Context
        from acp_fast.protocol import methods_v2, types_v2

        def prompt(params: types_v2.PromptRequest, cx: Context) -> types_v2.NewSessionResponse:
            return {"sessionId": "s1"}

        agent = Agent.v2().on_request(methods_v2.session.prompt, prompt)  # error
    """,
    "agent_handlers_do_not_get_a_client_connection": """
        from acp_fast import Agent
        from acp_fast.jsontypes import Json, JsonObject
        from acp_fast.roles import V2, ClientConnection, Context

        def handler(params: JsonObject, cx: Context[ClientConnection[V2]]) -> Json:
            return None

        agent = Agent.v2().on_request("_x/a", handler)  # error
    """,
    "agent_handlers_get_no_proxy_context": """
        from acp_fast import Agent
        from acp_fast.jsontypes import Json, JsonObject
        from acp_fast.roles import ProxyContext

        def handler(params: JsonObject, cx: ProxyContext) -> Json:
            return None

        agent = Agent.v2().on_request("_x/a", handler)  # error
    """,
    "v1_builder_is_not_a_v2_router_entry": """
        from acp_fast import Agent

        router = Agent.protocol_router().with_v2(Agent.builder())  # error
    """,
}


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[int, str]]]:
    root = tmp_path_factory.mktemp("typed_facades")
    for name, source in {**GOOD, **BAD}.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    stdout, stderr, _status = mypy_api.run([
        "--strict", "--no-incremental", "--no-error-summary", "--hide-error-context",
        "--cache-dir", str(root / ".mypy_cache"), str(root)])
    assert not stderr, stderr
    errors: dict[str, list[tuple[int, str]]] = {name: [] for name in {**GOOD, **BAD}}
    for line in stdout.splitlines():
        m = re.match(r"(?:.*[/\\])?(\w+)\.py:(\d+): error: (.*)", line)
        if m and m.group(1) in errors:
            errors[m.group(1)].append((int(m.group(2)), m.group(3)))
        else:
            assert m is None or "acp_fast" not in line, f"the package itself fails: {line}"
    return errors


@pytest.mark.parametrize("name", sorted(GOOD))
def test_typed_use_checks_clean(name: str, mypy_report: dict[str, list[tuple[int, str]]]) -> None:
    assert not re.search(r"\bcast\(|\bisinstance\(|type: *ignore", GOOD[name])
    assert mypy_report[name] == []


@pytest.mark.parametrize("name", sorted(BAD))
def test_misuse_is_refused_by_the_checker(name: str, mypy_report: dict[str, list[tuple[int, str]]]) -> None:
    lines = textwrap.dedent(BAD[name]).lstrip().splitlines()
    expected = [i for i, line in enumerate(lines, 1) if line.endswith("# error")]
    assert expected, "a bad case marks its error line"
    assert sorted({line for line, _ in mypy_report[name]}) == expected, mypy_report[name]
