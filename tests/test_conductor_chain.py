"""Real chains: ``acp-fast testy`` behind 0, 1 and 3 pass-through proxy processes, v1 and v2.

The conductor runs in this process on both engine twins (the ``engine`` fixture); every
component is a child process (the example proxies, Testy, a crashing agent), so process
groups, stderr tails and exits are the real ones. One test drives the conductor itself as a
child process (``acp-fast conductor agent …``) with an acp_fast client.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from conductor_support import HELPERS, Wire, component_env, proxy_cmd, cmd_testy, text_prompt, updates
from roles_support import RawPeer, run, v1_init, v2_init

from acp_fast import Client, SessionUpdate
from acp_fast.conductor import Conductor
from acp_fast.transport import spawn


MARKER = "crash-agent: giving up mid-turn"


def is_idle(m: Any) -> bool:
    return m.get("params", {}).get("update", {}).get("state") == "idle"


async def v2_turn(w: Wire, sid: str, text: str) -> tuple[Any, list[Any]]:
    """Send a v2 prompt; ``(idle update, messages before it)``. A proxy with a prompt handler
    may relay the turn's updates before the insertion receipt, so both orders are accepted."""
    reply, seen = await w.call("session/prompt", text_prompt(sid, text))
    assert reply["result"]["messageId"], reply
    idle = next((m for m in seen if is_idle(m)), None)
    if idle is not None:
        return idle, seen[:seen.index(idle)]
    idle, more = await w.until(is_idle)
    return idle, seen + more


def chunks(msgs: list[Any]) -> list[str]:
    return [u["content"]["text"] for u in updates(msgs) if u["sessionUpdate"] == "agent_message_chunk"]


async def v1_turns(w: Wire) -> None:
    init = await w.result("initialize", v1_init())
    assert init["protocolVersion"] == 1 and init["agentInfo"]["name"] == "test-agent"
    sid = (await w.result("session/new", {"cwd": "/", "mcpServers": []}))["sessionId"]
    reply, seen = await w.call("session/prompt", text_prompt(sid, "stream 30 chunks of 4 bytes"))
    assert reply["result"] == {"stopReason": "end_turn"}
    assert chunks(seen) == [f"{i}xxx"[:4] if i < 10 else f"{i}xx" for i in range(30)]  # in order
    # session/cancel travels as an ordinary notification
    rid = w.send_request("session/prompt", text_prompt(sid, "wait_for_cancel"))
    await asyncio.sleep(0.1)
    w.notify("session/cancel", {"sessionId": sid})
    reply, _ = await w.until(lambda m: m.get("id") == rid)
    assert reply["result"] == {"stopReason": "cancelled"}
    # $/cancel_request is re-issued on every hop; the agent's -32800 comes back
    rid = w.send_request("session/prompt", text_prompt(sid, "wait for cancel"))
    await asyncio.sleep(0.1)
    w.notify("$/cancel_request", {"requestId": rid})
    reply, _ = await w.until(lambda m: m.get("id") == rid)
    assert reply["error"]["code"] == -32800


async def v2_turns(w: Wire) -> None:
    init = await w.result("initialize", v2_init())
    assert init["protocolVersion"] == 2 and init["info"]["name"] == "test-agent"
    sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
    idle, seen = await v2_turn(w, sid, "stream 30 chunks of 4 bytes")
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    assert chunks(seen) == [f"{i}xxx"[:4] if i < 10 else f"{i}xx" for i in range(30)]
    assert (await w.result("session/prompt", text_prompt(sid, "wait_for_cancel")))["messageId"]
    await asyncio.sleep(0.1)
    w.notify("session/cancel", {"sessionId": sid})
    idle, _ = await w.until(is_idle)
    assert idle["params"]["update"]["stopReason"] == "cancelled"


@pytest.mark.seed("S000-75")
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize(("n_proxies", "spelling"), [(0, "underscore"), (1, "underscore"), (3, "underscore"),
                                                     (1, "spec")])
