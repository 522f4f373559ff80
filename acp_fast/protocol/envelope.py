"""The successor envelope of a proxy chain, read and written in one place (protocol.md §8.2).

A proxy talks to its successor through its one connection to the conductor: every message
between them travels inside a `_proxy/successor` message (or the spec RFD's spelling,
`proxy/successor`; both are accepted), whose params are the inner message flattened,
`{"method": M, "params"?: P, …}`. A request envelope is answered like the inner request
(responses are never wrapped); envelope members other than `method` and `params` (its
`_meta`) are hop-local and dropped; the inner `params` (their own `_meta` included) are the
message's and pass unchanged.

`SuccessorEnvelope` is the one reader and writer of that shape: the proxy's dispatch
(`acp_fast.roles`) and the conductor (`acp_fast.conductor`) both read envelopes through
`SuccessorEnvelope.unwrap` and write them through `SuccessorEnvelope.wrap`, so that the same
envelope means the same message wherever it is read. The method names come from
`acp_fast.protocol.facts` (`SUCCESSOR_METHODS`, `PROXY_SPELLINGS`).

Reading never decodes what it only forwards: the envelope's params bytes are re-read as a
lazy message (`{"jsonrpc":"2.0",` in place of their `{`, plus the envelope's `id` for a
request), so the inner `params` stay the bytes that came in. An envelope the re-read does not
take (a member named `id`, `jsonrpc`, `result` or `error`, a repeated `method` or `params`)
is read from its decoded params instead, with the same outcome: the last `method` and
`params`, other members dropped. What neither reading takes (params not an object, no string
`method`, inner `params` that are not an object, an array or null) is a malformed envelope:
-32602.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from .._rawjson import RawJson
from ..errors import INVALID_PARAMS, JsonRpcError
from ..jsontypes import Json, JsonObject
from .facts import PROXY_SPELLINGS, PROXY_SUCCESSOR

if TYPE_CHECKING:  # pragma: no cover
    from ..engine import Engine, Message

__all__ = ["BAD_ENVELOPE", "SuccessorEnvelope", "successor_for"]

#: The `data` of the -32602 a malformed envelope gets.
BAD_ENVELOPE: Final = "invalid `_proxy/successor` envelope"

#: the envelope params re-read as a message: this head replaces their `{`
_HEAD = b'{"jsonrpc":"2.0",'
#: params at least this long are joined in one copy (shorter ones: concatenation is quicker)
_JOIN_AT = 2048
#: the most method names whose encoded envelope head is cached per envelope writer
_MAX_HEADS = 256

_SUCCESSOR_OF = MappingProxyType({init: succ for init, succ in PROXY_SPELLINGS.values()})


def successor_for(initialize_method: str) -> str:
    """The successor envelope's method in the spelling of a proxy initialize.

    A proxy answers its predecessor in the spelling the predecessor used.

    Args:
        initialize_method: the method that initialized the proxy (`_proxy/initialize` or
            `proxy/initialize`).

    Returns:
        `_proxy/successor` or `proxy/successor`, the same spelling; `_proxy/successor` for any
        other method.
    """
    return _SUCCESSOR_OF.get(initialize_method, PROXY_SUCCESSOR)


class SuccessorEnvelope:
    """Reads and writes successor envelopes with one engine twin (one per connection or
    conductor: it holds a lazy decoder of its own).

    Args:
        engine: the engine module whose frames it reads and whose encoders get what it
            writes (`acp_fast.engine` or a twin).
    """

    __slots__ = ("_encode_notification", "_encode_request", "_encode_value", "_feed", "_heads",
                 "_notification", "_request", "_splice_in_dict")

    def __init__(self, engine: Engine) -> None:
        #: `feed` of a lazy decoder of its own, which re-reads envelope params as messages
        self._feed = engine.Decoder(lazy=True).feed
        self._request: int = engine.REQUEST
        self._notification: int = engine.NOTIFICATION
        self._encode_value = engine.encode_value
        self._encode_request = engine.encode_request
        self._encode_notification = engine.encode_notification
        # the compiled encoder splices a `RawJson` inside a dict in one copy; the pure one is
        # quicker with the envelope spliced here
        self._splice_in_dict = engine.COMPILED
        #: method -> encoded envelope head `{"method":"…"` (bounded)
        self._heads: dict[str, bytes] = {}

    def unwrap(self, envelope: Message) -> Message:
        """The message inside `envelope`, as a lazy frame of the same kind (one of
        `unwrap_request` and `unwrap_notification`).

        Args:
            envelope: a `_proxy/successor` request or notification.

        Returns:
            The inner request or notification.

        Raises:
            JsonRpcError: -32602 (`BAD_ENVELOPE`) when `envelope` is malformed.
        """
        if envelope.kind == self._request:
            return self.unwrap_request(envelope)
        return self.unwrap_notification(envelope)

    def unwrap_request(self, envelope: Message) -> Message:
        """The request inside request `envelope`, as a lazy frame with the envelope's id
        (answering or cancelling it is answering or cancelling the envelope); its `params`
        stay raw bytes until read.

        Args:
            envelope: a `_proxy/successor` request.

        Returns:
            The inner request.

        Raises:
            JsonRpcError: -32602 (`BAD_ENVELOPE`) when `envelope` is malformed.
        """
        raw = envelope.params_raw
        if raw is not None and raw[0] == 0x7B:  # an object: re-read its bytes as the message
            head = b'{"jsonrpc":"2.0","id":' + self._encode_value(envelope.id) + b","
            # one complete line in, so exactly one frame out (a malformed one when not a message)
            inner: Message = self._feed(raw.replace(b"{", head, 1) + b"\n" if len(raw) < _JOIN_AT
                                        else b"".join((head, memoryview(raw)[1:], b"\n")))[0]
            if inner.kind == self._request:
                return inner
        return self._decoded(envelope, True)

    def unwrap_notification(self, envelope: Message) -> Message:
        """The notification inside notification `envelope`, as a lazy frame; its `params`
        stay raw bytes until read (`unwrap_request`'s reading, without an id).

        Args:
            envelope: a `_proxy/successor` notification.

        Returns:
            The inner notification.

        Raises:
            JsonRpcError: -32602 (`BAD_ENVELOPE`) when `envelope` is malformed.
        """
        raw = envelope.params_raw
        if raw is not None and raw[0] == 0x7B:
            inner: Message = self._feed(raw.replace(b"{", _HEAD, 1) + b"\n" if len(raw) < _JOIN_AT
                                        else b"".join((_HEAD, memoryview(raw)[1:], b"\n")))[0]
            if inner.kind == self._notification:
                return inner
        return self._decoded(envelope, False)

    def _decoded(self, envelope: Message, is_request: bool) -> Message:
        """`unwrap` from the decoded params, for what the re-read does not take."""
        params = envelope.params
        method = params.get("method") if type(params) is dict else None
        inner = params.get("params") if type(params) is dict else None
        if type(method) is not str or (inner is not None and type(inner) not in (dict, list)):
            raise JsonRpcError(INVALID_PARAMS, data=BAD_ENVELOPE)
        line = (self._encode_request(envelope.id, method, inner) if is_request
                else self._encode_notification(method, inner))
        frame: Message = self._feed(line)[0]
        return frame

    def wrap(self, method: str, params: Json | RawJson = None) -> JsonObject | RawJson:
        """The params of an envelope around `method` and `params` (no envelope `_meta`).

        Args:
            method: the inner method.
            params: the inner params: decoded, or raw bytes (a frame's `params_raw`) that go
                out byte for byte; `None`: none.

        Returns:
            What to send as the `_proxy/successor` message's params.
        """
        if self._splice_in_dict or (params is not None and type(params) is not RawJson):
            return {"method": method} if params is None else {"method": method, "params": params}
        head = self._heads.get(method)
        if head is None:
            head = b'{"method":' + self._encode_value(method)
            if len(self._heads) < _MAX_HEADS:
                self._heads[method] = head
        if params is None:
            return RawJson(head + b"}")
        return RawJson(b"".join((head, b',"params":', params, b"}")))
