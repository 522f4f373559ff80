"""The types of the drop-ins' signatures: the SDK's parameters, made precise.

The SDK annotates its streams and keyword arguments `Any`; the drop-ins say what they
accept. Imported by the drop-ins for their annotations only (under `TYPE_CHECKING`), so
it costs nothing at run time; it names the SDK's types and acp_fast's without importing
either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, TypedDict, Union

if TYPE_CHECKING:
    from acp._transport import Transport
    from acp.connection import StreamObserver

    from ...engine import Engine
    from ...jsontypes import Json
    from ...protocol.guard import InitializationGuard
    from ...transport import Stream
    from .transport import StreamTransport, TransportOptions

__all__ = [
    "ConnectOptions",
    "ConnectionOptions",
    "ConnectionTarget",
    "DropInOptions",
    "FastOptions",
    "MethodHandler",
    "SdkConnectionOptions",
    "SdkStream",
    "SpawnOptions",
]

#: The SDK's ``MethodHandler``: ``handler(method, params, is_notification)`` gives the result.
MethodHandler = Callable[[str, "Json", bool], Awaitable["Json"]]
#: What the SDK's connections take as ``input_stream``: an asyncio ``StreamWriter`` (its
#: ``StreamReader`` then comes as ``output_stream``) or a message-level ``Transport``.
SdkStream = Union[asyncio.StreamWriter, "Transport"]
#: What the connection drop-in also reads: an acp_fast ``Stream``, a :class:`StreamTransport`,
#: or a zero-argument coroutine function returning a ``Stream``.
ConnectionTarget = Union[
    asyncio.StreamWriter, "Transport", "Stream", "StreamTransport", Callable[[], Awaitable["Stream"]]
]


class SdkConnectionOptions(TypedDict, total=False):
    """The keywords the SDK's `AgentSideConnection`/`ClientSideConnection` pass on to its
    `Connection`."""

    observers: list[StreamObserver] | None
    receive_timeout: float | None


class FastOptions(TypedDict, total=False):
    """acp_fast's connection keywords (those of [`acp_fast.jsonrpc.Connection`][acp_fast.jsonrpc.Connection])."""

    engine: Engine | None
    on_invalid: Literal["reply", "skip"] | None
    lazy: bool
    max_line_size: int | None
    max_batch_size: int | None
    max_backlog: int
    max_write_buffer: int


class ConnectionOptions(SdkConnectionOptions, FastOptions, total=False):
    """The connection drop-in's keywords: the SDK's and acp_fast's."""


class DropInOptions(ConnectionOptions, total=False):
    """The keywords of the connection drop-in's `Connection`: also `listening` and `guard`."""

    listening: bool
    guard: InitializationGuard | None


class ConnectOptions(ConnectionOptions, total=False):
    """The keywords of the connection drop-in's `AgentSideConnection`/`ClientSideConnection`."""

    use_unstable_protocol: bool
    strict_initialization: bool


class SpawnOptions(ConnectOptions, total=False):
    """The connection keywords of the connection drop-in's `spawn_*_process`; the transport
    drop-in's `transport_options` are merged into them."""

    transport_options: TransportOptions | None
