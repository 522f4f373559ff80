"""JSON-RPC messages as dicts, for tests that script a peer by hand (one definition for all)."""

from __future__ import annotations

from typing import Any

__all__ = ["err", "note", "ok", "req"]


def req(ident: Any, method: str, params: Any = None) -> dict[str, Any]:
    """A request; ``params`` omitted when ``None``."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def note(method: str, params: Any = None) -> dict[str, Any]:
    """A notification; ``params`` omitted when ``None``."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def ok(ident: Any, result: Any) -> dict[str, Any]:
    """A success response."""
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def err(ident: Any, code: int, message: str, *data: Any) -> dict[str, Any]:
    """An error response; ``data`` included when given (even ``None``)."""
    e: dict[str, Any] = {"code": code, "message": message}
    if data:
        e["data"] = data[0]
    return {"jsonrpc": "2.0", "id": ident, "error": e}
