"""The registry of benchmark *pairs*: a client command and an agent command run as two processes.

What a pair is ([`Pair`][acp_fast.benchmark.registry.Pair], its per-loop [`Variant`][acp_fast.benchmark.registry.Variant]), what it needs on the machine
([`Requirement`][acp_fast.benchmark.registry.Requirement]), the registry itself (`PAIRS`, [`register_pair`][acp_fast.benchmark.registry.register_pair],
[`get_pairs`][acp_fast.benchmark.registry.get_pairs]) and the peers' folder (`PEERS`). The built-in pairs are registered by
[`pairs`][acp_fast.benchmark.pairs] (with [`chains`][acp_fast.benchmark.chains] and [`pairs_sdk`][acp_fast.benchmark.pairs_sdk]), which re-exports these names; this
module is below all three, so that none of them imports another for the registry.

The peers' programs (`peers/pysdk/*.py`, `peers/ts/*.mjs`) are in the source tree (a
checkout, the sdist), not in the wheel. `PEERS` is `--peers DIR` ([`set_peers_dir`][acp_fast.benchmark.registry.set_peers_dir]),
else `$ACP_FAST_PEERS`, else `peers/` beside the package's source tree (a checkout with an
editable install), else `peers/` of the working directory when it holds them (the root of a
checkout acp_fast was installed from); `PEERS_FROM` says which. When a peer is missing,
the skip message says what to install and where, for a wheel as for a checkout.
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

from .runtime import Process, child_env, launch

__all__ = [
    "ACP_FAST",
    "ACP_FAST_COMPILED",
    "PACKAGE_PARENT",
    "PAIRS",
    "PEERS",
    "PEERS_FROM",
    "PYSDK_PEER",
    "PY_SDK_VERSION",
    "REPO_ROOT",
    "TS_PEER",
    "TS_SDK_VERSION",
    "Pair",
    "Requirement",
    "Variant",
    "acp_env",
    "acp_fast_agent",
    "find_peers",
    "get_pairs",
    "register_pair",
    "requirement_module",
    "set_peers_dir",
]

#: Source-tree root (``acp_fast/benchmark/registry.py`` -> two levels up; for an installed
#: package, the site folder holding it).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: The directory holding the ``acp_fast`` package (put on the children's PYTHONPATH when it is
#: not a site folder: :func:`~acp_fast.benchmark.runtime.child_env`).
PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def _holds_peers(folder: Path) -> bool:
    return (folder / "pysdk" / "client.py").is_file() or (folder / "ts" / "client.mjs").is_file()


def find_peers() -> tuple[Path, str | None]:
    """`(folder, where it came from)` of the peers without `--peers`: `$ACP_FAST_PEERS`,
    else `peers/` beside the package's source tree, else `peers/` of the working directory
    when it holds the peers' programs; `(Path("peers"), None)` when none is found."""
    env = os.environ.get("ACP_FAST_PEERS")
    if env:
        return Path(env).resolve(), "$ACP_FAST_PEERS"
    if _holds_peers(REPO_ROOT / "peers"):
        return REPO_ROOT / "peers", "the source tree"
    here = Path.cwd() / "peers"
    if _holds_peers(here):
        return here.resolve(), "the working directory"
    return Path("peers"), None


#: The peers' folder (see :func:`find_peers`, :func:`set_peers_dir`; ``acp-fast bench --peers``).
#: Where :data:`PEERS` came from (``"--peers"``, ``"$ACP_FAST_PEERS"``, ``"the source tree"``,
#: ``"the working directory"``), ``None`` when no peers' folder was found.
PEERS, PEERS_FROM = find_peers()


def set_peers_dir(peers_dir: str | os.PathLike[str]) -> None:
    """Take the peers from `peers_dir` from now on (the requirements and the pairs
    registered afterwards read `PEERS`)."""
    global PEERS, PEERS_FROM
    PEERS, PEERS_FROM = Path(peers_dir).resolve(), "--peers"


#: Pinned peer versions (must match peers/ts/package.json and scripts/install_peers.sh).
TS_SDK_VERSION = "2.4.0"
PY_SDK_VERSION = "0.12.1"


