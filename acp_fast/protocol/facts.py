"""The protocol facts every layer of acp_fast branches on, in one table.

Most ACP methods are just names a handler is registered for; the ones below are *special*:
some layer (engine, JSON-RPC connection, initialization guard, roles, conductor, remote
server, SDK drop-in, Testy, benchmark) treats them differently from any other method. Each
is spelled here once, with why it is special; every layer imports the name from here
instead of writing the string (`tests/test_protocol_facts.py` enforces it).

What is here:

- **Method names**: `INITIALIZE`, `AUTHENTICATE`, `CANCEL_REQUEST`, the session setup
  methods (`SESSION_NEW`, `SESSION_LOAD`, `SESSION_RESUME`, `SESSION_FORK`), a turn's
  methods (`SESSION_PROMPT`, `SESSION_CANCEL`, `SESSION_UPDATE`), the client request a
  client tracks (`SESSION_REQUEST_PERMISSION`), MCP over ACP (`MCP_MESSAGE`).
- **Proxy spellings**: the reference implementation's extension names `_proxy/initialize` /
  `_proxy/successor` (`"underscore"`, acp_fast's default) and the spec RFD's
  `proxy/initialize` / `proxy/successor` (`"spec"`), with `PROXY_SPELLINGS` mapping the
  option to its pair and the sets of both spellings.
- **Sets**: the initializing requests, the setup methods (with and without
  `session/load`), the session-scoped methods (generated from the schemas, plus
  `EXTRA_SESSION_SCOPED_METHODS`), the requests a client tracks per session, and the
  methods the conductor's forwarding fast path never forwards.

Everything is a module-level constant: import the names into your module's globals
(`from acp_fast.protocol.facts import INITIALIZE`), so that a hot path reads a global, not an
attribute. This module imports only the generated session-scope table: the engine and the
JSON-RPC layer import it too, below the rest of `protocol`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from ._session_scope import SESSION_SCOPED

__all__ = [
    "AUTHENTICATE",
    "CANCEL_REQUEST",
    "CLIENT_TRACKED_REQUESTS",
    "EXTRA_SESSION_SCOPED_METHODS",
    "FORWARD_CLAIMED_METHODS",
    "INITIALIZE",
    "INITIALIZING_METHODS",
    "MCP_MESSAGE",
    "PROXY_INITIALIZE",
    "PROXY_INITIALIZE_METHODS",
    "PROXY_INITIALIZE_SPEC",
    "PROXY_SPELLINGS",
    "PROXY_SUCCESSOR",
    "PROXY_SUCCESSOR_SPEC",
    "SESSION_CANCEL",
    "SESSION_FORK",
    "SESSION_LOAD",
    "SESSION_NEW",
    "SESSION_PROMPT",
    "SESSION_REQUEST_PERMISSION",
    "SESSION_RESUME",
    "SESSION_SCOPED_METHODS",
    "SESSION_SET_MODEL",
    "SESSION_UPDATE",
    "SETUP_METHODS",
    "SPECIAL_METHODS",
    "SUCCESSOR_METHODS",
    "V1_SETUP_METHODS",
    "proxy_initialize_for",
]

# --- connection-level methods -------------------------------------------------------------

#: The first request of every connection: negotiates the version; the initialization guard
#: refuses everything else before it, and the conductor answers it for its chain.
INITIALIZE: Final = "initialize"
#: Served before authentication when an agent requires it (Testy's auth-exempt set).
AUTHENTICATE: Final = "authenticate"
#: The JSON-RPC cancellation notification (protocol.md §4.1): the connection applies it to the
#: running handler itself; the conductor translates its request id hop by hop.
CANCEL_REQUEST: Final = "$/cancel_request"

# --- sessions -------------------------------------------------------------------------------

#: Opens a session: its result carries the new `sessionId` (session helpers, trace view).
SESSION_NEW: Final = "session/new"
#: Reopens a stored session, replaying it (v1 only; v2 has `session/resume`).
SESSION_LOAD: Final = "session/load"
#: Reopens a session without replay.
SESSION_RESUME: Final = "session/resume"
#: Opens a new session from an existing one.
SESSION_FORK: Final = "session/fork"
#: Starts a turn: the session helpers send it and answer it with the turn's stop reason.
SESSION_PROMPT: Final = "session/prompt"
#: Cancels the running turn of a session (a notification, not `$/cancel_request`).
SESSION_CANCEL: Final = "session/cancel"
#: The agent's streaming notification: read-gated and write-guarded per version, and the
#: one notification with its own compiled fast path on both sides.
SESSION_UPDATE: Final = "session/update"
#: The agent asks the client for a permission: a client tracks it per session, so that
#: closing the session settles it.
SESSION_REQUEST_PERMISSION: Final = "session/request_permission"
#: The unstable model switch of earlier schemas, no longer in them, still sent on a session.
SESSION_SET_MODEL: Final = "session/set_model"

#: The session setup requests that carry `mcpServers` (a proxy offering MCP servers rewrites
#: them) and whose result opens a session, in both versions.
SETUP_METHODS: Final = frozenset({SESSION_NEW, SESSION_RESUME, SESSION_FORK})
#: The setup requests of v1, which also has `session/load`.
V1_SETUP_METHODS: Final = SETUP_METHODS | {SESSION_LOAD}

#: Methods the ACP schemas no longer define that some agents and clients still send on a
#: session (the Rust SDK's list names it): kept session-scoped so that over Streamable HTTP
#: its `Acp-Session-Id` still fills `params.sessionId` and its reply follows that session; a
#: method the schemas scope is never listed here (the generated table has it).
EXTRA_SESSION_SCOPED_METHODS: Final = frozenset({SESSION_SET_MODEL})
#: Methods that act on an existing session: over Streamable HTTP their POST needs a session
#: id (`Acp-Session-Id` or `params.sessionId`) and their reply follows that session's stream.
#: The generated table (the agent's methods whose params require `sessionId`, in either
#: version) plus `EXTRA_SESSION_SCOPED_METHODS`.
SESSION_SCOPED_METHODS: Final = frozenset(SESSION_SCOPED) | EXTRA_SESSION_SCOPED_METHODS

#: The requests a client tracks per session before their handler runs.
CLIENT_TRACKED_REQUESTS: Final = frozenset({SESSION_REQUEST_PERMISSION})

# --- proxy chains (protocol.md §8.1) ----------------------------------------------------------

#: A proxy's initialize (extension spelling, acp_fast's default and the Rust SDK's only one).
PROXY_INITIALIZE: Final = "_proxy/initialize"
#: The spec RFD's spelling of `_proxy/initialize`: accepted too; a proxy answers in the
#: spelling its predecessor used.
PROXY_INITIALIZE_SPEC: Final = "proxy/initialize"
#: The envelope a proxy wraps its successor's messages in (extension spelling).
PROXY_SUCCESSOR: Final = "_proxy/successor"
#: The spec RFD's spelling of `_proxy/successor`.
PROXY_SUCCESSOR_SPEC: Final = "proxy/successor"

#: The conductor's `proxy_methods` option -> (initialize method, successor method).
PROXY_SPELLINGS: Final[Mapping[str, tuple[str, str]]] = MappingProxyType({
    "underscore": (PROXY_INITIALIZE, PROXY_SUCCESSOR),
    "spec": (PROXY_INITIALIZE_SPEC, PROXY_SUCCESSOR_SPEC),
})
#: Both spellings of the proxy initialize.
PROXY_INITIALIZE_METHODS: Final = frozenset({PROXY_INITIALIZE, PROXY_INITIALIZE_SPEC})
#: Both spellings of the successor envelope: a `$/` method inside one is connection-scoped
#: like a bare one.
SUCCESSOR_METHODS: Final = frozenset({PROXY_SUCCESSOR, PROXY_SUCCESSOR_SPEC})
#: The initializing requests of every role: the guard handles them, never a handler table.
INITIALIZING_METHODS: Final = frozenset({INITIALIZE}) | PROXY_INITIALIZE_METHODS

#: The methods the conductor's forwarding fast path never forwards, bare or inside a
#: successor envelope: a handler claims them (the compiled twin spells them again at C level
#: in `csrc/acp_forward.cpp`; a test keeps the two equal).
FORWARD_CLAIMED_METHODS: Final = INITIALIZING_METHODS | {CANCEL_REQUEST}

_INITIALIZE_FOR_SUCCESSOR: Final = {succ: init for init, succ in PROXY_SPELLINGS.values()}


def proxy_initialize_for(successor_method: str) -> str:
    """The initialize method of the spelling that `successor_method` belongs to.

    Args:
        successor_method: `_proxy/successor` or `proxy/successor`.

    Returns:
        `_proxy/initialize` or `proxy/initialize`, the same spelling.

    Raises:
        KeyError: `successor_method` is neither spelling.
    """
    return _INITIALIZE_FOR_SUCCESSOR[successor_method]


# --- MCP over ACP ------------------------------------------------------------------------------

#: Carries MCP traffic over ACP (both directions): a proxy offering MCP servers handles it.
MCP_MESSAGE: Final = "mcp/message"

#: Every method name of this table: no module of acp_fast outside this one (and the generated
#: ones) spells them as a string.
SPECIAL_METHODS: Final = frozenset({
    INITIALIZE, AUTHENTICATE, CANCEL_REQUEST,
    SESSION_NEW, SESSION_LOAD, SESSION_RESUME, SESSION_FORK,
    SESSION_PROMPT, SESSION_CANCEL, SESSION_UPDATE, SESSION_REQUEST_PERMISSION, SESSION_SET_MODEL,
    PROXY_INITIALIZE, PROXY_INITIALIZE_SPEC, PROXY_SUCCESSOR, PROXY_SUCCESSOR_SPEC,
    MCP_MESSAGE,
})
