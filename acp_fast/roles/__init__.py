"""The builder API of acp_fast: `Agent`, `Client`, `Proxy` and what their handlers see.

This layer sits on [`acp_fast.jsonrpc.Connection`][acp_fast.jsonrpc.Connection] and adds ACP semantics from
[`acp_fast.protocol`][acp_fast.protocol]: version negotiation, the initialization guard and the
per-version wire surface (read gate + write guard). It mirrors the Rust SDK's protocol-v2
API (seed 000) in Python form. One idea per module:

| module | what it holds |
|---|---|
| `api` | the role namespaces `Agent` / `Client` / `Proxy`, `run_agent_stdio` |
| `builders` | the builders: register handlers; `serve` / `connect` / `connect_with` |
| `table` | the frozen [`HandlerTable`][acp_fast.roles.HandlerTable] a builder hands each connection |
| `names` | which method names a handler may be registered for (checked then) |
| `context` | request handles (`Request`, `SentRequest`) and `Peer` |
| `_hot_py` | what handlers see, `Context` and `SessionUpdate`, and the per-method dispatchers: the hot path's one source (compiled as `_hot_c`) |
| `streams` | what a role runs on: its stream (`Transport`) and engine twin (`EngineChoice`), opened one way |
| `dispatch` | the one dispatch path of a connection (`Dispatch`): guard, handler table, dynamic handlers, the role's rules |
| `connection` | `AcpConnection` (generic in the version): negotiation, the initialization guard, the outgoing checks; `AgentConnection` |
| `client` | `ClientConnection`: `initialize`, the session helpers (typed by version) |
| `proxy` | `ProxyConnection`: `_proxy/successor` routing and forwarding |
| `routers` | first-frame routers (`Agent.protocol_router()`, `Proxy.protocol_router()`) |
| `connector` | the client protocol connector (v2 first, v1 fallback) |
| `sessions` | the session helpers, one module per idea (every name importable from `sessions`): the client's handles (`client_sessions`: `build_session`, `V2Session`, `V1Session`), per-session state tracking (`session_state`), the agent's turns (`agent_sessions`: `AgentSession`, `PromptTurn`), setup requests for clients and proxies (`session_setup`: `SessionSetup`), v2 upserts (`upserts`) |
| `mcp` | MCP-over-ACP (unstable): `with_mcp_servers=` on session setup, a proxy's `with_mcp_server`, an agent's `open_mcp_session` (the `mcp` extra) |

Handlers are registered by method name or by schema type name and get `(params, cx)`; a
name the implementation's version does not define for its side is refused at once (with the
nearest known name), unless it starts with `_` (an extension method).
`cx` is a [`Context`][acp_fast.roles.Context] (the request's cancellation state plus a way to send requests
and notifications back). A handler returns the result (or a coroutine giving it); raising
[`JsonRpcError`][acp_fast.errors.JsonRpcError] answers with that error.

Example (an agent served on stdio, and a client driving it):

```python
from acp_fast import Agent, Client, run_agent_stdio, spawn

agent = Agent.v2()

@agent.on_request("session/new")
def new_session(params, cx):
    return {"sessionId": "s1"}

run_agent_stdio(agent)                       # in the agent process

async with Client.v2().connect(spawn("python agent.py")) as conn:   # in the client
    await conn.initialize()
    opened = await conn.build_session(cwd="/tmp")
```

Nothing here converts traffic between protocol versions: a v1 implementation only ever sees
v1 traffic and a v2 one v2 traffic; the routers only normalise the `initialize` request.
"""

from __future__ import annotations

from .api import Agent, Client, Proxy, run_agent_stdio
from .builders import AgentBuilder, Builder, ClientBuilder, EngineChoice, ProxyBuilder, Transport
from .client import ClientConnection, InitializeHooks
from .connection import NOT_HANDLED, AcpConnection, AgentConnection, DynamicHandler
from .connector import ClientConnector
from ._hot import Context, ProxyContext, SessionUpdate
from .context import V1, V2, Deferred, Peer, Request, SentRequest, SuccessorPeer, Version
from .mcp import McpServer, acp_mcp_servers, open_mcp_session
from .proxy import ProxyConnection, ProxySessionRoute
from .routers import AgentRouter, ProxyRouter
from .sessions import (
    AgentSession,
    OpenedSession,
    PromptTurn,
    SessionSetup,
    SessionState,
    StopReason,
    V1Session,
    V2Session,
    apply_meta_update,
    apply_upsert,
)
from .table import Handler, HandlerTable, UpdateHandler

__all__ = [
    "V1",
    "V2",
    "AcpConnection",
    "Agent",
    "AgentBuilder",
    "AgentConnection",
    "AgentRouter",
    "AgentSession",
    "Builder",
    "Client",
    "ClientBuilder",
    "ClientConnection",
    "ClientConnector",
    "Context",
    "Deferred",
    "DynamicHandler",
    "EngineChoice",
    "Handler",
    "HandlerTable",
    "InitializeHooks",
    "McpServer",
    "NOT_HANDLED",
    "OpenedSession",
    "Peer",
    "PromptTurn",
    "Proxy",
    "ProxyBuilder",
    "ProxyConnection",
    "ProxyContext",
    "ProxyRouter",
    "ProxySessionRoute",
    "Request",
    "SentRequest",
    "SessionSetup",
    "SessionState",
    "SessionUpdate",
    "StopReason",
    "SuccessorPeer",
    "Transport",
    "UpdateHandler",
    "V1Session",
    "V2Session",
    "Version",
    "acp_mcp_servers",
    "apply_meta_update",
    "apply_upsert",
    "open_mcp_session",
    "run_agent_stdio",
]
