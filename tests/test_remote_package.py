"""The remote package's own shape: typed public signatures, method lists derived from the protocol."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator

import acp_fast.remote as remote

#: public signatures that still name ``Any``: ``name -> why``; the list only shrinks
ALLOWED_ANY: dict[str, str] = {}


def _public_callables() -> Iterator[tuple[str, Callable[..., object]]]:
    for name in remote.__all__:
        obj = getattr(remote, name)
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if inspect.isfunction(member) and (not attr.startswith("_") or attr in ("__init__", "__call__")):
                    yield f"{name}.{attr}", member
        elif inspect.isfunction(obj):  # not the type aliases (StreamOpener)
            yield name, obj


def test_no_any_in_public_signatures() -> None:
    seen, found = set(), {}
    for name, func in _public_callables():
        seen.add(name)
        text = str(inspect.signature(func))
        if re.search(r"\bAny\b", text):
            found[name] = text
    assert {"asgi_app", "gateway_app", "AcpApp.__init__", "AccessGuard.__init__", "connect_url"} <= seen
    assert found.keys() == ALLOWED_ANY.keys(), found


def test_one_id_key_for_server_and_client() -> None:
    """Server and client key in-flight requests by one function: ``1`` and ``"1"`` are two
    requests, and an id decoded as a ``str`` subclass finds the request keyed by a plain one."""
    from acp_fast.remote import _wire, server
    from acp_fast.remote.client import _http

    class Decoded(str):
        pass

    assert server.id_key is _http.id_key is _wire.id_key
    assert _wire.id_key(1) != _wire.id_key("1")
    routes = {_wire.id_key("a"): "session"}
    assert routes.get(_wire.id_key(Decoded("a"))) == "session"
