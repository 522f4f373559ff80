"""`acp-fast bench --agent CMD`: measure any ACP agent the way a client sees it.

Each run spawns the agent, negotiates through `Client.protocol_connector()` (v2 first,
v1 when the agent answers 1; or one forced version), opens a session, sends one prompt and
waits for the end of the turn (v1: the prompt's response; v2: the idle `state_update`).
Measured per run: process start → `initialize` response, `session/new` latency, time to
the first `session/update` after the prompt was sent, updates per second over the turn and
the turn's total time. Medians over the runs.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ..jsontypes import Json, JsonObject
from ..protocol.facts import SESSION_REQUEST_PERMISSION

if TYPE_CHECKING:
    from ..roles import ClientBuilder
    from ..transport import Stream

__all__ = ["PROBE_METRICS", "ProbeResult", "probe", "probe_markdown", "probe_once"]

#: (key, label, unit) of the per-run numbers.
PROBE_METRICS: tuple[tuple[str, str, str], ...] = (
    ("startup_ms", "process start → initialize response", "ms"),
    ("session_new_ms", "session/new latency", "ms"),
    ("first_update_ms", "prompt → first update", "ms"),
    ("updates_per_s", "updates per second (turn)", "updates/s"),
    ("turn_ms", "turn total (prompt → end of turn)", "ms"),
    ("updates", "updates in the turn", "count"),
)


@dataclass
class ProbeResult:
    """Every run's record and the medians of `PROBE_METRICS`."""

    command: list[str]
    prompt: str
    runs: list[JsonObject] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def values(self, key: str) -> list[float]:
        """The value of metric `key` in every run that recorded it, in run order."""
        return [float(r[key]) for r in self.runs if r.get(key) is not None]

    def median(self, key: str) -> float | None:
        """The median of metric `key` over the runs, or `None` when no run recorded it."""
        v = self.values(key)
        return statistics.median(v) if v else None

    def to_json(self) -> JsonObject:
        """The result as a JSON-ready dict: the command, the prompt, one row per metric with
        its runs and median, the runs' records and the errors."""
        return {
            "command": self.command,
            "prompt": self.prompt,
            "rows": [{"metric": k, "unit": u, "runs": self.values(k), "median": self.median(k)}
                     for k, _, u in PROBE_METRICS],
            "runs": self.runs,
            "errors": self.errors,
        }


