"""First-frame routers: pick an implementation from the first call on a connection.

`Agent.protocol_router().with_v1(a).with_v2(b)` (protocol.md §6.4 [SEED]) and
`Proxy.protocol_router()` (§6.7) read a new connection until its first call-shaped
frame (a request, a notification, or a batch whose first such entry decides), then either
answer and close (a rejection: ids and batch framing kept) or start the selected
implementation on a [`Connection`][acp_fast.jsonrpc.Connection] that adopts the router's decoder
and is handed the deciding frame (rewritten when the initialize params are normalised) and
whatever followed it. Response-shaped frames before the decision are dropped, never
buffered, and reading pauses between the decision and the hand-over, so memory stays
bounded whatever the peer sends first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ..errors import INVALID_REQUEST, JsonRpcError
from ..jsonrpc import Connection, error_line
from ..protocol import negotiation as nego
from ..transport import Stream
from .builders import AgentBuilder, Builder, ProxyBuilder
from .context import V1, V2
from .connection import INITIALIZE, PROXY_INITIALIZE, PROXY_INITIALIZE_SPEC
from .streams import EngineChoice, Transport, engine_twin, open_connection, open_stream
from ..protocol.profile import profile_of

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["AgentRouter", "ProxyRouter"]

_Decision = tuple[str, Any]
_R = TypeVar("_R", bound="_Router")


def _reject_batch(engine: Engine, batch: Any, error: JsonRpcError) -> bytes | None:
    """Every request entry gets `error` with its own id; malformed calls their own error."""
    lines = []
    for entry in batch.entries:
        if entry.kind == engine.REQUEST:
            lines.append(error_line(engine.encode_error, entry.id, error))
        elif entry.kind == engine.MALFORMED:
            line = engine.error_reply(entry)
            if line is not None:
                lines.append(line)
    return engine.encode_batch(lines) if lines else None


class _FirstFrame:
    """The stream's consumer while the router decides; afterwards it feeds the connection.

    Until the decision it decodes with its own decoder and keeps nothing but the frames
    from the deciding one on; after the hand-over every callback goes straight to the
    connection (one extra call per read, none per message).
    """

    def __init__(self, stream: Stream, engine: Engine, decide: Callable[[Any], _Decision | None], *,
                 lazy: bool = False) -> None:
        self._stream = stream
        self._engine = engine
        self._decide = decide
        self.decoder = engine.Decoder(lazy=lazy)  # kept by the connection it hands over to
        self.frames: list[Any] = []
        self.decision: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._target: Connection | None = None
        self._eof: list[BaseException | None] = []
        self._writable = True
        stream.attach(self._on_data, self._on_eof, self._on_writable)
        accept = getattr(stream, "accept_frames", None)  # an in-process peer may decode for us
        if accept is not None:
            accept(self._on_frames, self.decoder)

    def _on_data(self, data: bytes) -> None:
        if self._target is not None:
            self._target.feed_data(data)
            return
        self._on_frames(self.decoder.feed(data))

    def _on_frames(self, frames: list[Any]) -> None:
        if self._target is not None:
            self._target.feed_frames(frames)
            return
        if self.decision.done():
            self.frames += frames
        else:
            self._scan(frames)

    def _on_eof(self, exc: BaseException | None) -> None:
        if self._target is not None:
            self._target.feed_eof(exc)
            return
        self._eof.append(exc)
        if not self.decision.done():
            self._scan(self.decoder.feed_eof())
        if not self.decision.done():  # EOF before any call: nothing to serve
            self.decision.set_result(None)
            self._stream.close()

    def _on_writable(self, writable: bool) -> None:
        if self._target is not None:
            self._target.set_writable(writable)
        else:
            self._writable = writable

    def _scan(self, frames: list[Any]) -> None:
        for index, frame in enumerate(frames):
            outcome = self._decide(frame)
            if outcome is None:
                continue  # response-shaped: dropped
            verdict, payload = outcome
            if verdict == "reject":
                if payload is not None:
                    self._stream.write(payload)
                self._stream.close()
                self.decision.set_result(None)
                return
            version, rewritten = payload
            first = frame if rewritten is None else self._engine.Decoder().feed(rewritten + b"\n")[0]
            self.frames = [first, *frames[index + 1:]]
            self._stream.pause_reading()  # bounded until the implementation takes over
            self.decision.set_result(version)
            return

    def hand_over(self, conn: Connection) -> None:
        """Give `conn` the frames kept so far, then every later callback."""
        self._target = conn
        frames, self.frames = self.frames, []
        if not self._writable:
            conn.set_writable(False)
        conn.feed_frames(frames)
        if self._eof:
            conn.feed_eof(self._eof[0])
        else:
            self._stream.resume_reading()


class _Router:
    """First-frame selection shared by the agent and proxy routers (protocol.md §2.17, §6.4)."""

    role = "agent"
    #: the builder type each configured implementation must be
    builder_type: ClassVar[type[Builder[Any, Any, Any]]] = AgentBuilder
    #: the spellings of the initializing request this router accepts
    init_methods: tuple[str, ...] = (INITIALIZE,)
    first_request = "first ACP request must be initialize"
    first_message = "first ACP message must be an initialize request"

    def __init__(self) -> None:
        self._impls: dict[int, Builder[Any, Any, Any]] = {}

    def _add(self: _R, version: int, impl: Builder[Any, Any, Any]) -> _R:
        if impl.version != version or not isinstance(impl, self.builder_type):
            raise TypeError(f"with_v{version} needs a v{version} {self.role} builder, not {impl!r}")
        self._impls[version] = impl
        return self

    @property
    def versions(self) -> tuple[int, ...]:
        """The versions configured so far (`with_v1` / `with_v2`), ascending."""
        return tuple(sorted(self._impls))

    def _select(self, params: Any) -> tuple[int, Any]:
        """`(version, rewritten params or None)`; raises the JsonRpcError to answer."""
        raise NotImplementedError

    def _decide(self, engine: Engine, frame: Any) -> _Decision | None:
        kind = frame.kind
        if kind == engine.RESPONSE or (kind == engine.MALFORMED and frame.response_shaped):
            return None  # response-only frames before initialization are ignored
        if kind == engine.MALFORMED:
            return "reject", engine.error_reply(frame)
        if kind == engine.NOTIFICATION:
            return "reject", None  # nothing to answer: the connection just closes
        if kind == engine.REQUEST:
            if frame.method not in self.init_methods:
                return "reject", error_line(engine.encode_error, frame.id, JsonRpcError(INVALID_REQUEST, data=self.first_request))
            try:
                version, params = self._select(frame.params)
            except JsonRpcError as exc:
                return "reject", error_line(engine.encode_error, frame.id, exc)
            new = None if params is None else engine.encode_request(frame.id, frame.method, params)[:-1]
            return "accept", (version, new)
        # a batch: its first call-shaped entry decides (§2.17)
        entries = frame.entries
        first = next((e for e in entries if not (e.kind == engine.RESPONSE or (
            e.kind == engine.MALFORMED and e.response_shaped))), None)
        if first is None:
            return None
        if first.kind == engine.REQUEST and first.method in self.init_methods:
            try:
                version, params = self._select(first.params)
            except JsonRpcError as exc:
                return "reject", _reject_batch(engine, frame, exc)
            if params is None:
                return "accept", (version, None)
            parts = [engine.encode_request(e.id, e.method, params)[:-1] if e is first else bytes(e.raw)
                     for e in entries]
            return "accept", (version, b"[" + b",".join(parts) + b"]")
        text = self.first_message if first.kind == engine.NOTIFICATION else self.first_request
        return "reject", _reject_batch(engine, frame, JsonRpcError(INVALID_REQUEST, data=text))

    async def serve(self, transport: Transport, *, engine: EngineChoice = None) -> None:
        """Serve one connection: select an implementation from the first frame, then run it.

        On a rejection the router answers (ids and batch framing kept), closes the stream
        and never starts an implementation.

        Raises:
            ValueError: the router has no implementations.
        """
        if not self._impls:
            raise ValueError("the router has no implementations (use with_v1 / with_v2)")
        eng = engine_twin(engine)
        stream = await open_stream(transport)
        first = _FirstFrame(stream, eng, lambda frame: self._decide(eng, frame),
                            lazy=any(impl.connection_type.lazy_frames for impl in self._impls.values()))
        version = await first.decision
        if version is None:
            await stream.wait_closed()
            return
        conn = open_connection(stream, eng, attach=False, decoder=first.decoder)
        self._impls[version].bind(conn)
        first.hand_over(conn)
        await conn.wait_closed()


class AgentRouter(_Router):
    """`Agent.protocol_router().with_v1(a).with_v2(b)` (protocol.md §6.4 [SEED]).

    Picks the highest configured version <= the requested one (a v1-only router keeps
    fallback-to-latest), else answers -32022 with the configured versions and closes.
    Exact-version requests reach the implementation unchanged; a newer request is
    canonicalised to v2, a v2+ request for the v1 implementation normalised (§6.5).
    """

    def with_v1(self, impl: AgentBuilder[V1]) -> AgentRouter:
        """Serve v1 connections with `impl` (a v1 agent builder)."""
        return self._add(1, impl)

    def with_v2(self, impl: AgentBuilder[V2]) -> AgentRouter:
        """Serve v2 connections with `impl` (a v2 agent builder)."""
        return self._add(2, impl)

    def _select(self, params: Any) -> tuple[int, Any]:
        requested = nego.parse_protocol_version(params)
        version = nego.select_version(requested, self._impls)
        nego.validate_initialize_request(params, profile_of(requested).version)
        if requested == version or requested < 1:
            return version, None
        if profile_of(version).exact_initialize:
            return version, nego.canonicalize_v2_initialize(params)
        return 1, nego.normalize_v2_to_v1(params)


class ProxyRouter(_Router):
    """`Proxy.protocol_router()`: exact v1/v2 match on `_proxy/initialize` (§6.7)."""

    role = "proxy"
    builder_type = ProxyBuilder
    init_methods = (PROXY_INITIALIZE, PROXY_INITIALIZE_SPEC)  # both spellings (protocol.md §8)
    first_request = "first ACP proxy request must be `_proxy/initialize`"
    first_message = "first ACP proxy message must be an `_proxy/initialize` request"

    def with_v1(self, impl: ProxyBuilder[V1]) -> ProxyRouter:
        """Serve v1 connections with `impl` (a v1 proxy builder)."""
        return self._add(1, impl)

    def with_v2(self, impl: ProxyBuilder[V2]) -> ProxyRouter:
        """Serve v2 connections with `impl` (a v2 proxy builder)."""
        return self._add(2, impl)

    def _select(self, params: Any) -> tuple[int, Any]:
        requested = nego.parse_protocol_version(params)
        if requested not in self._impls:
            supported = ", ".join(str(v) for v in self.versions)
            raise JsonRpcError(INVALID_REQUEST, data=(
                f"unsupported ACP protocol version {requested}; "
                f"this proxy supports ACP protocol version(s) {supported}"))
        nego.validate_initialize_request(params, requested)
        return requested, None
