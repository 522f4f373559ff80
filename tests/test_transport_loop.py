"""Event-loop choice (``acp_fast.transport.loop``): ``loop=`` argument, ``ACP_FAST_LOOP``, auto.

uvloop is a dependency where it installs; the uvloop cases are skipped only when it cannot
be imported. Its absence is simulated by hiding the module.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from typing import Any

import pytest

from acp_fast.jsonrpc import Connection
from acp_fast.transport import LOOP_ENV, memory_pair, new_event_loop, resolve_loop, run


def _uvloop_missing() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return True
    return False


needs_uvloop = pytest.mark.skipif(_uvloop_missing(), reason="uvloop cannot be imported")


def _kind(loop: asyncio.AbstractEventLoop) -> str:
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


async def _running_kind() -> str:
    await asyncio.sleep(0)
    return _kind(asyncio.get_running_loop())


@pytest.fixture(autouse=True)
def _no_ambient_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LOOP_ENV, raising=False)


def _made(choice: str | None) -> str:
    loop = new_event_loop(choice)
    try:
        return _kind(loop)
    finally:
        loop.close()


def test_asyncio_choice_gives_asyncios_loop() -> None:
    assert resolve_loop("asyncio") == "asyncio"
    assert _made("asyncio") == "asyncio"
    assert run(_running_kind(), loop="asyncio") == "asyncio"


@needs_uvloop
def test_uvloop_and_auto_give_uvloop_when_it_is_installed() -> None:
    assert resolve_loop("uvloop") == resolve_loop("auto") == resolve_loop() == "uvloop"
    assert _made("uvloop") == _made("auto") == _made(None) == "uvloop"
    assert run(_running_kind(), loop="uvloop") == "uvloop"
    assert run(_running_kind()) == "uvloop"  # the default is auto


@needs_uvloop
@pytest.mark.parametrize("choice", ["asyncio", "uvloop", "auto", " UVLOOP "])
def test_environment_variable_picks_the_loop_and_the_argument_wins(choice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOOP_ENV, choice)
    expected = "asyncio" if choice == "asyncio" else "uvloop"
    assert resolve_loop() == expected
    assert run(_running_kind()) == expected
    other = "uvloop" if expected == "asyncio" else "asyncio"
    assert run(_running_kind(), loop=other) == other


def test_empty_environment_variable_means_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOOP_ENV, "")
    assert resolve_loop() == resolve_loop("auto")


def test_unknown_choices_are_refused_and_the_coroutine_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="loop='trio'"):
        resolve_loop("trio")
    monkeypatch.setenv(LOOP_ENV, "tokio")
    with pytest.raises(ValueError, match=f"{LOOP_ENV}='tokio'"):
        new_event_loop()
    coro = _running_kind()
    with pytest.raises(ValueError):
        run(coro)
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # no "never awaited" warning


def test_without_uvloop_auto_falls_back_and_uvloop_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert resolve_loop("auto") == resolve_loop() == "asyncio"
    assert run(_running_kind()) == "asyncio"
    with pytest.raises(ImportError, match="uvloop cannot be imported"):
        resolve_loop("uvloop")
    monkeypatch.setenv(LOOP_ENV, "uvloop")
    with pytest.raises(ImportError, match=LOOP_ENV):
        run(_running_kind())


@pytest.mark.parametrize("choice", ["asyncio", pytest.param("uvloop", marks=needs_uvloop)])
def test_a_connection_works_on_each_loop(engine: Any, choice: str) -> None:
    async def main() -> tuple[str, Any]:
        a, b = memory_pair()
        client, agent = Connection(a, engine=engine), Connection(b, engine=engine)
        agent.on_request("echo", lambda ctx: ctx.params)
        result = await asyncio.wait_for(client.request("echo", {"loop": choice}), 30)
        client.close()
        await agent.wait_closed()
        return _kind(asyncio.get_running_loop()), result

    assert run(main(), loop=choice) == (choice, {"loop": choice})
