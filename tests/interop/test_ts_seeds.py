"""Interop of the seed behaviours with the official TypeScript SDK 2.4.0 (draft v2, its
``experimental/v2/unstable`` entrypoint, where ``session/fork`` and ``auth/status`` live):

* the TS v2 client ``peers/ts/seeds_client_v2.mjs`` against ``acp-fast testy --versions 2
  --require-auth``: ``auth/status`` before and after ``auth/login`` (exempt from
  ``auth_required``, seed 004 I6), ``session/fork`` and the fork's replay, a failure after
  insertion (idle ``error`` stop reason), close of an uninserted prompt (-32800);
* acp_fast's v2 client against the TS v2 agent ``peers/ts/seeds_agent_v2.mjs``:
  ``auth/status``, ``fork_session`` and the fork's replay through ``resume_session``.

The TS client runs notification handlers after it resolved later responses, so wire order
is asserted in ``tests/test_testy.py``; here each side checks what it observed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from interop_support import PEERS_TS, REPO, env, fast_testy, json_line, run

from acp_fast import Client, JsonRpcError
from acp_fast.transport import spawn

pytestmark = pytest.mark.usefixtures("ts_sdk")


@pytest.mark.seed("S000-39", "S004-02")
def test_ts_v2_client_fork_auth_status_and_prompt_acceptance_against_testy(ts_sdk: str, engine: ModuleType) -> None:
    out = json_line([ts_sdk, str(PEERS_TS / "seeds_client_v2.mjs"), "--",
                     *fast_testy(engine, "--versions", "2", "--require-auth")])
    assert "thrown" not in out, out
    assert out["capabilities"] == {"session": {"fork": {}}, "auth": {"status": {}}}
    # auth/status is answered while authentication is required; session/new is not
    assert out["statusBefore"] == {"state": "unauthenticated"}
    assert out["newBeforeLogin"]["code"] == -32000
    assert out["login"] == {} and out["statusAfter"]["state"] == "authenticated"
    # fork: a new session whose replay is the source's history, under the new id
    fork_id = out["fork"]["sessionId"]
    assert fork_id.startswith("testy-v2-session-") and out["resumed"] == {}
    assert [(u["sessionId"], u["sessionUpdate"]) for u in out["forkReplay"]] == [
        (fork_id, "user_message"), (fork_id, "agent_message"), (fork_id, "state_update")]
    assert out["forkReplay"][0]["messageId"] == out["receipt"]["messageId"]  # retained ids survive replay
    # after insertion a failure is the idle update's error stop reason, parsed by the TS schema
    assert out["failedReceipt"] == {"messageId": "testy-v2-user-message-2"}
    assert out["failedIdle"]["stopReason"] == "error" and out["failedIdle"]["error"]["code"] == -32000
    # close of an uninserted prompt: -32800, idle cancelled, the close response
    assert out["held"] == {"error": {"code": -32800, "message": "Request cancelled"}}
    assert out["closed"] == {} and out["closeIdle"]["stopReason"] == "cancelled"
    assert "user_message" not in out["closeKinds"]
    assert out["agentExit"] == 0


@pytest.mark.seed("S004-02")
def test_acp_fast_v2_client_forks_and_asks_auth_status_of_the_ts_agent(ts_sdk: str, engine: ModuleType) -> None:
    async def body() -> None:
        seen: list[tuple[str, str]] = []
        client = Client.v2().on_session_update(lambda u, cx: seen.append((u.session_id, u.kind)))
        stream = await spawn([ts_sdk, str(PEERS_TS / "seeds_agent_v2.mjs")], env=env(), cwd=REPO)

        async def main(conn: Any) -> None:
            init = await conn.initialize()
            assert init["capabilities"]["session"]["fork"] == {} and init["capabilities"]["auth"]["status"] == {}
            assert await conn.send_request("auth/status", {}) == {"state": "unauthenticated"}
            with pytest.raises(JsonRpcError) as info:
                await conn.build_session("/tmp")
            assert info.value.code == -32000
            await conn.send_request("auth/login", {"methodId": init["authMethods"][0]["methodId"]})
            assert await conn.send_request("auth/status", {}) == {"state": "authenticated"}
            source = (await conn.build_session("/tmp")).session
            epoch = source.idle_epoch
            receipt = await source.send_prompt("hello")
            assert await source.wait_idle(after=epoch) == "end_turn"
            opened = await source.fork("/tmp")
            fork = opened.session
            assert fork.session_id != source.session_id
            assert opened.response == {"sessionId": fork.session_id, "_meta": {"forkedFrom": source.session_id}}
            seen.clear()
            resumed = await conn.resume_session(fork.session_id, "/tmp", replay_from={"type": "start"})
            assert resumed.session == fork
            assert seen == [(fork.session_id, "user_message"), (fork.session_id, "agent_message"),
                            (fork.session_id, "state_update")]
            assert receipt["messageId"]

        await client.connect_with(stream, main, engine=engine)

    run(body)
