"""What a handler sees: :class:`Context`, :class:`SessionUpdate`, and request handles.

Every handler of the builder API is called as ``fn(params, cx)`` (``session/update``
handlers as ``fn(update, cx)``); ``cx`` is a :class:`Context`. These objects are made once
per message on the hot path, so they are plain ``__slots__`` classes whose ``__init__`` only
stores what it is given; everything else is computed when read.

``Context`` and ``SessionUpdate`` live in :mod:`acp_fast.roles._hot_py` (the hot path's one
source, compiled as ``_hot_c`` when built) and are re-exported here.

One request handle: every ``send_request`` returns an object of the :class:`Request`
protocol (``id``, ``method``, ``done()``, ``cancel()``, ``detach()``, ``await``), either the
connection's :class:`~acp_fast.jsonrpc.PendingRequest` or a :class:`SentRequest` (a request
whose result is checked or mapped: ``initialize``, session set-up).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from ..jsonrpc import PendingRequest
from ._hot import Context, SessionUpdate

__all__ = ["Context", "Request", "SentRequest", "SessionUpdate"]

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
