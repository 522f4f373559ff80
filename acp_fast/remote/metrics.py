"""Metrics of the remote server in the Prometheus text format (off unless asked for).

Give an [`AcpApp`][acp_fast.remote.AcpApp] a [`ServerMetrics`][acp_fast.remote.metrics.ServerMetrics]
(`asgi_app(agent, metrics=m)`, `gateway_app(cmd, metrics=m)`; `acp-fast serve --metrics-port P`)
and serve `m.asgi_app()` (needs `prometheus-client`, in the `remote` extra) on a port of its
own, in the same event loop as the server:

```python
from acp_fast.remote import asgi_app, served
from acp_fast.remote.metrics import ServerMetrics

metrics = ServerMetrics()
app = asgi_app(agent, metrics=metrics)
async with served(app, port=8000), served(metrics.asgi_app(), port=9464):
    ...   # GET http://127.0.0.1:9464/metrics
```

The series (prefix `acp_fast_`; counters end in `_total`):

| series | labels | what |
|---|---|---|
| `connections_open` | `transport` (`http`, `websocket`) | connections open now |
| `connections_opened_total` | `transport` | connections opened |
| `connections_closed_total` | `cause` (`client`, `agent`, `idle`, `init_failed`, `too_big`, `shutdown`) | connections ended, by who ended them |
| `requests_total` | `method`, `outcome` (`ok`, `error`, `unanswered`) | client requests and how they were answered (`unanswered`: the connection ended first) |
| `request_duration_seconds` | `method` | histogram: from the request reaching the server to its response leaving the agent |
| `messages_total`, `bytes_total` | `direction` (`in`: client to agent, `out`) | messages (a batch is one) and their bytes |
| `refusals_total` | `status` | requests answered with an HTTP error status (401, 403, 404, 409, 413, 421, 503, ...) or a WebSocket closed 1009 (counted as 413) |
| `backpressure_pauses_total`, `backpressure_paused_seconds_total` | | times an agent was paused because the network side fell behind, and how long |
| `agent_exits_total` | `cause` (`exited`, `failed`, `signal`, `stopped`) | agent child processes that ended: by themselves with status 0, non-zero, by a signal, or stopped by the server |
| `sse_resumes_total` | `outcome` (`served`, `refused`) | SSE readers back with `Last-Event-ID` |

A fleet front (`acp-fast serve --redis URL --metrics-port P`) counts `connections_opened_total`
(the connections it opened; they are the fleet's, so `connections_open` stays 0 there) and
`refusals_total`. An agent host (`acp-fast host --metrics-port P`) serves
[`HostMetrics`][acp_fast.remote.metrics.HostMetrics]:

| series | labels | what |
|---|---|---|
| `host_slots` | | the connections the host runs at once at most |
| `host_slots_used` | | the connections (agents) it runs now |
| `host_connections_total` | | connections it took |
| `host_heartbeats_total` | `outcome` (`sent`, `failed`, `expired`) | heartbeats: kept alive, store unavailable, or found expired (the host registers again) |

A method name outside the ACP schemas' requests is counted as `other` (a client chooses
the names: they must not grow the label set).

What it costs: the per-message counters are plain integers of the connection (an app
without metrics runs the same code as before, with none of them), folded into the series
when scraped; a histogram is updated once per answered request, never per notification.
"""

from __future__ import annotations

import bisect
import collections
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._asgi import ASGIApp

__all__ = ["DEFAULT_BUCKETS", "HostCounters", "HostMetrics", "Metered", "ServerMetrics", "method_label"]

#: The request latency histogram's upper bounds, in seconds (a prompt turn may take minutes).
DEFAULT_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                                      60.0, 120.0, 300.0)

_KNOWN_METHODS: frozenset[str] | None = None


def method_label(method: str) -> str:
    """The `method` label of a request: its name when the ACP schemas define it as a request
    (either version, or a proxy's), else `other`."""
    global _KNOWN_METHODS
    known = _KNOWN_METHODS
    if known is None:
        from ..protocol import facts, methods_v1, methods_v2

        known = _KNOWN_METHODS = frozenset(
            m.name for m in (*methods_v1.ALL, *methods_v2.ALL) if m.kind == "request") | {
            facts.PROXY_INITIALIZE, *facts.SUCCESSOR_METHODS, facts.SESSION_SET_MODEL}
    return method if method in known else "other"


class Metered(Protocol):
    """What a connection with metrics counts (plain integers, read when scraped)."""

    #: `"http"` or `"websocket"`
    transport: str
    #: messages and bytes from the client to the agent
    in_messages: int
    in_bytes: int
    #: bytes from the agent to the client
    out_bytes: int
    #: times the agent was paused, and seconds paused (not counting a pause going on)
    pauses: int
    paused_seconds: float

    @property
    def out_messages(self) -> int:
        """Messages from the agent to the client."""
        ...

    @property
    def paused_since(self) -> float | None:
        """`time.monotonic()` when the pause going on began, or `None`."""
        ...


