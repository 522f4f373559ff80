"""What a role runs on: its stream (`Transport`) and its engine twin (`EngineChoice`).

The builders, routers and the client protocol connector open a JSON-RPC connection the same
way, and so does [`spawn_connection`][acp_fast.roles.AcpConnection.spawn_connection]; the helpers live
here, below all of them, so that none of those modules imports another for them.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Awaitable
from typing import Literal, Union

from .. import transport as _transport

__all__ = ["EngineChoice", "Transport", "open_stream", "resolve_engine"]

#: A stream, or an awaitable of one (``spawn(...)``, ``connect_tcp(...)``).
Transport = Union[_transport.Stream, Awaitable[_transport.Stream]]
#: Which engine twin: ``"c"`` (compiled), ``"py"`` (pure), ``None`` (the selected one), or
#: an engine module (tests pass the twins' modules).
EngineChoice = Union[Literal["c", "py"], types.ModuleType, None]


def resolve_engine(engine: EngineChoice) -> types.ModuleType | None:
    """The engine module for `engine` (see `EngineChoice`).

    Raises:
        ValueError: `engine` is none of the choices.
    """
    if engine is None or isinstance(engine, types.ModuleType):
        return engine
    if engine in ("py", "c"):
        return importlib.import_module(f"acp_fast._engine_{engine}")
    raise ValueError(f"engine must be 'c', 'py', None or an engine module, not {engine!r}")


async def open_stream(transport: Transport) -> _transport.Stream:
    """The stream of `transport` (awaited when it is an awaitable)."""
    if isinstance(transport, _transport.Stream) or hasattr(transport, "attach"):
        return transport  # type: ignore[return-value]
    return await transport
