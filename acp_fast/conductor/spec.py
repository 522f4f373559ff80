"""Component specs (protocol.md §8.6): what a chain is made of.

A component is one of:

* a command spec string: shell words with leading ``NAME=value`` environment words, or JSON
  ``{"command", "args"?, "env"?}`` (parsed by :func:`acp_fast.transport.parse_command`);
* an argv list (already split);
* a URL of a remote agent: ``ws(s)://…`` (WebSocket) or ``http(s)://…`` (Streamable HTTP),
  reached with :func:`acp_fast.transport.remote.connect_url` (the ``remote`` extra);
* an in-process builder (``Proxy.builder()`` / ``Proxy.v2()`` / ``Proxy.protocol_router()``
  for proxies, an agent builder or router for the agent), served over an in-memory pair.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Union

from ..transport import Stream, memory_pair, parse_command, spawn
from ..transport.remote import is_url

__all__ = ["ComponentSpec", "Started", "describe", "known_versions", "start_component", "validate"]

ComponentSpec = Union[str, Sequence[str], Any]


def _is_builder(spec: Any) -> bool:
    return hasattr(spec, "serve") and not isinstance(spec, (str, bytes))


def validate(spec: ComponentSpec) -> ComponentSpec:
    """Check a spec early (a command string must parse); returns it unchanged.

    Raises:
        ValueError: an unparsable command spec.
        TypeError: neither a command nor a builder.
    """
    if _is_builder(spec) or is_url(spec):
        return spec
    if isinstance(spec, str) or (isinstance(spec, Sequence) and not isinstance(spec, bytes)):
        parse_command(spec)
        return spec
    raise TypeError(f"a chain component is a command spec or a builder, not {spec!r}")


def describe(spec: ComponentSpec) -> str:
    """A short label for logs and the debug header."""
    if _is_builder(spec):
        return f"<in-process {type(spec).__name__}>"
    if isinstance(spec, str):
        return spec
    return " ".join(str(a) for a in spec)


def known_versions(spec: ComponentSpec) -> tuple[int, ...] | None:
    """The protocol versions an in-process builder or router declares (``version`` /
    ``versions``); ``None`` for a command or URL, whose versions are only known once it answers."""
    if not _is_builder(spec):
        return None
    versions = getattr(spec, "versions", None)
    if isinstance(versions, tuple) and versions and all(type(v) is int for v in versions):
        return versions
    version = getattr(spec, "version", None)
    return (version,) if type(version) is int else None


@dataclass
class Started:
    """A running component: its stream and, for in-process builders, the serving task."""

    stream: Stream
    task: asyncio.Task[None] | None = None
    is_child: bool = False


async def start_component(spec: ComponentSpec, *, env: Mapping[str, str] | None = None,
                          engine: ModuleType | None = None, on_stderr: Callable[[bytes], None] | None = None) -> Started:
    """Start one component: spawn a child (own process group) or serve a builder in memory.

    ``on_stderr`` sees a child's stderr chunks (the transport keeps the tail either way).
    """
    if _is_builder(spec):
        near, far = memory_pair()
        builder: Any = spec
        task = asyncio.get_running_loop().create_task(builder.serve(far, engine=engine))
        return Started(near, task)
    if is_url(spec):
        from ..transport.remote import connect_url

        return Started(await connect_url(str(spec).strip()), None, False)
    stream = await spawn(spec, env=dict(env) if env else None, on_stderr=on_stderr)
    return Started(stream, None, True)
