"""What a handler sees: :class:`Context`, :class:`SessionUpdate`, and request handles.

Every handler of the builder API is called as ``fn(params, cx)`` (``session/update``
handlers as ``fn(update, cx)``); ``cx`` is a :class:`Context`. These objects are made once
per message on the hot path, so they are plain ``__slots__`` classes whose ``__init__`` only
stores what it is given; everything else is computed when read.

One request handle: every ``send_request`` returns an object of the :class:`Request`
protocol (``id``, ``method``, ``done()``, ``cancel()``, ``detach()``, ``await``), either the
connection's :class:`~acp_fast.jsonrpc.PendingRequest` or a :class:`SentRequest` (a request
whose result is checked or mapped: ``initialize``, session set-up).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from ..jsonrpc import PendingRequest, RequestContext, Responder
from ..protocol.surface import KnownVariant, SessionUpdateView
from ._hot import ContextRecord, UpdateRecord

if TYPE_CHECKING:  # pragma: no cover
    from .connection import AcpConnection

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


class SessionUpdate(UpdateRecord):
    """One received ``session/update``, passed through the read gate.

    Attributes:
        session_id: ``params["sessionId"]`` (``None`` if absent).
        kind: the ``sessionUpdate`` value (``""`` if absent or not a string).
        payload: the ``update`` object, untouched (same identity).
        params: the notification's params, unchanged.
    """

    # Made once per received update: the fields live in UpdateRecord (compiled slots
    # when built), constructed as SessionUpdate(session_id, kind, payload, params, gate)
    # where gate is the fast path's KnownVariant or the full read gate's view.
    __slots__ = ()

    @property
    def known(self) -> bool:
        """True when the update has the negotiated version's shape; anything else is
        untyped passthrough (store, forward or display it; never bind it to a type)."""
        gate = self._gate
        return type(gate) is KnownVariant or bool(gate.known)

    @property
    def view(self) -> SessionUpdateView:
        """The :class:`~acp_fast.protocol.surface.SessionUpdateView` of the negotiated
        version (built on first access for known updates)."""
        gate = self._gate
        if type(gate) is KnownVariant:
            gate = self._gate = gate.view(self.payload)
        assert isinstance(gate, SessionUpdateView)
        return gate

    @property
    def passthrough(self) -> bool:
        """True for unknown, other-version or malformed updates: keep them raw."""
        return not self.known

    def __repr__(self) -> str:
        return f"SessionUpdate({self.session_id!r}, {self.kind!r}, {self.view.status})"


class Context(ContextRecord):
    """What a handler gets besides ``params``: the message and the way back to the peer.

    Attributes:
        connection: the :class:`~acp_fast.roles.AcpConnection` the message came in on.
        request: the jsonrpc :class:`~acp_fast.jsonrpc.RequestContext` (``None`` for
            notifications).
        message: the jsonrpc ``Message`` (the request's, for requests).
    """

    # Constructed as Context(connection, request, message): the fields live in
    # ContextRecord (compiled slots when built); this class holds the behaviour.
    __slots__ = ()
    connection: AcpConnection
    request: RequestContext | None
    message: Any

    @property
    def method(self) -> str:
        return self.message.method  # type: ignore[no-any-return]

    @property
    def id(self) -> int | str | None:
        """The request id (``None`` for notifications)."""
        return None if self.request is None else self.request.id

    @property
    def version(self) -> int:
        """The ACP version of the implementation handling the message."""
        return self.connection.version

    # -- cancellation (requests) ----------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once the peer sent ``$/cancel_request`` for this request."""
        return self.request is not None and self.request.cancelled

    async def wait_cancelled(self) -> None:
        """Return when the peer cancels this request.

        Raises:
            RuntimeError: called for a notification.
        """
        if self.request is None:
            raise RuntimeError("notifications cannot be cancelled")
        await self.request.wait_cancelled()

    def raise_if_cancelled(self) -> None:
        """Raise ``JsonRpcError`` -32800 if the peer cancelled this request."""
        if self.request is not None:
            self.request.raise_if_cancelled()

    async def run_until_cancelled(self, aw: Awaitable[_T]) -> _T:
        """Await ``aw`` unless the peer cancels first (then -32800 is raised)."""
        if self.request is None:
            return await aw
        return await self.request.run_until_cancelled(aw)

    def defer(self) -> Responder:
        """Answer later through the returned :class:`~acp_fast.jsonrpc.Responder`.

        Raises:
            RuntimeError: for notifications, and for the initializing request of a guarded
                connection (its handler returns the result so the guard can check it).
        """
        if self.request is None:
            raise RuntimeError("notifications are not answered")
        if self.connection.manages_initialize and self.method == self.connection.guard.init_method:
            raise RuntimeError("initialize handlers return their result (the guard checks it)")
        return self.request.defer()

    # -- sending back (the connection's methods) -----------------------------------------

    def send_request(self, method: str, params: Any = None, *, passthrough: bool = False,
                     timeout: float | None = None) -> Request[Any]:
        """See :meth:`AcpConnection.send_request`."""
        return self.connection.send_request(method, params, passthrough=passthrough, timeout=timeout)

    def send_notification(self, method: str, params: Any = None, *, passthrough: bool = False) -> bool:
        """See :meth:`AcpConnection.send_notification`."""
        return self.connection.send_notification(method, params, passthrough=passthrough)

    def send_session_update(self, session_id: str, update: dict[str, Any], *,
                            passthrough: bool = False, **fields: Any) -> bool:
        """See :meth:`AcpConnection.send_session_update`."""
        if passthrough or fields:
            return self.connection.send_session_update(session_id, update, passthrough=passthrough, **fields)
        return self.connection.send_session_update(session_id, update)  # the hot path: no kwargs

    async def drain(self) -> None:
        """Wait while the peer is not reading what we send (see :meth:`AcpConnection.drain`)."""
        await self.connection.drain()

    def start_task(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` in the background, owned by the connection (see
        :meth:`AcpConnection.start_task`)."""
        return self.connection.start_task(coro)

    # proxies only (a ProxyConnection): forward to the successor
    def send_to_successor(self, method: str, params: Any = None, *, passthrough: bool = False,
                          timeout: float | None = None) -> Request[Any]:
        """Proxy: send a request to the successor (see ``ProxyConnection``).

        Raises:
            TypeError: the connection is not a proxy's.
        """
        return self.connection.send_to_successor(method, params, passthrough=passthrough, timeout=timeout)

    def notify_successor(self, method: str, params: Any = None, *, passthrough: bool = False) -> bool:
        """Proxy: send a notification to the successor (see ``ProxyConnection``).

        Raises:
            TypeError: the connection is not a proxy's.
        """
        return self.connection.notify_successor(method, params, passthrough=passthrough)

    def __repr__(self) -> str:
        return f"<Context {self.method!r} v{self.version}>"
