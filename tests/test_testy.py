"""``acp-fast testy``: the deterministic test agent (protocol.md §9), v1, v2 and the router.

Wire-level: a raw JSON-line peer drives Testy served in this process over a memory pair
(on both engine twins, the ``engine`` fixture) or as a real child process
(``python -m acp_fast.cli.main testy --engine py|c``).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from conductor_support import Wire
from package_path import pythonpath
from roles_support import REPO, RawPeer, run, serve_in_memory, v1_init, v2_init

from acp_fast import testy
from acp_fast.transport import spawn


def updates(msgs: list[Any]) -> list[dict[str, Any]]:
    return [m["params"]["update"] for m in msgs if m.get("method") == "session/update"]


def kinds(msgs: list[Any]) -> list[str]:
    out = []
    for u in updates(msgs):
        out.append(u["sessionUpdate"] + (f":{u['state']}" if u["sessionUpdate"] == "state_update" else ""))
    return out


def text_prompt(sid: str, text: str) -> dict[str, Any]:
    return {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}


async def memory(engine: ModuleType, versions: tuple[int, ...] = (1, 2), stream_mode: str = "api") -> Wire:
    return Wire(RawPeer(serve_in_memory(testy.build(versions, stream_mode=stream_mode), engine)))


async def child(engine: ModuleType, *args: str, env: dict[str, str] | None = None) -> tuple[Wire, Any]:
    stream = await spawn([sys.executable, "-m", "acp_fast.cli.main", "testy", "--engine",
                          engine.IMPLEMENTATION, *args], env={"PYTHONPATH": pythonpath(""), **(env or {})})
    return Wire(RawPeer(stream)), stream


# ---------------------------------------------------------------------------------------
# prompt language
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("", ("greet", {})),
    ("   ", ("greet", {})),
    ("whatever", ("greet", {})),
    ("HELP", ("help", {})),
    ("echo hi there", ("echo", {"message": "hi there"})),
    ("session updates", ("scenario", {"name": "session_updates"})),
    ("Tools", ("scenario", {"name": "tool_calls"})),
    ("cancel", ("scenario", {"name": "cancel_status"})),
    ("wait for cancel", ("scenario", {"name": "wait_for_cancel"})),
    ("all", ("scenario", {"name": "full"})),
    ('{"command": "echo", "message": "x"}', ("echo", {"message": "x"})),
    ('{"command": "run_scenario", "scenario": "elicit"}', ("scenario", {"name": "elicitations"})),
    ('{"command": "call_tool", "server": "s", "tool": "t"}',
     ("tool", {"command": "call_tool", "server": "s", "tool": "t"})),
    ("stream 7 chunks", ("stream", {"permission": False, "n": 7, "size": 100})),
    ("warmup 3", ("stream", {"permission": False, "n": 3, "size": 100})),
    ("12", ("stream", {"permission": False, "n": 12, "size": 100})),
    ("permission stream 2 chunks", ("stream", {"permission": True, "n": 2, "size": 100})),
    ("stream 4 chunks of 9 bytes", ("stream", {"permission": False, "n": 4, "size": 9})),
])
def test_parse_command(text: str, expected: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACP_CHUNK", raising=False)
    assert testy.parse_command(text) == expected


def test_chunk_size_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_CHUNK", "17")
    assert testy.parse_command("stream 1")[1]["size"] == 17


@pytest.mark.parametrize(("text", "versions"), [("1,2", (1, 2)), ("2", (2,)), ("1", (1,)), ("2,1", (1, 2))])
def test_parse_versions(text: str, versions: tuple[int, ...]) -> None:
    assert testy.parse_versions(text) == versions


@pytest.mark.parametrize("text", ["", "3", "1,3", "x"])
def test_parse_versions_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid --versions"):
        testy.parse_versions(text)


# ---------------------------------------------------------------------------------------
# v1
# ---------------------------------------------------------------------------------------


def test_v1_lifecycle_and_sessions(engine: ModuleType) -> None:
    async def body() -> None:
        w = await memory(engine)
        init = await w.result("initialize", v1_init())
        assert init["protocolVersion"] == 1
        assert init["agentInfo"]["name"] == "test-agent"
        caps = init["agentCapabilities"]
        assert caps["loadSession"] is True and caps["mcpCapabilities"] == {"http": True}
        assert caps["promptCapabilities"] == {"image": True, "audio": True, "embeddedContext": True}
        assert set(caps["sessionCapabilities"]) == {"list", "delete", "additionalDirectories", "resume", "close"}
        assert init["authMethods"] == [{"id": "testy-agent-auth", "name": "Testy agent auth"}]
        assert await w.result("authenticate", {"methodId": "testy-agent-auth"}) == {}
        bad, _ = await w.call("authenticate", {"methodId": "nope"})
        assert bad["error"]["code"] == -32602 and "unsupported auth method" in bad["error"]["data"]
        assert await w.result("logout", {}) == {}

        s1 = await w.result("session/new", {"cwd": "/a", "mcpServers": []})
        s2 = await w.result("session/new", {"cwd": "/b", "mcpServers": []})
        assert (s1["sessionId"], s2["sessionId"]) == ("testy-session-1", "testy-session-2")
        assert s1["modes"]["currentModeId"] == "chat"
        assert [m["id"] for m in s1["modes"]["availableModes"]] == ["chat", "plan"]
        assert s1["configOptions"][0]["id"] == "verbosity" and s1["configOptions"][0]["currentValue"] == "normal"
        listed = await w.result("session/list", {"cwd": "/a"})
        assert listed == {"sessions": [{"sessionId": "testy-session-1", "cwd": "/a", "title": "Testy session",
                                        "updatedAt": "2026-01-01T00:00:00Z"}]}
        assert len((await w.result("session/list", {}))["sessions"]) == 2
        assert await w.result("session/set_mode", {"sessionId": "testy-session-1", "modeId": "plan"}) == {}
        bad, _ = await w.call("session/set_mode", {"sessionId": "testy-session-1", "modeId": "zzz"})
        assert bad["error"]["code"] == -32602
        opts = await w.result("session/set_config_option", {"sessionId": "testy-session-1",
                                                             "configId": "verbosity", "value": {"value": "brief"}})
        assert opts["configOptions"][0]["currentValue"] == "brief"
        bad, _ = await w.call("session/set_config_option", {"sessionId": "testy-session-1",
                                                             "configId": "verbosity", "value": "loud"})
        assert bad["error"]["code"] == -32602
        loaded = await w.result("session/load", {"sessionId": "testy-session-1", "cwd": "/a", "mcpServers": []})
        assert loaded["modes"]["currentModeId"] == "plan"
        assert await w.result("session/close", {"sessionId": "testy-session-2"}) == {}
        assert await w.result("session/delete", {"sessionId": "never-existed"}) == {}
        bad, _ = await w.call("session/prompt", text_prompt("testy-session-2", "hi"))
        assert bad["error"] == {"code": -32602, "message": "Invalid params",
                                "data": "unknown session `testy-session-2`"}
        unknown, _ = await w.call("no/such/method", {})
        assert unknown["error"]["code"] == -32601
        assert await w.result("_test/echo", {"a": [1, 2]}) == {"a": [1, 2]}
        assert await w.result("_bench/echo", {"b": 1}) == {"b": 1}
        w.notify("_test/note", {})
        st = await w.result("_test/stats", {})
        assert st["maxRssKiB"] > 0 and st["rssKiB"] == st["maxRssKiB"] and st["notesReceived"] == 1
        assert st["engine"] == engine.IMPLEMENTATION

    run(body)


def test_v1_prompt_commands(engine: ModuleType) -> None:
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v1_init())
        sid = (await w.result("session/new", {"cwd": "/", "mcpServers": []}))["sessionId"]

        async def say(text: str) -> tuple[str, list[dict[str, Any]]]:
            reply, seen = await w.call("session/prompt", text_prompt(sid, text))
            return reply["result"]["stopReason"], updates(seen)

        stop, ups = await say("")
        assert stop == "end_turn"
        assert ups == [{"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hello, world!"},
                        "messageId": "testy-message-end-turn-1"}]
        stop, ups = await say("echo   spaced  words")
        assert ups[0]["content"]["text"] == "  spaced  words"
        stop, ups = await say("help")
        assert "stream N" in ups[0]["content"]["text"]
        stop, ups = await say('{"command": "list_tools", "server": "x"}')
        assert "does not support MCP" in ups[0]["content"]["text"]
        stop, ups = await say("stream 5 chunks of 3 bytes")
        assert stop == "end_turn"
        assert [u["content"]["text"] for u in ups] == ["0xx", "1xx", "2xx", "3xx", "4xx"]  # fresh text each
        stop, ups = await say("0")
        assert (stop, ups) == ("end_turn", [])
        stop, ups = await say("session_updates")
        tags = [u["sessionUpdate"] for u in ups]
        for tag in ("session_info_update", "current_mode_update", "config_option_update",
                    "available_commands_update", "usage_update", "user_message_chunk", "agent_thought_chunk",
                    "tool_call", "tool_call_update", "plan"):
            assert tag in tags
        assert ups[-1]["content"]["text"] == "session_updates: ok\ncontent: ok\ntool_calls: ok"
        usage = next(u for u in ups if u["sessionUpdate"] == "usage_update")
        assert usage == {"sessionUpdate": "usage_update", "used": 128, "size": 4096,
                         "cost": {"amount": 0.0, "currency": "USD"}}
        stop, ups = await say("content")
        types = [u["content"]["type"] for u in ups if u["sessionUpdate"] == "agent_message_chunk"]
        assert types == ["text", "image", "audio", "resource_link", "resource", "text"]
        stop, ups = await say("tool_calls")
        diff = next(u for u in ups if u.get("toolCallId") == "testy-edit" and u.get("content"))
        assert diff["content"][0] == {"type": "diff", "path": "/tmp/testy-output.txt",
                                      "oldText": "before\n", "newText": "after\n"}
        plan = next(u for u in ups if u["sessionUpdate"] == "plan")
        assert len(plan["entries"]) == 3
        reply, _ = await w.call("session/prompt", text_prompt(sid, "elicitations"))
        assert reply["error"] == {"code": -32602, "message": "Invalid params",
                                  "data": "client does not support form elicitation"}

    run(body)


@pytest.mark.parametrize("version", [1, 2])
def test_stream_modes(engine: ModuleType, version: int) -> None:
    """``api`` builds every chunk (its index in the text); ``preencoded`` re-sends one line."""

    async def one(mode: str) -> list[str]:
        w = await memory(engine, (version,) if version == 1 else (1, 2), stream_mode=mode)
        await w.result("initialize", v1_init() if version == 1 else v2_init())
        sid = (await w.result("session/new", {"cwd": "/", "mcpServers": []} if version == 1 else {"cwd": "/"}))[
            "sessionId"]
        if version == 1:
            _, seen = await w.call("session/prompt", text_prompt(sid, "stream 12 chunks of 4 bytes"))
        else:
            await w.call("session/prompt", text_prompt(sid, "stream 12 chunks of 4 bytes"))
            _, seen = await w.until(lambda m: m.get("params", {}).get("update", {}).get("state") == "idle")
        return [u["content"]["text"] for u in updates(seen) if u["sessionUpdate"] == "agent_message_chunk"]

    async def body() -> None:
        assert await one("api") == [f"{i}xxx"[:4] if i < 10 else f"{i}xx" for i in range(12)]
        assert await one("preencoded") == ["xxxx"] * 12

    run(body)


def test_unknown_stream_mode() -> None:
    with pytest.raises(ValueError, match="unknown stream mode"):
        testy.build(stream_mode="fast")


def test_v1_cancel(engine: ModuleType) -> None:
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v1_init())
        sid = (await w.result("session/new", {"cwd": "/", "mcpServers": []}))["sessionId"]
        # session/cancel with no active prompt: a pending flag read by cancel_status
        reply, seen = await w.call("session/prompt", text_prompt(sid, "cancel_status"))
        assert updates(seen)[0]["content"]["text"] == "cancel_status: not_cancelled"
        w.notify("session/cancel", {"sessionId": sid})
        reply, seen = await w.call("session/prompt", text_prompt(sid, "cancel_status"))
        assert updates(seen)[0]["content"]["text"] == "cancel_status: cancelled"
        # wait_for_cancel ends with stopReason cancelled and no text
        rid = w.send_request("session/prompt", text_prompt(sid, "wait_for_cancel"))
        await asyncio.sleep(0.05)
        w.notify("session/cancel", {"sessionId": sid})
        reply, seen = await w.until(lambda m: m.get("id") == rid)
        assert reply["result"] == {"stopReason": "cancelled"} and updates(seen) == []
        # $/cancel_request of the prompt request itself: -32800
        rid = w.send_request("session/prompt", text_prompt(sid, "wait for cancel"))
        await asyncio.sleep(0.05)
        w.notify("$/cancel_request", {"requestId": rid})
        reply, _ = await w.until(lambda m: m.get("id") == rid)
        assert reply["error"]["code"] == -32800
        # a long stream stops on session/cancel
        rid = w.send_request("session/prompt", text_prompt(sid, "stream 100000000 chunks of 10 bytes"))
        first = await w.recv()
        assert first["method"] == "session/update"
        w.notify("session/cancel", {"sessionId": sid})
        reply, seen = await w.until(lambda m: m.get("id") == rid)
        assert reply["result"] == {"stopReason": "cancelled"} and len(seen) < 100000000

    run(body)


def test_v1_callbacks(engine: ModuleType) -> None:
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v1_init(clientCapabilities={
            "fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True,
            "elicitation": {"form": {}, "url": {}}}))
        sid = (await w.result("session/new", {"cwd": "/", "mcpServers": []}))["sessionId"]
        rid = w.send_request("session/prompt", text_prompt(sid, "callbacks"))
        methods = []
        while True:
            msg = await w.recv()
            if msg.get("id") == rid and "method" not in msg:
                break
            method = msg.get("method")
            if "id" not in msg:
                methods.append(method)
                continue
            methods.append(method)
            answers = {
                "session/request_permission": {"outcome": {"outcome": "selected", "optionId": "allow_once"}},
                "fs/write_text_file": {},
                "fs/read_text_file": {"content": "testy\n"},
                "terminal/create": {"terminalId": "t1"},
                "terminal/output": {"output": "testy\n", "truncated": False},
                "terminal/wait_for_exit": {"exitCode": 0},
                "terminal/kill": {}, "terminal/release": {},
                "elicitation/create": {"action": "accept", "content": {"name": "x"}},
            }
            w.answer(msg, answers[method])
        assert msg["result"] == {"stopReason": "end_turn"}
        assert methods[:8] == ["session/request_permission", "fs/write_text_file", "fs/read_text_file",
                               "terminal/create", "terminal/output", "terminal/wait_for_exit", "terminal/kill",
                               "terminal/release"]
        assert methods[8:] == ["elicitation/create", "elicitation/create", "elicitation/create",
                               "elicitation/complete", "elicitation/create", "session/update"]

    run(body)


@pytest.mark.seed("S004-06")
def test_v1_cancel_while_waiting_on_callback_sends_cancel_request(engine: ModuleType) -> None:
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v1_init())
        sid = (await w.result("session/new", {"cwd": "/", "mcpServers": []}))["sessionId"]
        rid = w.send_request("session/prompt", text_prompt(sid, "permission stream 3 chunks"))
        ask = await w.recv()
        assert ask["method"] == "session/request_permission"
        assert [o["optionId"] for o in ask["params"]["options"]] == ["allow", "reject"]
        w.notify("session/cancel", {"sessionId": sid})
        cancel = await w.recv()
        assert cancel == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": ask["id"]}}
        reply, _ = await w.until(lambda m: m.get("id") == rid)
        assert reply["result"] == {"stopReason": "cancelled"}

    run(body)


# ---------------------------------------------------------------------------------------
# v2
# ---------------------------------------------------------------------------------------


@pytest.mark.seed("S000-14", "S000-30")
def test_v2_prompt_lifecycle(engine: ModuleType) -> None:
    async def body() -> None:
        w = await memory(engine)
        init = await w.result("initialize", v2_init())
        assert init == {"protocolVersion": 2, "info": {"name": "test-agent", "version": init["info"]["version"]},
                        "capabilities": {"session": {"fork": {}}, "auth": {"status": {}}}}
        sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
        assert sid == "testy-v2-session-1"
        reply, before = await w.call("session/prompt", text_prompt(sid, "echo hello"))
        assert reply["result"] == {"messageId": "testy-v2-user-message-1"} and before == []
        idle, seen = await w.until(lambda m: m.get("params", {}).get("update", {}).get("state") == "idle")
        seen.append(idle)
        assert kinds(seen) == ["user_message", "state_update:running", "agent_message_chunk", "state_update:idle"]
        ups = updates(seen)
        assert ups[0] == {"sessionUpdate": "user_message", "messageId": "testy-v2-user-message-1",
                          "content": [{"type": "text", "text": "echo hello"}]}
        assert ups[2] == {"sessionUpdate": "agent_message_chunk", "messageId": "testy-v2-agent-message-1",
                          "content": {"type": "text", "text": "hello"}}
        assert ups[3] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
        # benchmark stream
        reply, _ = await w.call("session/prompt", text_prompt(sid, "stream 4 chunks of 2 bytes"))
        idle, seen = await w.until(lambda m: m.get("params", {}).get("update", {}).get("state") == "idle")
        assert kinds(seen) == ["user_message", "state_update:running"] + ["agent_message_chunk"] * 4
        assert {u["messageId"] for u in updates(seen)[2:]} == {"testy-v2-agent-message-2"}
        # not implemented scenario / MCP: refusal
        for text, expected in (("content", "Testy v2 scenario `content` is not implemented yet"),
                               ('{"command": "call_tool"}', "Testy v2 does not advertise MCP support yet")):
            await w.call("session/prompt", text_prompt(sid, text))
            idle, seen = await w.until(lambda m: m.get("params", {}).get("update", {}).get("state") == "idle")
            assert updates(seen)[-1]["content"]["text"] == expected
            assert idle["params"]["update"]["stopReason"] == "refusal"
        bad, _ = await w.call("session/prompt", text_prompt("nope", "hi"))
        assert bad["error"]["code"] == -32602 and bad["error"]["data"] == "unknown session `nope`"
        assert await w.result("_test/echo", {"x": 1}) == {"x": 1}
        listed = await w.result("session/list", {})
        assert listed["sessions"][0]["sessionId"] == sid

    run(body)


@pytest.mark.seed("S000-20", "S000-22", "S000-34")
def test_v2_cancel_busy_and_close(engine: ModuleType) -> None:
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v2_init())
        sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
        assert (await w.result("session/prompt", text_prompt(sid, "wait_for_cancel")))["messageId"]
        busy, seen0 = await w.call("session/prompt", text_prompt(sid, "hi"))
        assert busy["error"]["code"] == -32602 and "already has foreground work" in busy["error"]["data"]
        w.notify("session/cancel", {"sessionId": sid})
        idle, seen = await w.until(lambda m: m.get("params", {}).get("update", {}).get("state") == "idle")
        assert idle["params"]["update"]["stopReason"] == "cancelled"
        assert kinds(seen0 + seen) == ["user_message", "state_update:running"]
        # cancel_status sees a cancel sent while idle; cancelling an idle session emits nothing
        w.notify("session/cancel", {"sessionId": sid})
        reply, before = await w.call("session/prompt", text_prompt(sid, "cancel_status"))
        assert "result" in reply and before == []
        idle, seen = await w.until(lambda m: m.get("params", {}).get("update", {}).get("state") == "idle")
        assert updates(seen)[-1]["content"]["text"] == "cancel_status: cancelled"
        # close with foreground work: the idle/cancelled update precedes the close response
        await w.call("session/prompt", text_prompt(sid, "stream 100000000 chunks of 10 bytes"))
        first = await w.recv()
        assert first["method"] == "session/update"
        reply, seen = await w.call("session/close", {"sessionId": sid})
        assert reply["result"] == {}
        assert updates(seen)[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}
        gone, _ = await w.call("session/prompt", text_prompt(sid, "hi"))
        assert gone["error"]["code"] == -32602
        assert await w.result("session/close", {"sessionId": sid}) == {}

    run(body)


@pytest.mark.seed("S000-29", "S000-37", "S000-38", "S000-39", "S000-104")
def test_v2_resume_replay_and_idle_snapshot(engine: ModuleType) -> None:
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v2_init())
        sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
        await w.call("session/prompt", text_prompt(sid, "echo one"))
        await w.until(lambda m: m.get("params", {}).get("update", {}).get("state") == "idle")
        # no cursor: no replay, but the idle snapshot (no stop reason) precedes the response
        reply, seen = await w.call("session/resume", {"sessionId": sid, "cwd": "/w"})
        assert reply["result"] == {}
        assert updates(seen) == [{"sessionUpdate": "state_update", "state": "idle"}]
        reply, seen = await w.call("session/resume", {"sessionId": sid, "cwd": "/w", "replayFrom": {"type": "start"}})
        assert reply["result"] == {}
        assert updates(seen) == [
            {"sessionUpdate": "user_message", "messageId": "testy-v2-user-message-1",
             "content": [{"type": "text", "text": "echo one"}]},
            {"sessionUpdate": "agent_message", "messageId": "testy-v2-agent-message-1",
             "content": [{"type": "text", "text": "one"}]},
            {"sessionUpdate": "state_update", "state": "idle"},
        ]
        # Testy only resumes sessions without foreground work
        await w.result("session/prompt", text_prompt(sid, "wait_for_cancel"))
        busy, _ = await w.call("session/resume", {"sessionId": sid, "cwd": "/w"})
        assert busy["error"] == {"code": -32602, "message": "Invalid params",
                                 "data": f"session `{sid}` has active foreground work"}
        w.notify("session/cancel", {"sessionId": sid})
        await w.until(_is_idle)
        for params, data in (
            ({"sessionId": sid, "cwd": "/w", "replayFrom": {"type": "cursor", "at": 3}}, "unsupported session replay cursor"),
            ({"sessionId": sid, "cwd": "/elsewhere"}, None),
            ({"sessionId": "nope", "cwd": "/w"}, "unknown session `nope`"),
        ):
            bad, seen = await w.call("session/resume", params)
            assert bad["error"]["code"] == -32602 and seen == []
            if data is not None:
                assert bad["error"]["data"] == data

    run(body)


def _is_idle(m: Any) -> bool:
    return bool(m.get("params", {}).get("update", {}).get("state") == "idle")


@pytest.mark.seed("S000-31", "S000-35")
def test_v2_close_answers_an_uninserted_prompt_32800_after_idle_cancelled(engine: ModuleType) -> None:
    """Seed 000: closing a session with active work sends the final updates and idle
    ``cancelled`` before the close response; the uninserted prompt gets -32800 and no
    user-message update was ever sent for it."""
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v2_init())
        sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
        held = w.send_request("session/prompt", text_prompt(sid, "hold_before_insert"))
        running = await w.recv()  # running may precede insertion
        assert updates([running]) == [{"sessionUpdate": "state_update", "state": "running"}]
        reply, seen = await w.call("session/close", {"sessionId": sid})
        assert reply["result"] == {}
        prompt_reply = [m for m in seen if m.get("id") == held]
        assert prompt_reply == [{"jsonrpc": "2.0", "id": held, "error": {"code": -32800, "message": "Request cancelled"}}]
        assert updates(seen) == [{"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}]
        assert "user_message" not in kinds(seen)

    run(body)


@pytest.mark.seed("S000-34", "S000-36")
def test_v2_close_keeps_an_inserted_prompts_message_id(engine: ModuleType) -> None:
    """Seed 000: an inserted prompt cancelled by close still has its successful message id,
    and its final updates and idle ``cancelled`` precede the close response."""
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v2_init())
        sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
        receipt = await w.result("session/prompt", text_prompt(sid, "wait_for_cancel"))
        assert receipt == {"messageId": "testy-v2-user-message-1"}
        reply, seen = await w.call("session/close", {"sessionId": sid})
        assert reply["result"] == {}
        assert kinds(seen) == ["user_message", "state_update:running", "state_update:idle"]
        assert updates(seen)[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}
        assert [m for m in seen if "id" in m] == []  # the prompt was answered before, once

    run(body)


@pytest.mark.seed("S000-35")
def test_v2_session_cancel_before_insertion_answers_32800(engine: ModuleType) -> None:
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v2_init())
        sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
        held = w.send_request("session/prompt", text_prompt(sid, "hold before insert"))
        await w.recv()  # running
        w.notify("session/cancel", {"sessionId": sid})
        reply, seen = await w.until(lambda m: m.get("id") == held)
        assert reply["error"]["code"] == -32800 and seen == []
        idle = await w.recv()
        assert idle["params"]["update"] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}
        # the session accepts new work afterwards; the held prompt took no message id
        assert (await w.result("session/prompt", text_prompt(sid, "hi")))["messageId"] == "testy-v2-user-message-2"

    run(body)


@pytest.mark.seed("S000-23")
def test_v2_cancel_request_of_an_uninserted_prompt_answers_32800(engine: ModuleType) -> None:
    """``$/cancel_request`` of a prompt not inserted yet cancels it (-32800, then idle
    ``cancelled``); after insertion the prompt is already answered with its message id."""
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v2_init())
        sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
        held = w.send_request("session/prompt", text_prompt(sid, "hold_before_insert"))
        await w.recv()  # running
        w.notify("$/cancel_request", {"requestId": held})
        reply, seen = await w.until(lambda m: m.get("id") == held)
        assert reply["error"]["code"] == -32800 and seen == []
        idle = await w.recv()
        assert idle["params"]["update"]["stopReason"] == "cancelled"
        inserted = w.send_request("session/prompt", text_prompt(sid, "wait_for_cancel"))
        reply, _ = await w.until(lambda m: m.get("id") == inserted)
        assert reply["result"] == {"messageId": "testy-v2-user-message-2"}
        w.notify("$/cancel_request", {"requestId": inserted})  # too late: nothing happens
        w.notify("session/cancel", {"sessionId": sid})
        idle, seen = await w.until(_is_idle)
        assert [m for m in seen if "id" in m] == [] and idle["params"]["update"]["stopReason"] == "cancelled"

    run(body)


@pytest.mark.seed("S004-03", "S004-04")
@pytest.mark.parametrize("how", ["session/cancel", "session/close"])
def test_v2_cancelled_work_cancels_its_pending_permission_request(engine: ModuleType, how: str) -> None:
    """Seed 004: on session/cancel the agent stops waiting for the cancelled work's
    permission request and cancels it with ``$/cancel_request``; on session/close it does so
    before the close response (and before the idle ``cancelled`` update)."""
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v2_init())
        sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
        await w.result("session/prompt", text_prompt(sid, "permission stream 3 chunks"))
        asked, _ = await w.until(lambda m: m.get("method") == "session/request_permission")
        if how == "session/cancel":
            w.notify("session/cancel", {"sessionId": sid})
            _idle, seen = await w.until(_is_idle)
        else:
            reply, seen = await w.call("session/close", {"sessionId": sid})
            assert reply["result"] == {}
        cancels = [m for m in seen if m.get("method") == "$/cancel_request"]
        assert cancels == [{"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": asked["id"]}}]
        position = seen.index(cancels[0])
        idle_at = next(i for i, m in enumerate(seen) if _is_idle(m)) if how == "session/close" else len(seen)
        assert position < idle_at  # cancelled before the work ended
        w.answer(asked, {"outcome": {"outcome": "cancelled"}})  # a late answer is harmless

    run(body)


@pytest.mark.seed("S000-104")
def test_v2_malformed_acted_on_setup_payloads_are_invalid_params(engine: ModuleType) -> None:
    """Seed 000 (schema 1.11): malformed ``mcpServers`` / ``additionalDirectories`` of
    session/new, resume and fork get -32602 and are not acted on; null means empty."""
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v2_init())
        sid = (await w.result("session/new", {"cwd": "/w", "mcpServers": None, "additionalDirectories": None}))["sessionId"]
        for method in ("session/new", "session/resume", "session/fork"):
            for bad in ({"mcpServers": [{"command": "x"}]}, {"mcpServers": {"name": "x"}},
                        {"additionalDirectories": ["relative/dir"]}, {"additionalDirectories": "/x"}):
                reply, seen = await w.call(method, {"sessionId": sid, "cwd": "/w", **bad})
                assert reply["error"]["code"] == -32602 and seen == [], (method, bad)
        listed = await w.result("session/list", {})
        assert [s["sessionId"] for s in listed["sessions"]] == [sid]  # nothing was created

    run(body)


@pytest.mark.seed("S000-33")
def test_v2_failure_after_insertion_is_the_idle_error_stop_reason(engine: ModuleType) -> None:
    """Seed 000: after insertion a failure, auth_required included, keeps the prompt
    response successful and is reported on the idle update (stop reason ``error``)."""
    async def body() -> None:
        w = await memory(engine)
        await w.result("initialize", v2_init())
        sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
        reply, before = await w.call("session/prompt", text_prompt(sid, "auth_required"))
        assert reply["result"] == {"messageId": "testy-v2-user-message-1"} and before == []
        idle, seen = await w.until(_is_idle)
        assert kinds(seen) == ["user_message", "state_update:running"]
        assert idle["params"]["update"] == {
            "sessionUpdate": "state_update", "state": "idle", "stopReason": "error",
            "error": {"code": -32000, "message": "Authentication required",
                      "data": "Testy's sign-in expired during the turn"}}

    run(body)


@pytest.mark.seed("S000-32", "S004-02")
def test_v2_require_auth_rejects_before_insertion_and_answers_auth_status(engine: ModuleType) -> None:
    """``--require-auth`` on v2: auth/status is exempt from auth_required (seed 004 I6);
    a prompt refused for authentication before insertion is an error response with no
    user-message update (seed 000); auth/login then lets work start."""
    async def body() -> None:
        w = Wire(RawPeer(serve_in_memory(testy.build((2,), require_auth=True), engine)))
        init = await w.result("initialize", v2_init())
        assert init["authMethods"] == [{"type": "agent", "methodId": "testy-agent-auth", "name": "Testy sign-in"}]
        assert init["capabilities"]["auth"] == {"status": {}}
        assert await w.result("auth/status", {}) == {"state": "unauthenticated"}
        refused, _ = await w.call("session/new", {"cwd": "/w"})
        assert refused["error"]["code"] == -32000
        assert await w.result("auth/login", {"methodId": "testy-agent-auth"}) == {}
        assert (await w.result("auth/status", {}))["state"] == "authenticated"
        sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
        assert await w.result("auth/logout", {}) == {}
        refused, seen = await w.call("session/prompt", text_prompt(sid, "hi"))
        assert refused["error"]["code"] == -32000 and seen == []
        assert await w.result("auth/status", {}) == {"state": "unauthenticated"}
        await w.result("auth/login", {"methodId": "testy-agent-auth"})
        assert (await w.result("session/prompt", text_prompt(sid, "hi")))["messageId"]
        idle, seen = await w.until(_is_idle)
        assert kinds(seen)[0] == "user_message" and idle["params"]["update"]["stopReason"] == "end_turn"

    run(body)


# ---------------------------------------------------------------------------------------
# the router and --versions, in child processes
# ---------------------------------------------------------------------------------------


@pytest.mark.seed("S000-90")
def test_router_serves_both_versions(engine: ModuleType) -> None:
    async def body() -> None:
        for init, version in ((v1_init(), 1), (v2_init(), 2), (v2_init(3), 2)):
            w, stream = await child(engine)
            result = await w.result("initialize", init)
            assert result["protocolVersion"] == version
            stats = await w.result("_test/stats", {})
            assert stats["engine"] == engine.IMPLEMENTATION
            stream.close()
            await stream.wait_closed()
        w, stream = await child(engine)
        reply, _ = await w.call("initialize", v1_init(0))
        assert reply["error"] == {"code": -32022, "message": "Unsupported protocol version",
                                  "data": {"requested": 0, "supported": [1, 2]}}
        await w.peer.closed()
        stream.close()
        await stream.wait_closed()

    run(body)


@pytest.mark.seed("S000-87")
def test_versions_2_rejects_v1_with_32022(engine: ModuleType) -> None:
    async def body() -> None:
        w, stream = await child(engine, "--versions", "2")
        reply, _ = await w.call("initialize", v1_init())
        assert reply["error"] == {"code": -32022, "message": "Unsupported protocol version",
                                  "data": {"requested": 1, "supported": [2]}}
        await w.peer.closed()  # the router flushes the rejection and closes
        stream.close()
        await stream.wait_closed()
        w, stream = await child(engine, "--versions", "2")
        assert (await w.result("initialize", v2_init()))["protocolVersion"] == 2
        stream.close()
        await stream.wait_closed()

    run(body)


def test_versions_1_selects_v1_for_any_request(engine: ModuleType) -> None:
    async def body() -> None:
        w, stream = await child(engine, "--versions", "1")
        result = await w.result("initialize", v2_init())
        assert result["protocolVersion"] == 1 and "agentCapabilities" in result
        sid = (await w.result("session/new", {"cwd": "/", "mcpServers": []}))["sessionId"]
        assert sid == "testy-session-1"
        stream.close()
        await stream.wait_closed()

    run(body)


def test_large_stream_over_pipes(engine: ModuleType) -> None:
    async def body() -> None:
        w, stream = await child(engine, env={"ACP_CHUNK": "65536"})
        await w.result("initialize", v2_init())
        sid = (await w.result("session/new", {"cwd": "/"}))["sessionId"]
        await w.call("session/prompt", text_prompt(sid, "stream 64 chunks"))
        idle, seen = await w.until(lambda m: m.get("params", {}).get("update", {}).get("state") == "idle")
        chunks = [u for u in updates(seen) if u["sessionUpdate"] == "agent_message_chunk"]
        assert len(chunks) == 64 and all(len(c["content"]["text"]) == 65536 for c in chunks)
        assert idle["params"]["update"]["stopReason"] == "end_turn"
        stream.close()
        await stream.wait_closed()

    run(body)


def test_bad_versions_argument_exits_2() -> None:
    import subprocess

    proc = subprocess.run(check=False, args=[sys.executable, "-m", "acp_fast.cli.main", "testy", "--versions", "3"],
                          capture_output=True, text=True, cwd=REPO, timeout=30, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "invalid --versions" in proc.stderr


@pytest.mark.seed("S004-01")
def test_auth_status_is_answered_while_authentication_is_required(engine: Any) -> None:
    """Seed 004 I6: auth/status is exempt from auth_required (Testy --require-auth)."""
    from acp_fast import Client
    from acp_fast.errors import JsonRpcError
    from acp_fast.transport import memory_pair

    async def body() -> None:
        a, b = memory_pair()
        served = asyncio.ensure_future(testy.build((1,), require_auth=True).serve(a, engine=engine))

        async def main(conn: Any) -> None:
            await conn.initialize()
            assert await conn.send_request("auth/status", {}) == {"state": "unauthenticated"}
            with pytest.raises(JsonRpcError) as info:
                await conn.build_session("/tmp")
            assert info.value.code == -32000
            await conn.send_request("authenticate", {"methodId": "testy-agent-auth"})
            status = await conn.send_request("auth/status", {})
            assert status["state"] == "authenticated"
            assert (await conn.build_session("/tmp")).session.session_id

        await Client.builder().connect_with(b, main, engine=engine)
        await asyncio.wait_for(served, 5)

    asyncio.run(body())
