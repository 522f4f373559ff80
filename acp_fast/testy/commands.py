"""Testy's prompt language: the command a prompt's text asks for (see [`acp_fast.testy`][acp_fast.testy])."""

from __future__ import annotations

import json
import os
import re
from ..jsontypes import Json, JsonObject

__all__ = ["FULL", "HELP", "SCENARIOS", "chunk_size", "parse_command", "parse_versions", "prompt_text"]

SCENARIOS = {
    "session_updates": "session_updates", "session updates": "session_updates", "updates": "session_updates",
    "content": "content",
    "tool_calls": "tool_calls", "tool calls": "tool_calls", "tools": "tool_calls",
    "callbacks": "callbacks", "client_callbacks": "callbacks", "client callbacks": "callbacks",
    "elicitations": "elicitations", "elicitation": "elicitations", "elicit": "elicitations",
    "cancel_status": "cancel_status", "cancel status": "cancel_status", "cancel": "cancel_status",
    "wait_for_cancel": "wait_for_cancel", "wait for cancel": "wait_for_cancel",
    "full": "full", "all": "full",
    # v2 only (seed 000 prompt acceptance): never inserted / a failure after insertion
    "hold_before_insert": "hold_before_insert", "hold before insert": "hold_before_insert",
    "auth_required": "auth_required", "auth required": "auth_required",
}
FULL = ("session_updates", "content", "tool_calls", "callbacks", "cancel_status")

HELP = """Testy (acp_fast) commands:
  help                      this text
  greet | <anything else>   Hello, world!
  echo <message>            echoes <message>
  session_updates | content | tool_calls | callbacks | elicitations | cancel_status |
  wait_for_cancel | full    run a scenario (v2 implements cancel_status and wait_for_cancel)
  hold_before_insert        v2: report running, never insert the prompt (cancel/close: -32800)
  auth_required             v2: insert, then fail with auth_required on the idle update
  stream N [chunks [of S bytes]] | warmup N | N
                            stream N agent_message_chunk updates of S (or $ACP_CHUNK) bytes
  permission stream N ...   ask session/request_permission first
  {"command": ...}          JSON form: help, greet, echo, run_scenario, call_tool, list_tools
MCP tools (call_tool, list_tools) are not supported."""

_BENCH = re.compile(
    r"^(?:(permission)\s+)?(?:(stream|warmup)\s+)?(\d+)(?:\s+chunks?)?(?:\s+of\s+(\d+)\s*(?:bytes?)?)?$",
    re.IGNORECASE)



def prompt_text(prompt: Json) -> str:
    """All `text` blocks of a prompt joined with one space."""
    if not isinstance(prompt, list):
        return ""
    return " ".join(b["text"] for b in prompt
                    if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))


def chunk_size() -> int:
    """Bytes per streamed chunk: `$ACP_CHUNK` (at least 0), else (unset or invalid) 100."""
    try:
        return max(0, int(os.environ.get("ACP_CHUNK", "100")))
    except ValueError:
        return 100


def parse_command(text: str) -> tuple[str, JsonObject]:
    """`(kind, args)` of a prompt text; kinds: greet, help, echo, scenario, stream, tool."""
    stripped = text.strip()
    if not stripped:
        return "greet", {}
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("command"), str):
            cmd = obj["command"]
            if cmd in ("help", "greet"):
                return cmd, {}
            if cmd == "echo":
                return "echo", {"message": str(obj.get("message", ""))}
            if cmd == "run_scenario":
                name = str(obj.get("scenario", "")).strip().lower()
                return "scenario", {"name": SCENARIOS.get(name, name)}
            if cmd in ("call_tool", "list_tools"):
                return "tool", {"command": cmd, "server": obj.get("server"), "tool": obj.get("tool")}
    match = _BENCH.match(stripped)
    if match is not None:
        return "stream", {"permission": bool(match.group(1)), "n": int(match.group(3)),
                          "size": int(match.group(4)) if match.group(4) else chunk_size()}
    lower = stripped.lower()
    if lower == "help":
        return "help", {}
    if lower in SCENARIOS:
        return "scenario", {"name": SCENARIOS[lower]}
    if lower == "echo" or lower.startswith("echo "):
        return "echo", {"message": stripped[5:]}
    return "greet", {}



def parse_versions(text: str) -> tuple[int, ...]:
    """`"1,2"` -> `(1, 2)`; raises ValueError for anything but a subset of {1, 2}."""
    try:
        versions = tuple(sorted({int(v) for v in text.replace(" ", "").split(",") if v}))
    except ValueError:
        raise ValueError(f"invalid --versions {text!r}: expected 1, 2 or 1,2") from None
    if not versions or not set(versions) <= {1, 2}:
        raise ValueError(f"invalid --versions {text!r}: expected 1, 2 or 1,2")
    return versions

