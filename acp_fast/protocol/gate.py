"""The read gate's fast path, in two twins: `known(update) -> KnownVariant | None`.

The pure twin is [`WireSurface.known_variant`][acp_fast.protocol.surface.WireSurface.known_variant] (checks compiled to Python closures);
the compiled twin (`_gate_c.Gate`, Cython) follows the same tables as data
([`WireSurface.gate_specs`][acp_fast.protocol.surface.WireSurface.gate_specs]). Both accept exactly the same updates; a differential test
keeps them equal. The hot path (`acp_fast.roles._hot`) holds a [`Gate`][acp_fast.protocol.gate.Gate] object and
calls its `known`: the compiled hot path holds the compiled twin and calls it at C level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .surface import KnownVariant, WireSurface

__all__ = ["Gate", "Known", "SurfaceGate", "compiled_available", "make_gate", "make_known"]

#: ``known(update)``: the variant when ``update`` is known in the version's shape, else None.
Known = Callable[[Any], "KnownVariant | None"]

try:
    from ._gate_c import Gate as _Gate  # typed by _gate_c.pyi
except ImportError:  # pure-Python install
    _Gate = None  # type: ignore[assignment, misc]

_CACHE: dict[tuple[int, bool, bool], Gate] = {}


class Gate(Protocol):
    """A version's read gate as an object: what the hot path holds (either twin)."""

    def known(self, update: Any, /) -> KnownVariant | None:
        """The variant when `update` is known in the version's shape, else None."""
        ...


class SurfaceGate:
    """The pure twin as a [`Gate`][acp_fast.protocol.gate.Gate]: `known` is the surface's `known_variant`."""

    __slots__ = ("known",)

    def __init__(self, surface: WireSurface) -> None:
        self.known: Known = surface.known_variant


def compiled_available() -> bool:
    """True when the compiled twin was built."""
    return _Gate is not None


def make_gate(surface: WireSurface, *, compiled: bool) -> Gate:
    """The [`Gate`][acp_fast.protocol.gate.Gate] of `surface`: the compiled twin if asked for and built (one per
    version, shared)."""
    use_c = compiled and _Gate is not None
    key = (surface.version, surface.unstable, use_c)
    gate = _CACHE.get(key)
    if gate is None:
        gate = _CACHE[key] = _Gate(surface.gate_specs()) if use_c else SurfaceGate(surface)
    return gate


def make_known(surface: WireSurface, *, compiled: bool) -> Known:
    """The fast-path function of `surface`: `make_gate(surface, compiled=…).known`."""
    return make_gate(surface, compiled=compiled).known
