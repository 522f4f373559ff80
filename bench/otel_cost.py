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
* ``floor``: a FLOOR, never a target. Neither side traced by acp_fast; instead the benchmark
  itself does, around the same round trip, only what any tracer recording every span on the
  OpenTelemetry SDK must do (the same providers, processors and exporter as ``on``): the
  client starts a ``CLIENT`` span with the attributes acp_fast gives it, formats its
  ``traceparent`` into a copy of the params' ``_meta``; the agent's handler matches that
  string (one regular expression: a receiver must check what a peer sends), starts a
  ``SERVER`` span with it as parent and the same attributes, records the stop reason and
  ends it; the client records the stop reason and ends its span. Nothing is made current
  (acp_fast runs each handler with its span current, so that what it sends is the span's
  child: a cost above this floor, by design), no error path, no envelope, no
  ``tracestate``. What ``on`` costs above ``floor`` is acp_fast's own part;
* workloads: ``rtt`` (``N`` sequential ``session/prompt`` round trips answered at once) and
  ``stream`` (one prompt streaming ``N`` ``agent_message_chunk`` updates of 100-byte texts,
  the client's update handler reading each).

With ``--pipe`` the agent runs in a child process on stdio (the direct pair as deployed: the
same agent, traced in the same mode) and the CPU of both processes is counted (the child's
through ``psutil``, over the measured loop only).

Prints one line: mode, workload, N, CPU microseconds per message (process time; the
interleaved driver below alternates modes so drift cancels)::

    for r in 1 2 3; do for m in off api sampled on floor; do python -m bench.otel_cost $m rtt --n 5000; done; done

(``floor`` prints ``floor (not a target)``.)
"""

from __future__ import annotations

import argparse
import asyncio
import re
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


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})\Z")


class _FloorServer:
    """The floor's agent side: a SERVER span per received prompt, by hand (see the docstring)."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry import trace

        self.tracer, self.trace, self.kind = tracer, trace, trace.SpanKind.SERVER

    def start(self, params: Any, rid: str) -> Any:
        trace = self.trace
        m = _TRACEPARENT.match(params["_meta"]["traceparent"])
        assert m is not None
        parent = trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(
            int(m.group(1), 16), int(m.group(2), 16), True, trace.TraceFlags(int(m.group(3), 16)))))
        return self.tracer.start_span("session/prompt", parent, self.kind, {
            "rpc.system": "jsonrpc", "rpc.method": "session/prompt", "rpc.jsonrpc.request_id": rid,
            "acp.session.id": params["sessionId"], "acp.prompt_turn": True})


class _FloorClient:
    """The floor's client side: a CLIENT span per sent prompt, by hand (see the docstring)."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry import trace

        self.tracer, self.kind, self.rid = tracer, trace.SpanKind.CLIENT, 2  # initialize, session/new

    async def prompt(self, conn: Any, params: Any) -> Any:
        self.rid += 1
        span = self.tracer.start_span("session/prompt", None, self.kind, {
            "rpc.system": "jsonrpc", "rpc.method": "session/prompt", "rpc.jsonrpc.request_id": str(self.rid),
            "acp.session.id": params["sessionId"]})
        sc = span.get_span_context()
        result = await conn.send_request("session/prompt", {**params, "_meta": {
            "traceparent": "00-%032x-%016x-%02x" % (sc.trace_id, sc.span_id, sc.trace_flags)}})
        span.set_attribute("acp.stop_reason", result["stopReason"])
        span.end()
        return result


def _agent(mode: str, workload: str, n: int) -> Any:
    from acp_fast.roles import Agent

    streamed = n if workload == "stream" else 0
    floor = _FloorServer(_tracer()) if mode == "floor" else None

    async def prompt(params: Any, cx: Any) -> Any:
        span = floor.start(params, str(cx.id)) if floor is not None else None
        for i in range(streamed):
            cx.send_session_update(SID, {"sessionUpdate": "agent_message_chunk",
                                         "content": {"type": "text", "text": TEXT}})
            if i % 500 == 499:
                await cx.drain()
        result = {"stopReason": "end_turn"}
        if span is not None:
            span.set_attribute("acp.stop_reason", result["stopReason"])
            span.end()
        return result

    agent = Agent.builder().on_request("session/new", lambda p, cx: {"sessionId": SID}).on_request(
        "session/prompt", prompt)
    if mode in ("off", "floor"):
        return agent
    return agent.with_tracing(_tracer(0.01 if mode == "sampled" else None, mode == "api"))


async def _run(mode: str, workload: str, n: int, pipe: bool = False) -> float:
    from acp_fast.roles import Client
    from acp_fast.transport import memory_pair, spawn

    got = 0

    def update(u: Any, cx: Any) -> None:
        nonlocal got
        got += 1

    client = Client.builder().on_session_update(update)
    floor = _FloorClient(_tracer()) if mode == "floor" else None
    if mode not in ("off", "floor"):
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
        send = conn.send_request if floor is None else lambda _method, p: floor.prompt(conn, p)
        await conn.initialize()
        await conn.send_request("session/new", {"cwd": "/tmp", "mcpServers": []})
        for _ in range(200):  # warm-up
            await send("session/prompt", params) if workload == "rtt" else None
        start = time.process_time()
        child_start = sum(child.cpu_times()[:2]) if child is not None else 0.0
        if workload == "rtt":
            for _ in range(n):
                await send("session/prompt", params)
        else:
            await send("session/prompt", params)
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
    parser.add_argument("mode", choices=("off", "api", "sampled", "on", "floor"))
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
    label = "floor (not a target)" if args.mode == "floor" else args.mode
    print(f"{label} {args.workload}{' pipe' if args.pipe else ''} n={args.n} {per:.2f} us/msg")


if __name__ == "__main__":
    main()
