# Stub of the compiled read gate (acp_fast/protocol/_gate_c.pyx); its pure twin is
# WireSurface.known_variant. mypy.stubtest checks this stub against the built module in CI.
from typing import Any, final

from acp_fast.protocol.surface import KnownVariant

@final
class Gate:
    def __init__(self, specs: dict[str, tuple[KnownVariant, tuple[Any, ...], frozenset[str] | None]]) -> None: ...
    def known(self, update: Any) -> KnownVariant | None: ...
