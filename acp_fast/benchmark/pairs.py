"""The built-in benchmark *pairs* (a client command and an agent command run as two processes),
registered on import, and the registry's names ([`registry`][acp_fast.benchmark.registry]) re-exported.

A pair is benchmarked by running its client command with the workload's options followed by
`--` and its agent command; the client spawns the agent over real OS pipes (stdin/stdout),
drives it and prints one JSON line (the client CLI contract of `peers/README.md`).

Every pair runs once per event loop ([`Pair.variants`][acp_fast.benchmark.pairs.Pair.variants]): each Python side gets the same
`--loop asyncio|uvloop`; a pair without a Python process (`ts/ts`) runs once, on node.

Built-in pairs (`<client>/<agent>`; the acp_fast agent is `acp-fast testy`, streaming
through the public API, `cx.send_session_update` with fresh text per chunk):

| pair | what it runs |
|---|---|
| `acp_fast/acp_fast` | acp_fast client and agent, compiled engine |
| `acp_fast/acp_fast-readme` | the acp_fast client fed by an agent written from the README (`readme_agent`: public API only, as a user writes it) |
| `acp_fast-pure/acp_fast-pure` | the same with `ACP_FAST_NO_EXTENSIONS=1` on both |
| `pysdk/pysdk` | official Python SDK client and agent (`peers/pysdk`) |
| `ts/ts` | official TypeScript SDK client and agent |
| `acp_fast/pysdk`, `acp_fast/ts` | the acp_fast client fed by each official SDK agent |
| `pysdk/acp_fast`, `ts/acp_fast` | each official SDK client fed by the acp_fast agent |
| `pysdk-transport/…`, `pysdk-fast/…` | the official Python SDK pair on acp_fast's transport / connection drop-in ([`pairs_sdk`][acp_fast.benchmark.pairs_sdk]) |
| `acp_fast/acp_fast-preencoded` | raw ceiling: Testy re-sends one pre-encoded line |
| `floor/floor` | the floor: no protocol library (`floor`: a writer of one pre-encoded line, an asyncio reader decoding each line with orjson); the reference of the "fraction of the floor" goals, never a comparison (`CEILING`; never in a comparison) |
| `acp_fast/conductor-1p/acp_fast`, ... | through `acp-fast conductor` with 0, 1, 3 pass-through proxies ([`chains`][acp_fast.benchmark.chains]) |
| `acp_fast-v2/acp_fast-v2`, ... | draft ACP v2 and other extra pairs (`--list`) |

Every acp_fast process of a pair (the client, Testy, and in [`chains`][acp_fast.benchmark.chains] the conductor and its
proxies) runs on this interpreter, imports this `acp_fast` whatever the working directory and
reports the twin and loop it runs ([`runtime`][acp_fast.benchmark.runtime], through [`launch`][acp_fast.benchmark.launch]); the pair's
`engine` and `processes` say what they must report.

The peers' folder: [`configure`][acp_fast.benchmark.pairs.configure]'s argument (`acp-fast bench --peers DIR`), else
`$ACP_FAST_PEERS`, else `peers/` of the source tree or of the working directory
([`find_peers`][acp_fast.benchmark.registry.find_peers]).

Extension point: [`register_pair`][acp_fast.benchmark.pairs.register_pair] ([`registry`][acp_fast.benchmark.registry]) adds any other pair; or, without code,
`acp-fast bench --add-pair NAME 'CLIENT CMD' 'AGENT CMD'`.
"""

from __future__ import annotations

import os
import sys

from . import registry
from .chains import register_chain_pairs
from .pairs_sdk import register as register_sdk_pairs
from .registry import (
    ACP_FAST,
    ACP_FAST_COMPILED,
    PAIRS,
    PY_SDK_VERSION,
    PYSDK_PEER,
    REPO_ROOT,
    TS_PEER,
    TS_SDK_VERSION,
    Pair,
    Requirement,
    Variant,
    acp_env,
    acp_fast_agent,
    get_pairs,
    register_pair,
    requirement_module,
)
from .runtime import Process, launch, module_command

