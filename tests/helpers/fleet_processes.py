"""``acp-fast`` processes for the fleet tests (not a test module): started, waited for, stopped.

:func:`start` runs ``python -m acp_fast.cli.main ARGS`` (a front, ``serve --redis``; a host,
``host --redis``) and waits a bounded time for the stderr line that says it is ready;
:func:`stop` ends it (``SIGTERM``, then ``SIGKILL``). A test may ``kill -9`` one itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

CLI = [sys.executable, "-m", "acp_fast.cli.main"]
#: Seconds a process may take to say it is ready.
READY = 20.0




def start(args: list[str], ready: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``acp-fast ARGS``; the process and the first stderr line that matches ``ready``."""
    proc = subprocess.Popen([*CLI, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    deadline = time.monotonic() + READY
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode(errors="replace")
        if not line and proc.poll() is not None:
            break
        if re.search(ready, line):
            return proc, line
    proc.kill()
    raise AssertionError(f"acp-fast {' '.join(args)} did not get ready (exit {proc.poll()})")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    if proc.stderr is not None:
        proc.stderr.close()
