"""Helpers of the interop tests (not a test module): commands, environments, JSON-line runs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "helpers"))
from package_path import pythonpath  # noqa: E402

REPO = HERE.parent.parent
PEERS_TS = REPO / "peers" / "ts"
PEERS_PY = REPO / "peers" / "pysdk"
from peer_rule import PYSDK_VERSION, TS_SDK_VERSION  # noqa: E402,F401 - the pins, for the interop tests
TIMEOUT = 60.0  # seconds; only turns a hang into a failure


def fast_testy(engine: ModuleType, *args: str) -> list[str]:
    """The ``acp-fast testy`` command line on ``engine``'s twin."""
    return [sys.executable, "-m", "acp_fast.cli.main", "testy", "--engine", engine.IMPLEMENTATION, *args]


def env(**extra: str) -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = pythonpath(out.get("PYTHONPATH"))
    out["ACP_PEERS_TS"] = str(PEERS_TS)
    for name in ("ACP_N", "ACP_CHUNK", "ACP_PIPELINE"):
        out.pop(name, None)
    out.update(extra)
    return out


def json_line(argv: list[str], **extra_env: str) -> dict[str, Any]:
    """Run a peer program that prints one JSON line; returns it (fails loudly otherwise)."""
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, env=env(**extra_env), cwd=REPO,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, (
        f"{argv} exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}")
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def run(coro_fn: Any, *args: Any) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro_fn(*args), TIMEOUT)

    return asyncio.run(guarded())


def updates_of(calls: list[Any]) -> list[dict[str, Any]]:
    return [u.payload for u in calls]
