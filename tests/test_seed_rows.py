"""Seed-coverage rows whose listed tests did not assert the row itself (docs/seed-coverage.md).

* S000-97: the client protocol connector's reuse probe is conservative: when the v2
  ``initialize`` the agent saw does not normalise to v1 losslessly, the connector does not
  reuse the connection even if the v1 implementation sends exactly the (lossy) v1 form of
  it: it opens a fresh connection and sends ``initialize`` again. Observed on the agents.
* S000-100: an unknown stop reason keeps its payload: the client's ``StopReason`` holds the
  whole idle update as the agent sent it (asserted on ``payload`` itself: ``StopReason``'s
  ``==`` compares kind and error only).

Both engine twins.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

import roles_agent  # noqa: E402
from roles_support import run, serve_in_memory  # noqa: E402

from acp_fast.protocol import negotiation as nego  # noqa: E402
from acp_fast.roles import Agent, Client  # noqa: E402
from acp_fast.roles.sessions import StopReason  # noqa: E402

# ---------------------------------------------------------------------------------------
# S000-97
# ---------------------------------------------------------------------------------------

#: A v2 ``initialize`` with a field v1 has no place for (``info.buildCommit``): its v1
#: normalisation is lossy.
LOSSY_V2 = {"info": {"name": "ed", "version": "1", "buildCommit": "abc"}}


@pytest.mark.seed("S000-97")
def test_connector_does_not_reuse_after_a_lossy_normalisation(engine: ModuleType) -> None:
    wire_v2 = {"protocolVersion": 2, **LOSSY_V2}
    assert nego.normalize_v2_to_v1_lossless(wire_v2) is None  # the probe has nothing to match
    lossy_v1 = nego.normalize_v2_to_v1(wire_v2)
    assert lossy_v1 is not None and "buildCommit" not in str(lossy_v1)

    async def body() -> None:
        records: list[dict[str, Any]] = []
        log: list[str] = []

        def v2() -> Any:
            async def main(cx: Any) -> Any:
                log.append("v2")
                await cx.initialize(dict(LOSSY_V2))
                return "v2 finished"
            return Client.v2().with_main(main)

        def v1() -> Any:
            async def main(cx: Any) -> Any:
                log.append("v1")
                # exactly what a lossy probe would have matched against
                init = await cx.initialize({k: v for k, v in lossy_v1.items() if k != "protocolVersion"})
                return init["protocolVersion"]
            return Client.builder().with_main(main)

        def transport() -> Any:
            records.append({})
            return serve_in_memory(roles_agent.v1_agent(records[-1]), engine)

        result = await Client.protocol_connector().with_v1(v1).with_v2(v2).run(transport, engine=engine)
        assert result == 1
        # not reused: a second connection, on which the v1 initialize was sent for real
        assert len(records) == 2, "the connector reused the connection after a lossy normalisation"
        # one initialize each: the v2 one on the first agent, the v1 one sent anew on the second
        assert [len(r["initialize"]) for r in records] == [1, 1]
        assert log == ["v2", "v1", "v1"]

    run(body)


@pytest.mark.seed("S000-97")
def test_connector_reuses_after_a_lossless_normalisation(engine: ModuleType) -> None:
    """The counterpart: the same v1 client after a lossless v2 ``initialize`` is answered on
    the first connection with no second ``initialize`` (so the test above sees the probe)."""
    exact = {"info": {"name": "ed", "version": "1"}}
    lossless_v1 = nego.normalize_v2_to_v1_lossless({"protocolVersion": 2, **exact})
    assert lossless_v1 is not None

    async def body() -> None:
        records: list[dict[str, Any]] = []

        def v2() -> Any:
            async def main(cx: Any) -> Any:
                await cx.initialize(dict(exact))
            return Client.v2().with_main(main)

        def v1() -> Any:
            async def main(cx: Any) -> Any:
                init = await cx.initialize({k: v for k, v in lossless_v1.items() if k != "protocolVersion"})
                return init["protocolVersion"]
            return Client.builder().with_main(main)

        def transport() -> Any:
            records.append({})
            return serve_in_memory(roles_agent.v1_agent(records[-1]), engine)

        assert await Client.protocol_connector().with_v1(v1).with_v2(v2).run(transport, engine=engine) == 1
        assert len(records) == 1 and len(records[0]["initialize"]) == 1

    run(body)


# ---------------------------------------------------------------------------------------
# S000-100
# ---------------------------------------------------------------------------------------

UNKNOWN_IDLE = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "_vendor_paused",
                "resumeAfter": {"seconds": 30}, "note": "quota", "_meta": {"vendor": {"k": [1, 2]}}}


def _agent_with_an_unknown_stop_reason() -> Any:
    agent = Agent.v2().with_info("unknown-stop", "1")

    @agent.on_request("initialize")
    def initialize(params: Any, cx: Any) -> Any:
        return {"protocolVersion": 2, "info": {"name": "unknown-stop", "version": "1"}, "capabilities": {}}

    @agent.on_request("session/new")
    def new_session(params: Any, cx: Any) -> Any:
        return {"sessionId": "s-1", "configOptions": []}

    async def work(cx: Any, sid: str) -> None:
        await asyncio.sleep(0)  # the prompt's response first
        cx.send_session_update(sid, {"sessionUpdate": "state_update", "state": "running"})
        cx.send_session_update(sid, dict(UNKNOWN_IDLE))

    tasks: list[Any] = []

    @agent.on_request("PromptRequest")
    def prompt(params: Any, cx: Any) -> Any:
        tasks.append(asyncio.ensure_future(work(cx, params["sessionId"])))
        return {"messageId": "m1"}

    return agent


@pytest.mark.seed("S000-100")
def test_an_unknown_stop_reason_keeps_its_payload(engine: ModuleType) -> None:
    async def body() -> Any:
        async def main(cx: Any) -> Any:
            await cx.initialize()
            session = (await cx.build_session("/tmp")).session
            epoch = session.idle_epoch
            await session.send_prompt("go")
            return await session.wait_idle(after=epoch)

        stream = serve_in_memory(_agent_with_an_unknown_stop_reason(), engine)
        return await Client.v2().connect_with(stream, main, engine=engine)

    stop = run(body)
    assert isinstance(stop, StopReason)
    assert stop.kind == "_vendor_paused" and stop.error is None
    # the payload itself, field by field (``==`` on StopReason would not look at it)
    for name, value in UNKNOWN_IDLE.items():
        assert stop.payload[name] == value, name
    assert stop.payload["resumeAfter"] == {"seconds": 30}
    assert stop.payload["_meta"] == {"vendor": {"k": [1, 2]}}


@pytest.mark.seed("S000-100")
def test_stop_reason_from_update_keeps_the_update() -> None:
    update = dict(UNKNOWN_IDLE)
    stop = StopReason.from_update(update)
    assert stop is not None and stop.kind == "_vendor_paused" and stop.error is None
    assert stop.payload == UNKNOWN_IDLE and stop.payload["note"] == "quota"
