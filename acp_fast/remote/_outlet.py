"""Outlets: where the agent's messages wait for the network, shared by SSE and WebSocket.

An `Outlet` is one channel to the client: an SSE stream (the connection's or a
session's) or a WebSocket. The server's agent side `put` s each line of the agent on its
outlet, marked *batchable* when it is a notification or a response; the network side
`take` s everything queued in one turn and hands it to the transport's encoder, which
writes it as that transport's text: `sse_chunk` (events with `id:` cursors) or
`ws_frames` (one text frame per message or batch). Both encoders group by the one rule
of `grouped`, for a client that asked for batch frames.

An SSE outlet keeps what it sent within a byte window, so a reader that reconnects with
`Last-Event-ID` gets exactly what it missed (`Outlet.rewind`); a WebSocket outlet
keeps nothing (window 0).
"""

from __future__ import annotations

import asyncio
import collections
import operator
from collections.abc import Iterable

from ._wire import BATCH_FRAME_BYTES, sse_events

__all__ = ["Item", "Outlet", "grouped", "sse_chunk", "ws_frames"]

#: One queued message: its event id (the SSE cursor), its line, and whether it may join a batch.
Item = tuple[int, bytes, bool]


class Outlet:
    """The queue of one channel to the client and its replay window.

    Attributes:
        key: the session of an SSE stream (`None`: the connection stream, or a WebSocket).
        reader: the token of the SSE reader attached (`None` while nobody reads).
        wake: set whenever something is queued or the outlet ends.
        ended: no more will be queued (the agent or the connection ended).
    """

    __slots__ = ("key", "queue", "queued", "next_id", "sent", "sent_bytes", "reader", "wake", "ended")

    def __init__(self, key: str | None) -> None:
        self.key = key
        self.queue: collections.deque[Item] = collections.deque()
        self.queued = 0
        self.next_id = 1
        self.sent: collections.deque[Item] = collections.deque()
        self.sent_bytes = 0
        self.reader: object | None = None
        self.wake: asyncio.Event = asyncio.Event()
        self.ended = False

    def put(self, line: bytes, batchable: bool = False) -> int:
        """Queue one line of the agent (`batchable`: a notification or a response, which
        may share a batch frame with its neighbours); returns the bytes queued."""
        queue = self.queue
        if not queue:  # a sender waits only on an empty queue: the first line wakes it
            self.wake.set()
        queue.append((self.next_id, line, batchable))
        self.next_id += 1
        n = len(line)
        self.queued += n
        return n

    def extend(self, items: Iterable[Item], size: int) -> None:
        """Queue `items` of `size` bytes in all, each with event id 0: for an outlet
        without replay window (a WebSocket), which needs no cursors."""
        if not self.queue:
            self.wake.set()
        self.queue.extend(items)
        self.queued += size

    def end(self) -> None:
        """Nothing more will be queued: the network side ends once it has sent the rest."""
        self.ended = True
        self.wake.set()

    def take(self, window: int) -> tuple[list[Item], int]:
        """Everything queued and its bytes; the last `window` bytes of it are kept for
        `rewind`."""
        items = list(self.queue)
        self.queue.clear()
        size = self.queued
        self.queued = 0
        if window:
            self.sent.extend(items)
            self.sent_bytes += size
            while self.sent and self.sent_bytes > window:
                self.sent_bytes -= len(self.sent.popleft()[1])
        return items, size

    def rewind(self, last_seen: int) -> bool:
        """Queue again what was sent after `last_seen`; False when it is out of the window."""
        if last_seen >= self.next_id:
            return False
        if last_seen == self.next_id - 1 - len(self.queue):
            return True  # nothing sent after it is missing
        if not self.sent or self.sent[0][0] > last_seen + 1:
            return False
        again = [item for item in self.sent if item[0] > last_seen]
        for item in reversed(again):
            self.queue.appendleft(item)
            self.queued += len(item[1])
        keep = [item for item in self.sent if item[0] <= last_seen]
        self.sent = collections.deque(keep)
        self.sent_bytes = sum(len(item[1]) for item in keep)
        return True


