"""Named types for JSON payloads: what the public API says where it takes or gives JSON.

ACP messages are JSON-RPC objects whose `params` and `result` are JSON values. Where a
signature holds such a payload it says so with one of these names instead of a bare `Any`:

| name | what it holds |
|---|---|
| `Json` | any JSON value as decoded (`dict`, `list`, `str`, `int`, `float`, `bool`, `None`), or a [`RawJson`][acp_fast.engine.RawJson] kept undecoded |
| `JsonObject` | a JSON object (`params` of every ACP method, most results) |
| `JsonArray` | a JSON array (a JSON-RPC batch, positional `params`) |
| `RequestId` | a JSON-RPC request id (`int` or `str`; `None` only in error replies) |

`Json` is deliberately open (it is `Any` to a type checker): a payload's shape is the
schema type of its method (`acp_fast.protocol.types_v1` / `types_v2`), which the typed
method descriptors (`acp_fast.protocol.methods_v2.session.prompt`) give handlers; a value
read off the wire before it is checked is only known to be JSON.
"""

from __future__ import annotations

from typing import Any, TypeAlias, Union

__all__ = ["Json", "JsonArray", "JsonObject", "RequestId"]

#: Any JSON value (see the module docstring); open to the type checker.
Json: TypeAlias = Any
#: A JSON object: ``params`` of every ACP method and most results.
JsonObject: TypeAlias = dict[str, Any]
#: A JSON array.
JsonArray: TypeAlias = list[Any]
#: A JSON-RPC request id.
RequestId: TypeAlias = Union[int, str]
