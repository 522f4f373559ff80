"""Registry of benchmark *pairs*: a client command and an agent command run as two processes.

A pair is benchmarked by running its client command with the workload's options followed by
``--`` and its agent command; the client spawns the agent over real OS pipes (stdin/stdout),
drives it and prints one JSON line (the client CLI contract of ``peers/README.md``).

Every pair runs once per event loop (:meth:`Pair.variants`): each Python side gets the same
``--loop asyncio|uvloop``; a pair without a Python process (``ts/ts``) runs once, on node.

Built-in pairs (``<client>/<agent>``; the acp_fast agent is ``acp-fast testy``, streaming
through the public API, ``cx.send_session_update`` with fresh text per chunk):

=======================================  ==============================================
``acp_fast/acp_fast``                    acp_fast client and agent, compiled engine
``acp_fast-pure/acp_fast-pure``          the same with ``ACP_FAST_NO_EXTENSIONS=1`` on both
``pysdk/pysdk``                          official Python SDK client and agent (``peers/pysdk``)
``ts/ts``                                official TypeScript SDK client and agent
``acp_fast/pysdk``, ``acp_fast/ts``      the acp_fast client fed by each official SDK agent
``pysdk/acp_fast``, ``ts/acp_fast``      each official SDK client fed by the acp_fast agent
``pysdk-transport/…``, ``pysdk-fast/…``  the official Python SDK pair on acp_fast's transport /
                                         connection drop-in (:mod:`.pairs_sdk`)
``acp_fast/acp_fast-preencoded``         raw ceiling: Testy re-sends one pre-encoded line
                                         (:data:`CEILING`; never in a comparison)
``acp_fast/conductor-1p/acp_fast``, ...  through ``acp-fast conductor`` with 0, 1, 3
                                         pass-through proxies (:mod:`.chains`)
``acp_fast-v2/acp_fast-v2``, ...         draft ACP v2 and other extra pairs (``--list``)
=======================================  ==============================================

The peers' folder is ``peers/`` of the source tree, or ``$ACP_FAST_PEERS``, or
:func:`configure`'s argument (``acp-fast bench --peers DIR``).

Extension point: :func:`register_pair` adds any other pair; or, without code,
``acp-fast bench --add-pair NAME 'CLIENT CMD' 'AGENT CMD'``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "BASELINE",
    "CEILING",
    "DEFAULT_PAIRS",
    "PAIRS",
    "PYSDK_PEER",
    "PY_SDK_VERSION",
    "REPO_ROOT",
    "TS_PEER",
    "TS_SDK_VERSION",
    "Pair",
    "Requirement",
    "Variant",
    "acp_fast_agent",
    "configure",
    "get_pairs",
    "register_pair",
    "requirement_module",
]

#: Source-tree root (``acp_fast/benchmark/pairs.py`` -> two levels up).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: The peers' folder (see :func:`configure`).
PEERS = Path(os.environ.get("ACP_FAST_PEERS") or (
    REPO_ROOT / "peers" if (REPO_ROOT / "peers").is_dir() else Path(__file__).resolve().parent / "peers"))
#: The directory holding the ``acp_fast`` package (put on the children's PYTHONPATH).
PACKAGE_PARENT = Path(__file__).resolve().parents[2]

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
    if not (PEERS / "ts" / "client.mjs").is_file():
        return f"no {PEERS / 'ts' / 'client.mjs'}"
    pkg = PEERS / "ts" / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
    try:
        version = json.loads(pkg.read_text(encoding="utf-8"))["version"]
    except (OSError, ValueError, KeyError):
        return "no peers/ts/node_modules"
    if version != TS_SDK_VERSION:
        return f"found @agentclientprotocol/sdk {version}, want {TS_SDK_VERSION}"
    return None


def _check_pysdk() -> str | None:
    if not (PEERS / "pysdk" / "client.py").is_file():
        return f"no {PEERS / 'pysdk' / 'client.py'}"
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
        return None if found else f"{module} not importable by {sys.executable}"

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
        py_client: the client is a Python process that takes ``--loop asyncio|uvloop``.
        py_agent: the agent is a Python process that takes ``--loop asyncio|uvloop``.
        ceiling: a raw ceiling, shown but never used in a target.
    """

    name: str
    client_cmd: tuple[str, ...]
    agent_cmd: tuple[str, ...]
    requires: tuple[Requirement, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    protocol: int = 1
    description: str = ""
    quick: bool = False
    py_client: bool = False
    py_agent: bool = False
    ceiling: bool = False

    def variants(self, loops: Sequence[str]) -> list[Variant]:
        """One :class:`Variant` per event loop in ``loops`` (every Python side on that loop),
        or a single ``"node"`` variant when neither side is a Python process."""
        if not (self.py_client or self.py_agent):
            return [Variant(self, "node", self.client_cmd, self.agent_cmd)]
        out = []
        for loop in loops:
            flag = ("--loop", loop)
            out.append(Variant(self, loop, (*self.client_cmd, *flag) if self.py_client else self.client_cmd,
                               (*self.agent_cmd, *flag) if self.py_agent else self.agent_cmd))
        return out

    def missing(self) -> str | None:
        """The first unsatisfied requirement's skip message, or ``None`` when runnable."""
        for req in self.requires:
            msg = req.missing()
            if msg is not None:
                return msg
        return None


@dataclass(frozen=True)
class Variant:
    """A pair on one event loop: the commands actually run."""

    pair: Pair
    loop: str  #: "asyncio", "uvloop" or "node" (no Python process)
    client_cmd: tuple[str, ...]
    agent_cmd: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str]:
        return (self.pair.name, self.loop)

    @property
    def label(self) -> str:
        return f"{self.pair.name} [{self.loop}]"


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
    py_client: bool = False,
    py_agent: bool = False,
    ceiling: bool = False,
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
        py_client=py_client,
        py_agent=py_agent,
        ceiling=ceiling,
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


