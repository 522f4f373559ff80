"""Registry of benchmark *pairs*: a client command and an agent command run as two processes.

A pair is benchmarked by running its client command with the workload's options followed by
``--`` and its agent command; the client spawns the agent over real OS pipes (stdin/stdout),
drives it and prints one JSON line (the contract of ``peers/ts/client.mjs``).

Built-in pairs (``<client>/<agent>``):

========================  =========================================================
``pysdk/pysdk``           official Python SDK client and agent (``peers/pysdk``)
``pysdk-uvloop/...``      the same on uvloop (skipped unless uvloop is installed)
``ts/ts``                 official TypeScript SDK client and agent, ACP v1 (``peers/ts``)
``ts-v2/ts-v2``           the same on draft ACP v2 (``client_v2.mjs``/``agent_v2.mjs``)
``pysdk/ts``              Python SDK client driving the TS agent
``ts/pysdk``              TS client driving the Python SDK agent
========================  =========================================================

Extension point: :func:`register_pair` adds any other pair, e.g. the acp_fast pairs once
``acp-fast testy`` (an agent following the behaviour of ``peers/ts/agent.mjs``) and an acp_fast
client following the client CLI contract exist::

    from bench.e2e import TS_PEER, register_pair, requirement_module
    register_pair(
        "acp_fast/ts",
        client_cmd=[sys.executable, "-m", "acp_fast.bench_client"],
        agent_cmd=["node", "peers/ts/agent.mjs"],
        requires=[requirement_module("acp_fast"), TS_PEER],
        quick=True,
    )

or, without code, ``python -m bench.e2e --add-pair NAME 'CLIENT CMD' 'AGENT CMD'``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "PAIRS",
    "PY_SDK_VERSION",
    "PYSDK_PEER",
    "Pair",
    "REPO_ROOT",
    "Requirement",
    "TS_PEER",
    "TS_SDK_VERSION",
    "get_pairs",
    "register_pair",
    "requirement_module",
]

#: Repository root (``bench/e2e/pairs.py`` -> two levels up).
REPO_ROOT = Path(__file__).resolve().parents[2]
PEERS = REPO_ROOT / "peers"

#: Pinned peer versions (must match peers/ts/package.json and scripts/install_peers.sh).
TS_SDK_VERSION = "2.4.0"
PY_SDK_VERSION = "0.12.1"


@dataclass(frozen=True)
class Requirement:
    """Something a pair needs on the machine.

    Attributes:
        name: short peer name used in the skip message ("ts", "pysdk").
        check: returns ``None`` when satisfied, else a detail ("node not found"; may be "").
        how: how to install it, shown in the skip message.
    """

    name: str
    check: Callable[[], str | None]
    how: str

    def missing(self) -> str | None:
        """``"skipped: <name> not installed ([<detail>; ]<how>)"`` when unsatisfied, else ``None``."""
        detail = self.check()
        if detail is None:
            return None
        return f"skipped: {self.name} not installed ({detail + '; ' if detail else ''}{self.how})"


def _check_ts() -> str | None:
    if shutil.which("node") is None:
        return "node not found"
    pkg = PEERS / "ts" / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
    try:
        version = json.loads(pkg.read_text(encoding="utf-8"))["version"]
    except (OSError, ValueError, KeyError):
        return "no peers/ts/node_modules"
    if version != TS_SDK_VERSION:
        return f"found @agentclientprotocol/sdk {version}, want {TS_SDK_VERSION}"
    return None


def _check_pysdk() -> str | None:
    try:
        version = importlib.metadata.version("agent-client-protocol")
    except importlib.metadata.PackageNotFoundError:
        return f"agent-client-protocol not importable by {sys.executable}"
    if version != PY_SDK_VERSION:
        return f"found agent-client-protocol {version}, want {PY_SDK_VERSION}"
    return None


#: The official TypeScript SDK peers (node + peers/ts/node_modules).
TS_PEER = Requirement("ts", _check_ts, "bash scripts/install_peers.sh --ts-only")
#: The official Python SDK, importable by this interpreter (the peers run on sys.executable).
PYSDK_PEER = Requirement("pysdk", _check_pysdk, "bash scripts/install_peers.sh --py-only")


def requirement_module(module: str, how: str | None = None) -> Requirement:
    """A requirement satisfied when ``module`` is importable by this interpreter."""

    def check() -> str | None:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        return None if found else f"{module} not importable"

    return Requirement(module, check, how or f"pip install {module}")


@dataclass(frozen=True)
class Pair:
    """One client/agent combination.

    Attributes:
        name: unique name, by convention ``<client>/<agent>``.
        client_cmd: argv of the client; the harness appends workload options, ``--`` and
            ``agent_cmd``.
        agent_cmd: argv of the agent, spawned by the client.
        requires: what must be installed; an unsatisfied pair is reported as skipped.
        env: extra environment for the client (inherited by the agent).
        protocol: ACP protocol version the pair speaks (1 or 2), informational.
        description: one line for ``--list``.
        quick: included in ``--quick`` runs when no ``--pairs`` are given.
    """

    name: str
    client_cmd: tuple[str, ...]
    agent_cmd: tuple[str, ...]
    requires: tuple[Requirement, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    protocol: int = 1
    description: str = ""
    quick: bool = False

    def missing(self) -> str | None:
        """The first unsatisfied requirement's skip message, or ``None`` when runnable."""
        for req in self.requires:
            msg = req.missing()
            if msg is not None:
                return msg
        return None


