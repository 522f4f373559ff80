"""``fault_agent.py``'s batch handlers with a deliberate leak, to prove a memory bound bites.

Started as a child process by ``tests/test_faults.py``: the same public stack as
``fault_agent.py`` (``Agent.builder()`` served on ``connect_stdio``, engine twin named by
``ACP_FAST_TEST_ENGINE``) and the same ``_fault/echo``, ``aecho``, ``sleep`` and ``rss``
requests, but every request handled keeps a reference to its params and to
``FAULT_LEAK_KIB`` KiB (default 4) of its own for the life of the process: the shape of a
per-request leak (a registry that is never pruned, a retained context or reply buffer).
A bound that this agent passes under the batch the test sends is too loose to see a leak.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from typing import Any

from fault_agent import proc_status

LEAK = int(os.environ.get("FAULT_LEAK_KIB", "4")) * 1024
KEPT: list[Any] = []


def keep(params: Any) -> None:
    KEPT.append((params, b"\x01" * LEAK))  # written, so its pages are resident


def build() -> Any:
    from acp_fast import Agent

    agent = Agent.builder()

    @agent.on_request("_fault/echo")
    def echo(params: Any, cx: Any) -> Any:
        keep(params)
        return params

    @agent.on_request("_fault/aecho")
    async def aecho(params: Any, cx: Any) -> Any:
        keep(params)
        await asyncio.sleep(0)
        return params

    @agent.on_request("_fault/sleep")
    async def sleep(params: Any, cx: Any) -> Any:
        keep(params)
        await asyncio.sleep(params["s"])
        return params

    @agent.on_request("_fault/rss")
    def rss(params: Any, cx: Any) -> Any:
        return proc_status()

    return agent


async def main() -> None:
    from acp_fast.transport import connect_stdio

    engine = importlib.import_module("acp_fast._engine_" + os.environ.get("ACP_FAST_TEST_ENGINE", "py"))
    await build().serve(connect_stdio(), engine=engine)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
