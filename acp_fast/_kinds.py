"""Frame kinds: the one definition of the `kind` numbers every frame carries.

Plain ints, so that the compiled twin can mirror them as C constants (`csrc/acp_common.h`
`FrameKind` holds the very same numbers; a test asserts they agree). Both engine twins,
the reply bookkeeping and the connection layer import them from here.
"""

from __future__ import annotations

__all__ = ["REQUEST", "NOTIFICATION", "RESPONSE", "BATCH", "MALFORMED"]

REQUEST = 0
NOTIFICATION = 1
RESPONSE = 2
BATCH = 3
MALFORMED = 4

#: By kind: whether a message may share a batch frame with others (a notification or a
#: response: nothing answers it, so a peer that splits the batch loses nothing).
BATCHABLE: tuple[bool, ...] = tuple(k in (NOTIFICATION, RESPONSE) for k in range(MALFORMED + 1))


def check_message_state(
    kind: object, id: object, method: object, error: object,
    line: object, start: object, end: object, ids: object, ide: object, ps: object, pe: object,
) -> None:
    """Refuse the state of a `Message` that no decoder could have made (unpickling).

    A message's spans are byte offsets into `line`; the compiled twin copies bytes through
    them without bounds checks on the hot path, so a crafted pickle must be refused here:
    `line` is `bytes`; `0 <= start <= end <= len(line)`; the id span is `(-1, -1)` or
    within `[start, end]` and ordered, and so is the payload span.

    Raises:
        TypeError: a field of the wrong type.
        ValueError: a span out of range or out of order, or an unknown kind.
    """
    if type(line) is not bytes:
        raise TypeError(f"Message line must be bytes, not {type(line).__name__}")
    for value in (start, end, ids, ide, ps, pe):
        if type(value) is not int:
            raise TypeError(f"Message spans must be int, not {type(value).__name__}")
    if kind not in (REQUEST, NOTIFICATION, RESPONSE) or type(kind) is not int:
        raise ValueError(f"Message kind must be REQUEST, NOTIFICATION or RESPONSE, not {kind!r}")
    if not (0 <= start <= end <= len(line)):  # type: ignore[operator]
        raise ValueError("Message span out of range")
    for s, e in ((ids, ide), (ps, pe)):
        if not (s == e == -1 or start <= s <= e <= end):  # type: ignore[operator]
            raise ValueError("Message span out of range")
    if not (id is None or type(id) in (int, str)):
        raise TypeError(f"Message id must be int, str or None, not {type(id).__name__}")
    if not (method is None or type(method) is str):
        raise TypeError(f"Message method must be str or None, not {type(method).__name__}")
    if not (error is None or type(error) is dict):
        raise TypeError(f"Message error must be dict or None, not {type(error).__name__}")


def check_batch_state(entries: object, line: object, start: object, end: object,
                      entry_types: tuple[type, ...]) -> None:
    """Refuse the state of a `Batch` that no decoder could have made (unpickling).

    Raises:
        TypeError: `line` is not bytes, `entries` not a list of `entry_types`.
        ValueError: the span is out of range, or there are no entries.
    """
    if type(line) is not bytes:
        raise TypeError(f"Batch line must be bytes, not {type(line).__name__}")
    if type(start) is not int or type(end) is not int:
        raise TypeError("Batch span must be int")
    if not (0 <= start <= end <= len(line)):
        raise ValueError("Batch span out of range")
    if type(entries) is not list or not all(type(e) in entry_types for e in entries):
        raise TypeError("Batch entries must be a list of Message and Malformed values")
    if not entries:
        raise ValueError("a Batch is never empty")
