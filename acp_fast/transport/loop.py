"""Which event loop acp_fast's own runners use: uvloop by default where it is installed.

uvloop is a dependency of the package wherever it installs (CPython, not Windows), because
it roughly doubles sequential round trips. Every blocking runner of acp_fast
(`run_agent_stdio`, `acp-fast testy`, `acp-fast conductor`, the benchmark's peers)
goes through [`run`][acp_fast.transport.loop.run], so one choice applies everywhere:

* the `loop` argument of [`run`][acp_fast.transport.loop.run] / [`new_event_loop`][acp_fast.transport.loop.new_event_loop], when given;
* else the environment variable `ACP_FAST_LOOP` (`LOOP_ENV`);
* else `"auto"`.

Choices: `"auto"` (uvloop when it can be imported, else asyncio's default loop),
`"uvloop"` (uvloop or an error) and `"asyncio"` (asyncio's default loop, the opt-out).
Code that runs its own loop (`asyncio.run(...)`) is not affected: acp_fast works on any
asyncio-compatible loop. [`available_loops`][acp_fast.transport.loop.available_loops] says
which loops this machine has and [`loop_name`][acp_fast.transport.loop.loop_name] which kind
is running (the commands' `--loop` flags and the benchmark's reports).

NOTE: before making a loop, [`new_event_loop`][acp_fast.transport.loop.new_event_loop] puts `/dev/null` on any of the
descriptors 0, 1, 2 that is closed (a process started with `<&-` or `>&-`). Otherwise
the loop's own descriptors take those numbers: libuv (uvloop) then aborts the process when
it closes them, and a stray write to "stdout" would land in the loop's self-pipe.
`sys.__stdin__` / `sys.__stdout__` still say they were closed, so `connect_stdio`
treats them as closed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from types import ModuleType
from typing import Any, Literal, TypeVar

__all__ = ["LOOP_CHOICES", "LOOP_ENV", "available_loops", "loop_name", "new_event_loop", "resolve_loop", "run"]

_T = TypeVar("_T")

#: The environment variable that picks the loop when no ``loop`` argument is given.
LOOP_ENV = "ACP_FAST_LOOP"
#: The accepted values of ``loop=`` and of ``ACP_FAST_LOOP``.
LOOP_CHOICES = ("auto", "asyncio", "uvloop")


def _uvloop() -> ModuleType | None:
    try:
        import uvloop  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return uvloop  # type: ignore[no-any-return, unused-ignore]


def _plug_closed_stdio() -> None:
    if sys.platform == "win32":  # pragma: no cover
        return
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:  # pragma: no cover - the lowest free number is fd unless racing
                os.dup2(null, fd)
                os.close(null)


def resolve_loop(loop: str | None = None) -> Literal["asyncio", "uvloop"]:
    """The loop [`new_event_loop`][acp_fast.transport.loop.new_event_loop] would make for `loop`: `"asyncio"` or `"uvloop"`.

    Args:
        loop: `"auto"`, `"asyncio"` or `"uvloop"`; `None` reads `ACP_FAST_LOOP`
            (unset or empty means `"auto"`).

    Raises:
        ValueError: an unknown choice (in the argument or in `ACP_FAST_LOOP`).
        ImportError: `"uvloop"` was asked for and uvloop cannot be imported.
    """
    source = "loop"
    if loop is None:
        loop = os.environ.get(LOOP_ENV, "").strip().lower() or "auto"
        source = LOOP_ENV
    if loop not in LOOP_CHOICES:
        raise ValueError(f"{source}={loop!r}: expected one of {', '.join(LOOP_CHOICES)}")
    if loop == "asyncio":
        return "asyncio"
    if _uvloop() is not None:
        return "uvloop"
    if loop == "uvloop":
        raise ImportError(f"{source}='uvloop' but uvloop cannot be imported (pip install uvloop)")
    return "asyncio"


def new_event_loop(loop: str | None = None) -> asyncio.AbstractEventLoop:
    """A new event loop of the kind [`resolve_loop`][acp_fast.transport.loop.resolve_loop] picks (uvloop by default when installed).

    Args:
        loop: `"auto"`, `"asyncio"`, `"uvloop"` or `None` (read `ACP_FAST_LOOP`).
    """
    choice = resolve_loop(loop)
    _plug_closed_stdio()
    if choice == "uvloop":
        return _uvloop().new_event_loop()  # type: ignore[no-any-return, union-attr, unused-ignore]
    return asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, _T], *, loop: str | None = None, debug: bool | None = None) -> _T:
    """`asyncio.run(main)` on [`new_event_loop`][acp_fast.transport.loop.new_event_loop] (`loop` as there).

    The loop is chosen before `main` starts; an invalid choice closes `main` unstarted
    and raises (see [`resolve_loop`][acp_fast.transport.loop.resolve_loop]).
    """
    try:
        choice = resolve_loop(loop)
    except BaseException:
        main.close()
        raise
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=lambda: new_event_loop(choice), debug=debug) as runner:
            return runner.run(main)
    ev_loop = new_event_loop(choice)  # pragma: no cover - Python 3.10
    try:  # pragma: no cover
        asyncio.set_event_loop(ev_loop)
        if debug is not None:
            ev_loop.set_debug(debug)
        return ev_loop.run_until_complete(main)
    finally:  # pragma: no cover
        ev_loop.run_until_complete(ev_loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        ev_loop.close()


def available_loops() -> list[str]:
    """`["asyncio", "uvloop"]`, or `["asyncio"]` when uvloop does not import."""
    try:
        resolve_loop("uvloop")
    except ImportError:
        return ["asyncio"]
    return ["asyncio", "uvloop"]


def loop_name() -> str:
    """`"uvloop"` or `"asyncio"`: the kind of the running loop."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
