"""``acp-fast testy``: a deterministic ACP test agent on stdio (the Rust SDK's Testy, in Python).

By default one endpoint serves protocol v1 and draft v2 through the agent protocol router
(``Agent.protocol_router().with_v1(...).with_v2(...)``); the version is picked by the
client's first ``initialize`` and the two implementations keep separate state.
``--versions 2`` serves v2 only (a v1 ``initialize`` is answered with -32022
``{"requested": 1, "supported": [2]}`` and the connection closes); ``--versions 1`` v1 only
(any valid ``initialize`` selects v1). Logs go to stderr.

Prompt language (the prompt text is every ``text`` block joined with one space):

* empty, or anything not recognised: ``greet`` ("Hello, world!");
* ``help``; ``echo <message>``;
* a JSON object ``{"command": "help"|"greet"|"echo"|"run_scenario"|"call_tool"|"list_tools",
  "message"?, "scenario"?, "server"?, "tool"?, "params"?}``;
* a scenario name or alias: ``session_updates`` (``session updates``, ``updates``),
  ``content``, ``tool_calls`` (``tool calls``, ``tools``), ``callbacks``
  (``client_callbacks``, ``client callbacks``), ``elicitations`` (``elicitation``,
  ``elicit``), ``cancel_status`` (``cancel status``, ``cancel``), ``wait_for_cancel``
  (``wait for cancel``), ``full`` (``all``);
* benchmark commands, compatible with the clients in ``peers/``: ``stream N [chunks [of S
  bytes]]`` and ``warmup N`` stream N ``agent_message_chunk`` updates of S bytes of text
  (S from ``$ACP_CHUNK``, default 100); a bare integer ``N`` is ``stream N``; a leading
  ``permission`` word first sends ``session/request_permission`` (options ``allow`` /
  ``reject``) and streams one chunk ``permission:<optionId or cancelled>``. No closing
  text chunk is sent after a benchmark stream.

v1 (protocol.md §9.1): ``initialize`` (capabilities: loadSession, prompt image/audio/
embeddedContext, MCP http, session list/delete/additionalDirectories/resume/close, auth
logout; one agent auth method ``testy-agent-auth``), ``authenticate``, ``logout``,
``session/new|load|resume|list|delete|close|set_mode|set_config_option|prompt``,
``session/cancel``. A prompt answers ``{"stopReason"}`` after one ``agent_message_chunk``
with the command's text (message id ``testy-message-<stop-reason>-N``). Scenarios:
``session_updates``, ``content``, ``tool_calls``, ``callbacks`` (permission,
``fs/write_text_file``, ``fs/read_text_file``, ``terminal/*`` - each only when the client
advertised the capability, else reported ``skipped`` - then elicitations),
``elicitations`` (form needs the client's form capability, else the prompt fails with
-32602; URL mode needs the URL capability), ``cancel_status``, ``wait_for_cancel``,
``full``. While a client callback is pending, ``session/cancel`` stops the wait and the
request is cancelled with ``$/cancel_request``.

v2 (protocol.md §9.2, seed 000): ``initialize`` (``info`` ``test-agent``, capabilities
``{"session": {}}``), ``session/new|list|resume|close|prompt``, ``session/cancel``. A prompt
is answered at once with its insertion receipt ``{"messageId": "testy-v2-user-message-N"}``,
then ``user_message`` -> ``state_update running`` -> output -> ``state_update idle`` with a
stop reason (``cancelled`` after ``session/cancel`` or ``session/close``). A second prompt
while foreground work runs gets -32602. v2 commands: help, greet, echo, cancel_status,
wait_for_cancel and the benchmark commands; other scenarios answer a ``refusal`` with
"Testy v2 scenario `x` is not implemented yet". History (``user_message`` + whole
``agent_message`` per prompt) is replayed by ``session/resume`` with ``replayFrom:
{"type": "start"}``; every successful resume then sends an idle ``state_update`` snapshot
(no stop reason) before its response. Other cursors get -32602.

Both versions: ``_test/echo`` and ``_bench/echo`` return their params; ``_test/stats``
returns ``{maxRssKiB, rssKiB, rssBytes, userCpuUs, systemCpuUs, notesReceived, engine}``
(``maxRssKiB``/``rssKiB``: peak RSS); ``_test/note`` notifications are counted. Unknown
methods get -32601.

Not implemented: MCP. ``call_tool`` / ``list_tools`` answer the text "ERROR: Testy (acp_fast)
does not support MCP servers" (v1, stop reason ``end_turn``) or "Testy v2 does not advertise
MCP support yet" (v2, ``refusal``); no MCP connection is ever made. The v1 ``tool_calls``
scenario has no terminal tool.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import resource
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import INVALID_PARAMS, REQUEST_CANCELLED, JsonRpcError
from ..roles import Agent, AgentBuilder, AgentRouter, Context

__all__ = ["TestyV1", "TestyV2", "build", "main", "parse_command", "parse_versions"]

logger = logging.getLogger("acp_fast.testy")

AGENT_NAME = "test-agent"
AUTH_METHOD = "testy-agent-auth"
UPDATED_AT = "2026-01-01T00:00:00Z"
SESSION_UPDATE = "session/update"
GREETING = "Hello, world!"
MCP_V1 = "ERROR: Testy (acp_fast) does not support MCP servers"
MCP_V2 = "Testy v2 does not advertise MCP support yet"
# a 1x1 transparent PNG and a tiny WAV header, base64
PNG_1X1 = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")
WAV_EMPTY = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA="

SCENARIOS = {
    "session_updates": "session_updates", "session updates": "session_updates", "updates": "session_updates",
    "content": "content",
    "tool_calls": "tool_calls", "tool calls": "tool_calls", "tools": "tool_calls",
    "callbacks": "callbacks", "client_callbacks": "callbacks", "client callbacks": "callbacks",
    "elicitations": "elicitations", "elicitation": "elicitations", "elicit": "elicitations",
    "cancel_status": "cancel_status", "cancel status": "cancel_status", "cancel": "cancel_status",
    "wait_for_cancel": "wait_for_cancel", "wait for cancel": "wait_for_cancel",
    "full": "full", "all": "full",
}
FULL = ("session_updates", "content", "tool_calls", "callbacks", "cancel_status")

HELP = """Testy (acp_fast) commands:
  help                      this text
  greet | <anything else>   Hello, world!
  echo <message>            echoes <message>
  session_updates | content | tool_calls | callbacks | elicitations | cancel_status |
  wait_for_cancel | full    run a scenario (v2 implements cancel_status and wait_for_cancel)
  stream N [chunks [of S bytes]] | warmup N | N
                            stream N agent_message_chunk updates of S (or $ACP_CHUNK) bytes
  permission stream N ...   ask session/request_permission first
  {"command": ...}          JSON form: help, greet, echo, run_scenario, call_tool, list_tools