#: All registered pairs by name, in registration order.
PAIRS: dict[str, Pair] = {}


def register_pair(
    name: str,
    client_cmd: Sequence[str],
    agent_cmd: Sequence[str],
    *,
    requires: Iterable[Requirement] = (),
    env: Mapping[str, str] | None = None,
    protocol: int = 1,
    description: str = "",
    quick: bool = False,
    replace: bool = False,
) -> Pair:
    """Registers a pair (see the module docstring) and returns it.

    ``client_cmd`` must follow the client CLI contract of ``peers/ts/client.mjs``
    (``--n --m --rtt-method --inflight --inflight-m --warmup --large -- <agent...>``, one JSON
    line on stdout); ``agent_cmd`` must implement the test agent of ``peers/ts/agent.mjs``
    (``_test/echo``; ``_test/stats`` optional: without it the agent's peak RSS is read from
    /proc). ``quick=True`` puts the pair in ``--quick`` runs (keep those few: every pair costs
    2 × R process pairs). Raises ``ValueError`` for a duplicate name unless ``replace`` is true.
    """
    if name in PAIRS and not replace:
        raise ValueError(f"pair {name!r} is already registered")
    if not client_cmd or not agent_cmd:
        raise ValueError("client_cmd and agent_cmd must be non-empty")
    pair = Pair(
        name=name,
        client_cmd=tuple(client_cmd),
        agent_cmd=tuple(agent_cmd),
        requires=tuple(requires),
        env=dict(env or {}),
        protocol=protocol,
        description=description,
        quick=quick,
    )
    PAIRS[name] = pair
    return pair


def get_pairs(names: Iterable[str] | None = None, *, quick: bool = False) -> list[Pair]:
    """The named pairs; without names all pairs (only those marked ``quick`` when ``quick``).

    ``"all"`` among the names selects every pair. ``KeyError`` for an unknown name.
    """
    if names is None:
        return [p for p in PAIRS.values() if p.quick or not quick]
    names = list(names)
    if "all" in names:
        return list(PAIRS.values())
    out = []
    for n in names:
        if n not in PAIRS:
            raise KeyError(f"unknown pair {n!r}; known: {', '.join(PAIRS)}")
        out.append(PAIRS[n])
    return out


def _register_builtin() -> None:
    py = sys.executable
    ts = PEERS / "ts"
    pysdk = PEERS / "pysdk"
    ts_client = ("node", str(ts / "client.mjs"))
    ts_agent = ("node", str(ts / "agent.mjs"))
    py_client = (py, str(pysdk / "client.py"))
    py_agent = (py, str(pysdk / "agent.py"))
    register_pair("pysdk/pysdk", py_client, py_agent, requires=[PYSDK_PEER], quick=True,
                  description=f"Python SDK {PY_SDK_VERSION} client and agent")
    register_pair("ts/ts", ts_client, ts_agent, requires=[TS_PEER], quick=True,
                  description=f"TypeScript SDK {TS_SDK_VERSION} client and agent, ACP v1")
    register_pair("pysdk-uvloop/pysdk-uvloop", py_client, py_agent,
                  requires=[PYSDK_PEER, requirement_module("uvloop", "pip install uvloop")],
                  env={"ACP_UVLOOP": "1"},
                  description=f"Python SDK {PY_SDK_VERSION} client and agent on uvloop")
    register_pair("ts-v2/ts-v2", ("node", str(ts / "client_v2.mjs")), ("node", str(ts / "agent_v2.mjs")),
                  requires=[TS_PEER], protocol=2,
                  description=f"TypeScript SDK {TS_SDK_VERSION} client and agent, draft ACP v2")
    register_pair("pysdk/ts", py_client, ts_agent, requires=[PYSDK_PEER, TS_PEER],
                  description="Python SDK client, TypeScript SDK agent")
    register_pair("ts/pysdk", ts_client, py_agent, requires=[TS_PEER, PYSDK_PEER],
                  description="TypeScript SDK client, Python SDK agent")


_register_builtin()
