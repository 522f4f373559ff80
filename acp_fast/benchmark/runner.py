"""Runs one client invocation of a pair: pinned to CPUs, memory sampled with psutil.

The client is started with `Popen` (stdout and stderr captured). When the machine has
≥ 2 CPUs and pinning is asked for, the client is pinned to one CPU before it executes
(`os.sched_setaffinity` in the child, so every thread it starts inherits it) and the agent
command is prefixed with `taskset -c <cpu>` (or a tiny `python -c` that pins itself and
`exec`\\ s the agent), so the agent runs on the other CPU. A sampler thread walks the
client's process tree with psutil every `poll_s` seconds and keeps the largest RSS seen
of the client and of its descendants (the agent). Every invocation gets its own report file
(`$ACP_FAST_BENCH_REPORT`, inherited by the whole tree): the lines the acp_fast processes
write there about themselves ([`launch`][acp_fast.benchmark.launch]) come back in `Invocation.reports`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..jsontypes import JsonObject

__all__ = ["Invocation", "InvocationError", "pin_command", "pin_plan", "run_client"]

#: ``python -c`` trampoline: pin to CPU argv[1], then exec argv[2:]
_PIN_SRC = "import os,sys;os.sched_setaffinity(0,{int(sys.argv[1])});os.execvp(sys.argv[2],sys.argv[2:])"


class InvocationError(RuntimeError):
    """The client failed: non-zero exit, timeout, no JSON line, or a failed self-check."""


@dataclass
class Invocation:
    """The outcome of one client run.

    Attributes:
        argv: the full command line that was run.
        result: the client's JSON line, decoded.
        wall_s: wall time of the whole invocation (spawn to exit).
        client_rss_kib: the client's largest sampled RSS (`None` if never sampled).
        agent_rss_kib: the largest sampled RSS among the client's descendants.
        pinned: the CPUs of (client, agent), or `None` when not pinned.
        stderr_tail: the last lines the client (and agent) wrote to stderr.
        reports: what the processes launched through [`launch`][acp_fast.benchmark.launch] reported about themselves
            ([`read_reports`][acp_fast.benchmark.launch.read_reports]), in the order written.
    """

    argv: list[str]
    result: JsonObject
    wall_s: float
    client_rss_kib: int | None = None
    agent_rss_kib: int | None = None
    pinned: tuple[int, int] | None = None
    stderr_tail: str = ""
    extra: JsonObject = field(default_factory=dict)
    reports: list[JsonObject] = field(default_factory=list)


def pin_plan() -> tuple[int, int] | None:
    """Two distinct CPUs this process may run on, for (client, agent); `None` with fewer."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else None


def pin_command(cpu: int, argv: Sequence[str]) -> list[str]:
    """`argv` prefixed so that it runs on `cpu` (all its threads)."""
    taskset = shutil.which("taskset")
    if taskset:
        return [taskset, "-c", str(cpu), *argv]
    return [sys.executable, "-I", "-S", "-c", _PIN_SRC, str(cpu), *argv]


class _Sampler(threading.Thread):
    """Samples the RSS of a process tree until stopped."""

    def __init__(self, root: int, poll_s: float) -> None:
        super().__init__(daemon=True, name="bench-rss-sampler")
        import psutil

        self._psutil = psutil
        self.poll_s = poll_s
        self.root_rss: int | None = None
        self.desc_rss: dict[int, int] = {}
        self._halt = threading.Event()
        try:
            self.root: Any = psutil.Process(root)
        except psutil.Error:
            self.root = None

    def sample(self) -> None:
        if self.root is None:
            return
        err = self._psutil.Error
        try:
            self.root_rss = max(self.root_rss or 0, self.root.memory_info().rss // 1024)
            children = self.root.children(recursive=True)
        except err:
            return
        for child in children:
            try:
                rss = child.memory_info().rss // 1024
            except err:
                continue
            self.desc_rss[child.pid] = max(self.desc_rss.get(child.pid, 0), rss)

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.poll_s)

    def stop(self) -> None:
        self._halt.set()


def run_client(
    client_cmd: Sequence[str],
    client_args: Sequence[str],
    agent_cmd: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
    poll_s: float = 0.02,
    pin: tuple[int, int] | None = None,
    on_tick: Callable[[float], None] | None = None,
    tick_s: float = 0.5,
) -> Invocation:
    """Runs `client_cmd client_args -- agent_cmd` to completion; returns its JSON line.

    `pin=(a, b)` runs the client on CPU `a` and the agent on CPU `b`. The processes report
    to a fresh file (`Invocation.reports`). `on_tick(elapsed_s)`
    is called about every `tick_s` seconds while the client runs. Raises
    [`InvocationError`][acp_fast.benchmark.runner.InvocationError] on timeout (the client's whole process group is killed),
    non-zero exit or missing/invalid JSON output.
    """
    agent = list(agent_cmd) if pin is None else pin_command(pin[1], agent_cmd)
    argv = [*client_cmd, *client_args, "--", *agent]
    from .launch import REPORT_ENV, read_reports

    fd, report_path = tempfile.mkstemp(prefix="acp-fast-bench-", suffix=".jsonl")
    os.close(fd)
    try:
        inv = _run(argv, env, report_path, REPORT_ENV, timeout_s, poll_s, pin, on_tick, tick_s)
        inv.reports = read_reports(report_path)
        return inv
    finally:
        os.unlink(report_path)


def _run(argv: list[str], env: Mapping[str, str] | None, report_path: str, report_env: str, timeout_s: float,
         poll_s: float, pin: tuple[int, int] | None, on_tick: Callable[[float], None] | None,
         tick_s: float) -> Invocation:
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    full_env[report_env] = report_path
    preexec = None
    if pin is not None:
        cpu = pin[0]

        def preexec() -> None:
            os.sched_setaffinity(0, {cpu})

    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full_env,
        preexec_fn=preexec,  # noqa: PLW1509 - only sched_setaffinity, before exec
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
    if proc.returncode != 0:
        raise InvocationError(f"client exited with {proc.returncode}{_tail(err_b)}")
    lines = [ln for ln in out_b.decode("utf-8", "replace").splitlines() if ln.strip().startswith("{")]
    if not lines:
        raise InvocationError(f"client printed no JSON line{_tail(err_b)}")
    try:
        result = json.loads(lines[-1])
    except ValueError as exc:
        raise InvocationError(f"client printed invalid JSON: {exc}") from None
    return Invocation(
        argv=argv,
        result=result,
        wall_s=wall,
        client_rss_kib=sampler.root_rss,
        agent_rss_kib=max(sampler.desc_rss.values()) if sampler.desc_rss else None,
        pinned=pin,
        stderr_tail=_tail(err_b, prefix=""),
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