def _check_compiled() -> str | None:
    # a file check only: the harness may itself run on the pure twin (ACP_FAST_NO_EXTENSIONS=1)
    try:
        found = importlib.util.find_spec("acp_fast._engine_c") is not None
    except (ImportError, ValueError):
        found = False
    return None if found else "compiled engine not built"


#: acp_fast itself, importable by this interpreter.
ACP_FAST = Requirement("acp_fast", lambda: None if importlib.util.find_spec("acp_fast") else
                       f"acp_fast not importable by {sys.executable}", "pip install -e .")
#: acp_fast's compiled engine twin.
ACP_FAST_COMPILED = Requirement("acp_fast compiled engine", _check_compiled,
                                "python setup.py build_ext --inplace")


def _acp_env(**extra: str) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    env = {"PYTHONPATH": str(PACKAGE_PARENT) + (os.pathsep + path if path else "")}
    env.update(extra)
    return env


def acp_fast_agent() -> tuple[str, tuple[str, ...]]:
    """``(kind, argv)`` of the acp_fast agent: ``"testy"`` (``acp-fast testy``, streaming through
    the public API) or ``"override"`` (``$ACP_FAST_BENCH_AGENT``, ``--acp-agent``)."""
    override = os.environ.get("ACP_FAST_BENCH_AGENT")
    if override:
        import shlex

        return "override", tuple(shlex.split(override))
    return "testy", (sys.executable, "-m", "acp_fast.cli.main", "testy")


#: The pairs ``acp-fast bench`` runs by default.
DEFAULT_PAIRS = ("acp_fast/acp_fast", "acp_fast-pure/acp_fast-pure", "pysdk/pysdk", "ts/ts",
                 "acp_fast/pysdk", "pysdk/acp_fast", "acp_fast/ts", "ts/acp_fast",
                 "acp_fast/acp_fast-preencoded",
                 # proxy chains (.chains)
                 "acp_fast/conductor-0p/acp_fast", "acp_fast/conductor-1p/acp_fast", "acp_fast/conductor-3p/acp_fast",
                 # the official Python SDK on the drop-ins (.pairs_sdk)
                 "pysdk-transport/pysdk-transport", "pysdk-fast/pysdk-fast")
#: The reference pair of the ratios in the results table.
BASELINE = "pysdk/pysdk"
#: The raw-ceiling row's label (Testy re-sending one pre-encoded line).
CEILING = "raw ceiling (pre-encoded line, not a comparison)"


def configure(peers_dir: str | os.PathLike[str] | None = None) -> None:
    """(Re)registers the built-in pairs, with the peers in ``peers_dir`` (default: unchanged).

    Pairs registered by :func:`register_pair` under other names are kept.
    """
    global PEERS
    if peers_dir is not None:
        PEERS = Path(peers_dir).resolve()
    for name in _BUILTIN:
        PAIRS.pop(name, None)
    _register_builtin()


_BUILTIN: list[str] = []


def _register_builtin() -> None:
    before = set(PAIRS)
    _register_builtin_pairs()
    from . import pairs_sdk  # the official Python SDK on acp_fast's drop-ins

    pairs_sdk.register()
    _BUILTIN[:] = [n for n in PAIRS if n not in before] or _BUILTIN


