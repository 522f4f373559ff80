"""An agent host: runs one agent per fleet connection and moves its lines through the store.

A host registers with a number of slots and keeps its heartbeat key alive; fronts claim its
slots and create connections for it, which it learns of from its inbox
([`FleetStore.read_assigned`][acp_fast.fleet.FleetStore.read_assigned]). For each it opens an
agent with its *opener* (a child process from a command under the child-process policy,
`acp_fast.remote.gateway.command_opener`; or a builder, router or
`Conductor` in-process on a memory stream pair,
`acp_fast.remote.server.servable_opener`), then:

* client lines: one read for the whole host takes its inbox and the input queues of all its
  connections ([`read_inputs`][acp_fast.fleet.FleetStore.read_inputs]: one blocking read over
  many streams, not one per connection) and writes each entry's lines to its agent at once; a
  connection whose agent does not read leaves that read until it reads again (backpressure:
  its queue fills, and fronts hold their POSTs);
* agent lines: whatever the agent wrote while the previous append was in flight goes to the
  output stream as ONE entry (no round trip per message), each line with its route (the
  stream a front carries it on: the session it belongs to, the connection's stream, or the
  `initialize` reply, answered in the POST body); reading from the agent pauses while more
  than `HIGH_WATER` bytes wait, and while what its readers have not read (after the read
  mark, [`output_backlog`][acp_fast.fleet.FleetStore.output_backlog]) is over half the replay
  window, until it is down to a quarter (it waits for the readers' marks to move,
  [`wait_read`][acp_fast.fleet.FleetStore.wait_read], no polling): a reader that keeps
  reading never falls out of the window, and one that stops reading pauses the agent
  (nothing is dropped);
* the end: when the agent exits, the host appends what is left, marks the end of the output
  ([`end_output`][acp_fast.fleet.FleetStore.end_output]) and releases the slot (the record
  stays for readers until its TTL); when the client ends the connection (the end of its input,
  [`end_input`][acp_fast.fleet.FleetStore.end_input]) the host closes the agent, deletes the
  connection and releases the slot; when the connection expires, it closes the agent.

Routing follows the single-process server's rules: a call of the agent goes to its
`params.sessionId`'s stream; a response to the stream of its request's session once the agent
has named that session, else to the connection's stream.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import secrets
from collections.abc import Callable
from typing import Any, cast

from .. import _kinds
from .. import engine as _default_engine
from ..engine import Engine
from ..protocol.facts import INITIALIZE
from ..remote._wire import id_key, params_session
from ..remote.server import StreamOpener
from ..transport.stream import Stream
from .store import (
    INIT_ROUTE,
    STREAM_START,
    ConnectionEnded,
    Entry,
    FleetStore,
    StoreError,
    StoreUnavailable,
    UnknownConnection,
    request_json,
)

__all__ = ["HIGH_WATER", "AgentHost"]

logger = logging.getLogger("acp_fast.fleet")

#: Bytes of agent output waiting for the store above which the agent's stream is paused.
HIGH_WATER = 1024 * 1024
#: Seconds a blocking read of the store waits before it looks at the host's state again.
_POLL = 1.0
#: Seconds between retries while the store is unavailable.
_RETRY = 0.5
#: Rounds of the event loop a host lets run after handing input to its agents, before it
#: re-arms its blocking read (a write to Redis): an in-process agent's handling of the input
#: (a request's reply) runs first instead of behind that write; an agent in a child process
#: is already busy in its own process.
_SETTLE = 4
#: A host frees the input its agents took lazily, not in every read's round trip: when it
#: has taken this share of a queue's bounds (entries or bytes) since its last frees, when
#: its read brought nothing for `_FREE_IDLE` seconds, and on every quiet read. A front that
#: finds a queue full retries, so a free that lags by less than a sixteenth of it delays
#: nothing; and a round trip (the next request read within `_FREE_IDLE`) runs no script.
_FREE_SHARE = 16
#: Seconds a host that owes frees reads for more input before it frees (and reads on).
_FREE_IDLE = 0.005
_BATCHABLE = _kinds.BATCHABLE


class AgentHost:
    """An agent host of a fleet (see the module docstring).

    Args:
        store: the fleet store.
        opener: opens the agent of each new connection.
        slots: connections run at once at most.
        host_id: the host's id in the fleet (unguessable by default).
        ttl: seconds the host counts as alive without a heartbeat (fronts and readers treat
            it as dead after that).
        heartbeat: seconds between heartbeats (less than `ttl`).
        engine: the engine twin that decodes the lines it routes.

    Example:

    ```python
    host = AgentHost(RedisStore("redis://127.0.0.1:6379/0"), servable_opener(agent)[0], slots=8)
    await host.run()
    ```
    """

    def __init__(self, store: FleetStore, opener: StreamOpener, *, slots: int = 16, host_id: str | None = None,
                 ttl: float = 5.0, heartbeat: float | None = None, engine: Engine | None = None) -> None:
        if slots < 1 or ttl <= 0:
            raise ValueError("slots must be >= 1 and ttl positive")
        self.store = store
        self.opener = opener
        self.slots = slots
        self.host_id = host_id if host_id is not None else secrets.token_urlsafe(9)
        self.ttl = ttl
        self.heartbeat = heartbeat if heartbeat is not None else ttl / 3
        if not 0 < self.heartbeat < ttl:
            raise ValueError("heartbeat must be positive and less than ttl")
        self.engine: Engine = engine if engine is not None else cast(Engine, _default_engine)
        self._links: dict[str, _Link] = {}
        self._taken = 0
        self._beats: collections.Counter[str] = collections.Counter()
        self._tasks: set[asyncio.Task[None]] = set()
        self._registered = asyncio.Event()
        #: set when a connection's queue must join the host's read (its agent started, or reads again)
        self._poked: asyncio.Future[None] | None = None  # the read in flight's: done when poked

    @property
    def connections(self) -> int:
        """How many connections (agents) run now."""
        return len(self._links)

    @property
    def taken(self) -> int:
        """How many connections the host took since it started."""
        return self._taken

    @property
    def heartbeats(self) -> collections.Counter[str]:
        """Heartbeats by outcome: `sent`, `failed` (the store unavailable), `expired` (found
        expired: the host registered again)."""
        return self._beats

    async def wait_registered(self) -> None:
        """Wait until the host is registered and takes connections."""
        await self._registered.wait()

    async def run(self) -> None:
        """Register, then take connections until cancelled; ends every agent and unregisters."""
        beat = asyncio.ensure_future(self._beat())
        try:
            await self._take()
        finally:
            beat.cancel()
            await self.aclose()

    async def aclose(self) -> None:
        """End every agent and leave the registry (best effort when the store is unavailable)."""
        for link in list(self._links.values()):
            link.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)
        with contextlib.suppress(StoreError):
            await self.store.unregister_host(self.host_id)

    async def _register(self) -> None:
        while True:
            try:
                await self.store.register_host(self.host_id, self.slots, self.ttl)
            except StoreUnavailable as exc:
                logger.warning("host %s: cannot register: %s", self.host_id, exc)
                await asyncio.sleep(_RETRY)
                continue
            self._registered.set()
            return

    async def _beat(self) -> None:
        await self._registered.wait()
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                alive = await self.store.heartbeat(self.host_id, self.ttl)
            except StoreUnavailable as exc:
                self._beats["failed"] += 1
                logger.warning("host %s: heartbeat failed: %s", self.host_id, exc)
                continue
            self._beats["sent" if alive else "expired"] += 1
            if not alive:  # declared dead: its connections are lost; a new life starts
                logger.error("host %s: its heartbeat expired; ending %d connections and registering again",
                             self.host_id, len(self._links))
                for link in list(self._links.values()):
                    link.close()
                self._registered.clear()
                await self._register()

    async def _take(self) -> None:
        """The host's one reader: its inbox (new connections) and the input queues of all its
        connections whose agent reads, in one blocking read
        ([`read_inputs`][acp_fast.fleet.FleetStore.read_inputs]); a connection joins the read
        when its agent starts, and again when its agent reads again (the read in flight is
        dropped and made anew: `_poke`; the read is awaited through one future that the read's
        end and a poke both complete, not a wait on two tasks per read)."""
        await self._register()
        inbox = STREAM_START
        consumed: set[str] = set()  # the connections whose input taken is not freed yet
        taken = taken_bytes = 0  # ... how much of it
        limits = self.store.limits
        most, most_bytes = max(1, limits.input_entries // _FREE_SHARE), max(1, limits.input_bytes // _FREE_SHARE)
        idle = False  # the last read brought nothing
        while True:
            await self._registered.wait()
            after = {cid: link.after for cid, link in self._links.items() if link.reading()}
            quick = bool(consumed) and not idle and taken < most and taken_bytes < most_bytes
            read = asyncio.ensure_future(self.store.read_inputs(
                self.host_id, inbox, after, consumed=() if quick else consumed, block=_FREE_IDLE if quick else _POLL))
            ended = self._poked = asyncio.get_running_loop().create_future()
            read.add_done_callback(functools.partial(_finish, ended))
            try:
                await ended
            finally:
                self._poked = None
                if not read.done():
                    read.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StoreError):
                        await read
            if read.cancelled():
                continue  # poked: the set of queues changed
            try:
                got = read.result()
            except StoreUnavailable as exc:
                logger.warning("host %s: cannot read its inbox and input queues: %s", self.host_id, exc)
                await asyncio.sleep(_RETRY)
                continue
            if not self._registered.is_set():
                inbox = STREAM_START  # a new life: its inbox started again
                consumed = set()
                taken = taken_bytes = 0
                continue
            for cursor, cid in got.assigned:
                inbox = cursor
                self._taken += 1
                task = asyncio.ensure_future(self._serve(cid))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if not quick:  # the frees owed went with this read
                consumed = set()
                taken = taken_bytes = 0
            idle = not got.assigned and not got.entries  # the next read frees what is owed, and waits
            for cid, entries in got.entries.items():
                link = self._links.get(cid)
                if link is not None:
                    taken_bytes += link.feed(entries)
                    taken += len(entries)
                    consumed.add(cid)
            for cid, over in got.ended.items():
                link = self._links.get(cid)
                if link is not None:
                    link.input_ended(over)
            if not quick and not got.assigned and not got.entries:
                consumed = set(after)  # a quiet slice: each connection is checked (expired ones end)
            if got.assigned:
                await asyncio.sleep(0)  # the new agents that start at once join the next read
            if got.entries:
                # the re-armed read is a write to Redis: an agent in this process takes its
                # input first (its reply would wait for the write), in the loop's next rounds
                for _ in range(_SETTLE):
                    await asyncio.sleep(0)

    def _poke(self) -> None:
        """The set of queues to read changed: the read in flight is dropped and made anew."""
        poked = self._poked
        if poked is not None and not poked.done():
            poked.set_result(None)

    async def _serve(self, cid: str) -> None:
        """Run one connection's agent until it exits or the connection is gone."""
        try:
            stream = await self.opener()
        except Exception as exc:  # noqa: BLE001 - the agent could not start: the connection ends
            logger.error("host %s: connection %s: the agent did not start: %r", self.host_id, cid[:8], exc)
            with contextlib.suppress(StoreError):
                await self.store.end_output(cid, f"the agent of host {self.host_id} did not start")
                await self.store.release_slot(self.host_id)
            return
        link = self._links[cid] = _Link(self, cid, stream, self._poke)
        self._poke()  # the host's read takes its queue in
        try:
            await link.run()
        finally:
            self._links.pop(cid, None)
            link.close()
            with contextlib.suppress(StoreError):
                if link.ended_by_client:
                    await self.store.delete_connection(cid)
                await self.store.release_slot(self.host_id)


