#!/usr/bin/env python3
"""Fallback acp_fast test agent with the peers' behaviour (``peers/README.md``), v1 and v2
behind ``Agent.protocol_router()``. Superseded by ``acp-fast testy``; kept for runs where the
CLI is not available. Implementation: ``acp_fast/benchmark/agent.py``."""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from acp_fast.benchmark.agent import main

if __name__ == "__main__":
    main()
