"""Typed ACP method descriptors: a method's name plus its params and result types.

A descriptor names one method of one protocol version and carries, for the type
checker, the `TypedDict` of its params (`P`) and of its result (`R`):

```python
from acp_fast.protocol import methods_v2 as methods

methods.session.prompt          # RequestMethod[PromptRequest, PromptResponse]
methods.session.cancel          # NotificationMethod[CancelSessionNotification]
str(methods.session.prompt)     # "session/prompt"
```

The per-version modules `methods_v1` / `methods_v2` are generated from the ACP
schemas by `scripts/gen_surfaces.py` (same data as the wire-surface tables); this
module holds the hand-written runtime classes they instantiate.

Kinds are separate classes so that a request descriptor cannot be passed where a
notification is expected (and back): `RequestMethod[P, R]` and
`NotificationMethod[P]` (a `Method[P, None]`) share the base [`Method`][acp_fast.protocol.methods.Method].

Runtime cost is one small slotted object per method: the generated modules import the
schema types only under `TYPE_CHECKING`, and `params_type` / `result_type`
hold the type *names* (strings), resolvable with
`getattr(acp_fast.protocol.types_v2, m.params_type)` where a class is needed.
"""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

__all__ = ["Method", "NotificationMethod", "RequestMethod"]

P = TypeVar("P")
R = TypeVar("R")

Kind = Literal["request", "notification"]


class Method(Generic[P, R]):
    """A typed ACP method: name, kind, version; `P` / `R` are its params / result types.

    Read-only; equal (and hashed) by `(name, kind, version)`. `str()` is the wire
    method name, so a descriptor works wherever a method name is expected via `str(m)`.
    """

    __slots__ = ("_name", "_kind", "_version", "_params_type", "_result_type")

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
        self._name = name
        self._kind: Kind = kind
        self._version = version
        self._params_type = params_type
        self._result_type = result_type

    @property
    def name(self) -> str:
        """The wire method name, e.g. `"session/prompt"`."""
        return self._name

    @property
    def kind(self) -> Kind:
        """`"request"` or `"notification"`."""
        return self._kind

    @property
    def version(self) -> int:
        """The ACP protocol version this descriptor belongs to."""
        return self._version

    @property
    def params_type(self) -> str:
        """Name of the params type in `acp_fast.protocol.types_v<version>`."""
        return self._params_type

    @property
    def result_type(self) -> str | None:
        """Name of the result type there; `None` for a notification."""
        return self._result_type

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        result = f" -> {self.result_type}" if self.result_type is not None else ""
        return f"<{self.kind} {self.name!r} v{self.version}: {self.params_type}{result}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Method):
            return NotImplemented
        return (self._name, self._kind, self._version) == (
            other._name,
            other._kind,
            other._version,
        )

    def __hash__(self) -> int:
        return hash((self._name, self._kind, self._version))


class RequestMethod(Method[P, R]):
    """A request method: the handler gets `P` and answers with `R`."""

    __slots__ = ()

    def __init__(self, name: str, version: int, params_type: str, result_type: str) -> None:
        super().__init__(name, "request", version, params_type, result_type)


class NotificationMethod(Method[P, None]):
    """A notification method: the handler gets `P` and answers nothing."""

    __slots__ = ()

    def __init__(self, name: str, version: int, params_type: str) -> None:
        super().__init__(name, "notification", version, params_type, None)

