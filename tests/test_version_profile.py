"""What differs between ACP v1 and v2 is data: `acp_fast.protocol.profile` (issue #34 item 2).

The behaviour read from the profiles is pinned here by example, for both versions; the
source test that no layer compares version numbers itself is in `test_roles_floor.py`.
"""

from __future__ import annotations

import pytest

from acp_fast.conductor.mcp_polyfill import agent_has_acp_transport, with_acp_transport
from acp_fast.protocol import negotiation as nego
from acp_fast.protocol.facts import SESSION_LOAD, SESSION_NEW
from acp_fast.protocol.profile import OLDEST, V1, V2, profile_of
from acp_fast.errors import JsonRpcError


def test_profile_of_each_version() -> None:
    assert profile_of(1) is V1 and profile_of(0) is V1 and OLDEST is V1
    assert profile_of(2) is V2 and profile_of(3) is V2  # a newer draft behaves as v2
    assert (V1.version, V2.version) == (1, 2)
    assert (V1.lower, V2.lower) == (None, 1)
    assert SESSION_LOAD in V1.setup_methods and SESSION_LOAD not in V2.setup_methods
    assert SESSION_NEW in V1.setup_methods and SESSION_NEW in V2.setup_methods


def test_default_initialize_results() -> None:
    info = {"name": "a", "version": "1"}
    assert V1.default_initialize_result(info) == {"protocolVersion": 1, "agentInfo": info, "agentCapabilities": {}}
    assert V2.default_initialize_result(info) == {"protocolVersion": 2, "info": info, "capabilities": {}}


def test_initialize_info_keys_and_requirement() -> None:
    nego.validate_initialize_request({"protocolVersion": 1}, 1)  # v1: clientInfo optional
    nego.validate_initialize_request({"protocolVersion": 2, "info": {"name": "c", "version": "1"}}, 2)
    with pytest.raises(JsonRpcError):
        nego.validate_initialize_request({"protocolVersion": 2}, 2)  # v2: info required
    with pytest.raises(JsonRpcError):
        nego.validate_initialize_response({"protocolVersion": 2}, 2)
    nego.validate_initialize_response({"protocolVersion": 1}, 1)


def test_acp_transport_advertised_per_version() -> None:
    v1_yes = {"agentCapabilities": {"mcpCapabilities": {"http": True, "acp": True}}}
    v1_no = {"agentCapabilities": {"mcpCapabilities": {"acp": {}}}}  # v1 wants exactly true
    v2_yes = {"capabilities": {"session": {"mcp": {"acp": {}}}}}
    v2_no = {"capabilities": {"session": {"mcp": {"http": {}}}}}
    assert agent_has_acp_transport(v1_yes, 1) and not agent_has_acp_transport(v1_no, 1)
    assert agent_has_acp_transport(v2_yes, 2) and not agent_has_acp_transport(v2_no, 2)
    assert not agent_has_acp_transport(v2_yes, 1) and not agent_has_acp_transport(v1_yes, 2)
    assert not agent_has_acp_transport("x", 2) and not agent_has_acp_transport({"capabilities": 3}, 2)


def test_with_acp_transport_per_version() -> None:
    base = {"protocolVersion": 2, "capabilities": {"loadSession": True, "session": {"mcp": {"http": {}}}}}
    out = with_acp_transport(base, 2)
    assert out == {"protocolVersion": 2,
                   "capabilities": {"loadSession": True, "session": {"mcp": {"http": {}, "acp": {}}}}}
    assert base["capabilities"]["session"]["mcp"] == {"http": {}}  # type: ignore[index]  # not mutated
    assert with_acp_transport({"protocolVersion": 1}, 1) == {
        "protocolVersion": 1, "agentCapabilities": {"mcpCapabilities": {"acp": True}}}
    assert with_acp_transport({"protocolVersion": 2}, 2) == {
        "protocolVersion": 2, "capabilities": {"session": {"mcp": {"acp": {}}}}}
    assert with_acp_transport(None, 2) is None
