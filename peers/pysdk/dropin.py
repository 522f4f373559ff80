#!/usr/bin/env python3
"""Run one of the Python SDK peers (``agent.py``, ``client.py``) unchanged on an acp_fast drop-in.

Usage:
  python dropin.py stock|transport|connection PROGRAM [args...]

Installs the drop-in with ``acp_fast.compat.acp_sdk.activate.install(MODE)`` (nothing for
``stock``), then runs ``PROGRAM`` as ``__main__`` with ``args``: the program's own
``import acp`` / ``acp.run_agent`` / ``acp.spawn_agent_process`` then reach the drop-in.
This is the one import-level switch applied from outside; the peers themselves never
import ``acp_fast``. ``acp_fast`` must be importable (``PYTHONPATH``).

The client peer passes its full environment to the agent it starts, so a client and agent
both run through this launcher are switched alike.
"""

from __future__ import annotations

import runpy
import sys


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] not in ("stock", "transport", "connection"):
        raise SystemExit("usage: dropin.py stock|transport|connection PROGRAM [args...]")
    mode, program = argv[0], argv[1]
    if mode != "stock":
        from acp_fast.compat.acp_sdk.activate import install

        install(mode)
    sys.argv = [program, *argv[2:]]
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
