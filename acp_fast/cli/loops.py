"""The `--loop` choices of acp_fast's commands: the names of `acp_fast.transport.loop`.

The loop choice lives in the transport layer
([`acp_fast.transport.loop`][acp_fast.transport.loop]); this module keeps the commands' old
import path (`LOOPS` is `LOOP_CHOICES` there).
"""

from __future__ import annotations

import gc

from ..transport.loop import LOOP_CHOICES as LOOPS
from ..transport.loop import available_loops, loop_name, run

__all__ = ["LOOPS", "available_loops", "freeze_startup_heap", "loop_name", "run"]


def freeze_startup_heap() -> None:
    """Leave what a long-running command built at start-up (modules, classes, the app) out
    of the garbage collector's scans from now on (`gc.freeze()`).

    A server's heap is mostly that, and it never becomes garbage; without this, each full
    collection walks all of it, a pause of tens of milliseconds in the middle of a stream on
    this project's test machine: a 20,000-update turn through a fleet stalled 15-35 ms once
    or twice, and the fleet rows of `acp-fast bench --remote` streamed 147 k -> 188 k
    updates/s (WebSocket) and 125 k -> 158 k (SSE) with the start-up heap frozen. Called once
    a server listens (`serve`) or a host is registered (`host`): objects made later are
    collected as usual. `conductor` calls it once its chain is started, `serve --workers` in
    each worker once its app is built."""
    gc.freeze()