async def probe_once(command: Sequence[str], prompt: str, *, protocol: str = "auto",
                     cwd: str | None = None, env: dict[str, str] | None = None) -> JsonObject:
    """One spawn → initialize → session/new → prompt → end-of-turn run; returns its numbers."""
    from acp_fast import Client
    from acp_fast.conductor.spec import same_acp_fast
    from acp_fast.transport import spawn
    from acp_fast.remote import connect_url, is_url

    perf = time.perf_counter
    cwd = cwd or os.getcwd()
    st: dict[str, Any] = {"t_spawn": 0.0, "first": 0.0, "updates": 0, "chunks": 0, "text": 0}

    def on_update(u: Any, cx: Any) -> None:
        if not st["first"]:
            st["first"] = perf()
        st["updates"] += 1
        if u.kind == "agent_message_chunk":
            st["chunks"] += 1
            c = u.payload.get("content") if type(u.payload) is dict else None
            if type(c) is dict and type(c.get("text")) is str:
                st["text"] += len(c["text"])

    def on_permission(params: Json, cx: Any) -> JsonObject:
        options = params.get("options") or []
        if options:
            return {"outcome": {"outcome": "selected", "optionId": options[0]["optionId"]}}
        return {"outcome": {"outcome": "cancelled"}}

    def transport() -> Awaitable[Stream]:
        st["t_spawn"] = perf()
        if len(command) == 1 and is_url(command[0]):  # a remote agent: ws(s):// or http(s)://
            return connect_url(command[0])
        # `python -m acp_fast…` on this interpreter: this acp_fast, whatever the working directory
        argv, extra = same_acp_fast(command, env)
        return spawn(argv, env={**(env or {}), **extra} or None, cwd=cwd)

    async def session_v1(cx: Any) -> tuple[Any, Any]:
        s = (await cx.build_session(cwd)).session
        return s, None

    async def main(cx: Any) -> JsonObject:
        v2 = cx.version >= 2
        params = {"capabilities": {}} if v2 else {
            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}}}
        init = await cx.initialize(params)
        t_init = perf()
        session = (await cx.build_session(cwd)).session if v2 else (await cx.build_session(cwd)).session
        t_new = perf()
        st["first"], st["updates"], st["chunks"], st["text"] = 0.0, 0, 0, 0
        tp0 = perf()
        if v2:
            epoch = session.idle_epoch
            await session.send_prompt(prompt)
            stop = await session.wait_idle(after=epoch)
            stop_reason = None if stop is None else stop.kind
        else:
            stop_reason = (await session.send_prompt(prompt)).get("stopReason")
        tp1 = perf()
        turn = tp1 - tp0
        agent_info = init.get("info" if v2 else "agentInfo")
        return {
            "protocol": init.get("protocolVersion"),
            "agent": agent_info.get("name") if type(agent_info) is dict else None,
            "startup_ms": round((t_init - st["t_spawn"]) * 1000, 3),
            "session_new_ms": round((t_new - t_init) * 1000, 3),
            "first_update_ms": round((st["first"] - tp0) * 1000, 3) if st["first"] else None,
            "updates_per_s": round(st["updates"] / turn, 1) if turn > 0 and st["updates"] else None,
            "turn_ms": round(turn * 1000, 3),
            "updates": st["updates"],
            "chunks": st["chunks"],
            "text_chars": st["text"],
            "stop_reason": stop_reason,
        }

    def build(version: int) -> ClientBuilder[Any]:
        b = Client.v2() if version == 2 else Client.builder()
        b.with_info("acp-fast-bench-probe", "1").on_session_update(on_update).with_main(main)
        if version == 1:
            b.on_request(SESSION_REQUEST_PERMISSION, on_permission)
        return b

    connector = Client.protocol_connector()
    if protocol in ("auto", "1"):
        connector.with_v1(lambda: build(1))
    if protocol in ("auto", "2"):
        connector.with_v2(lambda: build(2))
    return cast("JsonObject", await connector.run(transport))  # main's result


def probe(command: Sequence[str], prompt: str, *, runs: int = 3, timeout_s: float = 60.0,
          protocol: str = "auto",
          on_run: Callable[[int, JsonObject | None, str | None], None] | None = None) -> ProbeResult:
    """`runs` runs of [`probe_once`][acp_fast.benchmark.probe.probe_once] (each in a fresh event loop and process)."""
    from acp_fast.transport import run as run_loop

    result = ProbeResult(list(command), prompt)
    for i in range(1, runs + 1):
        try:
            rec = run_loop(asyncio.wait_for(probe_once(command, prompt, protocol=protocol), timeout_s))
        except asyncio.TimeoutError:
            result.errors.append(f"run {i}: timed out after {timeout_s:g} s")
            rec = None
        except Exception as exc:  # noqa: BLE001 - reported, the other runs go on
            result.errors.append(f"run {i}: {type(exc).__name__}: {exc}"[:400])
            rec = None
        if rec is not None:
            result.runs.append(rec)
        if on_run is not None:
            on_run(i, rec, result.errors[-1] if rec is None else None)
    return result


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if abs(v) >= 100 or float(v).is_integer() else f"{v:.2f}"


def probe_markdown(result: ProbeResult) -> str:
    """The probe's report in Markdown: the agent and prompt, a table of each metric's median
    and runs, the stop reasons seen and the errors."""
    runs = result.runs
    proto = sorted({str(r.get("protocol")) for r in runs}) or ["?"]
    agent = next((r.get("agent") for r in runs if r.get("agent")), None)
    out = [f"Agent: `{' '.join(result.command)}`" + (f" ({agent}, ACP v{'/'.join(proto)})" if runs else ""),
           f"Prompt: {result.prompt!r}; {len(runs)} successful run(s)", "",
           "| metric | unit | median | runs |", "|---|---|---:|---|"]
    for key, label, unit in PROBE_METRICS:
        vals = result.values(key)
        out.append(f"| {label} | {unit} | {_fmt(result.median(key))} | {', '.join(_fmt(v) for v in vals)} |")
    stops = sorted({str(r.get("stop_reason")) for r in runs})
    if stops:
        out.append(f"\nStop reason(s): {', '.join(stops)}")
    for e in result.errors:
        out.append(f"- {e}")
    return "\n".join(out)
