"""A packaged pass-through proxy: `python -m acp_fast.conductor.passthrough [--loop L] [--engine E]`.

The same proxy as `examples/proxies/passthrough.py` (the examples are not installed with
the package): `Proxy.builder()` (v1) and `Proxy.v2()` with no handlers behind
`Proxy.protocol_router()`, which picks one from the `_proxy/initialize` version. Every
request and notification is forwarded both ways, `$/cancel_request` is re-issued per hop,
`session/update` is relayed untouched. Nothing it forwards is decoded: its connection
decodes lazily and the params and results pass as raw bytes (see
`acp_fast.roles.proxy` for what the pass-through path validates). It is the proxy of
the `acp-fast bench` chain rows:

```bash
acp-fast conductor agent "python -m acp_fast.conductor.passthrough" "acp-fast testy"
```
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..roles import EngineChoice, Proxy, ProxyRouter

__all__ = ["build", "main"]


def build() -> ProxyRouter:
    """The proxy (also usable in-process: `Conductor([build(), "acp-fast testy"])`)."""
    return Proxy.protocol_router().with_v1(Proxy.builder()).with_v2(Proxy.v2())


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the proxy on stdio until EOF; returns the exit status."""
    from ..cli.loops import LOOPS
    from ..roles import run_agent_stdio

    p = argparse.ArgumentParser(prog="python -m acp_fast.conductor.passthrough",
                                description="A pass-through ACP proxy (v1 and v2) on stdio.")
    p.add_argument("--loop", choices=LOOPS, default="auto", help="event loop (default: auto, uvloop when installed)")
    p.add_argument("--engine", choices=("auto", "c", "py"), default="auto",
                   help="engine twin (default: auto, the compiled one unless ACP_FAST_NO_EXTENSIONS=1)")
    args = p.parse_args(argv)
    engines: dict[str, EngineChoice] = {"auto": None, "c": "c", "py": "py"}
    run_agent_stdio(build(), engine=engines[args.engine], loop=args.loop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
