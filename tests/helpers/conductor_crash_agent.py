"""A v1+v2 agent that dies in the middle of a prompt turn (for the conductor crash tests).

``session/new`` answers; ``session/prompt`` sends one update, writes a marker to stderr and
exits the process with status 3 before answering.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from acp_fast import Agent, run_agent_stdio

MARKER = "crash-agent: giving up mid-turn"


def new_session(params: Any, cx: Any) -> Any:
    return {"sessionId": "crash-1"}


async def prompt(params: Any, cx: Any) -> Any:
    cx.send_session_update(params["sessionId"], {"sessionUpdate": "agent_message_chunk",
                                                 "content": {"type": "text", "text": "about to crash"}})
    sys.stderr.write(MARKER + "\n")
    sys.stderr.flush()
    await asyncio.sleep(0.05)  # the update is written
    os._exit(3)


def build() -> Any:
    v1 = Agent.builder().on_request("session/new", new_session).on_request("session/prompt", prompt)
    v2 = Agent.v2().on_request("session/new", new_session).on_request("session/prompt", prompt)
    return Agent.protocol_router().with_v1(v1).with_v2(v2)


if __name__ == "__main__":
    run_agent_stdio(build())
