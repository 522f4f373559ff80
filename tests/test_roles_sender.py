"""The one outgoing side of every connection kind: `Sender` (issue #34 item 3), both hot twins.

`acp_fast.roles._hot_py.Sender` is the pure twin and, compiled unchanged, the compiled twin's
(`_hot_c`). Each test drives a sender with recording `notify` / `request` callables and checks
what reaches them, through the `engine_impl` fixture (ids `py` and `c`): the same calls, the
same refusals, in both twins.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import pytest

from acp_fast.errors import INVALID_REQUEST, JsonRpcError
from acp_fast.protocol.errors import WireSurfaceError
from acp_fast.protocol.gate import make_gate
from acp_fast.protocol.guard import InitializationGuard
from acp_fast.protocol.surface import WireSurface

CHUNK = {"sessionUpdate": "agent_message_chunk", "messageId": "m1", "content": {"type": "text", "text": "hi"}}
BOGUS = {"sessionUpdate": "no_such_variant"}
FIRST_RULE = "send `initialize` first"


@pytest.fixture
def hot(engine_impl: Any) -> ModuleType:
    return importlib.import_module("acp_fast.roles._hot_py" if engine_impl.is_pure_python else "acp_fast.roles._hot_c")


class _Wire:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def notify(self, method: str, params: Any) -> bool:
        self.sent.append(("notify", method, params))
        return True

    def request(self, method: str, params: Any, *, timeout: float | None = None) -> str:
        self.sent.append(("request", method, params))
        return f"handle:{method}"


def _sender(hot: ModuleType, wire: _Wire, *, guard: InitializationGuard | None = None,
            first_rule: str | None = None, initializing: Any = None, version: int = 2) -> Any:
    surface = WireSurface.for_version(version)
    gate = make_gate(surface, compiled=hot.__name__.endswith("_c"))
    return hot.Sender(gate, surface, wire.notify, wire.request, guard, first_rule, initializing)


def test_ready_sender_takes_every_kind_on_one_path(hot: ModuleType) -> None:
    wire = _Wire()
    sender = _sender(hot, wire, guard=InitializationGuard(2, "unchecked"))
    assert sender.ready
    assert sender.plain("s", CHUNK) is True
    assert sender("s", CHUNK) is True
    assert sender("s", CHUNK, False, _meta={"k": 1}) is True
    assert sender.send_notification("session/update", {"sessionId": "s", "update": CHUNK}) is True
    assert sender.send_request("session/new", {"cwd": "/"}) == "handle:session/new"
    update = {"sessionId": "s", "update": CHUNK}
    assert wire.sent == [("notify", "session/update", update), ("notify", "session/update", update),
                         ("notify", "session/update", {**update, "_meta": {"k": 1}}),
                         ("notify", "session/update", update), ("request", "session/new", {"cwd": "/"})]


def test_the_write_guard_refuses_an_undefined_update_on_every_path(hot: ModuleType) -> None:
    wire = _Wire()
    sender = _sender(hot, wire)
    for send in (lambda: sender.plain("s", BOGUS), lambda: sender("s", BOGUS),
                 lambda: sender.send_notification("session/update", {"sessionId": "s", "update": BOGUS})):
        with pytest.raises(WireSurfaceError):
            send()
    assert wire.sent == []
    assert sender("s", BOGUS, True) is True  # passthrough: a received update forwarded
    assert wire.sent == [("notify", "session/update", {"sessionId": "s", "update": BOGUS})]
    with pytest.raises(WireSurfaceError):
        sender.send_request("no/such_method")
    assert sender.send_request("no/such_method", None, True) == "handle:no/such_method"


def test_before_the_guard_is_ready_nothing_takes_the_short_path(hot: ModuleType) -> None:
    wire = _Wire()
    guard = InitializationGuard(2, "responder")
    sender = _sender(hot, wire, guard=guard)
    assert not sender.ready
    assert sender.plain("s", CHUNK) is False  # dropped by the guard (logged), not queued
    assert sender.send_notification("session/update", {"sessionId": "s", "update": CHUNK}) is False
    with pytest.raises(JsonRpcError) as info:
        sender.send_request("session/new", {"cwd": "/"})
    assert info.value.code == INVALID_REQUEST
    assert wire.sent == []
    guard.succeed(guard.begin(), 2)
    sender.update_ready()
    assert sender.ready and sender.plain("s", CHUNK) is True
    assert len(wire.sent) == 1


def test_the_first_message_rule_holds_until_initialize_is_sent(hot: ModuleType) -> None:
    wire = _Wire()
    sender = _sender(hot, wire, guard=InitializationGuard(2, "unchecked"), first_rule=FIRST_RULE)
    assert not sender.ready
    for send in (lambda: sender.send_request("session/new", {}), lambda: sender.plain("s", CHUNK),
                 lambda: sender.send_notification("session/cancel", {"sessionId": "s"})):
        with pytest.raises(JsonRpcError) as info:
            send()
        assert (info.value.code, info.value.data) == (INVALID_REQUEST, FIRST_RULE)
    assert wire.sent == []
    sender.first_sent()
    assert sender.ready and sender.first_rule is None
    assert sender.send_notification("session/cancel", {"sessionId": "s"}) is True
    assert wire.sent == [("notify", "session/cancel", {"sessionId": "s"})]


def test_initializing_requests_go_to_the_role(hot: ModuleType) -> None:
    wire = _Wire()
    asked: list[tuple[str, Any]] = []

    def initializing(method: str, params: Any) -> Any:
        asked.append((method, params))
        return "initialized" if method == "initialize" else None

    sender = _sender(hot, wire, guard=InitializationGuard(2, "initiator"), initializing=initializing)
    assert sender.send_request("initialize", {"x": 1}) == "initialized"
    with pytest.raises(JsonRpcError):  # the role passes: the guard refuses (not a proxy's)
        sender.send_request("_proxy/initialize", {})
    assert asked == [("initialize", {"x": 1}), ("_proxy/initialize", {})]
    assert wire.sent == []
    # without a role rule (a proxy's successor side) initialize is an ordinary request
    plain = _sender(hot, wire)
    assert plain.send_request("initialize", {"protocolVersion": 2}) == "handle:initialize"
