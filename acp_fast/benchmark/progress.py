"""Live progress of a run on stderr (a `tqdm` bar), so stdout carries only the report.

On a terminal the bar shows the running step and its elapsed time; each finished step is
written above it as one line. Off a terminal (CI logs, pipes) only the finished steps' lines
are written.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    """Step progress writer (see the module docstring)."""

    def __init__(self, total: int, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        from tqdm import tqdm

        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        live = enabled and self.stream.isatty()
        self._bar: Any = tqdm(total=total, file=self.stream, disable=not live, dynamic_ncols=True,
                              bar_format="{n_fmt}/{total_fmt} [{elapsed}<{remaining}] {desc}")
        self._write = tqdm.write
        self._label = ""

    def start(self, label: str) -> None:
        """A step begins."""
        self._label = label
        self._bar.set_description_str(f"{label} …")

    def tick(self, label: str, elapsed_s: float) -> None:
        """The running step is still running after `elapsed_s` seconds."""
        self._bar.set_description_str(f"{label} … {elapsed_s:.1f}s")

    def done(self, label: str, summary: str) -> None:
        """A step finished with a one-line `summary`."""
        self._bar.update(1)
        if self.enabled:
            self._write(f"{label}: {summary}", file=self.stream)

    def note(self, text: str) -> None:
        """A free-form line (e.g. skipped pairs)."""
        if self.enabled:
            self._write(text, file=self.stream)

    def close(self) -> None:
        """Remove the progress bar (the lines already written stay)."""
        self._bar.close()
