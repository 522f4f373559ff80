"""Typed ACP method descriptors: a method's name plus its params and result types.

A descriptor names one method of one protocol version and carries, for the type
checker, the ``TypedDict`` of its params (``P``) and of its result (``R``)::

    from acp_fast.protocol import methods_v2 as methods

    methods.session.prompt          # RequestMethod[PromptRequest, PromptResponse]
    methods.session.cancel          # NotificationMethod[CancelSessionNotification]
    str(methods.session.prompt)     # "session/prompt"

The per-version modules ``methods_v1`` / ``methods_v2`` are generated from the ACP
schemas by ``scripts/gen_surfaces.py`` (same data as the wire-surface tables); this
module holds the hand-written runtime classes they instantiate.

Kinds are separate classes so that a request descriptor cannot be passed where a
notification is expected (and back): ``RequestMethod[P, R]`` and
``NotificationMethod[P]`` (a ``Method[P, None]``) share the base :class:`Method`.

Runtime cost is one small object per method: the generated modules import the
schema types only under ``TYPE_CHECKING``, and ``params_type`` / ``result_type``
hold the type *names* (strings), resolvable with
``getattr(acp_fast.protocol.types_v2, m.params_type)`` where a class is needed.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, NoReturn, TypeVar

__all__ = ["Method", "NotificationMethod", "RequestMethod"]

P = TypeVar("P")
R = TypeVar("R")

Kind = Literal["request", "notification"]


class Method(Generic[P, R]):
    """A typed ACP method: name, kind, version; ``P`` / ``R`` are its params / result types.

    Immutable; equal (and hashed) by ``(name, kind, version)``. ``str()`` is the wire
    method name, so a descriptor works wherever a method name is expected via ``str(m)``.
    """

    __slots__ = ("name", "kind", "version", "params_type", "result_type")

    name: str
    kind: Kind
    version: int
    params_type: str
    result_type: str | None

    def __init__(
        self,
        name: str,
        kind: Kind,
        version: int,
        params_type: str,
        result_type: str | None,
    ) -> None:
        if kind not in ("request", "notification"):
            raise ValueError(f"kind must be 'request' or 'notification', not {kind!r}")
        if (kind == "notification") != (result_type is None):
            raise ValueError(f"{name}: a request has a result type, a notification none")
        setattr_ = object.__setattr__
        setattr_(self, "name", name)
        setattr_(self, "kind", kind)
        setattr_(self, "version", version)
        setattr_(self, "params_type", params_type)
        setattr_(self, "result_type", result_type)

    def __setattr__(self, key: str, value: Any) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, key: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        result = f" -> {self.result_type}" if self.result_type is not None else ""
        return f"<{self.kind} {self.name!r} v{self.version}: {self.params_type}{result}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Method):
            return NotImplemented
        return (self.name, self.kind, self.version) == (other.name, other.kind, other.version)

    def __hash__(self) -> int:
        return hash((self.name, self.kind, self.version))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Method, (self.name, self.kind, self.version, self.params_type, self.result_type))


class RequestMethod(Method[P, R]):
    """A request method: the handler gets ``P`` and answers with ``R``."""

    __slots__ = ()

    def __init__(self, name: str, version: int, params_type: str, result_type: str) -> None:
        super().__init__(name, "request", version, params_type, result_type)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RequestMethod, (self.name, self.version, self.params_type, self.result_type))


class NotificationMethod(Method[P, None]):
    """A notification method: the handler gets ``P`` and answers nothing."""

    __slots__ = ()

    def __init__(self, name: str, version: int, params_type: str) -> None:
        super().__init__(name, "notification", version, params_type, None)

    def __reduce__(self) -> tuple[Any, ...]:
        return (NotificationMethod, (self.name, self.version, self.params_type))
