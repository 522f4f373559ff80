"""pytest configuration of the benchmark suite (``python -m pytest bench``).

Options (also settable through the environment, which the report command uses):

* ``--bench-scale X`` / ``ACP_FAST_BENCH_SCALE=X`` -- corpus size factor (default 1.0:
  200k/200k/5k lines);
* ``--quick`` / ``ACP_FAST_BENCH_QUICK=1`` -- CI-sized run: scale 0.05 unless a scale is
  given, and a short timing target per benchmark (the whole suite in well under a minute).

``ACP_FAST_BENCH_PY_LINES=N`` caps the lines the (slow) pure twin is timed on (default
50000; ``0`` times it on whole corpora). ``ACP_FAST_BENCH_CPU=N`` pins the process to CPU
``N`` (off by default: on a shared 2-vCPU machine the "quiet" core is not knowable in
advance).

Corpora are generated once per session and then ``gc.freeze()``-d so collections never
walk them; every benchmark runs with GC disabled (``--benchmark-disable-gc`` in
``bench/pytest.ini``). The compiled twin's rows are skipped, with the import error as the
reason, when ``acp_fast._engine_c`` is not importable.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import Any

import pytest

from .corpus import CORPUS_NAMES, Corpus, bench_scale, get_corpus
from .harness import Settings
from .impls import IMPLS, baseline_available, engine_import_error, load_engine

QUICK_SCALE = 0.05


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acp_fast bench")
    group.addoption("--bench-scale", type=float, default=None,
                    help="corpus size factor (default: $ACP_FAST_BENCH_SCALE or 1.0)")
    group.addoption("--quick", action="store_true", default=False,
                    help=f"CI-sized run: scale {QUICK_SCALE} and short timing targets")


_LOAD_AT_START: list[float] = []


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(os, "getloadavg"):
        _LOAD_AT_START[:] = [os.getloadavg()[0]]
    cpu = os.environ.get("ACP_FAST_BENCH_CPU", "").strip()
    if cpu and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(cpu)})


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Record what was compared: baseline versions and whether the compiled twin loaded."""
    from importlib.metadata import PackageNotFoundError, version

    info: dict[str, str] = {}
    for dist in ("orjson", "msgspec", "pytest-benchmark"):
        try:
            info[dist] = version(dist)
        except PackageNotFoundError:
            info[dist] = "absent"
    info["compiled twin"] = "importable" if load_engine("c") is not None else "absent"
    machine_info["acp_fast_bench"] = info
    if hasattr(os, "getloadavg"):
        # A shared machine: the 1-minute load average at start and end flags a noisy run.
        machine_info["acp_fast_bench_load"] = [*_LOAD_AT_START, os.getloadavg()[0]]


def _quick(config: pytest.Config) -> bool:
    return bool(config.getoption("--quick")) or os.environ.get("ACP_FAST_BENCH_QUICK", "") not in ("", "0")


@pytest.fixture(scope="session")
def settings(pytestconfig: pytest.Config) -> Settings:
    """The session's scale and timing policy."""
    quick = _quick(pytestconfig)
    scale = pytestconfig.getoption("--bench-scale")
    if scale is None:
        scale = bench_scale(QUICK_SCALE if quick else 1.0)
    py_lines = int(os.environ.get("ACP_FAST_BENCH_PY_LINES", "") or 50_000)
    if quick:
        return Settings(scale=scale, target_s=0.2, min_rounds=2, max_rounds=10, py_max_lines=py_lines)
    return Settings(scale=scale, py_max_lines=py_lines)


@pytest.fixture(scope="session")
def corpora(settings: Settings) -> Callable[[str], Corpus]:
    """``corpora(name)`` -> the session's corpus (generated on first use, then frozen)."""
    cache: dict[str, Corpus] = {}

    def get(name: str) -> Corpus:
        corpus = cache.get(name)
        if corpus is None:
            corpus = cache[name] = get_corpus(name, settings.scale)
            gc.collect()
            gc.freeze()
        return corpus

    return get


def impl_params(impls: tuple = IMPLS) -> list[Any]:
    """``pytest.param`` per implementation, skipped (with the reason) when unavailable."""
    params = []
    for impl in impls:
        if impl in ("c", "py"):
            reason = None if load_engine(impl) is not None else (
                f"acp_fast._engine_{impl} not importable ({engine_import_error(impl)}); "
                "build it with: pip install pysimdjson==7.0.2 cython && "
                "python setup.py build_ext --inplace"
            )
        else:
            reason = baseline_available(impl)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        params.append(pytest.param(impl, id=impl, marks=marks))
    return params


def corpus_params() -> list[Any]:
    return [pytest.param(name, id=name) for name in CORPUS_NAMES]
