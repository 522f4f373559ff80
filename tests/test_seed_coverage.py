"""``docs/seed-coverage.md`` stays true: every test a row names exists, asserts something,
and is marked as asserting *that row*.

The list has one row per behaviour or API the seeds (000, 003, 004) name. This module
parses its tables, collects the named test files with pytest (``--collect-only``, node ids
with parameters left off) and checks each named test is collected, contains an ``assert``
(or ``pytest.raises``) and carries ``@pytest.mark.seed("<row id>", ...)`` with the row's id
(the marker is registered in ``tests/conftest.py``). The reverse holds too: every seed mark
on a test names a row that lists that test. So a test cannot cover a row by accident (being
named in the doc): its author says which rows it asserts, next to the assertions. A row
without any test, or naming a test that does not exist, is a failure; there is no exception.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "seed-coverage.md"
_TEST_ID = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
_ROW_ID = re.compile(r"^S00[034]-\d+$")


@dataclass(frozen=True)
class Row:
    row_id: str
    behaviour: str
    tests: tuple[tuple[str, str], ...]
    testy: str


def parse(text: str) -> list[Row]:
    """The rows of every table whose first column is a row id (``S000-01`` …)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("| S00"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4:
            raise ValueError(f"row with {len(cells)} cells, expected 4: {line}")
        row_id, behaviour, tests, testy = cells
        rows.append(Row(row_id, behaviour, tuple(_TEST_ID.findall(tests)), testy))
    return rows


def problems(rows: list[Row], collected: set[tuple[str, str]], asserting: set[tuple[str, str]],
             marked: dict[tuple[str, str], set[str]]) -> list[str]:
    """Everything wrong with ``rows``; ``collected``: the node ids pytest found,
    ``asserting``: those whose function contains an assertion, ``marked``: the row ids of
    the ``seed`` marks of every test function (of all test files)."""
    out = []
    seen_ids: set[str] = set()
    for row in rows:
        if not _ROW_ID.match(row.row_id):
            out.append(f"{row.row_id}: malformed row id")
        if row.row_id in seen_ids:
            out.append(f"{row.row_id}: duplicate row id")
        seen_ids.add(row.row_id)
        if not row.behaviour:
            out.append(f"{row.row_id}: no behaviour")
        if not row.tests:
            out.append(f"{row.row_id}: no test named")
        if not (row.testy.startswith("n/a:") or "testy" in row.testy or row.testy.startswith(("v1", "v2", "chain"))):
            out.append(f"{row.row_id}: the Testy column names neither a Testy command nor `n/a:` with a reason")
        for path, name in row.tests:
            if (path, name) in collected:
                if (path, name) not in asserting:
                    out.append(f"{row.row_id}: {path}::{name} asserts nothing")
                if row.row_id not in marked.get((path, name), set()):
                    out.append(f"{row.row_id}: {path}::{name} has no @pytest.mark.seed({row.row_id!r})")
                continue
            out.append(f"{row.row_id}: {path}::{name} does not exist")
    listed = {(row.row_id, test) for row in rows for test in row.tests}
    for (path, name), ids in sorted(marked.items()):
        for row_id in sorted(ids):
            if (row_id, (path, name)) not in listed:
                out.append(f"{path}::{name} is marked seed({row_id!r}) but that row does not name it")
    return out


def collect(paths: set[str]) -> set[tuple[str, str]]:
    """``(file, test function)`` of every test pytest collects in ``paths`` (existing ones)."""
    existing = sorted(p for p in paths if (REPO / p).is_file())
    if not existing:
        return set()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *existing],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = set()
    for line in proc.stdout.splitlines():
        if "::" in line:
            path, _, rest = line.partition("::")
            out.add((path, rest.split("[", 1)[0].split("::")[-1]))
    return out


