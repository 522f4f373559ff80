"""Version selection, initialize validation and §6.5 normalisation (pure functions).

These rules are engine-independent (no bytes involved); ``tests/test_roles.py`` checks the
same rules on live connections over both engine twins.
"""

from __future__ import annotations

from typing import Any

import pytest

from acp_fast.errors import JsonRpcError
from acp_fast.protocol import negotiation as nego

INFO = {"name": "ed", "version": "1"}


def code_data(exc: pytest.ExceptionInfo[JsonRpcError]) -> tuple[int, Any]:
    return exc.value.code, exc.value.data


@pytest.mark.parametrize("version", [0, 1, 2, 3, 65535])
def test_parse_protocol_version_accepts_u16(version: int) -> None:
    assert nego.parse_protocol_version({"protocolVersion": version}) == version


@pytest.mark.parametrize("params", [
    {}, {"protocolVersion": "1"}, {"protocolVersion": "1.0.0"}, {"protocolVersion": 1.0},
    {"protocolVersion": True}, {"protocolVersion": -1}, {"protocolVersion": 65536},
    {"protocolVersion": None}, None, [1],
])
def test_parse_protocol_version_rejects_invalid_with_32602(params: Any) -> None:
    with pytest.raises(JsonRpcError) as info:
        nego.parse_protocol_version(params)
    assert code_data(info) == (-32602, "initialize.protocolVersion must be a valid ACP protocol version")


@pytest.mark.parametrize("requested", [0, 1, 2, 3, 100])
def test_v1_endpoint_selects_v1_for_any_request(requested: int) -> None:
    assert nego.select_version(requested, (1,)) == 1


@pytest.mark.parametrize("requested", [2, 3, 65535])
def test_v2_endpoint_selects_v2_for_2_or_newer(requested: int) -> None:
    assert nego.select_version(requested, (2,)) == 2


def test_v2_endpoint_rejects_v1_with_32022() -> None:
    with pytest.raises(JsonRpcError) as info:
        nego.select_version(1, (2,))
    assert code_data(info) == (-32022, {"requested": 1, "supported": [2]})
    assert info.value.message == "Unsupported protocol version"


@pytest.mark.parametrize("requested, expected", [(1, 1), (2, 2), (3, 2), (9, 2)])
def test_router_selects_highest_configured_at_or_below(requested: int, expected: int) -> None:
    assert nego.select_version(requested, (1, 2)) == expected


def test_router_rejects_when_nothing_fits_with_configured_list() -> None:
    with pytest.raises(JsonRpcError) as info:
        nego.select_version(0, (2, 1))
    assert code_data(info) == (-32022, {"requested": 0, "supported": [1, 2]})
    with pytest.raises(ValueError):
        nego.select_version(1, ())


def test_validate_v2_initialize_requires_info() -> None:
    nego.validate_initialize_request({"protocolVersion": 2, "info": INFO}, 2)
    for params in ({"protocolVersion": 2}, {"protocolVersion": 2, "info": "x"},
                   {"protocolVersion": 2, "info": {"name": "a"}}):
        with pytest.raises(JsonRpcError) as info:
            nego.validate_initialize_request(params, 2)
        assert info.value.code == -32602 and info.value.data.startswith("invalid initialize params: ")


def test_validate_v1_initialize_is_lenient() -> None:
    nego.validate_initialize_request({"protocolVersion": 1}, 1)
    nego.validate_initialize_request({"protocolVersion": 1, "clientInfo": INFO, "x": 1}, 1)
    with pytest.raises(JsonRpcError):
        nego.validate_initialize_request({"protocolVersion": 1, "clientInfo": 5}, 1)


@pytest.mark.seed("S000-88")
def test_check_negotiated_version() -> None:
    nego.check_negotiated_version({"protocolVersion": 2, "info": INFO}, 2)
    with pytest.raises(JsonRpcError) as info:
        nego.check_negotiated_version({"protocolVersion": 1}, 2)
    assert code_data(info) == (-32600, (
        "required ACP protocol version 2 but peer negotiated 1; "
        "use a matching implementation for the negotiated protocol version"))
    with pytest.raises(JsonRpcError) as info:
        nego.check_negotiated_version({"protocolVersion": 3, "info": INFO}, 2)
    assert info.value.code == -32600
    with pytest.raises(JsonRpcError) as info:
        nego.check_negotiated_version({"info": INFO}, 2)
    assert info.value.code == -32602
    with pytest.raises(JsonRpcError) as info:
        nego.check_negotiated_version({"protocolVersion": 2}, 2)  # v2 answer without info
    assert info.value.code == -32602


