"""ACP version negotiation as pure functions (protocol layer; no I/O, no asyncio).

This module holds the rules of `notes/protocol.md` §6 that decide *which* protocol version
a connection speaks and what the `initialize` request looks like to the implementation that
serves it. The per-connection state machine that enforces *when* traffic may flow is
[`acp_fast.protocol.guard`][acp_fast.protocol.guard]; the builders in [`acp_fast.roles`][acp_fast.roles] call both.

Rules implemented ([SEED] where the sources disagree):

* `protocolVersion` is one integer 0..65535 (never a bool, float or string), else -32602
  ([`parse_protocol_version`][acp_fast.protocol.negotiation.parse_protocol_version]).
* A v1 agent selects v1 for any valid request (fallback-to-latest, also for 0); a request
  for >= 2 is normalised to v1 first (§6.5, [`normalize_v2_to_v1`][acp_fast.protocol.negotiation.normalize_v2_to_v1]).
* A v2 agent selects v2 for >= 2 and rejects 1 with -32022 `{"requested", "supported"}`.
* A router picks the highest configured version <= the requested one, else -32022 with the
  configured list; a v1-only router keeps fallback-to-latest ([`select_version`][acp_fast.protocol.negotiation.select_version]).
* No traffic is ever converted between versions: these helpers only touch `initialize`.

Example:
    >>> select_version(3, (1, 2))
    2
    >>> select_version(1, (2,))
    Traceback (most recent call last):
    ...
    acp_fast.errors.JsonRpcError: Unsupported protocol version (-32022): {'requested': 1, 'supported': [2]}
    >>> normalize_v2_to_v1({"protocolVersion": 2, "info": {"name": "ed", "version": "1"}})["clientInfo"]
    {'name': 'ed', 'version': '1'}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, JsonRpcError
from .profile import profile_of

__all__ = [
    "INVALID_VERSION_DATA",
    "SUPPORTED_VERSIONS",
    "canonicalize_v1_initialize",
    "canonicalize_v2_initialize",
    "check_negotiated_version",
    "normalize_v2_to_v1",
    "normalize_v2_to_v1_lossless",
    "parse_protocol_version",
    "select_version",
    "unsupported_protocol_version",
    "validate_initialize_request",
    "validate_initialize_response",
]

#: Versions this package implements.
SUPPORTED_VERSIONS = (1, 2)
#: The -32602 data string for a missing or invalid ``protocolVersion`` (protocol.md §5.7).
INVALID_VERSION_DATA = "initialize.protocolVersion must be a valid ACP protocol version"

_IMPLEMENTATION_KEYS = ("name", "title", "version", "_meta")
_V2_REQUEST_KEYS = ("protocolVersion", "info", "capabilities", "_meta")
_V1_CAPABILITY_KEYS = ("fs", "terminal", "session", "auth", "elicitation", "_meta")


def parse_protocol_version(params: Any) -> int:
    """The requested `protocolVersion` of `initialize` params.

    Args:
        params: the decoded params of an `initialize` (or `_proxy/initialize`) request.

    Returns:
        The version, an `int` in 0..65535.

    Raises:
        JsonRpcError: -32602 with data `INVALID_VERSION_DATA` when params are not an
            object or the version is missing, not an integer, or out of range.
    """
    version = params.get("protocolVersion") if type(params) is dict else None
    if type(version) is not int or not 0 <= version <= 65535:
        raise JsonRpcError(INVALID_PARAMS, data=INVALID_VERSION_DATA)
    return version


def unsupported_protocol_version(requested: int, supported: Iterable[int]) -> JsonRpcError:
    """The -32022 error of a failed negotiation (protocol.md §6.2 [SEED]).

    Examples:
        >>> unsupported_protocol_version(1, [2]).to_dict()
        {'code': -32022, 'message': 'Unsupported protocol version', 'data': {'requested': 1, 'supported': [2]}}
    """
    return JsonRpcError.unsupported_protocol_version(requested, sorted(supported))


def select_version(requested: int, configured: Iterable[int]) -> int:
    """The version an endpoint serving `configured` versions selects for `requested`.

    A v1-only endpoint keeps v1's fallback-to-latest rule (any request selects 1); an
    endpoint exposing v2 selects the highest configured version <= `requested`.

    Raises:
        JsonRpcError: -32022 `{"requested", "supported": configured}` when nothing fits.
        ValueError: `configured` is empty.
    """
    versions = sorted(set(configured))
    if not versions:
        raise ValueError("no protocol versions configured")
    if versions == [1]:
        return 1
    fitting = [v for v in versions if v <= requested]
    if not fitting:
        raise unsupported_protocol_version(requested, versions)
    return fitting[-1]


def _invalid_params(reason: str) -> JsonRpcError:
    return JsonRpcError(INVALID_PARAMS, data=f"invalid initialize params: {reason}")


def _check_implementation(value: Any, field: str, *, required: bool) -> str | None:
    if value is None:
        return f"missing required field `{field}`" if required else None
    if type(value) is not dict:
        return f"`{field}` must be an object"
    for key in ("name", "version"):
        if type(value.get(key)) is not str:
            return f"`{field}.{key}` must be a string"
    return None


def validate_initialize_request(params: Any, version: int) -> None:
    """Check `initialize` params against the required fields of `version`'s schema.

    v2 requires `info` (an `Implementation`); v1 only an object with a valid version.
    Capabilities and `_meta` stay lenient (the schema decodes them with defaults).

    Raises:
        JsonRpcError: -32602 `"invalid initialize params: …"`.
    """
    if type(params) is not dict:
        raise _invalid_params("params must be an object")
    parse_protocol_version(params)
    key, required = profile_of(version).client_info_key, profile_of(version).info_required
    problem = _check_implementation(params.get(key), key, required=required)
    if problem is not None:
        raise _invalid_params(problem)


def validate_initialize_response(result: Any, version: int) -> None:
    """Check an `initialize` result against `version`'s schema (required fields only).

    Raises:
        JsonRpcError: -32602 `"invalid initialize response: …"`.
    """
    problem: str | None
    if type(result) is not dict:
        problem = "result must be an object"
    elif "protocolVersion" not in result:
        problem = "missing required field `protocolVersion`"
    elif type(result["protocolVersion"]) is not int or not 0 <= result["protocolVersion"] <= 65535:
        problem = INVALID_VERSION_DATA
    else:
        key, required = profile_of(version).agent_info_key, profile_of(version).info_required
        problem = _check_implementation(result.get(key), key, required=required)
    if problem is not None:
        raise JsonRpcError(INVALID_PARAMS, data=f"invalid initialize response: {problem}")


def check_negotiated_version(result: Any, required: int) -> None:
    """An initiator's check of the answered version (protocol.md §5.9, §6.3).

    The version is looked at first (a v1 answer to a v2 request has the v1 shape), then the
    answer is validated against the required version's schema.

    Raises:
        JsonRpcError: -32602 for a missing/invalid version; -32600 `"required ACP protocol
            version R but peer negotiated N; …"` for any other version.
    """
    negotiated = result.get("protocolVersion") if type(result) is dict else None
    if type(negotiated) is not int or negotiated == required:
        validate_initialize_response(result, required)
        return
    if negotiated != required:
        raise JsonRpcError(
            INVALID_REQUEST,
            data=(
                f"required ACP protocol version {required} but peer negotiated {negotiated}; "
                "use a matching implementation for the negotiated protocol version"
            ),
        )


def invalid_initialize_result(reason: str) -> JsonRpcError:
    """The -32603 error a responder sends when its own initialize result is invalid."""
    return JsonRpcError(INTERNAL_ERROR, data=f"invalid initialize response: {reason}")


# ---------------------------------------------------------------------------------------
# §6.5: canonicalisation and v2 -> v1 normalisation of initialize params
# ---------------------------------------------------------------------------------------


def _implementation(value: Any) -> dict[str, Any] | None:
    if type(value) is not dict:
        return None
    return {k: value[k] for k in _IMPLEMENTATION_KEYS if k in value}


def canonicalize_v2_initialize(params: dict[str, Any], *, version: int = 2) -> dict[str, Any]:
    """`params` through the v2 `InitializeRequest` shape, tolerant like the schema.

    Unknown top-level and `info` fields are dropped; a malformed `capabilities` becomes
    `{}`; a non-object `_meta` is dropped; `protocolVersion` becomes `version`.
    """
    out: dict[str, Any] = {"protocolVersion": version}
    info = _implementation(params.get("info"))
    if info is not None:
        out["info"] = info
    caps = params.get("capabilities")
    out["capabilities"] = dict(caps) if type(caps) is dict else {}
    meta = params.get("_meta")
    if type(meta) is dict:
        out["_meta"] = meta
    return out


def canonicalize_v1_initialize(params: dict[str, Any]) -> dict[str, Any]:
    """`params` through the v1 `InitializeRequest` shape, with the schema defaults.

    Used to compare two v1 requests field by field (the connector's reuse probe).
    """
    out: dict[str, Any] = {"protocolVersion": params.get("protocolVersion")}
    caps = params.get("clientCapabilities")
    caps = {k: caps[k] for k in _V1_CAPABILITY_KEYS if k in caps} if type(caps) is dict else {}
    caps.setdefault("fs", {"readTextFile": False, "writeTextFile": False})
    caps.setdefault("terminal", False)
    auth = caps.get("auth")
    caps["auth"] = dict(auth) if type(auth) is dict else {}
    caps["auth"].setdefault("terminal", False)
    for key in ("session", "elicitation", "_meta"):
        if caps.get(key, 0) is None:
            del caps[key]
    out["clientCapabilities"] = caps
    info = _implementation(params.get("clientInfo"))
    if info is not None:
        out["clientInfo"] = info
    meta = params.get("_meta")
    if type(meta) is dict:
        out["_meta"] = meta
    return out


def normalize_v2_to_v1(params: dict[str, Any]) -> dict[str, Any]:
    """A v2 (or newer) `initialize` request as the v1 request a v1 implementation sees.

    protocol.md §6.5: canonicalise through v2; `protocolVersion` = 1; `info` ->
    `clientInfo`; `capabilities` -> `clientCapabilities` with the v2 object marker
    `auth.terminal: {…}` turned into the v1 boolean (its `_meta` dropped) and
    `session.configOptions.boolean` advertised; `fs`/`terminal` are never enabled.

    Examples:
        >>> normalize_v2_to_v1({"protocolVersion": 2, "info": {"name": "e", "version": "1"},
        ...                     "capabilities": {"auth": {"terminal": {}}}})["clientCapabilities"]["auth"]
        {'terminal': True}
    """
    v2 = canonicalize_v2_initialize(params)
    caps2 = v2["capabilities"]
    caps1: dict[str, Any] = {}
    auth2 = caps2.get("auth")
    auth1: dict[str, Any] = {"terminal": type(auth2) is dict and type(auth2.get("terminal")) is dict}
    if type(auth2) is dict and type(auth2.get("_meta")) is dict:
        auth1["_meta"] = auth2["_meta"]
    caps1["auth"] = auth1
    if type(caps2.get("elicitation")) is dict:
        caps1["elicitation"] = caps2["elicitation"]
    caps1["session"] = {"configOptions": {"boolean": {}}}
    if type(caps2.get("_meta")) is dict:
        caps1["_meta"] = caps2["_meta"]
    out: dict[str, Any] = {"protocolVersion": 1, "clientCapabilities": caps1}
    if "info" in v2:
        out["clientInfo"] = v2["info"]
    if "_meta" in v2:
        out["_meta"] = v2["_meta"]
    return out


def normalize_v2_to_v1_lossless(params: dict[str, Any]) -> dict[str, Any] | None:
    """[`normalize_v2_to_v1`][acp_fast.protocol.negotiation.normalize_v2_to_v1], or `None` when the normalisation would lose anything.

    Lossy: v2 canonicalisation changes a field (unknown keys, malformed capabilities), the
    `auth.terminal` marker carries `_meta`, or a capability has no v1 meaning. A lossy
    result only disables the client connector's connection reuse (protocol.md §6.6).
    """
    body = {k: v for k, v in params.items() if k != "protocolVersion"}
    canonical = canonicalize_v2_initialize(params)
    canonical_body = {k: v for k, v in canonical.items() if k != "protocolVersion"}
    if "capabilities" not in body and canonical_body.get("capabilities") == {}:
        del canonical_body["capabilities"]
    if body != canonical_body:
        return None
    caps = canonical.get("capabilities", {})
    if set(caps) - {"auth", "elicitation", "_meta"}:
        return None
    auth = caps.get("auth")
    if auth is not None:
        if type(auth) is not dict or set(auth) - {"terminal", "_meta"}:
            return None
        terminal = auth.get("terminal")
        if terminal is not None and (type(terminal) is not dict or terminal.get("_meta") is not None):
            return None
    return normalize_v2_to_v1(params)
