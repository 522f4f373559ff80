"""The fleet's shared state: the one interface fronts and hosts keep it behind.

A fleet is *fronts* (they terminate HTTP and WebSocket and keep no connection state), *agent
hosts* (each runs one agent per connection) and one store between them. Everything a front
and a host share goes through the primitives of [`FleetStore`][acp_fast.fleet.FleetStore]:

* **host registry**: a host registers with a slot count and keeps a heartbeat key alive; a
  front lists the live hosts and claims a slot on one atomically (a host is never above its
  slots); a host whose heartbeat expired is dead, and is detectable as such;
* **connection registry**: a record per ACP connection, under an unguessable id, naming the
  host that runs its agent; it expires when nothing touches it for the connection TTL;
* **output stream** (agent to client), per connection: each batch of lines the agent wrote
  in one flush is one entry; entry ids are the SSE cursors; the stream keeps a replay window
  bounded in entries and bytes, and a reader whose cursor fell out of it is told so;
* **input queue** (client to agent), per connection: bounded in entries and bytes; a push
  beyond the bound raises [`InputQueueFull`][acp_fast.fleet.InputQueueFull] (backpressure,
  never a silent drop); the host consumes it in order;
* **host inbox**, per host: each connection created for a host is announced there, so the
  host learns of it with one blocking read for all of them;
* **end markers**: the host marks a connection's output as ended (its agent exited), a front
  its input (the client ended it); readers of that stream learn it
  ([`ConnectionEnded`][acp_fast.fleet.ConnectionEnded]) once they have read every entry before
  it, instead of waiting for the TTL.

An output entry may carry each line's *route*: the stream of the front that carries it, as the
host found it (`None`: the connection's stream; a session id: that session's stream;
[`INIT_ROUTE`][acp_fast.fleet.INIT_ROUTE]: the reply to `initialize`, which the front answers
in the POST body and no stream carries).

Cursors are entry ids of the form `"<n>-0"`, `n` counting the entries of that stream from 1;
`STREAM_START` (`"0-0"`) is the cursor before the first entry.
Lines are single lines of JSON, without their newline (a batch is a non-empty sequence of
them).

The only implementation is [`RedisStore`][acp_fast.fleet.RedisStore] (Redis >= 7); the
interface is small so that another engine could be added.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from ..errors import AcpFastError

__all__ = [
    "ALL_STREAMS",
    "INIT_ROUTE",
    "STREAM_START",
    "ConnectionEnded",
    "CursorOutOfWindow",
    "Entry",
    "FleetStore",
    "HostState",
    "InputQueueFull",
    "InputRead",
    "StoreError",
    "StoreLimits",
    "StoreUnavailable",
    "UnknownConnection",
]

#: The cursor before a stream's first entry: reading after it starts at entry 1.
STREAM_START = "0-0"

#: The route of the agent's reply to ``initialize``: answered in the POST body, on no stream.
INIT_ROUTE = ""

#: The read mark of a reader of every line (a WebSocket), whatever their routes.
ALL_STREAMS = "*"


def ascii_number(text: str) -> int | None:
    """The whole number `text` writes in ASCII digits (at most 18 of them), or None when it is
    anything else. `str.isdigit` alone is not enough for what a client sends: it also takes
    digits `int` refuses (`"²"`, which a header decoded as latin-1 can hold) and lengths `int`
    refuses."""
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        return None
    return int(text)


def cursor_number(cursor: str) -> int | None:
    """The entry number of a cursor (`"<n>-0"`: n in ASCII digits, at most 18, without a
    leading zero), or None when it is not one. String methods, not a regular expression: every
    read and push of a store parses one or two, and a front parses what clients send."""
    number = ascii_number(cursor[:-2]) if cursor[-2:] == "-0" else None
    if number is None or (cursor[0] == "0" and len(cursor) > 3):
        return None
    return number


def request_json(ident: object) -> str:
    """A request id as the store names the requests in flight (its JSON text): fronts that
    push a request and hosts that append its answer name it alike. An `int`'s digits need no
    JSON encoder (ids are mostly numbers, and each round trip names one twice)."""
    return str(ident) if type(ident) is int else json.dumps(ident)


class StoreError(AcpFastError):
    """Base class of the errors of a fleet store."""


class StoreUnavailable(StoreError):
    """The store cannot be reached (refused, timed out, dropped): raised by every call.

    A call never hangs: connecting and each reply are bounded by the store's socket timeouts.

    Attributes:
        url: the store's URL, without its password.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"the fleet store at {url} is unavailable: {reason}")
        self.url = url


