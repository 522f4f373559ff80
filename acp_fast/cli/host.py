"""`acp-fast host`: an agent host of a fleet, running one agent per connection (`--redis`).

Fronts (`acp-fast serve --redis URL`) create connections on the hosts registered in the same
Redis; a host runs each one's agent, a child process of the command after `--` (under the
child-process policy) or Testy in-process (`--testy`), and moves its lines through Redis
(`acp_fast.fleet.host.AgentHost`). Needs the `fleet` extra
(`pip install 'acp-fast[fleet]'`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from .loops import LOOPS, freeze_startup_heap, run

if TYPE_CHECKING:
    from ..fleet.host import AgentHost
    from . import Subparsers

__all__ = ["add_parser", "main"]


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register `acp-fast host` on the `acp-fast` parser's subparsers."""
    parser = subparsers.add_parser(
        "host", help="run agents for the fronts of a fleet (one per connection), through Redis",
        description=("An agent host of a fleet: registers in Redis with --slots free slots and runs one agent "
                     "per connection the fronts (acp-fast serve --redis URL) create on it. "
                     "Example: acp-fast host --redis redis://127.0.0.1:6379/0 --slots 8 -- python my_agent.py"),
    )
    parser.add_argument("--redis", required=True, metavar="URL", help="the fleet's Redis (redis://host:port/db)")
    parser.add_argument("--slots", type=int, default=16, help="connections run at once at most (default: 16)")
    parser.add_argument("--host-id", default=None, help="this host's id in the fleet (default: a random one)")
    parser.add_argument("--ttl", type=float, default=5.0,
                        help="seconds the host counts as alive without a heartbeat (default: 5)")
    parser.add_argument("--prefix", default=None, help="the fleet's key prefix in Redis (default: acp-fast:)")
    parser.add_argument("--window-bytes", type=int, default=None,
                        help="bytes of agent output each connection keeps for readers that resume (default: 1 MiB)")
    parser.add_argument("--window-entries", type=int, default=None,
                        help="entries (agent flushes) of output each connection keeps (default: 4096)")
    parser.add_argument("--testy", action="store_true", help="run Testy in-process instead of a command")
    parser.add_argument("--versions", default="1,2", help="with --testy: protocol versions (default: 1,2)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve Prometheus metrics (slots total and used, connections taken, heartbeats) at "
                             "http://METRICS_HOST:PORT/metrics (default: off; needs prometheus-client)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="address the metrics port binds (default: 127.0.0.1, this machine only)")
    parser.add_argument("--loop", choices=LOOPS, default="auto", help="event loop (default: auto, uvloop when installed)")
    parser.add_argument("--log-level", default=os.environ.get("ACP_FAST_LOG", "WARNING"), help="log level (default: WARNING)")
    parser.add_argument("agent", nargs=argparse.REMAINDER, metavar="-- AGENT_CMD...", help="the agent command, after --")
    parser.set_defaults(func=main)
    return parser


def main(args: argparse.Namespace) -> int:
    """Run the host until SIGINT/SIGTERM."""
    command = list(args.agent)
    if command and command[0] == "--":
        command = command[1:]
    if bool(command) == bool(args.testy):
        print("acp-fast host: give an agent command after -- or --testy (one of them)", file=sys.stderr)
        return 2
    logging.basicConfig(level=str(args.log_level).upper(), format="acp-fast host: %(levelname)s %(message)s")
    from ..fleet import DEFAULT_PREFIX, RedisStore, StoreLimits
    from ..fleet.host import AgentHost
    from ..remote import MissingExtraError

    window = {k: v for k, v in (("output_bytes", args.window_bytes), ("output_entries", args.window_entries))
              if v is not None}
    try:
        store = RedisStore(args.redis, prefix=args.prefix or DEFAULT_PREFIX, limits=StoreLimits(**window))
    except (MissingExtraError, ValueError) as exc:
        print(f"acp-fast host: {exc}", file=sys.stderr)
        return 2
    if args.testy:
        from ..remote.server import servable_opener
        from ..testy import build, parse_versions

        opener = servable_opener(build(parse_versions(args.versions)))[0]
    else:
        from ..remote.gateway import command_opener

        opener = command_opener(command)
    try:
        host = AgentHost(store, opener, slots=args.slots, host_id=args.host_id, ttl=args.ttl)
    except ValueError as exc:
        print(f"acp-fast host: {exc}", file=sys.stderr)
        return 2
    if args.metrics_port is None:
        run(_serve(host), loop=args.loop)
        return 0
    from ..remote._wire import require_extra
    from ..remote.metrics import HostMetrics
    from .serve import _with_metrics

    try:
        require_extra("prometheus_client")
    except MissingExtraError as exc:
        print(f"acp-fast host: {exc}", file=sys.stderr)
        return 2
    run(_with_metrics(_serve(host), HostMetrics(host), args, "host"), loop=args.loop)
    return 0


async def _serve(host: AgentHost) -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(host.run())
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, task.cancel)
    ready = asyncio.ensure_future(host.wait_registered())
    await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if ready.done():
        freeze_startup_heap()
        print(f"acp-fast host: {host.host_id} registered at {host.store.url} with {host.slots} slots",
              file=sys.stderr, flush=True)
    else:
        ready.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    with contextlib.suppress(Exception):
        await host.store.close()
