"""What the remote client's two wires share: the errors, and the bridge between the caller's
stream and the network (a memory pair, backpressure both ways, the tasks, closing).

`_websocket` and `_http` each build a bridge on it; `acp_fast.remote.client`
picks one by the URL's scheme.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar, cast

from ...transport.memory import memory_pair
from ...transport.stream import Stream

__all__ = ["CLOSE_TIMEOUT", "SEND_HIGH_WATER", "SEND_LOW_WATER", "Bridge", "Lane", "RemoteConnectError",
           "RemoteConnectionLost", "RemoteStream"]

logger = logging.getLogger("acp_fast.remote")

#: Bytes of outgoing messages not yet sent above which the bridge stops reading from the
#: connection (the connection's writers then wait) ...
SEND_HIGH_WATER = 256 * 1024
#: ... and below which it reads again.
SEND_LOW_WATER = 64 * 1024
#: Seconds that closing may take: flushing queued messages, then the ``DELETE`` or the
#: WebSocket closing handshake.
CLOSE_TIMEOUT = 3.0

_T = TypeVar("_T")


class RemoteConnectError(ConnectionError):
    """The remote endpoint could not be reached, or refused the WebSocket handshake.

    Attributes:
        status: the HTTP status of a refused handshake (`401`, `403`, ...), else `None`.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RemoteConnectionLost(RemoteConnectError):
    """A remote connection ended on a failure, which the message names. Streamable HTTP: an
    SSE stream refused, or failed with no event id to resume from, or whose resume the server
    refused (409: it cannot resume from the last event seen; 404: the connection is gone),
    or whose resume attempts (`RESUME_DELAYS`) all failed. WebSocket: the socket
    failed, or a ping got no pong within `PING_TIMEOUT`. It is the connection's
    `transport_error` once the stream has ended.

    Attributes:
        status: the HTTP status that refused the resume, else `None`.
    """




class Lane(Generic[_T]):
    """Outgoing items sent in order by one task; `busy` while the head is being sent."""

    __slots__ = ("items", "ready", "busy")

    def __init__(self) -> None:
        self.items: collections.deque[tuple[_T, int]] = collections.deque()
        self.ready = asyncio.Event()
        self.busy = False


class RemoteStream(Stream):
    """The caller's end of the pair (the memory pair's first stream is of this class):
    closing it reaches the bridge even while the bridge is not reading, and `wait_closed()`
    returns once the bridge has ended its network side too."""

    bridge: Bridge

    def close(self) -> None:
        super().close()
        self.bridge.caller_closed()

    async def wait_closed(self) -> None:
        await super().wait_closed()
        await asyncio.shield(self.bridge.done)

    def _eof(self, exc: BaseException | None) -> None:
        # The memory pair ends without an error; the bridge knows why the network side ended.
        super()._eof(exc if exc is not None else self.bridge.failure)


class Bridge:
    """What both wires share: the memory pair, backpressure both ways, the tasks, closing."""

    def __init__(self, kind: str, url: str, max_message_size: int) -> None:
        self._url = url
        self._max = max_message_size
        a, self._b = memory_pair(first=RemoteStream)
        self._a = cast(RemoteStream, a)
        self._a.bridge = self
        self._a.set_extra_info("url", url)
        self._a.set_extra_info("transport", kind)
        #: Set once the bridge has ended (its tasks and its network side).
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._draining = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._lanes: list[Lane[Any]] = []
        self._queued = 0
        self._paused = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closer: asyncio.Task[None] | None = None
        #: Why the network side failed (set before the EOF it causes), else ``None``.
        self.failure: RemoteConnectionLost | None = None

    def start(self) -> Stream:
        """Attach to the bridge's end of the pair; returns the caller's end."""
        self._b.attach(self._on_data, self._on_eof, self._on_writable)
        return self._a

    # -- the connection's side ----------------------------------------------------------

    def _on_data(self, data: bytes) -> None:
        raise NotImplementedError

    def _on_eof(self, exc: BaseException | None) -> None:
        self._shutdown("the connection closed the stream", flush=True)

    def caller_closed(self) -> None:
        """The caller closed its end: read what it wrote before (reading again if the
        network's backlog had paused it); its EOF follows that and starts the closing."""
        self._draining = True
        if self._paused:
            self._paused = False
            self._b.resume_reading()

    def _on_writable(self, writable: bool) -> None:
        if writable:
            self._writable.set()
        else:
            self._writable.clear()

    async def _until_writable(self) -> None:
        """Wait while the connection is not reading what the bridge gave it."""
        if not self._writable.is_set():
            await self._writable.wait()

    def _deliver(self, data: bytes) -> None:
        """Give bytes (whole lines) to the connection."""
        self._b.write(data)

    # -- outgoing queue -----------------------------------------------------------------

    def _enqueue(self, lane: Lane[_T], item: _T, size: int) -> None:
        lane.items.append((item, size))
        lane.ready.set()
        self._idle.clear()
        self._queued += size
        if not self._paused and not self._draining and self._queued > SEND_HIGH_WATER:
            self._paused = True
            self._b.pause_reading()

    async def _drain(self, lane: Lane[_T], send: Callable[[_T], Awaitable[None]]) -> None:
        """Send `lane`'s items in order with `await send(item)`, forever."""
        while True:
            while not lane.items:
                lane.ready.clear()
                if not any(other.items or other.busy for other in self._lanes):
                    self._idle.set()
                await lane.ready.wait()
            item, size = lane.items[0]
            lane.busy = True
            try:
                await send(item)
            finally:
                lane.busy = False
                lane.items.popleft()
                self._queued -= size
                if self._paused and self._queued <= SEND_LOW_WATER:
                    self._paused = False
                    self._b.resume_reading()

    # -- tasks and closing --------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            logger.error("remote transport task failed (%s)", self._url, exc_info=exc)
            self._lost(f"failed: {exc!r}")

    def _lost(self, reason: str) -> None:
        """The network side ended: EOF to the connection now, then close."""
        if self._closer is None:
            logger.info("remote ACP connection to %s ended: %s", self._url, reason)
        self._b.close()
        self._shutdown(reason, flush=False)

    def _fatal(self, reason: str) -> None:
        logger.error("remote ACP connection to %s: %s", self._url, reason)
        self._lost(reason)

    def _shutdown(self, reason: str, *, flush: bool) -> None:
        if self._closer is None:
            self._closer = asyncio.get_running_loop().create_task(self._close(flush))

    async def _close(self, flush: bool) -> None:
        try:
            flushed = True
            if flush and self._lanes:
                try:
                    await asyncio.wait_for(self._idle.wait(), CLOSE_TIMEOUT)
                except asyncio.TimeoutError:
                    flushed = False
                    logger.warning("remote ACP connection to %s: closing with unsent messages", self._url)
            self._b.close()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            try:
                await asyncio.wait_for(self._close_network(flushed), CLOSE_TIMEOUT + 1.0)
            except (asyncio.TimeoutError, Exception) as exc:  # best effort: the peer may be gone
                logger.debug("remote ACP connection to %s: closing the network side: %r", self._url, exc)
        finally:
            self._b.close()
            if not self.done.done():
                self.done.set_result(None)

    async def _close_network(self, flushed: bool) -> None:
        """End the network side (`flushed`: everything queued was sent)."""
        raise NotImplementedError