def test_chain_against_testy(engine: ModuleType, n_proxies: int, spelling: str, version: int) -> None:
    """``spec``: the conductor speaks ``proxy/*`` to acp_fast proxies, which answer in kind."""
    async def body() -> None:
        chain = [proxy_cmd()] * n_proxies + [cmd_testy(engine)]
        conductor = Conductor(chain, env=component_env(engine), engine=engine, proxy_methods=spelling)
        async with conductor as upstream:
            w = Wire(RawPeer(upstream))
            await (v1_turns(w) if version == 1 else v2_turns(w))
        assert conductor.version == version and conductor.exit_error is None

    run(body)


@pytest.mark.seed("S004-09")
def test_component_crash_mid_turn_fails_the_turn_and_ends_the_chain(engine: ModuleType, tmp_path: Path) -> None:
    async def body() -> None:
        crash = [sys.executable, str(HELPERS / "conductor_crash_agent.py")]
        conductor = Conductor([proxy_cmd(), crash], env=component_env(engine), engine=engine, debug_dir=tmp_path)
        async with conductor as upstream:
            w = Wire(RawPeer(upstream))
            await w.result("initialize", v1_init())
            sid = (await w.result("session/new", {"cwd": "/", "mcpServers": []}))["sessionId"]
            reply, seen = await w.call("session/prompt", text_prompt(sid, "hi"))
            assert chunks(seen) == ["about to crash"]  # what was sent before the crash arrives
            error = reply["error"]
            assert error["code"] == -32603 and error["data"].startswith("Agent exited with status 3")
            assert MARKER in error["data"]  # the stderr tail
            await w.peer.closed()  # the chain ends: no restart
            proxy_pid = conductor._comps[0].stream.pid  # type: ignore[union-attr]
        with pytest.raises(ProcessLookupError):  # the proxy's process group is gone too
            os.killpg(proxy_pid, 0)
        assert conductor.exit_error is not None and "status 3" in conductor.exit_error
        # --debug: every line each component read, wrote and logged
        assert conductor.debug is not None and conductor.debug.path.parent == tmp_path
        lines = conductor.debug.path.read_text().splitlines()
        assert lines[1].startswith("component 0: ") and "passthrough.py" in lines[1]
        entries = [line.split(" ", 3) for line in lines[4:]]
        assert {(label, arrow) for label, arrow, _, _ in entries} >= {
            ("C", "←"), ("C", "→"), ("0", "→"), ("0", "←"), ("1", "→"), ("1", "←"), ("1", "!")}
        assert any(e[:2] == ["1", "!"] and e[3] == MARKER for e in entries)  # the agent's stderr
        assert all(e[2].startswith("+") and e[2].endswith("ms") for e in entries)

    run(body)


@pytest.mark.parametrize("version", [1, 2])
def test_example_proxies_logger_and_prompt_rewriter(engine: ModuleType, version: int, tmp_path: Path) -> None:
    async def body() -> None:
        log = tmp_path / "proxy.log"
        env = {**component_env(engine), "ACP_PROXY_LOG": str(log), "ACP_PROMPT_PREFIX": "echo [rw] "}
        chain = [proxy_cmd("logger"), proxy_cmd("prompt_rewriter"), cmd_testy(engine)]
        async with Conductor(chain, env=env, engine=engine) as upstream:
            w = Wire(RawPeer(upstream))
            if version == 1:
                await w.result("initialize", v1_init())
                sid = (await w.result("session/new", {"cwd": "/", "mcpServers": []}))["sessionId"]
                reply, seen = await w.call("session/prompt", text_prompt(sid, "hello"))
                assert reply["result"] == {"stopReason": "end_turn"}
            else:
                await w.result("initialize", v2_init())
                sid = (await w.result("session/new", {"cwd": "/"}))["sessionId"]
                _, seen = await v2_turn(w, sid, "hello")
            assert chunks(seen) == ["[rw] hello"]  # rewritten by proxy 1, echoed by Testy
        lines = log.read_text().splitlines()
        assert f"proxy: session/prompt {sid}" in lines
        assert "proxy: session/update agent_message_chunk" in lines

    run(body)


