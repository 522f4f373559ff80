"""`acp-fast serve`: expose a stdio agent (or Testy) over Streamable HTTP and WebSocket.

Each remote connection gets its own agent child process (see
`acp_fast.remote.gateway`); `--testy` serves the test agent in-process.
Needs the `remote` extra (`pip install 'acp-fast[remote]'`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from ..remote.runner import DEFAULT_SERVER, SERVERS
from .loops import LOOPS, freeze_startup_heap, run

if TYPE_CHECKING:
    from ..jsontypes import JsonObject
    from ..remote._asgi import ASGIApp
    from ..remote.metrics import HostMetrics, ServerMetrics
    from . import Subparsers

__all__ = ["add_parser", "main"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register `acp-fast serve` on the `acp-fast` parser's subparsers."""
    parser = subparsers.add_parser(
        "serve", help="serve a stdio agent (or Testy) to remote clients over HTTP and WebSocket",
        description=("Expose a stdio ACP agent over Streamable HTTP (POST/GET-SSE/DELETE) and WebSocket on "
                     "one path; every remote connection gets its own agent process. "
                     "Example: acp-fast serve --port 8000 -- python my_agent.py"),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    parser.add_argument("--path", default="/acp", help="endpoint path (default: /acp)")
    parser.add_argument("--token-env", metavar="VAR",
                        help="require 'Authorization: Bearer <token>' with the token read from this environment variable")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="accept requests from this browser Origin (repeatable; default: none)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                        help="accept this Host name (repeatable; default: 127.0.0.1, localhost, ::1)")
    parser.add_argument("--max-body", type=int, default=None, help="largest POST body / WebSocket frame in bytes (default: 16 MiB)")
    parser.add_argument("--max-connections", type=int, default=None, help="open connections at most (with --redis: of the whole fleet; default: 4096)")
    parser.add_argument("--idle-timeout", type=float, default=None,
                        help="seconds an HTTP connection nobody reads lives (default: 300)")
    parser.add_argument("--server", choices=SERVERS, default=DEFAULT_SERVER,
                        help=f"ASGI server (default: {DEFAULT_SERVER}): uvicorn (HTTP/1.1 + WebSocket), hypercorn or "
                             "granian (both add HTTP/2: over TLS by ALPN, and h2c to a client that starts with it)")
    parser.add_argument("--certfile", help="TLS certificate (https/wss; HTTP/2 by ALPN with hypercorn or granian)")
    parser.add_argument("--keyfile", help="TLS private key")
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes (uvicorn only); Streamable HTTP then needs sticky routing on Acp-Connection-Id")
    parser.add_argument("--redis", metavar="URL",
                        help="run a front of a fleet instead: no agent here, connections go to the agent hosts "
                             "(acp-fast host --redis URL) registered in this Redis; any front serves any request")
    parser.add_argument("--prefix", default=None, help="with --redis: the fleet's key prefix (default: acp-fast:)")
    parser.add_argument("--resume-grace", type=float, default=30.0, metavar="SECONDS",
                        help="with --redis: seconds a connection lives after its resumable WebSocket dropped "
                             "without a close frame, unless the client resumes it (default: 30; at most the "
                             "idle timeout)")
    parser.add_argument("--testy", action="store_true", help="serve Testy in-process instead of a command")
    parser.add_argument("--versions", default="1,2", help="with --testy: protocol versions (default: 1,2)")
    parser.add_argument("--engine", choices=("auto", "c", "py"), default="auto", help="engine twin for --testy")
    parser.add_argument("--loop", choices=LOOPS, default="auto", help="event loop (default: auto, uvloop when installed)")
    parser.add_argument("--log-level", default=os.environ.get("ACP_FAST_LOG", "WARNING"), help="log level (default: WARNING)")
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="log lines as text (default) or one JSON object each; json also logs every connection "
                             "event (open, close with its cause, refusal, agent exit with its stderr tail, SSE "
                             "resume) at INFO, with the connection's short id and never a message body")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve Prometheus metrics at http://METRICS_HOST:PORT/metrics (default: off; "
                             "needs prometheus-client, in the remote extra)")
    parser.add_argument("--trace", metavar="DIR",
                        help="write each connection's messages to DIR, one file per connection in the conductor's "
                             "trace format (acp-fast trace view FILE); decodes every message: for debugging")
    parser.add_argument("--otel", action="store_true", default=os.environ.get("ACP_FAST_OTEL", "").strip().lower()
                        in ("1", "true", "yes", "on"),
                        help="OpenTelemetry: a span per relayed request, its context passed on in the request's "
                             "_meta (needs opentelemetry-api; the exporter is the OpenTelemetry SDK's, set up "
                             "by its environment; default: ACP_FAST_OTEL)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="address the metrics port binds (default: 127.0.0.1, this machine only)")
    parser.add_argument("agent", nargs=argparse.REMAINDER, metavar="-- AGENT_CMD...",
                        help="the agent command, after --")
    parser.set_defaults(func=main)
    return parser


def _config(args: argparse.Namespace, command: list[str]) -> JsonObject:
    hosts = list(args.allow_host) or list(_LOOPBACK)
    return {
        "command": command or None,
        "testy": args.versions if args.testy else None,
        "path": args.path,
        "token_env": args.token_env,
        "allow_hosts": hosts,
        "allow_origins": list(args.allow_origin),
        "max_body": args.max_body,
        "max_connections": args.max_connections,
        "idle_timeout": args.idle_timeout,
    }


def main(args: argparse.Namespace) -> int:
    """Run the server until SIGINT/SIGTERM."""
    command = list(args.agent)
    if command and command[0] == "--":
        command = command[1:]
    if args.redis is not None:
        if command or args.testy or args.workers > 1:
            print("acp-fast serve: --redis runs a front: the agents run on the hosts (acp-fast host), so no "
                  "command, --testy or --workers here", file=sys.stderr)
            return 2
    elif bool(command) == bool(args.testy):
        print("acp-fast serve: give an agent command after -- or --testy (one of them)", file=sys.stderr)
        return 2
    _logging(args)
    if (args.metrics_port is not None and args.workers > 1) or (args.trace is not None and (
            args.redis is not None or args.workers > 1)):
        print("acp-fast serve: --metrics-port and --trace serve one process's app: not with --workers (nor --trace "
              "with --redis) yet", file=sys.stderr)
        return 2
    if args.otel and (args.redis is not None or args.workers > 1):
        print("acp-fast serve: --otel serves one process's app: not with --workers or --redis yet", file=sys.stderr)
        return 2
    if args.trace is not None:
        os.makedirs(args.trace, exist_ok=True)
    otel = None
    if args.otel:
        from ..tracing import MissingOtelError, Tracing

        try:
            otel = Tracing.make()
        except MissingOtelError as exc:
            print(f"acp-fast serve: {exc}", file=sys.stderr)
            return 2
    from ..remote._wire import MissingExtraError, require_extra

    try:
        require_extra(args.server)
    except MissingExtraError as exc:
        print(f"acp-fast serve: {exc}", file=sys.stderr)
        return 2
    from ..remote import gateway
    from .serve_apps import policy_from_config, testy_app

    metrics = None
    if args.metrics_port is not None:
        try:
            require_extra("prometheus_client")
        except MissingExtraError as exc:
            print(f"acp-fast serve: {exc}", file=sys.stderr)
            return 2
        from ..remote.metrics import ServerMetrics

        metrics = ServerMetrics()
    cfg = _config(args, command)
    try:
        policy = policy_from_config(cfg)
    except (RuntimeError, ValueError) as exc:
        print(f"acp-fast serve: {exc}", file=sys.stderr)
        return 2
    if args.host not in _LOOPBACK and policy.token is None:
        print(f"acp-fast serve: WARNING: binding {args.host} without --token-env: anyone who can reach this "
              "address can drive the agent", file=sys.stderr)
    if args.workers > 1:
        return _workers(args, cfg)
    if args.redis is not None:
        from ..fleet import DEFAULT_PREFIX, RedisStore, StoreLimits
        from ..fleet.front import FleetFront

        try:  # the idle timeout is the connections' TTL in the store; max_connections the fleet's
            store = RedisStore(args.redis, prefix=args.prefix or DEFAULT_PREFIX,
                               limits=StoreLimits(connection_ttl=policy.idle_timeout))
            app: ASGIApp = FleetFront(store, path=args.path, policy=policy, metrics=metrics,
                                      resume_grace=args.resume_grace)
        except (MissingExtraError, ValueError) as exc:
            print(f"acp-fast serve: {exc}", file=sys.stderr)
            return 2
    elif args.testy:
        app = testy_app(versions=args.versions, path=args.path, policy=policy,
                        engine=None if args.engine == "auto" else args.engine, metrics=metrics, trace_dir=args.trace, otel=otel)
    else:
        app = gateway.gateway_app(command, path=args.path, policy=policy, metrics=metrics, trace_dir=args.trace,
                                  otel=otel)
    from ..remote.runner import Served, serve_app

    def ready(where: Served) -> None:
        freeze_startup_heap()
        print(f"acp-fast serve: listening on {where.http_url} and {where.ws_url}", file=sys.stderr, flush=True)

    main_server = serve_app(app, server=args.server, host=args.host, port=args.port, certfile=args.certfile,
                            keyfile=args.keyfile, log_level=str(args.log_level).lower(), on_ready=ready)
    run(main_server if metrics is None else _with_metrics(main_server, metrics, args), loop=getattr(args, "loop", "auto"))
    return 0


async def _with_metrics(main_server: Coroutine[Any, Any, None], metrics: ServerMetrics | HostMetrics,
                        args: argparse.Namespace, command: str = "serve") -> None:
    """Serve `metrics` at `/metrics` on the metrics port while `main_server` runs."""
    from ..remote.runner import served

    async with served(metrics.asgi_app(), host=args.metrics_host, port=args.metrics_port,
                      log_level=str(args.log_level).lower()) as where:
        host = f"[{where.host}]" if ":" in where.host else where.host
        print(f"acp-fast {command}: metrics at http://{host}:{where.port}/metrics", file=sys.stderr, flush=True)
        await main_server


def _logging(args: argparse.Namespace) -> None:
    """Configure logging: the level, and the JSON format (which turns the connection events on)."""
    if args.log_format != "json":
        logging.basicConfig(level=str(args.log_level).upper(), format="acp-fast serve: %(levelname)s %(message)s")
        return
    from ..remote.logs import EVENTS_LOGGER, JsonFormatter

    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=str(args.log_level).upper(), handlers=[handler])
    events = logging.getLogger(EVENTS_LOGGER)
    if events.getEffectiveLevel() > logging.INFO:
        events.setLevel(logging.INFO)


def _workers(args: argparse.Namespace, cfg: JsonObject) -> int:
    if args.server != "uvicorn":
        print("acp-fast serve: --workers needs --server uvicorn", file=sys.stderr)
        return 2
    import uvicorn

    from .serve_apps import CONFIG_ENV

    os.environ[CONFIG_ENV] = json.dumps(cfg)
    print(f"acp-fast serve: {args.workers} workers on {args.host}:{args.port}{args.path} "
          "(Streamable HTTP needs sticky routing on Acp-Connection-Id)", file=sys.stderr, flush=True)
    uvicorn.run("acp_fast.cli.serve_apps:app_from_env", factory=True, host=args.host, port=args.port,
                workers=args.workers, log_level=str(args.log_level).lower(), lifespan="on",
                ssl_certfile=args.certfile, ssl_keyfile=args.keyfile)
    return 0
