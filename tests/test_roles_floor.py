"""The roles floor is built by composition, and its public surface is typed (issue #19).

Source-tree checks read with ``ast`` (nothing is run):

* no ``role ==`` / ``role !=`` string test in ``roles/``: a connection's role is its type
  (``AgentConnection``, ``ClientConnection``, ``ProxyConnection``), whose class data
  (``guard_role``, ``answers_initialize``, …) and ``Rules`` (the handler context, the tracked
  requests, how ``initialize`` is negotiated and answered) say what differs; a router checks
  a builder by its type;
* no role's connection type in ``roles/`` overrides a method of the base connection (its
  constructor aside, which hands the role's ``Rules`` over): roles are data handed to one
  connection, not hooks (issue #34);
* no public signature in ``roles/``, ``conductor/`` or ``compat/`` mentions ``Any`` (JSON
  payloads say ``Json`` / ``JsonObject``, see :mod:`acp_fast.jsontypes`);
* at most :data:`MAX_ANY_RETURNS` functions in the whole package return ``-> Any`` (generated
  modules aside);
* no comparison of a version with a version number (``version >= 2``, ``self.version == 1``,
  ``sel.version > 1``) in ``roles/``, ``conductor/`` or ``protocol/`` outside
  ``protocol/profile.py``: what differs between versions is a field of the connection's
  ``VersionProfile`` (issue #34);
* one sender: a single class in ``roles/`` sends as a role (``Sender``, the compiled update
  sender its fast path), and nothing in ``roles/``, ``conductor/`` or ``compat/`` picks a
  path by testing a sender's exact type (``type(x) is Sender``) (issue #34).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "acp_fast"

pytestmark = pytest.mark.skipif(not (PACKAGE / "roles" / "_hot_py.py").exists(),
                                reason="source-tree check: the package's .py sources are not in this tree")

#: generated from the ACP schemas by scripts/gen_surfaces.py (their types are the schema's)
GENERATED = {"protocol/methods_v1.py", "protocol/methods_v2.py", "protocol/types_v1.py",
             "protocol/types_v2.py", "protocol/_surface_gen.py"}
MAX_ANY_RETURNS = 10
TYPED_FOLDERS = ("roles", "conductor", "compat")


def _sources(*folders: str) -> Iterator[tuple[str, ast.Module]]:
    roots = [PACKAGE / f for f in folders] if folders else [PACKAGE]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(PACKAGE).as_posix()
            if rel not in GENERATED:
                yield rel, ast.parse(path.read_text(encoding="utf-8"))


def _is_role(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "role") or (
        isinstance(node, ast.Name) and node.id == "role")


def test_no_role_string_tests_in_roles() -> None:
    found = []
    for rel, tree in _sources("roles"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
                sides = [node.left, *node.comparators]
                if any(_is_role(s) for s in sides) and any(
                        isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "role string tests in roles/:\n" + "\n".join(found)


def _public_signatures(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    def functions(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        defs: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    not node.name.startswith("_") or node.name in ("__init__", "__call__")):
                defs.setdefault(node.name, []).append(node)
        for name, nodes in defs.items():
            overloads = [n for n in nodes if any(
                isinstance(d, ast.Name) and d.id == "overload" for d in n.decorator_list)]
            for node in overloads or nodes:  # an overloaded name: its overloads are the signature
                yield prefix + name, node

    yield from functions(tree.body, "")
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield from functions(node.body, node.name + ".")


def _annotations(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.expr]:
    args = node.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None and arg.annotation is not None:
            yield arg.annotation
    if node.returns is not None:
        yield node.returns


def test_no_any_in_public_signatures() -> None:
    found = []
    for rel, tree in _sources(*TYPED_FOLDERS):
        for name, node in _public_signatures(tree):
            bad = [ast.unparse(a) for a in _annotations(node) if re.search(r"\bAny\b", ast.unparse(a))]
            if bad:
                found.append(f"{rel}:{node.lineno} {name}: {', '.join(bad)}")
    assert found == [], f"{len(found)} public signatures with Any:\n" + "\n".join(found)


def test_few_any_returns_in_the_package() -> None:
    found = [f"{rel}:{node.lineno} {node.name}"
             for rel, tree in _sources() for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             and node.returns is not None and ast.unparse(node.returns) == "Any"]
    assert len(found) <= MAX_ANY_RETURNS, f"{len(found)} functions return Any:\n" + "\n".join(found)


#: the ACP version numbers a version branch would compare with
VERSION_NUMBERS = {1, 2}
PROFILE_MODULE = "protocol/profile.py"


def _names_a_version(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name.lower().endswith("version")


def test_no_version_number_branches_outside_the_profile() -> None:
    found = []
    for rel, tree in _sources("roles", "conductor", "protocol"):
        if rel == PROFILE_MODULE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(_names_a_version(s) for s in sides) and any(
                        isinstance(s, ast.Constant) and type(s.value) is int and s.value in VERSION_NUMBERS
                        for s in sides):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "version branches (read a field of the VersionProfile instead):\n" + "\n".join(found)


#: methods of the base connection a role's connection type may still override (issue #34
#: item 2 took them to none: a role is data handed to the one connection, its `Rules`); keep
#: it empty
ROLE_OVERRIDES: frozenset[str] = frozenset()
#: what a facade does define again: its constructor, which hands its `Rules` to the base's
CONSTRUCTOR = "__init__"


def _role_connection_types() -> list[type]:
    """Every connection type of ``roles/`` below `AcpConnection` (the facades)."""
    import importlib
    import pkgutil

    import acp_fast.roles
    from acp_fast.roles.connection import AcpConnection

    found: set[type] = set()
    for info in pkgutil.iter_modules(acp_fast.roles.__path__, "acp_fast.roles."):
        module = importlib.import_module(info.name)
        found |= {value for value in vars(module).values() if isinstance(value, type)
                  and issubclass(value, AcpConnection) and value is not AcpConnection
                  and value.__module__.startswith("acp_fast.roles.")}
    return sorted(found, key=lambda cls: cls.__qualname__)


def _overridden(cls: type) -> set[str]:
    """The methods (functions, properties, static and class methods) `cls` defines that a
    connection type it derives from already defines."""
    from acp_fast.roles.connection import AcpConnection

    bases = [b for b in cls.__mro__[1:] if isinstance(b, type) and issubclass(b, AcpConnection)]
    methods = (staticmethod, classmethod, property)
    return {name for name, value in vars(cls).items()
            if (inspect.isfunction(value) or isinstance(value, methods)) and name != CONSTRUCTOR
            and any(name in vars(base) for base in bases)}


def test_the_facades_are_found() -> None:
    names = {cls.__name__ for cls in _role_connection_types()}
    assert {"AgentConnection", "ClientConnection", "ProxyConnection"} <= names, names


def test_no_role_overrides_a_base_connection_method() -> None:
    found = {f"{cls.__module__}.{cls.__qualname__}.{name}"
             for cls in _role_connection_types() for name in _overridden(cls) - ROLE_OVERRIDES}
    assert found == set(), "base connection methods overridden by a role (make it a field of its Rules):\n" + \
        "\n".join(sorted(found))


def test_the_override_check_sees_an_override() -> None:
    """The check above is not vacuous: a subclass redefining a base method is caught, its
    constructor and its own new methods are not."""
    from acp_fast.roles.proxy import ProxyConnection

    class Overriding(ProxyConnection[int]):
        def __init__(self) -> None:  # pragma: no cover - never made
            pass

        def _negotiate(self, params: object) -> object:  # pragma: no cover - never called
            return params

        def own(self) -> None:  # pragma: no cover - never called
            pass

    assert _overridden(Overriding) == {"_negotiate"}


#: the one class of the outgoing side (issue #34 item 3)
SENDER_CLASS = "Sender"


def _is_type_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type"


def test_no_sender_type_tests() -> None:
    found = []
    for rel, tree in _sources("roles", "conductor", "compat"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq))
                                                     for op in node.ops):
                sides = [node.left, *node.comparators]
                if any(_is_type_call(s) for s in sides) and any(
                        "Sender" in ast.unparse(s) for s in sides if not _is_type_call(s)):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "a path picked by a sender's type (call the one Sender instead):\n" + "\n".join(found)


def test_one_sender_class() -> None:
    senders = [f"{rel}:{node.lineno} {node.name}" for rel, tree in _sources("roles") for node in ast.walk(tree)
               if isinstance(node, ast.ClassDef) and node.name.endswith("Sender")
               and not any(ast.unparse(b) == "Protocol" for b in node.bases)]
    assert senders == [f"roles/_hot_py.py:{_line_of(SENDER_CLASS)} {SENDER_CLASS}"], senders


def _line_of(name: str) -> int:
    tree = ast.parse((PACKAGE / "roles" / "_hot_py.py").read_text(encoding="utf-8"))
    return next(n.lineno for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
