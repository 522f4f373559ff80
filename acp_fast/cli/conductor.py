"""`acp-fast conductor`: run a proxy chain on stdio (protocol.md §8.7; [`acp_fast.conductor`][acp_fast.conductor]).

    acp-fast conductor [--trace PATH] [--debug [--debug-dir DIR]] [--proxy-methods underscore|spec]
                       [--protocol-version 1|2] agent "PROXY"… "AGENT"
    acp-fast conductor [...] proxy "PROXY"…

Each component is one shell-quoted argument: shell words with leading `NAME=value`
environment words, or JSON `{"command", "args"?, "env"?}`. In `agent` mode the last
component is the agent and the conductor is an agent on its stdio; in `proxy` mode it is a
proxy (a nested chain) whose successor is its parent. Components start on the first
`initialize` (`_proxy/initialize` in proxy mode). The whole chain speaks one protocol
version: for a client asking 2 or more it is 2, or lower when the agent answers lower (a
v1-only agent) or a proxy refuses 2 -- the version the client would get from the agent
directly, with every proxy started at it; `--protocol-version 1|2` pins it instead (no
probing). A component that cannot speak the chain's version fails the client's
`initialize` with an error naming it. The exit status is 1 when the chain ended because a
component exited, else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

from ..transport.loop import LOOP_CHOICES as LOOPS
from ..transport.loop import run
from .loops import freeze_startup_heap

__all__ = ["add_parser", "main"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Registers `conductor` on the `acp-fast` subparsers (called by `acp_fast.cli.main`)."""
    from ..conductor import PROXY_METHODS

    p = subparsers.add_parser("conductor", help="run an ACP proxy chain (proxies + agent) on stdio",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", metavar="PATH", help="write JSONL trace events (one per hop message) to PATH")
    p.add_argument("--proxy-methods", choices=PROXY_METHODS, default="underscore",
                   help="proxy-method spelling emitted: underscore (_proxy/*, default; what acp_fast "
                        "and the Rust SDK proxies accept) or spec (proxy/*); both are accepted")
    p.add_argument("--protocol-version", type=int, choices=(1, 2), default=None, metavar="1|2",
                   help="pin the chain's ACP protocol version (default: the highest version every "
                        "component speaks, up to the client's, found from their answers)")
    p.add_argument("--debug", action="store_true",
                   help="log every component's stdin/stdout/stderr lines to <debug-dir>/<YYYYmmdd-HHMMSS>.log")
    p.add_argument("--debug-dir", default=".", metavar="DIR", help="folder of the --debug log (default: .)")
    p.add_argument("-n", "--name", default="conductor", help="name used in logs (default: conductor)")
    p.add_argument("--loop", choices=LOOPS, default="auto", help="event loop (default: auto)")
    p.add_argument("--log-level", default=os.environ.get("ACP_FAST_LOG", "WARNING"),
                   help="stderr log level (default: WARNING, or $ACP_FAST_LOG)")
    modes = p.add_subparsers(dest="mode", metavar="MODE", required=True)
    agent = modes.add_parser("agent", help="proxies then the agent (the last component)")
    agent.add_argument("components", nargs="*", metavar="COMPONENT")
    proxy = modes.add_parser("proxy", help="proxies only: a nested chain, its successor is the parent")
    proxy.add_argument("components", nargs="*", metavar="COMPONENT")
    p.set_defaults(func=main)
    return p  # type: ignore[no-any-return]


def main(args: Any) -> int:
    """Run the chain described by `args` on stdio until it ends.

    Args:
        args: the parsed `acp-fast conductor` arguments.

    Returns:
        The exit status: 1 when the chain ended because a component exited, 2 for a bad
        component spec, else 0.
    """
    from ..conductor import Conductor
    from ..transport import connect_stdio

    logging.basicConfig(level=str(args.log_level).upper(),
                        format=f"{args.name}: %(levelname)s %(name)s: %(message)s")
    try:
        conductor = Conductor(args.components, mode=args.mode, proxy_methods=args.proxy_methods,
                              trace=args.trace, name=args.name,
                              debug_dir=args.debug_dir if args.debug else None,
                              protocol_version=getattr(args, "protocol_version", None))
    except (ValueError, TypeError) as exc:
        print(f"acp-fast conductor: {exc}", file=sys.stderr)
        return 2

    async def serve() -> None:
        task = asyncio.ensure_future(conductor.serve(await connect_stdio()))
        await asyncio.sleep(0)
        freeze_startup_heap()
        if conductor.debug is not None:
            print(f"{args.name}: debug log: {conductor.debug.path}", file=sys.stderr)
        await task

    run(serve(), loop=args.loop)
    return 1 if conductor.exit_error else 0
