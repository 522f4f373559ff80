"""`--debug`: every line each component reads, writes and logs, in one file (protocol.md §8.7.37).

The file is `<debug-dir>/<YYYYmmdd-HHMMSS>.log`: a header listing the components, then one
line per message `<label> <arrow> +<ms>ms <line>`. `label` is the component's index, or
`C` for the conductor's own stdio; `→` is written to the component (to the client, for
`C`), `←` read from it, `!` its stderr (ANSI escapes stripped, over-long lines cut with
a marker). Lines are logged per read/write chunk as they cross the pipe; a line split
across two chunks appears as two entries.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

__all__ = ["DebugLog"]

_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
MAX_LINE = 16 * 1024


class DebugLog:
    """One debug log file; `path` says where (printed to stderr by the CLI)."""

    def __init__(self, directory: str | os.PathLike[str], components: Sequence[str]) -> None:
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / time.strftime("%Y%m%d-%H%M%S.log")
        self._file: IO[str] = open(self.path, "w", encoding="utf-8")
        self._t0 = time.monotonic()
        self._file.write("acp_fast conductor debug log\n")
        for i, description in enumerate(components):
            self._file.write(f"component {i}: {description}\n")
        self._file.write("\n")

    def log(self, label: str, arrow: str, data: bytes) -> None:
        """Log each line of `data` (`arrow`: `"→"`, `"←"` or `"!"`)."""
        if self._file.closed:
            return
        ms = (time.monotonic() - self._t0) * 1000
        if arrow == "!":
            data = _ANSI.sub(b"", data)
        for raw in data.splitlines():
            if not raw.strip():
                continue
            text = raw[:MAX_LINE].decode("utf-8", "replace")
            if len(raw) > MAX_LINE:
                text += f" …[{len(raw) - MAX_LINE} bytes cut]"
            self._file.write(f"{label} {arrow} +{ms:.0f}ms {text}\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file; later [`log`][acp_fast.conductor.debug.DebugLog.log] calls write nothing."""
        self._file.close()
