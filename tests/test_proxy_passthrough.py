"""A proxy's pass-through path forwards what no handler claims without decoding its params.

Every test runs on both engine twins (the ``engine`` fixture) against a raw JSON-line
conductor that reads the proxy's output as bytes: forwarded ``params`` (and forwarded
``result``s) must come out byte for byte as they went in (odd spacing, unicode escapes,
number spellings a decode + re-encode would change, ``_meta``), while the successor
envelope around them is added or removed and its own ``_meta`` dropped (hop-local).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from roles_support import run, serve_in_memory, v1_init, v2_init

from acp_fast.jsonrpc import Connection
from acp_fast.roles import Proxy
from acp_fast.transport import Stream, memory_pair

#: params a decode + re-encode would not reproduce: spacing, escapes, number spellings, _meta
ODD = (b'{ "sessionId" : "s1",\t"update": {"sessionUpdate":"agent_message_chunk", "messageId":"m\\u00e9",'
       b' "content":{"type":"text","text":"caf\\u00e9 \\ud83d\\ude00 \\"q\\" \xc3\xa9"}, "n": 1.0E+2, "z": -0.0 },'
       b' "_meta" : { "trace" : "inner" } }')
ODD_RESULT = b'{ "ok" : true , "x" : 1e2, "s":"\\u00e9", "_meta":{"k":[1, 2]} }'


class Wire:
    """The conductor's end: raw lines out, raw lines in (bytes, without the newline)."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self._buf = b""
        self.lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        stream.attach(self._data, lambda exc: self.lines.put_nowait(None), lambda writable: None)

    def _data(self, data: bytes) -> None:
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            self.lines.put_nowait(line)

    def send(self, line: bytes) -> None:
        self.stream.write(line + b"\n")

    def send_obj(self, obj: Any) -> None:
        self.send(json.dumps(obj).encode())

    async def recv(self) -> bytes:
        line = await self.lines.get()
        if line is None:
            raise EOFError("the proxy closed the stream")
        return line

    async def recv_obj(self) -> Any:
        return json.loads(await self.recv())

    async def nothing_then(self, marker: bytes) -> None:
        """Send a marker notification from the successor; the next line out must be it."""
        self.send(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"_x/marker","params":'
                  + marker + b"}}")
        assert await self.recv() == b'{"jsonrpc":"2.0","method":"_x/marker","params":' + marker + b"}"


async def initialized(served: Any, engine: ModuleType, *, spelling: str = "_proxy", version: int = 2) -> Wire:
    wire = Wire(serve_in_memory(served, engine))
    init = v2_init() if version == 2 else v1_init()
    wire.send_obj({"jsonrpc": "2.0", "id": 0, "method": f"{spelling}/initialize", "params": init})
    wrapped = await wire.recv_obj()
    assert wrapped["method"] == f"{spelling}/successor" and wrapped["params"]["method"] == "initialize"
    answer = ({"protocolVersion": 2, "info": {"name": "agent", "version": "1"}, "capabilities": {}} if version == 2
              else {"protocolVersion": 1, "agentInfo": {"name": "agent", "version": "1"}, "agentCapabilities": {}})
    wire.send_obj({"jsonrpc": "2.0", "id": wrapped["id"], "result": answer})
    reply = await wire.recv_obj()
    assert reply["id"] == 0 and "result" in reply, reply
    return wire


PROXIES = {
    "v2": lambda: Proxy.v2(),
    "v1": lambda: Proxy.builder(),
    "router": lambda: Proxy.protocol_router().with_v1(Proxy.builder()).with_v2(Proxy.v2()),
}


@pytest.fixture(params=sorted(PROXIES))
def proxy_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _version(kind: str) -> int:
    return 1 if kind == "v1" else 2


# ---------------------------------------------------------------------------------------
# notifications, both directions
# ---------------------------------------------------------------------------------------


def test_successor_notification_params_forwarded_byte_for_byte(engine: ModuleType, proxy_kind: str) -> None:
    async def body() -> None:
        wire = await initialized(PROXIES[proxy_kind](), engine, version=_version(proxy_kind))
        # odd envelope: spacing, members in another order, a hop-local envelope _meta (dropped)
        wire.send(b'{"method":"_proxy/successor","jsonrpc":"2.0","params":{ "_meta" : {"hop": 1},'
                  b' "params" :' + ODD + b' , "method" : "session/update" }}')
        assert await wire.recv() == b'{"jsonrpc":"2.0","method":"session/update","params":' + ODD + b"}"
        # an array, an empty object, absent and null params
        wire.send(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"_x/a","params":[ 1,"\\u0041" ]}}')
        assert await wire.recv() == b'{"jsonrpc":"2.0","method":"_x/a","params":[ 1,"\\u0041" ]}'
        wire.send(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"_x/b","params":{ }}}')
        assert await wire.recv() == b'{"jsonrpc":"2.0","method":"_x/b","params":{ }}'
        wire.send(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"_x/c"}}')
        assert await wire.recv() == b'{"jsonrpc":"2.0","method":"_x/c"}'
        wire.send(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"_x/d","params":null}}')
        assert await wire.recv() == b'{"jsonrpc":"2.0","method":"_x/d"}'

    run(body)


