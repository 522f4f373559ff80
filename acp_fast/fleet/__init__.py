"""The fleet: ACP connections served by any front, their agents run by agent hosts (the `fleet` extra).

This package holds the fleet's shared state so far: [`FleetStore`][acp_fast.fleet.FleetStore],
the one interface to it (host registry, connection registry, a bounded output stream and a
bounded input queue per connection), and its Redis implementation,
[`RedisStore`][acp_fast.fleet.RedisStore] (`pip install 'acp-fast[fleet]'`; redis-py is
imported when a store is made).
"""

from __future__ import annotations

from .redis_store import DEFAULT_PREFIX, RedisStore
from .store import (
    ALL_STREAMS,
    INIT_ROUTE,
    STREAM_START,
    ConnectionEnded,
    CursorOutOfWindow,
    Entry,
    FleetStore,
    HostState,
    InputQueueFull,
    StoreError,
    StoreLimits,
    StoreUnavailable,
    UnknownConnection,
)

__all__ = [
    "ALL_STREAMS",
    "DEFAULT_PREFIX",
    "INIT_ROUTE",
    "STREAM_START",
    "ConnectionEnded",
    "CursorOutOfWindow",
    "Entry",
    "FleetStore",
    "HostState",
    "InputQueueFull",
    "RedisStore",
    "StoreError",
    "StoreLimits",
    "StoreUnavailable",
    "UnknownConnection",
]
