"""The engine as a typed seam (issue #34 item 5).

* both twins satisfy [`Engine`][acp_fast.engine.Engine] (every member of the protocol, at run
  time; mypy checks the same in `acp_fast/engine.py`), and their capability flag says what
  they are;
* [`open_connection`][acp_fast.roles.streams.open_connection] opens a `Connection` on a stream
  with the engine resolved (a choice string, a twin module, or `None` for the selected one);
* source checks: no upper layer tests an engine by its name (`IMPLEMENTATION == …`), and no
  module of `roles/` but `streams.py` constructs a JSON-RPC `Connection` itself.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from types import ModuleType

import pytest

import acp_fast.engine
from acp_fast.engine import Engine
from acp_fast.roles.streams import engine_twin, open_connection, resolve_engine
from acp_fast.transport import memory_pair

PACKAGE = Path(__file__).resolve().parents[1] / "acp_fast"
UPPER = ("roles", "protocol", "conductor", "transport", "compat", "benchmark", "testy", "cli")


def _members() -> list[str]:
    return sorted(n for n in vars(Engine) if not n.startswith("_"))


def test_both_twins_and_the_selector_are_engines(engine: ModuleType) -> None:
    assert isinstance(engine, Engine)
    assert isinstance(acp_fast.engine, Engine)
    missing = [n for n in _members() if not hasattr(engine, n)]
    assert missing == []
    assert engine.COMPILED is (engine.IMPLEMENTATION == "c")
    assert "COMPILED" in engine.__all__


def test_a_module_without_the_flags_is_not_an_engine() -> None:
    fake = ModuleType("fake_engine")
    for name in _members():
        if name != "COMPILED":
            setattr(fake, name, getattr(acp_fast.engine, name))
    assert not isinstance(fake, Engine)
    fake.COMPILED = False  # type: ignore[attr-defined]
    assert isinstance(fake, Engine)


def test_open_connection_resolves_the_engine(engine: ModuleType) -> None:
    asyncio.run(asyncio.wait_for(_open_and_talk(engine), 10))


async def _open_and_talk(engine: ModuleType) -> None:
    a, b = memory_pair()
    conn = open_connection(a, engine.IMPLEMENTATION, lazy=True)  # type: ignore[arg-type]
    assert conn.engine is engine
    conn2 = open_connection(b, engine)
    assert conn2.engine is engine
    conn.notify("x/ping", {"n": 1})
    got: list[object] = []
    conn2.on_notification("x/ping", lambda m: got.append(m.params))
    while not got:
        await asyncio.sleep(0.01)
    assert got == [{"n": 1}]
    conn.close()
    conn2.close()
    await conn.wait_closed()
    await conn2.wait_closed()


def test_engine_twin_resolves_every_choice(engine: ModuleType) -> None:
    assert engine_twin(engine.IMPLEMENTATION) is engine  # type: ignore[arg-type]
    assert engine_twin(engine) is engine
    assert engine_twin(None) is acp_fast.engine
    with pytest.warns(DeprecationWarning, match="engine_twin"):
        assert resolve_engine(None) is None  # deprecated, kept: None means the selected twin
    with pytest.raises(ValueError):
        engine_twin("rust")  # type: ignore[arg-type]


def _sources(*folders: str):  # type: ignore[no-untyped-def]
    for folder in folders:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def test_no_upper_layer_tests_an_engine_by_name() -> None:
    found = []
    for rel, tree in _sources(*UPPER):
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
                text = ast.unparse(node)
                if "IMPLEMENTATION" in text:
                    found.append(f"{rel}:{node.lineno}: {text}")
    assert found == [], "engine name tests (use a capability flag of acp_fast.engine.Engine):\n" + "\n".join(found)


def test_roles_open_connections_in_one_place() -> None:
    found = []
    for rel, tree in _sources("roles"):
        if rel == "roles/streams.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Connection":
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "Connection(...) outside roles/streams.py (use open_connection):\n" + "\n".join(found)
