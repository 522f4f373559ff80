#!/usr/bin/env python3
"""A logging ACP proxy: one stderr line per prompt turn and per session update it relays.

It handles ``session/prompt`` from the client side (logs it, forwards it to the successor,
cascades ``$/cancel_request``) and ``session/update`` from the agent side (logs the update
kind, relays it verbatim); everything else passes through. Set ``ACP_PROXY_LOG=path`` to log
to a file instead of stderr. In a chain::

    acp-fast conductor agent "python examples/proxies/logger.py" "acp-fast testy"
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, TextIO, TypeVar

if importlib.util.find_spec("acp_fast") is None:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from acp_fast import Proxy, run_agent_stdio
from acp_fast.jsontypes import JsonObject
from acp_fast.roles import V1, V2, ProxyBuilder, ProxyContext, ProxyRouter

#: a v1 or a v2 proxy builder (the handlers below serve both)
B = TypeVar("B", ProxyBuilder[V1], ProxyBuilder[V2])


def _out() -> TextIO:
    path = os.environ.get("ACP_PROXY_LOG")
    return open(path, "a", encoding="utf-8", buffering=1) if path else sys.stderr


def add_logging(proxy: B, out: TextIO) -> B:
    """Register the logging handlers on ``proxy`` (v1 or v2)."""

    async def prompt(params: Any, cx: ProxyContext) -> Any:
        print(f"proxy: session/prompt {params.get('sessionId')}", file=out)
        pending = cx.send_to_successor("session/prompt", params, passthrough=True)
        try:
            return await cx.run_until_cancelled(pending)
        finally:
            if not pending.done():  # cancelled upstream: cancel the successor's request too
                pending.cancel()

    def update(params: JsonObject, cx: ProxyContext) -> None:
        kind = params.get("update", {}).get("sessionUpdate")
        print(f"proxy: session/update {kind}", file=out)
        cx.send_notification("session/update", params, passthrough=True)

    proxy.on_request("session/prompt", prompt)
    proxy.on_successor_notification("session/update", update)
    return proxy


def build(out: TextIO | None = None) -> ProxyRouter:
    sink = out or _out()
    return (Proxy.protocol_router()
            .with_v1(add_logging(Proxy.builder(), sink))
            .with_v2(add_logging(Proxy.v2(), sink)))


if __name__ == "__main__":
    run_agent_stdio(build())
