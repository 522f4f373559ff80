"""Errors raised by `acp_fast.protocol`.

These are local errors: they report a programming mistake on this side of the
connection (building a message the negotiated protocol version cannot carry)
and are never sent to the peer as they are.
"""

from __future__ import annotations

from ..errors import AcpFastError

__all__ = ["WireSurfaceError"]


class WireSurfaceError(AcpFastError):
    """An outgoing method or variant is not defined in the negotiated ACP version.

    Attributes:
        variant: the offending method name or discriminator value
            (e.g. `"state_update"`, `"terminal/create"`).
        version: the negotiated ACP protocol version (1 or 2).
    """

    def __init__(self, message: str, *, variant: str, version: int) -> None:
        super().__init__(message)
        self.variant = variant
        self.version = version
