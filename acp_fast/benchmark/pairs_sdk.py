"""Benchmark pairs of the official Python SDK on acp_fast's drop-ins (`acp_fast.compat.acp_sdk`).

The SDK peers of `peers/pysdk` (`client.py`, `agent.py`), unchanged, each run through
`peers/pysdk/dropin.py MODE` (the drop-in installed from outside before the peer imports
the SDK), both sides switched, compiled engine; both run through the reporting launcher
([`launch`][acp_fast.benchmark.launch], `--script`), which reports the twin of the acp_fast they run on, and report
their loop themselves:

| pair | what it runs |
|---|---|
| `pysdk-transport/pysdk-transport` | SDK client and agent on the transport drop-in |
| `pysdk-fast/pysdk-fast` | SDK client and agent on the connection drop-in |

Compare them with `pysdk/pysdk` (the stock SDK, `BASELINE` of [`pairs`][acp_fast.benchmark.pairs]) in one run:
`acp-fast bench --pairs pysdk/pysdk,pysdk-transport/pysdk-transport,pysdk-fast/pysdk-fast`.
The issue-11 targets and the import-time comparison: `scripts/bench_sdk_dropin.py`.
"""

from __future__ import annotations

from . import registry
from .runtime import Process, launch_script

__all__ = ["DROPIN_PAIRS", "register"]

#: The pairs this module registers: name -> drop-in mode.
DROPIN_PAIRS = {
    "pysdk-transport/pysdk-transport": "transport",
    "pysdk-fast/pysdk-fast": "connection",
}
_DESCRIPTIONS = {
    "transport": "Python SDK client and agent on the acp_fast transport drop-in (compiled engine)",
    "connection": "Python SDK client and agent on the acp_fast connection drop-in (compiled engine)",
}


def register() -> None:
    """(Re)registers the drop-in pairs with the current peers' folder."""
    pysdk = registry.PEERS / "pysdk"
    dropin = str(pysdk / "dropin.py")
    env = registry.acp_env(ACP_FAST_NO_EXTENSIONS="0")
    for name, mode in DROPIN_PAIRS.items():
        registry.register_pair(
            name, launch_script("client", dropin, mode, str(pysdk / "client.py")),
            launch_script("agent", dropin, mode, str(pysdk / "agent.py")),
            requires=[registry.PYSDK_PEER, registry.ACP_FAST, registry.ACP_FAST_COMPILED], env=env, replace=True,
            py_client=True, py_agent=True, description=_DESCRIPTIONS[mode],
            engine="c", processes=(Process("client"), Process("agent")))