def asserting_functions(paths: set[str]) -> set[tuple[str, str]]:
    """``(file, function)`` of the module-level test functions that assert something."""
    out = set()
    for path in paths:
        file = REPO / path
        if not file.is_file():
            continue
        for node in ast.parse(file.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                src = ast.get_source_segment(file.read_text(), node) or ""
                if any(isinstance(n, ast.Assert) for n in ast.walk(node)) or "pytest.raises" in src:
                    out.add((path, node.name))
    return out


def _seed_ids(decorator: ast.expr) -> list[str] | None:
    """The row ids of a ``@pytest.mark.seed("S000-01", ...)`` decorator, else None."""
    if not isinstance(decorator, ast.Call):
        return None
    func = decorator.func
    if not (isinstance(func, ast.Attribute) and func.attr == "seed" and isinstance(func.value, ast.Attribute)
            and func.value.attr == "mark"):
        return None
    ids = [arg.value for arg in decorator.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    if len(ids) != len(decorator.args) or not ids:
        raise ValueError(f"line {decorator.lineno}: seed marks take row ids as string literals")
    return ids


def seed_marks(files: list[Path]) -> dict[tuple[str, str], set[str]]:
    """``(file, function) -> row ids`` of the ``seed`` marks of the module-level functions
    (files as paths relative to the repository)."""
    out: dict[tuple[str, str], set[str]] = {}
    for file in files:
        text = file.read_text(encoding="utf-8")
        if "mark.seed" not in text:
            continue
        rel = file.resolve().relative_to(REPO).as_posix()
        for node in ast.parse(text).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    ids = _seed_ids(decorator)
                    if ids:
                        out.setdefault((rel, node.name), set()).update(ids)
    return out


def all_test_files() -> list[Path]:
    return sorted((REPO / "tests").rglob("test_*.py"))


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return parse(DOC.read_text())


def test_every_row_names_an_existing_asserting_test(rows: list[Row]) -> None:
    assert len(rows) >= 100  # the list is not silently truncated
    paths = {path for row in rows for path, _ in row.tests}
    found = problems(rows, collect(paths), asserting_functions(paths), seed_marks(all_test_files()))
    assert found == [], "\n".join(found)


def test_every_seed_has_rows(rows: list[Row]) -> None:
    for seed in ("S000", "S003", "S004"):
        assert any(row.row_id.startswith(seed) for row in rows), seed


@pytest.mark.seed("S003-11")
def test_checker_rejects_rows_without_tests() -> None:
    """The checker fails the rows it exists to catch (each case checked on its own)."""
    doc = "\n".join([  # noqa: FLY002 - one row per line
        "| S000-01 | a behaviour | `tests/test_seed_coverage.py::test_checker_rejects_rows_without_tests` | v2: x |",
        "| S000-02 | no test at all | (none) | v2: x |",
        "| S000-03 | a missing test | `tests/test_seed_coverage.py::test_that_does_not_exist` | v2: x |",
        "| S000-04 | a missing test in another file | `tests/test_sessions.py::test_nope` | n/a: x |",
        "| S000-07 | no Testy column | `tests/test_seed_coverage.py::test_checker_rejects_rows_without_tests` | |",
        "| S000-01 | a duplicate id | `tests/test_seed_coverage.py::test_checker_rejects_rows_without_tests` | v2: x |",
        "| S000-08 | a test that asserts nothing | `tests/test_seed_coverage.py::collect` | v2: x |",
        "| S000-09 | a test not marked for this row | `tests/test_seed_coverage.py::parse` | v2: x |",
    ])
    me = "tests/test_seed_coverage.py"
    collected = {(me, "test_checker_rejects_rows_without_tests"), (me, "collect"), (me, "parse")}
    asserting = {(me, "test_checker_rejects_rows_without_tests"), (me, "parse")}
    marked = {(me, "test_checker_rejects_rows_without_tests"): {"S000-01", "S000-07"}, (me, "collect"): {"S000-08"},
              (me, "parse"): {"S000-01"}}  # parse: marked, but for another row
    found = problems(parse(doc), collected, asserting, marked)
    assert found == [
        "S000-02: no test named",
        "S000-03: tests/test_seed_coverage.py::test_that_does_not_exist does not exist",
        "S000-04: tests/test_sessions.py::test_nope does not exist",
        "S000-07: the Testy column names neither a Testy command nor `n/a:` with a reason",
        "S000-01: duplicate row id",
        "S000-08: tests/test_seed_coverage.py::collect asserts nothing",
        "S000-09: tests/test_seed_coverage.py::parse has no @pytest.mark.seed('S000-09')",
        "tests/test_seed_coverage.py::parse is marked seed('S000-01') but that row does not name it",
    ]


def test_seed_marks_are_read_from_the_decorators(tmp_path: Path) -> None:
    inside = REPO / "tests"
    assert seed_marks([inside / "test_seed_rows.py"])[("tests/test_seed_rows.py",
                                                       "test_an_unknown_stop_reason_keeps_its_payload")] == {"S000-100"}
    with pytest.raises(ValueError, match="string literals"):
        _seed_ids(ast.parse("@pytest.mark.seed(ROW)\ndef f(): pass").body[0].decorator_list[0])  # type: ignore[attr-defined]


def test_collection_finds_parametrized_tests_by_function_name() -> None:
    found = collect({"tests/test_seed_coverage.py"})
    assert ("tests/test_seed_coverage.py", "test_collection_finds_parametrized_tests_by_function_name") in found
    assert ("tests/test_seed_coverage.py", "collect") not in found


def test_parse_refuses_a_malformed_row() -> None:
    with pytest.raises(ValueError):
        parse("| S000-01 | only | three |")
