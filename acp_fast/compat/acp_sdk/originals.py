"""The SDK's own entry points, kept when :mod:`.activate` replaces them with a drop-in's.

:func:`~.activate.install` records each SDK name it replaces here, and the transport
drop-in's ``run_agent`` (:mod:`.connect`) calls the SDK's own ``acp.run_agent`` through
:func:`original` even after it was replaced; this module sits below both, so neither imports
the other for it. It imports nothing (``acp`` only when :func:`original` is asked for a name
that was never replaced).
"""

from __future__ import annotations

__all__ = ["original", "remember"]

_originals: dict[str, object] = {}


def remember(name: str, value: object) -> None:
    """Record ``value`` as the SDK's own ``acp.<name>`` (the first value recorded is kept)."""
    _originals.setdefault(name, value)


def original(name: str) -> object:
    """The SDK's own ``acp.<name>`` (as it was before :func:`~.activate.install` replaced it);
    a dotted name is an attribute of a submodule (``"http.client.create_http_stream"``)."""
    if name in _originals:
        return _originals[name]
    import importlib

    module, _, attr = f"acp.{name}".rpartition(".")
    return getattr(importlib.import_module(module), attr)