def test_predecessor_notification_params_forwarded_byte_for_byte(engine: ModuleType, proxy_kind: str) -> None:
    async def body() -> None:
        wire = await initialized(PROXIES[proxy_kind](), engine, version=_version(proxy_kind))
        wire.send(b'{ "params" : ' + ODD + b', "method":"session/update", "jsonrpc":"2.0" }')
        assert await wire.recv() == (b'{"jsonrpc":"2.0","method":"_proxy/successor","params":'
                                     b'{"method":"session/update","params":' + ODD + b"}}")
        wire.send(b'{"jsonrpc":"2.0","method":"_x/\\u00e9"}')  # no params; an escaped method name
        assert await wire.recv() == b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"_x/\xc3\xa9"}}'

    run(body)


def test_spec_spelling_is_forwarded_raw_in_that_spelling(engine: ModuleType) -> None:
    async def body() -> None:
        wire = await initialized(Proxy.v2(), engine, spelling="proxy")
        wire.send(b'{"jsonrpc":"2.0","method":"session/update","params":' + ODD + b"}")
        assert await wire.recv() == (b'{"jsonrpc":"2.0","method":"proxy/successor","params":'
                                     b'{"method":"session/update","params":' + ODD + b"}}")
        for envelope in (b"proxy/successor", b"_proxy/successor"):  # both are read
            wire.send(b'{"jsonrpc":"2.0","method":"' + envelope + b'","params":{"method":"session/update","params":'
                      + ODD + b"}}")
            assert await wire.recv() == b'{"jsonrpc":"2.0","method":"session/update","params":' + ODD + b"}"

    run(body)


# ---------------------------------------------------------------------------------------
# requests, both directions: params and results raw, errors as before, cancellation per hop
# ---------------------------------------------------------------------------------------


def test_predecessor_request_and_its_result_forwarded_byte_for_byte(engine: ModuleType, proxy_kind: str) -> None:
    async def body() -> None:
        wire = await initialized(PROXIES[proxy_kind](), engine, version=_version(proxy_kind))
        wire.send(b'{"jsonrpc":"2.0","id":"up-1","method":"_x/echo","params":' + ODD + b"}")
        out = await wire.recv()
        down = json.loads(out)["id"]
        assert out == (b'{"jsonrpc":"2.0","id":' + json.dumps(down).encode() + b',"method":"_proxy/successor",'
                       b'"params":{"method":"_x/echo","params":' + ODD + b"}}")
        wire.send(b'{"jsonrpc":"2.0","id":' + json.dumps(down).encode() + b',"result":' + ODD_RESULT + b"}")
        assert await wire.recv() == b'{"jsonrpc":"2.0","id":"up-1","result":' + ODD_RESULT + b"}"
        # an error answer passes back as today: code, message, data
        wire.send(b'{"jsonrpc":"2.0","id":7,"method":"_x/fail"}')
        down = (await wire.recv_obj())["id"]
        wire.send_obj({"jsonrpc": "2.0", "id": down, "error": {"code": -32601, "message": "Method not found",
                                                              "data": {"method": "_x/fail"}}})
        assert await wire.recv_obj() == {"jsonrpc": "2.0", "id": 7, "error": {
            "code": -32601, "message": "Method not found", "data": {"method": "_x/fail"}}}
        # a null result
        wire.send(b'{"jsonrpc":"2.0","id":8,"method":"_x/null"}')
        down = (await wire.recv_obj())["id"]
        wire.send_obj({"jsonrpc": "2.0", "id": down, "result": None})
        assert await wire.recv() == b'{"jsonrpc":"2.0","id":8,"result":null}'

    run(body)


