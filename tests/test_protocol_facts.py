"""The protocol facts live in one table, ``acp_fast.protocol.facts`` (issue #34, item 4).

Source-tree checks (sources are read, not run, except the table itself):

* no module of ``acp_fast`` (``.py`` and ``.pyx``) spells one of the table's special method
  names as a string: it imports the name from the table. The table module, the modules
  generated from the schemas and docstrings are exempt;
* the compiled engine's C-level spellings of the forwarder's claimed methods
  (``claimed_method_token`` in ``csrc/acp_forward.cpp``, the length and first-character
  bounds of ``_maybe_special`` in ``_engine_c.pyx``) agree with the table, and both twins'
  forwarder tables are the same;
* every constant of the table says why it is special (a ``#:`` comment), every special name
  is in :data:`~acp_fast.protocol.facts.SPECIAL_METHODS`, and every name the schemas should
  know is a method of a wire surface (a typo would be one).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from acp_fast.protocol import facts
from acp_fast.protocol.surface import WireSurface

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "acp_fast"

source_tree = pytest.mark.skipif(not (PACKAGE / "roles" / "_hot_py.py").exists(),
                                 reason="source-tree check: the package's .py sources are not in this tree")

TABLE = "protocol/facts.py"
#: generated from the ACP schemas by scripts/gen_surfaces.py: they list every method by design
GENERATED = {"protocol/methods_v1.py", "protocol/methods_v2.py", "protocol/types_v1.py",
             "protocol/types_v2.py", "protocol/_surface_gen.py", "protocol/_schema_names.py",
             "protocol/_session_scope.py"}

#: a string literal of a ``.pyx`` file (no prefix, one line)
_PYX_STRING = re.compile(r"""(?<![\w'"])(['"])((?:\\.|(?!\1).)*)\1(?!['"])""")
_TRIPLE = re.compile(r'"""(?:.|\n)*?"""|\'\'\'(?:.|\n)*?\'\'\'')


def _docstring_nodes(tree: ast.Module) -> set[int]:
    """The ids of the docstring constants (and bare string statements) of ``tree``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.add(id(node.value))
    return out


