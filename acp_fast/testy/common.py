"""What Testy's v1 and v2 variants share: constants, the ONE handler table, the base class.

`REQUESTS` and `NOTIFICATIONS` map every method Testy may serve to the name of
its handler. A variant ([`TestyV1`][acp_fast.testy.v1.TestyV1], [`TestyV2`][acp_fast.testy.v2.TestyV2])
serves exactly the methods whose handler it defines; `TestyBase.register` registers them.
"""

from __future__ import annotations

import asyncio
import os
import resource
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .. import IMPLEMENTATION, __version__
from ..errors import AUTH_REQUIRED, INVALID_PARAMS, JsonRpcError
from ..jsontypes import Json, JsonObject
from ..protocol.facts import (
    AUTHENTICATE,
    INITIALIZE,
    SESSION_CANCEL,
    SESSION_FORK,
    SESSION_LOAD,
    SESSION_NEW,
    SESSION_PROMPT,
    SESSION_RESUME,
)

if TYPE_CHECKING:
    from ..roles import AgentBuilder

_R = TypeVar("_R")
_B = TypeVar("_B", bound="AgentBuilder[Any]")

__all__ = ["NOTIFICATIONS", "REQUESTS", "TestyBase", "process_stats", "session_id", "text_block",
           "unknown_session"]

AGENT_NAME = "test-agent"
AUTH_METHOD = "testy-agent-auth"
UPDATED_AT = "2026-01-01T00:00:00Z"
GREETING = "Hello, world!"

#: method -> handler attribute, for requests (a variant without the attribute does not serve it)
REQUESTS: tuple[tuple[str, str], ...] = (
    (INITIALIZE, "initialize_connection"),
    (AUTHENTICATE, "authenticate_connection"),
    ("logout", "logout"),
    ("auth/status", "auth_status"),
    ("auth/login", "login"),
    ("auth/logout", "logout_v2"),
    (SESSION_NEW, "new_session"),
    (SESSION_LOAD, "load_session"),
    (SESSION_RESUME, "resume_session"),
    (SESSION_FORK, "fork_session"),
    ("session/list", "list_sessions"),
    ("session/delete", "delete_session"),
    ("session/close", "close_session"),
    ("session/set_mode", "set_mode"),
    ("session/set_config_option", "set_config_option"),
    (SESSION_PROMPT, "prompt"),
    ("_test/echo", "echo"),
    ("_bench/echo", "echo"),
    ("_test/stats", "stats"),
)
#: method -> handler attribute, for notifications
#: methods served before ``authenticate`` when Testy requires authentication (seed 004 I6)
AUTH_EXEMPT = frozenset({INITIALIZE, AUTHENTICATE, "logout", "auth/status", "auth/login", "auth/logout"})

NOTIFICATIONS: tuple[tuple[str, str], ...] = (
    (SESSION_CANCEL, "cancel"),
    ("_test/note", "note"),
)


def text_block(text: str) -> JsonObject:
    """A `text` content block."""
    return {"type": "text", "text": text}


def session_id(params: Json) -> str:
    """The `sessionId` of `params`.

    Raises:
        JsonRpcError: -32602 when `params` has no string `sessionId`.
    """
    sid = params.get("sessionId") if isinstance(params, dict) else None
    if not isinstance(sid, str):
        raise JsonRpcError(INVALID_PARAMS, data="`sessionId` must be a string")
    return sid


def unknown_session(sid: str) -> JsonRpcError:
    """The -32602 error for a session id Testy does not know."""
    return JsonRpcError(INVALID_PARAMS, data=f"unknown session `{sid}`")


