"""Ready-made transports (stdio, sockets), the child-process context managers and `run_agent`.

Each `*_transport()` returns a [`StreamTransport`][acp_fast.compat.acp_sdk.transport.StreamTransport] at once (no `await`):
its stream is opened on first use inside the running loop, so it fits the SDK's calls as
an argument:

```python
await acp.run_agent(MyAgent(), stdio_transport())
conn = acp.connect_to_agent(MyClient(), tcp_transport("127.0.0.1", 8765))
```

The SDK's `spawn_agent_process` / `spawn_client_process` take no transport, so their
equivalents live here with the same parameters; `run_agent` here is the SDK's with the
stdio default switched to acp_fast.

Importing this module imports nothing of acp_fast's engine, connection or transports (nor
the SDK): the functions import them when called, so that [`activate`][acp_fast.compat.acp_sdk.activate] costs (almost)
nothing at import.
"""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .originals import original

if TYPE_CHECKING:
    import asyncio

    from acp import Agent, Client
    from acp.agent.connection import AgentSideConnection
    from acp.client.connection import ClientSideConnection
    from typing_extensions import Unpack

    from ...transport import ChildStream
    from ._types import SdkConnectionOptions, SdkStream
    from .transport import StreamTransport, TransportOptions

__all__ = [
    "TESTED_SDK_VERSIONS",
    "ChildProcess",
    "check_sdk_version",
    "run_agent",
    "spawn_agent_process",
    "spawn_client_process",
    "spawn_stream",
    "spawn_transport",
    "stdio_transport",
    "tcp_transport",
    "unix_transport",
]

#: The ``agent-client-protocol`` releases the drop-ins are tested with (re-exported by the
#: package; :func:`check_sdk_version` warns for any other).
TESTED_SDK_VERSIONS = ("0.12.1",)


def stdio_transport(**options: Unpack[TransportOptions]) -> StreamTransport:
    """This process's stdin/stdout (the agent's side); `options` go to [`StreamTransport`][acp_fast.compat.acp_sdk.StreamTransport].

    Regular files, `/dev/null` and closed descriptors work too (see
    [`acp_fast.transport.connect_stdio`][acp_fast.transport.connect_stdio]).
    """
    from ...transport import connect_stdio
    from .transport import StreamTransport

    return StreamTransport(connect_stdio, **options)


def tcp_transport(host: str, port: int, **options: Unpack[TransportOptions]) -> StreamTransport:
    """A TCP connection to `host:port`, made on first use (no authentication on either end).

    For the accepting side, wrap each stream of [`acp_fast.transport.serve_tcp`][acp_fast.transport.serve_tcp] in
    [`StreamTransport`][acp_fast.compat.acp_sdk.StreamTransport].
    """
    from ...transport import connect_tcp
    from .transport import StreamTransport

    return StreamTransport(lambda: connect_tcp(host, port), **options)


def unix_transport(path: str | os.PathLike[str], **options: Unpack[TransportOptions]) -> StreamTransport:
    """A Unix-domain stream socket connection to `path`, made on first use."""
    from ...transport import connect_unix
    from .transport import StreamTransport

    return StreamTransport(lambda: connect_unix(path), **options)


