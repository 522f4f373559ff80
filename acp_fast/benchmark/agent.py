"""Fallback acp_fast test agent for the benchmarks (used only while ``acp-fast testy`` is absent).

Behaves like the peers' test agents (``peers/README.md``), on acp_fast's builder API behind
``Agent.protocol_router()`` (v1 and draft v2 on one stdio endpoint):

* ``session/prompt``: N = first integer in the prompt text, else ``$ACP_N``, else 10;
  streams N ``agent_message_chunk`` updates of ``$ACP_CHUNK`` (default 100) × ``"x"``; the
  word ``permission`` first asks ``session/request_permission`` (v1) and streams one chunk
  ``permission:<optionId or cancelled>``. v1 answers ``{"stopReason": "end_turn"}`` at the
  end; v2 answers ``{"messageId"}`` first and frames the turn with ``state_update``
  running … idle/``end_turn``.
* ``session/cancel`` stops the running prompt (``cancelled``).
* ``_test/echo`` returns its params, ``_test/stats`` the process's peak RSS/CPU,
  ``_test/note`` is counted.

Run: ``python -m acp_fast.benchmark.agent``.
"""

from __future__ import annotations

import asyncio
import os
import re
import resource
import uuid
from typing import Any

__all__ = ["build", "main"]

_INT = re.compile(r"\d+")


def _stats(notes: int) -> dict[str, Any]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    rss = None
    try:
        with open("/proc/self/statm", "rb") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        pass
    return {"maxRssKiB": ru.ru_maxrss, "rssBytes": rss, "userCpuUs": round(ru.ru_utime * 1e6),
            "systemCpuUs": round(ru.ru_stime * 1e6), "notesReceived": notes}


def _text(prompt: Any) -> str:
    return " ".join(b.get("text", "") for b in prompt or () if type(b) is dict and b.get("type") == "text")


def build() -> Any:
    from acp_fast import __version__
    from acp_fast.roles import Agent

    default_n = int(os.environ.get("ACP_N", "10"))
    chunk = int(os.environ.get("ACP_CHUNK", "100"))
    text = "x" * chunk
    cancelled: dict[str, bool] = {}
    notes = [0]

    def n_of(prompt_text: str) -> int:
        m = _INT.search(prompt_text)
        return int(m.group()) if m else default_n

    async def stream(cx: Any, sid: str, n: int, message_id: str | None = None) -> bool:
        """Sends n chunks (waiting whenever the peer is not keeping up); False if cancelled."""
        raw = cx.connection.raw
        update: dict[str, Any] = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
        if message_id is not None:  # v2 chunks belong to a message
            update["messageId"] = message_id
        send = cx.connection.send_session_update
        for i in range(n):
            if cancelled.get(sid):
                return False
            send(sid, update)
            if raw.writing_paused:
                await raw.drain()
            elif i & 63 == 63:
                await asyncio.sleep(0)
        await raw.drain()
        return True

    def new_session(params: Any, cx: Any) -> Any:
        sid = str(uuid.uuid4())
        cancelled[sid] = False
        return {"sessionId": sid}

    def cancel(params: Any, cx: Any) -> None:
        sid = params.get("sessionId") if type(params) is dict else None
        if sid in cancelled:
            cancelled[sid] = True

    async def prompt_v1(params: Any, cx: Any) -> Any:
        sid = params["sessionId"]
        cancelled[sid] = False
        t = _text(params.get("prompt"))
        if re.search("permission", t, re.IGNORECASE):
            res = await cx.send_request("session/request_permission", {
                "sessionId": sid,
                "toolCall": {"toolCallId": "call_1", "title": "Test tool", "status": "pending"},
                "options": [{"kind": "allow_once", "name": "Allow", "optionId": "allow"},
                            {"kind": "reject_once", "name": "Reject", "optionId": "reject"}]})
            o = res["outcome"]
            outcome = o.get("optionId") if o.get("outcome") == "selected" else o.get("outcome")
            cx.send_session_update(sid, {"sessionUpdate": "agent_message_chunk",
                                         "content": {"type": "text", "text": f"permission:{outcome}"}})
        ok = await stream(cx, sid, n_of(t))
        return {"stopReason": "end_turn" if ok else "cancelled"}

    def prompt_v2(params: Any, cx: Any) -> Any:
        sid = params["sessionId"]
        cancelled[sid] = False
        t = _text(params.get("prompt"))
        message_id = str(uuid.uuid4())

        async def turn() -> None:
            cx.send_session_update(sid, {"sessionUpdate": "state_update", "state": "running"})
            cx.send_session_update(sid, {"sessionUpdate": "user_message", "messageId": message_id,
                                         "content": params.get("prompt")})
            ok = await stream(cx, sid, n_of(t), str(uuid.uuid4()))
            cx.send_session_update(sid, {"sessionUpdate": "state_update", "state": "idle",
                                         "stopReason": "end_turn" if ok else "cancelled"})

        task = asyncio.get_running_loop().create_task(turn())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return {"messageId": message_id}

    tasks: set[asyncio.Task[None]] = set()

    def echo(params: Any, cx: Any) -> Any:
        return params if params is not None else {}

    def stats(params: Any, cx: Any) -> Any:
        return _stats(notes[0])

    def note(params: Any, cx: Any) -> None:
        notes[0] += 1

    def common(b: Any, prompt: Any) -> Any:
        b.with_info("acp-fast-bench-agent", __version__)
        b.on_request("session/new", new_session)
        b.on_request("session/prompt", prompt)
        b.on_notification("session/cancel", cancel)
        b.on_request("_test/echo", echo)
        b.on_request("_test/stats", stats)
        b.on_notification("_test/note", note)
        return b

    return Agent.protocol_router().with_v1(common(Agent.builder(), prompt_v1)).with_v2(
        common(Agent.v2(), prompt_v2))


def main() -> None:
    from acp_fast.roles import run_agent_stdio

    run_agent_stdio(build())


if __name__ == "__main__":
    main()
