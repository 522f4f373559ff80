#!/usr/bin/env python3
"""A pass-through ACP proxy: v1 and v2, no handlers, everything forwarded.

A proxy built with ``Proxy.builder()`` (v1) / ``Proxy.v2()`` and no handlers forwards every
request and notification from its predecessor to its successor and back, re-issues
``$/cancel_request`` per hop and relays ``session/update`` untouched: params and results
pass as raw bytes, never decoded (a handler added for a method gets that method's params
decoded). The exact-version router picks the implementation from ``_proxy/initialize``.
Run it in a chain::

    acp-fast conductor agent "python examples/proxies/passthrough.py" "acp-fast testy"
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("acp_fast") is None:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from acp_fast import Proxy, run_agent_stdio
from acp_fast.roles import ProxyRouter


def build() -> ProxyRouter:
    """The proxy (also usable in-process: ``Conductor([build(), "acp-fast testy"])``)."""
    return Proxy.protocol_router().with_v1(Proxy.builder()).with_v2(Proxy.v2())


if __name__ == "__main__":
    run_agent_stdio(build())
