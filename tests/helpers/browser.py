"""Headless Chromium for the browser tests (the Debian package; not a test module).

`chromium()` finds the executable or, under the peer rule (`peer_rule.missing`), skips or
fails; `run_chromium()` runs it once on a page with a fresh profile and a hang guard (a
timeout, never a timing threshold) and returns its standard output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from peer_rule import missing

#: the flags of every run: no network chatter, no profile state, no extensions
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions")


def chromium() -> str:
    """The Chromium executable (on PATH or /usr/bin/chromium), or `missing("chromium")`."""
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    if path is None:
        missing("chromium", "headless Chromium (chromium on PATH or /usr/bin/chromium) is not installed")
    return path


def run_chromium(executable: str, url: str, args: list[str], *, guard: float, profile_dir: Path | None = None) -> str:
    """One headless run on `url` with `args` after the common flags; its standard output
    (the DOM with `--dump-dom`). A non-zero exit fails the calling test with Chromium's stderr."""
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=profile_dir))
    try:
        proc = subprocess.run([executable, *FLAGS, f"--user-data-dir={profile}", *args, url], capture_output=True,
                              text=True, timeout=guard, stdin=subprocess.DEVNULL, check=False)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout
