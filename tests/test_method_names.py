"""Method names are checked when a handler is registered (``acp_fast.roles.names``).

A handler registered under a name its side never receives would never run; the builders and
``add_dynamic_handler`` refuse such a name (unless it starts with ``_``: an extension
method) with a ``ValueError`` naming the nearest known name. Registration involves no
engine, so nothing here is parametrised over the twins.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from acp_fast.jsonrpc import Connection
from acp_fast.protocol import methods_v1, methods_v2
from acp_fast.protocol.surface import WireSurface
from acp_fast.roles import Agent, Client, Proxy
from acp_fast.roles.names import check_handler_method, handled_methods
from acp_fast.transport import memory_pair


def noop(params: Any, cx: Any) -> None:
    return None


def test_a_misspelled_method_name_is_refused_with_the_nearest_known_name() -> None:
    with pytest.raises(ValueError, match=r"'session/prmpt' is not an ACP v2 request .*did you mean 'session/prompt'\?"):
        Agent.v2().on_request("session/prmpt", noop)
    with pytest.raises(ValueError, match="did you mean 'session/cancel'"):
        Agent.builder().on_notification("session/cancle", noop)
    with pytest.raises(ValueError, match="did you mean 'session/update'"):
        Client.v2().on_notification("session/updates", noop)
    with pytest.raises(ValueError, match="did you mean 'session/request_permission'"):
        Proxy.v2().on_successor_request("session/request_permision", noop)


def test_the_decorator_form_refuses_at_registration() -> None:
    agent = Agent.v2()
    with pytest.raises(ValueError, match="did you mean 'session/new'"):
        agent.on_request("session/nwe")
    assert agent.table().requests == {}


def test_extension_names_are_accepted_on_every_side() -> None:
    agent = Agent.v2().on_request("_x/ask", noop).on_notification("_x/tell", noop)
    client = Client.builder().on_request("_x/ask", noop).on_notification("_x/tell", noop)
    proxy = (Proxy.v2().on_request("_proxy/initialize", noop).on_successor_request("_x/ask", noop)
             .on_successor_notification("_x/tell", noop))
    assert set(agent.table().requests) == set(client.table().requests) == {"_x/ask"}
    assert set(proxy.table().successor_requests) == {"_x/ask"}


def test_protocol_names_dollar_cancel_request_is_a_notification_of_every_side() -> None:
    for builder in (Agent.v2(), Agent.builder(), Client.v2(), Proxy.v2()):
        builder.on_notification("$/cancel_request", noop)
    Proxy.v2().on_successor_notification("$/cancel_request", noop)
    with pytest.raises(ValueError, match=r"it is a notification"):
        Agent.v2().on_request("$/cancel_request", noop)
    with pytest.raises(ValueError, match="did you mean '\\$/cancel_request'"):
        Client.v2().on_notification("$/cancel_requests", noop)
    with pytest.raises(ValueError, match="'\\$/progress' is not"):
        Agent.v2().on_notification("$/progress", noop)


def test_the_receiving_side_decides() -> None:
    with pytest.raises(ValueError, match="the agent side handles it"):
        Client.v2().on_request("session/prompt", noop)
    with pytest.raises(ValueError, match="the client side handles it"):
        Agent.v2().on_request("session/request_permission", noop)
    with pytest.raises(ValueError, match="the agent side handles it"):
        Proxy.v2().on_successor_request("session/prompt", noop)
    with pytest.raises(ValueError, match="the client side handles it"):
        Proxy.v2().on_request("session/request_permission", noop)
    Proxy.v2().on_request("session/prompt", noop).on_request("proxy/initialize", noop)
    Proxy.v2().on_successor_request("session/request_permission", noop)
    with pytest.raises(ValueError, match=r"'proxy/initialize' is not an ACP v2 request that an agent receives"):
        Agent.v2().on_request("proxy/initialize", noop)


def test_the_version_and_the_kind_decide() -> None:
    with pytest.raises(ValueError, match="it is an ACP v1 method"):
        Agent.v2().on_request("session/load", noop)
    with pytest.raises(ValueError, match="it is an ACP v1 method"):
        Client.v2().on_request("terminal/create", noop)
    Client.builder().on_request("terminal/create", noop)
    with pytest.raises(ValueError, match="it is an ACP v2 method"):
        Agent.builder().on_request("tool_call/cancel", noop)
    with pytest.raises(ValueError, match="it is a notification"):
        Agent.v2().on_request("session/cancel", noop)
    with pytest.raises(ValueError, match="it is a request"):
        Agent.v2().on_notification("session/prompt", noop)


def test_descriptors_and_schema_type_names_are_checked_too() -> None:
    with pytest.raises(ValueError, match="the agent side handles it"):
        Client.v2().on_request(methods_v2.session.prompt, noop)
    with pytest.raises(ValueError, match="the agent side handles it"):
        Client.v2().on_request("PromptRequest", noop)
    with pytest.raises(ValueError, match="the client side handles it"):
        Agent.builder().on_request(methods_v1.fs.read_text_file, noop)
    assert "fs/read_text_file" in Client.builder().on_request(methods_v1.fs.read_text_file, noop).table().requests


def test_every_method_of_the_tables_has_a_side_that_receives_it() -> None:
    for version in (1, 2):
        surface = WireSurface.for_version(version)
        for kind in ("request", "notification"):
            receivable = (handled_methods(version, "agent", kind) | handled_methods(version, "client", kind)
                          | handled_methods(version, "proxy", kind) | handled_methods(version, "proxy", kind, True))
            assert receivable == surface.methods_of_kind(kind)
            for name in surface.methods_of_kind(kind):
                side = surface.method_info(name, kind).side  # type: ignore[union-attr]
                role = {"agent": "agent", "client": "client", "protocol": "agent", "proxy": "proxy"}[side]
                assert check_handler_method(name, version=version, role=role, kind=kind) == name


def test_dynamic_handlers_are_checked_like_builder_handlers() -> None:
    async def body() -> None:
        a, _b = memory_pair()
        conn = Agent.v2().bind(Connection(a))
        try:
            with pytest.raises(ValueError, match="did you mean 'session/prompt'"):
                conn.add_dynamic_handler("session/promt", noop)
            with pytest.raises(ValueError, match="the client side handles it"):
                conn.add_dynamic_handler("session/update", noop, kind="notification")
            conn.add_dynamic_handler("_x/any", noop).remove()
            conn.add_dynamic_handler("session/prompt", noop).remove()
        finally:
            conn.close()
            await conn.wait_closed()

    asyncio.run(body())