class UnknownConnection(StoreError):
    """No such connection: never created, deleted, or expired (its TTL ran out).

    Attributes:
        connection_id: the id asked for.
    """

    def __init__(self, connection_id: str) -> None:
        super().__init__(f"unknown connection {connection_id!r}")
        self.connection_id = connection_id


class CursorOutOfWindow(StoreError):
    """A read's cursor is outside the output stream's replay window.

    Entries after the cursor were trimmed (the window moved past it), or the cursor is not
    one of this stream's (malformed, or beyond its last entry). A front answers 409.

    Attributes:
        cursor: the cursor asked for.
    """

    def __init__(self, cursor: str) -> None:
        super().__init__(f"cursor {cursor!r} is outside the replay window")
        self.cursor = cursor


class ConnectionEnded(StoreError):
    """The connection's output ended (its agent exited, or its host ended it): nothing follows.

    Raised by a read of the output stream once every entry before the end marker was read.

    Attributes:
        connection_id: the connection.
        reason: why it ended, as the host said it.
    """

    def __init__(self, connection_id: str, reason: str) -> None:
        super().__init__(f"connection {connection_id!r} ended: {reason}")
        self.connection_id = connection_id
        self.reason = reason


class InputQueueFull(StoreError):
    """A connection's input queue is at its bound (entries or bytes): nothing was queued.

    Backpressure: the caller retries once the host has consumed some of the queue (a front
    holds the POST, or stops reading the WebSocket), or gives up with a clear error.

    Attributes:
        connection_id: the connection whose queue is full.
    """

    def __init__(self, connection_id: str) -> None:
        super().__init__(f"the input queue of connection {connection_id!r} is full")
        self.connection_id = connection_id


@dataclass(frozen=True)
class StoreLimits:
    """The bounds a store applies to every connection.

    Attributes:
        output_entries: entries kept in an output stream's replay window. Trimming is
            approximate (Redis `MAXLEN ~`): the stream may hold up to one stream node more
            (`stream-node-max-entries`, 100 by default), never fewer.
        output_bytes: bytes of line data kept in an output stream's replay window, enforced
            exactly by the writer: the oldest entries leave while the window holds more (the
            newest entry always stays, whatever its size).
        input_entries: unconsumed entries an input queue holds at most.
        input_bytes: unconsumed bytes of line data an input queue holds at most; a batch larger
            than this can never be queued (`ValueError`).
        connection_ttl: seconds a connection record (and its streams) lives without a client's
            request or a reader (a front's `ServerPolicy.idle_timeout`). A request restarts it
            once an eighth of it is gone (a reader, once a quarter is): a connection may end
            that much before the last request's time plus the TTL, never later.
        read_count: entries one read returns at most.
    """

    output_entries: int = 4096
    output_bytes: int = 1024 * 1024
    input_entries: int = 1024
    input_bytes: int = 1024 * 1024
    connection_ttl: float = 300.0
    read_count: int = 256

    def __post_init__(self) -> None:
        counts = (self.output_entries, self.output_bytes, self.input_entries, self.input_bytes, self.read_count)
        if min(counts) < 1 or self.connection_ttl <= 0:
            raise ValueError("every store limit must be positive")


class HostState(NamedTuple):
    """A live host of the registry and its slots.

    Attributes:
        host_id: the id the host registered with.
        slots: connections it runs at most.
        used: slots claimed now.
    """

    host_id: str
    slots: int
    used: int

    @property
    def free(self) -> int:
        """Slots left to claim."""
        return self.slots - self.used


class Entry(NamedTuple):
    """One entry of a stream: its id (the cursor to read after it) and its batch of lines.

    Attributes:
        cursor: the entry id, `"<n>-0"`.
        lines: the lines written in one batch, in order, without newlines.
        routes: each line's route when the writer gave them (output entries of a host), else
            `None` (see the module docstring).
        batchable: every line may share a batch frame (each is a JSON-RPC notification or
            response, as the writer decoded them); `False` when the writer did not say.
    """

    cursor: str
    lines: list[bytes]
    routes: list[str | None] | None = None
    batchable: bool = False


