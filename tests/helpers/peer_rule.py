"""The one rule for "the third-party peers are required" (not a test module).

A *peer* is anything outside this repository that some tests need to run at all: the
official Python SDK (``acp``, ``agent-client-protocol``), the ``mcp`` package, ``node`` with
the pinned TypeScript SDK in ``peers/ts/node_modules``, the ACP JSON schemas that package
ships, headless Chromium, ``redis-server`` and redis-py (the fleet's store). On a developer's machine a missing peer skips the tests that need
it, with the install step in the reason; where the peers are *required* it fails them, so
that CI can never go green on tests that did not run.

The rule (:func:`peers_required`), read from the environment at each call:

* ``ACP_FAST_REQUIRE_PEERS`` set to ``1``/``true``/``yes`` (any case): required;
* ``ACP_FAST_REQUIRE_PEERS`` set to ``0``/``false``/``no`` or empty: not required (also
  under CI);
* ``ACP_FAST_REQUIRE_PEERS`` unset: required iff ``CI`` is ``1``/``true``/``yes``;
* any other value of ``ACP_FAST_REQUIRE_PEERS`` is a mistake: :class:`ValueError` (the
  session's ``pytest_configure`` turns it into a usage error before any test runs).

:func:`missing` skips or fails with one message; :func:`require_module` is
``pytest.importorskip`` under that rule. Every skip made here starts with
:data:`MISSING_PEER` so that ``tests/conftest.py`` can turn any such skip into a failure
when the peers are required, wherever it was raised.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any, NoReturn

import pytest

FLAG = "ACP_FAST_REQUIRE_PEERS"
_TRUE = frozenset({"1", "true", "yes"})
_FALSE = frozenset({"", "0", "false", "no"})

#: Every skip reason produced here starts with this: the safety net in ``tests/conftest.py``
#: recognises a missing-peer skip by it.
MISSING_PEER = "missing peer:"

#: How to install each peer, by the name tests pass to :func:`missing` / :func:`require_module`.
INSTALL = {
    "acp": "the official Python SDK: bash scripts/install_peers.sh (agent-client-protocol 0.12.1)",
    "mcp": "the MCP package: pip install -e '.[test]' (mcp>=2.3,<3)",
    "node": "Node >= 20 and npm (apt-get install nodejs npm), then bash scripts/install_peers.sh",
    "ts-sdk": "the TypeScript SDK: bash scripts/install_peers.sh (npm ci in peers/ts)",
    "acp-schema": ("the ACP schemas: bash scripts/install_peers.sh (the pinned TS SDK ships them) "
                   "or set ACP_FAST_SCHEMA_DIR"),
    "docs": "the docs extra: pip install -e '.[docs]' (or set ACP_FAST_DOCS_SITE to a built site)",
    "chromium": "headless Chromium: apt-get install chromium (Debian package; .ci/run installs it)",
    "pillow": "Pillow (with matplotlib): pip install -e '.[test]'",
    "asgi-server": "the ASGI servers (uvicorn, hypercorn, granian): pip install -e '.[test]'",
    "redis": "redis-py with hiredis (the fleet extra): pip install -e '.[test]'",
    "redis-server": ("Redis >= 7, Debian's redis-server: bash scripts/install_peers.sh (as root) "
                     "or apt-get install redis-server"),
    "pip-index": "network access to the package index (pip download), or a filled ACP_FAST_SDK_SDIST_CACHE",
}


def _truth(name: str, value: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name}={value!r}: use 1/true/yes or 0/false/no")


def peers_required(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a missing peer fails (True) or skips (False); see the module docstring."""
    env = os.environ if environ is None else environ
    flag = env.get(FLAG)
    if flag is not None:
        return _truth(FLAG, flag)
    ci = env.get("CI", "").strip().lower()
    return ci in _TRUE


def reason(peer: str, what: str) -> str:
    """The skip/fail text for ``peer`` (a key of :data:`INSTALL`): what is missing, how to
    install it."""
    return f"{MISSING_PEER} {what}; install {INSTALL[peer]}"


