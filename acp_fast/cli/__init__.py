"""The `acp-fast` command line (`acp_fast.cli.main:main`).

Subcommands: `testy` (the deterministic test agent, `acp_fast.cli.testy`),
`version`, and `bench` when `acp_fast.cli.bench` is present (it registers itself
through its `add_parser(subparsers)`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from typing import TypeAlias

    #: What each subcommand module's ``add_parser(subparsers)`` is given.
    Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
