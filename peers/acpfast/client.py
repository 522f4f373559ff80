#!/usr/bin/env python3
"""ACP benchmark client on acp_fast (v1; ``--v2`` for draft v2): the client CLI contract of
``peers/README.md``, same JSON line as ``ts/client.mjs`` and ``pysdk/client.py``.

The program lives in the package (``acp_fast/benchmark/client.py``) so that the installed
``acp-fast bench`` can run it; this file runs it from a source tree without installing::

    python peers/acpfast/client.py [--v2] [--n N] [--m M] ... [-- agent command...]

Without ``-- cmd`` the test agent ``acp-fast testy`` (``python -m acp_fast.cli.main testy``) is
spawned, on the client's ``--loop``.
"""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
os.environ["PYTHONPATH"] = _ROOT + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")

from acp_fast.benchmark.client import main

if __name__ == "__main__":
    sys.exit(main())
