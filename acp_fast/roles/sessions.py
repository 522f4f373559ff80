"""Session helpers (part of the builder API, [`acp_fast.roles`][acp_fast.roles]).

Mirrors the v2 session API of the Rust SDK guide (seed 000) in Python form. Every name is
importable from here (and from [`acp_fast.roles`][acp_fast.roles]); one module per idea:

| module | what it holds |
|---|---|
| `client_sessions` | the client's handles: `build_session` / `resume_session` / `fork_session`, `OpenedSession`, `V2Session`, `V1Session`, `SessionPeer` |
| `session_state` | what the client tracks per session from the agent's updates: `SessionState`, `SessionStates`, `StopReason`, `IDLE` / `RUNNING` / `REQUIRES_ACTION` |
| `agent_sessions` | the agent's side: `AgentSession`, `PromptTurn` (prompt acceptance, failures after insertion, cancellation, close) |
| `session_setup` | setup requests built from a complete request, for clients and proxies: `SessionSetup` (`start_session` / `on_proxy_session_start`) |
| `upserts` | v2 upsert patches: `apply_upsert`, `apply_meta_update` |

* `build_session` / `resume_session` publish `session/new` /
  `session/resume` and resolve to an [`OpenedSession`][acp_fast.roles.OpenedSession]: the command handle
  ([`V2Session`][acp_fast.roles.V2Session], just a session id + connection) *and* the complete setup response,
  never a reconstructed subset.
* [`V2Session.send_prompt`][acp_fast.roles.V2Session.send_prompt] returns the `session/prompt` request handle; its result is
  the insertion receipt (`{"messageId": …}`), not the end of the turn. Completion arrives
  as an `idle` `state_update` ([`V2Session.wait_idle`][acp_fast.roles.V2Session.wait_idle]).
* [`V2Session.cancel_active_work`][acp_fast.roles.V2Session.cancel_active_work] sends the session-wide `session/cancel`.
* Foreground state is tracked per session ([`SessionState`][acp_fast.roles.SessionState]) from every *known*
  `state_update` the connection reads, before the application's handler sees it. The
  handle owns nothing and buffers nothing; dropping it has no effect on the wire.
* v1: the same `build_session` resolves to an [`OpenedSession`][acp_fast.roles.OpenedSession] whose session is
  a [`V1Session`][acp_fast.roles.V1Session]: its [`V1Session.send_prompt`][acp_fast.roles.V1Session.send_prompt] stays pending for the whole turn
  and ends with `stopReason` (v1 has no idle update).

Install update handlers on the builder *before* connecting: resume replay precedes the
resume response on the wire, so handlers observe it in order, and `resume_session`
only resolves after the notifications received before its response were handled.

Example (inside `Client.v2().connect_with(stream, main)`):

```python
async def main(cx):
    await cx.initialize()
    opened = await cx.build_session(cwd="/work")
    session = opened.session
    epoch = session.idle_epoch
    receipt = await session.send_prompt([{"type": "text", "text": "hi"}])
    stop = await session.wait_idle(after=epoch)
    assert stop.kind == "end_turn" and "messageId" in receipt
```
"""

from __future__ import annotations

from .agent_sessions import AgentSession, PromptTurn
from .client_sessions import (
    OpenedSession,
    SessionPeer,
    V1Session,
    V2Session,
    build_session,
    fork_session,
    resume_session,
)
from .session_setup import SETUP_OPERATIONS, SessionSetup, SetupPeer
from .session_state import (
    CANCELLED,
    FINISHED_TOOL_CALL,
    IDLE,
    PERMISSION_CANCELLED,
    REQUIRES_ACTION,
    RUNNING,
    SessionState,
    SessionStates,
    StopReason,
)
from .upserts import apply_meta_update, apply_upsert

__all__ = [
    "CANCELLED",
    "FINISHED_TOOL_CALL",
    "IDLE",
    "PERMISSION_CANCELLED",
    "REQUIRES_ACTION",
    "RUNNING",
    "SETUP_OPERATIONS",
    "AgentSession",
    "OpenedSession",
    "PromptTurn",
    "SessionPeer",
    "SessionSetup",
    "SessionState",
    "SessionStates",
    "SetupPeer",
    "StopReason",
    "V1Session",
    "V2Session",
    "apply_meta_update",
    "apply_upsert",
    "build_session",
    "fork_session",
    "resume_session",
]
