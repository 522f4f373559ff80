#!/usr/bin/env python3
"""Minimal ACP v1 client on the official Python SDK (``agent-client-protocol``, pinned 0.12.1).

The Python twin of ``peers/ts/client.mjs``: same command line, same JSON line on stdout.
Spawns the agent with the SDK's ``acp.spawn_agent_process`` (default agent: ``agent.py`` next
to this file), runs initialize -> session/new -> session/prompt asking for N chunks, counts the
``session/update`` notifications and the text bytes they carry, runs M sequential request
round trips, then X ``_test/echo`` requests with K in flight, asks the agent for
``_test/stats``. Phases and output fields are documented in ``peers/ts/client.mjs``.

Usage:
  python client.py [--n N] [--m M] [--rtt-method echo|prompt|none] [--inflight K]
                   [--inflight-m X] [--warmup W] [--permission] [--raw-updates] [--large]
                   [--loop asyncio|uvloop] [-- <agent command> [args...]]

Notes on SDK defaults this client overrides (documented keyword arguments):
* ``spawn_agent_process`` gives the child a trimmed environment; the full environment is passed
  so that ``ACP_N``/``ACP_CHUNK`` reach the agent.
* its agent stderr default is a pipe nobody reads; stderr is inherited instead.
* its stdout reader keeps asyncio's 64 KiB line limit (long lines are then reassembled from
  64 KiB pieces); it is set to the SDK's own ``DEFAULT_STDIO_BUFFER_LIMIT_BYTES`` (50 MB),
  which ``run_agent`` uses on the agent side, so both directions read alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import sys
import time
from typing import Any, cast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import acp  # noqa: E402
from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES  # noqa: E402
from acp.schema import (  # noqa: E402
    AgentMessageChunk,
    AllowedOutcome,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    RequestPermissionResponse,
)

from _common import (  # noqa: E402
    ClientArgs,
    default_python_agent,
    latency_summary,
    loop_name,
    parse_client_args,
    run,
    run_requests,
)

SDK_VERSION = "0.12.1"


async def cpu_snapshot(conn: acp.ClientSideConnection) -> tuple[float, float | None]:
    """CPU µs used so far by this process and (via ``_test/stats``) by the agent, or None."""
    agent_us: float | None = None
    try:
        s = await conn.ext_method("test/stats", {})
        agent_us = float(s["userCpuUs"] + s["systemCpuUs"])
    except Exception:  # agent without the _test/stats extension
        pass
    return time.process_time() * 1e6, agent_us


def cpu_per_message(a: tuple[float, float | None], b: tuple[float, float | None], n: int) -> dict[str, Any]:
    """CPU µs per streamed notification on each side between two snapshots."""
    if n <= 0:
        return {}
    agent = None if a[1] is None or b[1] is None else round((b[1] - a[1]) / n, 2)
    return {"streamClientCpuUsPerMsg": round((b[0] - a[0]) / n, 2), "streamAgentCpuUsPerMsg": agent}


class TestClient:
    """Implements the ``acp.Client`` protocol structurally: only the methods this benchmark needs
    (the SDK answers the others with -32601, see ``agent.py``)."""

    def __init__(self) -> None:
        self.updates = 0
        self.text_bytes = 0
        self.first_update_at = 0.0
        self.permission_requests = 0

    def reset(self) -> None:
        self.updates = 0
        self.text_bytes = 0
        self.first_update_at = 0.0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.updates == 0:
            self.first_update_at = time.perf_counter()
        self.updates += 1
        if isinstance(update, AgentMessageChunk) and update.content.type == "text":
            self.text_bytes += len(update.content.text)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permission_requests += 1
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id))


async def main(args: ClientArgs) -> dict[str, Any]:
    client = TestClient()
    t_spawn = time.perf_counter()
    async with acp.spawn_agent_process(
        cast(acp.Client, client),
        args.cmd[0],
        *args.cmd[1:],
        env=args.child_env,
        transport_kwargs={"stderr": None, "limit": DEFAULT_STDIO_BUFFER_LIMIT_BYTES},
    ) as (conn, process):
        t0 = time.perf_counter()
        init = await conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=False, write_text_file=False)
            ),
            client_info=Implementation(name="pysdk-test-client", version="0.1.0"),
        )
        t_init = time.perf_counter()
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        t_new = time.perf_counter()
        sid = session.session_id

        if args.warmup > 0:
            await conn.prompt(session_id=sid, prompt=[acp.text_block(f"warmup {args.warmup}")])
            if args.m > 0 and args.rtt_method == "echo":
                for i in range(args.warmup):
                    await conn.ext_method("test/echo", {"i": i})
            client.reset()

        out: dict[str, Any] = {
            "sdk": "pysdk",
            "sdkVersion": SDK_VERSION,
            "loop": loop_name(),
            "agentCmd": " ".join(args.cmd),
            "protocolVersion": init.protocol_version,
            "agentInfo": init.agent_info.model_dump(by_alias=True, exclude_none=True) if init.agent_info else None,
            "startupMs": round((t_init - t_spawn) * 1000, 3),
            "initMs": round((t_init - t0) * 1000, 3),
            "sessionNewMs": round((t_new - t_init) * 1000, 3),
            "n": args.n,
            "chunkSize": args.chunk,
            "warmup": args.warmup,
        }

        if args.n > 0 or args.permission:
            text = f"{'permission ' if args.permission else ''}stream {args.n} chunks"
            cpu0 = await cpu_snapshot(conn)
            tp0 = time.perf_counter()
            # ClientSideConnection.prompt returns once the response arrived *and* every
            # session_update handler received before it has finished.
            resp = await conn.prompt(session_id=sid, prompt=[acp.text_block(text)])
            tp1 = time.perf_counter()
            cpu1 = await cpu_snapshot(conn)
            secs = tp1 - tp0
            expected = args.n + (1 if args.permission else 0)
            n_bytes = args.n * args.chunk
            out.update(
                updatesReceived=client.updates,
                updatesOk=client.updates == expected,
                textBytes=client.text_bytes,
                textOk=client.text_bytes >= n_bytes if args.permission else client.text_bytes == n_bytes,
                permissionRequests=client.permission_requests,
                stopReason=resp.stop_reason,
                promptMs=round(secs * 1000, 3),
                firstUpdateMs=round((client.first_update_at - tp0) * 1000, 3) if client.first_update_at else None,
                notificationsPerSec=round(args.n / secs) if args.n > 0 else None,
                textMiBPerSec=round(client.text_bytes / 1048576 / secs, 2) if args.n > 0 else None,
                **cpu_per_message(cpu0, cpu1, args.n),
            )

        async def echo(i: int) -> None:
            r = await conn.ext_method("test/echo", {"i": i})
            if r.get("i") != i:
                raise RuntimeError(f"echo mismatch at {i}: {r!r}")

        async def empty_prompt(i: int) -> None:
            await conn.prompt(session_id=sid, prompt=[acp.text_block("0")])

        if args.m > 0 and args.rtt_method != "none":
            total_ms, lat_ms = await run_requests(args.m, 1, echo if args.rtt_method == "echo" else empty_prompt)
            out.update(rttMethod=args.rtt_method, m=args.m)
            out.update(latency_summary("roundTripsPerSec", "", total_ms, lat_ms))

        if args.inflight > 0 and args.inflight_m > 0:
            total_ms, lat_ms = await run_requests(args.inflight_m, args.inflight, echo)
            out.update(inflight=args.inflight, inflightM=args.inflight_m)
            out.update(latency_summary("requestsPerSec", "inflight", total_ms, lat_ms))

        try:
            stats = await conn.ext_method("test/stats", {})
            out["agentMaxRssKiB"] = stats["maxRssKiB"]
            out["agentLoop"] = stats.get("loop")
            out["agentCpuMs"] = round((stats["userCpuUs"] + stats["systemCpuUs"]) / 1000)
        except Exception:  # agent without the _test/stats extension
            out["agentMaxRssKiB"] = None
            out["agentCpuMs"] = None
        ru = resource.getrusage(resource.RUSAGE_SELF)
        out["clientMaxRssKiB"] = ru.ru_maxrss
        out["clientCpuMs"] = round((ru.ru_utime + ru.ru_stime) * 1000)
        # The agent exits on stdin EOF. Leaving the context closes its stdin and gives it 2 s
        # before SIGTERM, too little on a loaded machine: close it here and wait up to 10 s.
        # (an asyncio subprocess; on acp_fast's connection drop-in the child is its own object,
        # which waits for the agent itself)
        stdin = getattr(process, "stdin", None)
        if isinstance(stdin, asyncio.StreamWriter):
            stdin.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), 10)
    # Leaving the context waited for the agent (it has exited by now unless it hangs).
    out["agentExit"] = process.returncode
    return out


if __name__ == "__main__":
    import json

    args = parse_client_args(sys.argv[1:], default_python_agent())
    result = run(main(args), args.loop)
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
