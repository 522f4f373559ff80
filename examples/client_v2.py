#!/usr/bin/env python3
"""A one-shot ACP v2 client: spawn an agent, send one prompt, print the streamed text.

Usage::

    python examples/client_v2.py [--prompt TEXT] [--cwd DIR] [-- AGENT COMMAND ...]

The agent command defaults to ``acp-fast testy`` (or ``python -m acp_fast.cli.main testy``
when the console script is not installed). The client initializes with protocol v2, opens
a session, sends the prompt, prints every ``agent_message_chunk`` text as it arrives, and
ends when the session reports the idle ``state_update`` of the turn; the stop reason goes
to stderr. Exit status: 0 on ``end_turn``, 1 on any other stop reason.

The update handler is installed on the builder *before* connecting, as the v2 session API
requires (updates may precede the prompt's response).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import sys
from pathlib import Path

if importlib.util.find_spec("acp_fast") is None:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from acp_fast import Client, Context, JsonRpcError, SessionUpdate, spawn
from acp_fast.roles import V2, ClientConnection


def default_agent() -> list[str]:
    exe = shutil.which("acp-fast")
    return [exe, "testy"] if exe else [sys.executable, "-m", "acp_fast.cli.main", "testy"]


async def run(command: list[str], prompt: str, cwd: str) -> str | None:
    client = Client.v2().with_info("example-client-v2", "1.0")

    def on_update(update: SessionUpdate, cx: Context) -> None:
        payload = update.payload
        if update.kind == "agent_message_chunk" and payload.get("content", {}).get("type") == "text":
            sys.stdout.write(payload["content"]["text"])
            sys.stdout.flush()

    client.on_session_update(on_update)

    async def main(cx: ClientConnection[V2]) -> str | None:
        await cx.initialize()
        opened = await cx.build_session(cwd=cwd)
        session = opened.session  # a V2Session: a v2 connection opens v2 sessions
        epoch = session.idle_epoch
        receipt = await session.send_prompt(prompt)  # the insertion receipt, not the end
        print(f"[prompt accepted: {receipt.get('messageId')}]", file=sys.stderr)
        stop = await session.wait_idle(after=epoch)
        return None if stop is None else stop.kind

    env = dict(os.environ)
    if command and Path(command[0]).name.startswith("python"):
        root = str(Path(__file__).resolve().parent.parent)  # let a source checkout import acp_fast
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return await client.connect_with(spawn(command, env=env), main)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--prompt", default="Hello from acp_fast", help="prompt text")
    parser.add_argument("--cwd", default=os.getcwd(), help="session working directory")
    parser.add_argument("agent", nargs="*", help="agent command (after --)")
    args = parser.parse_args()
    try:
        stop = asyncio.run(run(args.agent or default_agent(), args.prompt, args.cwd))
    except JsonRpcError as exc:  # e.g. a v1-only agent: -32600 "required ACP protocol version 2 ..."
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(file=sys.stdout)
    print(f"[stop reason: {stop}]", file=sys.stderr)
    return 0 if stop == "end_turn" else 1


if __name__ == "__main__":
    sys.exit(main())
