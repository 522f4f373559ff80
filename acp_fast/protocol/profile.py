"""What differs between ACP v1 and v2, as data: one [`VersionProfile`][acp_fast.protocol.profile.VersionProfile] per version.

Every layer that behaves differently by version (negotiation, the roles, the conductor) reads
a field of its connection's profile instead of comparing the version number; this module is
the only place a version number is compared (a source test keeps it so).

| field | v1 | v2 |
|---|---|---|
| `client_info_key` / `agent_info_key` | `clientInfo` / `agentInfo` | `info` / `info` |
| `info_required` | no | yes |
| `guarded` (the initialization guard applies) | no | yes |
| `exact_initialize` (an incoming `initialize` must ask for this version) | no (newer is normalised) | yes |
| `capabilities_key` of an `initialize` result | `agentCapabilities` | `capabilities` |
| `setup_methods` (requests that set a session up) | `session/new`, `load`, `resume`, `fork` | `session/new`, `resume`, `fork` |
| `session_states` (sessions report a state; opened sessions are tracked) | no | yes |
| `mcp_over_acp` (MCP servers attached to sessions over ACP) | no | yes |
| `proxy_sessions` (the proxy's non-blocking session set-up) | no | yes |
| `session_helpers` (resume, fork and the other v2 session operations) | no | yes |
| `mcp_capability` (where an `initialize` result advertises MCP transports) | `agentCapabilities.mcpCapabilities` | `capabilities.session.mcp` |
| `lower` (the version a probing conductor falls back to) | none | 1 |
"""

from __future__ import annotations

from typing import Final

from ..jsontypes import Json, JsonObject
from .facts import SETUP_METHODS, V1_SETUP_METHODS

__all__ = ["OLDEST", "V1", "V2", "VersionProfile", "profile_of"]


class VersionProfile:
    """The behaviour of one ACP version, as data (see the module table; read-only by
    convention: the profiles are module constants shared by every connection).

    A plain slotted class, not a dataclass: the profiles are built at import, and a
    dataclass would compile its generated methods then (start-up budget).
    """

    __slots__ = ("agent_info_key", "capabilities_key", "client_info_key", "exact_initialize", "guarded",
                 "info_required", "lower", "mcp_acp_value", "mcp_capability", "mcp_over_acp", "proxy_sessions",
                 "session_helpers", "session_states", "setup_methods", "version")

    #: the version number
    version: int
    #: the key of the client's `Implementation` in `initialize` params
    client_info_key: str
    #: the key of the agent's `Implementation` in an `initialize` result
    agent_info_key: str
    #: `initialize` params and results must carry the `Implementation`
    info_required: bool
    #: the initialization guard applies to a guarded table's connection
    guarded: bool
    #: an incoming `initialize` must ask for exactly this version (v1: any valid version
    #: selects v1, newer metadata normalised)
    exact_initialize: bool
    #: the key of the agent's capabilities in an `initialize` result
    capabilities_key: str
    #: the requests that set a session up
    setup_methods: frozenset[str]
    #: sessions report a state (`session/state`): an opened session is tracked
    session_states: bool
    #: MCP servers can be attached to sessions over ACP
    mcp_over_acp: bool
    #: a proxy can set sessions up without blocking (`on_proxy_session_start`)
    proxy_sessions: bool
    #: resume, fork and the other v2 session operations of the session helpers
    session_helpers: bool
    #: the path of the object in an `initialize` result that advertises MCP transports
    mcp_capability: tuple[str, ...]
    #: the value of its `acp` key that advertises the ACP transport (v1 `true`, v2 `{}`)
    mcp_acp_value: Json
    #: the version a probing conductor falls back to (`None`: none lower)
    lower: int | None

    def __init__(self, *, version: int, client_info_key: str, agent_info_key: str, info_required: bool,
                 guarded: bool, exact_initialize: bool, capabilities_key: str, setup_methods: frozenset[str],
                 session_states: bool, mcp_over_acp: bool, proxy_sessions: bool, session_helpers: bool,
                 mcp_capability: tuple[str, ...], mcp_acp_value: Json, lower: int | None) -> None:
        self.version = version
        self.client_info_key = client_info_key
        self.agent_info_key = agent_info_key
        self.info_required = info_required
        self.guarded = guarded
        self.exact_initialize = exact_initialize
        self.capabilities_key = capabilities_key
        self.setup_methods = setup_methods
        self.session_states = session_states
        self.mcp_over_acp = mcp_over_acp
        self.proxy_sessions = proxy_sessions
        self.session_helpers = session_helpers
        self.mcp_capability = mcp_capability
        self.mcp_acp_value = mcp_acp_value
        self.lower = lower

    def __repr__(self) -> str:
        return f"<VersionProfile v{self.version}>"

    def default_initialize_result(self, info: Json) -> JsonObject:
        """The `initialize` result an agent answers without a handler."""
        return {"protocolVersion": self.version, self.agent_info_key: info, self.capabilities_key: {}}

    def advertises_acp_transport(self, acp: Json) -> bool:
        """Whether the `acp` value of the MCP capability object advertises the ACP transport
        (v1: exactly `true`; v2: present)."""
        return acp is True if self.mcp_acp_value is True else acp is not None


V1: Final = VersionProfile(
    version=1, client_info_key="clientInfo", agent_info_key="agentInfo", info_required=False, guarded=False,
    exact_initialize=False, capabilities_key="agentCapabilities", setup_methods=V1_SETUP_METHODS,
    session_states=False, mcp_over_acp=False, proxy_sessions=False, session_helpers=False,
    mcp_capability=("agentCapabilities", "mcpCapabilities"), mcp_acp_value=True, lower=None)
V2: Final = VersionProfile(
    version=2, client_info_key="info", agent_info_key="info", info_required=True, guarded=True,
    exact_initialize=True, capabilities_key="capabilities", setup_methods=SETUP_METHODS,
    session_states=True, mcp_over_acp=True, proxy_sessions=True, session_helpers=True,
    mcp_capability=("capabilities", "session", "mcp"), mcp_acp_value={}, lower=1)

#: the oldest version acp_fast speaks
OLDEST: Final = V1


def profile_of(version: int) -> VersionProfile:
    """The profile of `version`: v2's for 2 and above (newer drafts behave as v2), v1's below."""
    return V2 if version >= 2 else V1
