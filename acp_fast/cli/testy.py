"""`acp-fast testy`: serve the deterministic test agent ([`acp_fast.testy`][acp_fast.testy]) on stdio."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING, Literal

from ..transport.loop import LOOP_CHOICES as LOOPS
from ..transport.loop import run

if TYPE_CHECKING:
    from . import Subparsers

__all__ = ["STREAM_CHOICES", "add_parser", "main"]

#: ``--stream`` choices: :data:`acp_fast.testy.STREAM_MODES`, spelled here so that building
#: the ``acp-fast`` parser (every subcommand's start-up, e.g. the conductor's) does not
#: import Testy and the builder API
STREAM_CHOICES = ("api", "preencoded")


def _engine_choice(name: Literal["auto", "c", "py"]) -> Literal["c", "py"] | None:
    """The engine twin to pass to `serve` by name (`None`: the active one)."""
    return None if name == "auto" else name


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Registers `testy` on the `acp-fast` subparsers (called by `acp_fast.cli.main`)."""
    parser = subparsers.add_parser(
        "testy", help="run the deterministic test agent (Testy) on stdio",
        description=("Serve the deterministic ACP test agent (Testy) on stdin/stdout: v1 and v2 "
                     "through the agent protocol router by default. Prompt commands: help, greet, "
                     "echo <msg>, scenario names (session_updates, content, tool_calls, callbacks, "
                     "elicitations, cancel_status, wait_for_cancel, full), and the benchmark "
                     "commands 'stream N [chunks [of S bytes]]', 'warmup N', 'permission stream N'. "
                     "Extension methods: _test/echo, _bench/echo, _test/stats, _test/note."),
    )
    parser.add_argument("--versions", default="1,2", metavar="1,2|1|2",
                        help="protocol versions to serve (default: 1,2 via the router)")
    parser.add_argument("--engine", choices=("auto", "c", "py"), default="auto",
                        help="engine twin (default: auto, the compiled one unless ACP_FAST_NO_EXTENSIONS=1)")
    parser.add_argument("--loop", choices=LOOPS, default="auto",
                        help="event loop (default: auto, uvloop when installed)")
    parser.add_argument("--stream", choices=STREAM_CHOICES, default="api", dest="stream_mode",
                        help="how benchmark chunks are sent: api (a fresh update per chunk through "
                             "cx.send_session_update, default) or preencoded (one line re-sent: a raw ceiling)")
    parser.add_argument("--require-auth", action="store_true",
                        help="answer -32000 auth_required until `authenticate` (v1) or `auth/login` (v2); auth/status stays answered")
    parser.add_argument("--log-level", default=os.environ.get("ACP_FAST_LOG", "WARNING"),
                        help="stderr log level (default: WARNING, or $ACP_FAST_LOG)")
    parser.set_defaults(func=main)
    return parser


def main(args: argparse.Namespace) -> int:
    """Serve Testy on stdio, in the versions, engine twin and event loop `args` asks for,
    until the client hangs up.

    Args:
        args: the parsed `acp-fast testy` arguments.

    Returns:
        The exit status: 0, or 2 for a bad `--versions`.
    """
    from ..testy import build, parse_versions

    try:
        versions = parse_versions(args.versions)
    except ValueError as exc:
        print(f"acp-fast testy: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=str(args.log_level).upper(), format="testy: %(levelname)s %(name)s: %(message)s")
    from ..transport import connect_stdio

    endpoint = build(versions, stream_mode=getattr(args, "stream_mode", "api"),
                     require_auth=getattr(args, "require_auth", False))
    engine = _engine_choice(args.engine)

    async def serve() -> None:
        await endpoint.serve(await connect_stdio(), engine=engine)

    run(serve(), loop=getattr(args, "loop", "auto"))
    return 0
