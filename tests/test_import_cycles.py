"""No import circles among the modules of ``acp_fast``.

The package's layers depend one way (see the architecture notes: engine -> rpc -> protocol ->
roles -> conductor, compat, testy -> benchmark -> cli); inside a layer the modules do too. This
test reads every module's imports with ``ast`` (nothing is imported or run), builds the module
graph and fails listing every circle, with the import lines that close it.

What counts as an import (an arrow A -> B):

* every ``import`` and ``from ... import`` statement of module A, at module level or inside a
  function, class, ``try`` or ``if``: an import hidden in a function still ties the two
  modules together, it only moves the moment the tie is paid;
* ``importlib.import_module("acp_fast.x")`` with a constant name (one built at run time,
  such as an engine twin chosen by name, is not followed);
* an import under ``if TYPE_CHECKING:`` too: it never runs, but it still ties the two
  modules' designs together (a lower module that names a higher module's type depends on
  it), and a drawing of the tree shows it as an arrow like any other. A lower module that
  needs to speak of a higher one names a ``Protocol`` of its own layer instead
  (``roles.context.Peer``, ``roles.mcp.McpConnection``); the package face
  ``acp_fast/__init__.py`` types its lazy attributes this way, which is an arrow down.

Where an arrow points: ``from .x import y`` points at the submodule ``x.y`` when ``y`` is one,
else at ``x`` (a package: its ``__init__``); ``import a.b.c`` points at the longest prefix
that is a module of the package. Importing a submodule also runs its parents' ``__init__``;
that implicit step is not an arrow (every submodule would otherwise sit in a circle with the
package face that re-exports it). Compiled modules are modules too: a ``.pyx`` file's
Python-level imports (not its ``cimport`` s) are read with a regular expression, and an
extension that ``setup.py`` compiles from a ``.py`` source (``roles/_hot_c`` from
``roles/_hot_py.py``) has that source's imports.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "acp_fast"

# A check of the source tree: where the tests run beside an installed wheel, from an sdist whose
# package sources were removed (scripts/test_wheel.sh), there is no tree to read; the checkout's
# own test runs (both twins) keep the check.
pytestmark = pytest.mark.skipif(not (PACKAGE / "roles" / "_hot_py.py").exists(),
                                reason="source-tree check: the package's .py sources are not in this tree")

#: a Python-level import line of a ``.pyx`` file (``cimport`` lines do not match)
_PYX_IMPORT = re.compile(r"^\s*(?:from\s+(?P<src>[\w.]+)\s+import\s+(?P<names>[^\n#]+)|import\s+(?P<mod>[\w.]+))",
                         re.MULTILINE)

Edge = tuple[str, str, str]  # (importer, imported, "file:line")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def compiled_from_python() -> dict[str, Path]:
    """Extension modules ``setup.py`` compiles from a ``.py`` source: name -> source."""
    out = {}
    for node in ast.walk(ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Extension"):
            continue
        name = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        sources = next((kw.value for kw in node.keywords if kw.arg == "sources"), None)
        if isinstance(name, str) and isinstance(sources, ast.List) and sources.elts:
            first = sources.elts[0]
            if isinstance(first, ast.Constant) and str(first.value).endswith(".py"):
                out[name] = REPO / str(first.value)
    return out


def modules() -> dict[str, Path]:
    found = {module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    found.update({module_name(p): p for p in PACKAGE.rglob("*.pyx")})
    found.update(compiled_from_python())
    return found


def _resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _target(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _python_imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in known else base), node.lineno
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            yield node.args[0].value, node.lineno


def _pyx_imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    text = path.read_text(encoding="utf-8")
    for match in _PYX_IMPORT.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        if match.group("mod"):
            yield match.group("mod"), line
            continue
        src = match.group("src")
        level = len(src) - len(src.lstrip("."))
        base = _resolve(name, False, level, src.lstrip(".") or None)
        for item in match.group("names").strip("() \\").split(","):
            sub = f"{base}.{item.strip().split(' ')[0]}"
            yield (sub if sub in known else base), line


@functools.cache
def import_graph() -> dict[str, list[Edge]]:
    """Every module of the package -> its arrows to other modules of the package."""
    known = modules()
    graph: dict[str, list[Edge]] = {}
    for name, path in sorted(known.items()):
        reader = _pyx_imports if path.suffix == ".pyx" else _python_imports
        edges: dict[tuple[str, str], Edge] = {}
        for imported, line in reader(name, path, known):
            target = _target(imported, known)
            where = f"{path.relative_to(REPO)}:{line}"
            if target is not None and target != name:
                edges.setdefault((target, where), (name, target, where))
        graph[name] = list(edges.values())
    return graph


def cycles(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for _, w, _where in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def describe(graph: dict[str, list[Edge]], component: list[str]) -> str:
    members = set(component)
    lines = [f"circle of {len(component)} modules: {', '.join(component)}"]
    for v in component:
        for _, w, where in graph[v]:
            if w in members:
                lines.append(f"    {v} -> {w}  ({where})")
    return "\n".join(lines)


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    # a few arrows that must be seen, one of each kind the reader handles
    arrows = {(a, b) for edges in graph.values() for a, b, _ in edges}
    assert ("acp_fast.roles.connection", "acp_fast.roles.streams") in arrows  # from .x import y
    assert ("acp_fast.roles._hot", "acp_fast.roles._hot_c") in arrows  # the compiled twin
    assert ("acp_fast.roles._hot_c", "acp_fast.jsonrpc") in arrows  # compiled from _hot_py.py
    assert ("acp_fast._engine_c", "acp_fast._rawjson") in arrows  # a .pyx file's import
    assert ("acp_fast.testy.v1", "acp_fast") in arrows  # inside a function (Agent)
    assert ("acp_fast", "acp_fast.roles") in arrows  # under TYPE_CHECKING (the face's lazy names)


def test_no_import_circles() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import circles among acp_fast's modules:\n" + "\n".join(describe(graph, c) for c in found)


#: the modules the I/O layer must never reach: the engine and its twins, JSON-RPC, the protocol
_ABOVE_TRANSPORT = ("acp_fast.engine", "acp_fast._engine_c", "acp_fast._engine_py", "acp_fast.jsonrpc",
                    "acp_fast.protocol")


def _is_above_transport(module: str) -> bool:
    return any(module == top or module.startswith(top + ".") for top in _ABOVE_TRANSPORT)


def forbidden_transport_paths(graph: dict[str, list[Edge]]) -> list[list[Edge]]:
    """Every path, through any module, from ``acp_fast.transport`` to a module above it.

    One shortest path per forbidden module reached, found breadth-first from the transport
    modules; an arrow into the remote layer or any other module counts like any other, so a
    detour through a third module is caught too.
    """
    starts = sorted(m for m in graph if m == "acp_fast.transport" or m.startswith("acp_fast.transport."))
    via: dict[str, Edge | None] = {m: None for m in starts}
    queue = list(starts)
    found: list[list[Edge]] = []
    while queue:
        v = queue.pop(0)
        for edge in graph.get(v, ()):
            w = edge[1]
            if w in via:
                continue
            via[w] = edge
            if _is_above_transport(w):
                path = [edge]
                while (back := via[path[0][0]]) is not None:
                    path.insert(0, back)
                found.append(path)
            else:
                queue.append(w)
    return found


def test_transport_knows_nothing_of_json_rpc() -> None:
    # transport/ is the byte layer: it may not import the engine, jsonrpc or protocol, directly
    # or through another module (the remote layer, which speaks JSON-RPC, lives in acp_fast.remote)
    graph = import_graph()
    assert any(m.startswith("acp_fast.transport.") for m in graph)
    found = forbidden_transport_paths(graph)
    assert not found, "acp_fast.transport reaches the JSON-RPC layers:\n" + "\n".join(
        "    " + " -> ".join([p[0][0], *(f"{w} ({where})" for _, w, where in p)]) for p in found)


def test_the_transport_rule_sees_a_relative_import() -> None:
    # the check itself: a detour through a third module is a path it reports, arrow by arrow
    graph = {"acp_fast.transport.x": [("acp_fast.transport.x", "acp_fast.util", "x.py:3")],
             "acp_fast.util": [("acp_fast.util", "acp_fast.protocol.v2", "util.py:9")]}
    assert forbidden_transport_paths(graph) == [[("acp_fast.transport.x", "acp_fast.util", "x.py:3"),
                                                 ("acp_fast.util", "acp_fast.protocol.v2", "util.py:9")]]