def process_stats(notes: int, engine: str = IMPLEMENTATION) -> JsonObject:
    """The `_test/stats` answer (field names of the peers in `peers/`; `loop`: the running
    event loop's kind, so a benchmark can check that both sides ran on the loop it asked for)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    try:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        rss = usage.ru_maxrss * 1024
    try:
        loop = "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
    except RuntimeError:
        loop = None
    return {"maxRssKiB": usage.ru_maxrss, "rssKiB": usage.ru_maxrss, "rssBytes": rss,
            "userCpuUs": int(usage.ru_utime * 1e6), "systemCpuUs": int(usage.ru_stime * 1e6),
            "notesReceived": notes, "engine": engine, "loop": loop}


class TestyBase:
    """State and handlers both variants have (one instance per connection).

    Attributes:
        stream_mode: `"api"` (every benchmark chunk built fresh and sent with
            `cx.send_session_update`) or `"preencoded"` (one line re-sent: a raw ceiling).
        engine: the engine twin serving the connection (`"c"` or `"py"`), for `_test/stats`.
    """

    #: the builder factory of the variant (``Agent.builder`` or ``Agent.v2``)
    version = 0

    def __init__(self, *, stream_mode: str = "api", engine: str = IMPLEMENTATION,
                 require_auth: bool = False) -> None:
        self.stream_mode = stream_mode
        self.engine = engine
        self.require_auth = require_auth
        self.authenticated = False
        self.notes = 0
        self.next_session = 0

    def register(self, b: _B) -> _B:
        """Register this variant's handlers of the shared table (and Testy's name and
        version) on the `Agent` builder `b` of the variant's version; returns `b`."""
        b.with_info(AGENT_NAME, __version__)
        for method, attr in REQUESTS:
            fn = getattr(self, attr, None)
            if fn is not None:
                if self.require_auth and method not in AUTH_EXEMPT:
                    fn = self._authenticated_only(fn)
                b.on_request(method, fn)
        for method, attr in NOTIFICATIONS:
            fn = getattr(self, attr, None)
            if fn is not None:
                b.on_notification(method, fn)
        return b

    def _authenticated_only(self, fn: Callable[[Json, Any], _R]) -> Callable[[Json, Any], _R]:
        """`--require-auth`: -32000 auth_required until `authenticate` succeeded."""
        def gated(params: Json, cx: Any) -> _R:
            if not self.authenticated:
                raise JsonRpcError(AUTH_REQUIRED, data="authenticate first (Testy runs with --require-auth)")
            return fn(params, cx)
        return gated

    def auth_status(self, params: Json, cx: Any) -> JsonObject:
        """`auth/status` (unstable): always answered, even while authentication is
        required (seed 004 I6: it is exempt from `auth_required`)."""
        if self.authenticated:
            return {"state": "authenticated", "accounts": [{"label": "testy", "active": True}]}
        return {"state": "unauthenticated" if self.require_auth else "not_required"}

    def echo(self, params: Json, cx: Any) -> Json:
        """`_test/echo` and `_bench/echo`: answer with `params` (`{}` when absent)."""
        return params if params is not None else {}

    def stats(self, params: Json, cx: Any) -> JsonObject:
        """`_test/stats`: this process's resource use and counters ([`process_stats`][acp_fast.testy.common.process_stats])."""
        return process_stats(self.notes, self.engine)

    def note(self, params: Json, cx: Any) -> None:
        """`_test/note`: count the notification (reported by `_test/stats`)."""
        self.notes += 1

    def list_sessions(self, params: Json, cx: Any) -> JsonObject:
        """`session/list`: the open sessions, ordered by id (only those in `cwd` when given)."""
        cwd = params.get("cwd") if isinstance(params, dict) else None
        sessions: dict[str, Any] = getattr(self, "sessions")  # noqa: B009 - defined by the variants
        return {"sessions": [
            {"sessionId": sid, "cwd": s.cwd, "title": "Testy session", "updatedAt": UPDATED_AT}
            for sid, s in sorted(sessions.items())
            if not s.closed and (cwd is None or s.cwd == cwd)]}

    def _new_cwd(self, params: Json) -> str:
        cwd = params.get("cwd") if isinstance(params, dict) else None
        if not isinstance(cwd, str):
            raise JsonRpcError(INVALID_PARAMS, data="`cwd` must be a string")
        self.next_session += 1
        return cwd