def missing(peer: str, what: str) -> NoReturn:
    """Skip the current test (fixture, module) because ``peer`` is missing, or fail it when
    the peers are required. Never returns. At module level a skip skips the module and a
    failure is a collection error."""
    text = reason(peer, what)
    if peers_required():
        pytest.fail(f"{text} ({FLAG} is on, or CI is set: the peers are required)", pytrace=False)
    pytest.skip(text, allow_module_level=True)


#: The pinned third-party SDKs (``scripts/install_peers.sh`` installs these).
TS_SDK_VERSION = "2.4.0"
PYSDK_VERSION = "0.12.1"


def require_node() -> str:
    """The ``node`` executable (>= 20), or :func:`missing`."""
    import shutil
    import subprocess

    exe = shutil.which("node")
    if exe is None:
        missing("node", "node is not on PATH")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    if int(out.lstrip("v").split(".")[0] or 0) < 20:
        missing("node", f"node {out} is too old (the TS SDK needs >= 20)")
    return exe


def require_ts_sdk(peers_ts: Any) -> str:
    """``node``, once ``peers_ts/node_modules`` holds the pinned TS SDK, or :func:`missing`."""
    import json

    node = require_node()
    pkg = peers_ts / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
    if not pkg.is_file():
        missing("ts-sdk", "the TypeScript SDK is not installed in peers/ts/node_modules")
    version = json.loads(pkg.read_text())["version"]
    if version != TS_SDK_VERSION:
        missing("ts-sdk", f"peers/ts has @agentclientprotocol/sdk {version}, not {TS_SDK_VERSION}")
    return node


def require_pysdk() -> str:
    """The version of the pinned official Python SDK installed here, or :func:`missing`."""
    from importlib import metadata

    try:
        version = metadata.version("agent-client-protocol")
    except metadata.PackageNotFoundError:
        missing("acp", "the Python SDK agent-client-protocol is not installed")
    if version != PYSDK_VERSION:
        missing("acp", f"agent-client-protocol {version} is installed, not {PYSDK_VERSION}")
    return version


def require_module(name: str, peer: str | None = None, what: str | None = None) -> ModuleType:
    """``pytest.importorskip(name)`` under the rule: the module, else a skip or a failure.

    Usable at module level (a skip then skips the module, a failure fails its collection).
    """
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        peer = peer or name
        missing(peer, what or f"module {name!r} cannot be imported ({exc})")


#: Pieces of a skip reason that mean "a peer is missing", for the safety net: this module's
#: prefix, and what skips written without it say (``pytest.importorskip`` of a peer module,
#: the install script, the browser).
_MISSING_PEER_SIGNS = (
    MISSING_PEER,
    "install_peers",
    "could not import 'acp'",
    "could not import 'mcp'",
    "agent-client-protocol",
    "chromium",
)


def is_missing_peer_skip(reason: str) -> bool:
    """Whether a skip reason says that a peer is missing (see :data:`_MISSING_PEER_SIGNS`)."""
    text = reason.lower()
    return any(sign.lower() in text for sign in _MISSING_PEER_SIGNS)


# ---------------------------------------------------------------------------------------
# The safety net (hooks: ``tests/conftest.py`` registers them)
# ---------------------------------------------------------------------------------------


def _skip_reason(longrepr: Any) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, lineno, "Skipped: why")
        return str(longrepr[2])
    return str(longrepr)


def _fail_missing_peer_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    """Turn ``report`` into a failure if it is a missing-peer skip and the peers are required."""
    if not report.skipped or hasattr(report, "wasxfail") or not peers_required():
        return
    why = _skip_reason(report.longrepr)
    if is_missing_peer_skip(why):
        report.outcome = "failed"
        report.longrepr = f"skipped for a missing peer, but the peers are required ({FLAG} / CI): {why}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    _fail_missing_peer_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    report = yield
    _fail_missing_peer_skip(report)
    return report
