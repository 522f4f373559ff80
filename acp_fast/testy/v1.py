"""Testy v1 (protocol.md §9.1): sessions, modes, config options, scenarios, client callbacks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from .. import __version__
from ..errors import INVALID_PARAMS, REQUEST_CANCELLED, JsonRpcError
from ..jsontypes import Json, JsonObject
from ..protocol.facts import SESSION_REQUEST_PERMISSION
from .commands import FULL, HELP, parse_command, prompt_text
from .common import AGENT_NAME, AUTH_METHOD, GREETING, UPDATED_AT, TestyBase, session_id, text_block, unknown_session
from .streaming import stream

if TYPE_CHECKING:
    from ..roles import V1, AgentBuilder

__all__ = ["TestyV1"]

_T = TypeVar("_T")

MCP_V1 = "ERROR: Testy (acp_fast) does not support MCP servers"
# a 1x1 transparent PNG and a tiny WAV header, base64
PNG_1X1 = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")
WAV_EMPTY = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA="


def _modes(current: str) -> JsonObject:
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
    """The prompt was cancelled by `session/cancel` while waiting."""


class TestyV1(TestyBase):
    """State and handlers of the v1 Testy (one instance per connection)."""

    version = 1

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sessions: dict[str, _Session1] = {}
        self.next_message = 0
        self.client_caps: dict[str, Any] = {}

    def builder(self) -> AgentBuilder[V1]:
        """A v1 `Agent` builder with this variant's handlers (`register`)."""
        from .. import Agent

        return self.register(Agent.builder())

    # -- lifecycle --------------------------------------------------------------------

    def initialize_connection(self, params: Json, cx: Any) -> JsonObject:
        """`initialize`: keep the client's capabilities (for the callback scenarios) and
        answer Testy's agent capabilities, auth method and info, echoing `protocolVersion`."""
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
            "agentInfo": {"name": AGENT_NAME, "version": __version__},
        }

    def authenticate_connection(self, params: Json, cx: Any) -> JsonObject:
        """`authenticate`: accept Testy's one auth method.

        Raises:
            JsonRpcError: -32602 for any other `methodId`.
        """
        method = params.get("methodId") if isinstance(params, dict) else None
        if method != AUTH_METHOD:
            raise JsonRpcError(INVALID_PARAMS, data=f"unsupported auth method `{method}`")
        self.authenticated = True
        return {}

    def logout(self, params: Json, cx: Any) -> JsonObject:
        """`logout`: forget the authentication."""
        self.authenticated = False
        return {}

    # -- sessions -----------------------------------------------------------------------

    def _get(self, params: Json) -> tuple[str, _Session1]:
        sid = session_id(params)
        session = self.sessions.get(sid)
        if session is None or session.closed:
            raise unknown_session(sid)
        return sid, session

    def _setup(self, session: _Session1) -> JsonObject:
        return {"modes": _modes(session.mode), "configOptions": _config_v1(session.verbosity)}

    def new_session(self, params: Json, cx: Any) -> JsonObject:
        """`session/new`: a new session in `cwd`, with its modes and config options.

        Raises:
            JsonRpcError: -32602 when `cwd` is not a string.
        """
        cwd = self._new_cwd(params)
        sid = f"testy-session-{self.next_session}"
        session = self.sessions[sid] = _Session1(cwd)
        return {"sessionId": sid, **self._setup(session)}

    def load_session(self, params: Json, cx: Any) -> JsonObject:
        """`session/load` and `session/resume`: the session with that id (made anew when
        unknown or closed; `cwd` updated when given), with its modes and config options."""
        sid = session_id(params)
        cwd = params.get("cwd")
        session = self.sessions.get(sid)
        if session is None or session.closed:
            session = self.sessions[sid] = _Session1(cwd if isinstance(cwd, str) else "")
        elif isinstance(cwd, str):
            session.cwd = cwd
        return self._setup(session)

    def close_session(self, params: Json, cx: Any) -> JsonObject:
        """`session/close` and `session/delete`: close the session and cancel its prompt
        (an unknown id is not an error)."""
        sid = params.get("sessionId") if isinstance(params, dict) else None
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is not None:
            session.closed = True
            self._cancel(session)
            if not session.active:
                del self.sessions[sid]  # type: ignore[arg-type]
        return {}

    resume_session = load_session
    delete_session = close_session

    def set_mode(self, params: Json, cx: Any) -> JsonObject:
        """`session/set_mode`: `"chat"` or `"plan"`.

        Raises:
            JsonRpcError: -32602 for an unknown session or mode.
        """
        _, session = self._get(params)
        mode = params.get("modeId")
        if mode not in ("chat", "plan"):
            raise JsonRpcError(INVALID_PARAMS, data=f"unknown mode `{mode}`")
        session.mode = mode
        return {}

    def set_config_option(self, params: Json, cx: Any) -> JsonObject:
        """`session/set_config_option`: set `verbosity`; answers the new config options.

        Raises:
            JsonRpcError: -32602 for an unknown session, config option or value.
        """
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

    def cancel(self, params: Json, cx: Any) -> None:
        """`session/cancel`: cancel the session's running prompt, or remember the
        cancellation for the `cancel_status` scenario when none runs."""
        sid = params.get("sessionId") if isinstance(params, dict) else None
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is not None:
            self._cancel(session)

    async def _wait_or_cancel(self, session: _Session1, cx: Any, aw: Awaitable[_T]) -> _T:
        """Await `aw` unless `session/cancel` (raises `_Cancelled`) or the prompt's
        own `$/cancel_request` (-32800) comes first. A pending request is cancelled."""
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

    async def prompt(self, params: Json, cx: Any) -> JsonObject:
        """`session/prompt`: run the command of the prompt's text (see
        `acp_fast.testy.commands`) and answer its stop reason (`"end_turn"` or
        `"cancelled"`).

        Raises:
            JsonRpcError: -32602 for an unknown session or a `prompt` that is not an array;
                -32800 when the prompt's own request was cancelled.
        """
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
                    "sessionUpdate": "agent_message_chunk", "content": text_block(text),
                    "messageId": f"testy-message-{stop.replace('_', '-')}-{self.next_message}"})
            return {"stopReason": stop}
        finally:
            session.active = False
            session.cancel_event = None
            if session.closed:
                self.sessions.pop(sid, None)

    async def _stream(self, sid: str, session: _Session1, cx: Any, args: dict[str, Any]) -> JsonObject:
        # One loop turn before streaming: a session/cancel read together with this prompt
        # is handled first (the connection runs it after this handler started), so a
        # cancelled stream ends "cancelled" even when it would finish without awaiting.
        await asyncio.sleep(0)
        if args["permission"]:
            try:
                outcome = await self._permission(sid, session, cx, "allow", "reject")
            except _Cancelled:
                return {"stopReason": "cancelled"}
            cx.send_session_update(sid, {"sessionUpdate": "agent_message_chunk",
                                         "content": text_block(f"permission:{outcome}")})
        done = await stream(self.stream_mode)(cx, sid, args["n"], args["size"], None,
                                   lambda: session.cancelled or cx.cancelled)
        if not done and cx.cancelled and not session.cancelled:
            raise JsonRpcError(REQUEST_CANCELLED)
        return {"stopReason": "cancelled" if session.cancelled else "end_turn"}

    async def _permission(self, sid: str, session: _Session1, cx: Any, allow: str, reject: str) -> str:
        pending = cx.send_request(SESSION_REQUEST_PERMISSION, {
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

    async def _run(self, kind: str, args: dict[str, Any], sid: str, session: _Session1, cx: Any) -> str:
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

    async def _scenario_cancel_status(self, sid: str, session: _Session1, cx: Any) -> list[str]:
        status = "cancelled" if session.pending_cancel or session.cancelled else "not_cancelled"
        session.pending_cancel = False
        return [f"cancel_status: {status}"]

    async def _scenario_session_updates(self, sid: str, session: _Session1, cx: Any) -> list[str]:
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

    async def _scenario_content(self, sid: str, session: _Session1, cx: Any) -> list[str]:
        send = cx.send_session_update
        send(sid, {"sessionUpdate": "user_message_chunk", "content": text_block("Testy content scenario")})
        send(sid, {"sessionUpdate": "agent_thought_chunk", "content": text_block("Thinking about content")})
        for block in (
            text_block("Some text content"),
            {"type": "image", "data": PNG_1X1, "mimeType": "image/png"},
            {"type": "audio", "data": WAV_EMPTY, "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///tmp/testy.txt", "name": "testy.txt",
             "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "file:///tmp/testy-embedded.txt",
                                              "mimeType": "text/plain", "text": "embedded resource"}},
        ):
            send(sid, {"sessionUpdate": "agent_message_chunk", "content": block})
        return ["content: ok"]

    async def _scenario_tool_calls(self, sid: str, session: _Session1, cx: Any) -> list[str]:
        send = cx.send_session_update
        send(sid, {"sessionUpdate": "tool_call", "toolCallId": "testy-read", "title": "Read file",
                   "kind": "read", "status": "pending",
                   "locations": [{"path": "/tmp/testy-input.txt"}]})
        send(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "testy-read", "status": "in_progress"})
        send(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "testy-read", "status": "completed",
                   "content": [{"type": "content", "content": text_block("file contents")}]})
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

    async def _call(self, session: _Session1, cx: Any, method: str, params: JsonObject) -> Json:
        return await self._wait_or_cancel(session, cx, cx.send_request(method, params))

    async def _scenario_callbacks(self, sid: str, session: _Session1, cx: Any) -> list[str]:
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

    async def _scenario_elicitations(self, sid: str, session: _Session1, cx: Any,
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

