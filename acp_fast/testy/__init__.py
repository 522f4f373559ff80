"""Testy: a deterministic ACP test agent (the Rust SDK's Testy, in Python); `acp-fast testy` serves it on stdio.

By default one endpoint serves protocol v1 and draft v2 through the agent protocol router
(`Agent.protocol_router().with_v1(...).with_v2(...)`); the version is picked by the
client's first `initialize` and the two implementations keep separate state.
`--versions 2` serves v2 only (a v1 `initialize` is answered with -32022
`{"requested": 1, "supported": [2]}` and the connection closes); `--versions 1` v1 only
(any valid `initialize` selects v1). Logs go to stderr.

Prompt language (the prompt text is every `text` block joined with one space):

* empty, or anything not recognised: `greet` ("Hello, world!");
* `help`; `echo <message>`;
* a JSON object `{"command": "help"|"greet"|"echo"|"run_scenario"|"call_tool"|"list_tools",
  "message"?, "scenario"?, "server"?, "tool"?, "params"?}`;
* a scenario name or alias: `session_updates` (`session updates`, `updates`),
  `content`, `tool_calls` (`tool calls`, `tools`), `callbacks`
  (`client_callbacks`, `client callbacks`), `elicitations` (`elicitation`,
  `elicit`), `cancel_status` (`cancel status`, `cancel`), `wait_for_cancel`
  (`wait for cancel`), `full` (`all`);
* benchmark commands, compatible with the clients in `peers/`: `stream N [chunks [of S
  bytes]]` and `warmup N` stream N `agent_message_chunk` updates of S bytes of text
  (S from `$ACP_CHUNK`, default 100); a bare integer `N` is `stream N`; a leading
  `permission` word first sends `session/request_permission` (options `allow` /
  `reject`) and streams one chunk `permission:<optionId or cancelled>`. No closing
  text chunk is sent after a benchmark stream. How the chunks are sent is the agent's
  `stream_mode`: `api` (default: fresh update dicts through `cx.send_session_update`)
  or `preencoded` (one pre-encoded line re-sent, a raw ceiling; see `streaming`).

v1 (protocol.md §9.1): `initialize` (capabilities: loadSession, prompt image/audio/
embeddedContext, MCP http, session list/delete/additionalDirectories/resume/close, auth
logout; one agent auth method `testy-agent-auth`), `authenticate`, `logout`,
`session/new|load|resume|list|delete|close|set_mode|set_config_option|prompt`,
`session/cancel`. A prompt answers `{"stopReason"}` after one `agent_message_chunk`
with the command's text (message id `testy-message-<stop-reason>-N`). Scenarios:
`session_updates`, `content`, `tool_calls`, `callbacks` (permission,
`fs/write_text_file`, `fs/read_text_file`, `terminal/*` - each only when the client
advertised the capability, else reported `skipped` - then elicitations),
`elicitations` (form needs the client's form capability, else the prompt fails with
-32602; URL mode needs the URL capability), `cancel_status`, `wait_for_cancel`,
`full`. While a client callback is pending, `session/cancel` stops the wait and the
request is cancelled with `$/cancel_request`.

v2 (protocol.md §9.2, seed 000): `initialize` (`info` `test-agent`, capabilities
`{"session": {"fork": {}}, "auth": {"status": {}}}`), `session/new|list|resume|fork|close|prompt`,
`session/cancel`, `auth/status` (and `auth/login` / `auth/logout`). Prompts are served
by the builder API's [`AgentSession`][acp_fast.roles.AgentSession] (seed 000 prompt
acceptance): a prompt is answered at once with its insertion receipt
`{"messageId": "testy-v2-user-message-N"}`, then `user_message` -> `state_update
running` -> output -> `state_update idle` with a stop reason (`cancelled` after
`session/cancel` or `session/close`; `session/close` answers after that idle update).
A second prompt while foreground work runs gets -32602; malformed `mcpServers` or
`additionalDirectories` of `session/new|resume|fork` get -32602 (schema 1.11). Two scenarios show the acceptance
rules: `hold_before_insert` reports `running` and never inserts (a cancel or close
answers the prompt -32800, then idle `cancelled`); `auth_required` inserts, then fails:
the prompt response stays successful and the idle update carries stop reason `error` with
the -32000 error object. `--require-auth` (`require_auth=True`): every method but
`initialize` and `auth/*` answers -32000 until `auth/login` with `testy-agent-auth`
(advertised in `authMethods`); `auth/status` is always answered (seed 004 I6). v2 commands: help, greet, echo, cancel_status,
wait_for_cancel and the benchmark commands; other scenarios answer a `refusal` with
"Testy v2 scenario `x` is not implemented yet". History (`user_message` + whole
`agent_message` per prompt) is replayed by `session/resume` with `replayFrom:
{"type": "start"}`; every successful resume then sends an idle `state_update` snapshot
(no stop reason) before its response. Other cursors get -32602.

Both versions: `_test/echo` and `_bench/echo` return their params; `_test/stats`
returns `{maxRssKiB, rssKiB, rssBytes, userCpuUs, systemCpuUs, notesReceived, engine}`
(`maxRssKiB`/`rssKiB`: peak RSS); `_test/note` notifications are counted. Unknown
methods get -32601.

Not implemented: MCP. `call_tool` / `list_tools` answer the text "ERROR: Testy (acp_fast)
does not support MCP servers" (v1, stop reason `end_turn`) or "Testy v2 does not advertise
MCP support yet" (v2, `refusal`); no MCP connection is ever made. The v1 `tool_calls`
scenario has no terminal tool.

Layout: `commands` (the prompt language), `common` (the handler table shared by
both variants, process stats), `streaming` (benchmark streams), `v1`, `v2`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import IMPLEMENTATION
from .commands import parse_command, parse_versions, prompt_text
from .common import NOTIFICATIONS, REQUESTS, process_stats
from .streaming import STREAM_MODES, stream_preencoded, stream_updates
from .v1 import TestyV1
from .v2 import TestyV2

if TYPE_CHECKING:
    from ..roles import V1, AgentBuilder, AgentRouter, EngineChoice, Transport

__all__ = ["NOTIFICATIONS", "REQUESTS", "STREAM_MODES", "Endpoint", "TestyV1", "TestyV2", "build",
           "parse_command", "parse_versions", "process_stats", "prompt_text", "stream_preencoded",
           "stream_updates"]


class Endpoint:
    """Serves Testy: every connection gets fresh state ([`serve`][acp_fast.testy.Endpoint.serve])."""

    def __init__(self, versions: Sequence[int] = (1, 2), *, stream_mode: str = "api",
                 require_auth: bool = False) -> None:
        if stream_mode not in STREAM_MODES:
            raise ValueError(f"unknown stream mode {stream_mode!r}; expected one of {', '.join(STREAM_MODES)}")
        self.versions = tuple(versions)
        self.stream_mode = stream_mode
        self.require_auth = require_auth

    def build(self, engine: EngineChoice = None) -> AgentBuilder[V1] | AgentRouter:
        """An `Agent` builder (one version) or `Agent.protocol_router()` (both)."""
        from .. import Agent

        if engine is None:
            name = IMPLEMENTATION
        else:
            name = engine if isinstance(engine, str) else engine.IMPLEMENTATION
        kw: dict[str, Any] = {"stream_mode": self.stream_mode, "engine": name}
        kw["require_auth"] = self.require_auth
        if self.versions == (1,):
            return TestyV1(**kw).builder()
        router = Agent.protocol_router()
        if 1 in self.versions:
            router.with_v1(TestyV1(**kw).builder())
        if 2 in self.versions:
            router.with_v2(TestyV2(**kw).builder())
        return router

    async def serve(self, transport: Transport, *, engine: EngineChoice = None) -> None:
        """Serve one connection on `transport` (`engine`: `"c"`, `"py"`, a twin module,
        or `None` for the active one)."""
        await self.build(engine).serve(transport, engine=engine)


def build(versions: Sequence[int] = (1, 2), *, stream_mode: str = "api", require_auth: bool = False) -> Endpoint:
    """A Testy endpoint for `versions`; `await build().serve(stream)` serves one
    connection (each connection gets its own state)."""
    return Endpoint(versions, stream_mode=stream_mode, require_auth=require_auth)
