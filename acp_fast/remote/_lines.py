"""Lines without decoding: the agent's byte stream cut as the engine's decoder cuts it.

An outlet that sends every line of the agent alone (a WebSocket whose client did not ask for
batch frames) needs the lines and nothing else: whether a line is JSON-RPC does not change
where it goes (:meth:`~acp_fast.remote.server._Connection._not_jsonrpc`'s rule sends a
malformed line alone too). :class:`LineSplitter` yields exactly the ``raw`` of the frames the
decoder would give for the same bytes, at the cost of a ``split``: a trailing CR dropped, an
empty or whitespace-only line skipped, a line over the size limit dropped without ever being
kept whole.
"""

from __future__ import annotations

__all__ = ["LineSplitter"]

#: JSON's whitespace within a line (a newline ends the line)
_WS = b" \t\r"


def _clean(line: bytes) -> bytes:
    """A line as the decoder frames it: without one trailing CR; ``b""`` when nothing but
    whitespace is left (the decoder skips it)."""
    if line and line[-1] == 0x0D:
        line = line[:-1]
    if line and (line[0] in _WS or line[-1] in _WS) and not line.strip(_WS):
        return b""
    return line


class LineSplitter:
    """Cuts a byte stream into the lines the engine's ``Decoder`` would frame, undecoded.

    Args:
        limit: the decoder's ``max_line_size``: a longer line is dropped (and counted), and
            never buffered beyond ``limit`` bytes.
    """

    __slots__ = ("limit", "_tail", "_skipping")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._tail = b""
        self._skipping = False  # inside a line over the limit, until its newline

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete last line kept for the next :meth:`feed`."""
        return len(self._tail)

    def feed(self, data: bytes) -> tuple[list[bytes], int]:
        """The lines completed by ``data`` (in order, each without its newline) and how many
        lines over the limit it ended (dropped)."""
        dropped = 0
        if self._skipping:
            nl = data.find(b"\n")
            if nl < 0:
                return [], 0
            self._skipping = False
            data = data[nl + 1:]
        tail = self._tail
        if tail:
            data = tail + data
        # memchr per line: ``bytes.split`` compares byte by byte
        lines: list[bytes] = []
        append = lines.append
        find = data.find
        start = 0
        nl = find(b"\n")
        while nl >= 0:
            append(data[start:nl])
            start = nl + 1
            nl = find(b"\n", start)
        last = data[start:]
        limit = self.limit
        if len(last) > limit:  # an incomplete line already over the limit: not kept
            self._skipping = True
            last = b""
            dropped += 1
        self._tail = last
        if not lines:
            return lines, dropped
        if len(data) > limit:  # only then can a complete line be over the limit
            n = len(lines)
            lines = [line for line in lines if len(line) <= limit]
            dropped += n - len(lines)
            if not lines:
                return lines, dropped
        # empty, or starting with whitespace (the least line's first byte is <= space), or
        # a CR anywhere: the rare lines that need more than a cut
        if min(lines)[:1] <= b" " or b"\r" in data:
            lines = [line for line in map(_clean, lines) if line]
        return lines, dropped
