"""The gateway: any stdio agent command served remotely, one child process per connection.

`acp-fast serve -- AGENT_CMD…` builds [`gateway_app`][acp_fast.remote.gateway.gateway_app]. Each remote connection (an HTTP
`initialize` or a WebSocket upgrade) starts its own child under the child-process policy of
[`acp_fast.transport.spawn`][acp_fast.transport.spawn] (its own process group, a bounded stderr tail, killed when the
connection ends: `DELETE`, the socket closing, the idle timeout or shutdown). A child's
stderr goes to the `acp_fast.remote` logger, never into an HTTP body.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..transport.child import spawn
from ..transport.stream import Stream
from ._wire import DEFAULT_PATH
from .policy import ServerPolicy
from .server import AcpApp, StreamOpener

if TYPE_CHECKING:
    from ..tracing import Tracing
    from .metrics import ServerMetrics

__all__ = ["command_opener", "gateway_app"]

logger = logging.getLogger("acp_fast.remote")


def gateway_app(command: str | Sequence[str], *, path: str = DEFAULT_PATH, policy: ServerPolicy | None = None,
                env: Mapping[str, str] | None = None, inherit_env: bool = True, cwd: str | None = None,
                metrics: ServerMetrics | None = None, trace_dir: str | os.PathLike[str] | None = None,
                otel: Tracing | None = None) -> AcpApp:
    """An ASGI app that starts `command` (a stdio ACP agent) for every remote connection.

    Args:
        command: a component spec string or an argv list (as [`acp_fast.transport.spawn`][acp_fast.transport.spawn]).
        path: the endpoint path.
        policy: limits and access rules.
        env: environment variables for the child, merged over the rest (as `spawn`).
        inherit_env: pass this process's environment on (default) or only `PATH`.
        cwd: the child's working directory.
        metrics: where to count what the server does (`None`: nowhere; see
            [`ServerMetrics`][acp_fast.remote.metrics.ServerMetrics]).
        trace_dir: where to write each connection's trace (see [`AcpApp`][acp_fast.remote.server.AcpApp]).
        otel: OpenTelemetry spans of the relayed requests, their context passed on to the
            agent (see [`AcpApp`][acp_fast.remote.server.AcpApp]; `acp-fast serve --otel`).
    """

    opener = command_opener(command, env=env, inherit_env=inherit_env, cwd=cwd)
    return AcpApp(opener, path=path, policy=policy, metrics=metrics, trace_dir=trace_dir, otel=otel)


def command_opener(command: str | Sequence[str], *, env: Mapping[str, str] | None = None,
                   inherit_env: bool = True, cwd: str | None = None) -> StreamOpener:
    """The opener that starts `command` as a child under the child-process policy per call
    (what [`gateway_app`][acp_fast.remote.gateway.gateway_app] serves; an agent host too). Arguments as [`gateway_app`][acp_fast.remote.gateway.gateway_app]."""

    def log_stderr(chunk: bytes) -> None:
        for line in chunk.decode("utf-8", "replace").splitlines():
            logger.debug("agent stderr: %s", line)

    async def opener() -> Stream:
        return await spawn(command, env=env, inherit_env=inherit_env, cwd=cwd, on_stderr=log_stderr)

    return opener