class ChildProcess:
    """The child of [`spawn_agent_process`][acp_fast.compat.acp_sdk.connect.spawn_agent_process]: the part of `asyncio.subprocess.Process` it needs.

    `pid`, `returncode`, `await wait()`, `send_signal`, `terminate`, `kill`; the
    child's stderr is drained for you (`stderr_tail` holds its newest bytes), so there is
    no `stdin`/`stdout`/`stderr` stream to read (the connection owns stdin/stdout).
    """

    def __init__(self, stream: ChildStream) -> None:
        self._stream = stream

    @property
    def pid(self) -> int:
        """The child's pid (also its process-group id)."""
        assert self._stream.pid is not None
        return self._stream.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the child exited, else `None`."""
        return self._stream.returncode

    @property
    def stderr_tail(self) -> bytes:
        """The newest bytes the child wrote to stderr."""
        return self._stream.stderr_tail

    async def wait(self) -> int:
        """Wait for the child to exit; returns its exit status."""
        await self._stream.wait_exit()
        assert self._stream.returncode is not None
        return self._stream.returncode

    def send_signal(self, sig: int) -> None:
        """Send signal `sig` to the child (nothing once it has exited)."""
        if self._stream.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        """Send `SIGTERM` to the child (nothing once it has exited)."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """Send `SIGKILL` to the child (nothing once it has exited)."""
        self.send_signal(signal.SIGKILL)

    def __repr__(self) -> str:
        return f"<ChildProcess pid={self._stream.pid} returncode={self._stream.returncode}>"


_warned_version: list[str] = []


def check_sdk_version() -> str:
    """The installed SDK's version; warns once (`RuntimeWarning`) if it is not a tested one."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("agent-client-protocol")
    except PackageNotFoundError:  # pragma: no cover - acp importable from a source tree
        return "unknown"
    if installed not in TESTED_SDK_VERSIONS and installed not in _warned_version:
        _warned_version.append(installed)
        warnings.warn(f"acp_fast.compat.acp_sdk is tested with agent-client-protocol "
                      f"{', '.join(TESTED_SDK_VERSIONS)}, not {installed}", RuntimeWarning, stacklevel=3)
    return installed


def _options(transport_options: TransportOptions | None, connection_kwargs: SdkConnectionOptions) -> TransportOptions:
    """Transport options; `receive_timeout` moves here (the SDK ignores it for a Transport)."""
    options: TransportOptions = {**transport_options} if transport_options else {}
    if "receive_timeout" in connection_kwargs:
        options.setdefault("receive_timeout", connection_kwargs.pop("receive_timeout"))
    return options


_TRANSPORT_KWARGS = frozenset(("stderr", "limit", "shutdown_timeout"))


async def spawn_transport(
    command: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    transport_kwargs: Mapping[str, object] | None = None,
    **options: Unpack[TransportOptions],
) -> tuple[StreamTransport, ChildProcess]:
    """Start `command *args` with the SDK's environment rules; a transport over its stdio.

    The child's environment is what the SDK's `spawn_stdio_transport` gives it: the
    SDK's `default_environment()` (`HOME`, `PATH`, `SHELL`, ... only) with `env`
    over it. `transport_kwargs` takes the SDK's keys: `limit` (the line limit, here a
    bound that never raises), `shutdown_timeout` (seconds the child gets after its stdin
    is closed before its process group is killed; the SDK's default 2.0); `stderr` is
    accepted and ignored (stderr is always drained; see [`ChildProcess.stderr_tail`][acp_fast.compat.acp_sdk.connect.ChildProcess.stderr_tail]).
    `options` go to [`StreamTransport`][acp_fast.compat.acp_sdk.StreamTransport].
    """
    from .transport import StreamTransport

    stream, limit = await spawn_stream(command, *args, env=env, cwd=cwd, transport_kwargs=transport_kwargs)
    if limit is not None:
        options.setdefault("max_line_size", limit)
    return StreamTransport(stream, **options), ChildProcess(stream)


async def spawn_stream(
    command: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    transport_kwargs: Mapping[str, object] | None = None,
) -> tuple[ChildStream, int | None]:
    """Start `command *args` as [`spawn_transport`][acp_fast.compat.acp_sdk.connect.spawn_transport] does; its stream and the `limit` key.

    Nothing is attached to the stream: the caller gives it to one consumer.
    """
    from acp.transports import default_environment

    from ...transport import spawn

    extra: dict[str, Any] = dict(transport_kwargs or {})  # the SDK's keys, its values unchecked
    unknown = set(extra) - _TRANSPORT_KWARGS
    if unknown:
        raise TypeError(f"unsupported transport_kwargs: {sorted(unknown)}")
    merged = default_environment()
    if env:
        merged.update(env)
    stream = await spawn([command, *args], env=merged, inherit_env=False, cwd=cwd,
                         grace=float(extra.get("shutdown_timeout", 2.0)))
    return stream, extra.get("limit")


