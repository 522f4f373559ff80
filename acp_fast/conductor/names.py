"""The proxy-chain method names in one table (protocol.md §8.1).

Two spellings exist: the reference implementation's extension names ``_proxy/initialize`` /
``_proxy/successor`` (``"underscore"``, the default: acp_fast's own proxies and the Rust SDK's
accept nothing else) and the spec RFD's ``proxy/initialize`` / ``proxy/successor``
(``"spec"``). The conductor accepts both from every component and answers each component in
the spelling it last used; what it emits before a component has spoken is the
``proxy_methods`` option.
"""

from __future__ import annotations

__all__ = [
    "CANCEL",
    "INITIALIZE",
    "PROXY_INITIALIZE",
    "PROXY_METHODS",
    "SPELLINGS",
    "SUCCESSOR",
    "proxy_initialize_for",
]

INITIALIZE = "initialize"
CANCEL = "$/cancel_request"

#: spelling option -> (initialize method, successor method)
SPELLINGS: dict[str, tuple[str, str]] = {
    "underscore": ("_proxy/initialize", "_proxy/successor"),
    "spec": ("proxy/initialize", "proxy/successor"),
}
#: the accepted names (both spellings) of each proxy method
PROXY_INITIALIZE = frozenset(s[0] for s in SPELLINGS.values())
SUCCESSOR = frozenset(s[1] for s in SPELLINGS.values())
PROXY_METHODS = tuple(SPELLINGS)

_INIT_FOR_SUCCESSOR = {succ: init for init, succ in SPELLINGS.values()}


def proxy_initialize_for(successor_method: str) -> str:
    """The initialize name of the spelling that ``successor_method`` belongs to."""
    return _INIT_FOR_SUCCESSOR[successor_method]
