"""Shared fixtures: every engine test runs against both twins through one session fixture.

Layout (style guide G9):

* :class:`EngineImpl` is a frozen facade over one twin (``tag`` ``"py"``/``"c"``) that
  imports its module on first use and caches it;
* ``engine_impl`` is a session-scoped fixture parametrised over both twins (ids ``py`` and
  ``c``); the ``c`` param carries the ``c_extension`` marker;
* derived fixtures (``engine``, ``errors``, ``engine_py``, ``engine_c``, ``twin_pair``)
  mean that no test ever imports a twin by name, so later layers (connection tests) can
  reuse them unchanged;
* ``--no-c-extensions`` (or ``ACP_FAST_NO_EXTENSIONS=1``) deselects every test that needs
  the compiled twin. Without it the compiled twin is *expected*: if it fails to import, the
  ``c`` params ERROR (the import happens inside the fixture), they are never skipped.

Also registers the hypothesis profiles: ``ci`` (selected when ``CI=true``: derandomized,
no example database, no deadline) and ``dev`` (no deadline; the default elsewhere).
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from functools import cached_property
from types import ModuleType
from typing import Any, Callable

import pytest

# tests/helpers/ (shared test support modules) is importable from every test module
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))

import peer_rule

from acp_fast import _compat

try:  # hypothesis is a test extra; the fixtures below do not need it
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover
    settings = None  # type: ignore[assignment]
else:
    settings.register_profile(
        "ci",
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile("dev", deadline=None)
    _profile = os.environ.get("HYPOTHESIS_PROFILE") or (
        "ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev"
    )
    settings.load_profile(_profile)


# ---------------------------------------------------------------------------------------
# Twin selection
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineImpl:
    """One engine twin: ``is_pure_python`` picks ``_engine_py`` or ``_engine_c``."""

    is_pure_python: bool

    @property
    def tag(self) -> str:
        return "py" if self.is_pure_python else "c"

    @property
    def module_name(self) -> str:
        return "acp_fast._engine_py" if self.is_pure_python else "acp_fast._engine_c"

    @cached_property
    def module(self) -> ModuleType:
        # An ImportError here makes every test using the ``c`` param ERROR, which is the
        # point: when the compiled twin is expected, its absence must be loud.
        return importlib.import_module(self.module_name)

    def __repr__(self) -> str:
        return f"EngineImpl({self.tag})"


PY_IMPL = EngineImpl(is_pure_python=True)
C_IMPL = EngineImpl(is_pure_python=False)

ENGINE_PARAMS = [
    pytest.param(PY_IMPL, id="py"),
    pytest.param(C_IMPL, id="c", marks=pytest.mark.c_extension),
]

_PAIR_PARAMS = [
    pytest.param(
        (enc, dec),
        id=f"{enc.tag}-{dec.tag}",
        marks=[pytest.mark.c_extension] if not (enc.is_pure_python and dec.is_pure_python) else [],
    )
    for enc in (PY_IMPL, C_IMPL)
    for dec in (PY_IMPL, C_IMPL)
]

# Fixtures that need the compiled twin whatever the param: tests using them get the marker.
_C_ONLY_FIXTURES = frozenset({"engine_c", "both_engines"})


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acp_fast")
    group.addoption(
        "--c-extensions",
        dest="c_extensions",
        action="store_true",
        default=True,
        help="run the tests of the compiled engine twin (the default)",
    )
    group.addoption(
        "--no-c-extensions",
        dest="c_extensions",
        action="store_false",
        help="deselect the tests of the compiled engine twin (also: ACP_FAST_NO_EXTENSIONS=1)",
    )


def c_extensions_wanted(config: pytest.Config) -> bool:
    """False under ``--no-c-extensions`` or when ``ACP_FAST_NO_EXTENSIONS`` is set."""
    return bool(config.getoption("c_extensions")) and not _compat.NO_EXTENSIONS


def pytest_configure(config: pytest.Config) -> None:
    # Declared in pyproject too; repeated so the marker exists when run from elsewhere.
    config.addinivalue_line("markers", "c_extension: runs against the compiled twin")
    config.addinivalue_line(
        "markers",
        "seed(*row_ids): the test asserts these rows of docs/seed-coverage.md (checked by "
        "tests/test_seed_coverage.py)",
    )
    try:
        peer_rule.peers_required()
    except ValueError as exc:  # a typo must not silently mean "not required"
        raise pytest.UsageError(str(exc)) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _C_ONLY_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.c_extension)
    if c_extensions_wanted(config):
        return
    kept, deselected = [], []
    for item in items:
        (deselected if item.get_closest_marker("c_extension") else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_report_header(config: pytest.Config) -> list[str]:
    wanted = "yes" if c_extensions_wanted(config) else "no (deselected)"
    peers = "required (a missing one fails)" if peer_rule.peers_required() else "optional (a missing one skips)"
    return [f"acp_fast: compiled-twin tests: {wanted}", f"acp_fast: third-party peers: {peers}"]


# ---------------------------------------------------------------------------------------
# Safety net: no missing-peer skip when the peers are required
# ---------------------------------------------------------------------------------------
# Tests that need a peer go through tests/helpers/peer_rule.py, which fails instead of
# skipping when the peers are required. These two hooks (defined there, registered here by
# name) catch a skip that bypassed it (a new ``pytest.importorskip`` of a peer, a hand-written
# skip naming a peer) and turn it into a failure, for a test and for a whole module alike.

pytest_runtest_makereport = peer_rule.pytest_runtest_makereport
pytest_make_collect_report = peer_rule.pytest_make_collect_report

# The ASGI servers of the remote tests (tests/helpers/remote_servers.py): a test that takes
# ``asgi_server`` (or ``http2_server``) runs on each of them.
from remote_servers import asgi_server, http2_server  # noqa: E402,F401


# ---------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session", params=ENGINE_PARAMS)
def engine_impl(request: pytest.FixtureRequest) -> EngineImpl:
    """The twin under test (``py`` / ``c``)."""
    impl: EngineImpl = request.param
    _ = impl.module  # import now: a broken compiled twin errors in setup, not mid-test
    return impl


@pytest.fixture(scope="session")
def engine(engine_impl: EngineImpl) -> ModuleType:
    """The engine module of the twin under test."""
    return engine_impl.module


@pytest.fixture(scope="session")
def errors() -> ModuleType:
    import acp_fast.errors

    return acp_fast.errors


@pytest.fixture(scope="session")
def engine_py() -> ModuleType:
    """The pure-Python (reference) twin, for tests that compare twins."""
    return PY_IMPL.module


@pytest.fixture(scope="session")
def engine_c() -> ModuleType:
    """The compiled twin (tests using it are marked ``c_extension`` automatically)."""
    return C_IMPL.module


@pytest.fixture(scope="session")
def both_engines(engine_py: ModuleType, engine_c: ModuleType) -> tuple[ModuleType, ModuleType]:
    return engine_py, engine_c


@pytest.fixture(scope="session", params=_PAIR_PARAMS)
def twin_pair(request: pytest.FixtureRequest) -> tuple[ModuleType, ModuleType]:
    """``(encoding twin, decoding twin)`` over all four combinations."""
    enc, dec = request.param
    return enc.module, dec.module


@pytest.fixture(scope="session", params=[pytest.param(False, id="eager"), pytest.param(True, id="lazy")])
def lazy(request: pytest.FixtureRequest) -> bool:
    """Decoder mode: eager and lazy."""
    return bool(request.param)


@pytest.fixture(scope="session")
def decode(engine: ModuleType, lazy: bool) -> Callable[..., list[Any]]:
    """``decode(data, **decoder_kwargs)``: all frames of ``data`` fed whole, then EOF."""

    def run(data: bytes, **kwargs: Any) -> list[Any]:
        kwargs.setdefault("lazy", lazy)
        dec = engine.Decoder(**kwargs)
        frames = list(dec.feed(data))
        frames += dec.feed_eof()
        return frames

    return run


@pytest.fixture(scope="session")
def decode_one(decode: Callable[..., list[Any]]) -> Callable[..., Any]:
    """``decode_one(line, **kw)``: the single frame of one line (newline added)."""

    def run(line: bytes, **kwargs: Any) -> Any:
        frames = decode(line + b"\n", **kwargs)
        assert len(frames) == 1, frames
        return frames[0]

    return run


# ---------------------------------------------------------------------------------------
# The ACP JSON Schemas (for the generated-code reproducibility tests)
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def schema_dir() -> "Path":
    """The pinned ACP schemas (``v1/``, ``v2/``): ``ACP_FAST_SCHEMA_DIR``, else the copy the
    pinned TypeScript SDK package ships (``scripts/install_peers.sh`` installs it), else a
    ``shared/acp-schema`` beside the checkout. Missing: a skip that says how to get them,
    or a failure when the peers are required (``tests/helpers/peer_rule.py``)."""
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    env = os.environ.get("ACP_FAST_SCHEMA_DIR")
    candidates = [Path(env)] if env else []
    candidates.append(repo / "peers" / "ts" / "node_modules" / "@agentclientprotocol" / "sdk" / "schema")
    candidates.append(repo.parent / "shared" / "acp-schema")
    for candidate in candidates:
        if (candidate / "v1" / "schema.json").is_file():
            return candidate
    peer_rule.missing("acp-schema", "the ACP schemas (v1/schema.json, v2/...) are not available")