def test_successor_request_and_its_result_forwarded_byte_for_byte(engine: ModuleType, proxy_kind: str) -> None:
    async def body() -> None:
        wire = await initialized(PROXIES[proxy_kind](), engine, version=_version(proxy_kind))
        wire.send(b'{"jsonrpc":"2.0","id":41,"method":"_proxy/successor","params":{"_meta":{"hop":true},'
                  b'"method":"session/request_permission","params":' + ODD + b"}}")
        out = await wire.recv()
        down = json.loads(out)["id"]
        assert out == (b'{"jsonrpc":"2.0","id":' + json.dumps(down).encode()
                       + b',"method":"session/request_permission","params":' + ODD + b"}")
        wire.send(b'{"jsonrpc":"2.0","id":' + json.dumps(down).encode() + b',"result":' + ODD_RESULT + b"}")
        assert await wire.recv() == b'{"jsonrpc":"2.0","id":41,"result":' + ODD_RESULT + b"}"
        wire.send(b'{"jsonrpc":"2.0","id":42,"method":"_proxy/successor","params":{"method":"_x/fail"}}')
        down = (await wire.recv_obj())["id"]
        wire.send_obj({"jsonrpc": "2.0", "id": down, "error": {"code": -32000, "message": "nope", "data": [1]}})
        assert await wire.recv_obj() == {"jsonrpc": "2.0", "id": 42, "error": {
            "code": -32000, "message": "nope", "data": [1]}}

    run(body)


