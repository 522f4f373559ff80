"""The applications `acp-fast serve` builds: Testy in-process, and a worker's app from its config.

`testy_app` serves Testy (the deterministic test agent) in-process, one instance per
connection (`--testy`); a stdio agent command is served by
[`acp_fast.remote.gateway_app`][acp_fast.remote.gateway_app]. For `--workers N` (uvicorn's worker processes) each
worker builds its app with `app_from_env` from the JSON the parent puts in
`CONFIG_ENV`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..remote import DEFAULT_PATH, AcpApp, ServerPolicy, asgi_app, gateway_app
from ..roles import EngineChoice
from ..testy import build, parse_versions
from .loops import freeze_startup_heap

if TYPE_CHECKING:
    from ..remote.metrics import ServerMetrics
    from ..tracing import Tracing

__all__ = ["CONFIG_ENV", "app_from_env", "policy_from_config", "testy_app"]

#: Environment variable carrying a worker's app configuration (JSON), see :func:`app_from_env`.
CONFIG_ENV = "ACP_FAST_SERVE_CONFIG"


def testy_app(*, versions: str = "1,2", path: str = DEFAULT_PATH, policy: ServerPolicy | None = None,
              engine: EngineChoice = None, metrics: ServerMetrics | None = None,
              trace_dir: str | None = None, otel: Tracing | None = None) -> AcpApp:
    """Testy (the deterministic test agent) served in-process, one instance per connection."""
    endpoint = build(parse_versions(versions))
    return asgi_app(endpoint, path=path, policy=policy, engine=engine, metrics=metrics, trace_dir=trace_dir, otel=otel)


def app_from_env() -> AcpApp:
    """Build the app described by `CONFIG_ENV` (a factory for `uvicorn --factory`).

    The JSON object holds `command` (argv list) or `testy` (versions string), `path`,
    and the [`ServerPolicy`][acp_fast.remote.ServerPolicy] fields `token_env` (the name of the variable holding the
    token, never the token itself), `allow_hosts`, `allow_origins`, `max_body`,
    `max_connections`, `idle_timeout`.
    """
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise RuntimeError(f"{CONFIG_ENV} is not set: start workers with `acp-fast serve --workers N`")
    cfg = json.loads(raw)
    policy = policy_from_config(cfg)
    if cfg.get("testy") is not None:
        app = testy_app(versions=cfg["testy"], path=cfg.get("path", DEFAULT_PATH), policy=policy)
    else:
        app = gateway_app(cfg["command"], path=cfg.get("path", DEFAULT_PATH), policy=policy)
    freeze_startup_heap()  # a worker's heap is built: see the function
    return app


def policy_from_config(cfg: Mapping[str, Any]) -> ServerPolicy:
    """The [`ServerPolicy`][acp_fast.remote.ServerPolicy] of a serve configuration (see `app_from_env`)."""
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