@asynccontextmanager
async def spawn_agent_process(
    to_client: Callable[[Agent], Client] | Client,
    command: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    transport_kwargs: Mapping[str, object] | None = None,
    transport_options: TransportOptions | None = None,
    **connection_kwargs: Unpack[SdkConnectionOptions],
) -> AsyncIterator[tuple[ClientSideConnection, ChildProcess]]:
    """`acp.spawn_agent_process` on acp_fast: yields `(ClientSideConnection, ChildProcess)`.

    Same parameters as the SDK's; `transport_options` go to [`StreamTransport`][acp_fast.compat.acp_sdk.StreamTransport].
    On exit the connection is closed, then the child's stdin; it gets
    `shutdown_timeout` seconds to exit before its whole process group is killed.
    """
    import acp

    check_sdk_version()
    transport, process = await spawn_transport(command, *args, env=env, cwd=cwd, transport_kwargs=transport_kwargs,
                                               **_options(transport_options, connection_kwargs))
    # ``to_client`` may be a factory, which the SDK's ClientSideConnection (behind connect_to_agent) takes too
    conn = acp.connect_to_agent(to_client, transport, **connection_kwargs)  # type: ignore[arg-type]
    try:
        yield conn, process
    finally:
        await conn.close()


@asynccontextmanager
async def spawn_client_process(
    to_agent: Callable[[Client], Agent] | Agent,
    command: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    transport_kwargs: Mapping[str, object] | None = None,
    transport_options: TransportOptions | None = None,
    **connection_kwargs: Unpack[SdkConnectionOptions],
) -> AsyncIterator[tuple[AgentSideConnection, ChildProcess]]:
    """`acp.spawn_client_process` on acp_fast: yields `(AgentSideConnection, ChildProcess)`."""
    from acp.core import AgentSideConnection as _AgentSideConnection  # as the SDK's own spawn_client_process

    check_sdk_version()
    transport, process = await spawn_transport(command, *args, env=env, cwd=cwd, transport_kwargs=transport_kwargs,
                                               **_options(transport_options, connection_kwargs))
    conn = _AgentSideConnection(to_agent, transport, **connection_kwargs)
    try:
        yield conn, process
    finally:
        await conn.close()


async def run_agent(
    agent: Agent,
    input_stream: SdkStream | None = None,
    output_stream: asyncio.StreamReader | None = None,
    *,
    use_unstable_protocol: bool = False,
    stdio_buffer_limit_bytes: int | None = None,
    transport_options: TransportOptions | None = None,
    **connection_kwargs: Unpack[SdkConnectionOptions],
) -> None:
    """`acp.run_agent` with acp_fast's stdio: the same call, the same parameters.

    Without streams it serves the agent on [`stdio_transport`][acp_fast.compat.acp_sdk.connect.stdio_transport] (`receive_timeout` is
    honoured by the transport). `stdio_buffer_limit_bytes` is then accepted and not a
    bound: in the SDK (0.12) it is the read-buffer size, which longer lines pass anyway (its
    own tests send a 70 KiB line with 1 KiB); the line bound is
    `transport_options={"max_line_size": ...}` (default: the engine's 64 MiB). Given
    streams or a transport, it is exactly the SDK's `run_agent`.
    """
    check_sdk_version()
    kwargs: dict[str, object] = {}
    if input_stream is None and output_stream is None:
        options = _options(transport_options, connection_kwargs)
        input_stream = stdio_transport(**options)
    elif stdio_buffer_limit_bytes is not None:
        kwargs["stdio_buffer_limit_bytes"] = stdio_buffer_limit_bytes
    # the SDK's own, also when activate.install() replaced acp.run_agent
    sdk_run_agent = cast("Callable[..., Awaitable[None]]", original("run_agent"))
    await sdk_run_agent(agent, input_stream, output_stream, use_unstable_protocol=use_unstable_protocol,
                        **connection_kwargs, **kwargs)

