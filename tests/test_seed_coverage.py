"""``docs/seed-coverage.md`` stays true: every test a row names exists and asserts something.

The list has one row per behaviour or API the seeds (000, 003, 004) name. This module
parses its tables, collects the named test files with pytest (``--collect-only``, node ids
with parameters left off) and checks each named test is collected and contains an
``assert`` (or ``pytest.raises``). A row without any test, or naming a test that does not
exist, is a failure; there is no exception.
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


def problems(rows: list[Row], collected: set[tuple[str, str]], asserting: set[tuple[str, str]]) -> list[str]:
    """Everything wrong with ``rows``; ``collected``: the node ids pytest found,
    ``asserting``: those whose function contains an assertion."""
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
                continue
            out.append(f"{row.row_id}: {path}::{name} does not exist")
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


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return parse(DOC.read_text())


def test_every_row_names_an_existing_asserting_test(rows: list[Row]) -> None:
    assert len(rows) >= 100  # the list is not silently truncated
    paths = {path for row in rows for path, _ in row.tests}
    found = problems(rows, collect(paths), asserting_functions(paths))
    assert found == [], "\n".join(found)


def test_every_seed_has_rows(rows: list[Row]) -> None:
    for seed in ("S000", "S003", "S004"):
        assert any(row.row_id.startswith(seed) for row in rows), seed


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
    ])
    me = "tests/test_seed_coverage.py"
    collected = {(me, "test_checker_rejects_rows_without_tests"), (me, "collect")}
    asserting = {(me, "test_checker_rejects_rows_without_tests")}
    found = problems(parse(doc), collected, asserting)
    assert found == [
        "S000-02: no test named",
        "S000-03: tests/test_seed_coverage.py::test_that_does_not_exist does not exist",
        "S000-04: tests/test_sessions.py::test_nope does not exist",
        "S000-07: the Testy column names neither a Testy command nor `n/a:` with a reason",
        "S000-01: duplicate row id",
        "S000-08: tests/test_seed_coverage.py::collect asserts nothing",
    ]


def test_collection_finds_parametrized_tests_by_function_name() -> None:
    found = collect({"tests/test_seed_coverage.py"})
    assert ("tests/test_seed_coverage.py", "test_collection_finds_parametrized_tests_by_function_name") in found
    assert ("tests/test_seed_coverage.py", "collect") not in found


def test_parse_refuses_a_malformed_row() -> None:
    with pytest.raises(ValueError):
        parse("| S000-01 | only | three |")