def test_cancellation_stays_hop_local_on_the_raw_path(engine: ModuleType) -> None:
    async def body() -> None:
        wire = await initialized(Proxy.v2(), engine)
        # a forwarded request cancelled upstream is cancelled downstream with the proxy's own id
        wire.send(b'{"jsonrpc":"2.0","id":5,"method":"session/prompt","params":{"sessionId":"s","prompt":[]}}')
        down = (await wire.recv_obj())["id"]
        wire.send(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":5}}')
        assert await wire.recv_obj() == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": down}}
        wire.send_obj({"jsonrpc": "2.0", "id": down, "error": {"code": -32800, "message": "Request cancelled"}})
        assert (await wire.recv_obj())["error"]["code"] == -32800
        # a successor's request cancelled by the successor: re-issued upstream for the proxy's id
        wire.send(b'{"jsonrpc":"2.0","id":9,"method":"_proxy/successor","params":{"method":"_x/slow"}}')
        up = (await wire.recv_obj())["id"]
        wire.send(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":9}}')
        assert await wire.recv_obj() == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": up}}
        # a wrapped $/cancel_request is never forwarded
        wire.send(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"$/cancel_request",'
                  b'"params":{"requestId":1}}}')
        await wire.nothing_then(b'{"after":"cancel"}')

    run(body)


# ---------------------------------------------------------------------------------------
# envelopes the raw path does not take: answered or unwrapped exactly as before
# ---------------------------------------------------------------------------------------


def test_malformed_envelopes_are_answered_and_dropped_as_before(engine: ModuleType) -> None:
    async def body() -> None:
        wire = await initialized(Proxy.v2(), engine)
        bad = [b'{"method":"_x/a","params":5}', b'{"method":"_x/a","params":"s"}', b'{"params":{}}',
               b'{"method":7}', b"{}", b"[1]", b'{ }']
        for i, envelope in enumerate(bad):
            wire.send(b'{"jsonrpc":"2.0","id":' + str(100 + i).encode()
                      + b',"method":"_proxy/successor","params":' + envelope + b"}")
            reply = await wire.recv_obj()
            assert reply["id"] == 100 + i and reply["error"]["code"] == -32602, (envelope, reply)
            assert reply["error"]["data"] == "invalid `_proxy/successor` envelope"
        for envelope in bad:  # notifications: dropped
            wire.send(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":' + envelope + b"}")
        wire.send(b'{"jsonrpc":"2.0","method":"_proxy/successor"}')
        await wire.nothing_then(b'{"after":"malformed"}')
        # an initialize from the successor is refused
        wire.send(b'{"jsonrpc":"2.0","id":200,"method":"_proxy/successor","params":{"method":"initialize",'
                  b'"params":{"protocolVersion":2}}}')
        reply = await wire.recv_obj()
        assert reply["id"] == 200 and reply["error"]["code"] == -32600

    run(body)


def test_odd_but_valid_envelopes_are_unwrapped_as_before(engine: ModuleType) -> None:
    """Members the re-read cannot take (``id``, ``jsonrpc``, ``result``, a repeated
    ``method``) send the envelope through the decoded path: forwarded as the same value."""
    async def body() -> None:
        wire = await initialized(Proxy.v2(), engine)
        cases = [
            (b'{"method":"_x/a","params":{"k":1},"id":3}', "_x/a"),
            (b'{"jsonrpc":"2.0","method":"_x/b","params":{"k":1}}', "_x/b"),
            (b'{"method":"_x/c","params":{"k":1},"result":0}', "_x/c"),
            (b'{"method":"_x/first","method":"_x/d","params":{"k":1}}', "_x/d"),  # the last one wins
        ]
        for envelope, method in cases:
            wire.send(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":' + envelope + b"}")
            assert await wire.recv_obj() == {"jsonrpc": "2.0", "method": method, "params": {"k": 1}}

    run(body)


# ---------------------------------------------------------------------------------------
# handlers still see decoded params; the connection decodes lazily
# ---------------------------------------------------------------------------------------


def test_handlers_get_decoded_params(engine: ModuleType) -> None:
    async def body() -> None:
        seen: list[Any] = []
        proxy = Proxy.v2()
        proxy.on_successor_notification("session/update", lambda p, cx: seen.append(("s-notif", p)))
        proxy.on_successor_request("_x/ask", lambda p, cx: seen.append(("s-req", p)) or {"n": len(seen)})
        proxy.on_notification("_x/tell", lambda p, cx: seen.append(("p-notif", p)))
        proxy.on_request("_x/ask", lambda p, cx: seen.append(("p-req", p)) or {"n": len(seen)})
        wire = await initialized(proxy, engine)
        odd = json.loads(ODD)
        wire.send(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"session/update","params":'
                  + ODD + b"}}")
        wire.send(b'{"jsonrpc":"2.0","id":1,"method":"_proxy/successor","params":{"method":"_x/ask","params":'
                  + ODD + b"}}")
        assert await wire.recv_obj() == {"jsonrpc": "2.0", "id": 1, "result": {"n": 2}}
        wire.send(b'{"jsonrpc":"2.0","method":"_x/tell","params":' + ODD + b"}")
        wire.send(b'{"jsonrpc":"2.0","id":2,"method":"_x/ask","params":' + ODD + b"}")
        assert await wire.recv_obj() == {"jsonrpc": "2.0", "id": 2, "result": {"n": 4}}
        assert seen == [("s-notif", odd), ("s-req", odd), ("p-notif", odd), ("p-req", odd)]

    run(body)


def test_proxy_connections_decode_lazily_and_an_eager_one_forwards_the_same(engine: ModuleType) -> None:
    async def body() -> None:
        lazy: list[bool] = []
        for routed in (False, True):
            builder = Proxy.v2().on_request("_x/lazy", lambda p, cx: lazy.append(cx.connection.raw._decoder.lazy) or {})
            wire = await initialized(Proxy.protocol_router().with_v2(builder) if routed else builder, engine)
            wire.send(b'{"jsonrpc":"2.0","id":1,"method":"_x/lazy"}')
            assert (await wire.recv_obj())["id"] == 1
        assert lazy == [True, True]
        # a proxy bound to an eager connection by hand forwards the same bytes
        a, b = memory_pair()
        Proxy.v2().bind(Connection(a, engine=engine, lazy=False))
        wire = Wire(b)
        wire.send_obj({"jsonrpc": "2.0", "id": 0, "method": "_proxy/initialize", "params": v2_init()})
        wrapped = await wire.recv_obj()
        wire.send_obj({"jsonrpc": "2.0", "id": wrapped["id"], "result": {
            "protocolVersion": 2, "info": {"name": "agent", "version": "1"}, "capabilities": {}}})
        await wire.recv_obj()
        wire.send(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"session/update","params":'
                  + ODD + b"}}")
        assert await wire.recv() == b'{"jsonrpc":"2.0","method":"session/update","params":' + ODD + b"}"

    run(body)


def test_large_params_forwarded_byte_for_byte(engine: ModuleType) -> None:
    """Params of any size take the same raw path (long ones are re-read from one copy)."""
    async def body() -> None:
        wire = await initialized(Proxy.v2(), engine)
        big = ODD[:-1] + b', "blob" : "' + b"\\u00e9x " * 4000 + b'" }'
        wire.send(b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"_meta":{},"method":"session/update",'
                  b'"params":' + big + b"}}")
        assert await wire.recv() == b'{"jsonrpc":"2.0","method":"session/update","params":' + big + b"}"
        wire.send(b'{"jsonrpc":"2.0","id":1,"method":"_proxy/successor","params":{"method":"_x/big","params":'
                  + big + b"}}")
        out = await wire.recv()
        down = json.loads(out)["id"]
        assert out == b'{"jsonrpc":"2.0","id":' + json.dumps(down).encode() + b',"method":"_x/big","params":' + big + b"}"
        wire.send(b'{"jsonrpc":"2.0","method":"session/update","params":' + big + b"}")
        assert await wire.recv() == (b'{"jsonrpc":"2.0","method":"_proxy/successor","params":'
                                     b'{"method":"session/update","params":' + big + b"}}")

    run(body)
