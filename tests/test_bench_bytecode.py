"""The benchmark's processes start from cached bytecode (acp_fast.benchmark.bytecode).

The start-up row measures an agent's start: with no bytecode cache (a checkout under
``PYTHONDONTWRITEBYTECODE``) every spawn would compile the package again inside it. Each
test checks :func:`uncached`'s verdict against the interpreter's own: a child interpreter run
with ``-v`` says whether it loaded a module from its cache or compiled the source.
"""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from acp_fast.benchmark.bytecode import bench_folders, ensure_bytecode, uncached
from acp_fast.benchmark.runtime import PACKAGE_DIR

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from package_path import pythonpath  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--repeat", "1", "--n", "40", "--m", "5", "--inflight", "4", "--inflight-m", "12", "--large-n", "1",
        "--warmup", "2", "--timeout", "60", "--no-progress"]


def _package(root: Path) -> Path:
    pkg = root / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("A = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text("def f():\n    return 2\n")
    return pkg


def _loads_from_cache(root: Path, module: str) -> bool:
    """Whether a fresh interpreter (which may not write bytecode) loads ``module`` from its cache."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPYCACHEPREFIX", None)
    r = subprocess.run([sys.executable, "-v", "-c", f"import {module}"], cwd=root, env=env, capture_output=True,
                       text=True, timeout=60, check=True)
    source = str(root / Path(*module.split("."))) + ".py"
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("# code object from")]
    mine = [ln for ln in lines if ln.split("from ", 1)[1].strip("'").startswith(str(root))]
    assert any(module.rsplit(".", 1)[-1] in ln for ln in mine), r.stderr[-2000:]
    return not any(ln.endswith(f"'{source}'") or ln.endswith(source) for ln in mine)


def test_compiled_once_then_loaded_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cache: every file is listed and a process compiles them; after ensure_bytecode (which
    writes even under PYTHONDONTWRITEBYTECODE) none is, and a process loads them from the cache."""
    pkg = _package(tmp_path)
    assert len(uncached([pkg])) == 3
    assert not _loads_from_cache(tmp_path, "pkg.sub.mod")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as under PYTHONDONTWRITEBYTECODE
    done = ensure_bytecode([pkg])
    assert (done.compiled, done.uncached) == (3, [])
    assert uncached([pkg]) == []
    assert _loads_from_cache(tmp_path, "pkg.sub.mod")
    assert ensure_bytecode([pkg]).compiled == 0  # nothing left to write


def test_a_changed_source_is_stale(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    ensure_bytecode([pkg])
    mod = pkg / "sub" / "mod.py"
    mod.write_text("def f():\n    return 3  # changed\n")
    assert uncached([pkg]) == [str(mod)]
    assert not _loads_from_cache(tmp_path, "pkg.sub.mod")
    assert ensure_bytecode([pkg]).compiled == 1
    assert _loads_from_cache(tmp_path, "pkg.sub.mod")


@pytest.mark.parametrize("mode", [py_compile.PycInvalidationMode.CHECKED_HASH,
                                  py_compile.PycInvalidationMode.UNCHECKED_HASH])
def test_hash_based_caches(tmp_path: Path, mode: py_compile.PycInvalidationMode) -> None:
    """A checked hash follows the source's content; an unchecked one is trusted as it is."""
    pkg = _package(tmp_path)
    mod = pkg / "sub" / "mod.py"
    py_compile.compile(str(mod), invalidation_mode=mode, doraise=True)
    assert str(mod) not in uncached([pkg])
    st = mod.stat()
    mod.write_text("def f():\n    return 9\n")  # same size, same mtime: only the hash can tell
    os.utime(mod, ns=(st.st_atime_ns, st.st_mtime_ns))
    stale = mode == py_compile.PycInvalidationMode.CHECKED_HASH
    assert (str(mod) in uncached([pkg])) == stale
    assert _loads_from_cache(tmp_path, "pkg.sub.mod") != stale


def test_a_folder_that_cannot_take_a_cache_is_named(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    (pkg / "sub" / "__pycache__").write_text("not a folder")  # no cache can be written there (even as root)
    done = ensure_bytecode([pkg])
    assert done.compiled == 1
    assert done.uncached == [str(pkg / "sub" / "__init__.py"), str(pkg / "sub" / "mod.py")]


def test_node_modules_and_hidden_folders_are_left_alone(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    for skipped in ("node_modules/dep", ".venv/lib"):
        (pkg / skipped).mkdir(parents=True)
        (pkg / skipped / "x.py").write_text("X = 1\n")
    assert len(uncached([pkg])) == 3
    ensure_bytecode([pkg])
    assert not (pkg / "node_modules" / "dep" / "__pycache__").exists()


def test_the_bench_compiles_this_package() -> None:
    assert Path(PACKAGE_DIR) in bench_folders()


def test_a_bench_run_compiles_before_it_measures(tmp_path: Path) -> None:
    """``acp-fast bench`` gives the peers' folder (here a copy without caches) its bytecode before
    the first row, records it in the JSON's meta, and the client reports the agent side's CPU
    time at the ``initialize`` response next to the start-up wall time."""
    for module in ("psutil", "tabulate", "tqdm"):
        pytest.importorskip(module)
    peers = tmp_path / "peers"
    shutil.copytree(ROOT / "peers" / "pysdk", peers / "pysdk", ignore=shutil.ignore_patterns("__pycache__"))
    sources = sorted(str(p) for p in (peers / "pysdk").glob("*.py"))
    assert uncached([peers]) == sources
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-m", "acp_fast.cli.bench", "--pairs", "acp_fast-pure/acp_fast-pure",
                        "--loops", "asyncio", "--peers", str(peers), "--json", str(out), *TINY],
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": pythonpath(None)},
                       cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert uncached([peers]) == []
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["meta"]["bytecode"]["uncached"] == []
    assert doc["meta"]["bytecode"]["compiled"] >= len(sources)
    main = next(rec["result"] for rec in doc["raw"] if rec["step"] == "main")
    assert 0 < main["startupTreeCpuMs"] <= 2 * main["startupMs"]  # ms, the agent's own (one thread)


def test_the_notes_name_what_stays_uncached() -> None:
    from acp_fast.benchmark.suite import RunConfig
    from acp_fast.cli.bench import report_text

    config = RunConfig(loops=("asyncio",))
    note = report_text([], config, {"bytecode": {"compiled": 0, "uncached": ["a.py", "b.py", "c.py", "d.py"]}})
    assert "WARNING: 4 Python files have no bytecode cache" in note and "(a.py, b.py, c.py and 1 more)" in note
    for meta in ({"bytecode": {"compiled": 12, "uncached": []}}, {}):  # all cached; a run saved before
        assert "bytecode" not in report_text([], config, meta)
