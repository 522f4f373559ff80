"""`acp-fast trace`: look at a conductor trace (`acp-fast conductor --trace PATH`).

    acp-fast trace view TRACE [-o trace.html] [--title TITLE]
    acp-fast trace summary TRACE

`view` writes one self-contained HTML page (no network access: styles, script and the
events are inside it) with a sequence diagram per session, filterable by component and by
method; `summary` prints message counts per component and per method. See
`acp_fast.conductor.trace_view`. Exit status 1 when the trace cannot be read.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..jsontypes import JsonObject
    from . import Subparsers

__all__ = ["add_parser", "main"]


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Registers `trace` on the `acp-fast` subparsers (called by `acp_fast.cli.main`)."""
    p = subparsers.add_parser("trace", help="view or summarise a conductor trace (--trace PATH)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    view = actions.add_parser("view", help="write a self-contained HTML sequence diagram of TRACE")
    view.add_argument("trace", metavar="TRACE", help="the JSONL trace file")
    view.add_argument("-o", "--output", default="trace.html", metavar="FILE", help="output page (default: trace.html)")
    view.add_argument("--title", help="page title (default: ACP trace: <file name>)")
    summary = actions.add_parser("summary", help="print message counts per component and per method")
    summary.add_argument("trace", metavar="TRACE", help="the JSONL trace file")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    """Run `acp-fast trace view` (write the HTML page) or `acp-fast trace summary` (print
    the counts) on the trace file `args` names.

    Args:
        args: the parsed `acp-fast trace` arguments.

    Returns:
        The exit status: 0, or 1 when the trace cannot be read or the page not written.
    """
    from ..conductor.trace_view import (
        TraceError,
        analyse,
        load_events,
        render_html,
        summary_table,
    )

    records: list[JsonObject] = []
    try:
        events, warnings = load_events(args.trace, records)
    except (OSError, TraceError) as exc:
        print(f"acp-fast trace: {args.trace}: {exc}", file=sys.stderr)
        return 1
    for warning in warnings:
        print(f"acp-fast trace: {args.trace}: warning: {warning}", file=sys.stderr)
    if args.action == "summary":
        sys.stdout.write(summary_table(analyse(events, warnings=warnings)))
        for record in records:
            if record.get("type") == "negotiation":
                sys.stdout.write(_negotiation_line(record) + "\n")
        return 0
    title = args.title or f"ACP trace: {os.path.basename(args.trace)}"
    page = render_html(analyse(events, title=title, warnings=warnings))
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as exc:
        print(f"acp-fast trace: {args.output}: {exc}", file=sys.stderr)
        return 1
    print(f"acp-fast trace: {len(events)} events -> {args.output}", file=sys.stderr)
    return 0


def _negotiation_line(record: JsonObject) -> str:
    """The chain's protocol version selection (the trace's `negotiation` record) in one line."""
    selected = record.get("selected")
    how = f"pinned to {record.get('pinned')}" if record.get("pinned") is not None else (
        "probed" if record.get("probing") else "as requested")
    parts = [f"protocol version: requested {record.get('requested')}, "
             f"selected {'none' if selected is None else selected} ({how}; {record.get('outcome')})"]
    for component in record.get("components") or ():
        tried = ", ".join(f"v{v} {what}" for v, what in (component.get("tried") or {}).items())
        parts.append(f"{component.get('name')}: {tried or 'not asked'}")
    return "; ".join(parts)
