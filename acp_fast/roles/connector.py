"""The client protocol connector: v2 first, falling back to v1 (protocol.md §6.6).

`Client.protocol_connector().with_v1(f1).with_v2(f2).run(transport_factory)`. The
fallback is a state of the connection, not a patch: each client connection the connector
starts gets an `_Handshake` (the connection's
[`InitializeHooks`][acp_fast.roles.client.InitializeHooks]) that enforces "initialize first",
reports a v1 answer to a v2 `initialize`, and lets the v1 implementation adopt that
answer instead of sending a second `initialize`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn

from ..errors import INVALID_REQUEST, JsonRpcError
from ..jsontypes import Json, JsonObject
from ..protocol import negotiation as nego
from ..protocol.facts import INITIALIZE
from .builders import ClientBuilder
from .client import ClientConnection
from .context import SentRequest
from .streams import EngineChoice, Transport, engine_twin, open_connection, open_stream

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["ClientConnector", "ClientFactory", "TransportFactory"]

ClientFactory = Callable[[], ClientBuilder[int]]
TransportFactory = Callable[[], Transport]


async def _never() -> NoReturn:
    never: asyncio.Future[NoReturn] = asyncio.get_running_loop().create_future()
    await never


def _main(acp: ClientConnection[int]) -> Awaitable[object]:
    """`main(acp)` of the client implementation running on `acp` (checked by `_build`)."""
    main = acp.table.main
    assert main is not None
    return main(acp)


class _Handshake:
    """One client connection's part in the connector's `initialize` (InitializeHooks)."""

    def __init__(self, version: int, reuse: tuple[JsonObject | None, JsonObject] | None = None) -> None:
        self.first_rule = f"ACP protocol version {version} client implementation must send initialize first"
        self.mismatch: asyncio.Future[tuple[JsonObject, Json]] = asyncio.get_running_loop().create_future()
        self.reused: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._reuse = reuse

    def intercept(self, connection: ClientConnection[int], params: JsonObject) -> SentRequest[Json] | None:
        if self._reuse is None:
            return None
        probe, response = self._reuse
        same = probe is not None and (
            nego.canonicalize_v1_initialize(params) == nego.canonicalize_v1_initialize(probe))
        self.reused.set_result(same)
        if same:
            return connection.adopt_initialize(response)
        return SentRequest(None, _never(), INITIALIZE)  # cancelled below

    def on_version_mismatch(self, params: JsonObject, result: Json) -> None:
        if not self.mismatch.done():
            self.mismatch.set_result((params, result))


class ClientConnector:
    """`Client.protocol_connector().with_v1(f1).with_v2(f2)` (protocol.md §6.6).

    Both implementations and the agent transport are factories, because falling back may
    need a fresh connection. Each factory returns a client builder with a `with_main`
    function whose first message is `initialize`.

    The highest configured implementation starts. If a v2 `initialize` is answered
    successfully with version 1 and a v1 implementation exists, the v1 implementation
    starts; if its `initialize` params equal the lossless v1 normalisation of the v2
    request the agent already saw, the agent connection is reused and the original answer
    is delivered without a second `initialize`; otherwise a new connection is opened
    (fresh factories) for a normal v1 start. A rejected v2 `initialize` is surfaced,
    never taken as permission to fall back.
    """

    def __init__(self) -> None:
        self._factories: dict[int, ClientFactory] = {}

    def with_v1(self, factory: ClientFactory) -> ClientConnector:
        """Use `factory` (returning a v1 client builder `with_main`) for v1; returns self."""
        self._factories[1] = factory
        return self

    def with_v2(self, factory: ClientFactory) -> ClientConnector:
        """Use `factory` (returning a v2 client builder `with_main`) for v2; returns self."""
        self._factories[2] = factory
        return self

    def _build(self, version: int) -> ClientBuilder[int]:
        builder = self._factories[version]()
        if builder.version != version or not isinstance(builder, ClientBuilder) or builder.table().main is None:
            raise TypeError(f"the v{version} factory must return a v{version} client builder with_main()")
        return builder

    async def run(self, transport_factory: TransportFactory, *, engine: EngineChoice = None) -> object:
        """Run the selected client implementation against an agent; returns its `main`'s
        result (the connection is closed afterwards).

        Raises:
            JsonRpcError: -32600 when no implementation is configured.
        """
        if not self._factories:
            raise JsonRpcError(INVALID_REQUEST, data=(
                "client protocol connector has no configured ACP protocol implementations"))
        eng = engine_twin(engine)
        top = max(self._factories)
        if top == 1 or 1 not in self._factories:
            return await self._plain(top, transport_factory, eng)
        builder2 = self._build(2)
        conn = open_connection(await open_stream(transport_factory()), eng)
        hs2 = _Handshake(2)
        acp2 = builder2.bind(conn, hooks=hs2)
        main2 = asyncio.ensure_future(_main(acp2))
        try:
            racing: set[asyncio.Future[Any]] = {main2, hs2.mismatch}
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
            if not hs2.mismatch.done():
                return await main2
            main2.cancel()
            await asyncio.gather(main2, return_exceptions=True)
            v2_params, response = hs2.mismatch.result()
            builder1 = self._build(1)
            hs1 = _Handshake(1, reuse=(nego.normalize_v2_to_v1_lossless(v2_params), dict(response)))
            acp1 = builder1.bind(conn, hooks=hs1)  # the v1 implementation takes over dispatch
            main1 = asyncio.ensure_future(_main(acp1))
            racing = {main1, hs1.reused}
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
            if not hs1.reused.done() or hs1.reused.result():
                return await main1
            main1.cancel()
            await asyncio.gather(main1, return_exceptions=True)
        finally:
            conn.close()
            await conn.wait_closed()
        return await self._plain(1, transport_factory, eng)

    async def _plain(self, version: int, transport_factory: TransportFactory,
                     engine: Engine) -> object:
        builder = self._build(version)
        conn = open_connection(await open_stream(transport_factory()), engine)
        acp = builder.bind(conn, hooks=_Handshake(version))
        try:
            return await _main(acp)
        finally:
            conn.close()
            await conn.wait_closed()