def _python_literals(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstring_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def _pyx_literals(path: Path) -> Iterator[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    # triple-quoted strings are docstrings here; blank them, keeping the line count
    text = _TRIPLE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        for match in _PYX_STRING.finditer(line):
            yield lineno, match.group(2)


def spelled_special_methods() -> list[str]:
    """``file:line: 'name'`` for every literal special method name outside the table."""
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.pyx")]):
        rel = path.relative_to(PACKAGE).as_posix()
        if "__pycache__" in path.parts or rel == TABLE or rel in GENERATED:
            continue
        reader = _pyx_literals if path.suffix == ".pyx" else _python_literals
        found += [f"{rel}:{line}: {value!r}" for line, value in reader(path) if value in facts.SPECIAL_METHODS]
    return found


@source_tree
def test_no_module_spells_a_special_method_name() -> None:
    found = spelled_special_methods()
    assert found == [], ("special method names spelled outside acp_fast/protocol/facts.py "
                         "(import them from there):\n" + "\n".join(found))


@source_tree
def test_the_literal_reader_sees_both_kinds_of_source(tmp_path: Path) -> None:
    """The guard above reads what it must: code literals, not docstrings or comments."""
    py = tmp_path / "m.py"
    py.write_text('"""Mentions "initialize"."""\nX = "initialize"\ndef f():\n    """"session/new"."""\n'
                  '    return f"{X}" + "session/new"\n', encoding="utf-8")
    assert [v for _, v in _python_literals(py) if v in facts.SPECIAL_METHODS] == ["initialize", "session/new"]
    pyx = tmp_path / "m.pyx"
    pyx.write_text('"""A "initialize" docstring\nover lines."""\n# a "session/new" comment\n'
                   "cdef dict T = {'$/cancel_request': 1, \"mcp/message\": 2}\n", encoding="utf-8")
    assert list(_pyx_literals(pyx)) == [(4, "$/cancel_request"), (4, "mcp/message")]


def _c_function_body(text: str, signature: str) -> str:
    start = text.index(signature)
    return text[start:text.index("\n}\n", start)]


@source_tree
def test_the_compiled_forwarder_spells_the_claimed_methods_as_the_table() -> None:
    cpp = _c_function_body((REPO / "csrc" / "acp_forward.cpp").read_text(encoding="utf-8"),
                           "bool claimed_method_token(")
    assert set(re.findall(r'key_is\(s, len, "([^"]+)"\)', cpp)) == facts.FORWARD_CLAIMED_METHODS

    pyx = (PACKAGE / "_engine_c.pyx").read_text(encoding="utf-8")
    body = pyx[pyx.index("cdef inline bint _maybe_special("):]
    body = body[:body.index("\n\n\n")]
    bounds = re.search(r"if n < (\d+) or n > (\d+):", body)
    assert bounds is not None, body
    low, high = int(bounds.group(1)), int(bounds.group(2))
    firsts = set(re.findall(r"c == u'(.)'", body))
    forwarded = facts.FORWARD_CLAIMED_METHODS | facts.SUCCESSOR_METHODS
    assert all(low <= len(m) <= high and m[0] in firsts for m in forwarded), (low, high, firsts)
    # tight: the bounds and first characters are exactly the table's, so the filter stays cheap
    assert (low, high) == (min(map(len, forwarded)), max(map(len, forwarded)))
    assert firsts == {m[0] for m in forwarded}


def test_both_twins_forward_by_the_same_table() -> None:
    from acp_fast import _engine_py

    expected = {**dict.fromkeys(facts.FORWARD_CLAIMED_METHODS, 1), **dict.fromkeys(facts.SUCCESSOR_METHODS, 2)}
    assert _engine_py._FWD_METHODS == expected
    assert _engine_py._SUCCESSOR_NAMES == (facts.PROXY_SUCCESSOR, facts.PROXY_SUCCESSOR_SPEC)
    try:
        from acp_fast import _engine_c
    except ImportError:
        return  # a pure build: no second table
    assert _engine_c._SUCCESSOR_NAMES == _engine_py._SUCCESSOR_NAMES


def _table_constants() -> dict[str, str]:
    return {name: value for name, value in vars(facts).items()
            if name.isupper() and not name.startswith("_") and isinstance(value, str)}


def test_every_special_name_is_in_the_table() -> None:
    names = _table_constants()
    assert set(names.values()) == facts.SPECIAL_METHODS
    assert len(set(names.values())) == len(names), "one name per method"
    assert set(facts.__all__) == {n for n in vars(facts) if not n.startswith("_") and n not in (
        "annotations", "Final", "Mapping", "MappingProxyType", "SESSION_SCOPED")}


def test_every_schema_name_is_a_wire_method() -> None:
    """A typo in the table would be no method of any version's wire surface."""
    known = set()
    for version in (1, 2):
        surface = WireSurface.for_version(version)
        for kind in ("request", "notification"):
            known |= set(surface.methods_of_kind(kind))
    unknown = {m for m in facts.SPECIAL_METHODS - known if not m.startswith("_")}
    assert unknown == set(facts.EXTRA_SESSION_SCOPED_METHODS)
    assert not facts.EXTRA_SESSION_SCOPED_METHODS & known  # extra: the schemas no longer scope it
    assert facts.SETUP_METHODS < facts.V1_SETUP_METHODS < facts.SESSION_SCOPED_METHODS | {facts.SESSION_NEW}


def test_the_proxy_spellings() -> None:
    assert tuple(facts.PROXY_SPELLINGS) == ("underscore", "spec")
    for init, succ in facts.PROXY_SPELLINGS.values():
        assert facts.proxy_initialize_for(succ) == init
    assert {i for i, _ in facts.PROXY_SPELLINGS.values()} == facts.PROXY_INITIALIZE_METHODS
    assert {s for _, s in facts.PROXY_SPELLINGS.values()} == facts.SUCCESSOR_METHODS
    with pytest.raises(KeyError):
        facts.proxy_initialize_for(facts.INITIALIZE)


@source_tree
def test_every_constant_says_why_it_is_special() -> None:
    """Each public constant of the table has a ``#:`` comment right above it."""
    text = (PACKAGE / TABLE).read_text(encoding="utf-8")
    lines = text.splitlines()
    missing = []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and target.id.isupper() and not target.id.startswith("_"):
                if not lines[node.lineno - 2].startswith("#: "):
                    missing.append(target.id)
    assert missing == []
