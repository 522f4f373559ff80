"""The `--loop` choices of acp_fast's commands: the names of `acp_fast.transport.loop`.

The loop choice lives in the transport layer
([`acp_fast.transport.loop`][acp_fast.transport.loop]); this module keeps the commands' old
import path (`LOOPS` is `LOOP_CHOICES` there).
"""

from __future__ import annotations

from ..transport.loop import LOOP_CHOICES as LOOPS
from ..transport.loop import available_loops, loop_name, run

__all__ = ["LOOPS", "available_loops", "loop_name", "run"]