class ServerMetrics:
    """The counters of one or more [`AcpApp`][acp_fast.remote.AcpApp]s, and their Prometheus collector.

    One object may serve several apps (their series add up). Its `collect` reads the apps'
    connections, so scrape it in the apps' event loop ([`asgi_app`][acp_fast.remote.metrics.ServerMetrics.asgi_app]
    served there), never from another thread.

    Args:
        buckets: the upper bounds of the request latency histogram, in seconds.
        namespace: the series' prefix (`acp_fast`).
    """

    def __init__(self, *, buckets: Sequence[float] = DEFAULT_BUCKETS, namespace: str = "acp_fast") -> None:
        bounds = sorted(float(b) for b in buckets if not math.isinf(b))
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError("buckets must hold at least one finite bound, each once")
        self.namespace = namespace
        self._bounds = tuple(bounds)
        #: the connections open now (each folded into the totals when it closes)
        self._live: set[Metered] = set()
        self._opened: collections.Counter[str] = collections.Counter()
        self._closed: collections.Counter[str] = collections.Counter()
        self._refusals: collections.Counter[int] = collections.Counter()
        self._requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self._latency: dict[str, list[int]] = {}
        self._latency_sum: dict[str, float] = collections.defaultdict(float)
        self._agent_exits: collections.Counter[str] = collections.Counter()
        self._resumes: collections.Counter[str] = collections.Counter()
        # the closed connections' counters
        self._in = [0, 0]
        self._out = [0, 0]
        self._pauses = 0
        self._paused = 0.0

    # the server's side: events (each once per connection, request or refusal) ---------------

    def opened(self, conn: Metered) -> None:
        """A connection opened."""
        self._live.add(conn)
        self._opened[conn.transport] += 1

    def closed(self, conn: Metered, cause: str) -> None:
        """A connection ended (`cause`: who ended it); its counters join the totals."""
        if conn not in self._live:
            return
        self._live.discard(conn)
        self._closed[cause] += 1
        self._in[0] += conn.in_messages
        self._in[1] += conn.in_bytes
        self._out[0] += conn.out_messages
        self._out[1] += conn.out_bytes
        self._pauses += conn.pauses
        self._paused += conn.paused_seconds

    def fleet_opened(self, transport: str) -> None:
        """A fleet front opened a connection (the fleet's, with no counters in this process)."""
        self._opened[transport] += 1

    def request(self, method: str, outcome: str, seconds: float | None) -> None:
        """A request ended: answered (`ok`, `error`, with its latency) or `unanswered`."""
        label = method_label(method)
        self._requests[label, outcome] += 1
        if seconds is None:
            return
        counts = self._latency.get(label)
        if counts is None:
            counts = self._latency[label] = [0] * (len(self._bounds) + 1)
        counts[bisect.bisect_left(self._bounds, seconds)] += 1
        self._latency_sum[label] += seconds

    def refused(self, status: int) -> None:
        """A request was answered with an HTTP error status."""
        self._refusals[status] += 1

    def agent_exited(self, cause: str) -> None:
        """An agent child process ended (`exited`, `failed`, `signal` or `stopped`)."""
        self._agent_exits[cause] += 1

    def resumed(self, served: bool) -> None:
        """An SSE reader came back with `Last-Event-ID`: served, or refused (409)."""
        self._resumes["served" if served else "refused"] += 1

    # the operator's side ---------------------------------------------------------------------

    def collect(self) -> Iterator[Any]:
        """The series as `prometheus_client` metric families (a custom collector's `collect`)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        ns = self.namespace
        live = list(self._live)
        now = time.monotonic()

        def counter(name: str, doc: str, label: str | None, values: Iterable[tuple[object, float]]) -> Any:
            family = CounterMetricFamily(f"{ns}_{name}", doc, labels=[label] if label else None)
            for key, value in values:
                family.add_metric([str(key)] if label else [], value)
            return family

        open_now = GaugeMetricFamily(f"{ns}_connections_open", "ACP connections open now", labels=["transport"])
        for transport in ("http", "websocket"):
            open_now.add_metric([transport], sum(1 for c in live if c.transport == transport))
        yield open_now
        yield counter("connections_opened", "ACP connections opened", "transport",
                      ((t, self._opened[t]) for t in ("http", "websocket")))
        yield counter("connections_closed", "ACP connections ended, by cause", "cause", sorted(self._closed.items()))
        requests = CounterMetricFamily(f"{ns}_requests", "client requests, by method and outcome",
                                       labels=["method", "outcome"])
        for (method, outcome), n in sorted(self._requests.items()):
            requests.add_metric([method, outcome], n)
        yield requests
        latency = HistogramMetricFamily(f"{ns}_request_duration_seconds",
                                        "seconds from a client request reaching the server to its response",
                                        labels=["method"])
        for method, counts in sorted(self._latency.items()):
            cumulative, buckets = 0, []
            for bound, n in zip((*self._bounds, math.inf), counts):
                cumulative += n
                buckets.append(("+Inf" if math.isinf(bound) else repr(bound), cumulative))
            latency.add_metric([method], buckets, self._latency_sum[method])
        yield latency
        ins = (self._in[0] + sum(c.in_messages for c in live), self._in[1] + sum(c.in_bytes for c in live))
        outs = (self._out[0] + sum(c.out_messages for c in live), self._out[1] + sum(c.out_bytes for c in live))
        yield counter("messages", "ACP messages (a batch is one), by direction", "direction",
                      (("in", ins[0]), ("out", outs[0])))
        yield counter("bytes", "bytes of ACP messages, by direction", "direction", (("in", ins[1]), ("out", outs[1])))
        yield counter("refusals", "requests answered with an HTTP error status", "status",
                      sorted(self._refusals.items()))
        yield counter("backpressure_pauses", "times an agent was paused by a slow network side", None,
                      [(None, self._pauses + sum(c.pauses for c in live))])
        paused = self._paused + sum(c.paused_seconds + (now - s if (s := c.paused_since) is not None else 0.0)
                                    for c in live)
        yield counter("backpressure_paused_seconds", "seconds agents were paused by a slow network side", None,
                      [(None, paused)])
        yield counter("agent_exits", "agent child processes that ended, by cause", "cause",
                      sorted(self._agent_exits.items()))
        yield counter("sse_resumes", "SSE readers back with Last-Event-ID, by outcome", "outcome",
                      (("served", self._resumes["served"]), ("refused", self._resumes["refused"])))

    def registry(self) -> Any:
        """A new `prometheus_client.CollectorRegistry` holding these series alone."""
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return registry

    def asgi_app(self, registry: Any = None) -> ASGIApp:
        """An ASGI app answering every GET with the series in the Prometheus text format.

        Args:
            registry: the `prometheus_client` registry to expose, which must hold this object
                (`registry.register(metrics)`); by default a new one holding it alone.
        """
        from prometheus_client import make_asgi_app

        app: ASGIApp = make_asgi_app(registry if registry is not None else self.registry())
        return app


class HostCounters(Protocol):
    """What [`HostMetrics`][acp_fast.remote.metrics.HostMetrics] reads of an agent host
    (`acp_fast.fleet.host.AgentHost`)."""

    @property
    def slots(self) -> int:
        """Connections run at once at most."""
        ...

    @property
    def connections(self) -> int:
        """Connections (agents) run now."""
        ...

    @property
    def taken(self) -> int:
        """Connections taken since the start."""
        ...

    @property
    def heartbeats(self) -> collections.Counter[str]:
        """Heartbeats by outcome: `sent`, `failed`, `expired`."""
        ...


class HostMetrics:
    """The Prometheus collector of a fleet's agent host (see the module docstring): its slots,
    the connections it runs and took, its heartbeats. Read when scraped; scrape it in the
    host's event loop.

    Args:
        host: the host (`acp_fast.fleet.host.AgentHost`).
        namespace: the series' prefix (`acp_fast`).
    """

    def __init__(self, host: HostCounters, *, namespace: str = "acp_fast") -> None:
        self.host = host
        self.namespace = namespace

    def collect(self) -> Iterator[Any]:
        """The series as `prometheus_client` metric families (a custom collector's `collect`)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        ns, host = self.namespace, self.host
        yield GaugeMetricFamily(f"{ns}_host_slots", "connections the host runs at once at most", value=host.slots)
        yield GaugeMetricFamily(f"{ns}_host_slots_used", "connections (agents) the host runs now",
                                value=host.connections)
        yield CounterMetricFamily(f"{ns}_host_connections", "connections the host took", value=host.taken)
        beats = CounterMetricFamily(f"{ns}_host_heartbeats", "heartbeats, by outcome", labels=["outcome"])
        for outcome in ("sent", "failed", "expired"):
            beats.add_metric([outcome], host.heartbeats[outcome])
        yield beats

    def registry(self) -> Any:
        """A new `prometheus_client.CollectorRegistry` holding these series alone."""
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return registry

    def asgi_app(self) -> ASGIApp:
        """An ASGI app answering every GET with the series in the Prometheus text format."""
        from prometheus_client import make_asgi_app

        app: ASGIApp = make_asgi_app(self.registry())
        return app
