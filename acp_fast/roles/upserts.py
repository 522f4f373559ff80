"""v2 upsert patches (seed 000, schema 1.12): how a stored entity takes one update.

[`apply_upsert`][acp_fast.roles.apply_upsert] applies one upsert update (`tool_call_update`,
`agent_message` …) to the stored entity; [`apply_meta_update`][acp_fast.roles.apply_meta_update]
its top-level `_meta` patch. Part of the session helpers
([`acp_fast.roles.sessions`][acp_fast.roles.sessions]).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..jsontypes import Json, JsonObject

__all__ = ["apply_meta_update", "apply_upsert"]


def apply_meta_update(current: JsonObject | None, patch: Json) -> JsonObject | None:
    """The stored `_meta` after a v2 upsert's top-level `_meta` patch (seed 000).

    An omitted `_meta` leaves it unchanged (do not call); `None` (`null`) clears it; an object keeps the keys it omits, removes the
    keys whose value is `None` and replaces every other value whole (nested objects are
    not merged, nested nulls are data). An empty object changes nothing.

    Example:
        >>> apply_meta_update({"a": 1, "b": {"x": 1}}, {"a": None, "b": {"y": None}, "c": 3})
        {'b': {'y': None}, 'c': 3}
        >>> apply_meta_update({"a": 1}, None) is None
        True
    """
    if patch is None:
        return None
    if type(patch) is not dict:
        return current  # a malformed patch is not applied
    out = dict(current or {})
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out if out or current is not None else None


def apply_upsert(stored: Mapping[str, Json] | None, update: Mapping[str, Json]) -> JsonObject:
    """The entity after one v2 upsert update (`tool_call_update`, `agent_message` …):
    an omitted field is unchanged, `null` clears it, a value replaces it whole (arrays
    too); `_meta` follows [`apply_meta_update`][acp_fast.roles.apply_meta_update]; `sessionUpdate` is not stored.

    Example:
        >>> apply_upsert({"toolCallId": "t", "name": "read", "status": "pending"},
        ...              {"sessionUpdate": "tool_call_update", "toolCallId": "t", "name": None,
        ...               "status": "completed"})
        {'toolCallId': 't', 'status': 'completed'}
    """
    out = dict(stored or {})
    for key, value in update.items():
        if key == "sessionUpdate":
            continue
        if key == "_meta":
            meta = apply_meta_update(out.get("_meta"), value)
            if meta is None:
                out.pop("_meta", None)
            else:
                out["_meta"] = meta
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out
