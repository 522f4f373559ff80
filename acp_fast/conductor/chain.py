"""The conductor: runs a proxy chain and routes every message on raw bytes (protocol.md §8).

Topology: upstream (the client, or a parent conductor in proxy mode) ↔ conductor ↔
{proxy 0 … proxy n-1, agent}. The conductor owns every transport; components never talk
to each other. Each connection (a *hop*) has its own id space: every request forwarded
onto a hop gets a fresh integer id there, and the hop's pending table maps it back to
(the hop it came from, the id it had there). There is no global id table.

Pass-through path: each hop's bytes go to the engine's :class:`~acp_fast.engine.Forwarder`
(``Forwarder.feed(hop, chunk)``), which in one call per read frames every complete line,
validates it, classifies it and appends what it forwards to the destination hop's output
buffer; the conductor writes each hop's buffer once per read. The pending tables (hop, new
id) → (source hop, original id) and the per-hop id counters live in the Forwarder too, so
the Python code below (the slow path) and the fast path share them. What the fast path does
per message:

* a request or notification nobody claims goes to the next hop: its bytes are copied with
  only the id's bytes replaced by the destination's next integer id (a notification is
  copied verbatim); ``params`` are never decoded;
* a successor envelope from a proxy (``_proxy/successor`` or ``proxy/successor``) is
  unwrapped by scanning its ``params`` object's top-level members: the inner message is
  re-emitted as ``{"jsonrpc":"2.0","id":N,"method":M,"params":P}`` with the inner ``method``
  and ``params`` bytes as received; envelope members other than ``method``/``params``
  (``_meta``/``meta``: hop-local) are dropped, the inner ``params._meta`` is kept (it is
  inside ``P``). Toward a proxy from its successor side a message is wrapped the same way,
  in the spelling that proxy last used;
* a response whose id is pending on its hop goes back with the original id spliced in;
  responses are never wrapped; a response to an unknown id is dropped.

Python (the methods below) sees only what a handler claims: ``initialize`` and the proxy
initialize spellings (the raw ``protocolVersion`` is inspected), the agent's
``initialize`` answer (version check), ``$/cancel_request`` (re-issued per hop, never
forwarded), misplaced successor envelopes, envelopes outside the scanner's simple case
(escaped keys or inner method, repeated or invalid members: the full rules below answer
-32602), batches (kept as frames), malformed lines, and the rest of any chunk after such a
claim (so every hop's output keeps its order). It sees everything before the chain is ready,
after upstream EOF, and when tracing (``--trace`` decodes every message).

Validation of a verbatim pass-through: every line is fully validated before it is
forwarded -- UTF-8, JSON syntax (RFC 8259, strict numbers and escapes), nesting depth,
``max_line_size``, and the JSON-RPC envelope rules of the engine (``jsonrpc`` exactly
``"2.0"``, no duplicate envelope keys, method a string, id an int64/string/null, params an
object/array/null, a response with exactly one of result/error and a well-formed error
object); an invalid line is never forwarded (it is answered -32700/-32600 or, from a child
process, logged and ignored). Not validated: ``params``/``result`` against the ACP schema
(that is the endpoints' job), whether a method exists (unknown methods are forwarded; only
the chain's end answers -32601), and the session ids inside params.

Memory: each hop's output is taken and written once per read, and reading pauses while a
destination is write-paused (:meth:`Conductor._on_writable`); a hop's pending table holds
at most ``Forwarder.max_pending`` requests (65536): a request beyond that is answered
-32603 "too many requests in flight on <hop>" instead of being forwarded.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping, Sequence
from types import ModuleType, TracebackType
from typing import Any

from .. import engine as _default_engine
from ..errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, JsonRpcError
from ..protocol import negotiation as nego
from ..transport import Stream, memory_pair
from . import names
from .debug import DebugLog
from .spec import ComponentSpec, Started, describe, start_component, validate
from .trace import Tracer

__all__ = ["Conductor", "MODES"]

logger = logging.getLogger("acp_fast.conductor")

MODES = ("agent", "proxy")

EXPECTED_INITIALIZE = "expected `initialize` request"
EXPECTED_PROXY_INITIALIZE = "expected `_proxy/initialize` request"
ONLY_CONDUCTOR = "initialize/proxy requests are only sent by the conductor"
MISPLACED_SUCCESSOR = "successor envelopes are only accepted from proxies"
NO_AGENT = "no agent component in list"
BAD_ENVELOPE = "invalid successor envelope"
TOO_MANY = "too many requests in flight"

# hop states
_NEW, _STARTING, _READY, _FAILED, _DONE = range(5)


def _label(hop: _Hop) -> str:
    return "C" if hop.index < 0 else str(hop.index)


class _Hop:
    """One connection of the conductor: upstream or a component.

    Its framing, pending table, id counter, output buffer and successor spelling live in
    the conductor's :class:`~acp_fast.engine.Forwarder`, as hop ``fid`` there.
    """

    __slots__ = ("ended", "fid", "index", "name", "started", "stream", "writable")

    def __init__(self, index: int, name: str, stream: Stream | None) -> None:
        self.index = index  # -1 upstream, 0.. components
        self.fid = index + 1  # the Forwarder's hop number
        self.name = name
        self.stream = stream
        self.writable = True
        self.ended = False
        self.started: Started | None = None

    def __repr__(self) -> str:
        return f"<hop {self.name}>"


class Conductor:
    """A proxy chain: ``Conductor([proxy…, agent])`` (agent mode) or ``mode="proxy"``.

    Use it as an async context manager to get the upstream end of an in-memory pair (connect
    a client to it), or :meth:`serve` it on a stream (``acp-fast conductor`` serves stdio)::

        async with Conductor(["python -m my_proxy", Proxy.v2(), "acp-fast testy"]) as upstream:
            async with Client.v2().connect(upstream) as conn:
                await conn.initialize()

    Components are started lazily, on the first ``initialize`` (agent mode) or
    ``_proxy/initialize`` / ``proxy/initialize`` (proxy mode). The version is chosen from the
    raw ``protocolVersion`` (1 → v1, 2 → v2, more → 2) and pinned: the agent must answer it.

    Once the chain is ready, pass-through messages are routed by the engine's compiled
    ``Forwarder`` a whole read at a time (fresh id per hop, successor envelopes unwrapped
    and wrapped on raw bytes, responses mapped back, never wrapped). A forwarded line has
    been fully validated (UTF-8, strict JSON, nesting depth, line size, JSON-RPC envelope
    rules) but its ``params``/``result`` are not checked against the ACP schema, and
    unknown methods pass; see the module docstring for exactly which messages Python sees.

    Args:
        components: command specs (strings or argv lists) and in-process builders; in agent
            mode the last one is the agent.
        mode: ``"agent"`` (the conductor is an agent upstream) or ``"proxy"`` (it is a proxy:
            the last proxy's successor traffic goes to the parent, wrapped).
        proxy_methods: the spelling emitted before a component uses one
            (``"underscore"``: ``_proxy/*``, default; ``"spec"``: ``proxy/*``).
        trace: a path for JSONL trace events (see :mod:`acp_fast.conductor.trace`).
        debug_dir: a folder for a debug log of every component's stdin/stdout/stderr
            lines (see :mod:`acp_fast.conductor.debug`); ``None``: no log.
        env: environment variables added for every spawned component.
        engine: the engine module (tests pass a twin; default: the selected one).

    Attributes:
        exit_error: why the chain ended when a component exited (its name, exit status and
            stderr tail), else ``None``.

    A conductor serves one upstream connection, once.
    """

    def __init__(self, components: Sequence[ComponentSpec], *, mode: str = "agent",
                 proxy_methods: str = "underscore", trace: Any = None,
                 env: Mapping[str, str] | None = None, engine: ModuleType | None = None,
                 name: str = "conductor", debug_dir: Any = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if proxy_methods not in names.SPELLINGS:
            raise ValueError(f"proxy_methods must be one of {names.PROXY_METHODS}, not {proxy_methods!r}")
        self.specs = [validate(c) for c in components]
        self.mode = mode
        self.name = name
        self.proxy_methods = proxy_methods
        self._succ_name = names.SPELLINGS[proxy_methods][1]
        self._trace_path = trace
        self._env = dict(env or {})
        self._eng: Any = engine or _default_engine
        self._state = _NEW
        self._fail_error: JsonRpcError | None = None
        self._up: _Hop | None = None
        self._comps: list[_Hop] = []
        self._nproxies = 0
        self._version = 0
        n = len(self.specs)
        self._fw: Any = self._eng.Forwarder(max(n - 1, 0) if mode == "agent" else n,
                                            agent=mode == "agent", successor=self._succ_name)
        self._hops: list[_Hop | None] = [None] * self._fw.hops
        self._collect: dict[_Hop, list[bytes]] | None = None
        self._blocked = 0
        self._backlog: list[Any] = []
        self._env_decoder = self._eng.Decoder(lazy=True)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._start_task: asyncio.Task[None] | None = None
        self._done: asyncio.Future[None] | None = None
        self._tracer: Tracer | None = None
        self._debug_dir = debug_dir
        self.debug: DebugLog | None = None
        self._cm_task: asyncio.Task[None] | None = None
        self._cm_stream: Stream | None = None
        self._up_eof = False
        self.exit_error: str | None = None

    def __repr__(self) -> str:
        return f"Conductor({[describe(s) for s in self.specs]!r}, mode={self.mode!r})"

    @property
    def version(self) -> int:
        """The pinned protocol version (0 before initialization)."""
        return self._version

    # -- running -------------------------------------------------------------------------

    async def serve(self, upstream: Stream) -> None:
        """Serve the chain on ``upstream`` until it ends (upstream EOF or a component exit).

        Upstream EOF ends the chain at once: every component's input is closed, each child
        gets the transport's grace period to exit, then its process group is killed.
        """
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        if self._trace_path is not None:
            self._tracer = Tracer(self._trace_path)
        if self._debug_dir is not None:
            self.debug = DebugLog(self._debug_dir, [describe(s) for s in self.specs])
        up = _Hop(-1, "Client", upstream)
        self._up = up
        self._hops[0] = up
        self._attach(up)
        try:
            await self._done
        finally:
            await self._shutdown()

    async def __aenter__(self) -> Stream:
        near, far = memory_pair()
        self._cm_stream = near
        self._cm_task = asyncio.get_running_loop().create_task(self.serve(far))
        return near

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._cm_stream is not None:
            self._cm_stream.close()
        self._finish()  # leaving the block ends the chain now (no drain of pending requests)
        if self._cm_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._cm_task), 10)
            except asyncio.TimeoutError:  # pragma: no cover - a stuck component
                self._finish()
                await self._cm_task

    async def _shutdown(self) -> None:
        start = self._start_task
        if start is not None and not start.done():  # no component may appear after this
            start.cancel()
            await asyncio.gather(start, return_exceptions=True)
        self._flush()
        for hop in self._comps:
            if hop.stream is not None:
                hop.stream.close()
        if self._up is not None and self._up.stream is not None:
            self._up.stream.close()
        waits = [h.stream.wait_closed() for h in self._comps if h.stream is not None]
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)
        for hop in self._comps:
            task = hop.started.task if hop.started is not None else None
            if task is not None and not task.done():
                task.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._tracer is not None:
            self._tracer.close()
        if self.debug is not None:
            self.debug.close()

    def _finish(self) -> None:
        self._state = _DONE
        self._update_fast()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    def _spawn_task(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- stream callbacks ----------------------------------------------------------------

    def _attach(self, hop: _Hop) -> None:
        assert hop.stream is not None
        hop.stream.attach(lambda data: self._on_data(hop, data), lambda exc: self._on_eof(hop, exc),
                          lambda writable: self._on_writable(hop, writable))

    def _on_data(self, hop: _Hop, data: bytes) -> None:
        if self.debug is not None:
            self.debug.log(_label(hop), "←", data)
        frames = self._fw.feed(hop.fid, data)
        if frames:
            self._frames(hop, frames)
        self._flush()

    def _on_eof(self, hop: _Hop, exc: BaseException | None) -> None:
        if hop.ended or (hop is self._up and self._up_eof):
            return
        frames = self._fw.feed_eof(hop.fid)
        if frames:
            self._frames(hop, frames)
        if hop is self._up:
            self._upstream_ended()
        else:
            hop.ended = True
            self._fw.close(hop.fid)
            self._fw.set_fast(hop.fid, False)
            self._spawn_task(self._component_ended(hop))

    def _upstream_ended(self) -> None:
        """Upstream EOF: as a connection does after EOF, the requests sent upstream fail
        (-32603 "Incoming transport closed") and the chain ends once every request upstream
        sent has been answered (its output may still be read: ``… | acp-fast conductor``)."""
        self._up_eof = True
        self._update_fast()  # from now on every response may end the chain: Python sees them
        for src_fid, sid in self._fw.drain_pending(0):
            src = self._hops[src_fid]
            if src is not None and not src.ended:
                self._error(src, sid, JsonRpcError(INTERNAL_ERROR, "Incoming transport closed",
                                                   {"reason": "incoming_transport_closed"}))
        self._flush()
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self._up_eof and self._state != _STARTING and self._fw.owed(0) == 0:
            self._finish()

    def _update_fast(self) -> None:
        """The fast path (the Forwarder routes whole chunks) runs while the chain is ready,
        upstream has not ended and nothing is traced; otherwise every frame comes here."""
        on = self._state == _READY and self._tracer is None and not self._up_eof
        for hop in self._hops:
            if hop is not None:
                self._fw.set_fast(hop.fid, on and not hop.ended)

    def _on_writable(self, hop: _Hop, writable: bool) -> None:
        """Backpressure: while any hop's write buffer is over its high-water mark, stop
        reading from every *writable* hop (what they send could only pile up here).

        Strategy: a hop that is not reading our writes keeps being read. A component that
        stops reading its stdin usually does so because its own stdout is full; pausing it
        too would deadlock the pair, so reading it is what lets it drain.
        """
        if writable == hop.writable:
            return
        hop.writable = writable
        self._blocked += -1 if writable else 1
        blocked = self._blocked > 0
        for h in (self._up, *self._comps):
            if h is None or h.stream is None or h.ended:
                continue
            if blocked and h.writable:
                h.stream.pause_reading()
            elif self._state != _STARTING or h is not self._up:
                h.stream.resume_reading()

    # -- output --------------------------------------------------------------------------

    def _emit(self, hop: _Hop, line: bytes) -> None:
        collect = self._collect
        if collect is not None:
            collect.setdefault(hop, []).append(line)
        else:
            self._fw.write(hop.fid, line)

    def _flush(self) -> None:
        hops = self._hops
        for fid, data in self._fw.take_all():
            hop = hops[fid]
            if hop is not None and hop.stream is not None:
                if self.debug is not None:
                    self.debug.log(_label(hop), "→", data)
                hop.stream.write(data)

    def _error(self, hop: _Hop, rid: Any, error: JsonRpcError) -> None:
        if self._tracer is not None:
            self._tracer.response("Conductor", hop.name, rid, error.to_dict(), None)
        eng = self._eng
        if error.has_data:
            self._emit(hop, eng.encode_error(rid, error.code, error.message, error.data))
        else:
            self._emit(hop, eng.encode_error(rid, error.code, error.message))

    # -- frames --------------------------------------------------------------------------

    def _frames(self, hop: _Hop, frames: list[Any]) -> None:
        eng = self._eng
        REQUEST, NOTIFICATION, RESPONSE, BATCH = eng.REQUEST, eng.NOTIFICATION, eng.RESPONSE, eng.BATCH
        for i, frame in enumerate(frames):
            if self._state == _STARTING and hop is self._up:
                self._backlog.extend(frames[i:])
                return
            kind = frame.kind
            if kind == RESPONSE:
                self._response(hop, frame)
            elif kind == REQUEST or kind == NOTIFICATION:
                self._call(hop, frame)
            elif kind == BATCH:
                self._batch(hop, frame)
            else:
                self._malformed(hop, frame)

    def _malformed(self, hop: _Hop, frame: Any) -> None:
        if hop is not self._up and hop.started is not None and hop.started.is_child:
            logger.warning("%s: ignoring a line that is not JSON-RPC (%s)", hop.name, frame.reason)
            return
        reply = self._eng.error_reply(frame)
        if reply is not None:
            self._emit(hop, reply)

    def _batch(self, hop: _Hop, batch: Any) -> None:
        """Entries are routed one by one; what goes to one hop leaves as one batch frame."""
        eng = self._eng
        outer, self._collect = self._collect, {}
        try:
            for entry in batch.entries:
                kind = entry.kind
                if kind == eng.RESPONSE:
                    self._response(hop, entry)
                elif kind == eng.MALFORMED:
                    self._malformed(hop, entry)
                elif self._state != _READY and hop is self._up:
                    self._before_ready(hop, entry)
                else:
                    self._call(hop, entry)
            collected = self._collect
        finally:
            self._collect = outer
        for dst, lines in collected.items():  # a one-entry batch stays a batch (its answer is one)
            self._emit(dst, eng.encode_batch(lines))

    # -- calls ---------------------------------------------------------------------------

    def _call(self, hop: _Hop, msg: Any) -> None:
        if hop is self._up and self._state != _READY:
            self._before_ready(hop, msg)
            return
        method = msg.method
        is_request = msg.kind == self._eng.REQUEST
        if method in names.SUCCESSOR:
            self._from_envelope(hop, msg, is_request)
            return
        if method == names.CANCEL:
            self._cancel(hop, msg.params)
            return
        if method in names.PROXY_INITIALIZE:
            if hop is self._up and self.mode == "proxy":  # a repeated proxy initialize
                self._deliver(hop, msg, is_request, names.INITIALIZE, msg.params_raw, 0, False, None)
                return
            if is_request:
                self._error(hop, msg.id, JsonRpcError(INVALID_REQUEST, data=ONLY_CONDUCTOR))
            return
        # plain: from the predecessor side (upstream) goes right, from a component goes left
        if hop is self._up:
            self._deliver(hop, msg, is_request, method, None, 0, False, msg)
        else:
            self._deliver(hop, msg, is_request, method, None, hop.index - 1, True, msg)

    def _from_envelope(self, hop: _Hop, msg: Any, is_request: bool) -> None:
        agent_mode = self.mode == "agent"
        if (hop is self._up and agent_mode) or (agent_mode and hop.index == self._nproxies):
            if is_request:  # [SEED-004] misplaced successor envelope
                self._error(hop, msg.id, JsonRpcError(INVALID_REQUEST, data=MISPLACED_SUCCESSOR))
            return
        self._fw.set_successor(hop.fid, msg.method)  # answer it in the spelling it used
        inner = self._unwrap(msg)
        if inner is None:
            if is_request:
                self._error(hop, msg.id, JsonRpcError(INVALID_PARAMS, data=BAD_ENVELOPE))
            return
        method = inner.method
        if method == names.CANCEL:  # the wrapped form is accepted and treated the same
            self._cancel(hop, inner.params)
            return
        if method in names.PROXY_INITIALIZE:
            if is_request:
                self._error(hop, msg.id, JsonRpcError(INVALID_REQUEST, data=ONLY_CONDUCTOR))
            return
        if hop is self._up:  # proxy mode: from our successor, to the last proxy (wrapped)
            self._deliver(hop, msg, is_request, method, inner.params_raw, self._nproxies - 1, True, None)
        else:
            self._deliver(hop, msg, is_request, method, inner.params_raw, hop.index + 1, False, None)

    def _unwrap(self, msg: Any) -> Any:
        """The envelope's inner message as a lazy frame (its params stay raw), or None."""
        raw = msg.params_raw
        if raw is None or raw[:1] != b"{":
            return None
        body = bytes(raw[1:]).lstrip()
        if body[:1] == b"}":
            return None
        frames = self._env_decoder.feed(b'{"jsonrpc":"2.0",' + body + b"\n")
        if len(frames) != 1 or frames[0].kind != self._eng.NOTIFICATION:
            return None
        return frames[0]

    def _deliver(self, src: _Hop, msg: Any, is_request: bool, method: str, params_raw: Any,
                 pos: int, leftward: bool, verbatim: Any) -> None:
        """Send a call from ``src`` to chain position ``pos``.

        ``leftward``: travelling toward the client. Position -1 is upstream as predecessor;
        position ``nproxies`` is the agent (agent mode) or upstream as successor (proxy mode).
        ``verbatim``: the original message when only its id may change.
        """
        n = self._nproxies
        if pos < 0:
            dst, wrapped = self._up, False
        elif pos >= n and self.mode == "proxy":
            dst, wrapped = self._up, True
        else:
            dst = self._comps[pos]
            wrapped = leftward and pos < n  # a proxy hears from its successor wrapped
        assert dst is not None
        check = 0
        if method == names.INITIALIZE and not leftward:
            if not wrapped and pos < n:  # a proxy is initialized with the proxy method
                method = names.proxy_initialize_for(self._fw.successor(dst.fid))
                if verbatim is not None:  # renamed: the params bytes are kept, not the line
                    params_raw, verbatim = verbatim.params_raw, None
            elif pos >= n and not wrapped:
                check = self._version  # the agent must answer the pinned version
        if verbatim is not None and wrapped:
            params_raw = verbatim.params_raw
            verbatim = None
        eng = self._eng
        if is_request and self._fw.pending(dst.fid) >= self._fw.max_pending:
            # bounded memory: a hop that leaves this many requests unanswered gets no more
            self._error(src, msg.id, JsonRpcError(INTERNAL_ERROR, data=f"{TOO_MANY} on {dst.name}"))
            return
        succ = self._fw.successor(dst.fid)
        new = self._fw.add_pending(dst.fid, src.fid, msg.id, check) if is_request else None
        if self._tracer is not None:
            src_name = "Successor" if src is self._up and self.mode == "proxy" and leftward else src.name
            dst_name = "Successor" if dst is self._up and wrapped else dst.name
            self._tracer.call(src_name, dst_name, new, method,
                              params_raw if verbatim is None else verbatim.params_raw, is_request)
        if verbatim is not None:
            line = eng.forward(verbatim, id=new) if is_request else eng.forward(verbatim)
        elif wrapped:
            inner: dict[str, Any] = {"method": method}
            if params_raw is not None:
                inner["params"] = params_raw
            line = (eng.encode_request(new, succ, inner) if is_request
                    else eng.encode_notification(succ, inner))
        else:
            line = (eng.encode_request(new, method, params_raw) if is_request
                    else eng.encode_notification(method, params_raw))
        self._emit(dst, line)

    def _cancel(self, hop: _Hop, params: Any) -> None:
        """Hop-local ``$/cancel_request``: re-issued for the forwarded request, never forwarded."""
        if self._tracer is not None:
            self._tracer.call(hop.name, "Conductor", None, names.CANCEL, params, False)
        rid = params.get("requestId", ...) if type(params) is dict else ...
        if type(rid) not in (int, str, type(None)):
            return
        route = self._fw.find_pending(hop.fid, rid)
        if route is None:
            return
        dst_fid, out = route
        dst = self._hops[dst_fid]
        assert dst is not None
        if self._tracer is not None:
            self._tracer.call("Conductor", dst.name, None, names.CANCEL, {"requestId": out}, False)
        self._emit(dst, self._eng.encode_notification(names.CANCEL, {"requestId": out}))

    # -- responses -----------------------------------------------------------------------

    def _response(self, hop: _Hop, msg: Any) -> None:
        entry = self._fw.pop_pending(hop.fid, msg.id)
        if entry is None:
            logger.debug("%s: response to unknown id %r dropped", hop.name, msg.id)
            return
        src_fid, sid, check = entry
        src = self._hops[src_fid]
        if src is None or src.ended:
            return
        if self._tracer is not None:
            self._tracer.response(hop.name, src.name, msg.id, msg.error, msg.result_raw)
        if check and msg.error is None:
            try:
                nego.check_negotiated_version(msg.result, check)
            except JsonRpcError as exc:
                self._error(src, sid, exc)
                if self._up_eof and src is self._up:
                    self._maybe_finish()
                return
        self._emit(src, self._eng.forward(msg, id=sid))
        if self._up_eof and src is self._up:
            self._maybe_finish()

    # -- initialization ------------------------------------------------------------------

    def _before_ready(self, hop: _Hop, msg: Any) -> None:
        eng = self._eng
        is_request = msg.kind == eng.REQUEST
        if self._state == _NEW:
            expected = (msg.method == names.INITIALIZE if self.mode == "agent"
                        else msg.method in names.PROXY_INITIALIZE)
            if is_request and expected:
                self._initialize(hop, msg)
                return
            text = EXPECTED_INITIALIZE if self.mode == "agent" else EXPECTED_PROXY_INITIALIZE
            self._fail_error = JsonRpcError(INVALID_REQUEST, data=text)
            self._state = _FAILED
        if self._state == _STARTING:
            self._backlog.append(msg)
            return
        if self._state == _FAILED and is_request and self._fail_error is not None:
            self._error(hop, msg.id, self._fail_error)
        # notifications (and everything after the chain ended) are dropped

    def _initialize(self, up: _Hop, msg: Any) -> None:
        params = msg.params
        try:
            requested = nego.parse_protocol_version(params)
            if requested == 0:
                raise JsonRpcError(INVALID_REQUEST, data="unsupported ACP protocol version 0")
            if not self.specs:
                raise JsonRpcError(INTERNAL_ERROR, data=NO_AGENT)
        except JsonRpcError as exc:
            self._fail_error = exc
            self._state = _FAILED
            self._error(up, msg.id, exc)
            return
        self._version = 1 if requested == 1 else 2
        if self.mode == "proxy":
            self._fw.set_successor(up.fid, names.SPELLINGS[
                "spec" if msg.method == "proxy/initialize" else "underscore"][1])
        raw = msg.params_raw
        if requested != self._version:  # lowered: only protocolVersion is rewritten (§8.3.15)
            raw = self._eng.RawJson(self._eng.encode_value(dict(params, protocolVersion=self._version)))
        self._state = _STARTING
        up.stream.pause_reading()  # type: ignore[union-attr]
        self._start_task = asyncio.get_running_loop().create_task(self._start(up, msg, raw))

    async def _start(self, up: _Hop, msg: Any, params_raw: Any) -> None:
        try:
            n = len(self.specs)
            self._nproxies = n - 1 if self.mode == "agent" else n
            for i, spec in enumerate(self.specs):
                name = "Agent" if (self.mode == "agent" and i == n - 1) else f"Proxy({i})"
                hop = _Hop(i, name, None)
                self._comps.append(hop)
                self._hops[hop.fid] = hop
                on_stderr = None
                if self.debug is not None:
                    on_stderr = functools.partial(self.debug.log, str(i), "!")
                hop.started = await start_component(spec, env=self._env, engine=self._eng, on_stderr=on_stderr)
                hop.stream = hop.started.stream
                if self._state == _DONE:  # ended while starting: shutdown closes what started
                    return
        except Exception as exc:  # spawn failure: the chain fails to start
            logger.warning("conductor: the chain failed to start: %s", exc)
            self._fail_error = JsonRpcError(INTERNAL_ERROR, data=f"failed to start the chain: {exc}")
            self._state = _FAILED
            self._error(up, msg.id, self._fail_error)
            self._flush()
            self._finish()
            return
        for hop in self._comps:
            self._attach(hop)
        self._state = _READY
        self._deliver(up, msg, True, names.INITIALIZE, params_raw, 0, False, None)
        backlog, self._backlog = self._backlog, []
        if backlog:
            self._frames(up, backlog)
        self._flush()
        if self._blocked == 0 and up.stream is not None and not self._up_eof:
            up.stream.resume_reading()
        self._update_fast()
        self._maybe_finish()

    # -- component exit ------------------------------------------------------------------

    async def _component_ended(self, hop: _Hop) -> None:
        """A component closed its output: fail what it owes, then end the whole chain.

        Its pending requests fail with -32603 (data: which component, its exit status and
        stderr tail), and so does every request upstream still waits for elsewhere in the
        chain, since nothing will answer it once the chain is down. Never a restart.
        """
        status = ""
        tail = ""
        stream = hop.stream
        if hop.started is not None and hop.started.is_child and stream is not None:
            stream.close()  # bounded: waits for the exit, then kills the process group
            await stream.wait_closed()
            code = getattr(stream, "returncode", None)
            status = f" with status {code}" if code is not None else ""
            tail = bytes(getattr(stream, "stderr_tail", b"")).decode("utf-8", "replace")[-4096:]
        if self._state == _DONE:
            return
        text = f"{hop.name} exited{status}"
        self.exit_error = text + (f": {tail}" if tail else "")
        logger.warning("conductor: %s", self.exit_error)
        error = JsonRpcError(INTERNAL_ERROR, data=self.exit_error)
        for src_fid, sid in self._fw.drain_pending(hop.fid):
            src = self._hops[src_fid]
            if src is not None and not src.ended:
                self._error(src, sid, error)
        up = self._up  # the chain ends: whatever upstream still waits for fails the same way
        if up is not None and not up.ended:
            for sid in self._fw.drain_from(up.fid):
                self._error(up, sid, error)
        self._flush()
        self._finish()
