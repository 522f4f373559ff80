# Stub of the compiled read gate (acp_fast/protocol/_gate_c.pyx); its pure twin is
# WireSurface.known_variant. mypy.stubtest checks this stub against the built module in CI.
from typing import Any

from typing_extensions import disjoint_base

from acp_fast.protocol.surface import KnownVariant

@disjoint_base
class Gate:
    def __init__(self, specs: dict[str, tuple[KnownVariant, tuple[Any, ...], frozenset[str] | None]]) -> None: ...
    def known(self, update: Any) -> KnownVariant | None: ...
