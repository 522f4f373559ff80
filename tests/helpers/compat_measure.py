"""Measure the stock Python SDK pair against the SDK pair on the acp_fast transport drop-in.

Not a test and not a benchmark row: a small script for the drop-in's closing numbers. It runs
the Python SDK benchmark client ``peers/pysdk/client.py`` against the SDK test agent
``peers/pysdk/agent.py``, both unchanged, on the default asyncio loop, in four pairings:

* ``stock``: both on the SDK's own stdio transport;
* ``dropin``: both switched (the client's ``acp.spawn_agent_process`` replaced by the
  drop-in's, the agent served by ``tests/helpers/compat_sdk_agent.py``);
* ``agent-only`` / ``client-only``: one side switched.

Each pairing runs ``--runs`` times; the medians of the client's own report are printed
(CPU µs per streamed notification on each side, round trips/s, ...).

    python tests/helpers/compat_measure.py [--runs 3] [--n 20000] [--m 2000]
    python tests/helpers/compat_measure.py --client-dropin -- <peers/pysdk/client.py args>
"""

from __future__ import annotations

import json
import os
import runpy
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
PY_CLIENT = REPO / "peers" / "pysdk" / "client.py"
PY_AGENT = REPO / "peers" / "pysdk" / "agent.py"
DROPIN_AGENT = Path(__file__).resolve().parent / "compat_sdk_agent.py"
FIELDS = ("streamClientCpuUsPerMsg", "streamAgentCpuUsPerMsg", "notificationsPerSec", "roundTripsPerSec",
          "meanRttUs", "requestsPerSec", "clientCpuMs", "agentCpuMs")


def client_dropin(argv: list[str]) -> None:
    """Run peers/pysdk/client.py with ``acp.spawn_agent_process`` switched to the drop-in's."""
    sys.path.insert(0, str(REPO))
    import acp

    from acp_fast.compat.acp_sdk import spawn_agent_process

    acp.spawn_agent_process = spawn_agent_process  # the client's one SDK entry point
    sys.argv = [str(PY_CLIENT), *argv]
    runpy.run_path(str(PY_CLIENT), run_name="__main__")


def one(pairing: str, n: int, m: int) -> dict[str, float]:
    agent = [sys.executable, str(DROPIN_AGENT if pairing in ("dropin", "agent-only") else PY_AGENT)]
    args = ["--n", str(n), "--m", str(m), "--inflight", "8", "--inflight-m", str(m), "--warmup", "200", "--", *agent]
    if pairing in ("dropin", "client-only"):
        cmd = [sys.executable, __file__, "--client-dropin", "--", *args]
    else:
        cmd = [sys.executable, str(PY_CLIENT), *args]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("{")][-1]
    data = json.loads(line)
    assert data["updatesOk"] and data["agentExit"] == 0, data
    return {f: float(data[f]) for f in FIELDS if data.get(f) is not None}


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--client-dropin":
        client_dropin(argv[2:] if argv[1:2] == ["--"] else argv[1:])
        return
    opts = dict(zip(argv[::2], argv[1::2]))
    runs, n, m = int(opts.get("--runs", 3)), int(opts.get("--n", 20000)), int(opts.get("--m", 2000))
    pairings = opts.get("--pairings", "stock,dropin,agent-only,client-only").split(",")
    results: dict[str, list[dict[str, float]]] = {p: [] for p in pairings}
    for _ in range(runs):  # interleaved, so machine noise spreads over every pairing
        for p in pairings:
            results[p].append(one(p, n, m))
    print(f"n={n} notifications, m={m} sequential echo round trips, {runs} runs, asyncio loop; medians")
    print(f"{'pairing':<12}" + "".join(f"{f:>25}" for f in FIELDS))
    for p, rows in results.items():
        print(f"{p:<12}" + "".join(f"{statistics.median(r[f] for r in rows):>25.1f}" for f in FIELDS))


if __name__ == "__main__":
    main(sys.argv[1:])