@dataclass(frozen=True)
class Requirement:
    """Something a pair needs on the machine.

    Attributes:
        name: short peer name used in the skip message ("ts", "pysdk").
        check: returns `None` when satisfied, else a detail ("node not found"; may be "").
        how: how to install it, shown in the skip message after the detail (may be "").
    """

    name: str
    check: Callable[[], str | None]
    how: str

    def missing(self) -> str | None:
        """`"skipped: <name> not installed (<detail>; <how>)"` when unsatisfied (each part only
        when given), else `None`."""
        detail = self.check()
        if detail is None:
            return None
        return f"skipped: {self.name} not installed ({'; '.join(p for p in (detail, self.how) if p)})"


def _no_peers(program: str) -> str:
    """What to do when the peers' program `program` (`"pysdk/client.py"`) is not there."""
    if PEERS_FROM is None:
        return ("no peers' folder: the peers' programs are in the acp-fast source tree, not in the wheel; "
                "pass its peers/ folder (from a checkout or the sdist) with --peers DIR")
    return (f"no {PEERS / program} ({PEERS} from {PEERS_FROM}): --peers DIR must be the peers/ folder of "
            f"the acp-fast source tree (a checkout or the sdist)")


def _script_hint(flag: str) -> str:
    """`bash scripts/install_peers.sh FLAG` when the package sits in a checkout that has it."""
    return f"in the checkout: bash scripts/install_peers.sh {flag}" if (
        REPO_ROOT / "scripts" / "install_peers.sh").is_file() else ""


def _check_ts() -> str | None:
    problems = []
    if shutil.which("node") is None:
        problems.append("node not found on PATH: install Node.js 20 or newer")
    ts = PEERS / "ts"
    if not (ts / "client.mjs").is_file():
        problems.append(f"{_no_peers('ts/client.mjs')}, then run `npm ci` (or `npm install`) in DIR/ts")
        return "; ".join(problems)
    pkg = ts / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
    try:
        version = json.loads(pkg.read_text(encoding="utf-8"))["version"]
    except (OSError, ValueError, KeyError):
        problems.append(f"no {ts / 'node_modules'}: run `npm ci` (or `npm install`) in {ts} "
                        f"(@agentclientprotocol/sdk {TS_SDK_VERSION}, pinned by its package-lock.json)")
    else:
        if version != TS_SDK_VERSION:
            problems.append(f"found @agentclientprotocol/sdk {version} in {ts / 'node_modules'}, want "
                            f"{TS_SDK_VERSION}: run `npm ci` in {ts}")
    return "; ".join(problems) or None


def _check_pysdk() -> str | None:
    problems = []
    if not (PEERS / "pysdk" / "client.py").is_file():
        problems.append(_no_peers("pysdk/client.py"))
    pip = f"pip install agent-client-protocol=={PY_SDK_VERSION} (into {sys.executable}: the peers run on it)"
    try:
        version = importlib.metadata.version("agent-client-protocol")
    except importlib.metadata.PackageNotFoundError:
        problems.append(f"agent-client-protocol not installed: {pip}")
    else:
        if version != PY_SDK_VERSION:
            problems.append(f"found agent-client-protocol {version}, want {PY_SDK_VERSION}: {pip}")
    return "; ".join(problems) or None


#: The official TypeScript SDK peers (node + ``<peers>/ts/node_modules``).
TS_PEER = Requirement("ts", _check_ts, _script_hint("--ts-only"))
#: The official Python SDK, importable by this interpreter (the peers run on sys.executable).
PYSDK_PEER = Requirement("pysdk", _check_pysdk, _script_hint("--py-only"))


