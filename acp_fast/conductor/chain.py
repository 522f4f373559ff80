"""The conductor: runs a proxy chain and routes every message on raw bytes (protocol.md §8).

Topology: upstream (the client, or a parent conductor in proxy mode) ↔ conductor ↔
{proxy 0 … proxy n-1, agent}. The conductor owns every transport; components never talk
to each other. Each connection (a *hop*) has its own id space: every request forwarded
onto a hop gets a fresh integer id there, and the hop's pending table maps it back to
(the hop it came from, the id it had there). There is no global id table.

Pass-through path: each hop's bytes go to the engine's [`Forwarder`][acp_fast.engine.Forwarder]
(`Forwarder.feed(hop, chunk)`), which in one call per read frames every complete line,
validates it, classifies it and appends what it forwards to the destination hop's output
buffer; the conductor writes each hop's buffer once per read. The pending tables (hop, new
id) → (source hop, original id) and the per-hop id counters live in the Forwarder too, so
the Python code below (the slow path) and the fast path share them. What the fast path does
per message:

* a request or notification nobody claims goes to the next hop: its bytes are copied with
  only the id's bytes replaced by the destination's next integer id (a notification is
  copied verbatim); `params` are never decoded;
* a successor envelope from a proxy (`_proxy/successor` or `proxy/successor`) is
  unwrapped by scanning its `params` object's top-level members: the inner message is
  re-emitted as `{"jsonrpc":"2.0","id":N,"method":M,"params":P}` with the inner `method`
  and `params` bytes as received; envelope members other than `method`/`params`
  (`_meta`/`meta`: hop-local) are dropped, the inner `params._meta` is kept (it is
  inside `P`). Toward a proxy from its successor side a message is wrapped the same way,
  in the spelling that proxy last used;
* a response whose id is pending on its hop goes back with the original id spliced in;
  responses are never wrapped; a response to an unknown id is dropped.

Python (the methods below) sees only what a handler claims: `initialize` and the proxy
initialize spellings (the raw `protocolVersion` is inspected), the agent's
`initialize` answer (version check), `$/cancel_request` (re-issued per hop, never
forwarded), misplaced successor envelopes, envelopes outside the scanner's simple case
(escaped keys or inner method, repeated or other members: read by the proxies' own reader,
`acp_fast.protocol.envelope`, which answers a malformed one -32602), batches (kept as frames), malformed lines, and the rest of any chunk after such a
claim (so every hop's output keeps its order). It sees everything before the chain is ready,
after upstream EOF, and when tracing (`--trace` decodes every message).

Validation of a verbatim pass-through: every line is fully validated before it is
forwarded -- UTF-8, JSON syntax (RFC 8259, strict numbers and escapes), nesting depth,
`max_line_size`, and the JSON-RPC envelope rules of the engine (`jsonrpc` exactly
`"2.0"`, no duplicate envelope keys, method a string, id an int64/string/null, params an
object/array/null, a response with exactly one of result/error and a well-formed error
object); an invalid line is never forwarded (it is answered -32700/-32600 or, from a child
process, logged and ignored). Not validated: `params`/`result` against the ACP schema
(that is the endpoints' job), whether a method exists (unknown methods are forwarded; only
the chain's end answers -32601), and the session ids inside params.

Initialization and the protocol version (`selection`): the chain is ready once
upstream's `initialize` is answered. Until then every component's lines are framed by a
decoder of its own and handled here (a component started again for a lower version replaces
its hop without inheriting a partial line), the `initialize` of each attempt is tracked
per hop, and upstream's calls are held (at most `BACKLOG_LIMIT`, then upstream is not
read) while its answers are routed at once. When the answer reaches upstream, the chain
switches to the Forwarder and the held calls go on, in order.

Memory: each hop's output is taken and written once per read, and reading pauses while a
destination is write-paused (`Conductor._on_writable`); a hop's pending table holds
at most `Forwarder.max_pending` requests (65536): a request beyond that is answered
-32603 "too many requests in flight on <hop>" instead of being forwarded.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from .. import engine as _default_engine
from ..errors import INTERNAL_ERROR, INVALID_REQUEST, JsonRpcError
from ..jsonrpc import cancel_target, error_line, invalid_line_reply
from ..jsontypes import Json, JsonObject
from ..protocol import negotiation as nego
from ..protocol.envelope import SuccessorEnvelope
from ..transport import Stream, memory_pair
from . import names
from .debug import DebugLog
from .selection import Selection, first_version, initialize_params, proxy_mode_version, same_initialize
from .spec import ComponentSpec, Started, describe, known_versions, start_component, validate
from .trace import Tracer, decoded
from ..protocol.profile import OLDEST, profile_of

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["Conductor", "MODES"]

logger = logging.getLogger("acp_fast.conductor")

MODES = ("agent", "proxy")

EXPECTED_INITIALIZE = "expected `initialize` request"
EXPECTED_PROXY_INITIALIZE = "expected `_proxy/initialize` request"
ONLY_CONDUCTOR = "initialize/proxy requests are only sent by the conductor"
MISPLACED_SUCCESSOR = "successor envelopes are only accepted from proxies"
NO_AGENT = "no agent component in list"
TOO_MANY = "too many requests in flight"
RESTARTED = "restarted while the chain selected its protocol version"

#: upstream calls held while the chain selects its version; past this, upstream is not read
BACKLOG_LIMIT = 256
#: seconds a component's exit waits for the agent's initialize answer to reach the client
ANSWER_GRACE = 5.0

# hop states
_NEW, _STARTING, _READY, _FAILED, _DONE = range(5)


def _label(hop: _Hop) -> str:
    return "C" if hop.index < 0 else str(hop.index)


def _answered_version(result: Json) -> Json:
    return result.get("protocolVersion") if type(result) is dict else None


def _code(error: Json) -> Json:
    return error.get("code") if type(error) is dict else error


class _Hop:
    """One connection of the conductor: upstream or a component.

    Its framing, pending table, id counter, output buffer and successor spelling live in
    the conductor's [`Forwarder`][acp_fast.engine.Forwarder], as hop `fid` there. While the
    chain selects its version a component's lines are framed by a `decoder` of its own
    instead, so that a component started again for another attempt takes hop `fid` over
    without the lines of the one it replaces; `tail` keeps the incomplete last line, which
    the Forwarder is given when the chain is ready (`Conductor._selected`).
    """

    __slots__ = ("decoder", "ended", "fid", "index", "name", "retired", "started", "stream", "tail", "writable")

    def __init__(self, index: int, name: str, stream: Stream | None) -> None:
        self.index = index  # -1 upstream, 0.. components
        self.fid = index + 1  # the Forwarder's hop number
        self.name = name
        self.stream = stream
        self.writable = True
        self.ended = False
        self.started: Started | None = None
        self.decoder: Any = None
        self.tail = bytearray()
        self.retired = False  # replaced by a restarted component: nothing it sends is read

    def keep_tail(self, data: bytes) -> None:
        """Remember the bytes after the last newline read: at most one byte over the decoder's
        line limit (the Forwarder then discards that line as its decoder did)."""
        limit = self.decoder.max_line_size + 1
        nl = data.rfind(b"\n")
        if nl >= 0:
            self.tail = bytearray(data[nl + 1:nl + 1 + limit])
        elif len(self.tail) < limit:
            self.tail += data[:limit - len(self.tail)]

    def __repr__(self) -> str:
        return f"<hop {self.name}>"


class Conductor:
    """A proxy chain: `Conductor([proxy…, agent])` (agent mode) or `mode="proxy"`.

    Use it as an async context manager to get the upstream end of an in-memory pair (connect
    a client to it), or [`serve`][acp_fast.conductor.chain.Conductor.serve] it on a stream (`acp-fast conductor` serves stdio):

    ```python
    async with Conductor(["python -m my_proxy", Proxy.v2(), "acp-fast testy"]) as upstream:
        async with Client.v2().connect(upstream) as conn:
            await conn.initialize()
    ```

    Components are started lazily, on the first `initialize` (agent mode) or
    `_proxy/initialize` / `proxy/initialize` (proxy mode). The chain speaks one protocol
    version end to end, pinned in every `initialize` it sends; the agent's answer is checked
    against it. Which one (`acp_fast.conductor.selection`): a request for 1 → 1; for 2 or
    more → 2, unless the agent answers a lower version (a v1-only agent) or a proxy refuses
    2, and then the highest version every component speaks, what the client would get from
    the agent directly (proxies are started again at it); `protocol_version` pins it
    instead. The selection is `negotiation` and a `negotiation` trace event. Client
    messages sent before the `initialize` answer wait for it.

    Once the chain is ready, pass-through messages are routed by the engine's compiled
    `Forwarder` a whole read at a time (fresh id per hop, successor envelopes unwrapped
    and wrapped on raw bytes, responses mapped back, never wrapped). A forwarded line has
    been fully validated (UTF-8, strict JSON, nesting depth, line size, JSON-RPC envelope
    rules) but its `params`/`result` are not checked against the ACP schema, and
    unknown methods pass; see the module docstring for exactly which messages Python sees.

    Args:
        components: command specs (strings or argv lists) and in-process builders; in agent
            mode the last one is the agent.
        mode: `"agent"` (the conductor is an agent upstream) or `"proxy"` (it is a proxy:
            the last proxy's successor traffic goes to the parent, wrapped).
        proxy_methods: the spelling emitted before a component uses one
            (`"underscore"`: `_proxy/*`, default; `"spec"`: `proxy/*`).
        trace: a path for JSONL trace events (see `acp_fast.conductor.trace`).
        debug_dir: a folder for a debug log of every component's stdin/stdout/stderr
            lines (see `acp_fast.conductor.debug`); `None`: no log.
        env: environment variables added for every spawned component.
        engine: the engine module (tests pass a twin; default: the selected one).
        protocol_version: `1` or `2`: the chain's version, without probing (a request
            below it is answered -32022, one above it lowered); `None` (default): selected
            from the request and the components' answers.

    Attributes:
        exit_error: why the chain ended when a component exited (its name, exit status and
            stderr tail), else `None`.
        negotiation: the version selection once made (see
            `acp_fast.conductor.selection.Selection.record`), else `None`.

    Raises:
        ValueError: an unknown `mode`, `proxy_methods` or `protocol_version`, or an
            unparsable command spec.

    A conductor serves one upstream connection, once.
    """

    def __init__(self, components: Sequence[ComponentSpec], *, mode: str = "agent",
                 proxy_methods: str = "underscore", trace: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None, engine: Engine | None = None,
                 name: str = "conductor", debug_dir: str | os.PathLike[str] | None = None,
                 protocol_version: int | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if proxy_methods not in names.SPELLINGS:
            raise ValueError(f"proxy_methods must be one of {names.PROXY_METHODS}, not {proxy_methods!r}")
        if protocol_version is not None and (type(protocol_version) is not int or protocol_version not in (1, 2)):
            raise ValueError(f"protocol_version must be 1, 2 or None, not {protocol_version!r}")
        self.specs = [validate(c) for c in components]
        self.mode = mode
        self.name = name
        self.proxy_methods = proxy_methods
        self._succ_name = names.SPELLINGS[proxy_methods][1]
        self._trace_path = trace
        self._env = dict(env or {})
        self._eng: Engine = engine if engine is not None else cast("Engine", _default_engine)
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
        #: reads the proxies' successor envelopes and writes the ones they get
        self._envelope = SuccessorEnvelope(self._eng)
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
        self._pin = protocol_version
        self._sel: Selection | None = None  # while the version is being selected
        self._init: Any = None  # the upstream initialize being answered
        self._retired: list[_Hop] = []
        self._selection_done: asyncio.Future[None] | None = None
        self.negotiation: JsonObject | None = None

    def __repr__(self) -> str:
        return f"Conductor({[describe(s) for s in self.specs]!r}, mode={self.mode!r})"

    @property
    def version(self) -> int:
        """The chain's protocol version (0 until its `initialize` is answered)."""
        return self._version

    @property
    def protocol_version(self) -> int | None:
        """The `protocol_version` option: the version the chain is pinned to, or `None`."""
        return self._pin

    # -- running -------------------------------------------------------------------------

    async def serve(self, upstream: Stream) -> None:
        """Serve the chain on `upstream` until it ends (upstream EOF or a component exit).

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
        hops = [*self._retired, *self._comps]
        for hop in hops:
            if hop.stream is not None:
                hop.stream.close()
        if self._up is not None and self._up.stream is not None:
            self._up.stream.close()
        waits = [h.stream.wait_closed() for h in hops if h.stream is not None]
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)
        for hop in hops:
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
        done = self._selection_done
        if done is not None and not done.done():
            done.set_result(None)
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
        if hop is not self._up and self._state == _STARTING:
            hop.decoder = self._eng.Decoder(lazy=True)  # until the chain is ready (see _Hop)
        hop.stream.attach(lambda data: self._on_data(hop, data), lambda exc: self._on_eof(hop, exc),
                          lambda writable: self._on_writable(hop, writable))

    def _on_data(self, hop: _Hop, data: bytes) -> None:
        if self.debug is not None:
            self.debug.log(_label(hop), "←", data)
        decoder = hop.decoder
        if decoder is None:
            frames = self._fw.feed(hop.fid, data)
        else:  # selecting the version (a retired component's frames are dropped by _frames)
            frames = decoder.feed(data)
            hop.keep_tail(data)
        if frames:
            self._frames(hop, frames)
        self._flush()

    def _on_eof(self, hop: _Hop, exc: BaseException | None) -> None:
        if hop.ended or (hop is self._up and self._up_eof):
            return
        frames = self._fw.feed_eof(hop.fid) if hop.decoder is None else hop.decoder.feed_eof()
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
        sent has been answered (its output may still be read: `… | acp-fast conductor`)."""
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
        if writable == hop.writable or hop.retired:
            return
        hop.writable = writable
        self._blocked += -1 if writable else 1
        blocked = self._blocked > 0
        for h in (self._up, *self._comps):
            if h is None or h.stream is None or h.ended:
                continue
            if blocked and h.writable:
                h.stream.pause_reading()
            elif h is not self._up or self._up_may_read():
                h.stream.resume_reading()

    def _up_may_read(self) -> bool:
        """False while the chain is selecting its version and the upstream calls held until
        then reached `BACKLOG_LIMIT` (before that, upstream is read: answers to what
        components ask during `initialize` are routed at once)."""
        return self._state != _STARTING or len(self._backlog) < BACKLOG_LIMIT

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
        self._emit(hop, error_line(self._eng.encode_error, rid, error))

    # -- frames --------------------------------------------------------------------------

    def _frames(self, hop: _Hop, frames: list[Any]) -> None:
        eng = self._eng
        REQUEST, NOTIFICATION, RESPONSE, BATCH = eng.REQUEST, eng.NOTIFICATION, eng.RESPONSE, eng.BATCH
        for frame in frames:
            if hop.retired:  # restarted by a frame before this one
                return
            kind = frame.kind
            if self._state == _STARTING and hop is self._up and kind != RESPONSE:
                self._hold(frame)
            elif kind == RESPONSE:
                self._response(hop, frame)
            elif kind == REQUEST or kind == NOTIFICATION:
                self._call(hop, frame)
            elif kind == BATCH:
                self._batch(hop, frame)
            else:
                self._malformed(hop, frame)

    def _hold(self, frame: Any) -> None:
        """Keep an upstream call until the chain has selected its version (see `_selected`)."""
        self._backlog.append(frame)
        up = self._up
        if len(self._backlog) >= BACKLOG_LIMIT and up is not None and up.stream is not None:
            up.stream.pause_reading()

    def _malformed(self, hop: _Hop, frame: Any) -> None:
        # a child component's stdout may carry other lines: skipped, never answered
        skip = hop is not self._up and hop.started is not None and hop.started.is_child
        reply = invalid_line_reply(self._eng.error_reply, frame, skip=skip)
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
        try:
            inner = self._envelope.unwrap(msg)
        except JsonRpcError as exc:  # a malformed envelope: -32602
            if is_request:
                self._error(hop, msg.id, exc)
            return
        method = inner.method
        assert method is not None  # a request or a notification
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

    def _deliver(self, src: _Hop, msg: Any, is_request: bool, method: str, params_raw: Any,
                 pos: int, leftward: bool, verbatim: Any) -> None:
        """Send a call from `src` to chain position `pos`.

        `leftward`: travelling toward the client. Position -1 is upstream as predecessor;
        position `nproxies` is the agent (agent mode) or upstream as successor (proxy mode).
        `verbatim`: the original message when only its id may change.
        """
        n = self._nproxies
        sel = self._sel
        init = is_request and method == names.INITIALIZE and not leftward
        if init and sel is not None and sel.cached is not None and self.mode == "agent" and pos >= n:
            self._reuse_agent(src, msg, params_raw if verbatim is None else verbatim.params_raw)
            return
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
            elif pos >= n and not wrapped:  # the agent must answer the chain's version
                check = self._version if sel is None else sel.version
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
        if init and sel is not None and new is not None:
            self._sent_initialize(src, dst, pos, new, params_raw if verbatim is None else verbatim.params_raw)
        if self._tracer is not None:
            src_name = "Successor" if src is self._up and self.mode == "proxy" and leftward else src.name
            dst_name = "Successor" if dst is self._up and wrapped else dst.name
            self._tracer.call(src_name, dst_name, new, method,
                              params_raw if verbatim is None else verbatim.params_raw, is_request)
        if verbatim is not None:
            line = eng.forward(verbatim, id=new) if is_request else eng.forward(verbatim)
        elif wrapped:
            envelope = self._envelope.wrap(method, params_raw)
            line = (eng.encode_request(new, succ, envelope) if is_request
                    else eng.encode_notification(succ, envelope))
        else:
            line = (eng.encode_request(new, method, params_raw) if is_request
                    else eng.encode_notification(method, params_raw))
        self._emit(dst, line)

    def _cancel(self, hop: _Hop, params: Any) -> None:
        """Hop-local `$/cancel_request`: re-issued for the forwarded request, never forwarded."""
        if self._tracer is not None:
            self._tracer.call(hop.name, "Conductor", None, names.CANCEL, params, False)
        ok, rid = cancel_target(params)
        if not ok:
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
        sel = self._sel
        if sel is not None:
            pos = sel.inits.pop((hop.fid, msg.id), None)
            if pos is not None:
                self._init_answered(pos, src, sid, msg)
                return
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
            self._hold(msg)
            return
        if self._state == _FAILED and is_request and self._fail_error is not None:
            self._error(hop, msg.id, self._fail_error)
        # notifications (and everything after the chain ended) are dropped

    def _initialize(self, up: _Hop, msg: Any) -> None:
        params = msg.params
        agent_mode = self.mode == "agent"
        try:
            requested = nego.parse_protocol_version(params)
            if requested == 0:
                raise JsonRpcError(INVALID_REQUEST, data="unsupported ACP protocol version 0")
            if not self.specs:
                raise JsonRpcError(INTERNAL_ERROR, data=NO_AGENT)
            version = (first_version(requested, self._pin) if agent_mode
                       else proxy_mode_version(requested, self._pin))
        except JsonRpcError as exc:
            self._fail_error = exc
            self._state = _FAILED
            self._error(up, msg.id, exc)
            return
        n = len(self.specs)
        self._nproxies = n - 1 if agent_mode else n
        self._sel = Selection(requested, version, probing=agent_mode and self._pin is None, pinned=self._pin,
                              components=[(self._component_name(i), describe(spec), known_versions(spec))
                                          for i, spec in enumerate(self.specs)])
        self._init = msg
        self._selection_done = asyncio.get_running_loop().create_future()
        if not agent_mode:
            self._fw.set_successor(up.fid, names.SPELLINGS[
                "spec" if msg.method == names.PROXY_INITIALIZE_SPEC else "underscore"][1])
        self._state = _STARTING
        self._start_task = asyncio.get_running_loop().create_task(self._start())

    def _component_name(self, i: int) -> str:
        return "Agent" if (self.mode == "agent" and i == len(self.specs) - 1) else f"Proxy({i})"

    async def _spawn(self, i: int) -> _Hop:
        """Start component `i` as hop `i + 1` (again, when it is restarted)."""
        hop = _Hop(i, self._component_name(i), None)
        if i < len(self._comps):
            self._comps[i] = hop
        else:
            self._comps.append(hop)
        self._hops[hop.fid] = hop
        on_stderr = None
        if self.debug is not None:
            on_stderr = functools.partial(self.debug.log, str(i), "!")
        hop.started = await start_component(self.specs[i], env=self._env, engine=self._eng, on_stderr=on_stderr)
        hop.stream = hop.started.stream
        if self._sel is not None:
            self._sel.started(i)
        return hop

    async def _start(self) -> None:
        await self._restart(list(range(len(self.specs))), self._send_initialize)

    async def _restart(self, positions: list[int], then: Callable[[], None]) -> None:
        """Start the components at `positions`, attach them, then call `then` (which sends
        the `initialize` they are waiting for)."""
        try:
            for i in positions:
                await self._spawn(i)
                if self._state == _DONE:  # ended while starting: shutdown closes what started
                    return
        except Exception as exc:  # spawn failure: the chain fails to start
            logger.warning("conductor: the chain failed to start: %s", exc)
            error = JsonRpcError(INTERNAL_ERROR, data=f"failed to start the chain: {exc}")
            self._fail_selection(error)
            return
        for i in positions:
            self._attach(self._comps[i])
        then()
        self._flush()

    # -- version selection (selection.py) ----------------------------------------------

    def _send_initialize(self) -> None:
        """An attempt: the upstream `initialize` at the selection's version, to position 0."""
        sel, msg, up = self._sel, self._init, self._up
        assert sel is not None and up is not None
        sel.begin()
        params = initialize_params(msg.params, sel.requested, sel.version)
        raw = msg.params_raw if params is None else self._eng.RawJson(self._eng.encode_value(params))
        self._deliver(up, msg, True, names.INITIALIZE, raw, 0, False, None)

    def _sent_initialize(self, src: _Hop, dst: _Hop, pos: int, new: int, params_raw: Any) -> None:
        """Bookkeeping of an attempt's `initialize` sent to position `pos` as `new`."""
        sel = self._sel
        assert sel is not None
        sel.inits[(dst.fid, new)] = pos
        sel.reached = max(sel.reached, pos)
        if src is not self._up:  # a proxy sent it on: it took the version
            sel.note(src.index, "accepted")
        if self.mode == "agent" and pos == self._nproxies:
            sel.agent_params = decoded(params_raw)

    def _init_answered(self, pos: int, src: _Hop, sid: Any, msg: Any) -> None:
        """The answer of position `pos` to the attempt's `initialize` (see selection.py)."""
        sel = self._sel
        assert sel is not None
        n = self._nproxies
        agent = n if self.mode == "agent" else None
        if pos == agent:
            sel.agent_answered = True
            if not self._agent_answer(msg):
                return
        elif pos < n:
            if msg.error is not None:
                if sel.reached == pos:  # refused before initializing its successor
                    sel.rejected(pos, msg.error)
                    lower = profile_of(sel.version).lower
                    if sel.probing and lower is not None:
                        self._lower(list(range(pos + 1)), lower)
                    else:
                        self._fail_selection(sel.cannot_speak(pos, agent, msg.error))
                    return
            else:
                answered = _answered_version(msg.result)
                if answered != sel.version:
                    self._fail_selection(sel.answered_other(pos, agent, answered))
                    return
                sel.note(pos, "accepted")
        if src is self._up:
            self._selected(msg, sid)
        else:
            self._emit(src, self._eng.forward(msg, id=sid))

    def _agent_answer(self, msg: Any) -> bool:
        """Check the agent's answer; False when it is not passed on (lowered, or failed)."""
        sel = self._sel
        assert sel is not None
        n = self._nproxies
        if msg.error is not None:  # its own answer, as it would be directly: never a reason to go lower
            sel.note(n, f"error {_code(msg.error)}")
            sel.agent_error = True
            return True
        result = msg.result
        answered = _answered_version(result)
        sel.note(n, f"answered {answered}")
        lower = sel.probing and type(answered) is int and OLDEST.version <= answered < sel.version
        try:
            nego.check_negotiated_version(result, answered if lower else sel.version)
        except JsonRpcError as exc:
            self._fail_selection(sel.answered_other(n, n, answered, exc))
            return False
        if not lower:
            return True
        assert type(answered) is int
        if n == 0:  # the chain is the agent: its answer is the chain's
            sel.version = answered
            return True
        sel.cached = msg  # the agent is kept; the proxies start again at its version
        self._lower(list(range(n)), answered)
        return False

    def _lower(self, positions: list[int], version: int) -> None:
        """Restart the components at `positions` and try again at `version`."""
        sel = self._sel
        assert sel is not None
        logger.info("conductor: trying ACP protocol version %d (%s)", version, sel.summary())
        sel.version = version
        self._retire([self._comps[p] for p in positions])
        self._start_task = asyncio.get_running_loop().create_task(self._restart(positions, self._send_initialize))

    def _retire(self, hops: list[_Hop]) -> None:
        """Stop reading `hops` and forget their requests in flight; they are closed (and
        replaced by `_spawn`)."""
        for hop in hops:
            if not hop.writable:
                self._on_writable(hop, True)
            hop.retired = hop.ended = True
        for hop in hops:
            for src_fid, sid in self._fw.drain_pending(hop.fid):
                src = self._hops[src_fid]
                if src_fid == 0 or src is None or src.ended:
                    continue  # upstream's initialize is sent again
                self._error(src, sid, JsonRpcError(INTERNAL_ERROR, data=f"{hop.name} {RESTARTED}"))
            self._fw.drain_from(hop.fid)
            self._fw.set_successor(hop.fid, self._succ_name)  # its successor starts afresh
            self._retired.append(hop)
            if hop.stream is not None:
                hop.stream.close()

    def _reuse_agent(self, src: _Hop, msg: Any, params_raw: Any) -> None:
        """The restarted last proxy's `initialize` for the kept agent: answered with the
        agent's own answer when it is the request the agent already answered (lowered);
        otherwise the agent starts again and gets it."""
        sel = self._sel
        assert sel is not None
        n = self._nproxies
        frame, sel.cached = sel.cached, None
        if src is not self._up:  # the last proxy sent it on: it took the version
            sel.note(src.index, "accepted")
        if same_initialize(sel.agent_params, decoded(params_raw)):
            sel.note(n, "reused")
            sel.reached = n
            sel.agent_answered = True
            if self._tracer is not None:
                self._tracer.call(src.name, "Conductor", msg.id, names.INITIALIZE, params_raw, True)
                self._tracer.response("Conductor", src.name, msg.id, None, frame.result_raw)
            self._emit(src, self._eng.forward(frame, id=msg.id))
            return
        logger.info("conductor: the agent starts again: its initialize params differ at version %d", sel.version)
        self._retire([self._comps[n]])
        self._start_task = asyncio.get_running_loop().create_task(self._restart(
            [n], lambda: self._deliver(src, msg, True, names.INITIALIZE, params_raw, n, False, None)))

    def _selected(self, msg: Any, sid: Any) -> None:
        """The answer to upstream's `initialize`: the chain speaks the selected version from
        now on, routed by the Forwarder; the calls held until now go on."""
        sel, up = self._sel, self._up
        assert sel is not None and up is not None
        if self._state != _STARTING:  # the chain is ending: it does not become ready
            return
        sel.finish("selected" if msg.error is None else "agent error" if sel.agent_error else "error")
        self._version = sel.version
        self._publish(sel)
        self._emit(up, self._eng.forward(msg, id=sid))
        for hop in self._comps:
            self._adopt(hop)
        self._state = _READY
        backlog, self._backlog = self._backlog, []
        if backlog:
            self._frames(up, backlog)
        if self._blocked == 0 and up.stream is not None and not self._up_eof:
            up.stream.resume_reading()
        self._update_fast()
        self._maybe_finish()

    def _adopt(self, hop: _Hop) -> None:
        """Hand `hop`'s framing over to the Forwarder (with the incomplete line read so far)."""
        if hop.decoder is None:
            return
        tail, hop.decoder, hop.tail = hop.tail, None, bytearray()
        if tail:
            frames = self._fw.feed(hop.fid, bytes(tail))
            if frames:
                self._frames(hop, frames)

    def _fail_selection(self, error: JsonRpcError) -> None:
        """No chain: upstream's `initialize` is answered `error` and the chain ends."""
        sel = self._sel
        if sel is not None:
            sel.finish("failed", error)
            self._publish(sel)
        self._fail_error = error
        self._state = _FAILED
        if self._up is not None and self._init is not None:
            self._error(self._up, self._init.id, error)
        self._flush()
        self._finish()

    def _publish(self, sel: Selection) -> None:
        """The selection is made: `negotiation`, the trace event, a log line."""
        self._sel = None
        self.negotiation = sel.record()
        if self._tracer is not None:
            self._tracer.negotiation(self.negotiation)
        summary = sel.summary()
        logger.info("conductor: %s", summary)
        if self.debug is not None:
            self.debug.log("C", "!", summary.encode())
        done = self._selection_done
        if done is not None and not done.done():
            done.set_result(None)

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
        sel, done = self._sel, self._selection_done
        if sel is not None and sel.agent_answered and done is not None:
            # the agent's answer to initialize (an agent that rejects a version and closes)
            # is on its way back through the proxies: let it reach the client first
            try:
                await asyncio.wait_for(asyncio.shield(done), ANSWER_GRACE)
            except asyncio.TimeoutError:
                pass
        if self._state == _DONE:
            return
        text = f"{hop.name} exited{status}"
        self.exit_error = text + (f": {tail}" if tail else "")
        logger.warning("conductor: %s", self.exit_error)
        error = JsonRpcError(INTERNAL_ERROR, data=self.exit_error)
        if self._sel is not None:  # upstream's initialize fails below
            self._sel.finish("failed", error)
            self._publish(self._sel)
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
