"""One dispatch for both sides of a proxy, one reader of the successor envelope (issue #34).

Source-tree checks read with `ast` (nothing is run), in the style of `test_roles_floor.py`:

- the builder's handlers of a proxy's successor (`HandlerTable.successor_requests` /
  `successor_notifications`) are read by `roles/dispatch.py` only: the successor side is a
  side of `Dispatch`, not a dispatcher of the proxy's own;
- no `NotImplemented` sentinel outside the comparison dunders: a handler passes a message on
  with `NOT_HANDLED`, the one sentinel there is;
- handler contexts are made where the dispatch makes them (the compiled entries of
  `roles/_hot_py.py`, the dynamic handlers of `roles/dispatch.py`, the `initialize` answer of
  `roles/connection.py`), never by hand elsewhere in `roles/` or `conductor/`;
- the dynamic handlers are asked in one loop;
- the successor envelope is read and written in `protocol/envelope.py` only: no other module
  of `roles/` or `conductor/` re-reads envelope params (its head bytes, a lazy decoder of its
  own that is not a stream's framing) or builds the envelope params (`{"method": …, "params": …}`, its head bytes), and both
  the proxy's dispatch and the conductor import the one reader.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "acp_fast"

pytestmark = pytest.mark.skipif(not (PACKAGE / "roles" / "_hot_py.py").exists(),
                                reason="source-tree check: the package's .py sources are not in this tree")

#: the comparison dunders, where `NotImplemented` is Python's own protocol
COMPARISONS = {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"}
#: where a handler's context may be made: (file, function)
CONTEXT_MAKERS = {
    ("roles/_hot_py.py", "__call__"),  # the compiled entries (RequestHandler, NotificationHandler, UpdateDispatcher)
    ("roles/dispatch.py", "entry"),  # the dynamic handlers of a request or a notification
    ("roles/connection.py", "_incoming_initialize"),  # the guard's answer to the initializing request
}
ENVELOPE = "protocol/envelope.py"


def _sources(*folders: str) -> Iterator[tuple[str, ast.Module]]:
    roots = [PACKAGE / f for f in folders] if folders else [PACKAGE]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """Every node with the name of the innermost function around it (`""` at module level)."""
    def walk(node: ast.AST, name: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else name
            yield inner, child
            yield from walk(child, inner)

    yield from walk(tree, "")


def test_successor_tables_are_read_by_the_dispatch_only() -> None:
    found = []
    for rel, tree in _sources():
        if rel == "roles/dispatch.py":
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in ("successor_requests", "successor_notifications")
                    and isinstance(node.ctx, ast.Load)):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "successor handlers read outside roles/dispatch.py:\n" + "\n".join(found)


def test_no_not_implemented_sentinel() -> None:
    found = [f"{rel}:{node.lineno} in {function or 'the module'}"
             for rel, tree in _sources() for function, node in _functions(tree)
             if isinstance(node, ast.Name) and node.id == "NotImplemented" and function not in COMPARISONS]
    assert found == [], "NotImplemented outside a comparison (pass a message on with NOT_HANDLED):\n" + "\n".join(found)


def test_handler_contexts_are_made_by_the_dispatch() -> None:
    found = []
    for rel, tree in _sources("roles", "conductor"):
        for function, node in _functions(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func
            name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
            if name in ("Context", "ProxyContext", "context_type") and (rel, function) not in CONTEXT_MAKERS:
                found.append(f"{rel}:{node.lineno} in {function}: {ast.unparse(node)}")
    assert found == [], "a handler context made outside the dispatch:\n" + "\n".join(found)


def test_the_dynamic_handlers_are_asked_in_one_loop() -> None:
    loops = []
    for rel, tree in _sources("roles"):
        for node in ast.walk(tree):
            if isinstance(node, (ast.For, ast.comprehension)):
                target, source = ast.unparse(node.target), ast.unparse(node.iter)
                if "handler" in target or "dynamic" in source or "handlers" in source:
                    loops.append(f"{rel}:{getattr(node, 'lineno', getattr(node.iter, 'lineno', 0))}: "
                                 f"for {target} in {source}")
    assert len(loops) == 1 and loops[0].startswith("roles/dispatch.py:"), \
        "the dynamic handlers are looped over in more than one place:\n" + "\n".join(loops)


def _lazy_decoder(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Decoder")
            and any(k.arg == "lazy" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in node.keywords))


def _envelope_shapes(tree: ast.Module) -> Iterator[tuple[int, str]]:
    framing = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and any(isinstance(t, ast.Attribute) and t.attr == "decoder" for t in node.targets)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, bytes) and (
                node.value.startswith(b'{"method":') or node.value == b'{"jsonrpc":"2.0",'):
            yield node.lineno, repr(node.value)  # the envelope params' head, the re-read's head
        elif isinstance(node, ast.Dict) and node.keys:
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if len(keys) == len(node.keys) and "method" in keys and keys <= {"method", "params"}:
                yield node.lineno, ast.unparse(node)  # the envelope params, decoded
        elif _lazy_decoder(node) and id(node) not in framing:  # (a stream's framing is a `.decoder`)
            yield node.lineno, ast.unparse(node)  # a lazy decoder of its own, to re-read envelope params


def test_the_successor_envelope_has_one_reader() -> None:
    found = []
    for rel, tree in _sources("roles", "conductor"):
        found += [f"{rel}:{line}: {what}" for line, what in _envelope_shapes(tree)]
    assert found == [], "a successor envelope read or written outside protocol/envelope.py:\n" + "\n".join(found)
    # and the one reader is the proxy's and the conductor's
    for rel in ("roles/proxy.py", "roles/dispatch.py", "conductor/chain.py"):
        imports = {alias.name for node in ast.walk(ast.parse((PACKAGE / rel).read_text(encoding="utf-8")))
                   if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("protocol.envelope")
                   for alias in node.names}
        assert "SuccessorEnvelope" in imports, f"{rel} does not read envelopes through {ENVELOPE}"
    assert any(True for _ in _envelope_shapes(ast.parse((PACKAGE / ENVELOPE).read_text(encoding="utf-8"))))
