"""The role namespaces `Agent`, `Client`, `Proxy` and [`run_agent_stdio`][acp_fast.roles.api.run_agent_stdio].

| call | what it gives |
|---|---|
| `Agent.builder()` / `Client.builder()` | v1 implementations (no lifecycle checks) |
| `Agent.v2()` / `Client.v2()` | v2-only; guarded responder / initiator |
| `Proxy.builder()` / `Proxy.v2()` | proxies initialized by `_proxy/initialize` |
| `Agent.protocol_router()` | `.with_v1(a).with_v2(b)`: picks per request |
| `Proxy.protocol_router()` | exact-version proxy router |
| `Client.protocol_connector()` | `.with_v1(f).with_v2(f)`: v2 first, v1 fallback |
"""

from __future__ import annotations

from .. import transport as _transport
from ._hot import Context
from .builders import AgentBuilder, Builder, ClientBuilder, EngineChoice, ProxyBuilder
from .connection import AcpConnection
from .context import V1, V2
from .connector import ClientConnector
from .routers import AgentRouter, ProxyRouter

__all__ = ["Agent", "Client", "Proxy", "run_agent_stdio"]


class Agent:
    """Agent role: `Agent.builder()` (v1), `Agent.v2()`, `Agent.protocol_router()`."""

    @staticmethod
    def builder() -> AgentBuilder[V1]:
        """A v1 agent: selects v1 for any valid `initialize` (normalising v2 metadata)."""
        return AgentBuilder(1)

    @staticmethod
    def v2() -> AgentBuilder[V2]:
        """A v2-only agent: guarded responder; rejects a v1 `initialize` with -32022."""
        return AgentBuilder(2)

    @staticmethod
    def protocol_router() -> AgentRouter:
        """Serve v1 and v2 agents on one endpoint (see [`AgentRouter`][acp_fast.roles.api.AgentRouter])."""
        return AgentRouter()


class Client:
    """Client role: `Client.builder()` (v1), `Client.v2()`, `Client.protocol_connector()`."""

    @staticmethod
    def builder() -> ClientBuilder[V1]:
        """A v1 client: sends `protocolVersion: 1` and requires a v1 answer."""
        return ClientBuilder(1)

    @staticmethod
    def v2() -> ClientBuilder[V2]:
        """A v2-only client: guarded initiator; always sends 2 and fails on any other answer."""
        return ClientBuilder(2)

    @staticmethod
    def protocol_connector() -> ClientConnector:
        """v2 first with a v1 fallback (see [`ClientConnector`][acp_fast.roles.api.ClientConnector])."""
        return ClientConnector()


class Proxy:
    """Proxy role: `Proxy.builder()` (v1), `Proxy.v2()`, `Proxy.protocol_router()`."""

    @staticmethod
    def builder() -> ProxyBuilder[V1]:
        """A v1 proxy: accepts only a v1 `_proxy/initialize` (exact version match)."""
        return ProxyBuilder(1)

    @staticmethod
    def v2() -> ProxyBuilder[V2]:
        """A v2 proxy: accepts only a v2 `_proxy/initialize` (exact version match)."""
        return ProxyBuilder(2)

    @staticmethod
    def protocol_router() -> ProxyRouter:
        """Serve v1 and v2 proxies on one endpoint (see [`ProxyRouter`][acp_fast.roles.api.ProxyRouter])."""
        return ProxyRouter()


def run_agent_stdio(agent: Builder[int, AcpConnection[int], Context] | AgentRouter | ProxyRouter, *, engine: EngineChoice = None,
                    loop: str | None = None) -> None:
    """Serve `agent` (a builder or a router) on this process's stdio until EOF (blocking).

    Args:
        agent: what to serve.
        engine: the engine twin (see `EngineChoice`).
        loop: `"uvloop"`, `"asyncio"` or `"auto"` (default: `ACP_FAST_LOOP`, else
            uvloop when it is installed; see [`acp_fast.transport.run`][acp_fast.transport.run]).

    Example:

    ```python
    acp_fast.run_agent_stdio(Agent.v2().on_request("session/new", new_session))
    ```
    """
    _transport.run(agent.serve(_transport.connect_stdio(), engine=engine), loop=loop)

