"""The conductor's short names for the proxy-chain facts of `acp_fast.protocol.facts`.

Kept as a re-export, not a table of its own: the conductor's code reads `names.SUCCESSOR`,
`names.CANCEL` and its `proxy_methods` option is documented as `SPELLINGS` /
`PROXY_METHODS` (re-exported by `acp_fast.conductor`), while every string is spelled once,
in `acp_fast.protocol.facts` (protocol.md §8.1).

Two spellings exist: the reference implementation's extension names `_proxy/initialize` /
`_proxy/successor` (`"underscore"`, the default: acp_fast's own proxies and the Rust SDK's
accept nothing else) and the spec RFD's `proxy/initialize` / `proxy/successor` (`"spec"`).
The conductor accepts both from every component and answers each component in the spelling
it last used; what it emits before a component has spoken is the `proxy_methods` option.
"""

from __future__ import annotations

from typing import Final

from ..protocol.facts import CANCEL_REQUEST as CANCEL
from ..protocol.facts import INITIALIZE
from ..protocol.facts import PROXY_INITIALIZE_METHODS as PROXY_INITIALIZE
from ..protocol.facts import PROXY_INITIALIZE_SPEC
from ..protocol.facts import PROXY_SPELLINGS as SPELLINGS
from ..protocol.facts import SUCCESSOR_METHODS as SUCCESSOR
from ..protocol.facts import proxy_initialize_for

__all__ = [
    "CANCEL",
    "INITIALIZE",
    "PROXY_INITIALIZE",
    "PROXY_INITIALIZE_SPEC",
    "PROXY_METHODS",
    "SPELLINGS",
    "SUCCESSOR",
    "proxy_initialize_for",
]

#: the values of the conductor's `proxy_methods` option
PROXY_METHODS: Final = tuple(SPELLINGS)
