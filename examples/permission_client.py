#!/usr/bin/env python3
"""An ACP v1 client that answers the agent's permission requests.

Usage::

    python examples/permission_client.py [--choose allow|reject|cancel] [--prompt TEXT]
                                         [-- AGENT COMMAND ...]

It spawns the agent (default ``acp-fast testy``), opens a v1 session and sends a prompt
that makes the agent ask ``session/request_permission`` (Testy: ``permission stream 3
chunks``). Each request is answered with the first option of the chosen kind
(``allow`` -> ``allow_once``/``allow_always``, ``reject`` -> ``reject_*``) or with the
``cancelled`` outcome. The request is handed to its own task, as an application would when
it has to ask a user, so the connection keeps reading meanwhile. Streamed text goes to
stdout; a summary line (``permission requests: N, stop reason: ...``) to stderr.
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
from acp_fast.protocol import methods_v1, types_v1
from acp_fast.roles import V1, ClientConnection


def default_agent() -> list[str]:
    exe = shutil.which("acp-fast")
    return [exe, "testy"] if exe else [sys.executable, "-m", "acp_fast.cli.main", "testy"]


def decide(options: list[types_v1.PermissionOption], choose: str) -> types_v1.RequestPermissionResponse:
    """The ``RequestPermissionResponse`` for ``choose`` (allow / reject / cancel)."""
    if choose != "cancel":
        for option in options:
            if option["kind"].startswith(choose):
                return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
    return {"outcome": {"outcome": "cancelled"}}


async def run(command: list[str], prompt: str, choose: str, cwd: str) -> tuple[int, str]:
    client = Client.builder().with_info("example-permission-client", "1.0")
    asked: list[types_v1.RequestPermissionRequest] = []

    async def on_permission(params: types_v1.RequestPermissionRequest, cx: Context
                            ) -> types_v1.RequestPermissionResponse:
        asked.append(params)
        title = params["toolCall"].get("title")
        await asyncio.sleep(0)  # stand-in for asking a user; the connection keeps reading
        answer = decide(params["options"], choose)
        print(f"[permission for {title!r}: {answer['outcome']}]", file=sys.stderr)
        return answer

    def on_update(update: SessionUpdate, cx: Context) -> None:
        payload = update.payload
        if update.kind == "agent_message_chunk" and payload.get("content", {}).get("type") == "text":
            sys.stdout.write(payload["content"]["text"][:80] + "\n")

    client.on_request(methods_v1.session.request_permission, on_permission)  # typed
    client.on_session_update(on_update)

    async def main(cx: ClientConnection[V1]) -> str:
        await cx.initialize({"clientCapabilities": {}})
        session = (await cx.build_session(cwd)).session
        result = await session.send_prompt(prompt)
        return str(result["stopReason"])

    env = dict(os.environ)
    if command and Path(command[0]).name.startswith("python"):
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    stop = await client.connect_with(spawn(command, env=env), main)
    return len(asked), stop


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--choose", choices=("allow", "reject", "cancel"), default="allow")
    parser.add_argument("--prompt", default="permission stream 3 chunks", help="prompt text")
    parser.add_argument("--cwd", default=os.getcwd(), help="session working directory")
    parser.add_argument("agent", nargs="*", help="agent command (after --)")
    args = parser.parse_args()
    try:
        count, stop = asyncio.run(run(args.agent or default_agent(), args.prompt, args.choose, args.cwd))
    except JsonRpcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"permission requests: {count}, stop reason: {stop}", file=sys.stderr)
    return 0 if stop == "end_turn" else 1


if __name__ == "__main__":
    sys.exit(main())
