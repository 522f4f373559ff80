"""The per-message hot path of the builder API (pure twin; also the compiled twin's source).

What runs once per received message between the JSON-RPC connection and the user's
handler: the records a handler sees (their storage: ``Context`` and ``SessionUpdate`` in
:mod:`acp_fast.roles.context` add the behaviour) and the small callables the connection
installs in its per-method tables when it becomes ready.

This file is the pure-Python twin and, unchanged, the source of the compiled twin:
``setup.py`` compiles it with Cython as ``acp_fast.roles._hot_c``, where the augmenting
declarations in ``_hot_c.pxd`` make the classes C types with C-level fields. Keep it plain
Python that Cython accepts (no ``from __future__ import annotations``-only syntax, no
closures in the classes). :mod:`acp_fast.roles._hot` selects the twin.
"""

from typing import Any

__all__ = ["ContextRecord", "NotificationHandler", "RequestHandler", "UpdateDispatcher", "UpdateRecord"]

_STATE_UPDATE = "state_update"


class ContextRecord:
    """``connection``, ``request``, ``message``: the storage of a handler's ``cx``."""

    __slots__ = ("connection", "message", "request")

    def __init__(self, connection: Any, request: Any, message: Any) -> None:
        self.connection = connection
        self.request = request
        self.message = message


class UpdateRecord:
    """``session_id``, ``kind``, ``payload``, ``params`` and the gate's verdict ``_gate``."""

    __slots__ = ("_gate", "kind", "params", "payload", "session_id")

    def __init__(self, session_id: Any, kind: Any, payload: Any, params: Any, gate: Any) -> None:
        self.session_id = session_id
        self.kind = kind
        self.payload = payload
        self.params = params
        self._gate = gate


class RequestHandler:
    """Installed per request method: ``handler(params, Context(connection, rctx, message))``."""

    __slots__ = ("connection", "context_type", "handler")

    def __init__(self, connection: Any, handler: Any, context_type: Any) -> None:
        self.connection = connection
        self.handler = handler
        self.context_type = context_type

    def __call__(self, rctx: Any) -> Any:
        message = rctx.message
        return self.handler(message.params, self.context_type(self.connection, rctx, message))


class NotificationHandler:
    """Installed per notification method: ``handler(params, Context(connection, None, message))``."""

    __slots__ = ("connection", "context_type", "handler")

    def __init__(self, connection: Any, handler: Any, context_type: Any) -> None:
        self.connection = connection
        self.handler = handler
        self.context_type = context_type

    def __call__(self, message: Any) -> Any:
        return self.handler(message.params, self.context_type(self.connection, None, message))


class UpdateDispatcher:
    """``session/update``: the read gate, session-state tracking, then the handler.

    A known update (the fast path ``known(update)`` returns its variant) becomes a
    ``SessionUpdate`` carrying the variant; anything else goes through ``classify`` (the
    full read gate) and carries its view. Known ``state_update`` payloads are applied to
    the session states (``apply_state``) before the handler sees them. The handler is
    ``on_update(event, cx)``, else ``fallback(params, cx)`` (a plain notification handler).
    """

    __slots__ = ("apply_state", "classify", "connection", "context_type", "event_type",
                 "fallback", "known", "on_update")

    def __init__(self, connection: Any, known: Any, classify: Any, apply_state: Any, on_update: Any,
                 fallback: Any, event_type: Any, context_type: Any) -> None:
        self.connection = connection
        self.known = known
        self.classify = classify
        self.apply_state = apply_state
        self.on_update = on_update
        self.fallback = fallback
        self.event_type = event_type
        self.context_type = context_type

    def __call__(self, message: Any) -> Any:
        params = message.params
        if type(params) is dict:
            update = params.get("update")
            session_id = params.get("sessionId")
            variant = self.known(update)
        else:
            update = None
            session_id = None
            variant = None
        if variant is not None:
            kind = variant.kind
            event = self.event_type(session_id, kind, update, params, variant)
            if kind == _STATE_UPDATE:
                self.apply_state(session_id, update)
        else:
            view = self.classify(update)
            event = self.event_type(session_id, view.kind, update, params, view)
            if view.kind == _STATE_UPDATE and view.known:
                self.apply_state(session_id, update)
        context = self.context_type(self.connection, None, message)
        if self.on_update is not None:
            return self.on_update(event, context)
        if self.fallback is not None:
            return self.fallback(params, context)
        return None
