"""The fleet: ACP connections served by any front, their agents run by agent hosts (the `fleet` extra).

| module | what it holds |
|---|---|
| `store` | [`FleetStore`][acp_fast.fleet.FleetStore], the one interface to the shared state (host registry, connection registry, a bounded output stream and a bounded input queue per connection) |
| `redis_store` | [`RedisStore`][acp_fast.fleet.RedisStore], its implementation on Redis >= 7 (`pip install 'acp-fast[fleet]'`; redis-py is imported when a store is made) |
| `front` | [`FleetFront`][acp_fast.fleet.front.FleetFront], the ASGI app of a front (`acp-fast serve --redis URL`): no connection state of its own |
| `host` | [`AgentHost`][acp_fast.fleet.host.AgentHost], an agent host (`acp-fast host --redis URL`): one agent per connection |
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
    InputRead,
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
    "InputRead",
    "RedisStore",
    "StoreError",
    "StoreLimits",
    "StoreUnavailable",
    "UnknownConnection",
]
