"""How a chain's protocol version is selected (issue 20): pure rules and the record of one selection.

The conductor pins `protocolVersion` to the version it selected and checks the final
agent's `initialize` answer against it (protocol.md §8.3 [SEED]). What this module decides
is *which* version, when the components' versions are not known in advance:

* **Probing** (agent mode, no `protocol_version`): the first attempt is `2` for any
  request >= 2 and `1` for a request of 1 (v1 semantics: the client's version is the most it
  speaks, and an agent answers with the version it speaks, up to the requested one). The
  chain goes down, never up:

  - the agent answers a *lower* version `W` (a v1-only agent asked for 2): `W` is selected.
    Without proxies its answer is the chain's answer, as it would be directly. With proxies,
    they are restarted and initialized at `W` (a proxy is initialized once, and an exact-
    version proxy must not see one version from the client and another from the agent); the
    agent is kept, and its answer is given to the last restarted proxy when that proxy's
    `initialize` is the one the agent already saw, lowered (`same_initialize`);
    otherwise the agent is restarted too and gets the new request;
  - a proxy answers its `_proxy/initialize` with an error *before* sending `initialize` on
    to its successor (an exact-version proxy refuses a version it does not speak): the
    attempt is repeated one version lower, the proxies up to that one restarted;
  - the agent's own error (`-32022` from a v2-only agent asked for 1, invalid params, …)
    is the chain's answer, as it would be directly: it never makes the chain go lower.

* **Pinned** (`protocol_version=1|2`, `--protocol-version`): that version, no probing. A
  request below it is answered `-32022` with `{"requested", "supported": [pinned]}`; a
  request above it is lowered to it.

* **Proxy mode**: the parent selected the version (its `_proxy/initialize`); no probing.

A component that cannot speak the version the chain ends up with fails the client's
`initialize` with -32600 naming that component and the versions involved
(`Selection.cannot_speak`, `Selection.answered_other`), and the chain ends: one
version end to end, or no chain. Lowering to v1 rewrites the request as a v1 agent reads a
newer one (protocol.md §6.5, `initialize_params`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import INVALID_REQUEST, JsonRpcError
from ..jsontypes import Json, JsonObject
from ..protocol import negotiation as nego
from ..protocol.profile import profile_of

__all__ = ["Selection", "first_version", "initialize_params", "proxy_mode_version", "same_initialize"]


def first_version(requested: int, pinned: int | None) -> int:
    """The version of an agent-mode chain's first attempt for a request of `requested` (>= 1).

    Raises:
        JsonRpcError: -32022 `{"requested", "supported": [pinned]}` when the chain is pinned
            above the request (a v2 chain cannot serve a v1 client).
    """
    if pinned is None:
        return 1 if requested == 1 else 2
    if requested < pinned:
        raise nego.unsupported_protocol_version(requested, [pinned])
    return pinned


def proxy_mode_version(requested: int, pinned: int | None) -> int:
    """The version of a proxy-mode chain for its parent's `_proxy/initialize` of `requested`.

    Raises:
        JsonRpcError: -32600 when the chain is pinned to another version (a proxy matches its
            parent's version exactly, protocol.md §6.7).
    """
    version = 1 if requested == 1 else 2
    if pinned is not None and version != pinned:
        raise JsonRpcError(INVALID_REQUEST, data=(
            f"unsupported ACP protocol version {requested}; this chain is pinned to ACP protocol "
            f"version {pinned}"))
    return version


def initialize_params(params: Json, requested: int, version: int) -> JsonObject | None:
    """The `initialize` params a chain selecting `version` sends for a request of `requested`.

    `None`: the client's own params, verbatim (`version == requested`). Lowered to 2 (a
    request for 3 or more): only `protocolVersion` changes. Lowered to 1: the request as a v1
    agent reads a newer one (protocol.md §6.5: `info` becomes `clientInfo`, `capabilities`
    become `clientCapabilities`), except that v1 fields the client sent itself
    (`clientInfo`, `clientCapabilities`) are kept as they are.

    Examples:
        >>> initialize_params({"protocolVersion": 2, "info": {"name": "c", "version": "1"}}, 2, 1)["clientInfo"]
        {'name': 'c', 'version': '1'}
        >>> v1_shaped = {"protocolVersion": 2, "clientCapabilities": {"terminal": True}}
        >>> initialize_params(v1_shaped, 2, 1)["clientCapabilities"]
        {'terminal': True}
    """
    if version == requested:
        return None
    body = params if type(params) is dict else {}
    if profile_of(version).exact_initialize:
        return dict(body, protocolVersion=version)
    lowered = nego.normalize_v2_to_v1(body)
    for key in ("clientInfo", "clientCapabilities"):
        if key in body:
            lowered[key] = body[key]
    return lowered


def same_initialize(seen: Json, sent: Json) -> bool:
    """True when `sent` (a v1 `initialize`) is what an agent that already answered `seen`
    (a newer one) read from it: `seen` lowered to v1 equals `sent`, field by field with
    the v1 schema's defaults."""
    if type(seen) is not dict or type(sent) is not dict:
        return False
    requested = seen.get("protocolVersion")
    if type(requested) is not int or requested < 2:
        return False
    lowered = initialize_params(seen, requested, 1)
    assert lowered is not None
    return nego.canonicalize_v1_initialize(lowered) == nego.canonicalize_v1_initialize(sent)


