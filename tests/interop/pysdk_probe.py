#!/usr/bin/env python3
"""Interop probe: an ACP v1 client on the official Python SDK (``agent-client-protocol``
0.12.1) runs one scenario against an agent command and prints one JSON line.
Test-only (tests/interop/test_pysdk.py).

    python pysdk_probe.py <scenario> -- <agent command...>

Scenarios: cancel, errors, callbacks, suite (those three on one connection), init-error.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, cast

import acp
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)


class ProbeClient:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.texts: list[str] = []
        self.files: dict[str, str] = {}

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        content = getattr(update, "content", None)
        if getattr(update, "session_update", None) == "agent_message_chunk" and getattr(content, "type", None) == "text":
            self.texts.append(content.text)

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        self.asked.append("session/request_permission")
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id))

    async def write_text_file(self, content: str, path: str, session_id: str, **kwargs: Any) -> Any:
        self.asked.append("fs/write_text_file")
        self.files[path] = content
        return WriteTextFileResponse()

    async def read_text_file(self, path: str, session_id: str, **kwargs: Any) -> Any:
        self.asked.append("fs/read_text_file")
        return ReadTextFileResponse(content=self.files.get(path, ""))


def err(exc: BaseException) -> dict[str, Any]:
    return {"code": getattr(exc, "code", None), "message": str(exc), "data": getattr(exc, "data", None)}


async def main(scenario: str, cmd: list[str]) -> dict[str, Any]:
    client = ProbeClient()
    async with acp.spawn_agent_process(cast(acp.Client, client), cmd[0], *cmd[1:], env=dict(os.environ),
                                       transport_kwargs={"stderr": None}) as (conn, _process):
        fs = scenario in ("callbacks", "suite")
        caps = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs))
        info = Implementation(name="pysdk-probe", version="0")
        if scenario == "init-error":
            try:
                init = await conn.initialize(protocol_version=1, client_capabilities=caps, client_info=info)
                return {"result": init.model_dump(by_alias=True, exclude_none=True)}
            except Exception as exc:  # noqa: BLE001
                return {"error": err(exc)}
        await conn.initialize(protocol_version=1, client_capabilities=caps, client_info=info)
        if scenario == "suite":
            return {name: await run_one(conn, client, name) for name in ("cancel", "errors", "callbacks")}
        return await run_one(conn, client, scenario)


async def run_one(conn: Any, client: ProbeClient, scenario: str) -> dict[str, Any]:
    session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
    sid = session.session_id
    if scenario == "cancel":
        turn = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[acp.text_block("wait_for_cancel")]))
        await asyncio.sleep(0.1)
        await conn.cancel(session_id=sid)
        return {"stopReason": (await turn).stop_reason}
    if scenario == "errors":
        out: dict[str, Any] = {}
        try:
            await conn.ext_method("no/such_method", {})
        except Exception as exc:  # noqa: BLE001
            out["unknown"] = err(exc)
        try:
            await conn.prompt(session_id="testy-session-404", prompt=[acp.text_block("hi")])
        except Exception as exc:  # noqa: BLE001
            out["unknownSession"] = err(exc)
        out["echo"] = await conn.ext_method("test/echo", {"deep": {"a": [1, "two", None]}})
        out["stats"] = sorted(await conn.ext_method("test/stats", {}))
        return out
    if scenario == "callbacks":
        resp = await conn.prompt(session_id=sid, prompt=[acp.text_block("callbacks")])
        return {"stopReason": resp.stop_reason, "asked": client.asked, "report": client.texts[-1]}
    raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    args = sys.argv[1:]
    out = asyncio.run(main(args[0], args[args.index("--") + 1:]))
    print(json.dumps({"scenario": args[0], **out}))
