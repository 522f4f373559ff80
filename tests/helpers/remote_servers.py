"""The ASGI servers the remote tests run on (not a test module).

A remote test module takes the ``asgi_server`` fixture (registered for every module by
``tests/conftest.py``) and passes it to :func:`~acp_fast.remote.served`::

    def test_something(asgi_server: str) -> None:
        async def main() -> None:
            async with served(app, server=asgi_server) as where: ...

and runs once on each server of :data:`SERVERS` (ids ``uvicorn``, ``hypercorn``, ``granian``).
A server that is not installed is a missing peer (``tests/helpers/peer_rule.py``): skipped on
a developer's machine, a failure where the peers are required (CI). :data:`HTTP2_SERVERS` are
the ones that speak HTTP/2 (``http2_server`` fixture). ``ACP_FAST_TEST_SERVERS=uvicorn,granian``
narrows both lists.

Where a server is known to differ from what the app asks of it, :data:`GAPS` says so, and
the tests assert the difference (so that a server release that closes the gap fails the test
until the entry goes):

* ``ws-accept-headers``: the headers of ``websocket.accept`` (``Acp-Connection-Id`` and
  ``Acp-Batch-Frames`` on the 101) are not sent; granian 2.8 sends only the subprotocol;
* ``ws-fragmented-over-limit``: a WebSocket message over the size limit sent in fragments
  is never closed with 1009: hypercorn 0.18 stops reading the socket (a stuck connection,
  no more memory held).

Not a test here, measured by hand (the report of the server comparison): granian hands the
app a WebSocket message only once it is whole, up to its own 64 MiB bound whatever the
app's limit (a 64 MB fragmented message: the server process's peak RSS 173 MiB against
36 MiB on uvicorn and 38 MiB on hypercorn).
"""

from __future__ import annotations

import importlib.util
import os

import peer_rule
import pytest

from acp_fast.remote import runner
from acp_fast.remote.runner import DEFAULT_SERVER

__all__ = ["DEFAULT_SERVER", "GAPS", "HTTP2_SERVERS", "SERVERS", "asgi_server", "has_gap", "http2_server",
           "require_server"]

#: ``ACP_FAST_TEST_SERVERS`` (comma-separated) narrows the servers the tests run on (CI's smoke
#: runs of the installed wheels, say); unset, every server.
_ONLY = [s for s in os.environ.get("ACP_FAST_TEST_SERVERS", "").split(",") if s.strip()]
for _name in _ONLY:
    if _name not in runner.SERVERS:
        raise ValueError(f"ACP_FAST_TEST_SERVERS names {_name!r}: one of {', '.join(runner.SERVERS)}")
#: The servers the remote tests run on.
SERVERS = tuple(s for s in runner.SERVERS if not _ONLY or s in _ONLY)

#: The servers that speak HTTP/2 (h2c with prior knowledge, and over TLS by ALPN).
HTTP2_SERVERS = tuple(s for s in SERVERS if s != "uvicorn")

#: server -> the gaps it has (see the module's text).
GAPS: dict[str, frozenset[str]] = {"granian": frozenset({"ws-accept-headers"}),
                                   "hypercorn": frozenset({"ws-fragmented-over-limit"})}


def has_gap(server: str, gap: str) -> bool:
    """Whether ``server`` has the known ``gap`` (a key of the module's list)."""
    return gap in GAPS.get(server, frozenset())


def require_server(server: str) -> str:
    """``server``, once its package is importable; else :func:`peer_rule.missing`."""
    if importlib.util.find_spec(server) is None:
        peer_rule.missing("asgi-server", f"the ASGI server {server!r} is not installed")
    return server


@pytest.fixture(params=SERVERS)
def asgi_server(request: pytest.FixtureRequest) -> str:
    """Each ASGI server of :data:`SERVERS` in turn (a missing one: the peer rule)."""
    return require_server(str(request.param))


@pytest.fixture(params=HTTP2_SERVERS)
def http2_server(request: pytest.FixtureRequest) -> str:
    """Each ASGI server that speaks HTTP/2 in turn (a missing one: the peer rule)."""
    return require_server(str(request.param))
