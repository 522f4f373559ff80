"""Live progress display: one line per step, updated in place on a terminal.

Progress goes to stderr so that stdout carries only the report (the markdown table can be
piped or redirected while progress stays visible). On a terminal the running step's line is
rewritten in place (``\\r`` + erase line) with its elapsed time and then replaced by its result;
anywhere else (CI logs, pipes) each finished step is printed as one plain line.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Step progress writer (see the module docstring)."""

    def __init__(self, total: int, stream: TextIO | None = None, *, live: bool | None = None,
                 enabled: bool = True) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.enabled = enabled
        self.count = 0
        self._t0 = time.perf_counter()

    def _prefix(self) -> str:
        return f"[{self.count}/{self.total} {time.perf_counter() - self._t0:5.1f}s]"

    def start(self, label: str) -> None:
        """A step begins."""
        self.count += 1
        if self.enabled and self.live:
            self.stream.write(f"\r\x1b[2K{self._prefix()} {label} …")
            self.stream.flush()

    def tick(self, label: str, elapsed_s: float) -> None:
        """The running step is still running after ``elapsed_s`` seconds."""
        if self.enabled and self.live:
            self.stream.write(f"\r\x1b[2K{self._prefix()} {label} … {elapsed_s:.1f}s")
            self.stream.flush()

    def done(self, label: str, summary: str) -> None:
        """A step finished with a one-line ``summary``."""
        if not self.enabled:
            return
        line = f"{self._prefix()} {label}: {summary}"
        if self.live:
            self.stream.write(f"\r\x1b[2K{line}\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A free-form line (e.g. skipped pairs)."""
        if self.enabled:
            self.stream.write(text + "\n")
            self.stream.flush()
