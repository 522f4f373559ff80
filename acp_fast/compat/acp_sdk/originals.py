"""The SDK's own entry points, kept when [`activate`][acp_fast.compat.acp_sdk.activate] replaces them with a drop-in's.

[`install`][acp_fast.compat.acp_sdk.activate.install] records each SDK name it replaces here, and the transport
drop-in's `run_agent` (`connect`) calls the SDK's own `acp.run_agent` through
[`original`][acp_fast.compat.acp_sdk.originals.original] even after it was replaced; this module sits below both, so neither imports
the other for it. It imports nothing (`acp` only when [`original`][acp_fast.compat.acp_sdk.originals.original] is asked for a name
that was never replaced).
"""

from __future__ import annotations

__all__ = ["original", "remember"]

_originals: dict[str, object] = {}


def remember(name: str, value: object) -> None:
    """Record `value` as the SDK's own `acp.<name>` (the first value recorded is kept)."""
    _originals.setdefault(name, value)


def original(name: str) -> object:
    """The SDK's own `acp.<name>` (as it was before [`install`][acp_fast.compat.acp_sdk.activate.install] replaced it);
    a dotted name is an attribute of a submodule (`"http.client.create_http_stream"`)."""
    if name in _originals:
        return _originals[name]
    import importlib

    module, _, attr = f"acp.{name}".rpartition(".")
    return getattr(importlib.import_module(module), attr)