def requirement_module(module: str, how: str | None = None) -> Requirement:
    """A requirement satisfied when `module` is importable by this interpreter."""

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
        name: unique name, by convention `<client>/<agent>`.
        client_cmd: argv of the client; the harness appends workload options, `--` and
            `agent_cmd`.
        agent_cmd: argv of the agent, spawned by the client.
        requires: what must be installed; an unsatisfied pair is reported as skipped.
        env: extra environment for the client (inherited by the agent).
        protocol: ACP protocol version the pair speaks (1 or 2), informational.
        description: one line for `--list`.
        quick: included in `--quick` runs when no `--pairs` are given.
        py_client: the client is a Python process that takes `--loop asyncio|uvloop`.
        py_agent: the agent is a Python process that takes `--loop asyncio|uvloop`.
        ceiling: a raw ceiling, shown but never used in a target.
        engine: the engine twin every acp_fast process of the pair must run (`"c"`, `"py"`),
            or `None`: not part of its label (one twin for all of them, whichever).
        processes: the processes it runs, in order (client, conductor, proxies, agent), each
            checked after every run against what it reported
            ([`check`][acp_fast.benchmark.runtime.check]); empty: none known (`--add-pair`).
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
    engine: str | None = None
    processes: tuple[Process, ...] = ()

    def variants(self, loops: Sequence[str]) -> list[Variant]:
        """One [`Variant`][acp_fast.benchmark.registry.Variant] per event loop in `loops` (every Python side on that loop),
        or a single `"node"` variant when neither side is a Python process."""
        if not (self.py_client or self.py_agent):
            return [Variant(self, "node", self.client_cmd, self.agent_cmd)]
        out = []
        for loop in loops:
            flag = ("--loop", loop)
            out.append(Variant(self, loop, (*self.client_cmd, *flag) if self.py_client else self.client_cmd,
                               (*self.agent_cmd, *flag) if self.py_agent else self.agent_cmd))
        return out

    def missing(self) -> str | None:
        """The first unsatisfied requirement's skip message, or `None` when runnable."""
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
        """`(pair name, loop)`: identifies the variant among a run's results."""
        return (self.pair.name, self.loop)

    @property
    def label(self) -> str:
        """`"pair name [loop]"`, as shown in progress lines and tables."""
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
    engine: str | None = None,
    processes: Sequence[Process] = (),
) -> Pair:
    """Registers a pair (see the module docstring) and returns it.

    `client_cmd` must follow the client CLI contract of `peers/ts/client.mjs`
    (`--n --m --rtt-method --inflight --inflight-m --warmup --large -- <agent...>`, one JSON
    line on stdout); `agent_cmd` must implement the test agent of `peers/ts/agent.mjs`
    (`_test/echo`; `_test/stats` optional: without it the agent's peak RSS is read from
    /proc). `quick=True` puts the pair in `--quick` runs (keep those few: every pair costs
    2 × R process pairs). `engine` and `processes`: see [`Pair`][acp_fast.benchmark.registry.Pair]. Raises
    `ValueError` for a duplicate name unless `replace` is true.
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
        engine=engine,
        processes=tuple(processes),
    )
    PAIRS[name] = pair
    return pair


def get_pairs(names: Iterable[str] | None = None, *, quick: bool = False) -> list[Pair]:
    """The named pairs; without names all pairs (only those marked `quick` when `quick`).

    `"all"` among the names selects every pair. `KeyError` for an unknown name.
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
    return None if found else f"no compiled engine in {Path(__file__).resolve().parents[1]}"


def _build_hint() -> str:
    if (REPO_ROOT / "setup.py").is_file() and (REPO_ROOT / "acp_fast" / "_engine_c.pyx").is_file():
        return "build it in the source tree: python setup.py build_ext --inplace"
    return "install an acp-fast wheel with the compiled engine for this platform, or build one from the sdist"


#: acp_fast itself, importable by this interpreter.
ACP_FAST = Requirement("acp_fast", lambda: None if importlib.util.find_spec("acp_fast") else
                       f"acp_fast not importable by {sys.executable}", "pip install acp-fast")
#: acp_fast's compiled engine twin.
ACP_FAST_COMPILED = Requirement("acp_fast compiled engine", _check_compiled, _build_hint())


def acp_env(**extra: str) -> dict[str, str]:
    """The environment of an acp_fast process of a pair: this `acp_fast` first on
    `PYTHONPATH` where the child would not find it by itself, plus `extra`
    ([`child_env`][acp_fast.benchmark.runtime.child_env])."""
    return child_env(**extra)


def acp_fast_agent() -> tuple[str, tuple[str, ...]]:
    """`(kind, argv)` of the acp_fast agent: `"testy"` (`acp-fast testy`, streaming through
    the public API, run through the reporting launcher as the `agent`) or `"override"`
    (`$ACP_FAST_BENCH_AGENT`, `--acp-agent`; a `python -m acp_fast…` command on this
    interpreter imports this acp_fast, as the conductor's components do)."""
    override = os.environ.get("ACP_FAST_BENCH_AGENT")
    if override:
        import shlex

        from ..conductor.spec import same_acp_fast

        return "override", tuple(same_acp_fast(shlex.split(override))[0])
    return "testy", launch("agent", "acp_fast.cli.main", "testy")
