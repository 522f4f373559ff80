"""Switch code written for the SDK onto a drop-in from outside, without editing it.

For code you cannot (or do not want to) edit, such as the SDK's own examples and tests:
[`install`][acp_fast.compat.acp_sdk.activate.install] replaces the SDK's entry points in its modules (`acp`, `acp.core`,
`acp.stdio`, `acp.connection`) with a drop-in's, so code that imports them *afterwards*
(`from acp import run_agent`) gets the drop-in. Two ways to apply it:

* in-process, before the code imports the SDK:

  ```python
  import acp_fast.compat.acp_sdk.activate as activate
  activate.install("connection")          # or "transport"
  ```

* for a whole process tree, from the environment: put a `sitecustomize.py` containing
  `from acp_fast.compat.acp_sdk.activate import install_from_env; install_from_env()`
  on `PYTHONPATH` and set `ACP_FAST_SDK_DROPIN=connection` (or `transport`); every
  Python process started with that environment switches (child processes inherit it when
  their environment is passed on): at once if it has imported `acp` already, else as its
  `import acp` finishes, so a process that never imports the SDK does not pay for it.

Modes:

* `"transport"`: the transport drop-in ([`acp_fast.compat.acp_sdk`][acp_fast.compat.acp_sdk]): `run_agent`
  serves stdio through [`StreamTransport`][acp_fast.compat.acp_sdk.StreamTransport], `spawn_agent_process` /
  `spawn_client_process` are acp_fast's, `connect_to_agent` and the two connection
  classes wrap an asyncio stream pair in a [`StreamTransport`][acp_fast.compat.acp_sdk.StreamTransport]; the SDK's
  `Connection` stays the SDK's.
* `"connection"`: the connection drop-in ([`acp_fast.compat.acp_sdk.fast`][acp_fast.compat.acp_sdk.fast]):
  `run_agent`, `connect_to_agent`, `spawn_*_process`, `AgentSideConnection`,
  `ClientSideConnection` and `Connection` are replaced; so are the SDK's remote entry
  points, `acp.http.asgi.create_asgi_app`, `acp.http.create_http_stream` and
  `acp.ws.create_websocket_stream` (`acp_fast.compat.acp_sdk.remote`), each as
  its module is imported (the transport drop-in leaves them alone).

Activating costs (close to) nothing on top of `import acp`: [`install`][acp_fast.compat.acp_sdk.activate.install] imports no
module of the SDK that `import acp` does not import itself, and none of acp_fast's
connection, transports, child-process or loop modules (nor uvloop); the replacements are the
real functions and classes, and they import those modules on first use (the first
connection made, the first `run_agent`/`spawn_*` call). Only `import acp_fast` itself
(the engine selector and the errors) is paid at once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .originals import original, remember

if TYPE_CHECKING:
    import asyncio
    from importlib.machinery import ModuleSpec
    from types import ModuleType

    from acp import Agent, Client
    from acp.client.connection import ClientSideConnection
    from typing_extensions import Unpack

    from ._types import SdkConnectionOptions, SdkStream

__all__ = ["ENV", "MODES", "install", "install_from_env", "installed", "original"]

#: The environment variable :func:`install_from_env` reads.
ENV = "ACP_FAST_SDK_DROPIN"
#: The modes :func:`install` accepts.
MODES = ("transport", "connection")

_installed: list[str] = []


def installed() -> str | None:
    """The installed mode, or `None`."""
    return _installed[0] if _installed else None


def _transport_entry_points() -> dict[str, object]:
    import asyncio

    from acp.agent.connection import AgentSideConnection
    from acp.client.connection import ClientSideConnection

    from .connect import run_agent, spawn_agent_process, spawn_client_process

    def _wrap(input_stream: SdkStream, output_stream: asyncio.StreamReader | None
              ) -> tuple[SdkStream, asyncio.StreamReader | None]:
        if isinstance(input_stream, asyncio.StreamWriter) and isinstance(output_stream, asyncio.StreamReader):
            from ._streams import AsyncioStream
            from .transport import StreamTransport

            return StreamTransport(AsyncioStream(input_stream, output_stream)), None
        return input_stream, output_stream

    class TransportAgentSideConnection(AgentSideConnection):  # type: ignore[misc]
        def __init__(self, to_agent: Callable[[Client], Agent] | Agent, input_stream: SdkStream,
                     output_stream: asyncio.StreamReader | None = None, listening: bool = True, *,
                     use_unstable_protocol: bool = False, **kwargs: Unpack[SdkConnectionOptions]) -> None:
            super().__init__(to_agent, *_wrap(input_stream, output_stream), listening,
                             use_unstable_protocol=use_unstable_protocol, **kwargs)

    class TransportClientSideConnection(ClientSideConnection):  # type: ignore[misc]
        def __init__(self, to_client: Callable[[Agent], Client] | Client, input_stream: SdkStream,
                     output_stream: asyncio.StreamReader | None = None, *, use_unstable_protocol: bool = False,
                     **kwargs: Unpack[SdkConnectionOptions]) -> None:
            super().__init__(to_client, *_wrap(input_stream, output_stream),
                             use_unstable_protocol=use_unstable_protocol, **kwargs)

    def connect_to_agent(client: Client, input_stream: SdkStream, output_stream: asyncio.StreamReader | None = None,
                         *, use_unstable_protocol: bool = False,
                         **kwargs: Unpack[SdkConnectionOptions]) -> ClientSideConnection:
        return TransportClientSideConnection(client, input_stream, output_stream,
                                             use_unstable_protocol=use_unstable_protocol, **kwargs)

    return {
        "run_agent": run_agent,
        "connect_to_agent": connect_to_agent,
        "spawn_agent_process": spawn_agent_process,
        "spawn_client_process": spawn_client_process,
        "AgentSideConnection": TransportAgentSideConnection,
        "ClientSideConnection": TransportClientSideConnection,
    }


def _connection_entry_points() -> dict[str, object]:
    from . import fast

    return {
        "run_agent": fast.run_agent,
        "connect_to_agent": fast.connect_to_agent,
        "spawn_agent_process": fast.spawn_agent_process,
        "spawn_client_process": fast.spawn_client_process,
        "AgentSideConnection": fast.AgentSideConnection,
        "ClientSideConnection": fast.ClientSideConnection,
        "Connection": fast.Connection,
    }


def install(mode: str) -> None:
    """Replace the SDK's entry points with the drop-in `mode` (`"transport"`/`"connection"`).

    Idempotent for the same mode. Code that already imported a name keeps the old object.

    Raises:
        ValueError: an unknown mode, or another mode is already installed.
    """
    if mode not in MODES:
        raise ValueError(f"unknown drop-in mode {mode!r}; expected one of {MODES}")
    if _installed:
        if _installed[0] != mode:
            raise ValueError(f"drop-in {_installed[0]!r} is already installed")
        return
    import acp
    import acp.connection
    import acp.core
    import acp.stdio

    if _installed:  # importing acp just now ran install_from_env's pending install
        if _installed[0] != mode:
            raise ValueError(f"drop-in {_installed[0]!r} is already installed")
        return
    names = _transport_entry_points() if mode == "transport" else _connection_entry_points()
    for module in (acp, acp.core, acp.stdio, acp.connection):
        for name, value in names.items():
            if name in vars(module):
                remember(name, vars(module)[name])
                setattr(module, name, value)
    if mode == "connection":  # the transport drop-in leaves the SDK's remote API alone
        _install_remote()
    _installed.append(mode)


class _AfterImport:
    """A `sys.meta_path` entry: calls `then(module)` once the module `name` has run.

    It finds nothing itself: for `name` it removes itself, asks the other finders for the
    spec and wraps its loader's `exec_module` so that `then` runs right after the module
    (and the submodules it imports) executed, before the importer sees it.
    """

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = None if spec is None else spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        then = self.then

        def exec_then(module: ModuleType) -> None:
            exec_module(module)
            then(module)

        setattr(loader, "exec_module", exec_then)  # noqa: B010 - an instance attribute, mypy-clean
        return spec


class _InstallOnImport(_AfterImport):
    """[`install`][acp_fast.compat.acp_sdk.activate.install] `mode` once the SDK's package `acp` has run (see `_AfterImport`)."""

    def __init__(self, mode: str) -> None:
        super().__init__("acp", lambda module: install(mode))
        self.mode = mode


