"""Packaging: the suite tests the ``acp_fast`` that is imported (installed or checkout),
children included; the compiled twins' stubs ship and match them; the build metadata.

The build itself (sdist contents, pure build without Cython, wheels installed with no
compiler on ``PATH``) is exercised by ``scripts/build_wheels.sh`` and ``.ci/run``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import acp_fast

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
import package_path  # noqa: E402

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
STUBTEST_ALLOWLIST = TESTS / "helpers" / "stubtest_allowlist.txt"
COMPILED = ("acp_fast._engine_c", "acp_fast.protocol._gate_c", "acp_fast.roles._hot_c")
#: modules whose stub is checked against them: the compiled twins, and the hot path's selector
#: (``roles/_hot.pyi``: the checker's view of ``Context``, generic in its connection)
STUBBED = (*COMPILED, "acp_fast.roles._hot")


def _child_imports(cwd: Path, code: str = "import acp_fast; print(acp_fast.__file__)") -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = package_path.pythonpath("")
    proc = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60, stdin=subprocess.DEVNULL)
    return proc.stdout.strip()


def test_children_import_the_package_under_test(tmp_path: Path) -> None:
    """A child started with the helpers' environment imports the same ``acp_fast`` as this
    process: the installed one when it is installed, else the checkout's."""
    assert Path(_child_imports(tmp_path)).resolve() == Path(acp_fast.__file__).resolve()


def test_repository_root_is_not_on_childrens_path_when_installed() -> None:
    entries = package_path.pythonpath("").split(os.pathsep)
    if package_path.INSTALLED:
        assert str(REPO) not in entries and str(package_path.PACKAGE_ROOT) not in entries
    else:
        assert entries[0] == str(package_path.PACKAGE_ROOT)


@pytest.mark.c_extension
@pytest.mark.parametrize("name", COMPILED)
def test_compiled_twins_are_present_when_expected(name: str) -> None:
    """Unless the pure twin is forced, every compiled twin must import (never a skip)."""
    module = importlib.import_module(name)
    assert module.__file__ is not None and not module.__file__.endswith(".py"), module.__file__


@pytest.mark.parametrize("name", STUBBED)
def test_stubs_of_the_compiled_twins_ship(name: str) -> None:
    """The ``.pyi`` of each compiled twin is beside the package that is tested."""
    parts = name.split(".")
    stub = package_path.PACKAGE_ROOT.joinpath(*parts[:-1], parts[-1] + ".pyi")
    assert stub.is_file(), stub


@pytest.mark.c_extension
def test_stubs_match_the_compiled_twins(tmp_path: Path) -> None:
    """``mypy.stubtest``: each stub says what the built module has (names, signatures).

    mypy finds the stubs from its working directory or site-packages (not PYTHONPATH): it
    runs in the folder holding the package under test, or anywhere when it is installed."""
    pytest.importorskip("mypy.stubtest", reason="mypy is in the test extra")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    env["PYTHONPATH"] = package_path.pythonpath("")
    cwd = tmp_path if package_path.INSTALLED else package_path.PACKAGE_ROOT
    proc = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "--allowlist", str(STUBTEST_ALLOWLIST), *STUBBED],
        check=False, capture_output=True, text=True, env=env, cwd=cwd, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


# ---------------------------------------------------------------------------------------
# Build metadata (needs the source tree: pyproject.toml beside tests/)
# ---------------------------------------------------------------------------------------


def _pyproject() -> dict[str, object]:
    path = REPO / "pyproject.toml"
    if not path.is_file():
        pytest.skip("no pyproject.toml beside tests/ (not a source tree)")
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    with path.open("rb") as f:
        return tomllib.load(f)  # type: ignore[no-any-return]


def test_license_is_an_spdx_expression_with_its_file() -> None:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] and all((REPO / f).is_file() for f in project["license-files"])


def test_static_build_requirements_need_no_compiler_toolchain() -> None:
    """Cython and pysimdjson come from the in-tree backend, only when the twins are built."""
    build = _pyproject()["build-system"]
    assert isinstance(build, dict)
    assert not [r for r in build["requires"] if r.lower().startswith(("cython", "pysimdjson"))], build
    assert any(r.startswith("setuptools>=") and "<" in r for r in build["requires"]), build


@pytest.mark.parametrize(("value", "wanted"), [("", True), ("0", True), ("1", False)])
def test_backend_asks_for_cython_only_for_the_compiled_twins(
        monkeypatch: pytest.MonkeyPatch, value: str, wanted: bool) -> None:
    build = _pyproject()["build-system"]
    assert isinstance(build, dict)
    pytest.importorskip("setuptools", reason="the backend wraps setuptools (a build requirement only)")
    spec = importlib.util.spec_from_file_location(
        "acp_fast_backend_under_test", REPO / build["backend-path"][0] / f"{build['build-backend']}.py")
    assert spec is not None and spec.loader is not None
    backend = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backend)
    monkeypatch.setenv("ACP_FAST_NO_EXTENSIONS", value)
    requires = backend._extension_requires()
    assert bool([r for r in requires if r.startswith("Cython")]) is wanted
    assert bool([r for r in requires if r.startswith("pysimdjson==")]) is wanted


def test_package_data_names_only_files_that_exist() -> None:
    """Each package-data pattern matches files of the package under test (installed: the
    wheel shipped them; checkout: they exist to be shipped)."""
    data = _pyproject()["tool"]["setuptools"]["package-data"]  # type: ignore[index]
    assert isinstance(data, dict)
    for package, patterns in data.items():
        folder = package_path.PACKAGE_ROOT.joinpath(*package.split("."))
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"{package}: {pattern} matches nothing"



# ---------------------------------------------------------------------------------------
# One version source: acp_fast/_version.py (read statically into the build's metadata)
# ---------------------------------------------------------------------------------------


def test_version_has_one_source() -> None:
    """pyproject.toml names no version of its own: setuptools reads ``acp_fast/_version.py``,
    which the package face re-exports as ``acp_fast.__version__``."""
    pyproject = _pyproject()
    project = pyproject["project"]
    assert isinstance(project, dict)
    assert "version" not in project and "version" in project["dynamic"], project
    dynamic = pyproject["tool"]["setuptools"]["dynamic"]  # type: ignore[index]
    assert dynamic["version"] == {"attr": "acp_fast._version.__version__"}, dynamic
    from acp_fast import _version

    assert acp_fast.__version__ is _version.__version__


def test_version_agrees_in_metadata_cli_and_module() -> None:
    """The installed distribution's metadata, ``acp-fast version`` (run as a child, as a user
    runs it) and ``acp_fast.__version__`` name the same version."""
    import importlib.metadata

    version = acp_fast.__version__
    assert importlib.metadata.version("acp-fast") == version
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = package_path.pythonpath("")
    out = subprocess.run([sys.executable, "-m", "acp_fast.cli.main", "version"], check=True, env=env,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL).stdout
    assert out.split()[:2] == ["acp-fast", version], out


def test_changelog_names_the_current_version_as_its_newest_release() -> None:
    """CHANGELOG.md (Keep a Changelog): an Unreleased section first, then the newest release,
    which is the package's version."""
    import re

    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, flags=re.MULTILINE)
    assert headings and headings[0] == ("Unreleased", ""), headings
    releases = [name for name, date in headings[1:] if date]
    assert releases and releases[0] == acp_fast.__version__, (releases, acp_fast.__version__)