MCP tools (call_tool, list_tools) are not supported."""

_BENCH = re.compile(
    r"^(?:(permission)\s+)?(?:(stream|warmup)\s+)?(\d+)(?:\s+chunks?)?(?:\s+of\s+(\d+)\s*(?:bytes?)?)?$",
    re.IGNORECASE)


# ---------------------------------------------------------------------------------------
# prompt parsing
# ---------------------------------------------------------------------------------------


def prompt_text(prompt: Any) -> str:
    """All ``text`` blocks of a prompt joined with one space."""
    if not isinstance(prompt, list):
        return ""
    return " ".join(b["text"] for b in prompt
                    if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))


def chunk_size() -> int:
    try:
        return max(0, int(os.environ.get("ACP_CHUNK", "100")))
    except ValueError:
        return 100


def parse_command(text: str) -> tuple[str, dict[str, Any]]:
    """``(kind, args)`` of a prompt text; kinds: greet, help, echo, scenario, stream, tool."""
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


def stats(notes: int, cx: Context | None = None) -> dict[str, Any]:
    """The ``_test/stats`` answer (field names of the peers in ``peers/``; ``engine`` is the
    twin of ``cx``'s connection)."""
    from .. import _engine

    engine = cx.connection.raw.engine if cx is not None else _engine
    usage = resource.getrusage(resource.RUSAGE_SELF)
    try:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        rss = usage.ru_maxrss * 1024
    return {"maxRssKiB": usage.ru_maxrss, "rssKiB": usage.ru_maxrss, "rssBytes": rss,
            "userCpuUs": int(usage.ru_utime * 1e6), "systemCpuUs": int(usage.ru_stime * 1e6),
            "notesReceived": notes, "engine": engine.IMPLEMENTATION}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _session_id(params: Any) -> str:
    sid = params.get("sessionId") if isinstance(params, dict) else None
    if not isinstance(sid, str):
        raise JsonRpcError(INVALID_PARAMS, data="`sessionId` must be a string")
    return sid


def _unknown(sid: str) -> JsonRpcError:
    return JsonRpcError(INVALID_PARAMS, data=f"unknown session `{sid}`")


async def stream_chunks(cx: Context, session_id: str, n: int, size: int, message_id: str | None,
                        stopped: Callable[[], bool]) -> bool:
    """Send ``n`` ``agent_message_chunk`` updates of ``size`` bytes from a tight loop.

    The first update goes through the write guard; the others reuse its params, encoded once
    (``RawJson``), on the connection's send path. Every ~256 KiB the loop drains (waits while
    the peer is not reading) and yields once so that a ``session/cancel`` can be read.

    Returns:
        False when ``stopped()`` became true (or the connection closed) before the end.
    """
    if n <= 0:
        return True
    conn = cx.connection
    raw = conn.raw
    update: dict[str, Any] = {"sessionUpdate": "agent_message_chunk", "content": _text("x" * size)}
    if message_id is not None:
        update["messageId"] = message_id
    params = {"sessionId": session_id, "update": update}
    if not conn.send_notification(SESSION_UPDATE, params):
        return False
    engine = raw.engine
    line = engine.RawJson(engine.encode_value(params))
    notify = raw.notify
    batch = max(1, (256 * 1024) // (size + 96))
    count = 0
    for _ in range(n - 1):
        if stopped() or not notify(SESSION_UPDATE, line):
            return False
        count += 1
        if count >= batch:
            count = 0
            await raw.drain()
            await asyncio.sleep(0)
    await raw.drain()
    return not raw.is_closing


# ---------------------------------------------------------------------------------------
# v1
# ---------------------------------------------------------------------------------------


def _modes(current: str) -> dict[str, Any]:
    return {"currentModeId": current, "availableModes": [
        {"id": "chat", "name": "Chat", "description": "Conversational mode"},
        {"id": "plan", "name": "Plan", "description": "Planning mode"}]}


def _config_v1(verbosity: str) -> list[dict[str, Any]]:
    return [{"id": "verbosity", "name": "Verbosity", "type": "select", "currentValue": verbosity,
             "options": [{"value": v, "name": v.capitalize()} for v in ("brief", "normal", "verbose")]}]


class _Session1:
    __slots__ = ("active", "cancel_event", "cancelled", "closed", "cwd", "mode", "pending_cancel",
                 "verbosity")

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.mode = "chat"
        self.verbosity = "normal"
        self.closed = False
        self.active = False
        self.cancelled = False
        self.pending_cancel = False
        self.cancel_event: asyncio.Event | None = None


class _Cancelled(Exception):
    """The prompt was cancelled by ``session/cancel`` while waiting."""


class TestyV1:
    """State and handlers of the v1 Testy (one instance per connection)."""

    def __init__(self) -> None:
        self.sessions: dict[str, _Session1] = {}
        self.next_session = 0
        self.next_message = 0
        self.authenticated = False
        self.client_caps: dict[str, Any] = {}
        self.notes = 0

    def builder(self) -> AgentBuilder:
        b = Agent.builder()
        b.with_info(AGENT_NAME, _version())
        for method, fn in (
            ("initialize", self.initialize), ("authenticate", self.authenticate),
            ("logout", self.logout), ("session/new", self.new_session),
            ("session/load", self.load_session), ("session/resume", self.load_session),
            ("session/list", self.list_sessions), ("session/delete", self.close_session),
            ("session/close", self.close_session), ("session/set_mode", self.set_mode),
            ("session/set_config_option", self.set_config_option), ("session/prompt", self.prompt),
            ("_test/echo", _echo), ("_bench/echo", _echo), ("_test/stats", lambda p, cx: stats(self.notes, cx)),
        ):
            b.on_request(method, fn)
        b.on_notification("session/cancel", self.cancel)
        b.on_notification("_test/note", self.note)
        return b

    # -- lifecycle --------------------------------------------------------------------

    def initialize(self, params: Any, cx: Context) -> dict[str, Any]:
        caps = params.get("clientCapabilities")
        self.client_caps = caps if isinstance(caps, dict) else {}
        return {
            "protocolVersion": params.get("protocolVersion", 1),
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": True, "audio": True, "embeddedContext": True},
                "mcpCapabilities": {"http": True},
                "sessionCapabilities": {"list": {}, "delete": {}, "additionalDirectories": {},
                                        "resume": {}, "close": {}},
                "auth": {"logout": {}},
            },
            "authMethods": [{"id": AUTH_METHOD, "name": "Testy agent auth"}],
            "agentInfo": {"name": AGENT_NAME, "version": _version()},
        }

    def authenticate(self, params: Any, cx: Context) -> dict[str, Any]:
        method = params.get("methodId") if isinstance(params, dict) else None
        if method != AUTH_METHOD:
            raise JsonRpcError(INVALID_PARAMS, data=f"unsupported auth method `{method}`")
        self.authenticated = True
        return {}

    def logout(self, params: Any, cx: Context) -> dict[str, Any]:
        self.authenticated = False
        return {}

    def note(self, params: Any, cx: Context) -> None:
        self.notes += 1

    # -- sessions -----------------------------------------------------------------------

    def _get(self, params: Any) -> tuple[str, _Session1]:
        sid = _session_id(params)
        session = self.sessions.get(sid)
        if session is None or session.closed:
            raise _unknown(sid)
        return sid, session

    def _setup(self, session: _Session1) -> dict[str, Any]:
        return {"modes": _modes(session.mode), "configOptions": _config_v1(session.verbosity)}

    def new_session(self, params: Any, cx: Context) -> dict[str, Any]:
        cwd = params.get("cwd") if isinstance(params, dict) else None
        if not isinstance(cwd, str):
            raise JsonRpcError(INVALID_PARAMS, data="`cwd` must be a string")
        self.next_session += 1
        sid = f"testy-session-{self.next_session}"
        session = self.sessions[sid] = _Session1(cwd)
        return {"sessionId": sid, **self._setup(session)}

    def load_session(self, params: Any, cx: Context) -> dict[str, Any]:
        sid = _session_id(params)
        cwd = params.get("cwd")
        session = self.sessions.get(sid)
        if session is None or session.closed:
            session = self.sessions[sid] = _Session1(cwd if isinstance(cwd, str) else "")
        elif isinstance(cwd, str):
            session.cwd = cwd
        return self._setup(session)

    def list_sessions(self, params: Any, cx: Context) -> dict[str, Any]:
        cwd = params.get("cwd") if isinstance(params, dict) else None
        return {"sessions": [
            {"sessionId": sid, "cwd": s.cwd, "title": "Testy session", "updatedAt": UPDATED_AT}
            for sid, s in sorted(self.sessions.items())
            if not s.closed and (cwd is None or s.cwd == cwd)]}

    def close_session(self, params: Any, cx: Context) -> dict[str, Any]:
        sid = params.get("sessionId") if isinstance(params, dict) else None
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is not None:
            session.closed = True
            self._cancel(session)
            if not session.active:
                del self.sessions[sid]  # type: ignore[arg-type]
        return {}

    def set_mode(self, params: Any, cx: Context) -> dict[str, Any]:
        _, session = self._get(params)
        mode = params.get("modeId")
        if mode not in ("chat", "plan"):
            raise JsonRpcError(INVALID_PARAMS, data=f"unknown mode `{mode}`")
        session.mode = mode
        return {}

    def set_config_option(self, params: Any, cx: Context) -> dict[str, Any]:
        _, session = self._get(params)
        config = params.get("configId")
        if config != "verbosity":
            raise JsonRpcError(INVALID_PARAMS, data=f"unknown config option `{config}`")
        value = params.get("value")
        if isinstance(value, dict):
            value = value.get("value")
        if value not in ("brief", "normal", "verbose"):
            raise JsonRpcError(INVALID_PARAMS, data=f"invalid value for `verbosity`: {value!r}")
        session.verbosity = value
        return {"configOptions": _config_v1(value)}

    # -- cancellation -------------------------------------------------------------------

    def _cancel(self, session: _Session1) -> None:
        if session.active:
            session.cancelled = True
            if session.cancel_event is not None:
                session.cancel_event.set()
        else:
            session.pending_cancel = True

    def cancel(self, params: Any, cx: Context) -> None:
        sid = params.get("sessionId") if isinstance(params, dict) else None
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is not None:
            self._cancel(session)

    async def _wait_or_cancel(self, session: _Session1, cx: Context, aw: Any) -> Any:
        """Await ``aw`` unless ``session/cancel`` (raises ``_Cancelled``) or the prompt's
        own ``$/cancel_request`` (-32800) comes first. A pending request is cancelled."""
        task = asyncio.ensure_future(aw)
        assert session.cancel_event is not None
        waiters = {task, asyncio.ensure_future(session.cancel_event.wait())}
        if cx.request is not None:
            waiters.add(asyncio.ensure_future(cx.wait_cancelled()))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                if w is not task:
                    w.cancel()
        if task.done():
            return task.result()
        task.cancel()
        if hasattr(aw, "cancel"):
            aw.cancel()  # sends $/cancel_request for the pending client callback
        if session.cancelled:
            raise _Cancelled
        raise JsonRpcError(REQUEST_CANCELLED)

    # -- prompt -------------------------------------------------------------------------

    async def prompt(self, params: Any, cx: Context) -> dict[str, Any]:
        sid, session = self._get(params)
        prompt = params.get("prompt")
        if not isinstance(prompt, list):
            raise JsonRpcError(INVALID_PARAMS, data="`prompt` must be an array of content blocks")
        kind, args = parse_command(prompt_text(prompt))
        session.active = True
        session.cancelled = False
        session.cancel_event = asyncio.Event()
        try:
            if kind == "stream":
                return await self._stream(sid, session, cx, args)
            try:
                text = await self._run(kind, args, sid, session, cx)
            except _Cancelled:
                text = None
            stop = "cancelled" if session.cancelled else "end_turn"
            if text is not None and not session.cancelled:
                self.next_message += 1
                cx.send_session_update(sid, {
                    "sessionUpdate": "agent_message_chunk", "content": _text(text),
                    "messageId": f"testy-message-{stop.replace('_', '-')}-{self.next_message}"})
            return {"stopReason": stop}
        finally:
            session.active = False
            session.cancel_event = None
            if session.closed:
                self.sessions.pop(sid, None)

    async def _stream(self, sid: str, session: _Session1, cx: Context, args: dict[str, Any]) -> dict[str, Any]:
        if args["permission"]:
            try:
                outcome = await self._permission(sid, session, cx, "allow", "reject")
            except _Cancelled:
                return {"stopReason": "cancelled"}
            cx.send_session_update(sid, {"sessionUpdate": "agent_message_chunk",
                                         "content": _text(f"permission:{outcome}")})
        done = await stream_chunks(cx, sid, args["n"], args["size"], None,
                                   lambda: session.cancelled or cx.cancelled)
        if not done and cx.cancelled and not session.cancelled:
            raise JsonRpcError(REQUEST_CANCELLED)
        return {"stopReason": "cancelled" if session.cancelled else "end_turn"}

    async def _permission(self, sid: str, session: _Session1, cx: Context, allow: str, reject: str) -> str:
        pending = cx.send_request("session/request_permission", {
            "sessionId": sid,
            "toolCall": {"toolCallId": "testy-permission", "title": "Testy tool", "kind": "edit",
                         "status": "pending"},
            "options": [{"optionId": allow, "name": "Allow", "kind": "allow_once"},
                        {"optionId": reject, "name": "Reject", "kind": "reject_once"}]})
        result = await self._wait_or_cancel(session, cx, pending)
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if isinstance(outcome, dict) and outcome.get("outcome") == "selected":
            return str(outcome.get("optionId"))
        return str(outcome.get("outcome")) if isinstance(outcome, dict) else "invalid"

    async def _run(self, kind: str, args: dict[str, Any], sid: str, session: _Session1, cx: Context) -> str:
        if kind == "help":
            return HELP
        if kind == "echo":
            return str(args["message"])
        if kind == "tool":
            return MCP_V1
        if kind != "scenario":
            return GREETING
        name = args["name"]
        if name == "wait_for_cancel":
            await self._wait_or_cancel(session, cx, asyncio.get_running_loop().create_future())
            return "wait_for_cancel: ok"
        names = FULL if name == "full" else (name,)
        lines = []
        for one in names:
            fn = getattr(self, f"_scenario_{one}", None)
            if fn is None:
                lines.append(f"{one}: error unknown scenario")
                continue
            lines.extend(await fn(sid, session, cx))
        return "\n".join(lines)

    # -- scenarios ----------------------------------------------------------------------

    async def _scenario_cancel_status(self, sid: str, session: _Session1, cx: Context) -> list[str]:
        status = "cancelled" if session.pending_cancel or session.cancelled else "not_cancelled"
        session.pending_cancel = False
        return [f"cancel_status: {status}"]

    async def _scenario_session_updates(self, sid: str, session: _Session1, cx: Context) -> list[str]:
        send = cx.send_session_update
        send(sid, {"sessionUpdate": "session_info_update", "title": "Testy session", "updatedAt": UPDATED_AT})
        send(sid, {"sessionUpdate": "current_mode_update", "currentModeId": session.mode})
        send(sid, {"sessionUpdate": "config_option_update", "configOptions": _config_v1(session.verbosity)})
        send(sid, {"sessionUpdate": "available_commands_update", "availableCommands": [
            {"name": "full", "description": "Run every Testy scenario"},
            {"name": "callbacks", "description": "Exercise client callbacks"},
            {"name": "elicitations", "description": "Exercise elicitations"}]})
        send(sid, {"sessionUpdate": "usage_update", "used": 128, "size": 4096,
                   "cost": {"amount": 0.0, "currency": "USD"}})
        lines = ["session_updates: ok"]
        lines += await self._scenario_content(sid, session, cx)
        lines += await self._scenario_tool_calls(sid, session, cx)
        return lines

    async def _scenario_content(self, sid: str, session: _Session1, cx: Context) -> list[str]:
        send = cx.send_session_update
        send(sid, {"sessionUpdate": "user_message_chunk", "content": _text("Testy content scenario")})
        send(sid, {"sessionUpdate": "agent_thought_chunk", "content": _text("Thinking about content")})
        for block in (
            _text("Some text content"),
            {"type": "image", "data": PNG_1X1, "mimeType": "image/png"},
            {"type": "audio", "data": WAV_EMPTY, "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///tmp/testy.txt", "name": "testy.txt",
             "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "file:///tmp/testy-embedded.txt",
                                              "mimeType": "text/plain", "text": "embedded resource"}},
        ):
            send(sid, {"sessionUpdate": "agent_message_chunk", "content": block})
        return ["content: ok"]

    async def _scenario_tool_calls(self, sid: str, session: _Session1, cx: Context) -> list[str]:
        send = cx.send_session_update
        send(sid, {"sessionUpdate": "tool_call", "toolCallId": "testy-read", "title": "Read file",
                   "kind": "read", "status": "pending",
                   "locations": [{"path": "/tmp/testy-input.txt"}]})
        send(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "testy-read", "status": "in_progress"})
        send(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "testy-read", "status": "completed",
                   "content": [{"type": "content", "content": _text("file contents")}]})
        send(sid, {"sessionUpdate": "tool_call", "toolCallId": "testy-edit", "title": "Edit file",
                   "kind": "edit", "status": "in_progress"})
        send(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "testy-edit", "status": "completed",
                   "content": [{"type": "diff", "path": "/tmp/testy-output.txt",
                                "oldText": "before\n", "newText": "after\n"}]})
        send(sid, {"sessionUpdate": "plan", "entries": [
            {"content": "Read the input", "priority": "high", "status": "completed"},
            {"content": "Edit the output", "priority": "medium", "status": "in_progress"},
            {"content": "Report", "priority": "low", "status": "pending"}]})
        return ["tool_calls: ok"]

    async def _call(self, session: _Session1, cx: Context, method: str, params: dict[str, Any]) -> Any:
        return await self._wait_or_cancel(session, cx, cx.send_request(method, params))

    async def _scenario_callbacks(self, sid: str, session: _Session1, cx: Context) -> list[str]:
        lines = []
        caps = self.client_caps
        fs_caps = caps.get("fs")
        fs: dict[str, Any] = fs_caps if isinstance(fs_caps, dict) else {}
        try:
            outcome = await self._permission(sid, session, cx, "allow_once", "reject_once")
            lines.append(f"permission: ok {outcome}")
        except JsonRpcError as exc:
            lines.append(f"permission: error {exc}")
        path = "/tmp/testy-callbacks.txt"
        for method, cap, params in (
            ("fs/write_text_file", "writeTextFile", {"sessionId": sid, "path": path, "content": "testy\n"}),
            ("fs/read_text_file", "readTextFile", {"sessionId": sid, "path": path}),
        ):
            if not fs.get(cap):
                lines.append(f"{method}: skipped (client capability fs.{cap} not advertised)")
                continue
            try:
                result = await self._call(session, cx, method, params)
                extra = f" {result.get('content')!r}" if isinstance(result, dict) and "content" in result else ""
                lines.append(f"{method}: ok{extra}")
            except JsonRpcError as exc:
                lines.append(f"{method}: error {exc}")
        if caps.get("terminal") is True:
            try:
                created = await self._call(session, cx, "terminal/create", {
                    "sessionId": sid, "command": "echo", "args": ["testy"]})
                tid = created["terminalId"]
                ref = {"sessionId": sid, "terminalId": tid}
                await self._call(session, cx, "terminal/output", ref)
                await self._call(session, cx, "terminal/wait_for_exit", ref)
                await self._call(session, cx, "terminal/kill", ref)
                await self._call(session, cx, "terminal/release", ref)
                lines.append("terminal: ok")
            except (JsonRpcError, KeyError, TypeError) as exc:
                lines.append(f"terminal: error {exc}")
        else:
            lines.append("terminal: skipped (client capability terminal not advertised)")
        lines += await self._scenario_elicitations(sid, session, cx, required=False)
        return lines

    async def _scenario_elicitations(self, sid: str, session: _Session1, cx: Context,
                                     required: bool = True) -> list[str]:
        caps = self.client_caps.get("elicitation")
        caps = caps if isinstance(caps, dict) else {}
        if not isinstance(caps.get("form"), dict):
            if required:
                raise JsonRpcError(INVALID_PARAMS, data="client does not support form elicitation")
            return ["elicitations: skipped (client capability elicitation.form not advertised)"]
        schema = {"type": "object", "properties": {"name": {"type": "string", "title": "Name"}},
                  "required": ["name"]}
        lines = []

        async def one(label: str, params: dict[str, Any]) -> None:
            try:
                result = await self._call(session, cx, "elicitation/create", params)
                lines.append(f"{label}: ok {result.get('action') if isinstance(result, dict) else result}")
            except JsonRpcError as exc:
                lines.append(f"{label}: error {exc}")

        await one("elicitation form session", {"sessionId": sid, "mode": "form",
                                               "message": "Testy form (session scope)", "requestedSchema": schema})
        await one("elicitation form request", {"requestId": cx.id, "mode": "form",
                                               "message": "Testy form (request scope)", "requestedSchema": schema})
        if not isinstance(caps.get("url"), dict):
            if required:
                raise JsonRpcError(INVALID_PARAMS, data="client does not support URL elicitation")
            lines.append("elicitation url: skipped (client capability elicitation.url not advertised)")
            return lines
        await one("elicitation url session", {"sessionId": sid, "mode": "url", "elicitationId": "testy-elicitation-1",
                                              "url": "https://example.com/testy", "message": "Testy URL (session)"})
        cx.send_notification("elicitation/complete", {"elicitationId": "testy-elicitation-1"})
        await one("elicitation url request", {"requestId": cx.id, "mode": "url", "elicitationId": "testy-elicitation-2",
                                              "url": "https://example.com/testy", "message": "Testy URL (request)"})
        return lines


