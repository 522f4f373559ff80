"""No module of ``compat/``, ``conductor/``, ``testy/`` or ``roles/`` reaches another's private names.

A name with a leading underscore belongs to the class or module that defines it; code
elsewhere that reads or sets it breaks silently when its owner changes. So where one module
needs something of another, the owner offers it publicly (a documented, typed property or
method). This test reads those folders with ``ast`` (nothing is run) and fails listing every
place that crosses.

The rule. A *private name* starts with ``_`` and is not a dunder (``__name__``); name-mangled
``__x`` names are private too. Flagged:

* an attribute ``x._name`` (read, set or deleted) whose receiver ``x`` is not ``self``,
  ``cls`` or ``super()``: a private attribute is used from inside its own class (and its
  subclasses, through ``self`` / ``super()``) only. This holds inside one module too:
  another instance's or another class's private attribute is reached through a public one;
* ``getattr`` / ``setattr`` / ``hasattr`` / ``delattr`` with a constant private name, on a
  receiver other than ``self`` / ``cls``: the same access spelled differently;
* ``from module import _name`` where ``_name`` is not itself a module of the package.

Not flagged: importing a private *module* (``from .._rawjson import RawJson``,
``from ._hot import Context``, ``from acp_fast import _engine_py``) whose names used are public:
the underscore there says "not part of the package's API", not "private to one module"; and
a module's own private names (``_helper()``, ``_CONSTANT``) used inside it.

Third-party private names the package cannot avoid are listed in :data:`ALLOWED`, each with
its reason; an entry that no longer matches anything fails the test too, so the list only
shrinks. (No pair of generated or compiled-twin files needs an entry: ``roles/_hot_py.py``,
the source of the compiled ``_hot_c``, reaches nothing private of another module.)
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "acp_fast"

# A check of the source tree: where the tests run beside an installed wheel, from an sdist whose
# package sources were removed (scripts/test_wheel.sh), there is no tree to read; the checkout's
# own test runs (both twins) keep the check.
pytestmark = pytest.mark.skipif(not (PACKAGE / "roles" / "_hot_py.py").exists(),
                                reason="source-tree check: the package's .py sources are not in this tree")
FOLDERS = ("compat", "conductor", "testy", "roles", "remote", "fleet")

#: ``(file, the flagged expression as ast.unparse prints it) -> why it stays``
ALLOWED = {
    ("acp_fast/compat/acp_sdk/fast.py", "from acp.router import _resolve_handler"):
        "the connection drop-in resolves the client's session_update exactly as the SDK's own "
        "router does (snake_case, then the legacy camelCase name); the SDK offers this only "
        "privately, and a copy would drift from the SDK versions the drop-in is tested with",
    ("acp_fast/compat/acp_sdk/fast.py", "from acp.client.connection import _SessionUpdateTracker"):
        "a ClientSideConnection on a Transport the drop-in cannot read runs on the SDK's own "
        "connection, whose prompt waits on the SDK's per-session update tracker: the SDK builds "
        "it in its constructor, which the drop-in's subclass replaces",
    ("acp_fast/roles/mcp.py", "server._lowlevel_server"):
        "the mcp package's MCPServer runs over arbitrary streams only through its low-level "
        "server, which it exposes privately (its own in-memory transport does the same)",
}

_ATTRIBUTE_FUNCTIONS = ("getattr", "setattr", "hasattr", "delattr")


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own(receiver: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: the receiver is the code's own class."""
    if isinstance(receiver, ast.Name):
        return receiver.id in ("self", "cls")
    return isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super"


def _is_package_module(dotted: str) -> bool:
    if not dotted.startswith("acp_fast"):
        return False
    path = REPO.joinpath(*dotted.split("."))
    return (path.is_dir() and (path / "__init__.py").is_file()) or any(
        path.with_name(path.name + suffix).is_file() for suffix in (".py", ".pyx", ".pxd", ".pyi"))


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = list(path.relative_to(REPO).with_suffix("").parts)[:-1]  # the file's package
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def crossings(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """``(line, expression)`` of every private crossing in one file (``source``: its text,
    default read from ``path``; relative imports resolve from ``path``'s package)."""
    out: list[tuple[int, str]] = []
    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and is_private(node.attr) and not _own(node.value):
            out.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ATTRIBUTE_FUNCTIONS
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and is_private(node.args[1].value)
              and not _own(node.args[0])):
            out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(path, node)
            for alias in node.names:
                if is_private(alias.name) and not _is_package_module(f"{module}.{alias.name}"):
                    out.append((node.lineno, f"from {module} import {alias.name}"))
    return out


@functools.cache
def found() -> dict[tuple[str, str], list[int]]:
    """Every crossing in the checked folders: ``(file, expression) -> lines``."""
    out: dict[tuple[str, str], list[int]] = {}
    for folder in FOLDERS:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            for line, expression in crossings(path):
                out.setdefault((path.relative_to(REPO).as_posix(), expression), []).append(line)
    return out


def test_the_checker_sees_each_kind_of_crossing() -> None:
    source = (
        "from ..jsonrpc import _describe\n"
        "from .._rawjson import RawJson\n"
        "from acp_fast import _engine_py\n"
        "from . import _hot\n"
        "class A:\n"
        "    def f(self, other):\n"
        "        self._own = other._theirs\n"
        "        super()._parent()\n"
        "        cls._x, _module_level()\n"
        "        getattr(other, '_hidden'), getattr(self, '_mine')\n"
        "        return self.__class__, other.__dict__\n"
    )
    flagged = crossings(PACKAGE / "roles" / "probe.py", source)  # as if it were a module of roles/
    assert [expression for _, expression in flagged] == [
        "from acp_fast.jsonrpc import _describe",
        "other._theirs",
        "getattr(other, '_hidden')",
    ]


def test_no_private_names_of_other_modules() -> None:
    crossing = {key: lines for key, lines in found().items() if key not in ALLOWED}
    assert not crossing, "private names reached from outside their class or module:\n" + "\n".join(
        f"    {file}:{','.join(map(str, lines))}: {expression}" for (file, expression), lines in sorted(crossing.items()))


def test_every_allowed_crossing_is_still_there() -> None:
    stale = [key for key in ALLOWED if key not in found()]
    assert not stale, f"ALLOWED entries that match nothing any more (remove them): {stale}"
