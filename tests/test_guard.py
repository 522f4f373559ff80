"""The initialization / lifecycle guard as a state machine (protocol.md §5).

Engine-independent; ``tests/test_roles.py`` drives the same guard on live connections over
both engine twins.
"""

from __future__ import annotations

import pytest

from acp_fast.protocol import guard as g
from acp_fast.protocol.guard import InitializationGuard

METHODS = ["session/new", "session/prompt", "authenticate", "_vendor/x", "unknown/method"]


def data(error: object) -> object:
    assert error is not None
    return error.data  # type: ignore[attr-defined]


@pytest.mark.parametrize("role", ["unchecked"])
def test_unchecked_guard_passes_everything(role: str) -> None:
    guard = InitializationGuard(1, role)
    assert guard.state == g.UNCHECKED and guard.ready
    for method in [*METHODS, "initialize"]:
        assert guard.check_incoming_request(method) is None
        assert guard.check_outgoing_request(method) is None
        assert guard.allows_incoming_notification(method)


@pytest.mark.parametrize("role", ["initiator", "responder"])
@pytest.mark.parametrize("method", METHODS)
def test_requests_before_ready_are_rejected_in_both_directions(role: str, method: str) -> None:
    guard = InitializationGuard(2, role)
    expected = f"ACP initialization must complete before `{method}` can be used"
    for state_change in (lambda: None, guard.begin):
        state_change()
        assert guard.check_incoming_request(method).code == -32600  # type: ignore[union-attr]
        assert data(guard.check_incoming_request(method)) == expected
        assert data(guard.check_outgoing_request(method)) == expected


@pytest.mark.parametrize("role", ["initiator", "responder"])
def test_notifications_before_ready_dropped_except_cancel_while_initializing(role: str) -> None:
    guard = InitializationGuard(2, role)
    assert not guard.allows_incoming_notification("session/cancel")
    assert not guard.allows_incoming_notification("$/cancel_request")
    assert guard.check_outgoing_notification("$/cancel_request") is not None
    token = guard.begin()
    assert guard.allows_incoming_notification("$/cancel_request")
    assert guard.check_outgoing_notification("$/cancel_request") is None
    assert not guard.allows_incoming_notification("session/cancel")
    assert guard.check_outgoing_notification("session/cancel") is not None
    guard.succeed(token, 2)
    assert guard.allows_incoming_notification("session/cancel")


def test_only_the_client_initiates() -> None:
    responder, initiator = InitializationGuard(2, "responder"), InitializationGuard(2, "initiator")
    assert data(responder.check_outgoing_request("initialize")) == g.DIRECTION_DATA
    assert data(initiator.check_incoming_request("initialize")) == g.DIRECTION_DATA
    assert responder.check_incoming_request("initialize") is None
    assert initiator.check_outgoing_request("initialize") is None


@pytest.mark.parametrize("role, check", [("responder", "check_incoming_request"),
                                         ("initiator", "check_outgoing_request")])
def test_second_initialize_in_progress_and_after_ready(role: str, check: str) -> None:
    guard = InitializationGuard(2, role)
    token = guard.begin()
    assert data(getattr(guard, check)("initialize")) == g.IN_PROGRESS_DATA
    guard.succeed(token, 2)
    assert guard.state == g.READY and guard.negotiated == 2
    assert data(getattr(guard, check)("initialize")) == g.ONCE_DATA
    assert guard.state == g.READY  # stays usable
    assert getattr(guard, check)("session/new") is None


def test_failed_initialize_allows_retry() -> None:
    guard = InitializationGuard(2, "responder")
    guard.fail(guard.begin())
    assert guard.state == g.UNINITIALIZED
    token = guard.begin()
    guard.succeed(token, 2)
    assert guard.state == g.READY


def test_stale_attempt_never_resets_a_newer_one() -> None:
    guard = InitializationGuard(2, "initiator")
    old = guard.begin()
    new = guard.begin()
    guard.fail(old)
    assert guard.state == g.INITIALIZING
    guard.succeed(old, 2)
    assert guard.state == g.INITIALIZING
    guard.succeed(new, 2)
    assert guard.state == g.READY
    guard.fail(new)  # a late failure does not un-initialize
    assert guard.state == g.READY


def test_proxy_guard_requires_proxy_initialize() -> None:
    guard = InitializationGuard(2, proxy=True)
    assert guard.init_method == "_proxy/initialize"
    assert data(guard.check_incoming_request("initialize")) == g.PROXY_DATA
    assert guard.check_incoming_request("_proxy/initialize") is None


def test_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError):
        InitializationGuard(2, "server")


def test_docstring_examples() -> None:
    import doctest

    assert doctest.testmod(g).failed == 0