def _finish(future: asyncio.Future[None], _: object) -> None:
    """Complete `future` (once), as a done callback."""
    if not future.done():
        future.set_result(None)


class _Link:
    """One connection on a host: its agent's stream and the two pumps through the store."""

    def __init__(self, host: AgentHost, cid: str, stream: Stream, poke: Callable[[], None]) -> None:
        self.host = host
        #: called when the agent reads again: the host's read takes the queue in again
        self.poke = poke
        self.store = host.store
        self.cid = cid
        self.stream = stream
        self.decoder = host.engine.Decoder(lazy=True)
        self.inspect = host.engine.Decoder(lazy=True)
        self.lines: list[bytes] = []
        self.routes: list[str | None] = []
        self.unbatchable = 0  # lines waiting (in `lines`) that may not share a batch frame
        self.answered: list[str] = []  # the JSON ids of client requests answered since the last append
        self.pending = 0
        self.paused = False
        self.unchecked = (0, 0)  # entries and bytes appended since the readers' progress was looked at
        #: the streams (routes) written to, each with its last entry: whose readers the agent waits for
        self.unread: dict[str | None, str] = {}
        self.eof = False
        self.wake = asyncio.Event()
        self.writable = asyncio.Event()
        self.writable.set()
        # routing state: the session of each request in flight, the sessions the agent named
        self.requests: dict[tuple[bool, object], str | None] = {}
        self.sessions: set[str] = set()
        self.init_id: tuple[bool, object] | None = None
        self.init_seen = False
        self.sid_prefix: bytes | None = None  # the start of the last call whose session was read
        self.sid: str | None = None  # ... and that session
        #: the client ended the connection (the end of its input)
        self.ended_by_client = False
        #: the cursor of the last input entry handed to the agent
        self.after = STREAM_START
        stream.attach(self._on_data, self._on_eof, self._on_writable)

    def close(self) -> None:
        self.stream.close()

    async def run(self) -> None:
        await self._from_agent()

    def reading(self) -> bool:
        """Whether the host's read takes this connection's queue: its agent reads."""
        return not self.eof and self.writable.is_set()

    # agent -> store ----------------------------------------------------------------------

    def _on_writable(self, ok: bool) -> None:
        if ok:
            self.writable.set()
            self.poke()
        else:
            self.writable.clear()

    def _on_eof(self, exc: BaseException | None) -> None:
        self.eof = True
        self.writable.set()
        self.wake.set()

    def _on_data(self, data: bytes) -> None:
        size = 0
        for frame in self.decoder.feed(data):
            line = frame.raw
            if not line:  # over the size limit: never buffered
                logger.warning("connection %s: an agent line over %d bytes dropped", self.cid[:8],
                               self.decoder.max_line_size)
                continue
            self.lines.append(line)
            self.routes.append(self._route(frame, line))
            if not _BATCHABLE[frame.kind]:
                self.unbatchable += 1
            size += len(line)
        if size:
            self.pending += size
            self.wake.set()
            if not self.paused and self.pending > HIGH_WATER:
                self.paused = True
                self.stream.pause_reading()

    def _route(self, frame: Any, line: bytes) -> str | None:
        """The route of one agent line, `frame` decoded from `line` (see the module docstring)."""
        kind = frame.kind
        if kind == _kinds.RESPONSE:
            self.answered.append(request_json(frame.id))
            key = id_key(frame.id)
            if key == self.init_id:
                self.init_id = None
                return INIT_ROUTE
            route = self.requests.pop(key, None)
            if frame.error is None and b'"sessionId"' in line:
                result = frame.result
                if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
                    self.sessions.add(result["sessionId"])
            return route if route in self.sessions else None
        if kind in (_kinds.REQUEST, _kinds.NOTIFICATION):
            prefix = self.sid_prefix
            if prefix is not None and line.startswith(prefix) and line.count(b'"sessionId"') == 1:
                return self.sid  # the same start as the last call's (a turn's updates): that session
            if b'"sessionId"' not in line:
                return None
            sid, prefix = params_session(frame, line)  # from the bytes when it can (no decode)
            if isinstance(sid, str):
                self.sessions.add(sid)
                if prefix is not None:
                    self.sid_prefix, self.sid = prefix, sid
                return sid
        return None

    async def _from_agent(self) -> None:
        """Append what the agent wrote as one entry per round trip; the end when it exits."""
        store = self.store
        while True:
            if self.lines:
                # every line waiting is batchable (a part taken over the budget: also unknown)
                batchable = not self.unbatchable
                lines, routes, answered = self._take()
                if not self.lines:
                    self.unbatchable = 0
                try:
                    # no route at all (a connection without sessions): readers need none
                    routed = routes if routes.count(None) != len(routes) else None
                    cursor = await store.append_output(self.cid, lines, routed, answered, batchable=batchable)
                except UnknownConnection:
                    return  # deleted or expired: nobody reads it
                except StoreUnavailable as exc:
                    logger.error("connection %s: agent output lost, the store is unavailable: %s", self.cid[:8], exc)
                    return
                size = sum(map(len, lines))
                self.pending -= size
                self.unread.update((route, cursor) for route in routes if route != INIT_ROUTE)
                if self.paused and self.pending <= HIGH_WATER // 4:
                    self.paused = False
                    self.stream.resume_reading()
                entries, written = self.unchecked
                self.unchecked = (entries + 1, written + size)
                limits = store.limits
                if 4 * (entries + 1) >= limits.output_entries or 4 * (written + size) >= limits.output_bytes:
                    try:
                        await self._pace()
                    except UnknownConnection:
                        return
                    except StoreUnavailable as exc:
                        logger.error("connection %s: agent output lost, the store is unavailable: %s",
                                     self.cid[:8], exc)
                        return
                continue
            if self.eof:
                with contextlib.suppress(StoreError):
                    await store.end_output(self.cid, f"the agent exited (host {self.host.host_id})")
                return
            self.wake.clear()
            await self.wake.wait()

    def _take(self) -> tuple[list[bytes], list[str | None], list[str]]:
        """The lines of the next entry, their routes and the requests answered: all that wait,
        up to an eighth of the replay window's bytes (one line at least), so that pacing in
        quarters of the window holds."""
        budget = self.store.limits.output_bytes // 8
        size = 0
        n = 0
        for line in self.lines:
            size += len(line)
            if n and size > budget:
                break
            n += 1
        if n == len(self.lines):
            lines, routes, answered = self.lines, self.routes, self.answered
            self.lines, self.routes, self.answered = [], [], []
            return lines, routes, answered
        lines, routes = self.lines[:n], self.routes[:n]
        del self.lines[:n], self.routes[:n]
        return lines, routes, []  # the answers are named with the last part: in flight until it is written

    async def _pace(self) -> None:
        """Pause the agent while the readers' backlog is over half the replay window, until
        it is down to a quarter (see the module docstring)."""
        limits = self.store.limits
        entries, size = await self.store.output_backlog(self.cid, self.unread)
        if 2 * entries <= limits.output_entries and 2 * size <= limits.output_bytes:
            self.unchecked = (entries, size)
            return
        self.stream.pause_reading()
        notice = STREAM_START
        try:
            while 4 * entries > limits.output_entries or 4 * size > limits.output_bytes:
                if self.ended_by_client:
                    return
                notice = await self.store.wait_read(self.cid, notice, block=_POLL)  # a reader moved
                entries, size = await self.store.output_backlog(self.cid, self.unread)
        finally:
            if not self.paused:
                self.stream.resume_reading()
        self.unchecked = (entries, size)

    # store -> agent ----------------------------------------------------------------------

    def feed(self, entries: list[Entry]) -> int:
        """Hand input entries to the agent in order, each entry's lines in one write (an
        agent that stops reading leaves the host's read until it reads again); the bytes of
        line data handed over."""
        size = 0
        for entry in entries:
            for line in entry.lines:
                # a request whose line names no session (after initialize) is not noted: its
                # reply goes to the connection's stream, as the reply to an id not noted does
                if b'"method"' in line and b'"id"' in line and (not self.init_seen or b'"sessionId"' in line):
                    self._note_request(line)
            data = b"\n".join(entry.lines) + b"\n"
            self.stream.write(data)
            size += len(data) - len(entry.lines)
            self.after = entry.cursor
        return size

    def input_ended(self, exc: StoreError) -> None:
        """The input queue is over: the client ended the connection, or it is gone."""
        if isinstance(exc, ConnectionEnded):
            self.ended_by_client = True
        else:
            logger.info("connection %s: deleted or expired; its agent is closed", self.cid[:8])
        self.close()

    def _note_request(self, line: bytes) -> None:
        """Remember the session of a client request (its reply's route), and initialize's id.

        A request alone on its line has its session read from the bytes where it can (a
        prompt's params are not decoded); a batch's requests are decoded."""
        for frame in self.inspect.feed(line + b"\n"):
            alone = frame.kind != _kinds.BATCH
            for entry in ((frame,) if alone else frame):
                if entry.kind != _kinds.REQUEST:
                    continue
                if entry.method == INITIALIZE and not self.init_seen:  # the front's, first of all
                    self.init_seen = True
                    self.init_id = id_key(entry.id)
                    continue
                if alone:
                    sid = params_session(entry, line)[0]
                else:
                    params = entry.params
                    sid = params.get("sessionId") if isinstance(params, dict) else None
                self.requests[id_key(entry.id)] = sid if isinstance(sid, str) else None

