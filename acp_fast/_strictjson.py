"""The engine's strict JSON reader, on top of the standard library's C scanner.

The pure-Python twin (`_engine_py`) decodes lines with it, and `RawJson.decode_json`
uses it when the compiled twin is not loaded. Policies (the engine's, see `_engine_py`):

* RFC 8259 strict: `NaN`/`Infinity`/`-Infinity` are rejected, a number that overflows a
  double (`1e400`) is rejected; integers of any size are exact (`int`);
* unpaired UTF-16 surrogate escapes (`"\\ud800"`) are accepted as Python's `json` does:
  the `str` holds the lone surrogate;
* errors are `InvalidJson` (a `ValueError`), never `RecursionError`: callers bound
  the nesting first (`depth_exceeds`).

Besides `loads_strict`, the scanner helpers here give the *spans* of an object's
members and of an array's elements (str indices), which the pure twin needs for lazy
payloads and for batches.
"""

from __future__ import annotations

import json
import json.scanner
import math
import re
from json.decoder import scanstring as _scanstring  # type: ignore[attr-defined]
from typing import NoReturn

from .jsontypes import Json

__all__ = [
    "MAX_DEPTH_LIMIT",
    "InvalidJson",
    "ENVELOPE_KEYS",
    "Scanned",
    "loads_strict",
    "loads_bytes",
    "depth_exceeds",
    "scan_value",
    "scan_object",
    "scan_array_spans",
    "skip_ws",
    "ByteOffsets",
    "utf8_json",
]

#: The deepest container nesting either engine twin will decode (``Decoder(max_depth=...)``
#: is at most this). Chosen so that both twins' recursive descents stay far from Python's
#: default recursion limit and fit a 256 KiB thread stack; it is also the nesting bound of
#: :func:`loads_bytes`.
MAX_DEPTH_LIMIT = 512

ENVELOPE_KEYS = frozenset(("jsonrpc", "id", "method", "params", "result", "error"))


class InvalidJson(ValueError):
    """The text is not valid JSON under the engine's policies."""


def _reject_constant(name: str) -> NoReturn:
    raise InvalidJson(f"non-standard constant {name}")


def _parse_float(s: str) -> float:
    f = float(s)
    if math.isinf(f):
        raise InvalidJson("number out of range")
    return f


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_parse_float)
_scan_once = json.scanner.make_scanner(_DECODER)  # type: ignore[arg-type]
_WS = re.compile(r"[ \t\n\r]*")


def skip_ws(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()  # type: ignore[union-attr]


def depth_exceeds(line: bytes, max_depth: int) -> bool:
    """Whether the container nesting of the JSON text `line` goes deeper than `max_depth`.

    Strategy: counting brackets is one C call; only a line with more brackets than the limit
    pays for the exact scan (which skips brackets inside strings).
    """
    if line.count(b"[") + line.count(b"{") <= max_depth:
        return False
    depth = 0
    in_string = False
    escaped = False
    for c in line:
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c == 0x5B or c == 0x7B:
            depth += 1
            if depth > max_depth:
                return True
        elif c == 0x5D or c == 0x7D:
            depth -= 1
    return False


def scan_value(text: str, pos: int) -> tuple[Json, int]:
    """The JSON value starting at `text[pos]` and the index after it."""
    try:
        value, end = _scan_once(text, pos)
        return value, end
    except (InvalidJson, StopIteration, ValueError, RecursionError) as exc:
        raise InvalidJson(str(exc) or "invalid JSON") from None


def loads_strict(text: str) -> Json:
    """`json.loads` with the engine's policies; raises `InvalidJson`."""
    value, end = scan_value(text, skip_ws(text, 0))
    if skip_ws(text, end) != len(text):
        raise InvalidJson("extra data")
    return value


def loads_bytes(data: bytes, max_depth: int = MAX_DEPTH_LIMIT) -> Json:
    """Decode one JSON text given as UTF-8 bytes, nesting at most `max_depth` deep.

    Raises:
        InvalidJson: invalid UTF-8, invalid JSON, or deeper nesting.
    """
    if depth_exceeds(data, max_depth):
        raise InvalidJson("nesting too deep")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidJson("invalid UTF-8") from None
    return loads_strict(text)


class Scanned:
    """Top-level members of one JSON object with their spans (str indices)."""

    __slots__ = ("members", "duplicate")

    def __init__(self) -> None:
        self.members: dict[str, tuple[Json, int, int]] = {}
        self.duplicate = False


def scan_object(text: str, pos: int) -> tuple[Scanned, int]:
    """Scan the object starting at `text[pos] == "{"`; returns members and end index.

    `duplicate` is set when an envelope key (`ENVELOPE_KEYS`) repeats.
    """
    out = Scanned()
    members = out.members
    pos = skip_ws(text, pos + 1)
    if text.startswith("}", pos):
        return out, pos + 1
    while True:
        if not text.startswith('"', pos):
            raise InvalidJson("expected key")
        try:
            key, pos = _scanstring(text, pos + 1, True)
        except ValueError as exc:
            raise InvalidJson(str(exc)) from None
        pos = skip_ws(text, pos)
        if not text.startswith(":", pos):
            raise InvalidJson("expected ':'")
        start = skip_ws(text, pos + 1)
        value, end = scan_value(text, start)
        if key in members and key in ENVELOPE_KEYS:
            out.duplicate = True
        members[key] = (value, start, end)
        pos = skip_ws(text, end)
        if text.startswith(",", pos):
            pos = skip_ws(text, pos + 1)
            continue
        if text.startswith("}", pos):
            return out, pos + 1
        raise InvalidJson("expected ',' or '}'")


def scan_array_spans(
    text: str, pos: int, keep: int = -1
) -> tuple[list[tuple[Json, int, int]], int, int]:
    """Scan the array at `text[pos] == "["`.

    Returns `(items, count, end)`: `(value, start, end)` of the first `keep` elements
    (all of them when `keep` is negative), the number of elements, and the index after
    the array. Elements past `keep` are validated and dropped, so a huge array costs no
    memory per element.
    """
    items: list[tuple[Json, int, int]] = []
    count = 0
    pos = skip_ws(text, pos + 1)
    if text.startswith("]", pos):
        return items, 0, pos + 1
    while True:
        value, end = scan_value(text, pos)
        if keep < 0 or count < keep:
            items.append((value, pos, end))
        count += 1
        pos = skip_ws(text, end)
        if text.startswith(",", pos):
            pos = skip_ws(text, pos + 1)
            continue
        if text.startswith("]", pos):
            return items, count, pos + 1
        raise InvalidJson("expected ',' or ']'")


class ByteOffsets:
    """Maps str indices of a decoded line back to byte offsets (identity for ASCII)."""

    __slots__ = ("text", "ascii")

    def __init__(self, text: str, nbytes: int) -> None:
        self.text = text
        self.ascii = len(text) == nbytes

    def __call__(self, i: int) -> int:
        if self.ascii or i <= 0:
            return i
        return len(self.text[:i].encode("utf-8"))


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def utf8_json(text: str) -> bytes:
    """UTF-8 bytes of JSON text made by `json.dumps(..., ensure_ascii=False)`.

    A lone surrogate (which UTF-8 cannot carry) can only stand inside a JSON string there;
    it is written as its `\\udxxx` escape, as `json.dumps` with `ensure_ascii=True`
    would, so the output is always valid UTF-8 and decodes back to the same `str`.
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(_surrogate_escape, text).encode("utf-8")
