"""Benchmark pairs through the conductor: the acp_fast client → `acp-fast conductor agent`
with 0, 1 or 3 pass-through proxies → `acp-fast testy` (issue 10).

| pair | what it runs |
|---|---|
| `acp_fast/conductor-0p/acp_fast` | the conductor with only the agent (one hop) |
| `acp_fast/conductor-1p/acp_fast` | one pass-through proxy (two conductor hops) |
| `acp_fast/conductor-3p/acp_fast` | three pass-through proxies (four conductor hops) |

The proxy is `acp_fast.conductor.passthrough` (`python -m`; packaged, so the rows run
from an installed package), compiled engine everywhere, all Python processes on the row's
event loop: unlike the other pairs, the loop flag goes *inside* the conductor's component
specs (`ChainPair.variants`). The conductor and every proxy run through the reporting
launcher ([`launch`][acp_fast.benchmark.launch]) like the client and Testy, on this interpreter and this
`acp_fast`: each of them reports its twin and loop, checked after every run. They compare
with `acp_fast/acp_fast` (the same client and agent, directly connected), on the same loop.

What is measured beyond the common workloads (the client's `/proc` readings, see
[`acp_fast.benchmark.client`][acp_fast.benchmark.client]): the conductor is the process the client spawns, so its own
CPU time during the streaming prompt ÷ N ÷ hops is the **conductor CPU per forwarded
notification per hop** (every notification crosses the conductor k + 1 times with k proxies),
the CPU of the whole spawned tree (conductor + proxies + agent) per notification, and the
conductor's **peak RSS** (`VmHWM`, its own high-water mark since exec). CPU pinning: the
harness pins the client to one CPU and the spawned command to the other; with a chain that
command is the conductor and every component inherits its CPU, so on a 2-CPU machine the
conductor, the proxies and the agent share one CPU, while the direct pair's agent has it to
itself (throughput ratios are conservative; CPU per notification is not affected).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from .registry import (
    ACP_FAST,
    ACP_FAST_COMPILED,
    PAIRS,
    Pair,
    Variant,
    acp_env,
    acp_fast_agent,
)
from .runtime import Process, launch

__all__ = ["CHAIN_PROXIES", "DIRECT", "ChainPair", "chain_name", "conductor_command", "register_chain_pairs"]

#: proxy counts of the registered chain pairs
CHAIN_PROXIES = (0, 1, 3)
#: the pair the chains compare with (same client and agent, connected directly)
DIRECT = "acp_fast/acp_fast"


def chain_name(proxies: int) -> str:
    """`"acp_fast/conductor-<k>p/acp_fast"`."""
    return f"acp_fast/conductor-{proxies}p/acp_fast"


def conductor_command(proxies: int, agent: Sequence[str], *, loop: str | None = None) -> tuple[str, ...]:
    """`acp-fast conductor agent` with `proxies` pass-through proxies in front of `agent`
    (every Python process on `loop` when given; `agent` gets `--loop` appended); the
    conductor and the proxies run through the reporting launcher (roles `conductor`, `proxy`)."""
    flag = ("--loop", loop) if loop else ()
    proxy = shlex.join(launch("proxy", "acp_fast.conductor.passthrough", *flag))
    return (*launch("conductor", "acp_fast.cli.main", "conductor", *flag, "agent", *[proxy] * proxies),
            shlex.join((*agent, *flag)))


@dataclass(frozen=True)
class ChainPair(Pair):
    """A pair whose agent command is a conductor running `proxies` pass-through proxies in
    front of the agent; the event loop goes into every component's command."""

    proxies: int = 0
    agent: tuple[str, ...] = ()  #: the agent behind the chain
    agent_takes_loop: bool = True

    @property
    def hops(self) -> int:
        """How many times the conductor forwards each notification (proxies + 1)."""
        return self.proxies + 1

    def variants(self, loops: Sequence[str]) -> list[Variant]:
        out = []
        for loop in loops:
            agent = conductor_command(self.proxies, self.agent, loop=loop)
            if not self.agent_takes_loop:  # an --acp-agent override: no --loop for it
                agent = (*agent[:-1], shlex.join(self.agent))
            out.append(Variant(self, loop, (*self.client_cmd, "--loop", loop), agent))
        return out


def register_chain_pairs() -> list[str]:
    """Registers the chain pairs (replacing earlier ones); returns their names."""
    kind, agent = acp_fast_agent()
    client = launch("client", "acp_fast.benchmark.client")
    names = []
    for k in CHAIN_PROXIES:
        name = chain_name(k)
        hops = ("--hops", str(k + 1))
        PAIRS[name] = ChainPair(
            name=name,
            client_cmd=(*client, *hops),
            agent_cmd=conductor_command(k, agent),
            requires=(ACP_FAST, ACP_FAST_COMPILED),
            env=acp_env(ACP_FAST_NO_EXTENSIONS="0"),
            description=f"acp_fast client → acp-fast conductor, {k} pass-through prox{'y' if k == 1 else 'ies'}"
                        f" → acp_fast agent, compiled engine",
            py_client=True,
            py_agent=True,
            proxies=k,
            agent=tuple(agent),
            agent_takes_loop=kind == "testy",
            engine="c",
            processes=(Process("client"), Process("conductor"), *[Process("proxy")] * k,
                       Process("agent", "acp_fast" if kind == "testy" else "other")),
        )
        names.append(name)
    return names