def test_normalize_v2_to_v1_renames_and_converts_markers() -> None:
    params = {
        "protocolVersion": 2,
        "info": {"name": "ed", "version": "1", "title": "Ed", "buildCommit": "abc"},
        "capabilities": {"auth": {"terminal": {"_meta": {"x": 1}}}, "elicitation": {"form": {}},
                         "_meta": {"c": 1}, "fs": {"readTextFile": True}, "terminal": True},
        "_meta": {"top": 1},
        "unknown": True,
    }
    assert nego.normalize_v2_to_v1(params) == {
        "protocolVersion": 1,
        "clientInfo": {"name": "ed", "version": "1", "title": "Ed"},
        "clientCapabilities": {
            "auth": {"terminal": True},
            "elicitation": {"form": {}},
            "session": {"configOptions": {"boolean": {}}},
            "_meta": {"c": 1},
        },
        "_meta": {"top": 1},
    }


@pytest.mark.seed("S000-86")
def test_normalize_never_enables_fs_or_terminal_and_defaults_auth_terminal_false() -> None:
    v1 = nego.normalize_v2_to_v1({"protocolVersion": 3, "info": INFO})
    caps = v1["clientCapabilities"]
    assert caps["auth"] == {"terminal": False} and "fs" not in caps and "terminal" not in caps


def test_normalize_tolerates_malformed_capabilities_and_meta() -> None:
    v1 = nego.normalize_v2_to_v1({"protocolVersion": 2, "info": INFO, "capabilities": 7, "_meta": "x"})
    assert v1 == {"protocolVersion": 1, "clientInfo": INFO, "clientCapabilities": {
        "auth": {"terminal": False}, "session": {"configOptions": {"boolean": {}}}}}


def test_canonicalize_v2_drops_unknown_fields_and_pins_version() -> None:
    out = nego.canonicalize_v2_initialize(
        {"protocolVersion": 5, "info": {**INFO, "x": 1}, "future": 1, "capabilities": {"auth": None}})
    assert out == {"protocolVersion": 2, "info": INFO, "capabilities": {"auth": None}}


def test_lossless_normalization_accepts_an_exact_request() -> None:
    params = {"protocolVersion": 2, "info": INFO, "capabilities": {"auth": {"terminal": {}}}}
    assert nego.normalize_v2_to_v1_lossless(params) == nego.normalize_v2_to_v1(params)
    assert nego.normalize_v2_to_v1_lossless({"protocolVersion": 2, "info": INFO}) is not None


@pytest.mark.seed("S000-97")
@pytest.mark.parametrize("params", [
    {"protocolVersion": 2, "info": {**INFO, "buildCommit": "abc"}},
    {"protocolVersion": 2, "info": INFO, "capabilities": {"auth": {"terminal": {"_meta": {"x": 1}}}}},
    {"protocolVersion": 2, "info": INFO, "unknownField": 1},
    {"protocolVersion": 2, "info": INFO, "capabilities": 7},
    {"protocolVersion": 2, "info": INFO, "capabilities": {"futureCap": {}}},
])
def test_lossless_normalization_detects_loss(params: dict[str, Any]) -> None:
    assert nego.normalize_v2_to_v1_lossless(params) is None


def test_canonical_v1_comparison_fills_schema_defaults() -> None:
    a = {"protocolVersion": 1, "clientInfo": INFO}
    b = {"protocolVersion": 1, "clientInfo": INFO, "clientCapabilities": {
        "fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False, "auth": {"terminal": False}}}
    assert nego.canonicalize_v1_initialize(a) == nego.canonicalize_v1_initialize(b)
    c = dict(b, clientCapabilities={"terminal": True})
    assert nego.canonicalize_v1_initialize(a) != nego.canonicalize_v1_initialize(c)


def test_docstring_examples() -> None:
    import doctest

    assert doctest.testmod(nego).failed == 0
