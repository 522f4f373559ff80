#!/usr/bin/env python3
"""A prompt-rewriting ACP proxy: rewrites the text of every ``session/prompt``.

Each text block of the prompt is passed through :func:`rewrite` (by default: a prefix from
``ACP_PROMPT_PREFIX``, ``"echo "`` if unset, so Testy echoes the prompt back) before the
prompt goes to the successor; the agent's answer comes back unchanged. In a chain::

    acp-fast conductor agent "ACP_PROMPT_PREFIX='echo [rewritten] ' python examples/proxies/prompt_rewriter.py" "acp-fast testy"
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, TypeVar

if importlib.util.find_spec("acp_fast") is None:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from acp_fast import Proxy, run_agent_stdio
from acp_fast.roles import V1, V2, ProxyBuilder, ProxyContext, ProxyRouter

#: a v1 or a v2 proxy builder (the handlers below serve both)
B = TypeVar("B", ProxyBuilder[V1], ProxyBuilder[V2])


def rewrite(text: str, prefix: str) -> str:
    return prefix + text


def add_rewriter(proxy: B, prefix: str) -> B:
    """Register the rewriting ``session/prompt`` handler on ``proxy`` (v1 or v2)."""

    async def prompt(params: Any, cx: ProxyContext) -> Any:
        blocks = [dict(b, text=rewrite(b["text"], prefix)) if b.get("type") == "text" else b
                  for b in params.get("prompt", [])]
        pending = cx.send_to_successor("session/prompt", dict(params, prompt=blocks), passthrough=True)
        try:
            return await cx.run_until_cancelled(pending)
        finally:
            if not pending.done():  # cancelled upstream: cancel the successor's request too
                pending.cancel()

    proxy.on_request("session/prompt", prompt)
    return proxy


def build(prefix: str | None = None) -> ProxyRouter:
    p = os.environ.get("ACP_PROMPT_PREFIX", "echo ") if prefix is None else prefix
    return (Proxy.protocol_router()
            .with_v1(add_rewriter(Proxy.builder(), p))
            .with_v2(add_rewriter(Proxy.v2(), p)))


if __name__ == "__main__":
    run_agent_stdio(build())
