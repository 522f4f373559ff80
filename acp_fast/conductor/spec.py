"""Component specs (protocol.md §8.6): what a chain is made of.

A component is one of:

* a command spec string: shell words with leading `NAME=value` environment words, or JSON
  `{"command", "args"?, "env"?}` (parsed by [`acp_fast.transport.parse_command`][acp_fast.transport.parse_command]);
* an argv list (already split);
* a URL of a remote agent: `ws(s)://…` (WebSocket) or `http(s)://…` (Streamable HTTP),
  reached with [`acp_fast.remote.connect_url`][acp_fast.remote.connect_url] (the `remote` extra);
* an in-process builder (`Proxy.builder()` / `Proxy.v2()` / `Proxy.protocol_router()`
  for proxies, an agent builder or router for the agent), served over an in-memory pair.

A command that runs a module of acp_fast on this very interpreter (`python -m
acp_fast.conductor.passthrough`, with `python` this process's `sys.executable`) is started
so that it imports the same `acp_fast` as the conductor, whatever the working directory
(`same_acp_fast`): `python -m` would otherwise search the working directory first and,
run from a checkout of the sources, import the checkout's package instead.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import site
import sys
import sysconfig
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from ..transport import Stream, memory_pair, parse_command, spawn
from ..remote import is_url

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["SAFE_RUN_MODULE", "ComponentSpec", "Started", "describe", "known_versions", "same_acp_fast",
           "start_component", "validate"]

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
    """The protocol versions an in-process builder or router declares (`version` /
    `versions`); `None` for a command or URL, whose versions are only known once it answers."""
    if not _is_builder(spec):
        return None
    versions = getattr(spec, "versions", None)
    if isinstance(versions, tuple) and versions and all(type(v) is int for v in versions):
        return versions
    version = getattr(spec, "version", None)
    return (version,) if type(version) is int else None


#: ``python -c`` code that runs the module named by its first argument as ``python -m`` would,
#: without the working directory on ``sys.path`` (Python 3.10 has no ``-P``): it drops the
#: ``''`` entry ``-c`` puts first, then ``runpy`` runs the module as ``__main__``.
SAFE_RUN_MODULE = ("import sys,runpy;del sys.path[0];"
                   "runpy.run_module(sys.argv.pop(1),run_name='__main__',alter_sys=True)")
_FLAGS_WITH_VALUE = frozenset(("-X", "-W", "-Q"))


def _this_interpreter(command: str) -> bool:
    found = shutil.which(command)
    if found is None:
        return False
    here = os.path.abspath(sys.executable)
    there = os.path.abspath(found)
    # the same file in the same folder: a venv's python and python3 are one interpreter, while
    # the base interpreter a venv links to is another environment
    return os.path.dirname(there) == os.path.dirname(here) and os.path.samefile(there, here)


def _package_parent() -> str | None:
    """The folder holding this `acp_fast`, or `None` when it is one of the interpreter's
    site folders (a child finds it there by itself; on `PYTHONPATH` a site folder would
    come before the standard library)."""
    import acp_fast

    parent = os.path.dirname(os.path.dirname(os.path.abspath(acp_fast.__file__)))
    sites = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")} | set(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        sites.add(site.getusersitepackages())
    real = os.path.realpath(parent)
    return None if any(os.path.realpath(d) == real for d in sites) else parent


def _safe_path(flags: Sequence[str]) -> bool:
    """Whether the interpreter options hold `-P` or `-I` (alone or in a cluster like `-uP`)."""
    for flag in flags:
        if flag.startswith("--"):
            continue
        for letter in flag[1:]:
            if letter in "PI":
                return sys.version_info >= (3, 11) or letter == "I"
            if letter in "XWQ":
                break  # the rest of the cluster is that option's value
    return False


def same_acp_fast(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """`(argv, extra environment)` that make a command import this process's `acp_fast`.

    Only a command that runs a module of acp_fast (`-m acp_fast` or `-m acp_fast.…`) on
    this interpreter is changed; any other comes back as it is, with no extra environment.
    Such a command gets `-P` on Python ≥ 3.11 (nothing prepended to `sys.path`) or, on
    3.10, runs through `SAFE_RUN_MODULE` instead of `-m`; and, when this `acp_fast`
    is not in one of the interpreter's site folders (a source tree, `PYTHONPATH`), its
    parent folder goes first on `PYTHONPATH` (the rest kept after it).

    Args:
        argv: the command, split.
        env: the environment the command would get on top of this process's (its
            `PYTHONPATH` is kept after ours).
    """
    out = [str(a) for a in argv]
    if not out or not _this_interpreter(out[0]):
        return out, {}
    i, flags = 1, []
    while i < len(out) and out[i].startswith("-") and out[i] not in ("-", "-c", "-m") and not out[i].startswith("-m"):
        flags.append(out[i])
        i += 2 if out[i] in _FLAGS_WITH_VALUE else 1
    if i >= len(out) or not out[i].startswith("-m"):
        return out, {}  # a script, -c code or the REPL: not a module run
    module, rest = (out[i + 1], out[i + 2:]) if out[i] == "-m" and i + 1 < len(out) else (out[i][2:], out[i + 1:])
    if module != "acp_fast" and not module.startswith("acp_fast."):
        return out, {}
    if sys.version_info >= (3, 11):
        new = out if _safe_path(flags) else [out[0], "-P", *out[1:]]
    else:  # pragma: no cover - Python 3.10
        new = out if _safe_path(flags) else [*out[:i], "-c", SAFE_RUN_MODULE, module, *rest]
    extra: dict[str, str] = {}
    parent = _package_parent()
    if parent is not None:
        existing = (env or {}).get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        extra["PYTHONPATH"] = os.pathsep.join([parent, *(p for p in existing.split(os.pathsep) if p and p != parent)])
    return new, extra


@dataclass
class Started:
    """A running component: its stream and, for in-process builders, the serving task."""

    stream: Stream
    task: asyncio.Task[None] | None = None
    is_child: bool = False


async def start_component(spec: ComponentSpec, *, env: Mapping[str, str] | None = None,
                          engine: Engine | None = None, on_stderr: Callable[[bytes], None] | None = None) -> Started:
    """Start one component: spawn a child (own process group) or serve a builder in memory.

    `on_stderr` sees a child's stderr chunks (the transport keeps the tail either way).
    """
    if _is_builder(spec):
        near, far = memory_pair()
        builder: Any = spec
        task = asyncio.get_running_loop().create_task(builder.serve(far, engine=engine))
        return Started(near, task)
    if is_url(spec):
        from ..remote import connect_url

        return Started(await connect_url(str(spec).strip()), None, False)
    argv, spec_env = parse_command(spec)
    merged = {**spec_env, **(env or {})}
    argv, extra = same_acp_fast(argv, merged)
    stream = await spawn(argv, env={**merged, **extra} or None, on_stderr=on_stderr)
    return Started(stream, None, True)