def test_conductor_cli_driven_by_an_acp_fast_client(engine: ModuleType, tmp_path: Path) -> None:
    async def body() -> None:
        trace = tmp_path / "trace.jsons"
        texts: list[str] = []
        client = Client.v2()

        @client.on_session_update
        def on_update(update: SessionUpdate, cx: Any) -> None:
            if update.kind == "agent_message_chunk":
                texts.append(update.payload["content"]["text"])

        async def main(cx: Any) -> str | None:
            await cx.initialize()
            session = (await cx.build_session(cwd="/w")).session
            epoch = session.idle_epoch
            await session.send_prompt("echo through the chain")
            stop = await session.wait_idle(after=epoch)
            return None if stop is None else stop.kind

        command = [sys.executable, "-m", "acp_fast.cli.main", "conductor", "--trace", str(trace), "agent",
                   shlex.join(proxy_cmd()), shlex.join(cmd_testy(engine))]
        stream = await spawn(command, env=component_env(engine))
        assert await client.connect_with(stream, main, engine=engine) == "end_turn"
        assert "".join(texts) == "through the chain"
        await stream.wait_closed()
        assert stream.returncode == 0  # type: ignore[attr-defined]
        events = [json.loads(line) for line in trace.read_text().splitlines()]
        prompts = [(e["from"], e["to"]) for e in events if e.get("method") == "session/prompt"]
        assert prompts == [("Client", "Proxy(0)"), ("Proxy(0)", "Agent")]

    run(body)


def test_nested_chain_conductor_in_proxy_mode(engine: ModuleType) -> None:
    async def body() -> None:
        inner = [sys.executable, "-m", "acp_fast.cli.main", "conductor", "proxy",
                 shlex.join(proxy_cmd()), shlex.join(proxy_cmd())]
        async with Conductor([inner, cmd_testy(engine)], env=component_env(engine), engine=engine) as upstream:
            await v2_turns(Wire(RawPeer(upstream)))

    run(body)


def test_backpressure_keeps_a_streaming_chain_moving(engine: ModuleType) -> None:
    """A long stream fills the pipes both ways; a proxy whose stdin is full must still be read
    (pausing it too deadlocked the chain: it stops reading while its own stdout is full)."""

    async def body() -> None:
        chain = [proxy_cmd(), cmd_testy(engine)]
        async with Conductor(chain, env=component_env(engine), engine=engine) as upstream:
            w = Wire(RawPeer(upstream))
            await w.result("initialize", v2_init())
            sid = (await w.result("session/new", {"cwd": "/w"}))["sessionId"]
            idle, seen = await v2_turn(w, sid, "stream 20000 chunks of 64 bytes")
            assert idle["params"]["update"]["stopReason"] == "end_turn"
            assert len(chunks(seen)) == 20000

    run(body)


def test_cli_with_piped_input_answers_everything_before_exiting(engine: ModuleType) -> None:
    """Upstream EOF ends the chain only once every request upstream sent is answered."""
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": v1_init()},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}},
        {"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": text_prompt("testy-session-1", "echo piped")},
    ]
    env = {**os.environ, **component_env(engine)}
    command = [sys.executable, "-m", "acp_fast.cli.main", "conductor", "agent", shlex.join(proxy_cmd()),
               shlex.join(cmd_testy(engine))]
    proc = subprocess.run(command, input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    answers = {m["id"]: m for m in out if "id" in m and "method" not in m}
    assert sorted(answers) == [1, 2, 3] and answers[3]["result"] == {"stopReason": "end_turn"}, out
    assert chunks(out) == ["piped"]


def live_children() -> list[int]:
    """Pids of this process's children that are not zombies (Linux ``/proc``)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and fields[0] != "Z":
                out.append(int(entry.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_ending_while_the_chain_starts_leaves_no_process(engine: ModuleType) -> None:
    async def body() -> None:
        before = set(live_children())
        conductor = Conductor([proxy_cmd(), proxy_cmd(), cmd_testy(engine)], env=component_env(engine), engine=engine)
        async with conductor as upstream:
            RawPeer(upstream).send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": v2_init()})
            while not any(h.stream is not None for h in conductor._comps):  # mid-start
                await asyncio.sleep(0.001)
        assert set(live_children()) - before == set()

    run(body)
