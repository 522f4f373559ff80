"""The remote package's own shape: typed public signatures, method lists derived from the protocol."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

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


def test_session_scoped_methods_are_the_generated_table_and_the_documented_extras() -> None:
    """The server's list is the schemas' table plus a few methods the schemas lack; an extra
    the schemas come to scope leaves the extras (the table then has it)."""
    from acp_fast.protocol._session_scope import SESSION_SCOPED
    from acp_fast.remote import _wire

    assert _wire.SESSION_SCOPED_METHODS == frozenset(SESSION_SCOPED) | _wire.EXTRA_SESSION_SCOPED_METHODS
    assert not _wire.EXTRA_SESSION_SCOPED_METHODS & frozenset(SESSION_SCOPED)
    assert "session/set_model" in _wire.SESSION_SCOPED_METHODS
    assert {"session/set_title", "tool_call/cancel"} <= _wire.SESSION_SCOPED_METHODS


def test_session_scope_agrees_with_a_derivation_of_its_own(schema_dir: Path) -> None:
    # The generated session-scoped table (scripts/gen_surfaces.py; tests/test_protocol_surfaces.py
    # checks the committed file is what it writes) against the schemas read directly: every
    # ``...Request`` / ``...Notification`` def the agent implements (``x-side``) whose
    # ``required`` names ``sessionId``, per version.
    from acp_fast.protocol._session_scope import SESSION_SCOPED

    derived: dict[str, set[int]] = {}
    for version in (1, 2):
        defs = json.loads((schema_dir / f"v{version}" / "schema.unstable.json").read_text())["$defs"]
        for name, node in defs.items():
            if (node.get("x-method") and node.get("x-side") == "agent" and not name.endswith("Response")
                    and "sessionId" in node.get("required", ())):
                derived.setdefault(node["x-method"], set()).add(version)
    assert "session/prompt" in derived and "session/new" not in derived
    assert {m: set(v) for m, v in SESSION_SCOPED.items()} == derived
