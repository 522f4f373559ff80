"""Reply bookkeeping shared by both engine twins (pure logic, not on the hot path).

Both `_engine_py` and `_engine_c` export these very objects, so batch semantics can
never drift between the twins. The rules are `notes/protocol.md` §1.3 and §2:

* a standalone malformed value is answered with its code and `"id": null`, unless it is
  response-shaped (a response must never be answered);
* in a batch, every valid request and every malformed entry that is not response-shaped
  gets a *slot*; notifications and responses get none;
* a batch with no slot gets no reply at all (never an empty array);
* otherwise one array holding one response per slot, in source order, is written once
  every slot is filled; a request whose handler dropped its responder is filled with a
  -32603 fallback so its siblings are not stranded.

This module imports nothing from the engines (they import it), and encodes its few error
lines itself (a lone surrogate in an echoed method or id is written as its escape).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from ._kinds import MALFORMED as _MALFORMED
from ._kinds import REQUEST as _REQUEST
from ._strictjson import utf8_json
from .errors import DEFAULT_MESSAGES, INTERNAL_ERROR, PARSE_ERROR

__all__ = ["BatchReply", "error_reply", "MAX_ECHOED_LINE"]

#: -32700 replies echo the offending line in ``data.line``, cut to this many bytes so a
#: huge bad line cannot make an equally huge reply.
MAX_ECHOED_LINE = 4096


def _error_line(code: int, data: Any, ident: Any = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": DEFAULT_MESSAGES.get(code, "Error")}
    if data is not None:
        error["data"] = data
    return utf8_json(json.dumps(
        {"jsonrpc": "2.0", "id": ident, "error": error}, separators=(",", ":"), ensure_ascii=False
    )) + b"\n"


def error_reply(malformed: Any) -> bytes | None:
    """The line answering a `Malformed` value, or `None` if it must not be answered.

    -32700 carries `{"line": <the raw line, at most MAX_ECHOED_LINE bytes>}`; -32600
    carries the short `reason` as `data`, so the peer learns which rule failed. The id is
    always `null`: an invalid envelope has no trustworthy id.
    """
    if malformed.response_shaped:
        return None
    if malformed.code == PARSE_ERROR:
        line = malformed.raw[:MAX_ECHOED_LINE].decode("utf-8", "replace")
        return _error_line(PARSE_ERROR, {"line": line})
    return _error_line(malformed.code, malformed.reason)


class BatchReply:
    """Response slots of one incoming batch and the assembly of its reply array.

    Create one per `Batch` frame. `slot(i)` tells whether entry `i` needs an
    answer; malformed call-shaped entries are pre-filled with their -32600 error. Fill each
    request's slot with its encoded response line (`encode_result`/`encode_error`);
    the first fill wins. When [`complete`][acp_fast._replies.BatchReply.complete], [`encode`][acp_fast._replies.BatchReply.encode] returns the one reply line,
    or `None` when the batch needs no reply at all.
    """

    __slots__ = ("_entries", "_slot_of", "_lines", "_pending")

    def __init__(self, batch: Any) -> None:
        entries: Sequence[Any] = batch.entries
        slot_of: dict[int, int] = {}
        lines: list[bytes | None] = []
        pending = 0
        for i, entry in enumerate(entries):
            kind = entry.kind
            if kind == _REQUEST:
                slot_of[i] = len(lines)
                lines.append(None)
                pending += 1
            elif kind == _MALFORMED and not entry.response_shaped:
                slot_of[i] = len(lines)
                lines.append(error_reply(entry))
        self._entries = entries
        self._slot_of = slot_of
        self._lines = lines
        self._pending = pending

    @property
    def needs_reply(self) -> bool:
        """False when no entry gets a slot (notifications/responses only): send nothing."""
        return bool(self._lines)

    @property
    def slot_count(self) -> int:
        """Number of slots: the entries that get an answer in the reply array."""
        return len(self._lines)

    @property
    def pending(self) -> int:
        """Slots still waiting for a response line."""
        return self._pending

    @property
    def complete(self) -> bool:
        """True when every slot is filled and [`encode`][acp_fast._replies.BatchReply.encode] can build the reply."""
        return self._pending == 0

    def slot(self, entry_index: int) -> int | None:
        """The slot of entry `entry_index`, or `None` if that entry gets no answer."""
        return self._slot_of.get(entry_index)

    def fill(self, slot: int, line: bytes) -> bool:
        """Record the response line of `slot`; returns False if it was already filled."""
        if self._lines[slot] is not None:
            return False
        self._lines[slot] = line
        self._pending -= 1
        return True

    def fill_dropped(self, slot: int | None = None) -> list[int]:
        """Fill with the -32603 "dropped its responder" fallback.

        With `slot`, fill just that slot (a handler finished or was dropped without
        answering); without, fill every unfilled slot (call that only once no handler of
        the batch can still answer). Returns the slots it filled.
        """
        filled: list[int] = []
        if not self._pending:
            return filled
        for index, s in self._slot_of.items():
            if self._lines[s] is None and (slot is None or s == slot):
                entry = self._entries[index]
                data = f"request handler dropped its responder for `{entry.method}`"
                self._lines[s] = _error_line(INTERNAL_ERROR, data, entry.id)
                self._pending -= 1
                filled.append(s)
        return filled

    def encode(self) -> bytes | None:
        """The reply array line, or `None` when the batch needs no reply.

        Raises:
            RuntimeError: while some slot is still unfilled.
        """
        if not self._lines:
            return None
        if self._pending:
            raise RuntimeError(f"batch reply incomplete: {self._pending} slot(s) unfilled")
        return b"[" + b",".join(line[:-1] for line in self._lines) + b"]\n"  # type: ignore[index]