#: The SDK's remote entry points the connection drop-in replaces, by module
#: (:mod:`.remote` holds the replacements under the same names).
REMOTE_ENTRY_POINTS = {
    "acp.http.asgi": ("create_asgi_app",),
    "acp.http.client": ("create_http_stream",),
    "acp.ws.client": ("create_websocket_stream",),
}


def _replace_remote(module: ModuleType) -> None:
    """Replace `module`'s remote entry points with `remote`'s (the SDK's are remembered
    as `"<module>.<name>"` without the `acp.` prefix)."""
    from . import remote

    for name in REMOTE_ENTRY_POINTS[module.__name__]:
        if name in vars(module):
            remember(f"{module.__name__[4:]}.{name}", vars(module)[name])
            setattr(module, name, getattr(remote, name))


def _install_remote() -> None:
    """The remote entry points: replaced at once in the SDK's modules already imported, else
    as each one's import finishes (a program that never serves nor dials pays nothing)."""
    for name in REMOTE_ENTRY_POINTS:
        module = sys.modules.get(name)
        if module is not None:
            _replace_remote(module)
        elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(name, _replace_remote))


def install_from_env() -> str | None:
    """[`install`][acp_fast.compat.acp_sdk.activate.install] the mode named by `$ACP_FAST_SDK_DROPIN` (nothing when unset or empty).

    When `acp` is not imported yet, nothing is imported now: the drop-in is installed as
    the process's own `import acp` finishes ([`installed`][acp_fast.compat.acp_sdk.activate.installed] is `None` until then).
    Returns the mode.

    Raises:
        ValueError: an unknown mode.
    """
    mode = os.environ.get(ENV, "").strip()
    if not mode:
        return None
    if mode not in MODES:
        raise ValueError(f"unknown drop-in mode {mode!r} in ${ENV}; expected one of {MODES}")
    if "acp" in sys.modules or _installed:
        install(mode)
    elif not any(isinstance(finder, _InstallOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _InstallOnImport(mode))
    return mode
