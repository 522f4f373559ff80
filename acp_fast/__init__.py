"""acp_fast: a fast Agent Client Protocol (ACP) transport for Python.

The builder API is here: `Agent`, `Client`, `Proxy`, `run_agent_stdio`, `spawn` and
what handlers see (`Context`, `SessionUpdate`, `Request`), plus the one exception
hierarchy (`AcpFastError`). The sans-IO engine (framing, classification, encoding) is in
`acp_fast.engine`, in two twins with one API: a compiled one (Cython over C++ with
simdjson) and a pure-Python one. `acp_fast.IMPLEMENTATION` says which is active (`"c"` or
`"py"`); set `ACP_FAST_NO_EXTENSIONS=1` to force the pure twin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import AcpFastError, DecoderClosedError, EncodeError, JsonRpcError, SendBufferFull

from ._version import __version__

# The engine and the API layer (roles, sessions) are imported on first use only: ``import
# acp_fast`` must stay cheap (start-up budget; the SDK drop-in's activation imports it), so
# these names resolve through ``__getattr__`` below.
# Type checkers see them directly.
if TYPE_CHECKING:  # pragma: no cover
    from .engine import IMPLEMENTATION
    from .roles import (
        AcpConnection,
        Agent,
        Client,
        Context,
        Proxy,
        Request,
        SentRequest,
        SessionUpdate,
        run_agent_stdio,
    )
    from .transport import spawn
_LAZY = {
    "IMPLEMENTATION": "engine",
    "Agent": "roles",
    "Client": "roles",
    "Proxy": "roles",
    "AcpConnection": "roles",
    "Context": "roles",
    "Request": "roles",
    "SentRequest": "roles",
    "SessionUpdate": "roles",
    "run_agent_stdio": "roles",
    "spawn": "transport",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'acp_fast' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"acp_fast.{module}"), name)
    globals()[name] = value
    return value

__all__ = [
    "__version__",
    "IMPLEMENTATION",
    "AcpFastError",
    "DecoderClosedError",
    "EncodeError",
    "JsonRpcError",
    "SendBufferFull",
    "Agent",
    "Client",
    "Proxy",
    "AcpConnection",
    "Context",
    "Request",
    "SentRequest",
    "SessionUpdate",
    "run_agent_stdio",
    "spawn",
]
