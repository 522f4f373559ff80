"""Session helpers (seed 000 "High-level v2 sessions"; protocol.md §4.2, §7.3-7.4).

Both engine twins; the main flows also run against a real child process
(``tests/helpers/roles_agent.py`` on stdio).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

import roles_agent
from roles_support import RawPeer, open_agent, run, serve_in_memory

from acp_fast.jsonrpc import Connection
from acp_fast.roles import Client
from acp_fast.roles.sessions import SessionState, StopReason, V1Session, V2Session
from acp_fast.transport import memory_pair


@pytest.fixture(params=["memory", "child"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.seed("S000-10")
def test_v2_build_session_returns_complete_response_and_command_handle(engine: ModuleType, transport: str) -> None:
    async def body() -> None:
        async def main(cx: Any) -> Any:
            await cx.initialize()
            opened = await cx.build_session("/tmp")
            session, response = opened.into_parts()
            assert session == V2Session("v2-session", cx) and session.connection is cx
            assert session.state.state == "idle"
            return response

        response = await Client.v2().connect_with(await open_agent(transport, "v2", engine), main, engine=engine)
        assert response == {"sessionId": "v2-session", "configOptions": [], "_meta": {"extra": {"kept": True}}}

    run(body)


@pytest.mark.seed("S000-14")
def test_v2_send_prompt_returns_insertion_receipt_and_idle_ends_work(engine: ModuleType, transport: str) -> None:
    async def body() -> None:
        inserted: list[Any] = []
        client = Client.v2().on_session_update(
            lambda u, cx: inserted.append(u.payload["messageId"]) if u.kind == "user_message" else None)

        async def main(cx: Any) -> Any:
            await cx.initialize()
            session = (await cx.build_session("/tmp")).session
            results = []
            for text in ("one", "two"):
                epoch = session.idle_epoch
                receipt = await session.send_prompt(text)
                results.append((receipt, await session.wait_idle(after=epoch)))
            return results

        results = await client.connect_with(await open_agent(transport, "v2", engine), main, engine=engine)
        assert [(r["messageId"], s.kind) for r, s in results] == [("m1", "end_turn"), ("m2", "end_turn")]
        assert inserted == ["m1", "m2"]  # live user-message updates use the receipt's id

    run(body)


@pytest.mark.seed("S000-18")
def test_v2_state_tracking_running_requires_action_idle(engine: ModuleType) -> None:
    async def body() -> None:
        states: list[str] = []

        def on_update(update: Any, cx: Any) -> None:
            if update.kind == "state_update":
                states.append(cx.connection.sessions.get(update.session_id).state)

        async def main(cx: Any) -> Any:
            await cx.initialize()
            session = (await cx.build_session("/tmp")).session
            epoch = session.idle_epoch
            await session.send_prompt("block")
            return await session.wait_idle(after=epoch), session.idle_epoch - epoch

        stream = serve_in_memory(roles_agent.v2_agent({}), engine)
        stop, completions = await Client.v2().on_session_update(on_update).connect_with(stream, main, engine=engine)
        assert states == ["requires_action", "running", "idle"]
        assert stop == "end_turn" and completions == 1

    run(body)


@pytest.mark.seed("S000-33", "S000-100")
def test_v2_error_stop_reason_carries_the_error(engine: ModuleType) -> None:
    async def body() -> None:
        async def main(cx: Any) -> Any:
            await cx.initialize()
            session = (await cx.build_session("/tmp")).session
            epoch = session.idle_epoch
            receipt = await session.send_prompt("fail")  # inserted: the response stays successful
            return receipt, await session.wait_idle(after=epoch)

        stream = serve_in_memory(roles_agent.v2_agent({}), engine)
        receipt, stop = await Client.v2().connect_with(stream, main, engine=engine)
        assert receipt == {"messageId": "m1"}
        assert stop.kind == "error" and stop.error == {"code": -32000, "message": "Authentication required"}

    run(body)


@pytest.mark.seed("S000-20")
def test_v2_cancel_active_work_ends_with_cancelled(engine: ModuleType, transport: str) -> None:
    async def body() -> None:
        running = asyncio.Event()
        client = Client.v2().on_session_update(
            lambda u, cx: running.set() if u.payload.get("state") == "running" else None)

        async def main(cx: Any) -> Any:
            await cx.initialize()
            session = (await cx.build_session("/tmp")).session
            epoch = session.idle_epoch
            await session.send_prompt("wait-cancel")
            await running.wait()
            assert session.cancel_active_work() is True
            return await session.wait_idle(after=epoch)

        stop = await client.connect_with(await open_agent(transport, "v2", engine), main, engine=engine)
        assert stop == StopReason("cancelled", None, {})

    run(body)


@pytest.mark.seed("S000-17")
def test_v2_state_reported_before_new_session_response_is_kept(engine: ModuleType) -> None:
    async def body() -> None:
        a, b = memory_pair()
        agent = RawPeer(a)

        async def main(cx: Any) -> Any:
            sent = cx.initialize()
            msg = await agent.recv()
            agent.send({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "protocolVersion": 2, "info": {"name": "a", "version": "1"}}})
            await sent
            pending = cx.build_session("/tmp")
            msg = await agent.recv()
            agent.notify("session/update", {"sessionId": "s9", "update": {
                "sessionUpdate": "state_update", "state": "running"}})
            agent.send({"jsonrpc": "2.0", "id": msg["id"], "result": {"sessionId": "s9"}})
            return (await pending).session.state.state

        assert await Client.v2().connect_with(b, main, engine=engine) == "running"

    run(body)


@pytest.mark.seed("S000-19")
def test_repeated_idle_snapshot_is_not_a_new_completion() -> None:
    state = SessionState()
    state.apply({"state": "idle", "stopReason": "end_turn"})  # a snapshot of an idle session
    assert state.idle_epoch == 0
    state.apply({"state": "running"})
    state.apply({"state": "idle", "stopReason": "max_tokens"})
    state.apply({"state": "idle", "stopReason": "max_tokens"})
    assert state.idle_epoch == 1 and state.stop_reason == "max_tokens"
    state.apply({"state": "_future_state"})
    assert state.state == "_future_state"
    state.apply({"state": "idle"})
    assert state.idle_epoch == 2 and state.stop_reason is None  # no reason reported


@pytest.mark.seed("S000-11", "S000-25")
def test_v2_resume_replay_delivered_in_order_before_the_response(engine: ModuleType, transport: str) -> None:
    async def body() -> None:
        seen: list[str] = []

        async def on_update(update: Any, cx: Any) -> None:
            for _ in range(3):  # a handler that really suspends
                await asyncio.sleep(0)
            seen.append(update.payload.get("messageId") or update.payload.get("state"))

        async def main(cx: Any) -> Any:
            await cx.initialize()
            opened = await cx.resume_session("old-session", "/tmp", replay_from={"type": "start"})
            snapshot = list(seen)
            return opened, snapshot

        opened, snapshot = await Client.v2().on_session_update(on_update).connect_with(
            await open_agent(transport, "v2", engine), main, engine=engine)
        assert snapshot == ["r0", "r1", "r2", "r3", "r4", "idle"]
        assert opened.session.session_id == "old-session"
        assert opened.response == {"configOptions": [], "_meta": {"resumed": "old-session"}}

    run(body)


@pytest.mark.seed("S000-27")
def test_v1_prompt_turn_ends_with_stop_reason(engine: ModuleType, transport: str) -> None:
    async def body() -> None:
        chunks: list[str] = []
        client = Client.builder().on_session_update(lambda u, cx: chunks.append(u.payload["content"]["text"]))

        async def main(cx: Any) -> Any:
            await cx.initialize()
            session = (await cx.build_session("/tmp")).session
            done = await session.send_prompt("hello")
            turn = session.send_prompt("wait-cancel")
            while len(chunks) < 2:
                await asyncio.sleep(0)
            assert session.cancel_active_work() is True
            return done, await turn

        done, cancelled = await client.connect_with(await open_agent(transport, "v1", engine), main, engine=engine)
        assert done == {"stopReason": "end_turn"} and cancelled == {"stopReason": "cancelled"}
        assert chunks == ["echo: hello", "echo: wait-cancel"]

    run(body)


@pytest.mark.seed("S000-27")
def test_session_helpers_check_the_connection_version(engine: ModuleType) -> None:
    async def body() -> None:
        async def v1_main(cx: Any) -> Any:
            await cx.initialize()
            assert type((await cx.build_session("/tmp")).session) is V1Session  # same verb on v1
            with pytest.raises(TypeError):
                cx.resume_session("s", "/tmp")  # v1 has no resume

        async def v2_main(cx: Any) -> Any:
            await cx.initialize()
            assert type((await cx.build_session("/tmp")).session) is V2Session

        await Client.builder().connect_with(serve_in_memory(roles_agent.v1_agent({}), engine), v1_main, engine=engine)
        await Client.v2().connect_with(serve_in_memory(roles_agent.v2_agent({}), engine), v2_main, engine=engine)

    run(body)


@pytest.mark.seed("S000-21", "S004-05", "S004-06")
@pytest.mark.parametrize("version", [1, 2])
def test_cancel_active_work_does_the_clients_part(engine: ModuleType, version: int) -> None:
    """Seed 000: cancel_active_work sends session/cancel, answers every pending permission
    request of that session (and no other) with the cancelled outcome exactly once, and
    marks the session's unfinished tool calls cancelled."""
    async def body() -> None:
        a, b = memory_pair()
        peer = RawPeer(a)
        release = asyncio.Event()
        client = Client.builder() if version == 1 else Client.v2()

        @client.on_request("session/request_permission")
        async def ask_the_user(params: Any, cx: Any) -> Any:
            await release.wait()  # the user has not decided yet
            return {"outcome": {"outcome": "selected", "optionId": "allow"}}

        async def main(conn: Any) -> Any:
            init = asyncio.ensure_future(conn.initialize())
            req = await peer.recv()
            result = {"protocolVersion": version}
            result.update({"info": {"name": "a", "version": "1"}, "capabilities": {}} if version == 2
                          else {"agentInfo": {"name": "a", "version": "1"}, "agentCapabilities": {}})
            peer.send({"jsonrpc": "2.0", "id": req["id"], "result": result})
            await init
            setup = conn.build_session("/tmp")
            req = await peer.recv()
            peer.send({"jsonrpc": "2.0", "id": req["id"], "result": {"sessionId": "s"}})
            session = (await setup).session
            for call, status in (("t1", None), ("t2", "in_progress"), ("t3", "completed")):
                kind = "tool_call" if version == 1 else "tool_call_update"  # v2 has no tool_call
                update = {"sessionUpdate": kind, "toolCallId": call, "title": call}
                if status:
                    update["status"] = status
                peer.send({"jsonrpc": "2.0", "method": "session/update",
                           "params": {"sessionId": "s", "update": update}})
            option = [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]
            call = {"toolCallId": "t1"}
            for rid, sid in ((101, "s"), (102, "s"), (103, "other")):
                params = {"sessionId": sid, "toolCall": call, "options": option}
                if version == 2:
                    params = {"sessionId": sid, "title": "ok?", "options": option}
                peer.send({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission", "params": params})
            await asyncio.sleep(0.05)
            assert session.cancel_active_work() is True
            seen = [await peer.recv() for _ in range(3)]
            assert seen[0] == {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}}
            answers = {m["id"]: m["result"] for m in seen[1:]}
            assert answers == {101: {"outcome": {"outcome": "cancelled"}}, 102: {"outcome": {"outcome": "cancelled"}}}
            states = conn.sessions.get("s").tool_calls
            assert states == {"t1": "cancelled", "t2": "cancelled", "t3": "completed"}
            release.set()  # the user decides late: only the other session's request is answered
            late = await peer.recv()
            assert late["id"] == 103 and late["result"]["outcome"]["outcome"] == "selected"
            await asyncio.sleep(0.05)
            assert peer.lines.empty()  # 101 and 102 were answered exactly once

        await client.connect_with(b, main, engine=engine)

    run(body)


@pytest.mark.seed("S000-12")
def test_fork_session_opens_the_new_session_with_the_complete_response(engine: ModuleType) -> None:
    """Seed 000 (unstable): fork publishes session/fork and the handle uses the new id."""
    from acp_fast import testy
    from acp_fast.errors import JsonRpcError

    async def body() -> None:
        a, b = memory_pair()
        served = asyncio.ensure_future(testy.build((2,)).serve(a, engine=engine))
        seen: list[tuple[str, str]] = []
        client = Client.v2()
        client.on_session_update(lambda u, cx: seen.append((u.session_id, u.kind)))

        async def main(conn: Any) -> None:
            init = await conn.initialize()
            assert "fork" in init["capabilities"]["session"]
            source = (await conn.build_session("/tmp")).session
            epoch = source.idle_epoch
            await source.send_prompt("hello")
            await source.wait_idle(after=epoch)
            opened = await source.fork("/tmp")
            fork = opened.session
            assert isinstance(fork, V2Session) and fork.session_id != source.session_id
            assert opened.response == {"sessionId": fork.session_id}
            seen.clear()
            resumed = await conn.resume_session(fork.session_id, "/tmp", replay_from={"type": "start"})
            assert resumed.session == fork
            # the fork's replay is the source's history (user message, agent message), then
            # the state snapshot, all under the new id
            assert seen == [(fork.session_id, "user_message"), (fork.session_id, "agent_message"),
                            (fork.session_id, "state_update")]
            with pytest.raises(JsonRpcError):
                await conn.fork_session("no-such-session", "/tmp")

        await client.connect_with(b, main, engine=engine)
        await asyncio.wait_for(served, 5)

    run(body)


def _helper_agent(hold: asyncio.Event | None = None) -> Any:
    """A v2 agent written with the builder's AgentSession helper: ``hold`` keeps the prompt
    uninserted (running only); ``fail`` fails after insertion; anything else waits for the
    cancel after insertion, sending one chunk on the way out."""
    from acp_fast.errors import AUTH_REQUIRED, JsonRpcError
    from acp_fast.roles import Agent
    from acp_fast.roles.sessions import AgentSession, PromptTurn

    agent = Agent.v2()
    sessions: dict[str, AgentSession] = {}

    @agent.on_request("session/new")
    def new(params: Any, cx: Any) -> Any:
        sid = f"s{len(sessions) + 1}"
        sessions[sid] = AgentSession(sid)
        return {"sessionId": sid}

    @agent.on_request("session/prompt")
    def prompt(params: Any, cx: Any) -> Any:
        text = params["prompt"][0]["text"]

        async def work(turn: PromptTurn) -> str:
            turn.set_state("running")
            if text == "hold":
                await turn.wait_cancelled()
                turn.insert()  # too late: cancelled before insertion (-32800)
            turn.insert()
            if text == "fail":
                raise JsonRpcError(AUTH_REQUIRED)
            await turn.wait_cancelled()
            for _ in range(3):  # final updates take a few loop turns
                await asyncio.sleep(0)
            turn.send({"sessionUpdate": "agent_message_chunk", "messageId": "a1",
                       "content": {"type": "text", "text": "bye"}})
            return "end_turn"  # cancelled work ends cancelled whatever it returns

        return sessions[params["sessionId"]].prompt(cx, params, work)

    agent.on_notification("session/cancel", lambda p, cx: sessions[p["sessionId"]].cancel())
    agent.on_request("session/close", lambda p, cx: sessions[p["sessionId"]].close())
    return agent


@pytest.mark.seed("S000-24")
def test_v2_close_resolves_after_the_final_updates_were_handled(engine: ModuleType) -> None:
    """Seed 000 (client and agent helper): the close response follows the cancelled work's
    final updates and idle ``cancelled``; the client's ``close()`` resolves after their
    handlers ran; an inserted prompt kept its message id, an uninserted one got -32800."""
    from acp_fast.errors import JsonRpcError

    async def body() -> None:
        handled: list[str] = []

        async def on_update(update: Any, cx: Any) -> None:
            for _ in range(5):  # a handler that really suspends
                await asyncio.sleep(0)
            handled.append(update.payload.get("state") or update.kind)

        async def main(cx: Any) -> Any:
            await cx.initialize()
            inserted = (await cx.build_session("/tmp")).session
            receipt = await inserted.send_prompt("wait")
            assert receipt == {"messageId": "s1-user-1"}
            assert await inserted.close() == {}
            assert handled == ["running", "user_message", "agent_message_chunk", "idle"]
            assert inserted.state.stop_reason == "cancelled" and inserted.state.state == "idle"
            held = (await cx.build_session("/tmp")).session
            pending = held.send_prompt("hold")
            while held.state.state != "running":
                await asyncio.sleep(0)
            handled.clear()
            assert await held.close() == {}
            assert handled[-1] == "idle" and "user_message" not in handled
            assert held.state.stop_reason == "cancelled"
            with pytest.raises(JsonRpcError) as info:
                await pending
            assert info.value.code == -32800

        stream = serve_in_memory(_helper_agent(), engine)
        await Client.v2().on_session_update(on_update).connect_with(stream, main, engine=engine)

    run(body)


@pytest.mark.seed("S000-30", "S000-32")
def test_agent_session_reports_failures_after_insertion_on_idle(engine: ModuleType) -> None:
    """Seed 000: an inserted prompt's failure (auth_required) is the idle update's error stop
    reason; the prompt response stayed successful; a second prompt while work runs is
    rejected before insertion."""
    from acp_fast.errors import JsonRpcError

    async def body() -> None:
        async def main(cx: Any) -> Any:
            await cx.initialize()
            session = (await cx.build_session("/tmp")).session
            epoch = session.idle_epoch
            assert await session.send_prompt("fail") == {"messageId": "s1-user-1"}
            stop = await session.wait_idle(after=epoch)
            assert stop.kind == "error" and stop.error == {"code": -32000, "message": "Authentication required"}
            await session.send_prompt("wait")
            with pytest.raises(JsonRpcError) as info:
                await session.send_prompt("again")
            assert info.value.code == -32602
            epoch = session.idle_epoch
            session.cancel_active_work()
            assert await session.wait_idle(after=epoch) == "cancelled"

        await Client.v2().connect_with(serve_in_memory(_helper_agent(), engine), main, engine=engine)

    run(body)


@pytest.mark.seed("S000-15")
def test_v2_session_handle_is_only_an_id_and_a_connection(engine: ModuleType) -> None:
    """Seed 000: ``V2Session`` is a cloneable command handle (session id + connection); it
    owns and buffers nothing, and dropping it has no effect on the wire."""
    import gc

    async def body() -> None:
        a, b = memory_pair()
        peer = RawPeer(a)
        conn = Client.v2().bind(Connection(b, engine=engine))
        assert V2Session.__slots__ == ("connection", "session_id")
        one, two = V2Session("s", conn), V2Session("s", conn)
        assert one == two and hash(one) == hash(two) and one.state is two.state  # interchangeable
        del one, two
        gc.collect()
        await asyncio.sleep(0.05)
        assert peer.lines.empty()  # nothing was sent
        conn.close()
        await conn.wait_closed()

    run(body)


@pytest.mark.seed("S000-26")
def test_cancel_active_work_leaves_elicitations_to_the_agent(engine: ModuleType) -> None:
    """Seed 000: elicitations are not all cancelled implicitly by ``cancel_active_work``
    (the agent cancels irrelevant ones with ``$/cancel_request``); only the session's
    permission requests get the cancelled outcome."""
    async def body() -> None:
        a, b = memory_pair()
        peer = RawPeer(a)
        release = asyncio.Event()
        client = Client.v2()

        @client.on_request("elicitation/create")
        async def elicit(params: Any, cx: Any) -> Any:
            await release.wait()
            return {"action": "decline"}

        @client.on_request("session/request_permission")
        async def ask(params: Any, cx: Any) -> Any:
            await release.wait()
            return {"outcome": {"outcome": "selected", "optionId": "allow"}}

        async def main(conn: Any) -> None:
            init = asyncio.ensure_future(conn.initialize())
            req = await peer.recv()
            peer.send({"jsonrpc": "2.0", "id": req["id"], "result": {
                "protocolVersion": 2, "info": {"name": "a", "version": "1"}}})
            await init
            setup = conn.build_session("/tmp")
            req = await peer.recv()
            peer.send({"jsonrpc": "2.0", "id": req["id"], "result": {"sessionId": "s"}})
            session = (await setup).session
            peer.send({"jsonrpc": "2.0", "id": 201, "method": "elicitation/create", "params": {
                "sessionId": "s", "mode": "form", "message": "name?",
                "requestedSchema": {"type": "object", "properties": {}}}})
            peer.send({"jsonrpc": "2.0", "id": 202, "method": "session/request_permission", "params": {
                "sessionId": "s", "title": "ok?", "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]}})
            await asyncio.sleep(0.05)
            assert session.cancel_active_work() is True
            first, second = await peer.recv(), await peer.recv()
            assert first["method"] == "session/cancel"
            assert second == {"jsonrpc": "2.0", "id": 202, "result": {"outcome": {"outcome": "cancelled"}}}
            await asyncio.sleep(0.05)
            assert peer.lines.empty()  # the elicitation is still the user's
            release.set()
            late = await peer.recv()
            assert late == {"jsonrpc": "2.0", "id": 201, "result": {"action": "decline"}}

        await client.connect_with(b, main, engine=engine)

    run(body)


@pytest.mark.seed("S000-105")
def test_v2_upsert_patch_and_meta_rules() -> None:
    """Seed 000 (schema 1.12): omitted = unchanged, null = clear, value = replace whole;
    top-level ``_meta`` patches by key (null removes a key, nested objects replaced not
    merged, nested nulls are data, ``{}`` clears nothing)."""
    from acp_fast.roles.sessions import apply_meta_update, apply_upsert

    stored = {"toolCallId": "t", "name": "read", "status": "pending", "content": [1, 2],
              "_meta": {"a": 1, "b": {"x": 1, "y": 2}}}
    after = apply_upsert(stored, {"sessionUpdate": "tool_call_update", "toolCallId": "t", "name": None,
                                  "content": [3], "_meta": {"a": None, "b": {"z": None}, "c": 0}})
    assert after == {"toolCallId": "t", "status": "pending", "content": [3], "_meta": {"b": {"z": None}, "c": 0}}
    assert stored["name"] == "read"  # the stored entity is not mutated
    assert apply_upsert(after, {"_meta": {}})["_meta"] == {"b": {"z": None}, "c": 0}  # {} changes nothing
    assert "_meta" not in apply_upsert(after, {"_meta": None})  # null clears
    assert apply_upsert(after, {"status": "completed"}) == {**after, "status": "completed"}  # omitted: unchanged
    assert apply_meta_update(None, {"k": None}) is None and apply_meta_update(None, {}) is None
    assert apply_meta_update({"k": 1}, "malformed") == {"k": 1}


def test_session_helpers_docstring_examples() -> None:
    import doctest

    from acp_fast.roles import sessions

    assert doctest.testmod(sessions).failed == 0