def _echo(params: Any, cx: Context) -> Any:
    return params if params is not None else {}


def _version() -> str:
    from .. import __version__

    return __version__


# ---------------------------------------------------------------------------------------
# v2
# ---------------------------------------------------------------------------------------


class _Session2:
    __slots__ = ("cancel_event", "cancelled", "closed", "cwd", "history", "pending_cancel", "work")

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.closed = False
        self.cancelled = False
        self.pending_cancel = False
        self.cancel_event = asyncio.Event()
        self.work: asyncio.Task[None] | None = None
        self.history: list[dict[str, Any]] = []


#: agent messages longer than this are kept in the replay history as a summary only
HISTORY_LIMIT = 1 << 20


class TestyV2:
    """State and handlers of the v2 Testy (one instance per connection)."""

    def __init__(self) -> None:
        self.sessions: dict[str, _Session2] = {}
        self.next_session = 0
        self.next_prompt = 0
        self.notes = 0

    def builder(self) -> AgentBuilder:
        b = Agent.v2()
        b.with_info(AGENT_NAME, _version())
        for method, fn in (
            ("initialize", self.initialize), ("session/new", self.new_session),
            ("session/list", self.list_sessions), ("session/resume", self.resume_session),
            ("session/close", self.close_session), ("session/prompt", self.prompt),
            ("_test/echo", _echo), ("_bench/echo", _echo), ("_test/stats", lambda p, cx: stats(self.notes, cx)),
        ):
            b.on_request(method, fn)
        b.on_notification("session/cancel", self.cancel)
        b.on_notification("_test/note", self.note)
        return b

    def initialize(self, params: Any, cx: Context) -> dict[str, Any]:
        return {"protocolVersion": 2, "info": {"name": AGENT_NAME, "version": _version()},
                "capabilities": {"session": {}}}

    def note(self, params: Any, cx: Context) -> None:
        self.notes += 1

    def _get(self, params: Any) -> tuple[str, _Session2]:
        sid = _session_id(params)
        session = self.sessions.get(sid)
        if session is None or session.closed:
            raise _unknown(sid)
        return sid, session

    def new_session(self, params: Any, cx: Context) -> dict[str, Any]:
        cwd = params.get("cwd") if isinstance(params, dict) else None
        if not isinstance(cwd, str):
            raise JsonRpcError(INVALID_PARAMS, data="`cwd` must be a string")
        self.next_session += 1
        sid = f"testy-v2-session-{self.next_session}"
        self.sessions[sid] = _Session2(cwd)
        return {"sessionId": sid}

    def list_sessions(self, params: Any, cx: Context) -> dict[str, Any]:
        cwd = params.get("cwd") if isinstance(params, dict) else None
        return {"sessions": [
            {"sessionId": sid, "cwd": s.cwd, "title": "Testy session", "updatedAt": UPDATED_AT}
            for sid, s in sorted(self.sessions.items())
            if not s.closed and (cwd is None or s.cwd == cwd)]}

    def resume_session(self, params: Any, cx: Context) -> dict[str, Any]:
        sid, session = self._get(params)
        if session.work is not None:
            raise JsonRpcError(INVALID_PARAMS, data=f"session `{sid}` has active foreground work")
        cwd = params.get("cwd")
        if cwd != session.cwd:
            raise JsonRpcError(INVALID_PARAMS, data=f"session `{sid}` belongs to cwd `{session.cwd}`")
        replay = params.get("replayFrom")
        if replay is not None and not (isinstance(replay, dict) and replay.get("type") == "start"):
            raise JsonRpcError(INVALID_PARAMS, data="unsupported session replay cursor")
        if replay is not None:
            for update in session.history:
                cx.send_session_update(sid, update)
        # the current-state snapshot, after any replay and before the response (seed 000)
        cx.send_session_update(sid, {"sessionUpdate": "state_update", "state": "idle"})
        return {}

    def close_session(self, params: Any, cx: Context) -> Any:
        sid = _session_id(params)
        session = self.sessions.get(sid)
        if session is None or session.closed:
            return {}
        session.closed = True
        work = session.work
        if work is None:
            del self.sessions[sid]
            return {}
        session.cancelled = True
        session.cancel_event.set()

        async def after_work() -> dict[str, Any]:
            await asyncio.wait((work,))
            self.sessions.pop(sid, None)
            return {}

        return after_work()

    def cancel(self, params: Any, cx: Context) -> None:
        sid = params.get("sessionId") if isinstance(params, dict) else None
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            return
        if session.work is not None:
            session.cancelled = True
            session.cancel_event.set()
        else:
            session.pending_cancel = True

    def prompt(self, params: Any, cx: Context) -> dict[str, Any]:
        sid, session = self._get(params)
        prompt = params.get("prompt")
        if not isinstance(prompt, list):
            raise JsonRpcError(INVALID_PARAMS, data="`prompt` must be an array of content blocks")
        if session.work is not None:
            raise JsonRpcError(INVALID_PARAMS, data=f"session `{sid}` already has foreground work")
        self.next_prompt += 1
        n = self.next_prompt
        user_id = f"testy-v2-user-message-{n}"
        session.cancelled = False
        session.cancel_event = asyncio.Event()
        # the response (the insertion receipt) is written before the task's first update
        session.work = asyncio.ensure_future(self._turn(sid, session, cx, prompt, user_id,
                                                        f"testy-v2-agent-message-{n}"))
        return {"messageId": user_id}

    async def _turn(self, sid: str, session: _Session2, cx: Context, prompt: list[Any],
                    user_id: str, agent_id: str) -> None:
        send = cx.send_session_update
        try:
            user = {"sessionUpdate": "user_message", "messageId": user_id, "content": prompt}
            session.history.append(user)
            send(sid, user)
            send(sid, {"sessionUpdate": "state_update", "state": "running"})
            kind, args = parse_command(prompt_text(prompt))
            stop = "end_turn"
            text: str | None = None
            if kind == "stream":
                if args["permission"]:
                    outcome = await self._permission(sid, session, cx)
                    send(sid, {"sessionUpdate": "agent_message_chunk", "messageId": agent_id,
                               "content": _text(f"permission:{outcome}")})
                if not session.cancelled:
                    await stream_chunks(cx, sid, args["n"], args["size"], agent_id, lambda: session.cancelled)
                total = args["n"] * args["size"]
                text = "x" * total if total <= HISTORY_LIMIT else f"[{args['n']} chunks of {args['size']} bytes]"
                self._record(session, agent_id, text)
                text = None
            elif kind == "help":
                text = HELP
            elif kind == "echo":
                text = str(args["message"])
            elif kind == "tool":
                text, stop = MCP_V2, "refusal"
            elif kind == "scenario":
                name = args["name"]
                if name == "wait_for_cancel":
                    await session.cancel_event.wait()
                elif name == "cancel_status":
                    status = "cancelled" if session.pending_cancel else "not_cancelled"
                    session.pending_cancel = False
                    text = f"cancel_status: {status}"
                else:
                    text, stop = f"Testy v2 scenario `{name}` is not implemented yet", "refusal"
            else:
                text = GREETING
            if session.cancelled:
                stop = "cancelled"
            elif text is not None:
                send(sid, {"sessionUpdate": "agent_message_chunk", "messageId": agent_id, "content": _text(text)})
                self._record(session, agent_id, text)
            send(sid, {"sessionUpdate": "state_update", "state": "idle", "stopReason": stop})
        except Exception:  # pragma: no cover - reported on the idle update
            logger.exception("testy v2 turn failed")
            send(sid, {"sessionUpdate": "state_update", "state": "idle", "stopReason": "error"})
        finally:
            session.work = None

    def _record(self, session: _Session2, agent_id: str, text: str) -> None:
        session.history.append({"sessionUpdate": "agent_message", "messageId": agent_id, "content": [_text(text)]})

    async def _permission(self, sid: str, session: _Session2, cx: Context) -> str:
        pending = cx.send_request("session/request_permission", {
            "sessionId": sid, "title": "Testy tool",
            "subject": {"type": "tool_call", "toolCall": {"toolCallId": "testy-permission", "title": "Testy tool"}},
            "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]})
        cancel = asyncio.ensure_future(session.cancel_event.wait())
        waiter = asyncio.ensure_future(_settle(pending))
        await asyncio.wait((waiter, cancel), return_when=asyncio.FIRST_COMPLETED)
        cancel.cancel()
        if not waiter.done():  # cancelled foreground work: stop waiting, cancel the request
            pending.cancel()
            return "cancelled"
        result = waiter.result()
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if isinstance(outcome, dict) and outcome.get("outcome") == "selected":
            return str(outcome.get("optionId"))
        return str(outcome.get("outcome")) if isinstance(outcome, dict) else "error"


async def _settle(pending: Any) -> Any:
    try:
        return await pending
    except JsonRpcError as exc:
        return {"error": exc.to_dict()}


# ---------------------------------------------------------------------------------------
# assembling and running
# ---------------------------------------------------------------------------------------


def parse_versions(text: str) -> tuple[int, ...]:
    """``"1,2"`` -> ``(1, 2)``; raises ValueError for anything but a subset of {1, 2}."""
    try:
        versions = tuple(sorted({int(v) for v in text.replace(" ", "").split(",") if v}))
    except ValueError:
        raise ValueError(f"invalid --versions {text!r}: expected 1, 2 or 1,2") from None
    if not versions or not set(versions) <= {1, 2}:
        raise ValueError(f"invalid --versions {text!r}: expected 1, 2 or 1,2")
    return versions


class _PerConnection:
    """A router-like endpoint that builds fresh Testy state for every connection."""

    def __init__(self, versions: Sequence[int]) -> None:
        self.versions = tuple(versions)

    def build(self) -> AgentBuilder | AgentRouter:
        if self.versions == (1,):
            return TestyV1().builder()
        router = Agent.protocol_router()
        if 1 in self.versions:
            router.with_v1(TestyV1().builder())
        if 2 in self.versions:
            router.with_v2(TestyV2().builder())
        return router

    async def serve(self, transport: Any, *, engine: Any = None) -> None:
        await self.build().serve(transport, engine=engine)


def build(versions: Sequence[int] = (1, 2)) -> _PerConnection:
    """A Testy endpoint for ``versions``; ``await build().serve(stream)`` serves one
    connection (each connection gets its own state)."""
    return _PerConnection(versions)


def _engine_module(name: str) -> Any:
    if name == "auto":
        return None
    import importlib

    return importlib.import_module(f"acp_fast._engine_{name}")


def add_parser(subparsers: Any) -> Any:
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
    parser.add_argument("--log-level", default=os.environ.get("ACP_FAST_LOG", "WARNING"),
                        help="stderr log level (default: WARNING, or $ACP_FAST_LOG)")
    parser.set_defaults(func=main)
    return parser


def main(args: Any) -> int:
    try:
        versions = parse_versions(args.versions)
    except ValueError as exc:
        import sys

        print(f"acp-fast testy: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=str(args.log_level).upper(), format="testy: %(levelname)s %(name)s: %(message)s")
    from .. import transport

    endpoint = build(versions)
    engine = _engine_module(args.engine)
    transport.run(endpoint.serve(transport.connect_stdio(), engine=engine))
    return 0
