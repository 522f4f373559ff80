"""Runs one Python process of a benchmark row and has it say what it runs.

```bash
python -P -m acp_fast.benchmark.launch ROLE MODULE [ARGS...]
python -P -m acp_fast.benchmark.launch ROLE --script PATH [ARGS...]
```

The process runs `MODULE` as `python -m MODULE ARGS` would (`runpy`, as `__main__`), or
the script `PATH` as `python PATH ARGS` would (its folder first on `sys.path`), in this
same process: nothing else changes for the program. `ROLE` names the process in its row
(`client`, `agent`, `conductor`, `proxy`, `server`).

When `$ACP_FAST_BENCH_REPORT` (`REPORT_ENV`) names a file, the process appends JSON
lines to it (one `write` each, `O_APPEND`: the processes of a row share the file):

* before the program starts, `{"event": "start", "role", "pid", "ppid", "engine", "acp_fast",
  "python"}`: the engine twin active in this process (`acp_fast.IMPLEMENTATION`), the
  folder of the `acp_fast` package it imported and its interpreter;
* for a module, once per event loop that acp_fast's runner ([`acp_fast.transport.run`][acp_fast.transport.run], which
  every runner of acp_fast goes through) makes, `{"event": "loop", "role", "pid", "loop"}`,
  written from inside that loop once it runs (`"asyncio"` or `"uvloop"`: the running
  loop's kind). A script (an official-SDK peer on acp_fast's drop-in) runs its own loop and
  reports it itself (its JSON line, its `_test/stats`); its `acp_fast.transport` is not
  imported ahead of it.

[`read_reports`][acp_fast.benchmark.launch.read_reports] reads them back. Without the variable the launcher writes nothing and changes nothing: the commands
`acp-fast bench --list` shows can be run by hand. The harness side (building these commands,
reading and checking the lines) is [`acp_fast.benchmark.runtime`][acp_fast.benchmark.runtime].
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["REPORT_ENV", "main", "read_reports", "report"]

#: The environment variable naming the file the processes of a row report to.
REPORT_ENV = "ACP_FAST_BENCH_REPORT"


def report(record: dict[str, Any]) -> None:
    """Append `record` as one JSON line to the file `$ACP_FAST_BENCH_REPORT` names (nothing
    when it is unset or empty)."""
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_reports(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The JSON lines the processes wrote to `path` (a torn or foreign line is skipped)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out: list[dict[str, Any]] = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("pid"), int):
            out.append(rec)
    return out


def _watch_loops(role: str) -> None:
    import asyncio

    from ..transport import loop as loops

    made = loops.new_event_loop

    def running() -> None:
        kind = type(asyncio.get_running_loop()).__module__
        report({"event": "loop", "role": role, "pid": os.getpid(),
                "loop": "uvloop" if kind.startswith("uvloop") else "asyncio"})

    def new_event_loop(loop: str | None = None) -> asyncio.AbstractEventLoop:
        ev = made(loop)
        ev.call_soon(running)
        return ev

    new_event_loop.__doc__ = made.__doc__
    loops.new_event_loop = new_event_loop


def main(argv: list[str] | None = None) -> None:
    """Run `ROLE (MODULE | --script PATH) [ARGS...]` (see the module docstring)."""
    args = sys.argv[1:] if argv is None else list(argv)
    script = len(args) >= 3 and args[1] == "--script"
    if len(args) < 2 or (args[1] == "--script" and not script):
        raise SystemExit("usage: python -P -m acp_fast.benchmark.launch ROLE (MODULE | --script PATH) [ARGS...]")
    role = args[0]
    target, rest = (args[2], args[3:]) if script else (args[1], args[2:])
    if os.environ.get(REPORT_ENV):
        import acp_fast

        report({"event": "start", "role": role, "pid": os.getpid(), "ppid": os.getppid(),
                "engine": acp_fast.IMPLEMENTATION,
                "acp_fast": os.path.dirname(os.path.realpath(acp_fast.__file__)), "python": sys.executable})
        if not script:
            _watch_loops(role)
    import runpy

    if script:
        sys.argv = [target, *rest]
        sys.path.insert(0, os.path.dirname(os.path.realpath(target)))
        runpy.run_path(target, run_name="__main__")
    else:
        sys.argv = [target, *rest]  # run_module puts the module's file in sys.argv[0], as -m does
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
