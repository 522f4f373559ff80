"""The event loop of acp_fast's own commands (`acp-fast testy`, the benchmark client).

The choice itself lives in `acp_fast.transport.loop` (`loop=` argument, then
`ACP_FAST_LOOP`, then uvloop when it imports); this module adds what the commands need
around it: the `--loop` values, which loops this machine has, and the running loop's kind.
"""

from __future__ import annotations

import asyncio

from ..transport.loop import LOOP_CHOICES as LOOPS
from ..transport.loop import resolve_loop, run

__all__ = ["LOOPS", "available_loops", "loop_name", "run"]


def available_loops() -> list[str]:
    """`["asyncio", "uvloop"]`, or `["asyncio"]` when uvloop does not import."""
    try:
        resolve_loop("uvloop")
    except ImportError:
        return ["asyncio"]
    return ["asyncio", "uvloop"]


def loop_name() -> str:
    """`"uvloop"` or `"asyncio"`: the kind of the running loop."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
