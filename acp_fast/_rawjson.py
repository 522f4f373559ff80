"""``RawJson``: the one raw-JSON bytes type shared by both engine twins.

It lives in a module of its own so that the compiled twin can use it without importing the
pure-Python twin (and its ``json``/``re`` machinery) at start-up.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RawJson"]


class RawJson(bytes):
    """Bytes that are already one complete JSON value, spliced into output verbatim.

    Encoders never re-encode a ``RawJson``; it may appear at the top of ``params``/
    ``result``/``data`` or anywhere inside them. The caller vouches that it is valid JSON;
    encoders only check that it has no newline (a line-delimited frame cannot carry one).
    Lazy messages hand out their ``params``/``result`` as ``RawJson``.
    """

    __slots__ = ()

    def decode_json(self) -> Any:
        """Decode the value with the engine's strict JSON rules (those of ``Decoder``)."""
        from ._engine_py import _loads_strict

        return _loads_strict(self.decode("utf-8"))

    def __repr__(self) -> str:
        return f"RawJson({bytes(self)!r})"
