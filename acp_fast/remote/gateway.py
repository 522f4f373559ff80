"""The gateway: any stdio agent command served remotely, one child process per connection.

``acp-fast serve -- AGENT_CMD…`` builds :func:`gateway_app`. Each remote connection (an HTTP
``initialize`` or a WebSocket upgrade) starts its own child under the child-process policy of
:func:`acp_fast.transport.spawn` (its own process group, a bounded stderr tail, killed when the
connection ends: ``DELETE``, the socket closing, the idle timeout or shutdown). A child's
stderr goes to the ``acp_fast.remote`` logger, never into an HTTP body.

For ``uvicorn --workers N`` the app is built in each worker by :func:`app_from_env` from the
JSON in :data:`CONFIG_ENV`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..transport.child import spawn
from ..transport.stream import Stream
from ._wire import DEFAULT_PATH
from .policy import ServerPolicy
from .server import AcpApp

__all__ = ["CONFIG_ENV", "app_from_env", "gateway_app", "testy_app"]

logger = logging.getLogger("acp_fast.remote")

#: Environment variable carrying a worker's app configuration (JSON), see :func:`app_from_env`.
CONFIG_ENV = "ACP_FAST_SERVE_CONFIG"


def gateway_app(command: str | Sequence[str], *, path: str = DEFAULT_PATH, policy: ServerPolicy | None = None,
                env: Mapping[str, str] | None = None, inherit_env: bool = True, cwd: str | None = None) -> AcpApp:
    """An ASGI app that starts ``command`` (a stdio ACP agent) for every remote connection.

    Args:
        command: a component spec string or an argv list (as :func:`acp_fast.transport.spawn`).
        path: the endpoint path.
        policy: limits and access rules.
        env: environment variables for the child, merged over the rest (as ``spawn``).
        inherit_env: pass this process's environment on (default) or only ``PATH``.
        cwd: the child's working directory.
    """

    def log_stderr(chunk: bytes) -> None:
        for line in chunk.decode("utf-8", "replace").splitlines():
            logger.debug("agent stderr: %s", line)

    async def opener() -> Stream:
        return await spawn(command, env=env, inherit_env=inherit_env, cwd=cwd, on_stderr=log_stderr)

    return AcpApp(opener, path=path, policy=policy)


def testy_app(*, versions: str = "1,2", path: str = DEFAULT_PATH, policy: ServerPolicy | None = None,
              engine: Any = None) -> AcpApp:
    """Testy (the deterministic test agent) served in-process, one instance per connection."""
    from ..testy import build, parse_versions
    from .server import asgi_app

    endpoint = build(parse_versions(versions))
    return asgi_app(endpoint, path=path, policy=policy, engine=engine)


def app_from_env() -> AcpApp:
    """Build the app described by :data:`CONFIG_ENV` (a factory for ``uvicorn --factory``).

    The JSON object holds ``command`` (argv list) or ``testy`` (versions string), ``path``,
    and the :class:`ServerPolicy` fields ``token_env`` (the name of the variable holding the
    token, never the token itself), ``allow_hosts``, ``allow_origins``, ``max_body``,
    ``max_connections``, ``idle_timeout``.
    """
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise RuntimeError(f"{CONFIG_ENV} is not set: start workers with `acp-fast serve --workers N`")
    cfg = json.loads(raw)
    policy = policy_from_config(cfg)
    if cfg.get("testy") is not None:
        return testy_app(versions=cfg["testy"], path=cfg.get("path", DEFAULT_PATH), policy=policy)
    return gateway_app(cfg["command"], path=cfg.get("path", DEFAULT_PATH), policy=policy)


def policy_from_config(cfg: Mapping[str, Any]) -> ServerPolicy:
    """The :class:`ServerPolicy` of a serve configuration (see :func:`app_from_env`)."""
    kwargs: dict[str, Any] = {}
    token_env = cfg.get("token_env")
    if token_env:
        token = os.environ.get(token_env)
        if not token:
            raise RuntimeError(f"--token-env {token_env}: that environment variable is empty or unset")
        kwargs["token"] = token
    for name in ("allow_hosts", "allow_origins"):
        if cfg.get(name):
            kwargs[name] = tuple(cfg[name])
    for name in ("max_body", "max_connections", "idle_timeout"):
        if cfg.get(name) is not None:
            kwargs[name] = cfg[name]
    return ServerPolicy(**kwargs)
