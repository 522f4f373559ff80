"""`acp-fast`: the command-line entry point (console script `acp_fast.cli.main:main`).

Subcommands are registered by modules with an `add_parser(subparsers)` function that
returns the subparser and sets `func` (called with the parsed `argparse.Namespace`; its
return value is the exit status):

* `testy` - `acp_fast.cli.testy`, serves the test agent [`acp_fast.testy`][acp_fast.testy] on stdio;
* `version` - the package version and the active engine twin;
* `bench` - `acp_fast.cli.bench`, imported lazily and only if it exists (owned by
  the benchmark tooling; nothing here depends on it);
* `conductor` - `acp_fast.cli.conductor`, runs a proxy chain ([`acp_fast.conductor`][acp_fast.conductor]);
* `host` - `acp_fast.cli.host`, an agent host of a fleet ([`acp_fast.fleet`][acp_fast.fleet]);
* `trace` - `acp_fast.cli.trace`, `view` (HTML page) and `summary` of a conductor trace.

Run as `acp-fast ...` or `python -m acp_fast.cli.main ...`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Subparsers

__all__ = ["build_parser", "main"]

#: optional subcommand modules: registered when importable, silently absent otherwise
OPTIONAL_SUBCOMMANDS = ("acp_fast.cli.bench", "acp_fast.cli.conductor", "acp_fast.cli.host", "acp_fast.cli.serve",
                        "acp_fast.cli.trace")


def _version(args: argparse.Namespace) -> int:
    from .. import IMPLEMENTATION, __version__

    print(f"acp-fast {__version__} (engine: {IMPLEMENTATION}, Python {sys.version.split()[0]})")
    return 0


def _add_optional(subparsers: Subparsers, name: str) -> None:
    if importlib.util.find_spec(name) is None:
        return
    module = importlib.import_module(name)  # an error inside an existing module is loud
    add = getattr(module, "add_parser", None)
    if add is not None:
        add(subparsers)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `acp-fast` parser. Optional modules are imported only when `argv` may need
    them (no subcommand yet, `--help`, or their own name)."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="acp-fast",
        description="acp_fast: a fast Agent Client Protocol (ACP) implementation for Python.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"acp-fast {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import testy

    testy.add_parser(subparsers)
    version = subparsers.add_parser("version", help="print the version and the active engine twin",
                                    description="Print the acp_fast version and the active engine twin.")
    version.set_defaults(func=_version)
    words = list(sys.argv[1:] if argv is None else argv)
    first = next((w for w in words if not w.startswith("-")), None)
    for name in OPTIONAL_SUBCOMMANDS:
        if first is None or first == name.rsplit(".", 1)[-1]:
            _add_optional(subparsers, name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (also used as `sys.exit` code)."""
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
