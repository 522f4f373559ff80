"""Runs one client invocation of a pair and watches both processes' memory through /proc.

The client is started with ``Popen`` (its stdout and stderr are captured); a sampler thread
reads ``VmHWM`` (peak resident set) from ``/proc/<pid>/status`` of the client and of every
process below it (the agent, and anything the agent spawned) every ``poll_s`` seconds. The
agent's own ``_test/stats`` answer (relayed by the client as ``agentMaxRssKiB``) is exact and
preferred; the /proc sample is the fallback for agents without that extension. On systems
without /proc the sampler finds nothing and the fallback is ``None``.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Invocation", "InvocationError", "run_client"]

_PROC = Path("/proc")


class InvocationError(RuntimeError):
    """The client failed: non-zero exit, timeout, no JSON line, or a failed self-check."""


@dataclass
class Invocation:
    """The outcome of one client run.

    Attributes:
        argv: the full command line that was run.
        result: the client's JSON line, decoded.
        wall_s: wall time of the whole invocation (spawn to exit).
        client_hwm_kib: the client's peak RSS seen in /proc (``None`` if never sampled).
        agent_hwm_kib: the largest peak RSS among the client's descendants seen in /proc.
        stderr_tail: the last lines the client (and agent) wrote to stderr.
    """

    argv: list[str]
    result: dict[str, Any]
    wall_s: float
    client_hwm_kib: int | None = None
    agent_hwm_kib: int | None = None
    stderr_tail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _read_hwm_kib(pid: int) -> int | None:
    try:
        with open(_PROC / str(pid) / "status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in (_PROC / str(pid) / "task").iterdir():
            try:
                out.extend(int(x) for x in (task / "children").read_text().split())
            except (OSError, ValueError):
                continue
    except OSError:
        pass
    return out


def _descendants(pid: int) -> list[int]:
    seen: list[int] = []
    stack = _children(pid)
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.append(p)
        stack.extend(_children(p))
    return seen


class _Sampler(threading.Thread):
    """Samples peak RSS of a process tree until stopped."""

    def __init__(self, root: int, poll_s: float) -> None:
        super().__init__(daemon=True, name="e2e-rss-sampler")
        self.root = root
        self.poll_s = poll_s
        self.root_hwm: int | None = None
        self.desc_hwm: dict[int, int] = {}
        self._halt = threading.Event()

    def sample(self) -> None:
        hwm = _read_hwm_kib(self.root)
        if hwm is not None:
            self.root_hwm = max(self.root_hwm or 0, hwm)
        for pid in _descendants(self.root):
            h = _read_hwm_kib(pid)
            if h is not None:
                self.desc_hwm[pid] = max(self.desc_hwm.get(pid, 0), h)

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.poll_s)

    def stop(self) -> None:
        self._halt.set()


def run_client(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
    poll_s: float = 0.02,
    cwd: str | os.PathLike[str] | None = None,
    on_tick: Callable[[float], None] | None = None,
    tick_s: float = 0.5,
) -> Invocation:
    """Runs a client command to completion and returns its decoded JSON line.

    ``on_tick(elapsed_s)`` is called about every ``tick_s`` seconds while the client runs
    (for progress displays). Raises :class:`InvocationError` on timeout (the client's whole
    process group is killed), non-zero exit or missing/invalid JSON output.
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full_env,
        cwd=cwd,
        start_new_session=True,  # own process group: a timeout kills client and agent together
    )
    sampler = _Sampler(proc.pid, poll_s)
    sampler.start()
    out_b = err_b = b""
    try:
        while True:
            remaining = timeout_s - (time.perf_counter() - t0)
            if remaining <= 0:
                _kill_group(proc)
                out_b, err_b = proc.communicate()
                raise InvocationError(f"timed out after {timeout_s:.0f} s{_tail(err_b)}")
            try:
                out_b, err_b = proc.communicate(timeout=min(tick_s, remaining))
                break
            except subprocess.TimeoutExpired:
                if on_tick is not None:
                    on_tick(time.perf_counter() - t0)
    finally:
        sampler.stop()
        sampler.join()
        if proc.poll() is None:
            _kill_group(proc)
            proc.wait()
    wall = time.perf_counter() - t0
    stderr_tail = _tail(err_b, prefix="")
    if proc.returncode != 0:
        raise InvocationError(f"client exited with {proc.returncode}{_tail(err_b)}")
    lines = [ln for ln in out_b.decode("utf-8", "replace").splitlines() if ln.strip().startswith("{")]
    if not lines:
        raise InvocationError(f"client printed no JSON line{_tail(err_b)}")
    try:
        result = json.loads(lines[-1])
    except ValueError as exc:
        raise InvocationError(f"client printed invalid JSON: {exc}") from None
    agent_hwm = max(sampler.desc_hwm.values()) if sampler.desc_hwm else None
    return Invocation(
        argv=list(argv),
        result=result,
        wall_s=wall,
        client_hwm_kib=sampler.root_hwm,
        agent_hwm_kib=agent_hwm,
        stderr_tail=stderr_tail,
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (OSError, AttributeError):
        proc.kill()


def _tail(err: bytes, prefix: str = ": ", lines: int = 5) -> str:
    text = err.decode("utf-8", "replace").strip()
    if not text:
        return ""
    return prefix + " | ".join(text.splitlines()[-lines:])
