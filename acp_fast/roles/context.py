"""The lowest layer of the builder API: request handles and what a handler's peer offers.

What a handler sees, `Context` and `SessionUpdate`, lives in `acp_fast.roles._hot_py`
(the hot path's one source, compiled as `_hot_c` when built); this module holds the types
they refer to, so that nothing here imports the connection:

* [`Peer`][acp_fast.roles.context.Peer]: the connection surface a `Context` and the session helpers use (an
  [`AcpConnection`][acp_fast.roles.AcpConnection] is one);
* one request handle: every `send_request` returns an object of the [`Request`][acp_fast.roles.context.Request]
protocol (`id`, `method`, `done()`, `cancel()`, `detach()`, `await`), either the
connection's [`PendingRequest`][acp_fast.jsonrpc.PendingRequest] or a [`SentRequest`][acp_fast.roles.context.SentRequest] (a request
  whose result is checked or mapped: `initialize`, session set-up).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Generic, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

from ..jsonrpc import PendingRequest
from ..jsontypes import Json, JsonObject, RequestId
from ..protocol.guard import InitializationGuard
from ..protocol.profile import VersionProfile

__all__ = ["V1", "V2", "Deferred", "Peer", "PeerSender", "Request", "SentRequest", "SessionUpdateSender", "SuccessorPeer", "Version",
           "mapped_request"]

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)

#: ACP protocol version 1, as a type: ``ClientConnection[V1]`` is a v1 client's connection.
V1: TypeAlias = Literal[1]
#: ACP protocol version 2, as a type: ``ClientConnection[V2]`` is a v2 client's connection.
V2: TypeAlias = Literal[2]
#: The version parameter of the builders and connections (``V1``, ``V2``, or ``int`` where a
#: router or connector picks it at run time).
Version = TypeVar("Version", bound=int, covariant=True)


@runtime_checkable
class Request(Protocol[_T_co]):
    """The one request-handle surface (`PendingRequest` and `SentRequest` both have it).

    `await` it for the result; `cancel()` sends `$/cancel_request` once (the handle
    still resolves with the peer's answer); `detach()` forgets the request.
    """

    @property
    def id(self) -> RequestId | None:
        """The request's id (`None` for a locally answered request)."""

    @property
    def method(self) -> str:
        """The request's method."""

    def done(self) -> bool:
        """True once the request is answered, failed, timed out or detached."""

    def cancel(self) -> bool:
        """Ask the peer to cancel (`$/cancel_request`, sent once); the handle still resolves.

        Returns:
            False when nothing was sent (already answered, detached or cancelled).
        """

    def detach(self) -> None:
        """Forget the request: no `$/cancel_request`; awaiting it raises `CancelledError`."""

    def __await__(self) -> Generator[Any, None, _T_co]: ...


class Deferred(Generic[_T]):
    """What a request handler returns when the request is answered later, through the
    [`Responder`][acp_fast.jsonrpc.Responder] of `cx.defer()` (`AgentSession.prompt` returns
    one): the connection sends nothing for it.

    Generic in the result the answer carries, so that a handler registered with a typed
    method descriptor type-checks: `AgentSession.prompt` gives a
    `Deferred[PromptResponse]` for a `session/prompt` handler. Returning one without
    having deferred the request is a bug (the request would never be answered by it).
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "Deferred()"


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" noise


class SentRequest(Generic[_T]):
    """A sent request whose result is checked or mapped (initialize, session set-up).

    `await` it for the mapped result. The check runs even if nobody awaits (so the
    initialization guard always learns the outcome). Cancelling the awaiting task sends
    `$/cancel_request` once, like [`PendingRequest`][acp_fast.jsonrpc.PendingRequest].

    Attributes:
        pending: the underlying request handle (`None` for a locally answered request).
        method: the request's method.
    """

    __slots__ = ("_task", "method", "pending")

    def __init__(self, pending: PendingRequest | None, coro: Coroutine[object, object, _T],
                 method: str = "") -> None:
        self.pending = pending
        self.method = pending.method if pending is not None else method
        self._task: asyncio.Future[_T] = asyncio.ensure_future(coro)
        self._task.add_done_callback(_consume)

    @property
    def id(self) -> int | None:
        """The id we allocated (`None` for a locally answered request)."""
        return None if self.pending is None else self.pending.id

    def done(self) -> bool:
        """True once the mapped result or the error is there, or the request was detached."""
        return self._task.done()

    def cancel(self) -> bool:
        """Ask the peer to cancel (`$/cancel_request`); the handle still resolves."""
        return False if self.pending is None else self.pending.cancel()

    def detach(self) -> None:
        """Forget the request: no `$/cancel_request`; awaiting raises `CancelledError`."""
        if self.pending is not None:
            self.pending.detach()
        self._task.cancel()

    async def _wait(self) -> _T:
        try:
            return await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if not self._task.done():
                self.cancel()
            raise

    def __await__(self) -> Generator[Any, None, _T]:
        return self._wait().__await__()

    def __repr__(self) -> str:
        return f"<SentRequest id={self.id} method={self.method!r} done={self.done()}>"


def mapped_request(pending: Request[Json], fn: Callable[[Json], _T], settled: Callable[[], Awaitable[None]] | None
                   ) -> SentRequest[_T]:
    """A sent request whose result is mapped by `fn` (what every `mapped_request` of a
    connection or of a proxy's successor returns).

    Args:
        pending: the sent request (never `initialize`: a plain handle).
        settled: awaited before mapping (`None`: not): e.g. the JSON-RPC connection's
            `settled`, which waits until the handlers of every notification received before
            the response have finished (a resume's replayed updates).
    """
    assert isinstance(pending, PendingRequest)  # never initialize

    async def mapped() -> _T:
        result = await pending
        if settled is not None:
            await settled()
        return fn(result)

    return SentRequest(pending, mapped())


class SessionUpdateSender(Protocol):
    """`send_session_update(session_id, update, *, passthrough=False, **fields)` of a
    connection: sends `session/update` `{"sessionId", "update", …fields}` through the
    write guard; returns False when it was dropped (see `AcpConnection.send_session_update`)."""

    def __call__(self, session_id: str, update: JsonObject, passthrough: bool = False, **fields: Json) -> bool:
        """Send one `session/update`."""


class PeerSender(SessionUpdateSender, Protocol):
    """What a handler's `cx` sends through: the connection's `Sender` (`acp_fast.roles._hot_py`)."""

    def plain(self, session_id: str, update: JsonObject) -> bool:
        """`self(session_id, update)` without options (the hot path of `cx.send_session_update`)."""


class Peer(Protocol):
    """What a handler's `cx.connection` offers (an `AcpConnection` or `ProxyConnection`)."""

    @property
    def version(self) -> int:
        """The ACP version of the implementation (1 or 2)."""

    @property
    def profile(self) -> VersionProfile:
        """What differs between versions, as data."""

    @property
    def closed(self) -> asyncio.Future[None]:
        """Resolves once the connection and its stream are closed."""

    @property
    def guard(self) -> InitializationGuard:
        """The connection's [`InitializationGuard`][acp_fast.protocol.guard.InitializationGuard]."""

    @property
    def manages_initialize(self) -> bool:
        """True when this side answers `initialize` itself (negotiation applies)."""

    def initializes(self, method: str) -> bool:
        """Whether `method` is the request that initializes this side (`initialize`;
        for a proxy `_proxy/initialize` in either spelling)."""

    def send_request(self, method: str, params: Json = None, *, passthrough: bool = False,
                     timeout: float | None = None) -> Request[Json]:
        """Send a request through the guards; returns its handle (`await` it for the result)."""

    def send_notification(self, method: str, params: Json = None, *, passthrough: bool = False) -> bool:
        """Send a notification through the guards; returns False when it was dropped."""

    @property
    def send_session_update(self) -> SessionUpdateSender:
        """Send `session/update` `{"sessionId", "update", …fields}` through the write guard."""

    @property
    def sender(self) -> PeerSender:
        """The connection's outgoing side (requests, notifications, session updates)."""

    async def drain(self) -> None:
        """Write what is queued and wait while the peer is not reading (backpressure)."""

    def start_task(self, coro: Coroutine[object, object, _T]) -> asyncio.Task[_T]:
        """Run `coro` in the background, owned by the connection (cancelled when it closes)."""


class SuccessorPeer(Peer, Protocol):
    """What a proxy's handler reaches through `cx.proxy` (a `ProxyConnection`): a
    [`Peer`][acp_fast.roles.context.Peer] that also sends to its successor."""

    def send_to_successor(self, method: str, params: Json = None, *, passthrough: bool = False,
                          timeout: float | None = None) -> Request[Json]:
        """Send a request to the successor (wrapped in `_proxy/successor`)."""

    def notify_successor(self, method: str, params: Json = None, *, passthrough: bool = False) -> bool:
        """Send a notification to the successor (wrapped in `_proxy/successor`)."""
