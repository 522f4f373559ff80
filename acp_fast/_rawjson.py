"""`RawJson`: the one raw-JSON bytes type shared by both engine twins.

It lives in a module of its own so that either twin can use it without importing the other.
It imports neither twin: [`RawJson.decode_json`][acp_fast._rawjson.RawJson.decode_json] uses the strict reader
(`acp_fast._strictjson`) unless the compiled twin, when it loads, installs its own
decoder with `set_decoder` (both follow the same rules).
"""

from __future__ import annotations

from typing import Callable

from .jsontypes import Json

__all__ = ["RawJson", "set_decoder"]

_decoder: Callable[[bytes], Json] | None = None


def set_decoder(decoder: Callable[[bytes], Json] | None) -> None:
    """Install the function [`RawJson.decode_json`][acp_fast._rawjson.RawJson.decode_json] calls (`None`: the strict reader)."""
    global _decoder
    _decoder = decoder


class RawJson(bytes):
    """Bytes that are already one complete JSON value, spliced into output verbatim.

    Encoders never re-encode a `RawJson`; it may appear at the top of `params`/
    `result`/`data` or anywhere inside them. The caller vouches that it is valid JSON;
    encoders only check that it has no newline (a line-delimited frame cannot carry one).
    Lazy messages hand out their `params`/`result` as `RawJson`.
    """

    __slots__ = ()

    def decode_json(self) -> Json:
        """Decode the value with the engine's strict JSON rules (those of `Decoder`).

        Nesting is bounded by `MAX_DEPTH_LIMIT` (512).

        Raises:
            ValueError: (`acp_fast._strictjson.InvalidJson`) the bytes are not valid JSON.
        """
        decoder = _decoder
        if decoder is None:
            from ._strictjson import loads_bytes

            return loads_bytes(bytes(self))
        return decoder(bytes(self))

    def __repr__(self) -> str:
        return f"RawJson({bytes(self)!r})"
