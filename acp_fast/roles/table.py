"""The frozen handler table a builder hands to each connection it serves, and the
`NOT_HANDLED` a dynamic handler returns to pass a message on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from ..jsontypes import Json

if TYPE_CHECKING:  # pragma: no cover
    from ._hot import Context, SessionUpdate
    from .context import Peer

__all__ = ["NOT_HANDLED", "Handler", "HandlerTable", "Main", "UpdateHandler"]

#: ``fn(params, cx)``: returns the result (or an awaitable of it) for requests.
Handler = Callable[[Json, "Context"], object]
#: ``fn(update, cx)`` for ``session/update``.
UpdateHandler = Callable[["SessionUpdate", "Context"], object]
#: ``main(connection)`` of a client implementation (it gets the ``AcpConnection``).
Main = Callable[["Peer"], Awaitable[object]]


class _NotHandled:
    """The type of `NOT_HANDLED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_HANDLED"


#: What a dynamic handler (:meth:`~acp_fast.roles.AcpConnection.add_dynamic_handler`) returns
#: (synchronously) to pass a message on to the next handler: a later dynamic handler, then
#: the builder's handler, then the connection's default.
NOT_HANDLED: Final = _NotHandled()


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class HandlerTable:
    """Everything a connection needs from its builder, frozen when the connection starts.

    Later changes to the builder do not reach connections already running.

    Attributes:
        version: the implementation's ACP version (1 or 2).
        role: `"agent"`, `"client"` or `"proxy"`: the role of the builder that made it; a
            connection refuses a table of another role (`ValueError`), whose handlers it
            would not serve as that role (an agent's table on a proxy's connection).
        guarded: negotiation and the initialization guard apply.
        info: the `Implementation` object sent as `info`/`clientInfo`/`agentInfo`.
        requests / notifications: method -> handler.
        on_update: the `session/update` handler (read-gated), if any.
        successor_requests / successor_notifications: proxies: handlers of messages that
            arrive from the successor.
        main: a client connector's `main`.
    """

    version: int
    role: str
    guarded: bool = True
    info: Mapping[str, Any] = field(default_factory=_empty)
    requests: Mapping[str, Handler] = field(default_factory=_empty)
    notifications: Mapping[str, Handler] = field(default_factory=_empty)
    on_update: UpdateHandler | None = None
    successor_requests: Mapping[str, Handler] = field(default_factory=_empty)
    successor_notifications: Mapping[str, Handler] = field(default_factory=_empty)
    main: Main | None = field(default=None, compare=False)
