"""Proxy chains: the conductor (protocol.md §8; issue 10).

One idea per module:

| module | what it holds |
|---|---|
| `chain` | [`Conductor`][acp_fast.conductor.Conductor]: lazy instantiation, version pinning, routing on raw bytes |
| `selection` | how the chain's protocol version is selected (probing, restarts, pinning) |
| `spec` | component specs (§8.6): command strings, JSON, argv lists, builders |
| `names` | the proxy-method names, both spellings, in one table |
| `trace` | `--trace`: JSONL events, one per hop message (§8.7.38) |
| `trace_view` | `acp-fast trace view|summary`: a self-contained HTML sequence diagram of a trace (page assets in `viewer/`), and per-component/method counts |
| `debug` | `--debug`: every component's stdin/stdout/stderr lines in one log (§8.7.37) |
| `passthrough` | a packaged pass-through proxy (`python -m acp_fast.conductor.passthrough`) |
| `mcp_polyfill` | the MCP-over-ACP compatibility polyfill as a chain component (`python -m acp_fast.conductor.mcp_polyfill`) |

The command line is `acp-fast conductor [--trace PATH] [--proxy-methods underscore|spec]
[--protocol-version 1|2] agent "PROXY"… "AGENT"` (or `proxy "PROXY"…` for a nested chain);
a trace written with `--trace PATH` is viewed with `acp-fast trace view PATH -o trace.html`.
"""

from __future__ import annotations

from .chain import MODES, Conductor
from .debug import DebugLog
from .names import PROXY_METHODS, SPELLINGS
from .spec import ComponentSpec
from .trace import Tracer

__all__ = ["MODES", "PROXY_METHODS", "SPELLINGS", "ComponentSpec", "Conductor", "DebugLog", "Tracer"]
