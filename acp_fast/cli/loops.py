"""The event loop of acp_fast's own commands (``acp-fast testy``, the benchmark client).

One place that picks the loop, so the choice can move to ``acp_fast.transport`` later:
``run(coro, "asyncio")`` runs on asyncio's default loop, ``"uvloop"`` on uvloop (an error
when it is not installed), ``"auto"`` on uvloop when it imports, else asyncio.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LOOPS", "available_loops", "loop_name", "run"]

_T = TypeVar("_T")

#: the values of ``--loop``
LOOPS = ("auto", "asyncio", "uvloop")


def uvloop_available() -> bool:
    try:
        import uvloop  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


def available_loops() -> list[str]:
    """``["asyncio", "uvloop"]``, or ``["asyncio"]`` when uvloop does not import."""
    return ["asyncio", "uvloop"] if uvloop_available() else ["asyncio"]


def _factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if loop == "auto":
        loop = "uvloop" if uvloop_available() else "asyncio"
    if loop == "asyncio":
        return asyncio.new_event_loop
    if loop == "uvloop":
        import uvloop  # type: ignore[import-not-found, unused-ignore]

        return uvloop.new_event_loop  # type: ignore[no-any-return, unused-ignore]
    raise ValueError(f"unknown loop {loop!r}; expected one of {', '.join(LOOPS)}")


def run(coro: Coroutine[Any, Any, _T], loop: str = "auto") -> _T:
    """Run ``coro`` to completion on a new event loop of kind ``loop`` (see the module docstring)."""
    factory = _factory(loop)
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)
    ev = factory()  # pragma: no cover - Python 3.10
    try:  # pragma: no cover
        asyncio.set_event_loop(ev)
        return ev.run_until_complete(coro)
    finally:  # pragma: no cover
        ev.run_until_complete(ev.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        ev.close()


def loop_name() -> str:
    """``"uvloop"`` or ``"asyncio"``: the kind of the running loop."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