class InputRead(NamedTuple):
    """What one [`read_inputs`][acp_fast.fleet.FleetStore.read_inputs] found.

    Attributes:
        assigned: the connections created for the host after its inbox cursor
            (`(cursor, connection id)` pairs, in order), as
            [`read_assigned`][acp_fast.fleet.FleetStore.read_assigned] returns them.
        entries: the entries read, per connection (only those with some).
        ended: the connections whose queue is over: `ConnectionEnded` (the end marker came
            after everything read) or `UnknownConnection` (deleted or expired).
    """

    assigned: list[tuple[str, str]]
    entries: dict[str, list[Entry]]
    ended: dict[str, StoreError]


class FleetStore(Protocol):
    """What fronts and hosts share, behind one interface (see the module docstring).

    Every method raises [`StoreUnavailable`][acp_fast.fleet.StoreUnavailable] when the store
    cannot be reached, and never hangs. Host and connection ids are made of
    `A-Z a-z 0-9 _ -` (at most 64 characters): an id of any other shape is an unknown
    connection, and a `ValueError` as a host id.
    """

    @property
    def limits(self) -> StoreLimits:
        """The bounds applied to every connection."""
        ...

    @property
    def url(self) -> str:
        """Where the store is, without its password (for messages and logs)."""
        ...

    async def close(self) -> None:
        """Release the store's network connections (blocked reads end with an error)."""
        ...

    # --- host registry -----------------------------------------------------------------

    async def register_host(self, host_id: str, slots: int, ttl: float) -> None:
        """Register a host (again) with `slots` free slots, alive for `ttl` seconds.

        Registering again starts a new life: the used slots count from 0 (the connections of
        an earlier life are lost with it).

        Args:
            host_id: the host's id, unique in the fleet.
            slots: connections the host runs at most (>= 1).
            ttl: seconds the host counts as alive without a heartbeat.
        """
        ...

    async def heartbeat(self, host_id: str, ttl: float) -> bool:
        """Keep a registered host alive for `ttl` more seconds.

        Returns:
            False when the host is not alive any more (its TTL ran out, or it was never
            registered): it was dead for a while, fronts may have failed its connections, and
            it must register again, as a new life.
        """
        ...

    async def unregister_host(self, host_id: str) -> None:
        """Remove a host from the registry (a clean shutdown); it is dead from now on."""
        ...

    async def live_hosts(self) -> list[HostState]:
        """Every live host with its slots, free or not, in no particular order.

        A host whose heartbeat expired is dropped from the registry here (a dead host stays
        dead: its heartbeat returns False and it registers again).
        """
        ...

    async def host_alive(self, host_id: str) -> bool:
        """Whether the host's heartbeat is current: False once its TTL ran out."""
        ...

    async def claim_slot(self, host_id: str, fleet_max: int | None = None) -> bool:
        """Take one slot of a live host, atomically: never more than its `slots` are taken,
        and with `fleet_max`, never more than `fleet_max` over all live hosts.

        Returns:
            True when a slot was taken; False when the host is full or not alive, or the live
            hosts' taken slots add up to `fleet_max`.
        """
        ...

    async def release_slot(self, host_id: str) -> None:
        """Give back one slot of a host (never below 0; nothing for an unknown host)."""
        ...

    # --- connection registry -----------------------------------------------------------

    async def create_connection(self, host_id: str) -> str:
        """Create a connection record naming the host that runs its agent, and announce it in
        the host's inbox ([`read_assigned`][acp_fast.fleet.FleetStore.read_assigned]).

        The record and its streams expire after `limits.connection_ttl` seconds without
        activity: a client's push ([`push_input`][acp_fast.fleet.FleetStore.push_input]) or
        a reader's [`touch_connection`][acp_fast.fleet.FleetStore.touch_connection] (the
        single-process server's idle rule: the agent's output alone keeps nothing alive).

        Returns:
            the new connection's id, unguessable (`secrets.token_urlsafe`, 192 bits).
        """
        ...

    async def connection_host(self, connection_id: str) -> str | None:
        """The host of a connection, or None when the connection is unknown."""
        ...

    async def touch_connection(self, connection_id: str) -> bool:
        """Restart the connection's TTL (its record and streams); False when it is unknown."""
        ...

    async def attach_reader(self, connection_id: str) -> int:
        """A resumable reader (a WebSocket with the resume header) attaches: restart the
        connection's TTL and return the reader's number, one more than the last attached
        reader's (0 when the connection is unknown). [`detach_reader`][acp_fast.fleet.FleetStore.detach_reader]
        takes it back."""
        ...

    async def detach_reader(self, connection_id: str, reader: int, grace: float) -> bool:
        """Reader number `reader` dropped without ending the connection: unless another reader
        attached since, the connection expires within `grace` seconds (its TTL is shortened,
        never lengthened; a client's request or a reader restarts the full TTL). Atomic
        against a racing [`attach_reader`][acp_fast.fleet.FleetStore.attach_reader], so a
        reader that resumed elsewhere first keeps its connection. True when shortened."""
        ...

    async def delete_connection(self, connection_id: str) -> bool:
        """Delete the connection's record and both its streams; False when it was unknown."""
        ...

    async def read_assigned(self, host_id: str, after: str, *, block: float | None = None) -> list[tuple[str, str]]:
        """The connections created for a host after inbox cursor `after`, in order.

        A host reads its inbox from `STREAM_START` after it
        registered (registering empties it: a new life takes no connection of an old one).

        Args:
            host_id: the host.
            after: the inbox cursor of the last connection taken.
            block: when none is there, wait up to this many seconds (`None`: do not wait).

        Returns:
            `(cursor, connection id)` pairs; empty when the wait ran out.
        """
        ...

    # --- agent -> client: the output stream ----------------------------------------------

    async def append_output(self, connection_id: str, lines: Sequence[bytes],
                            routes: Sequence[str | None] | None = None, answered: Sequence[str] = (),
                            *, batchable: bool = False) -> str:
        """Append what the agent wrote in one flush as ONE entry, and trim the replay window.

        Args:
            connection_id: the connection.
            lines: one or more lines, without newlines.
            routes: each line's route (as many as `lines`), or `None`.
            answered: the JSON ids of the client requests these lines answer (no longer in
                flight, see [`push_input`][acp_fast.fleet.FleetStore.push_input]).
            batchable: every line is a JSON-RPC notification or response (readers may join
                them in batch frames without looking at each: `Entry.batchable`).

        Returns:
            the new entry's cursor.

        Raises:
            UnknownConnection: the connection is unknown.
        """
        ...

    async def read_output(self, connection_id: str, after: str, *, block: float | None = None,
                          count: int | None = None) -> list[Entry]:
        """The entries after cursor `after`, in order (at most `count`, and never more than
        `limits.read_count`).

        Args:
            connection_id: the connection.
            after: the last cursor the reader has (`STREAM_START`
                for everything from the first entry).
            block: when nothing is there yet, wait up to this many seconds for an entry
                (`None`: do not wait). An empty list means the wait ran out.
            count: entries at most (`None`: `limits.read_count`); a reader of large entries
                asks for fewer, so that one read stays small.

        Raises:
            CursorOutOfWindow: an entry after `after` was trimmed, or `after` is not a
                cursor of this stream.
            ConnectionEnded: nothing follows `after` but the end marker.
            UnknownConnection: the connection is unknown.
        """
        ...

    async def follow_output(self, connection_id: str, after: str, *, block: float,
                            mark: tuple[str | None, str] | None = None, count: int | None = None) -> list[Entry]:
        """A reader's steady loop: the entries after `after`, a cursor this stream gave it,
        waiting up to `block` seconds, in one round trip whether entries are there or not.

        As [`read_output`][acp_fast.fleet.FleetStore.read_output] (the same errors), but a
        cursor beyond the stream's end is found only once the wait is over; a client's cursor
        (`Last-Event-ID`) goes to `read_output` first.

        Args:
            connection_id: the connection.
            after: the last cursor the reader has.
            block: seconds to wait for an entry (an empty list: the wait ran out).
            mark: `(stream, cursor)`: first move that stream's read mark, as
                [`mark_read`][acp_fast.fleet.FleetStore.mark_read] does (in the same round trip).
            count: entries at most, as for `read_output`.
        """
        ...

    async def wait_read(self, connection_id: str, after: str, *, block: float) -> str:
        """Wait up to `block` seconds until a read mark of the connection moves (a
        [`mark_read`][acp_fast.fleet.FleetStore.mark_read] after notice `after`); no polling.

        Args:
            connection_id: the connection.
            after: the last notice seen (`STREAM_START` at first: the
                latest move, if any, returns at once).

        Returns:
            the latest notice (`after` when the wait ran out); pass it to the next wait.
        """
        ...

    async def output_window(self, connection_id: str) -> tuple[int, int] | None:
        """The replay window (entries, bytes: `output_entries`, `output_bytes`) that the
        connection's host keeps and paces its agent by, once the host has appended to the
        connection's output; None before that, or when the connection is unknown. A reader
        moves its read mark by the host's window, not by its own store's limits (a host may
        be given another window than the fronts)."""
        ...

    async def mark_read(self, connection_id: str, cursor: str, stream: str | None = ALL_STREAMS) -> None:
        """Note that a reader of `stream` (a route: `None` the connection's stream, a session
        id; `ALL_STREAMS` a reader of every line, a WebSocket)
        has sent its client everything through `cursor`: that stream's read mark moves
        forward to it, never back. Nothing for an unknown connection or cursor."""
        ...

    async def output_backlog(self, connection_id: str, streams: Mapping[str | None, str]) -> tuple[int, int]:
        """The largest backlog, in entries and bytes of the output stream, after the read
        marks of `streams` (each mark at least the `ALL_STREAMS` one) whose reader has not
        read the stream's last entry (the cursor each maps to): what the host may write
        before the slowest reader with something to read falls out of the replay window.

        Raises:
            UnknownConnection: the connection is unknown.
        """
        ...

    async def end_output(self, connection_id: str, reason: str, *, fail_pending: bool = False) -> bool:
        """Mark the end of the connection's output: readers raise `ConnectionEnded` after it.

        With `fail_pending` (the connection's host is gone), every client request still in
        flight gets an error response (-32603, `reason` as its message) in one entry before
        the marker, so that nothing waits for an answer that cannot come.

        Returns:
            False when the connection is unknown (nothing to mark).
        """
        ...

    # --- client -> agent: the input queue ------------------------------------------------

    async def push_input(self, connection_id: str, lines: Sequence[bytes], requests: Sequence[str] = ()) -> str:
        """Queue one batch of client lines for the agent, as ONE entry, within the bounds.

        Args:
            connection_id: the connection.
            lines: one or more lines, without newlines.
            requests: the JSON ids of the requests among them: in flight until an append
                names them answered.

        Returns:
            the entry's cursor.

        Raises:
            InputQueueFull: the queue is at its entries or bytes bound; nothing was queued.
            UnknownConnection: the connection is unknown.
            ValueError: the batch alone is larger than `limits.input_bytes`.
        """
        ...

    async def read_input(self, connection_id: str, after: str, *, block: float | None = None) -> list[Entry]:
        """Consume the queue in order: drop what is up to `after`, return what follows.

        The host passes the cursor of the last entry it has handed to the agent
        (`STREAM_START` at first); the entries up to it leave
        the queue (their room is free for new pushes) and the next ones are returned.

        Args:
            connection_id: the connection.
            after: the cursor of the last entry consumed.
            block: when nothing follows, wait up to this many seconds (`None`: do not wait).
                An empty list means the wait ran out.

        Raises:
            ConnectionEnded: nothing follows `after` but the end marker (the client ended
                the connection: [`end_input`][acp_fast.fleet.FleetStore.end_input]).
            UnknownConnection: the connection is unknown.
        """
        ...

    async def read_inputs(self, host_id: str, inbox: str, after: Mapping[str, str], *,
                          consumed: Collection[str] = (), block: float | None = None) -> InputRead:
        """A host's one read of everything it consumes: its inbox and the input queues of
        many connections, in one round trip (one blocking read over all of them when it waits).

        Args:
            host_id: the host.
            inbox: its inbox cursor (as [`read_assigned`][acp_fast.fleet.FleetStore.read_assigned]).
            after: each connection's cursor of the last entry handed to its agent: what
                follows is read.
            consumed: the connections of `after` whose entries up to their cursor leave the
                queue now (as [`read_input`][acp_fast.fleet.FleetStore.read_input] frees them);
                each is also checked: an unknown one is in `ended`.
            block: when nothing is there, wait up to this many seconds (`None`: do not wait);
                an implementation may return earlier, empty.
        """
        ...

    async def end_input(self, connection_id: str, reason: str) -> bool:
        """Mark the end of the connection's input (the client ended it): the host's read
        raises `ConnectionEnded` after the entries before it, and later pushes raise
        `UnknownConnection`.

        Returns:
            False when the connection is unknown (nothing to mark).
        """
        ...
