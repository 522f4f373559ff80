#!/usr/bin/env python3
"""A minimal ACP agent serving protocol v1 *and* v2 on stdio, through the agent router.

Run it under any ACP client, e.g.::

    python examples/client_v2.py -- python examples/agent.py
    node peers/ts/client.mjs --n 5 -- python examples/agent.py

The version is picked by the client's first ``initialize``
(``Agent.protocol_router().with_v1(...).with_v2(...)``); the two implementations share the
application logic (``reply``) but never each other's wire types. A v1 prompt stays pending
for the whole turn and ends with ``{"stopReason"}``; a v2 prompt is answered at once with
its insertion receipt ``{"messageId"}`` and the turn ends with an idle ``state_update``.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import acp_fast  # noqa: F401
except ImportError:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from acp_fast import Agent, Context, run_agent_stdio
from acp_fast.protocol import methods_v1, methods_v2

if TYPE_CHECKING:
    from acp_fast.protocol import types_v1, types_v2

ids = itertools.count(1)


def reply(prompt: list[Any]) -> list[str]:
    """The shared application logic: the words of the prompt, echoed back one by one."""
    text = " ".join(b.get("text", "") for b in prompt if isinstance(b, dict) and b.get("type") == "text")
    return [f"{word} " for word in (text.split() or ["Hello!"])]


# -- v1 ------------------------------------------------------------------------------------

v1 = Agent.builder().with_info("example-agent", "1.0")


def new_session_v1(params: types_v1.NewSessionRequest, cx: Context) -> types_v1.NewSessionResponse:
    return {"sessionId": f"s{next(ids)}"}


async def prompt_v1(params: types_v1.PromptRequest, cx: Context) -> types_v1.PromptResponse:
    for word in reply(list(params["prompt"])):
        cx.send_session_update(params["sessionId"], {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": word}})
        await cx.drain()  # backpressure: waits only while the client is not reading
    return {"stopReason": "end_turn"}  # v1: the response ends the turn


v1.on_request(methods_v1.session.new, new_session_v1)  # typed: params and result are checked
v1.on_request(methods_v1.session.prompt, prompt_v1)


# -- v2 ------------------------------------------------------------------------------------

v2 = Agent.v2().with_info("example-agent", "1.0")


def new_session_v2(params: types_v2.NewSessionRequest, cx: Context) -> types_v2.NewSessionResponse:
    return {"sessionId": f"s{next(ids)}"}


v2.on_request(methods_v2.session.new, new_session_v2)


async def turn_v2(cx: Context, session_id: str, message_id: str, prompt: list[Any]) -> None:
    send = cx.send_session_update
    send(session_id, {"sessionUpdate": "user_message", "messageId": message_id, "content": prompt})
    send(session_id, {"sessionUpdate": "state_update", "state": "running"})
    answer_id = f"a{next(ids)}"
    for word in reply(prompt):
        send(session_id, {"sessionUpdate": "agent_message_chunk", "messageId": answer_id,
                          "content": {"type": "text", "text": word}})
        await cx.drain()
    send(session_id, {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})


def prompt_v2(params: types_v2.PromptRequest, cx: Context) -> types_v2.PromptResponse:
    message_id = f"m{next(ids)}"
    # the turn runs on after the answer: a task the connection owns (cancelled when it closes)
    cx.start_task(turn_v2(cx, params["sessionId"], message_id, list(params["prompt"])))
    return {"messageId": message_id}  # v2: the insertion receipt, sent before the updates


v2.on_request(methods_v2.session.prompt, prompt_v2)


if __name__ == "__main__":
    run_agent_stdio(Agent.protocol_router().with_v1(v1).with_v2(v2))