def _detail(error: Json) -> str:
    if type(error) is dict:
        data = error.get("data")
        message = error.get("message")
        text = data if type(data) is str else message if type(message) is str else None
        if text is not None:
            return f"{text} ({error.get('code')})"
    return str(error)


@dataclass
class _Component:
    name: str
    component: str
    known: tuple[int, ...] | None
    starts: int = 0
    tried: dict[str, str] = field(default_factory=dict)
    speaking: int | None = None  # the version its current process was initialized at


class Selection:
    """The selection of one chain's protocol version while it is made, and its record.

    Args:
        requested: the client's (or the parent's) `protocolVersion`.
        version: the version of the first attempt.
        probing: whether the chain may go lower (agent mode without `protocol_version`).
        pinned: the `protocol_version` option (`None`: not pinned).
        components: `(name, description, known versions or None)` per component.

    Attributes:
        version: the version of the current attempt (the selected one once done).
        attempts: the version of each attempt, in order.
        reached: the highest chain position the current attempt's `initialize` was sent to.
        inits: `(hop, id on that hop) -> chain position` of the attempt's `initialize`
            requests in flight.
        agent_params: the `initialize` params the agent was sent (decoded).
        cached: the agent's answer to keep for the restarted proxies (see the module docstring).
        agent_answered: the agent answered the current attempt (its answer travels back).
        agent_error: the agent answered the current attempt with an error.
    """

    def __init__(self, requested: int, version: int, *, probing: bool, pinned: int | None,
                 components: Sequence[tuple[str, str, tuple[int, ...] | None]]) -> None:
        self.requested = requested
        self.version = version
        self.probing = probing
        self.pinned = pinned
        self.attempts: list[int] = []
        self.reached = -1
        self.inits: dict[tuple[int, int], int] = {}
        self.agent_params: Json = None
        self.cached: Any = None  # an engine frame
        self.agent_answered = False
        self.agent_error = False
        self.outcome = "selecting"
        self.error: JsonObject | None = None
        self._components = [_Component(name, text, known) for name, text, known in components]

    def begin(self) -> None:
        """A new attempt at `version`: nothing of an earlier one is in flight."""
        self.attempts.append(self.version)
        self.reached = -1
        self.inits.clear()
        self.agent_answered = self.agent_error = False

    def started(self, position: int) -> None:
        """Component `position` was started (again)."""
        c = self._components[position]
        c.starts += 1
        c.speaking = None

    def note(self, position: int, what: str, version: int | None = None) -> None:
        """What component `position` did at `version` (default: the current attempt's):
        `accepted` (sent `initialize` on, or answered it), `answered N` (the agent),
        `reused` (the agent's earlier answer given at this version), `rejected: …`,
        `error …`."""
        c = self._components[position]
        at = self.version if version is None else version
        c.tried[str(at)] = what
        answered = what[9:] if what.startswith("answered ") else ""
        c.speaking = at if what in ("accepted", "reused") else int(answered) if answered.isdigit() else None

    def rejected(self, position: int, error: Json) -> None:
        """Component `position` refused the current attempt's version with `error`."""
        self.note(position, f"rejected: {_detail(error)}")

    def tried(self, position: int) -> dict[str, str]:
        """What component `position` did at each version tried so far."""
        return dict(self._components[position].tried)

    def name(self, position: int) -> str:
        """Component `position`'s name (`Proxy(i)`, `Agent`)."""
        return self._components[position].name

    def describe(self, position: int) -> str:
        """The name and the component's spec, as `Proxy(0) (spec)` with the spec in backticks."""
        c = self._components[position]
        return f"{c.name} (`{c.component}`)"

    def speaks(self, position: int) -> list[int]:
        """The versions component `position` is known to speak: those it accepted, answered or
        had reused so far, else the ones an in-process component declares."""
        c = self._components[position]
        seen: set[int] = set()
        for version, what in c.tried.items():
            if what in ("accepted", "reused"):
                seen.add(int(version))
            elif what.startswith("answered ") and what[9:].isdigit():
                seen.add(int(what[9:]))
        return sorted(seen) or list(c.known or ())

    def finish(self, outcome: str, error: JsonRpcError | None = None) -> None:
        """The selection is over: `"selected"`, `"agent error"` (the agent's own answer) or
        `"failed"` (`error`: what the client was answered)."""
        self.outcome = outcome
        self.error = None if error is None else error.to_dict()
        self.inits.clear()
        self.cached = None

    def record(self) -> JsonObject:
        """The selection as one JSON-ready object (`Conductor.negotiation`, the trace's
        `negotiation` event): `requested`, `selected` (`null` when it failed),
        `pinned`, `probing`, `attempts`, `outcome`, `error`, and per component its
        `name`, `component`, `starts`, `tried` (version → `accepted` / `rejected: …`
        / `answered N` / `error …` / `reused`) and `version` (the version its running
        process was initialized at, or `null`)."""
        selected = None if self.outcome == "failed" else self.version
        components = []
        for c in self._components:
            components.append({"name": c.name, "component": c.component, "starts": c.starts,
                               "tried": dict(c.tried), "version": c.speaking})
        return {"requested": self.requested, "selected": selected, "pinned": self.pinned,
                "probing": self.probing, "attempts": list(self.attempts), "outcome": self.outcome,
                "error": self.error, "components": components}

    def summary(self) -> str:
        """One line for logs: requested, selected, attempts and what each component did."""
        parts = [f"{c.name}: " + ", ".join(f"v{v} {what}" for v, what in c.tried.items())
                 for c in self._components if c.tried]
        attempts = "→".join(map(str, self.attempts))
        if self.outcome == "selecting":
            head = f"requested {self.requested}, attempts {attempts}"
        else:
            selected = "none" if self.outcome == "failed" else str(self.version)
            head = f"requested {self.requested}, selected {selected} (attempts {attempts}: {self.outcome})"
        return "protocol version: " + "; ".join([head, *parts])

    def _reason(self) -> str:
        if self.pinned is not None:
            return f"the version this chain is pinned to (protocol_version={self.pinned})"
        return "the version selected for this chain"

    def _facts(self, position: int, agent: int | None) -> str:
        facts = [f"client requested {self.requested}"]
        if agent is not None and agent != position:
            versions = self.speaks(agent)
            if versions:
                facts.append(f"{self.name(agent)} speaks {'/'.join(map(str, versions))}")
        own = [v for v in self.speaks(position) if v != self.version]
        if own:
            facts.append(f"{self.name(position)} speaks {'/'.join(map(str, own))}")
        return "[" + ", ".join(facts) + "]"

    def cannot_speak(self, position: int, agent: int | None, error: Json) -> JsonRpcError:
        """-32600: component `position` refused the selected version (`error`: its answer,
        an error object). `agent`: the agent's position (`None` in proxy mode)."""
        return JsonRpcError(INVALID_REQUEST, data=(
            f"{self.describe(position)} cannot speak ACP protocol version {self.version}, {self._reason()} "
            f"{self._facts(position, agent)}; its answer: {_detail(error)}"))

    def answered_other(self, position: int, agent: int | None, answered: Json,
                       cause: JsonRpcError | None = None) -> JsonRpcError:
        """-32600: component `position` answered `initialize` with version `answered`, or
        with an answer that is not valid at the selected version (`cause`)."""
        detail = f"; {cause.data}" if cause is not None and isinstance(cause.data, str) else ""
        return JsonRpcError(INVALID_REQUEST, data=(
            f"{self.describe(position)} answered ACP protocol version {answered}, not {self.version}, "
            f"{self._reason()} {self._facts(position, agent)}{detail}"))
