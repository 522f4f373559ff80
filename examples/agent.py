#!/usr/bin/env python3
"""A minimal ACP agent serving protocol v1 *and* v2 on stdio, through the agent router.

Run it under any ACP client, e.g.::

    python examples/client_v2.py -- python examples/agent.py
    node peers/ts/client.mjs --n 5 -- python examples/agent.py

The version is picked by the client's first ``initialize``
(``Agent.protocol_router().with_v1(...).with_v2(...)``); the two implementations share the
application logic (``reply``) but never each other's wire types. A v1 prompt stays pending
for the whole turn and ends with ``{"stopReason"}``. A v2 prompt is served by an
``AgentSession``: the prompt is inserted (its receipt ``{"messageId"}`` answers the request,
then the ``user_message`` update), the answer streams, and the turn ends with an idle
``state_update``; ``session/cancel`` stops the turn (stop reason ``cancelled``) and
``session/close`` waits for it.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections.abc import Awaitable
from pathlib import Path

if importlib.util.find_spec("acp_fast") is None:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from acp_fast import Agent, Context, run_agent_stdio
from acp_fast.protocol import methods_v1, methods_v2, types_v1, types_v2
from acp_fast.roles import AgentSession, Deferred, PromptTurn

ids = itertools.count(1)


def reply(texts: list[str]) -> list[str]:
    """The shared application logic: the words of the prompt, echoed back one by one."""
    words = " ".join(texts).split()
    return [f"{word} " for word in (words or ["Hello!"])]


# -- v1 ------------------------------------------------------------------------------------

v1 = Agent.builder().with_info("example-agent", "1.0")


def new_session_v1(params: types_v1.NewSessionRequest, cx: Context) -> types_v1.NewSessionResponse:
    return {"sessionId": f"s{next(ids)}"}


async def prompt_v1(params: types_v1.PromptRequest, cx: Context) -> types_v1.PromptResponse:
    texts = [block["text"] for block in params["prompt"] if block["type"] == "text"]
    for word in reply(texts):
        cx.send_session_update(params["sessionId"], {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": word}})
        await cx.drain()  # backpressure: waits only while the client is not reading
    return {"stopReason": "end_turn"}  # v1: the response ends the turn


v1.on_request(methods_v1.session.new, new_session_v1)  # typed: params and result are checked
v1.on_request(methods_v1.session.prompt, prompt_v1)


# -- v2 ------------------------------------------------------------------------------------

v2 = Agent.v2().with_info("example-agent", "1.0")
sessions: dict[str, AgentSession] = {}


def new_session_v2(params: types_v2.NewSessionRequest, cx: Context) -> types_v2.NewSessionResponse:
    session_id = f"s{next(ids)}"
    sessions[session_id] = AgentSession(session_id)
    return {"sessionId": session_id}


async def answer(turn: PromptTurn) -> str | None:
    """One v2 turn: insert the prompt, stream the answer; ``None`` ends it with ``end_turn``."""
    turn.set_state("running")
    turn.insert()  # the prompt is accepted: its receipt answers session/prompt
    texts = [block["text"] for block in turn.params["prompt"] if block["type"] == "text"]
    answer_id = f"a{next(ids)}"
    for word in reply(texts):
        if turn.cancelled:  # session/cancel: stop; the turn ends idle with "cancelled"
            return None
        turn.send({"sessionUpdate": "agent_message_chunk", "messageId": answer_id,
                   "content": {"type": "text", "text": word}})
        await turn.cx.drain()
    return None


def prompt_v2(params: types_v2.PromptRequest, cx: Context) -> Deferred[types_v2.PromptResponse]:
    return sessions[params["sessionId"]].prompt(cx, params, answer)


def cancel_v2(params: types_v2.CancelSessionNotification, cx: Context) -> None:
    session = sessions.get(params["sessionId"])
    if session is not None:
        session.cancel()


def close_v2(params: types_v2.CloseSessionRequest, cx: Context
             ) -> types_v2.CloseSessionResponse | Awaitable[types_v2.CloseSessionResponse]:
    return sessions.pop(params["sessionId"]).close()


v2.on_request(methods_v2.session.new, new_session_v2)
v2.on_request(methods_v2.session.prompt, prompt_v2)
v2.on_notification(methods_v2.session.cancel, cancel_v2)
v2.on_request(methods_v2.session.close, close_v2)


if __name__ == "__main__":
    run_agent_stdio(Agent.protocol_router().with_v1(v1).with_v2(v2))
