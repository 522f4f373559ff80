"""What a role runs on: its stream (`Transport`) and its engine twin (`EngineChoice`).

The builders, routers and the client protocol connector open a JSON-RPC connection the same
way, and so does [`spawn_connection`][acp_fast.roles.AcpConnection.spawn_connection]: through
[`open_connection`][acp_fast.roles.streams.open_connection]. The helpers live here, below all of
them, so that none of those modules imports another for them.
"""

from __future__ import annotations

import importlib
import warnings
import types
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Literal, Union, cast

from .. import engine as _selected
from .. import transport as _transport
from ..jsonrpc import Connection

if TYPE_CHECKING:
    from ..engine import Engine
    from ..engine import Decoder

__all__ = ["EngineChoice", "Transport", "engine_twin", "open_connection", "open_stream", "resolve_engine"]

#: A stream, or an awaitable of one (``spawn(...)``, ``connect_tcp(...)``).
Transport = Union[_transport.Stream, Awaitable[_transport.Stream]]
#: Which engine twin: ``"c"`` (compiled), ``"py"`` (pure), ``None`` (the selected one), or
#: an engine module (tests pass the twins' modules).
EngineChoice = Union[Literal["c", "py"], "Engine", None]


def engine_twin(engine: EngineChoice) -> Engine:
    """The engine twin for `engine` (see `EngineChoice`; `None`: the selected `acp_fast.engine`).

    Raises:
        ValueError: `engine` is none of the choices.
    """
    if engine is None:
        return cast("Engine", _selected)
    if isinstance(engine, types.ModuleType):
        return engine
    if engine in ("py", "c"):
        return cast("Engine", importlib.import_module(f"acp_fast._engine_{engine}"))
    raise ValueError(f"engine must be 'c', 'py', None or an engine module, not {engine!r}")


def resolve_engine(engine: EngineChoice) -> types.ModuleType | None:
    """The engine module for `engine`: [`engine_twin`][acp_fast.roles.streams.engine_twin] typed as a
    module (kept for callers typed by `ModuleType`; new code takes an `Engine`).

    Deprecated: use `engine_twin` (an `Engine`; `None` gives the selected twin). It warns
    (`DeprecationWarning`) and will be removed in a later release.

    Raises:
        ValueError: `engine` is none of the choices.
    """
    warnings.warn("acp_fast.roles.streams.resolve_engine is deprecated: use engine_twin", DeprecationWarning,
                  stacklevel=2)
    return None if engine is None else cast("types.ModuleType", engine_twin(engine))


async def open_stream(transport: Transport) -> _transport.Stream:
    """The stream of `transport` (awaited when it is an awaitable)."""
    if isinstance(transport, _transport.Stream) or hasattr(transport, "attach"):
        return transport  # type: ignore[return-value]
    return await transport


def open_connection(stream: _transport.Stream, engine: EngineChoice = None, lazy: bool = False, *,
                    attach: bool = True, decoder: Decoder | None = None) -> Connection:
    """The JSON-RPC connection on `stream` with the engine twin `engine` (resolved by
    `engine_twin`; `None`: the selected one): the one place a role opens its connection.

    Args:
        stream: the byte stream.
        engine: the engine twin (see `EngineChoice`).
        lazy: decode `params`/`result` only on access (a proxy's frames).
        attach: attach to `stream` now (`False`: a first-frame router hands it over).
        decoder: an engine `Decoder` that already read the start of the stream.
    """
    return Connection(stream, engine=engine_twin(engine), lazy=lazy, attach=attach, decoder=decoder)
