"""Proxy chains: the conductor (protocol.md §8; issue 10).

One idea per module:

==============  ==========================================================================
``chain``       :class:`Conductor`: lazy instantiation, version pinning, routing on raw bytes
``spec``        component specs (§8.6): command strings, JSON, argv lists, builders
``names``       the proxy-method names, both spellings, in one table
``trace``       ``--trace``: JSONL events, one per hop message (§8.7.38)
``debug``       ``--debug``: every component's stdin/stdout/stderr lines in one log (§8.7.37)
==============  ==========================================================================

The command line is ``acp-fast conductor [--trace PATH] [--proxy-methods underscore|spec]
agent "PROXY"… "AGENT"`` (or ``proxy "PROXY"…`` for a nested chain).
"""

from __future__ import annotations

from .chain import MODES, Conductor
from .debug import DebugLog
from .names import PROXY_METHODS, SPELLINGS
from .spec import ComponentSpec
from .trace import Tracer

__all__ = ["MODES", "PROXY_METHODS", "SPELLINGS", "ComponentSpec", "Conductor", "DebugLog", "Tracer"]
