"""The MCP-over-ACP compatibility polyfill: a proxy for agents without the `acp` MCP transport.

Placed as the **last** proxy of a conductor chain (in front of the agent):

```bash
acp-fast conductor agent "python -m acp_fast.conductor.mcp_polyfill" "my-agent"
```

or in process, `Conductor([mcp_polyfill.router(), agent])`.

* The version comes from `_proxy/initialize` / `proxy/initialize` (v1 and v2 each get
  their own proxy, `router`); the polyfill forwards `initialize` and reads the
  agent's MCP capability of that version (v2 `capabilities.session.mcp.acp`, v1
  `agentCapabilities.mcpCapabilities.acp`).
* An agent that has it gets everything unchanged: the polyfill is then a pass-through.
* Otherwise the polyfill advertises the capability upstream itself and, in `session/new`,
  `session/resume` and `session/fork` (and v1 `session/load`), replaces each native
  `{"type": "acp", "name", "serverId"}` declaration, in place, by an HTTP declaration
  `{"type": "http", "name", "url", "headers": []}` on a local endpoint
  (`http://127.0.0.1:<port>/mcp/<serverId>`). Other declarations and every other request
  field stay as they were. Each JSON-RPC request the agent POSTs there is sent upstream as an
  `mcp/message` request for that server id, and its outcome carrier comes back as the HTTP
  JSON-RPC response (the stateless MCP revision 2026-07-28 over HTTP, JSON responses only;
  posted notifications are acknowledged `202` and dropped, as the binding carries none).

The endpoint is a minimal HTTP/1.1 relay on `127.0.0.1` (POST only); it does not speak MCP
itself: the MCP server behind it is the upstream provider's.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import quote, unquote

from ..errors import JsonRpcError
from ..jsontypes import Json, JsonObject, RequestId
from ..protocol.facts import INITIALIZE, MCP_MESSAGE, PROXY_INITIALIZE_METHODS
from ..roles import V1, V2, Peer, Proxy, ProxyBuilder, ProxyContext
from ..roles.routers import ProxyRouter
from ..protocol.profile import V2 as V2_PROFILE
from ..protocol.profile import profile_of

__all__ = ["McpHttpBridge", "build", "main", "router"]

logger = logging.getLogger("acp_fast.conductor.mcp_polyfill")

_REASONS = {200: "OK", 202: "Accepted", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            411: "Length Required", 413: "Payload Too Large"}
MAX_BODY = 64 * 1024 * 1024


def agent_has_acp_transport(result: Json, version: int) -> bool:
    """Whether an `initialize` result advertises the `acp` MCP transport."""
    profile = profile_of(version)
    mcp: Json = result
    for key in profile.mcp_capability:
        mcp = mcp.get(key) if type(mcp) is dict else None
    return type(mcp) is dict and profile.advertises_acp_transport(mcp.get("acp"))


def with_acp_transport(result: Json, version: int) -> Json:
    """`result` advertising the `acp` MCP transport (the polyfill provides it)."""
    if type(result) is not dict:
        return result
    profile = profile_of(version)
    return _with_key(result, profile.mcp_capability, profile.mcp_acp_value)


def _with_key(obj: JsonObject, path: tuple[str, ...], value: Json) -> JsonObject:
    """A copy of `obj` with `acp` = `value` in the object at `path` (made where missing)."""
    out = dict(obj)
    if not path:
        out["acp"] = value
        return out
    inner = out.get(path[0])
    out[path[0]] = _with_key(inner if type(inner) is dict else {}, path[1:], value)
    return out


class McpHttpBridge:
    """The local HTTP endpoint of one proxy connection: POSTs become `mcp/message` requests
    to the predecessor (the component that declared the server)."""

    def __init__(self, connection: Peer) -> None:
        self.connection = connection
        self._server: asyncio.AbstractServer | None = None
        self._port = 0
        self._ids = itertools.count(1)
        self._server_ids: set[str] = set()

    async def start(self) -> None:
        """Listen on a free port of 127.0.0.1 (once)."""
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
            self._port = self._server.sockets[0].getsockname()[1]

    def url(self, server_id: str) -> str:
        """The HTTP URL that serves `server_id` (from now on; call after `start`)."""
        self._server_ids.add(server_id)
        return f"http://127.0.0.1:{self._port}/mcp/{quote(server_id, safe='')}"

    def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                status, body = await self._handle(*request)
                writer.write(_response(status, body))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    async def _handle(self, method: str, target: str, body: bytes) -> tuple[int, Json]:
        path = target.split("?", 1)[0]
        if not path.startswith("/mcp/") or unquote(path[5:]) not in self._server_ids:
            return 404, None
        server_id = unquote(path[5:])
        if method != "POST":
            return 405, None
        try:
            msg = json.loads(body)
        except ValueError:
            return 400, _rpc_error(None, -32700, "Parse error")
        if type(msg) is not dict or type(msg.get("method")) is not str:
            return 400, _rpc_error(None, -32600, "a single JSON-RPC request or notification is expected")
        if "id" not in msg:
            return 202, None  # the binding carries no client-to-server notifications
        envelope: JsonObject = {"serverId": server_id, "requestId": f"polyfill-{next(self._ids)}",
                                    "method": msg["method"]}
        if msg.get("params") is not None:
            envelope["params"] = msg["params"]
        try:
            carrier = await self.connection.send_request(MCP_MESSAGE, envelope, passthrough=True)
        except JsonRpcError as exc:
            return 200, _rpc_error(msg["id"], exc.code, exc.message, exc.data)
        if type(carrier) is dict and "result" in carrier:
            return 200, {"jsonrpc": "2.0", "id": msg["id"], "result": carrier["result"]}
        if type(carrier) is dict and type(carrier.get("error")) is dict:
            return 200, {"jsonrpc": "2.0", "id": msg["id"], "error": carrier["error"]}
        return 200, _rpc_error(msg["id"], -33002, "invalid mcp/message response carrier")


def _rpc_error(rid: RequestId | None, code: int, message: str, data: Json = None) -> JsonObject:
    error: JsonObject = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    line = await reader.readline()
    if not line.strip():
        return None
    method, target, _version = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readline()).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readline()
                break
            chunks.append(await reader.readexactly(size))
            await reader.readline()
        body = b"".join(chunks)
    else:
        length = int(headers.get("content-length", "0"))
        if length > MAX_BODY:
            raise ValueError("request body too large")
        body = await reader.readexactly(length)
    return method, target, body


def _response(status: int, body: Json) -> bytes:
    payload = b"" if body is None else json.dumps(body).encode()
    head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}", f"Content-Length: {len(payload)}"]
    if body is not None:
        head.append("Content-Type: application/json")
    if status == 405:
        head.append("Allow: POST")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


class _State:
    """What the polyfill knows of one connection."""

    def __init__(self, connection: Peer) -> None:
        self.native: bool | None = None  # None until the agent answered initialize
        self.bridge = McpHttpBridge(connection)
        connection.closed.add_done_callback(lambda _f: self.bridge.close())

    async def adapt(self, params: Json) -> Json:
        servers = params.get("mcpServers") if type(params) is dict else None
        if type(servers) is not list or not any(_is_acp(s) for s in servers):
            return params
        await self.bridge.start()
        out = dict(params)
        out["mcpServers"] = [
            {"type": "http", "name": s.get("name", ""), "url": self.bridge.url(s["serverId"]), "headers": []}
            if _is_acp(s) else s
            for s in servers
        ]
        return out


def _is_acp(server: Json) -> bool:
    return type(server) is dict and server.get("type") == "acp" and type(server.get("serverId")) is str


_STATES: weakref.WeakKeyDictionary[Peer, _State] = weakref.WeakKeyDictionary()


def _state(connection: Peer) -> _State:
    state = _STATES.get(connection)
    if state is None:
        state = _STATES[connection] = _State(connection)
    return state


_PB = TypeVar("_PB", ProxyBuilder[V1], ProxyBuilder[V2])


def build(version: int) -> ProxyBuilder[int]:
    """The polyfill proxy of ACP `version` (1 or 2)."""
    return _polyfill(Proxy.v2()) if profile_of(version) is V2_PROFILE else _polyfill(Proxy.builder())


def _polyfill(proxy: _PB) -> _PB:
    version = proxy.version
    proxy.with_info("acp-fast-mcp-polyfill", "1")

    async def initialize(params: JsonObject, cx: ProxyContext) -> Json:
        result = await cx.send_to_successor(INITIALIZE, dict(params))
        state = _state(cx.proxy)
        state.native = agent_has_acp_transport(result, version)
        return result if state.native else with_acp_transport(result, version)

    for name in sorted(PROXY_INITIALIZE_METHODS):
        proxy.on_request(name, initialize)

    def setup(method: str) -> Callable[[Json, ProxyContext], Awaitable[Json]]:
        async def forward(params: Json, cx: ProxyContext) -> Json:
            state = _state(cx.proxy)
            if not state.native:
                params = await state.adapt(params)
            return await cx.send_to_successor(method, params, passthrough=True)

        return forward

    for method in sorted(profile_of(version).setup_methods):
        proxy.on_request(method, setup(method))

    def notification(params: Json, cx: ProxyContext) -> None:
        if _state(cx.proxy).native:  # else no agent-side request can own it
            cx.notify_successor(MCP_MESSAGE, params, passthrough=True)

    proxy.on_notification(MCP_MESSAGE, notification)
    return proxy


def router() -> ProxyRouter:
    """The polyfill for both versions (the version comes from `_proxy/initialize`)."""
    return Proxy.protocol_router().with_v1(_polyfill(Proxy.builder())).with_v2(_polyfill(Proxy.v2()))


def main() -> None:
    """Serve the polyfill on stdio (a conductor component)."""
    from ..roles import run_agent_stdio

    with contextlib.suppress(KeyboardInterrupt):
        run_agent_stdio(router())


if __name__ == "__main__":
    main()
