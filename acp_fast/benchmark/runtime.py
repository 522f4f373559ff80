"""Every process of a benchmark row runs the `acp_fast` the harness runs, and says so.

**The same package.** `python -m MODULE` puts the working directory first on `sys.path`
(`python -c` puts `''`, the same). Run from a checkout of the sources, with acp_fast
installed from it (not editable), a child would import the checkout's `acp_fast`, which has
no compiled extensions there, and run the pure twin under a row labelled compiled. So every
Python process of acp_fast the benchmark starts is built by [`module_command`][acp_fast.benchmark.runtime.module_command] (through
`acp_fast.conductor.spec.same_acp_fast`, which the conductor applies to the components it
starts too):

* this interpreter, `sys.executable`;
* Python ≥ 3.11: `-P` (nothing prepended to `sys.path`), on that command only. Not the
  `PYTHONSAFEPATH` variable: every descendant would inherit it, and a peer run as a script
  (`python peers/pysdk/client.py`) needs its own folder on `sys.path`;
* Python 3.10, which has neither: `python -c SAFE_RUN_MODULE MODULE` instead of `-m`: the
  `''` entry of `-c` is dropped, then `runpy` runs the module as `-m` does. A
  `PYTHONPATH` entry alone would not do (`-m`'s working directory comes before it), nor
  starting the child in another working directory (a client's `session/new` sends its
  working directory; a relative path in a command would change meaning);
* and [`child_env`][acp_fast.benchmark.runtime.child_env]: the folder holding this `acp_fast` first on `PYTHONPATH` when it is
  not one of the interpreter's site folders (a source tree, an editable install, a
  `PYTHONPATH`); a package in a site folder is found there by the child itself.

**Reported, not assumed.** The acp_fast processes of a row run through
[`acp_fast.benchmark.launch`][acp_fast.benchmark.launch], which has each of them report (to a file named by
`$ACP_FAST_BENCH_REPORT`, one per client invocation) its engine twin, the folder of the
`acp_fast` it imported, its interpreter, and the kind of every event loop it runs.
[`check`][acp_fast.benchmark.runtime.check] compares those lines with what the row promises: one report per expected
process, the row's twin (`"c"`, `"py"`; or, for a row that names none, one twin for all),
the row's loop, the harness's package and interpreter. A disagreement is a
[`RuntimeMismatch`][acp_fast.benchmark.runtime.RuntimeMismatch]: the row is an error, never a number. [`summary`][acp_fast.benchmark.runtime.summary] is the
`ran` cell of the tables: the twin of each process in order (`c ×2`, `c + sdk`,
`node ×2`).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby

from ..jsontypes import JsonObject
from .launch import REPORT_ENV, read_reports
from .runner import InvocationError

__all__ = ["KINDS", "LAUNCHER", "PACKAGE_DIR", "REPORT_ENV", "Process", "RuntimeMismatch", "check", "child_env",
           "launch", "launch_script", "module_command", "read_reports", "summary"]

#: The module the acp_fast processes of a row run through.
LAUNCHER = "acp_fast.benchmark.launch"
#: The folder of the ``acp_fast`` package this process imported (every child must import it).
PACKAGE_DIR = os.path.dirname(os.path.realpath(sys.modules["acp_fast"].__file__ or ""))
#: What runs a process of a row: ``acp_fast`` (an acp_fast process, or an SDK peer on acp_fast's
#: drop-in: launched through :data:`LAUNCHER`, reports its twin), ``sdk`` (an official Python SDK
#: peer: reports its loop in its JSON line or ``_test/stats`` where its client reads them),
#: ``node`` (a Node.js peer), ``other`` (an ``--acp-agent`` command: checked on what its
#: ``_test/stats`` says, if anything).
KINDS = ("acp_fast", "sdk", "node", "other")


class RuntimeMismatch(InvocationError):
    """The processes of a row did not run what the row says (twin, loop, package, interpreter),
    or did not all report; `processes` holds what they did report (as [`check`][acp_fast.benchmark.runtime.check] returns)."""

    def __init__(self, message: str, processes: Sequence[JsonObject] = ()) -> None:
        super().__init__(message)
        self.processes = list(processes)


@dataclass(frozen=True)
class Process:
    """One process a row runs: its role (`client`, `conductor`, `proxy`, `agent`) and
    kind (`KINDS`)."""

    role: str
    kind: str = "acp_fast"


def module_command(module: str, *args: str) -> tuple[str, ...]:
    """This interpreter running `module` of acp_fast with `args`, importing this `acp_fast`
    whatever the working directory (`-P`, or the Python 3.10 trampoline; see the module
    docstring). Give it [`child_env`][acp_fast.benchmark.runtime.child_env]'s environment."""
    from ..conductor.spec import same_acp_fast

    argv, _ = same_acp_fast([sys.executable, "-m", module, *args])
    return tuple(argv)


