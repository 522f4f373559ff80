"""The Python SDK test agent of ``peers/pysdk/agent.py``, unchanged, served on the acp_fast drop-in.

Only the last line differs from that peer's ``main``: ``acp.run_agent(agent,
stdio_transport())`` instead of ``acp.run_agent(agent)``; with ``--run-agent`` it is the
other one-line switch, ``acp_fast.compat.acp_sdk.run_agent(agent)`` (the compiled twin
then); with ``--fast`` the connection drop-in's,
``acp_fast.compat.acp_sdk.fast.run_agent(agent)``. ``--engine py|c`` picks the twin.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, cast

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))
_PEER = REPO / "peers" / "pysdk" / "agent.py"


def load_test_agent() -> Any:
    """The ``TestAgent`` class of ``peers/pysdk/agent.py`` (imported from its file)."""
    spec = importlib.util.spec_from_file_location("pysdk_peer_agent", _PEER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TestAgent


def engine_from_argv(argv: list[str]) -> Any:
    import importlib

    if "--engine" in argv:
        tag = argv[argv.index("--engine") + 1]
        return importlib.import_module("acp_fast._engine_py" if tag == "py" else "acp_fast._engine_c")
    return None


async def main(argv: list[str]) -> None:
    import acp

    from acp_fast.compat.acp_sdk import run_agent, stdio_transport

    agent = load_test_agent()()
    if "--fast" in argv:
        from acp_fast.compat.acp_sdk import fast

        engine = engine_from_argv(argv)
        await fast.run_agent(cast(acp.Agent, agent), **({"engine": engine} if engine is not None else {}))
        return
    if "--run-agent" in argv:
        await run_agent(cast(acp.Agent, agent), transport_options={"engine": engine_from_argv(argv)})
        return
    await acp.run_agent(cast(acp.Agent, agent), stdio_transport(engine=engine_from_argv(argv)))


if __name__ == "__main__":
    import asyncio

    asyncio.run(main(sys.argv[1:]))
