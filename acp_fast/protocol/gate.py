"""The read gate's fast path, in two twins: ``known(update) -> KnownVariant | None``.

The pure twin is :meth:`WireSurface.known_variant` (checks compiled to Python closures);
the compiled twin (``_gate_c.Gate``, Cython) follows the same tables as data
(:meth:`WireSurface.gate_specs`). Both accept exactly the same updates; a differential test
keeps them equal. A connection uses the compiled twin when it runs on the compiled engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .surface import KnownVariant, WireSurface

__all__ = ["Known", "compiled_available", "make_known"]

#: ``known(update)``: the variant when ``update`` is known in the version's shape, else None.
Known = Callable[[Any], "KnownVariant | None"]

try:
    from ._gate_c import Gate as _Gate  # typed by _gate_c.pyi
except ImportError:  # pure-Python install
    _Gate = None  # type: ignore[assignment, misc]

_CACHE: dict[tuple[int, bool, bool], Known] = {}


def compiled_available() -> bool:
    """True when the compiled twin was built."""
    return _Gate is not None


def make_known(surface: WireSurface, *, compiled: bool) -> Known:
    """The fast-path function of ``surface``: compiled twin if asked for and built."""
    use_c = compiled and _Gate is not None
    key = (surface.version, surface.unstable, use_c)
    known = _CACHE.get(key)
    if known is None:
        known = _CACHE[key] = _Gate(surface.gate_specs()).known if use_c else surface.known_variant
    return known
