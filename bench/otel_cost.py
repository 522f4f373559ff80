"""CPU cost of OpenTelemetry tracing (`acp_fast.tracing`) on the direct pair, in process.

A v1 client and a v1 agent on an in-memory pair in one process (no pipe, no child: what is
measured is acp_fast's own work per message), in one of three modes:

* ``off``: neither side traced (the default; run it on another checkout through
  ``PYTHONPATH`` to compare with it);
* ``on``: both sides ``with_tracing()`` on an OpenTelemetry SDK ``TracerProvider`` (its
  default sampler: every span recorded) with a ``BatchSpanProcessor`` whose exporter drops
  the spans (the SDK's cost of recording them is counted, an exporter's is not);
* ``api``: both sides traced, on the OpenTelemetry API's no-op tracer (what ``ACP_FAST_OTEL=1``
  gives where no SDK is set up: acp_fast's own part only, nothing recorded nor sent);
* ``sampled``: the same as ``on`` with the sampler ``ParentBased(TraceIdRatioBased(0.01))`` (1 % of
  the traces recorded; the context still travels in every request);
* workloads: ``rtt`` (``N`` sequential ``session/prompt`` round trips answered at once) and
  ``stream`` (one prompt streaming ``N`` ``agent_message_chunk`` updates of 100-byte texts,
  the client's update handler reading each).

With ``--pipe`` the agent runs in a child process on stdio (the direct pair as deployed: the
same agent, traced in the same mode) and the CPU of both processes is counted (the child's
through ``psutil``, over the measured loop only).

Prints one line: mode, workload, N, CPU microseconds per message (process time; the
interleaved driver below alternates modes so drift cancels)::

    for r in 1 2 3; do for m in off api sampled on; do python -m bench.otel_cost $m rtt --n 5000; done; done
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

SID = "s-1"
TEXT = "x" * 100


def _tracer(ratio: float | None = None, api: bool = False) -> Any:
    if api:
        from opentelemetry.trace import NoOpTracer

        return NoOpTracer()
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider() if ratio is None else TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    return provider.get_tracer("bench")


def _agent(mode: str, workload: str, n: int) -> Any:
    from acp_fast.roles import Agent

    streamed = n if workload == "stream" else 0

    async def prompt(params: Any, cx: Any) -> Any:
        for i in range(streamed):
            cx.send_session_update(SID, {"sessionUpdate": "agent_message_chunk",
                                         "content": {"type": "text", "text": TEXT}})
            if i % 500 == 499:
                await cx.drain()
        return {"stopReason": "end_turn"}

    agent = Agent.builder().on_request("session/new", lambda p, cx: {"sessionId": SID}).on_request(
        "session/prompt", prompt)
    return agent if mode == "off" else agent.with_tracing(_tracer(0.01 if mode == "sampled" else None, mode == "api"))


async def _run(mode: str, workload: str, n: int, pipe: bool = False) -> float:
    from acp_fast.roles import Client
    from acp_fast.transport import memory_pair, spawn

    got = 0

    def update(u: Any, cx: Any) -> None:
        nonlocal got
        got += 1

    client = Client.builder().on_session_update(update)
    if mode != "off":
        client = client.with_tracing(_tracer(0.01 if mode == "sampled" else None, mode == "api"))
    child: Any = None
    if pipe:
        import os
        import sys

        import psutil

        stream = await spawn([sys.executable, "-m", "bench.otel_cost", mode, workload, "--n", str(n), "--serve"],
                             env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")})
        child = psutil.Process(stream.pid)  # type: ignore[attr-defined]
        b: Any = stream
        served: Any = None
    else:
        a, b = memory_pair()
        served = asyncio.ensure_future(_agent(mode, workload, n).serve(a))
    params = {"sessionId": SID, "prompt": [{"type": "text", "text": "hi"}]}
    async with client.connect(b) as conn:
        await conn.initialize()
        await conn.send_request("session/new", {"cwd": "/tmp", "mcpServers": []})
        for _ in range(200):  # warm-up
            await conn.send_request("session/prompt", params) if workload == "rtt" else None
        start = time.process_time()
        child_start = sum(child.cpu_times()[:2]) if child is not None else 0.0
        if workload == "rtt":
            for _ in range(n):
                await conn.send_request("session/prompt", params)
        else:
            await conn.send_request("session/prompt", params)
            while got < n:
                await asyncio.sleep(0)
        spent = time.process_time() - start
        if child is not None:
            spent += sum(child.cpu_times()[:2]) - child_start
    if served is not None:
        await served
    return spent / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("off", "api", "sampled", "on"))
    parser.add_argument("workload", choices=("rtt", "stream"))
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--pipe", action="store_true", help="the agent in a child process on stdio")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the child's side
    args = parser.parse_args()
    if args.serve:
        from acp_fast.transport import connect_stdio, run

        run(_agent(args.mode, args.workload, args.n).serve(connect_stdio()), loop="asyncio")
        return
    per = asyncio.run(_run(args.mode, args.workload, args.n, args.pipe))
    print(f"{args.mode} {args.workload}{' pipe' if args.pipe else ''} n={args.n} {per:.2f} us/msg")


if __name__ == "__main__":
    main()