def _register_builtin_pairs() -> None:
    py = sys.executable
    kind, acp_agent = acp_fast_agent()
    testy = kind == "testy"  # an --acp-agent override may not take --loop / --stream
    acp_ceiling = (*acp_agent, "--stream", "preencoded")
    acp_client = (py, "-m", "acp_fast.benchmark.client")
    acp_client_v2 = (*acp_client, "--v2")
    ts = PEERS / "ts"
    pysdk = PEERS / "pysdk"
    ts_client = ("node", str(ts / "client.mjs"))
    ts_agent = ("node", str(ts / "agent.mjs"))
    ts_agent_v2 = ("node", str(ts / "agent_v2.mjs"))
    py_client = (py, str(pysdk / "client.py"))
    py_agent = (py, str(pysdk / "agent.py"))
    compiled = _acp_env(ACP_FAST_NO_EXTENSIONS="0")
    both = {"py_client": True, "py_agent": testy}
    register_pair("acp_fast/acp_fast", acp_client, acp_agent, requires=[ACP_FAST, ACP_FAST_COMPILED],
                  env=compiled, quick=True, **both,
                  description="acp_fast client and agent (public API), compiled engine")
    register_pair("acp_fast-pure/acp_fast-pure", acp_client, acp_agent, requires=[ACP_FAST],
                  env=_acp_env(ACP_FAST_NO_EXTENSIONS="1"), quick=True, **both,
                  description="acp_fast client and agent, pure-Python engine (ACP_FAST_NO_EXTENSIONS=1)")
    register_pair("pysdk/pysdk", py_client, py_agent, requires=[PYSDK_PEER], quick=True,
                  py_client=True, py_agent=True, description=f"Python SDK {PY_SDK_VERSION} client and agent")
    register_pair("ts/ts", ts_client, ts_agent, requires=[TS_PEER], quick=True,
                  description=f"TypeScript SDK {TS_SDK_VERSION} client and agent, ACP v1")
    register_pair("acp_fast/pysdk", acp_client, py_agent, requires=[ACP_FAST, ACP_FAST_COMPILED, PYSDK_PEER],
                  env=compiled, quick=True, py_client=True, py_agent=True,
                  description="acp_fast client fed by the Python SDK agent")
    register_pair("pysdk/acp_fast", py_client, acp_agent, requires=[PYSDK_PEER, ACP_FAST, ACP_FAST_COMPILED],
                  env=compiled, quick=True, **both,
                  description="Python SDK client fed by the acp_fast agent")
    register_pair("acp_fast/ts", acp_client, ts_agent, requires=[ACP_FAST, ACP_FAST_COMPILED, TS_PEER],
                  env=compiled, quick=True, py_client=True,
                  description="acp_fast client fed by the TypeScript SDK agent")
    register_pair("ts/acp_fast", ts_client, acp_agent, requires=[TS_PEER, ACP_FAST, ACP_FAST_COMPILED],
                  env=compiled, quick=True, py_agent=testy,
                  description="TypeScript SDK client fed by the acp_fast agent")
    register_pair("acp_fast/acp_fast-preencoded", acp_client, acp_ceiling if testy else acp_agent,
                  requires=[ACP_FAST, ACP_FAST_COMPILED], env=compiled, ceiling=True, **both,
                  description=CEILING + ": Testy --stream preencoded")
    register_pair("acp_fast-v2/acp_fast-v2", acp_client_v2, acp_agent, requires=[ACP_FAST], env=_acp_env(),
                  protocol=2, **both, description="acp_fast client and agent on draft ACP v2")
    register_pair("acp_fast-v2/ts-v2", acp_client_v2, ts_agent_v2, requires=[ACP_FAST, TS_PEER], env=_acp_env(),
                  protocol=2, py_client=True, description="acp_fast v2 client, TypeScript SDK v2 agent")
    register_pair("ts-v2/ts-v2", ("node", str(ts / "client_v2.mjs")), ts_agent_v2,
                  requires=[TS_PEER], protocol=2,
                  description=f"TypeScript SDK {TS_SDK_VERSION} client and agent, draft ACP v2")
    register_pair("pysdk/ts", py_client, ts_agent, requires=[PYSDK_PEER, TS_PEER], py_client=True,
                  description="Python SDK client, TypeScript SDK agent")
    register_pair("ts/pysdk", ts_client, py_agent, requires=[TS_PEER, PYSDK_PEER], py_agent=True,
                  description="TypeScript SDK client, Python SDK agent")
    # proxy chains through acp-fast conductor: their own module
    from .chains import register_chain_pairs

    register_chain_pairs()


_register_builtin()
