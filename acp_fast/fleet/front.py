"""A front of the fleet: an ASGI app that serves ACP connections it keeps no state of.

Every request of a connection may land on any front: everything a connection has is in the
store ([`FleetStore`][acp_fast.fleet.FleetStore]) and its agent runs on an agent host
([`AgentHost`][acp_fast.fleet.host.AgentHost]). The wire is the single-process server's
([`AcpApp`][acp_fast.remote.AcpApp]), behind the same access rules
([`AccessGuard`][acp_fast.remote.policy.AccessGuard] of a
[`ServerPolicy`][acp_fast.remote.ServerPolicy]):

* `POST` `initialize` (no `Acp-Connection-Id`): claims a slot on a live host with free slots,
  creates the connection, queues the line for its agent and answers 200 with the agent's
  reply and the new `Acp-Connection-Id`; 503 with a clear body when every host is full, none
  is alive, or the store is unreachable;
* a later `POST`: checked and rewritten as the single-process server does (its session
  header), queued on the connection's input queue, 202; a full queue holds the POST until
  there is room (backpressure) and answers 503 after `push_timeout`, never a silent drop;
* `GET` SSE: the connection's output stream from `Last-Event-ID` (entry ids are the cursors;
  409 outside the replay window), the lines the host routed to this stream (the connection's,
  or the `Acp-Session-Id` session's); the response ends when the connection ends;
* `DELETE`: marks the end of the output (readers on every front end) and of the input (its
  host closes the agent, deletes the connection and frees the slot);
* WebSocket: a connection for the socket's lifetime, bridged both ways through the store;
  with acp_fast's resume header (`acp_fast.remote.client.RESUME_HEADER`,
  sent by the acp_fast client given `failover` endpoints) the socket is resumable: each
  entry's frames are followed by a binary frame holding its cursor, a socket that drops
  without a close frame leaves the connection open (until its TTL), and an upgrade naming
  the connection, a cursor and the frames received after it goes on from there on any front
  (404 unknown, 409 outside the replay window).

A reader (an SSE stream, a WebSocket) that waits restarts the connection's TTL and looks at
its host every `host_check` seconds: once the host's heartbeat has expired, every client request in flight gets an
error response naming the host, and the connection ends
([`end_output`][acp_fast.fleet.FleetStore.end_output] with `fail_pending`).

Every SSE event has its own cursor: the last line of an entry that goes on a stream carries
the entry id (`"<n>-0"`), a line before it `"<n>-0.<k>"` (the `k`-th line of that entry on
that stream, from 0), so a reader that drops inside an entry resumes after exactly the line
it saw last.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Mapping
from typing import Any, cast

from .. import _kinds
from .. import engine as _default_engine
from ..engine import Engine, encode_error
from ..errors import INTERNAL_ERROR
from ..remote._asgi import Endpoint, Receive, Scope, Send, WsLines, deny, error_body, respond
from ..remote._outlet import grouped
from ..remote._wire import (
    BATCH_FRAMES_HEADER,
    CONNECTION_ID_HEADER,
    CONTENT_TYPE_SSE,
    DEFAULT_PATH,
)
from ..remote.client import RESUME_HEADER
from ..remote.metrics import ServerMetrics
from ..remote.policy import AccessGuard, ServerPolicy
from ..remote._requests import SSE_HEAD, checked_post, disconnected, initialize_frame, post_line
from .store import (
    ALL_STREAMS,
    INIT_ROUTE,
    STREAM_START,
    ConnectionEnded,
    CursorOutOfWindow,
    Entry,
    FleetStore,
    InputQueueFull,
    StoreError,
    StoreUnavailable,
    UnknownConnection,
    ascii_number,
    cursor_number,
    request_json,
)

__all__ = ["FleetFront", "NoFreeSlot"]

logger = logging.getLogger("acp_fast.fleet")


_CID = CONNECTION_ID_HEADER.lower().encode()
_BATCHES = BATCH_FRAMES_HEADER.lower().encode()
_RESUME = RESUME_HEADER.lower().encode()
#: Seconds between retries of a push into a full input queue.
_PUSH_RETRY = 0.01
#: Bytes of lines one read of a connection's output aims at: a reader's entry count adapts
#: to it (`_next_count`), so that a backlog of megabytes (a stream resumed on this front) is
#: read and sent in parts, its first lines at once, not after one read of all of it.
READ_BYTES = 1 << 20
#: The entry count of a reader's first read (it adapts from there).
FIRST_COUNT = 4
#: A reader moves its read mark lazily, not with every read: when it has read this share of
#: the replay window (entries or bytes) since the mark last moved, when nothing came for
#: `MARK_IDLE` seconds, and when it leaves. A host paces its agent in quarters and halves of
#: the window, which a mark behind by less than a sixteenth never mistakes for a backlog;
#: and a round trip (its reply read within `MARK_IDLE`) costs no script of its own.
MARK_SHARE = 16
#: Seconds a reader that owes its mark waits for more before it moves the mark (and waits on).
MARK_IDLE = 0.005


class NoFreeSlot(Exception):
    """No live host has a free slot (or none is alive): a new connection gets 503."""


class FleetFront(Endpoint):
    """A front of the fleet, as an ASGI 3 application (see the module docstring).

    Args:
        store: the fleet store.
        path: the endpoint path (`/acp`); `/health` answers beside it.
        policy: limits and access rules (the single-process server's). `max_connections`
            bounds the connections of the whole fleet (the live hosts' taken slots; the next
            gets 503); the idle timeout is the store's `limits.connection_ttl` (`acp-fast
            serve --redis --idle-timeout` sets both): a connection with no request and no
            reader for that long expires, and its host closes its agent and frees the slot.
        engine: the engine twin that decodes POST bodies.
        init_timeout: seconds an `initialize` POST waits for the agent's reply.
        push_timeout: seconds a POST or a WebSocket frame waits for room in a full input
            queue before it is refused (503; the socket closes with 1013).
        host_check: seconds between looks at a waiting connection's host.
        resume_grace: seconds a connection lives after its resumable WebSocket dropped
            without a close frame, unless a reader resumes it (or a client's request comes)
            first; never longer than the idle timeout. A client that never comes back frees
            its agent's slot this soon, not after the whole idle timeout.
        metrics: counts the connections this front opens and its refusals (HTTP error
            statuses, a WebSocket closed 1009 as 413): see `acp_fast.remote.metrics`.
    """

    def __init__(self, store: FleetStore, *, path: str = DEFAULT_PATH, policy: ServerPolicy | None = None,
                 engine: Engine | None = None, init_timeout: float = 30.0,
                 push_timeout: float = 30.0, host_check: float = 1.0, resume_grace: float = 30.0,
                 metrics: ServerMetrics | None = None) -> None:
        if not path.startswith("/"):
            raise ValueError(f"path must start with '/': {path!r}")
        if resume_grace <= 0:
            raise ValueError(f"resume_grace must be positive: {resume_grace!r}")
        self.store = store
        self.path = path.rstrip("/") or "/"
        self.policy = policy if policy is not None else ServerPolicy()
        self.engine: Engine = engine if engine is not None else cast(Engine, _default_engine)
        self.init_timeout = init_timeout
        self.push_timeout = push_timeout
        self.host_check = host_check
        self.resume_grace = resume_grace
        self.metrics = metrics
        self._guarded = AccessGuard(self.dispatch, self.policy, paths=(self.path,))
        #: the reads of connections' output in flight, shared by the readers on this front
        #: that wait at the same place (see `SharedReads`)
        self.reads = SharedReads(store)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._guarded(scope, receive, send if self.metrics is None else _refusals(send, self.metrics))

    async def http(self, method: str, headers: Mapping[bytes, bytes], receive: Receive, send: Send) -> None:
        try:
            if method == "POST":
                await self._post(headers, receive, send)
            elif method == "GET":
                await self._get(headers, receive, send)
            elif method == "DELETE":
                await self._delete(headers, send)
            else:
                await respond(send, 405, error_body(405, "method not allowed"), extra=[(b"allow", b"GET, POST, DELETE")])
        except StoreError as exc:  # unavailable, or a failure of its own: before any response, a clear 503
            logger.warning("fleet front: %s", exc)
            await respond(send, 503, error_body(503, "the fleet store is unavailable; try again later"))

    async def aclose(self) -> None:
        """Close the store's network connections (at lifespan shutdown)."""
        with contextlib.suppress(StoreError):
            await self.store.close()

    # connections ------------------------------------------------------------------------

    async def _claim(self) -> str:
        """A slot on a live host, the freest first; the host's id.

        Raises:
            NoFreeSlot: every live host is full, or none is alive.
        """
        hosts = sorted(await self.store.live_hosts(), key=lambda h: -h.free)
        most = self.policy.max_connections
        if sum(h.used for h in hosts) >= most:
            raise NoFreeSlot(f"the fleet serves its maximum of {most} connections")
        for host in hosts:
            if host.free > 0 and await self.store.claim_slot(host.host_id, most):
                return host.host_id
        raise NoFreeSlot("no agent host is alive" if not hosts else "every agent host is full")

    async def _open(self, transport: str) -> str:
        """A new connection on a host with a free slot (raises as `_claim`)."""
        host = await self._claim()
        try:
            cid = await self.store.create_connection(host)
        except BaseException:
            with contextlib.suppress(StoreError):
                await self.store.release_slot(host)
            raise
        if self.metrics is not None:
            self.metrics.fleet_opened(transport)
        return cid

    async def _push(self, cid: str, lines: list[bytes], requests: list[str]) -> None:
        """Queue lines for the agent, waiting for room up to `push_timeout`.

        Raises:
            InputQueueFull: still full after `push_timeout`.
        """
        deadline = time.monotonic() + self.push_timeout
        while True:
            try:
                await self.store.push_input(cid, lines, requests)
                return
            except InputQueueFull:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(_PUSH_RETRY)

    async def _end(self, cid: str, reason: str) -> bool:
        """End a connection for its client: the end of its output and of its input; False
        when it is unknown."""
        await self.store.end_output(cid, reason)
        return await self.store.end_input(cid, reason)

    async def _end_quietly(self, cid: str, reason: str) -> None:
        with contextlib.suppress(StoreError):
            await self._end(cid, reason)

    # POST -------------------------------------------------------------------------------

    async def _post(self, headers: Mapping[bytes, bytes], receive: Receive, send: Send) -> None:
        line = await post_line(headers, receive, send, self.policy.max_body)
        if line is None:
            return
        raw_cid = headers.get(_CID)
        if raw_cid is None:
            await self._initialize(line, send)
            return
        cid = raw_cid.decode("latin-1")
        frames = self.engine.Decoder(lazy=True, max_line_size=self.policy.max_body + 1).feed(line + b"\n")
        verdict = await checked_post(frames, headers, self.engine, send)
        if verdict is None:
            return
        out, _, requests = verdict
        try:
            await self._push(cid, [out], [request_json(entry.id) for entry, _ in requests])
        except UnknownConnection:
            await respond(send, 404, error_body(404, f"unknown {CONNECTION_ID_HEADER}: closed or expired"))
            return
        except InputQueueFull:
            await respond(send, 503, error_body(503, "the agent is not reading: its input queue is full"))
            return
        await respond(send, 202, b"")

    async def _initialize(self, line: bytes, send: Send) -> None:
        frame = await initialize_frame(line, self.engine, self.policy.max_body, send)
        if frame is None:
            return
        try:
            cid = await self._open("http")
        except NoFreeSlot as exc:
            await respond(send, 503, error_body(503, f"{exc}; try again later"))
            return
        try:
            await self.store.push_input(cid, [line], [request_json(frame.id)])
            reply = await asyncio.wait_for(self._init_reply(cid), self.init_timeout)
        except ConnectionEnded:
            await self._end_quietly(cid, "initialize failed")
            await respond(send, 200, encode_error(frame.id, INTERNAL_ERROR, "the agent closed before answering"))
            return
        except asyncio.TimeoutError:
            await self._end_quietly(cid, "initialize timed out")
            await respond(send, 504, error_body(504, f"the agent did not answer initialize in {self.init_timeout} s"))
            return
        except BaseException:
            await self._end_quietly(cid, "initialize failed")
            raise
        if b'"error"' in reply and self.engine.Decoder(lazy=True).feed(reply + b"\n")[0].error is not None:
            await self._end_quietly(cid, "initialize refused")
            await respond(send, 200, reply + b"\n")
            return
        await respond(send, 200, reply + b"\n", extra=[(_CID, cid.encode())])

    async def _init_reply(self, cid: str) -> bytes:
        """The agent's reply to initialize: the first line the host routed as such."""
        after = STREAM_START
        while True:
            for entry in await self.store.follow_output(cid, after, block=1.0):
                after = entry.cursor
                if entry.routes is not None and INIT_ROUTE in entry.routes:
                    return entry.lines[entry.routes.index(INIT_ROUTE)]

    # GET (SSE) --------------------------------------------------------------------------

    async def _get(self, headers: Mapping[bytes, bytes], receive: Receive, send: Send) -> None:
        if CONTENT_TYPE_SSE.encode() not in headers.get(b"accept", b""):
            await respond(send, 406, error_body(406, f"Accept must include {CONTENT_TYPE_SSE}"))
            return
        raw_cid = headers.get(_CID)
        if raw_cid is None:
            await respond(send, 400, error_body(400, f"missing {CONNECTION_ID_HEADER} header"))
            return
        cid = raw_cid.decode("latin-1")
        raw_session = headers.get(b"acp-session-id")
        key = raw_session.decode("utf-8", "replace") if raw_session is not None else None
        last = headers.get(b"last-event-id")
        after, skip = _resume_point(last.decode("latin-1") if last is not None else None)
        try:
            first = await self.store.read_output(cid, after, count=FIRST_COUNT)
        except (UnknownConnection, ConnectionEnded):
            await respond(send, 404, error_body(404, f"unknown {CONNECTION_ID_HEADER}: closed or expired"))
            return
        except CursorOutOfWindow:
            await respond(send, 409, error_body(409, "cannot resume from that Last-Event-ID"))
            return
        head = list(SSE_HEAD)
        batches = headers.get(_BATCHES) == b"1"
        if batches:
            head.append((_BATCHES, b"1"))
        await send({"type": "http.response.start", "status": 200, "headers": head})
        gone = asyncio.ensure_future(disconnected(receive))
        # the stream is written by a task of its own, raced once against the client's going
        # (not each read: a wait per read would cost a task and a wait each)
        pump = asyncio.ensure_future(self._sse_pump(cid, key, send, first, after, skip, batches))
        try:
            await asyncio.wait({gone, pump}, return_when=asyncio.FIRST_COMPLETED)
            if pump.done():
                pump.result()
            # else: the client went away
        finally:
            gone.cancel()
            if not pump.done():
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pump

    async def _sse_pump(self, cid: str, key: str | None, send: Send, first: list[Entry], after: str, skip: int,
                        batches: bool) -> None:
        """Write the lines of stream `key` (`first`, then what follows `after`) as SSE events
        until the connection's output ends; keep-alives while it is quiet."""
        watch = _Watch(self, cid)
        if first:
            watch.sized(first)
        try:
            entries = first
            while True:
                mark = None
                if entries:
                    after = entries[-1].cursor
                    chunk = _sse_chunk(entries, key, skip, batches)
                    skip = 0
                    if chunk:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    mark = (key, after)  # moved by the next read, in its round trip
                try:
                    entries = await watch.read(after, mark)
                except (ConnectionEnded, UnknownConnection, CursorOutOfWindow, StoreUnavailable) as exc:
                    logger.debug("fleet front: SSE stream of %s ends: %s", cid[:8], exc)
                    break
                if not entries and watch.quiet():
                    await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass
        finally:
            watch.leave()

    # DELETE -----------------------------------------------------------------------------

    async def _delete(self, headers: Mapping[bytes, bytes], send: Send) -> None:
        raw_cid = headers.get(_CID)
        if raw_cid is None:
            await respond(send, 400, error_body(400, f"missing {CONNECTION_ID_HEADER} header"))
            return
        cid = raw_cid.decode("latin-1")
        if not await self._end(cid, "the client ended the connection"):
            await respond(send, 404, error_body(404, f"unknown {CONNECTION_ID_HEADER}: closed or expired"))
            return
        await respond(send, 202, b"")

    # WebSocket --------------------------------------------------------------------------

    async def websocket(self, scope: Scope, headers: Mapping[bytes, bytes], path: str, receive: Receive,
                        send: Send) -> None:
        first = await receive()
        if first["type"] != "websocket.connect":
            return
        if path != self.path:
            await deny(scope, send, 404, "not found")
            return
        resume = headers.get(_RESUME)
        point = _WsPoint()
        reader = 0  # a resumable socket's number (attach_reader)
        try:
            if resume is None or resume == b"new":
                cid = await self._open("websocket")
            else:
                asked = _ws_resume_point(resume.decode("latin-1"))
                if asked is None:
                    await deny(scope, send, 400, f"{RESUME_HEADER} must be 'new' or '<connection id> <cursor> <frames>'")
                    return
                cid, point.after, point.skip = asked
                point.first = await self.store.read_output(cid, point.after, count=FIRST_COUNT)
            if resume is not None:  # a reader that may drop and come back: numbered
                reader = await self.store.attach_reader(cid)
                if reader == 0:
                    raise UnknownConnection(cid)
        except NoFreeSlot as exc:
            await deny(scope, send, 503, f"{exc}; try again later")
            return
        except (UnknownConnection, ConnectionEnded):
            await deny(scope, send, 404, f"unknown {CONNECTION_ID_HEADER}: closed or expired")
            return
        except CursorOutOfWindow:
            await deny(scope, send, 409, f"cannot resume from that {RESUME_HEADER}")
            return
        except StoreError as exc:  # unavailable, or a failure of its own
            logger.warning("fleet front: %s", exc)
            await deny(scope, send, 503, "the fleet store is unavailable; try again later")
            return
        accept = [(_CID, cid.encode())]
        batches = headers.get(_BATCHES) == b"1"
        if batches:
            accept.append((_BATCHES, b"1"))
        await send({"type": "websocket.accept", "headers": accept})
        sender = asyncio.ensure_future(self._ws_send(cid, send, batches, point if resume is not None else None))
        code = 1000
        kept = False  # a resumable socket that dropped without a close frame: the connection stays
        # the client's messages are read by a task of their own, raced once against the sender
        # (not each message: a wait per message would cost a task and a wait each)
        receiver = asyncio.ensure_future(self._ws_receive(cid, receive, resume is not None))
        try:
            await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
            if receiver.done():
                code, kept = receiver.result()
            # else: the connection ended (the sender closed the socket): the receiver is cancelled
        finally:
            if not receiver.done():
                receiver.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await receiver
            if kept:
                logger.info("fleet front: the resumable WebSocket of %s dropped; the connection stays %g s for a resume",
                            cid[:8], self.resume_grace)
                with contextlib.suppress(StoreError):  # the store gone: the idle timeout reaps it
                    await self.store.detach_reader(cid, reader, self.resume_grace)
            else:
                await self._end_quietly(cid, "the WebSocket closed")
            if not sender.done():
                sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
            if code != 1000:
                with contextlib.suppress(Exception):
                    await send({"type": "websocket.close", "code": code})

    async def _ws_receive(self, cid: str, receive: Receive, resumable: bool) -> tuple[int, bool]:
        """Push each text message of a WebSocket to the agent, until the client goes or a push
        fails: the close code, and whether a resumable socket dropped (its connection stays)."""
        decoder = self.engine.Decoder(lazy=True, max_line_size=self.policy.max_body + 1)
        lines = WsLines(receive, self.policy.max_body)
        while (line := await lines.next()) is not None:
            try:
                await self._push(cid, [line], _requests(decoder.feed(line + b"\n")))
            except InputQueueFull:
                return 1013, False
            except StoreError as exc:
                logger.warning("fleet front: WebSocket of %s: %s", cid[:8], exc)
                return 1011, False
        return lines.code, resumable and lines.client_code not in (None, 1000, 1001)

    async def _ws_send(self, cid: str, send: Send, batches: bool, point: _WsPoint | None) -> None:
        """Every line of the connection's output until it ends: one text frame each, or
        (`batches`) one per group of the single-process server's batch rule. For a resumable
        socket (`point`), the groups never span entries and each entry's frames are followed
        by a binary frame holding its cursor; a resumed socket starts at `point`."""
        after = point.after if point is not None else STREAM_START
        first = point.first if point is not None else None
        skip = point.skip if point is not None else 0
        reason = "agent closed"
        watch = _Watch(self, cid, shared=False)
        if first:
            watch.sized(first)
        mark: tuple[str | None, str] | None = None
        try:
            while True:
                try:
                    if first is not None:
                        entries, first = first, None
                    else:
                        entries = await watch.read(after, mark)
                except ConnectionEnded as exc:
                    reason = exc.reason[:120]  # a close reason holds 123 bytes
                    break
                except UnknownConnection:
                    break
                except StoreError as exc:
                    reason = "the fleet store failed"
                    logger.warning("fleet front: WebSocket of %s: %s", cid[:8], exc)
                    break
                mark = None
                if not entries:
                    continue
                if point is not None:
                    for entry in entries:
                        texts = _frames(entry.lines, batches, entry.batchable)[skip:]
                        skip = 0
                        for text in texts:
                            await send({"type": "websocket.send", "text": text.decode("utf-8", "replace")})
                        await send({"type": "websocket.send", "bytes": entry.cursor.encode()})
                else:
                    known = all([entry.batchable for entry in entries])
                    for text in _frames([line for entry in entries for line in entry.lines], batches, known):
                        await send({"type": "websocket.send", "text": text.decode("utf-8", "replace")})
                after = entries[-1].cursor
                mark = (ALL_STREAMS, after)  # moved by the next read, in its round trip
            await send({"type": "websocket.close", "code": 1011, "reason": reason})
        except Exception:  # noqa: BLE001 - the client went away; the receiver ends the connection
            pass
        finally:
            watch.leave()


class _Watch:
    """A reader's reads of a connection's output, which look at its host while they wait.

    `shared`: its reads wait with the other readers of the connection on this front
    (`SharedReads`: a client's SSE streams); a WebSocket, its connection's one reader, reads
    on its own."""

    def __init__(self, front: FleetFront, cid: str, shared: bool = True) -> None:
        self.front = front
        self.shared = shared
        self.store = front.store
        self.cid = cid
        self.host: str | None = None
        self.since = time.monotonic()  # the last thing sent (for the keep-alive)
        self.touched = self.since  # the last refresh of the connection's TTL
        self.count = FIRST_COUNT  # entries the next read asks for at most (`_next_count`)
        limits = self.store.limits
        # the mark not moved yet, what was read since the mark last moved, and how much of
        # that moves it at once (MARK_SHARE)
        self.owed: tuple[str | None, str] | None = None
        self.unmarked = self.unmarked_bytes = 0
        self.mark_entries = max(1, limits.output_entries // MARK_SHARE)
        self.mark_bytes = max(1, limits.output_bytes // MARK_SHARE)
        self.windowed = False  # ... of the window the host keeps (`_window`), once learned
        # a wait touches the connection when it ends empty: within a quarter of the TTL, so a
        # waiting reader keeps a connection alive whatever the idle timeout
        self.wait = min(front.host_check, self.store.limits.connection_ttl / 4)

    async def read(self, after: str, mark: tuple[str | None, str] | None = None) -> list[Entry]:
        """The entries after `after`, waiting up to `host_check` seconds (a quarter of the
        connection TTL when that is shorter); on an empty read, a host found dead fails the
        requests in flight and ends the connection.

        `mark`, the reader's read mark through what it has sent, moves lazily (`MARK_SHARE`):
        first a read of `MARK_IDLE` seconds without it; when that brings nothing, the mark
        moves in the round trip of the read that waits
        ([`follow_output`][acp_fast.fleet.FleetStore.follow_output])."""
        if mark is not None:
            self.owed = mark
        mark = self.owed
        entries: list[Entry] = []
        if mark is not None and self.unmarked < self.mark_entries and self.unmarked_bytes < self.mark_bytes:
            entries = await self._follow(after, MARK_IDLE)
        if not entries:
            if mark is None:
                entries = await self._follow(after, self.wait)
            else:
                self.owed = None
                self.unmarked = self.unmarked_bytes = 0
                entries = await self.store.follow_output(self.cid, after, block=self.wait, mark=mark,
                                                         count=self.count)
        now = time.monotonic()
        if entries:
            if not self.windowed:
                await self._window()
            self.sized(entries)
            self.since = now
            if now - self.touched > self.store.limits.connection_ttl / 4:  # a reader keeps it alive
                self.touched = now
                await self.store.touch_connection(self.cid)
            return entries
        self.touched = now
        await self.store.touch_connection(self.cid)  # a reader keeps its connection alive
        if self.host is None:
            self.host = await self.store.connection_host(self.cid)
        if self.host is not None and not await self.store.host_alive(self.host):
            reason = f"the agent host {self.host} of this connection is gone"
            logger.warning("fleet front: connection %s: %s", self.cid[:8], reason)
            await self.store.end_output(self.cid, reason, fail_pending=True)
        return []

    async def _window(self) -> None:
        """Once, when the first entries came: the mark moves by a share of the window the
        host keeps, which may differ from this front's limits (a host given a smaller window
        would otherwise pause its agent for a mark this reader owes but does not move until
        its reads come back empty)."""
        self.windowed = True
        window = await self.store.output_window(self.cid)
        if window is not None:
            self.mark_entries = max(1, window[0] // MARK_SHARE)
            self.mark_bytes = max(1, window[1] // MARK_SHARE)

    def _follow(self, after: str, block: float) -> Awaitable[list[Entry]]:
        """A read without a mark: shared, or the store's own."""
        if self.shared:
            return self.front.reads.follow(self.cid, after, block, self.count)
        return self.store.follow_output(self.cid, after, block=block, count=self.count)

    def leave(self) -> None:
        """The reader stops: the mark it owes moves now (in a task of its own: the reader's
        own task may be ending by cancellation)."""
        owed, self.owed = self.owed, None
        if owed is not None:
            task = asyncio.ensure_future(self.store.mark_read(self.cid, owed[1], owed[0]))
            _LEAVING.add(task)
            task.add_done_callback(_left)

    def sized(self, entries: list[Entry]) -> None:
        """Adapt the next read's entry count to what these entries held."""
        size = sum([sum(map(len, e.lines)) for e in entries])  # per line in C: this runs on every read
        self.count = _next_count(self.count, len(entries), size, self.store.limits.read_count)
        self.unmarked += len(entries)
        self.unmarked_bytes += size

    def quiet(self) -> bool:
        """Whether a keep-alive is due (nothing sent for `policy.keepalive` seconds)."""
        now = time.monotonic()
        if now - self.since < self.front.policy.keepalive:
            return False
        self.since = now
        return True


class SharedReads:
    """The reads of connections' output in flight on one front, shared: a reader that would
    wait at the same place as a read in flight (the same connection, cursor and wait) takes
    that read's entries instead of a read of its own. The streams of one client (its
    connection's and its sessions' SSE streams) read every entry of its output, so each entry
    costs one Redis read per front, not one per stream.

    The read runs in the first reader's task; when that reader leaves before the read ends
    (or the read fails), the others each read on their own (a failure is theirs to see).
    A read that moves a read mark is never shared.
    """

    __slots__ = ("store", "_reads")

    def __init__(self, store: FleetStore) -> None:
        self.store = store
        self._reads: dict[tuple[str, str, float], asyncio.Future[list[Entry] | None]] = {}

    async def follow(self, cid: str, after: str, block: float, count: int) -> list[Entry]:
        """[`follow_output`][acp_fast.fleet.FleetStore.follow_output] of `cid` after `after`
        for up to `block` seconds, shared with the readers that wait there too."""
        key = (cid, after, block)
        shared = self._reads.get(key)
        if shared is not None:
            got = await asyncio.shield(shared)
            if got is not None:
                return got
        done: asyncio.Future[list[Entry] | None] = asyncio.get_running_loop().create_future()
        self._reads[key] = done
        entries: list[Entry] | None = None
        try:
            entries = await self.store.follow_output(cid, after, block=block, count=count)
            return entries
        finally:
            if self._reads.get(key) is done:
                del self._reads[key]
            done.set_result(entries)  # None: the others read on their own


#: The marks of readers that left, being moved (kept here so that no task is collected early).
_LEAVING: set[asyncio.Future[None]] = set()


def _left(task: asyncio.Future[None]) -> None:
    _LEAVING.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.debug("fleet front: a leaving reader's mark did not move: %s", task.exception())


def _next_count(count: int, entries: int, size: int, most: int) -> int:
    """The entry count of a reader's next read, after a read of `count` entries at most gave
    `entries` entries of `size` bytes: fewer when that was over `READ_BYTES`, twice as many
    (up to `most`) when the read was full and under half of it, else the same."""
    if size > READ_BYTES:
        return max(1, count * READ_BYTES // size)
    if entries >= count and 2 * size <= READ_BYTES:
        return min(most, 2 * count)
    return count


def _requests(frames: list[Any]) -> list[str]:
    """The JSON ids of the requests among decoded frames (a batch's entries too)."""
    out = []
    for frame in frames:
        for entry in (list(frame) if frame.kind == _kinds.BATCH else [frame]):
            if entry.kind == _kinds.REQUEST:
                out.append(request_json(entry.id))
    return out


def _resume_point(last: str | None) -> tuple[str, int]:
    """Where a reader resumes: the cursor to read after, and how many of the next entry's
    lines on its stream it has already (see the module docstring)."""
    if last is None or last == "0":
        return STREAM_START, 0
    cursor, dot, line = last.partition(".")
    if not dot:
        return last, 0
    number, k = cursor_number(cursor), ascii_number(line)
    if number is None or k is None or number < 1:
        return last, 0  # not one of ours: the store says so (409)
    return f"{number - 1}-0", k + 1


def _sse_chunk(entries: list[Entry], key: str | None, skip: int, batches: bool = False) -> bytes:
    """The SSE events of the lines routed to stream `key`, each with its cursor, without
    the first `skip` lines of the first entry (the reader has them); with `batches`, one
    event per group of the batch rule within an entry, with the cursor of its last line."""
    out: list[bytes] = []
    for entry in entries:
        routes = entry.routes
        lines = entry.lines if routes is None and key is None else [
            line for line, route in zip(entry.lines, routes or ()) if route == key]
        if not lines:
            continue
        cursor = entry.cursor.encode()
        last = len(lines) - 1
        if batches and skip <= last:
            for k, data in grouped(_items(lines[skip:], skip, entry.batchable)):
                if k == last:
                    out.append(b"id: %s\ndata: %s\n\n" % (cursor, data))
                else:
                    out.append(b"id: %s.%d\ndata: %s\n\n" % (cursor, k, data))
            skip = 0
            continue
        for k in range(skip, last):
            out.append(b"id: %s.%d\ndata: %s\n\n" % (cursor, k, lines[k]))
        if skip <= last:
            out.append(b"id: %s\ndata: %s\n\n" % (cursor, lines[last]))
        skip = 0
    chunk = b"".join(out)
    return chunk if b"\r" not in chunk else chunk.replace(b"\r", b"\t")


class _WsPoint:
    """Where a resumable WebSocket starts: after cursor `after`, without the first `skip`
    frames of the next entry; `first`: the entries already read from there."""

    __slots__ = ("after", "skip", "first")

    def __init__(self) -> None:
        self.after = STREAM_START
        self.skip = 0
        self.first: list[Entry] | None = None


def _ws_resume_point(value: str) -> tuple[str, str, int] | None:
    """`(connection id, cursor, frames)` of a resume header's value, or None."""
    parts = value.split()
    frames = ascii_number(parts[2]) if len(parts) == 3 else None
    if frames is None:
        return None
    return parts[0], parts[1], frames


def _frames(lines: list[bytes], batches: bool, batchable: bool = False) -> list[bytes]:
    """The text frames of lines: one each, or (`batches`) one per group of the batch rule
    (`batchable`: every line is known to be batchable, see `_items`)."""
    return [data for _, data in grouped(_items(lines, 0, batchable))] if batches else lines


def _items(lines: list[bytes], first: int = 0, batchable: bool = False) -> list[tuple[int, bytes, bool]]:
    """Lines as the batch rule's items, numbered from `first`: every one batchable when the
    host said so (`batchable`: it decoded each as a notification or a response), else
    batchable unless it may be a request (a line with both `"method"` and `"id"`) or is a
    batch of the agent's own."""
    if batchable:
        return list(zip(range(first, first + len(lines)), lines, itertools.repeat(True)))
    return [(first + k, line, line[:1] == b"{" and not (b'"method"' in line and b'"id"' in line))
            for k, line in enumerate(lines)]


def _refusals(send: Send, metrics: ServerMetrics) -> Send:
    """`send`, counting the HTTP error statuses it sends (a WebSocket closed 1009 as 413)."""

    async def counted(message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind in ("http.response.start", "websocket.http.response.start") and message["status"] >= 400:
            metrics.refused(message["status"])
        elif kind == "websocket.close" and message.get("code") == 1009:
            metrics.refused(413)
        await send(message)

    return counted