def grouped(items: list[Item]) -> list[tuple[int, bytes]]:
    """The one batch grouping rule: `(id, frame)` for queued items, where consecutive
    batchable lines share one JSON-RPC batch of at most `BATCH_FRAME_BYTES` (its id is its
    last line's, so a reader resuming from it has every line up to it), and every other line
    (a request, the agent's own batch, a line that is not JSON-RPC, a line too big to join a
    batch) goes alone, as written. A group of one is its line, unwrapped."""
    if len(items) == 1:  # a turn of one message (a round trip's reply): alone, whatever it is
        ident, line, _ = items[0]
        return [(ident, line)]
    if items and all(map(_BATCHABLE_OF, items)):  # the usual turn: the rule's groups at once
        lines = list(map(_LINE_OF, items))
        if sum(map(len, lines)) + len(lines) < BATCH_FRAME_BYTES:  # every line joins the one group
            return [(items[-1][0], _joined(lines))]
    out: list[tuple[int, bytes]] = []
    group: list[bytes] = []
    size = 0  # the open group's lines, each with its comma (its batch text is one byte more)
    last = 0
    for ident, line, batchable in items:
        if batchable:
            n = len(line) + 1
            if size + n < BATCH_FRAME_BYTES:  # joins the open group (or opens one)
                group.append(line)
                size += n
                last = ident
                continue
            if group:
                out.append((last, _joined(group)))
            if n < BATCH_FRAME_BYTES:
                group = [line]
                size = n
                last = ident
                continue
            group = []
            size = 0
        elif group:
            out.append((last, _joined(group)))
            group = []
            size = 0
        out.append((ident, line))
    if group:
        out.append((last, _joined(group)))
    return out


def sse_chunk(items: list[Item], cursors: bool, batches: bool) -> bytes:
    """The SSE encoder: one body chunk for queued items, one event per line, or
    (`batches`) per group of `grouped`; each event carries its `id:` cursor when
    `cursors` (the replay window is on)."""
    if not batches:
        return _text_safe(sse_events([line for _, line, _ in items], items[0][0] if cursors else None))
    if cursors:
        chunk = b"".join([b"id: %d\ndata: %s\n\n" % (ident, data) for ident, data in grouped(items)])
    else:
        chunk = b"".join([b"data: " + data + b"\n\n" for _, data in grouped(items)])
    return _text_safe(chunk)


def ws_frames(items: list[Item], batches: bool) -> list[str]:
    """The WebSocket encoder: the text of one frame per line, or (`batches`) per group of
    `grouped`. A text frame carries UTF-8 only: invalid bytes become U+FFFD."""
    if len(items) == 1:  # a group of one is its line (a round trip's reply: no comprehension)
        return [items[0][1].decode("utf-8", "replace")]
    if not batches:
        return [line.decode("utf-8", "replace") for _, line, _ in items]
    return [data.decode("utf-8", "replace") for _, data in grouped(items)]


_LINE_OF = operator.itemgetter(1)
_BATCHABLE_OF = operator.itemgetter(2)


def _joined(group: list[bytes]) -> bytes:
    """A group's frame: its line alone, or the batch of its lines."""
    return group[0] if len(group) == 1 else b"[" + b",".join(group) + b"]"


def _text_safe(chunk: bytes) -> bytes:
    """An SSE chunk with no carriage return: an event-stream reader ends a line at a lone CR,
    which would cut an agent's line that holds one (an agent writing CRLF line ends, inside
    a batch event). A CR becomes a tab: outside a JSON string both are whitespace, inside one
    both are invalid raw, so every line keeps its meaning or stays malformed (the SSE framing
    written here holds none)."""
    return chunk if b"\r" not in chunk else chunk.replace(b"\r", b"\t")
