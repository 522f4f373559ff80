#!/usr/bin/env python3
"""Minimal ACP v1 agent on the official Python SDK (``agent-client-protocol``, pinned 0.12.1).

The Python twin of ``peers/ts/agent.mjs``: same methods, same environment, same wire
behaviour, written only against the SDK's documented public API (``acp.run_agent`` with an
object implementing the ``acp.Agent`` protocol; extension methods arrive in
``ext_method``/``ext_notification`` with the leading underscore stripped).

Methods:
  initialize, session/new
  session/cancel   notification: the running prompt returns stopReason "cancelled"
  session/prompt   streams N ``agent_message_chunk`` session/update notifications, then
                   returns ``{"stopReason": "end_turn"}``. N = first integer in the prompt
                   text, else $ACP_N, else 10. If the prompt text contains the word
                   "permission", the agent first sends ``session/request_permission`` to the
                   client and streams the outcome as one chunk ``permission:<outcome>``.
  _test/echo       extension request: returns its params unchanged
  _test/stats      extension request: the agent's peak RSS and CPU (same fields as the TS agent)
  _test/note       extension notification: counted, see _test/stats

Env:
  ACP_N          default chunk count when the prompt has no integer
  ACP_CHUNK      text size of each chunk in bytes (default 100)
  ACP_UVLOOP=1   run on uvloop (when installed) instead of the default asyncio loop

Options:
  --loop asyncio|uvloop   the event loop (overrides ACP_UVLOOP; uvloop must be installed)

The SDK has no ``$/cancel_request`` support, so neither has this agent.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import acp  # noqa: E402
from acp.schema import (  # noqa: E402
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallUpdate,
)

from _common import loop_from_argv, loop_name, process_stats, run  # noqa: E402

DEFAULT_N = int(os.environ.get("ACP_N", "10"))
CHUNK = int(os.environ.get("ACP_CHUNK", "100"))
TEXT = "x" * CHUNK
_INT = re.compile(r"\d+")
_PERMISSION = re.compile(r"permission", re.IGNORECASE)


@dataclass
class _Session:
    """Per-session state: set when ``session/cancel`` arrives for the running prompt."""

    cancelled: asyncio.Event = field(default_factory=asyncio.Event)


def _prompt_text(prompt: list[Any]) -> str:
    """All text blocks of a prompt joined with a single space."""
    return " ".join(block.text for block in prompt if getattr(block, "type", None) == "text")


class TestAgent:
    """Implements the ``acp.Agent`` protocol structurally: only the methods this test agent needs.

    Not a subclass of the Protocol on purpose: the SDK's router answers methods an agent lacks
    with -32601 (method not found), as the TS agent does, while inherited Protocol stubs would
    answer them with an empty result.
    """

    def __init__(self) -> None:
        self._conn: acp.Client | None = None
        self._sessions: dict[str, _Session] = {}
        self._notes_received = 0

    def on_connect(self, conn: acp.Client) -> None:
        self._conn = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        # Negotiate: this SDK only speaks v1.
        return InitializeResponse(
            protocol_version=min(protocol_version, acp.PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(load_session=False),
            agent_info=Implementation(name="pysdk-test-agent", version="0.1.0"),
            auth_methods=[],
        )

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> NewSessionResponse:
        session_id = str(uuid.uuid4())
        self._sessions[session_id] = _Session()
        return NewSessionResponse(session_id=session_id)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._sessions.get(session_id)
        if session is None:
            raise acp.RequestError.invalid_params({"sessionId": session_id, "details": "unknown session"})
        assert self._conn is not None
        session.cancelled = asyncio.Event()
        text = _prompt_text(prompt)
        m = _INT.search(text)
        n = int(m.group(0)) if m else DEFAULT_N

        if _PERMISSION.search(text):
            res = await self._conn.request_permission(
                session_id=session_id,
                tool_call=ToolCallUpdate(tool_call_id="call_1", title="Test tool", status="pending"),
                options=[
                    PermissionOption(kind="allow_once", name="Allow", option_id="allow"),
                    PermissionOption(kind="reject_once", name="Reject", option_id="reject"),
                ],
            )
            outcome = res.outcome
            label = outcome.option_id if outcome.outcome == "selected" else outcome.outcome
            await self._conn.session_update(
                session_id=session_id, update=acp.update_agent_message_text(f"permission:{label}")
            )

        for _ in range(n):
            if session.cancelled.is_set():
                # ACP session/cancel: the prompt ends normally with stopReason cancelled.
                return PromptResponse(stop_reason="cancelled")
            await self._conn.session_update(session_id=session_id, update=acp.update_agent_message_text(TEXT))
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.cancelled.set()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        # The SDK strips the leading "_" of extension method names.
        if method == "test/echo":
            return params
        if method == "test/stats":
            return {**process_stats(), "notesReceived": self._notes_received, "loop": loop_name()}
        raise acp.RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "test/note":
            self._notes_received += 1


async def main() -> None:
    await acp.run_agent(cast(acp.Agent, TestAgent()))


if __name__ == "__main__":
    run(main(), loop_from_argv(sys.argv[1:]))