def launch(role: str, module: str, *args: str) -> tuple[str, ...]:
    """[`module_command`][acp_fast.benchmark.runtime.module_command] of `module` through `LAUNCHER` as `role` (reports)."""
    return module_command(LAUNCHER, role, module, *args)


def launch_script(role: str, script: str, *args: str) -> tuple[str, ...]:
    """A Python script (an SDK peer on acp_fast's drop-in) through `LAUNCHER` as `role`."""
    return module_command(LAUNCHER, role, "--script", script, *args)


def child_env(**extra: str) -> dict[str, str]:
    """The environment (on top of this process's) of an acp_fast process of a row: this
    `acp_fast`'s folder first on `PYTHONPATH` where the child would not find it by itself
    (see the module docstring), plus `extra`."""
    from ..conductor.spec import same_acp_fast

    _, env = same_acp_fast([sys.executable, "-m", LAUNCHER])
    env.update(extra)
    return env


def _twin(engine: str | None) -> str:
    return {"c": "compiled (c)", "py": "pure (py)"}.get(str(engine), repr(engine))


def check(reports: Sequence[JsonObject], processes: Sequence[Process], *, engine: str | None, loop: str,
          result: Mapping[str, object] | None = None) -> list[JsonObject]:
    """The processes of one client invocation, as each reported itself, checked against its row.

    Args:
        reports: the lines of [`read_reports`][acp_fast.benchmark.runtime.read_reports].
        processes: what the row runs, in order (client, conductor, proxies, agent).
        engine: the row's twin (`"c"`, `"py"`), or `None`: any, one for all.
        loop: the row's loop (`"asyncio"`, `"uvloop"`; `"node"`: no Python process).
        result: the client's JSON line: its `engine`/`loop` and the agent's `agentEngine`/
            `agentLoop` (`_test/stats`) are checked too where given, and an SDK peer's loop
            is taken from there.

    Returns:
        One `{"role", "kind", "pid", "engine", "loop", "acp_fast", "python"}` per process of
        the row, in its order (`None` where a process has nothing to say: an SDK peer's twin).

    Raises:
        RuntimeMismatch: listing every disagreement.
    """
    result = result or {}
    starts = [r for r in reports if r.get("event") == "start"]
    loops: dict[object, set[str]] = {}
    for r in reports:
        if r.get("event") == "loop":
            loops.setdefault(r.get("pid"), set()).add(str(r.get("loop")))
    problems: list[str] = []
    grouped: dict[str, list[str]] = {}  # what -> the processes it is true of
    want = Counter(p.role for p in processes if p.kind == "acp_fast")
    got = Counter(str(r.get("role")) for r in starts)
    for role in sorted(want.keys() | got.keys()):
        if got[role] < want[role]:
            problems.append(f"no report from {want[role] - got[role]} of {want[role]} {role} process(es)")
        elif got[role] > want[role]:
            problems.append(f"{got[role] - want[role]} unexpected {role} process(es) reported")
    engines = {str(r.get("engine")) for r in starts}
    if engine is None and len(engines) > 1:
        problems.append(f"the processes ran different twins: {', '.join(sorted(engines))}")
    by_role: dict[str, list[JsonObject]] = {}
    for r in starts:
        by_role.setdefault(str(r.get("role")), []).append(r)
    out: list[JsonObject] = []
    for p in processes:
        rec: JsonObject = {"role": p.role, "kind": p.kind, "pid": None, "engine": None, "loop": None,
                           "acp_fast": None, "python": None}
        if p.kind == "acp_fast" and by_role.get(p.role):
            start = by_role[p.role].pop(0)
            pid = start.get("pid")
            seen = loops.get(pid, set())
            rec.update(pid=pid, engine=start.get("engine"), acp_fast=start.get("acp_fast"),
                       python=start.get("python"), loop=",".join(sorted(seen)) or None)
            who = f"{p.role} (pid {pid})"
            if engine is not None and start.get("engine") != engine:
                grouped.setdefault(f"ran the {_twin(start.get('engine'))} twin, the row is {_twin(engine)}",
                                   []).append(who)
            if start.get("acp_fast") != PACKAGE_DIR:
                grouped.setdefault(f"imported acp_fast from {start.get('acp_fast')}, the harness from {PACKAGE_DIR}",
                                   []).append(who)
            if start.get("python") != sys.executable:
                grouped.setdefault(f"ran on {start.get('python')}, the harness on {sys.executable}", []).append(who)
        key = "loop" if p.role == "client" else "agentLoop" if p.role == "agent" else ""
        said_loop = result.get(key) if key else None
        if p.kind == "node":
            rec["loop"] = "node"
        elif loop != "node":
            if rec["loop"] is None and isinstance(said_loop, str):
                rec["loop"] = said_loop  # a script (an SDK peer, on a drop-in or not) reports its own loop
            if rec["loop"] is not None and rec["loop"] != loop:
                problems.append(f"{p.role} ran {rec['loop']}, the row's loop is {loop}")
            elif said_loop is not None and said_loop != loop:
                problems.append(f"{key} {said_loop!r}, the row's loop is {loop!r}")
            elif p.kind == "acp_fast" and rec["loop"] is None:
                problems.append(f"{p.role} reported no event loop, the row's is {loop}")
        out.append(rec)
    # the client's JSON line and the agent's _test/stats say the same, where they say it
    for role, key in (("client", "engine"), ("agent", "agentEngine")):
        said = result.get(key)
        mine = next((r for r in out if r["role"] == role and r["kind"] in ("acp_fast", "other")), None)
        if said is None or mine is None or (role == "client" and result.get("sdk") not in (None, "acp_fast")):
            continue
        if mine["kind"] == "other":
            mine["engine"] = said  # an --acp-agent command: its _test/stats is all there is
            if engine is not None and said != engine:
                problems.append(f"{role} reported the {_twin(str(said))} twin, the row is {_twin(engine)}")
        elif mine["engine"] is not None and said != mine["engine"]:
            problems.append(f"{role} reported {key} {said!r} but its process ran {mine['engine']!r}")
    problems[:0] = [f"{', '.join(who)} {what}" for what, who in grouped.items()]
    if problems:
        raise RuntimeMismatch("; ".join(problems), out)
    return out


def summary(processes: Sequence[Mapping[str, object]]) -> str:
    """The `ran` cell: each process's twin (`c`, `py`), `sdk` or `node`, in order, runs of
    the same one counted (`c ×2`, `sdk + c`, `c ×6`); `—` for none."""
    names = [str(p.get("engine") or "?") if p.get("kind") in ("acp_fast", "other") else str(p.get("kind"))
             for p in processes]
    parts = []
    for name, group in groupby(names):
        k = len(list(group))
        parts.append(f"{name} ×{k}" if k > 1 else name)
    return " + ".join(parts) or "—"
