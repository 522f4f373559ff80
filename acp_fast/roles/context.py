"""The lowest layer of the builder API: request handles and what a handler's peer offers.

What a handler sees, ``Context`` and ``SessionUpdate``, lives in :mod:`acp_fast.roles._hot_py`
(the hot path's one source, compiled as ``_hot_c`` when built); this module holds the types
they refer to, so that nothing here imports the connection:

* :class:`Peer`: the connection surface a ``Context`` and the session helpers use (an
  :class:`~acp_fast.roles.AcpConnection` is one);
* one request handle: every ``send_request`` returns an object of the :class:`Request`
protocol (``id``, ``method``, ``done()``, ``cancel()``, ``detach()``, ``await``), either the
connection's :class:`~acp_fast.jsonrpc.PendingRequest` or a :class:`SentRequest` (a request
  whose result is checked or mapped: ``initialize``, session set-up).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from ..jsonrpc import PendingRequest
from ..protocol.guard import InitializationGuard

__all__ = ["Peer", "Request", "SentRequest"]

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)


@runtime_checkable
class Request(Protocol[_T_co]):
    """The one request-handle surface (``PendingRequest`` and ``SentRequest`` both have it).

    ``await`` it for the result; ``cancel()`` sends ``$/cancel_request`` once (the handle
    still resolves with the peer's answer); ``detach()`` forgets the request.
    """

    @property
    def id(self) -> Any: ...

    @property
    def method(self) -> str: ...

    def done(self) -> bool: ...

    def cancel(self) -> bool: ...

    def detach(self) -> None: ...

    def __await__(self) -> Generator[Any, None, _T_co]: ...


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" noise


class SentRequest(Generic[_T]):
    """A sent request whose result is checked or mapped (initialize, session set-up).

    ``await`` it for the mapped result. The check runs even if nobody awaits (so the
    initialization guard always learns the outcome). Cancelling the awaiting task sends
    ``$/cancel_request`` once, like :class:`~acp_fast.jsonrpc.PendingRequest`.

    Attributes:
        pending: the underlying request handle (``None`` for a locally answered request).
        method: the request's method.
    """

    __slots__ = ("_task", "method", "pending")

    def __init__(self, pending: PendingRequest | None, coro: Coroutine[Any, Any, _T],
                 method: str = "") -> None:
        self.pending = pending
        self.method = pending.method if pending is not None else method
        self._task: asyncio.Future[_T] = asyncio.ensure_future(coro)
        self._task.add_done_callback(_consume)

    @property
    def id(self) -> int | None:
        """The id we allocated (``None`` for a locally answered request)."""
        return None if self.pending is None else self.pending.id

    def done(self) -> bool:
        return self._task.done()

    def cancel(self) -> bool:
        """Ask the peer to cancel (``$/cancel_request``); the handle still resolves."""
        return False if self.pending is None else self.pending.cancel()

    def detach(self) -> None:
        """Forget the request: no ``$/cancel_request``; awaiting raises ``CancelledError``."""
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


class Peer(Protocol):
    """What a handler's ``cx.connection`` offers (an ``AcpConnection`` or ``ProxyConnection``)."""

    @property
    def version(self) -> int: ...

    @property
    def guard(self) -> InitializationGuard: ...

    @property
    def manages_initialize(self) -> bool: ...

    def initializes(self, method: str) -> bool: ...

    def send_request(self, method: str, params: Any = None, *, passthrough: bool = False,
                     timeout: float | None = None) -> Request[Any]: ...

    def send_notification(self, method: str, params: Any = None, *, passthrough: bool = False) -> bool: ...

    def send_session_update(self, session_id: str, update: dict[str, Any], *,
                            passthrough: bool = False, **fields: Any) -> bool: ...

    def update_sender(self, session_id: str, update: dict[str, Any]) -> bool: ...

    async def drain(self) -> None: ...

    def start_task(self, coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]: ...

    def send_to_successor(self, method: str, params: Any = None, *, passthrough: bool = False,
                          timeout: float | None = None) -> Request[Any]: ...

    def notify_successor(self, method: str, params: Any = None, *, passthrough: bool = False) -> bool: ...