__all__ = [
    "BASELINE",
    "CEILING",
    "DEFAULT_PAIRS",
    "FLOOR",
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

#: The pairs ``acp-fast bench`` runs by default.
DEFAULT_PAIRS = ("acp_fast/acp_fast", "acp_fast/acp_fast-readme", "acp_fast-pure/acp_fast-pure", "pysdk/pysdk", "ts/ts",
                 "acp_fast/pysdk", "pysdk/acp_fast", "acp_fast/ts", "ts/acp_fast",
                 "acp_fast/acp_fast-preencoded", "floor/floor",
                 # proxy chains (.chains)
                 "acp_fast/conductor-0p/acp_fast", "acp_fast/conductor-1p/acp_fast", "acp_fast/conductor-3p/acp_fast",
                 # the official Python SDK on the drop-ins (.pairs_sdk)
                 "pysdk-transport/pysdk-transport", "pysdk-fast/pysdk-fast")
#: The reference pair of the ratios in the results table.
BASELINE = "pysdk/pysdk"
#: The raw-ceiling row's label (Testy re-sending one pre-encoded line).
CEILING = "raw ceiling (pre-encoded line, not a comparison)"
#: The floor row's label (:mod:`.floor`).
FLOOR = "floor: no protocol library, orjson per line (not a comparison)"


def configure(peers_dir: str | os.PathLike[str] | None = None) -> None:
    """(Re)registers the built-in pairs, with the peers in `peers_dir` (default: unchanged).

    Pairs registered by [`register_pair`][acp_fast.benchmark.pairs.register_pair] under other names are kept.
    """
    if peers_dir is not None:
        registry.set_peers_dir(peers_dir)
    for name in _BUILTIN:
        PAIRS.pop(name, None)
    _register_builtin()


_BUILTIN: list[str] = []


def _register_builtin() -> None:
    before = set(PAIRS)
    _register_builtin_pairs()
    register_sdk_pairs()  # the official Python SDK on acp_fast's drop-ins
    _BUILTIN[:] = [n for n in PAIRS if n not in before] or _BUILTIN


def _register_builtin_pairs() -> None:
    py = sys.executable
    kind, acp_agent = acp_fast_agent()
    testy = kind == "testy"  # an --acp-agent override may not take --loop / --stream
    acp_ceiling = (*acp_agent, "--stream", "preencoded")
    acp_client = launch("client", "acp_fast.benchmark.client")
    acp_client_v2 = (*acp_client, "--v2")
    ts = registry.PEERS / "ts"
    pysdk = registry.PEERS / "pysdk"
    ts_client = ("node", str(ts / "client.mjs"))
    ts_agent = ("node", str(ts / "agent.mjs"))
    ts_agent_v2 = ("node", str(ts / "agent_v2.mjs"))
    py_client = (py, str(pysdk / "client.py"))
    py_agent = (py, str(pysdk / "agent.py"))
    compiled = acp_env(ACP_FAST_NO_EXTENSIONS="0")
    # the processes each pair runs, checked against what each reported after every run (runtime.check)
    fast, sdk, node = Process("client"), Process("client", "sdk"), Process("client", "node")
    fast_agent = Process("agent", "acp_fast" if testy else "other")
    sdk_agent, node_agent = Process("agent", "sdk"), Process("agent", "node")
    register_pair("acp_fast/acp_fast", acp_client, acp_agent, requires=[ACP_FAST, ACP_FAST_COMPILED],
                  env=compiled, quick=True, py_client=True, py_agent=testy, engine="c", processes=(fast, fast_agent),
                  description="acp_fast client and agent (public API), compiled engine")
    register_pair("acp_fast/acp_fast-readme", acp_client, launch("agent", "acp_fast.benchmark.readme_agent"),
                  requires=[ACP_FAST, ACP_FAST_COMPILED], env=compiled, quick=True, py_client=True, py_agent=True,
                  engine="c", processes=(fast, Process("agent")),
                  description="acp_fast client fed by an agent written from the README (public API only)")
    register_pair("acp_fast-pure/acp_fast-pure", acp_client, acp_agent, requires=[ACP_FAST],
                  env=acp_env(ACP_FAST_NO_EXTENSIONS="1"), quick=True, py_client=True, py_agent=testy, engine="py",
                  processes=(fast, fast_agent),
                  description="acp_fast client and agent, pure-Python engine (ACP_FAST_NO_EXTENSIONS=1)")
    register_pair("pysdk/pysdk", py_client, py_agent, requires=[PYSDK_PEER], quick=True,
                  py_client=True, py_agent=True, processes=(sdk, sdk_agent),
                  description=f"Python SDK {PY_SDK_VERSION} client and agent")
    register_pair("ts/ts", ts_client, ts_agent, requires=[TS_PEER], quick=True, processes=(node, node_agent),
                  description=f"TypeScript SDK {TS_SDK_VERSION} client and agent, ACP v1")
    register_pair("acp_fast/pysdk", acp_client, py_agent, requires=[ACP_FAST, ACP_FAST_COMPILED, PYSDK_PEER],
                  env=compiled, quick=True, py_client=True, py_agent=True, engine="c", processes=(fast, sdk_agent),
                  description="acp_fast client fed by the Python SDK agent")
    register_pair("pysdk/acp_fast", py_client, acp_agent, requires=[PYSDK_PEER, ACP_FAST, ACP_FAST_COMPILED],
                  env=compiled, quick=True, py_client=True, py_agent=testy, engine="c", processes=(sdk, fast_agent),
                  description="Python SDK client fed by the acp_fast agent")
    register_pair("acp_fast/ts", acp_client, ts_agent, requires=[ACP_FAST, ACP_FAST_COMPILED, TS_PEER],
                  env=compiled, quick=True, py_client=True, engine="c", processes=(fast, node_agent),
                  description="acp_fast client fed by the TypeScript SDK agent")
    register_pair("ts/acp_fast", ts_client, acp_agent, requires=[TS_PEER, ACP_FAST, ACP_FAST_COMPILED],
                  env=compiled, quick=True, py_agent=testy, engine="c", processes=(node, fast_agent),
                  description="TypeScript SDK client fed by the acp_fast agent")
    register_pair("acp_fast/acp_fast-preencoded", acp_client, acp_ceiling if testy else acp_agent,
                  requires=[ACP_FAST, ACP_FAST_COMPILED], env=compiled, ceiling=True, py_client=True, py_agent=testy,
                  engine="c", processes=(fast, fast_agent), description=CEILING + ": Testy --stream preencoded")
    register_pair("acp_fast-v2/acp_fast-v2", acp_client_v2, acp_agent, requires=[ACP_FAST], env=acp_env(),
                  protocol=2, py_client=True, py_agent=testy, processes=(fast, fast_agent),
                  description="acp_fast client and agent on draft ACP v2")
    register_pair("acp_fast-v2/ts-v2", acp_client_v2, ts_agent_v2, requires=[ACP_FAST, TS_PEER], env=acp_env(),
                  protocol=2, py_client=True, processes=(fast, node_agent),
                  description="acp_fast v2 client, TypeScript SDK v2 agent")
    register_pair("ts-v2/ts-v2", ("node", str(ts / "client_v2.mjs")), ts_agent_v2,
                  requires=[TS_PEER], protocol=2, processes=(node, node_agent),
                  description=f"TypeScript SDK {TS_SDK_VERSION} client and agent, draft ACP v2")
    register_pair("pysdk/ts", py_client, ts_agent, requires=[PYSDK_PEER, TS_PEER], py_client=True,
                  processes=(sdk, node_agent), description="Python SDK client, TypeScript SDK agent")
    register_pair("ts/pysdk", ts_client, py_agent, requires=[TS_PEER, PYSDK_PEER], py_agent=True,
                  processes=(node, sdk_agent), description="TypeScript SDK client, Python SDK agent")
    # no acp_fast engine runs in the floor pair: nothing to report (its JSON line names its loop, checked)
    register_pair("floor/floor", module_command("acp_fast.benchmark.floor"),
                  module_command("acp_fast.benchmark.floor", "writer"),
                  requires=[ACP_FAST, requirement_module("orjson", "pip install 'acp-fast[bench]'")], env=acp_env(),
                  ceiling=True, quick=True, py_client=True, description=FLOOR)
    register_chain_pairs()  # proxy chains through acp-fast conductor: their own module


_register_builtin()
