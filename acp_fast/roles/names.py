"""Which method names a handler may be registered for: checked when it is registered.

A handler registered under a misspelled method name would never run, and nothing would
say so; so the builders (and [`add_dynamic_handler`][acp_fast.roles.AcpConnection.add_dynamic_handler])
refuse a name that the implementation's ACP version does not define for the messages it
receives, and the error names the nearest name that is defined.

The rule, per ACP version, role and kind (`"request"` / `"notification"`):

* a name starting with `_` is an extension method (ACP's extension namespace): always
  accepted;
* any other name must be a method of that kind in the version's wire surface
  ([`WireSurface`][acp_fast.protocol.surface.WireSurface], unstable entries included) that the
  receiving side implements: the *agent* side for agents, and for a proxy's handlers of
  messages from its predecessor (which also gets the *proxy* methods, `proxy/initialize`
  and `proxy/successor`); the *client* side for clients, and for a proxy's handlers of
  messages from its successor; the *protocol* methods (`$/cancel_request`: a
  notification handler there observes the cancellations the connection already applies)
  on every side. Other `$/` names are refused like any other unknown name.

Registration is off the per-message path: the allowed names are computed once per
`(version, role, kind, from_successor)`.
"""

from __future__ import annotations

import difflib
import functools

from ..protocol.negotiation import SUPPORTED_VERSIONS
from ..protocol.surface import WireSurface

__all__ = ["check_handler_method", "handled_methods"]

#: which method sides a handler of each receiving position implements
_SIDES = {
    ("agent", False): frozenset({"agent", "protocol"}),
    ("client", False): frozenset({"client", "protocol"}),
    ("proxy", False): frozenset({"agent", "proxy", "protocol"}),
    ("proxy", True): frozenset({"client", "protocol"}),
}

_WHO = {
    ("agent", False): "an agent",
    ("client", False): "a client",
    ("proxy", False): "a proxy (from its predecessor)",
    ("proxy", True): "a proxy (from its successor)",
}


@functools.lru_cache(maxsize=None)
def handled_methods(version: int, role: str, kind: str, from_successor: bool = False) -> frozenset[str]:
    """The method names (without extensions) a handler of `kind` may be registered for.

    Args:
        version: the implementation's ACP version.
        role: `"agent"`, `"client"` or `"proxy"`.
        kind: `"request"` or `"notification"`.
        from_successor: a proxy's handlers of messages from its successor.

    Raises:
        ValueError: an unknown `role`/`from_successor` pair or `kind`.
    """
    sides = _SIDES.get((role, from_successor))
    if sides is None:
        raise ValueError(f"no handlers of {role!r} messages (from_successor={from_successor})")
    if kind not in ("request", "notification"):
        raise ValueError(f"kind must be 'request' or 'notification', not {kind!r}")
    surface = WireSurface.for_version(version)
    out = set()
    for name in surface.methods:
        info = surface.method_info(name, kind)
        if info is not None and info.side in sides:
            out.add(name)
    return frozenset(out)


def check_handler_method(method: str, *, version: int, role: str, kind: str,
                         from_successor: bool = False) -> str:
    """`method` when a handler of `kind` may be registered for it (see the module docstring).

    Returns:
        `method`, unchanged.

    Raises:
        ValueError: `method` does not start with `_` and is not a `kind` this side
            receives in ACP `version`; the message names the nearest name that is, and
            what `method` is where it is defined otherwise.
    """
    if method[:1] == "_":
        return method
    allowed = handled_methods(version, role, kind, from_successor)
    if method in allowed:
        return method
    who = _WHO[(role, from_successor)]
    message = f"{method!r} is not an ACP v{version} {kind} that {who} receives"
    reason = _why(method, version, kind)
    if reason:
        message += f" ({reason})"
    near = difflib.get_close_matches(method, sorted(allowed), n=1)
    if near:
        message += f"; did you mean {near[0]!r}?"
    message += " (extension method names start with '_')"
    raise ValueError(message)


def _why(method: str, version: int, kind: str) -> str:
    """Where `method` is defined, when it is defined somewhere else than asked."""
    surface = WireSurface.for_version(version)
    info = surface.method_info(method)
    if info is not None:
        if surface.method_info(method, kind) is None:
            return f"it is a {info.kind}"
        return f"the {info.side} side handles it"
    other = [v for v in SUPPORTED_VERSIONS if v != version and WireSurface.for_version(v).has_method(method)]
    if other:
        return f"it is an ACP v{other[0]} method"
    return ""
