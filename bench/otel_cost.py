"""CPU cost of OpenTelemetry tracing (`acp_fast.tracing`) on the direct pair, in process.

A v1 client and a v1 agent on an in-memory pair in one process (no pipe, no child: what is
measured is acp_fast's own work per message), in one of three modes:

* ``off``: neither side traced (the default; run it on another checkout through
  ``PYTHONPATH`` to compare with it);
* ``on``: both sides ``with_tracing()`` on an OpenTelemetry SDK ``TracerProvider`` (its
  default sampler: every span recorded) with a ``BatchSpanProcessor`` whose exporter drops
  the spans (the SDK's cost of recording them is counted, an exporter's is not);
* ``sampled``: the same with the sampler ``ParentBased(TraceIdRatioBased(0.01))`` (1 % of
  the traces recorded; the context still travels in every request);
* workloads: ``rtt`` (``N`` sequential ``session/prompt`` round trips answered at once) and
  ``stream`` (one prompt streaming ``N`` ``agent_message_chunk`` updates of 100-byte texts,
  the client's update handler reading each).

Prints one line: mode, workload, N, CPU microseconds per message (process time; the
interleaved driver below alternates modes so drift cancels)::

    for r in 1 2 3; do for m in off on sampled; do python -m bench.otel_cost $m rtt --n 5000; done; done
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

SID = "s-1"
TEXT = "x" * 100


def _tracer(ratio: float | None = None) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider() if ratio is None else TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    return provider.get_tracer("bench")


async def _run(mode: str, workload: str, n: int) -> float:
    from acp_fast.roles import Agent, Client
    from acp_fast.transport import memory_pair

    streamed = n if workload == "stream" else 0

    async def prompt(params: Any, cx: Any) -> Any:
        for i in range(streamed):
            cx.send_session_update(SID, {"sessionUpdate": "agent_message_chunk",
                                         "content": {"type": "text", "text": TEXT}})
            if i % 500 == 499:
                await cx.drain()
        return {"stopReason": "end_turn"}

    got = 0

    def update(u: Any, cx: Any) -> None:
        nonlocal got
        got += 1

    agent = Agent.builder().on_request("session/new", lambda p, cx: {"sessionId": SID}).on_request(
        "session/prompt", prompt)
    client = Client.builder().on_session_update(update)
    if mode != "off":
        tracer = _tracer(0.01 if mode == "sampled" else None)
        agent = agent.with_tracing(tracer)
        client = client.with_tracing(tracer)
    a, b = memory_pair()
    served = asyncio.ensure_future(agent.serve(a))
    params = {"sessionId": SID, "prompt": [{"type": "text", "text": "hi"}]}
    async with client.connect(b) as conn:
        await conn.initialize()
        await conn.send_request("session/new", {"cwd": "/tmp", "mcpServers": []})
        for _ in range(200):  # warm-up
            await conn.send_request("session/prompt", params) if workload == "rtt" else None
        start = time.process_time()
        if workload == "rtt":
            for _ in range(n):
                await conn.send_request("session/prompt", params)
        else:
            await conn.send_request("session/prompt", params)
            while got < n:
                await asyncio.sleep(0)
        spent = time.process_time() - start
    await served
    return spent / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("off", "on", "sampled"))
    parser.add_argument("workload", choices=("rtt", "stream"))
    parser.add_argument("--n", type=int, default=5000)
    args = parser.parse_args()
    per = asyncio.run(_run(args.mode, args.workload, args.n))
    print(f"{args.mode} {args.workload} n={args.n} {per:.2f} us/msg")


if __name__ == "__main__":
    main()
