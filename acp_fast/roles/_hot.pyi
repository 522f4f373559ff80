# What type checkers see of the hot-path selector (acp_fast/roles/_hot.py). At run time the
# classes are the compiled twin's (_hot_c, built from _hot_py.py) or the pure twin's, which
# are not generic (a compiled class cannot be); to the checker, Context and ProxyContext are
# generic in their connection, so a handler's cx.connection is the connection type its
# builder binds (Context[AgentConnection[V2]], ProxyContext[ProxyConnection[V2]]). A bare
# Context means Context[Peer] (the type parameter's default). Everything else is the pure
# source's, re-exported unchanged; the signatures below are the pure source's too
# (tests/test_typed_facades.py runs the checker over programs that use them).
import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Generic

from typing_extensions import TypeVar

from ..engine import Message
from ..jsonrpc import RequestContext, Responder
from ..jsontypes import Json, JsonObject, RequestId
from ..jsonrpc import RequestResult
from ..protocol.gate import Gate
from ..protocol.surface import SessionUpdateView
from ._hot_py import SessionUpdate as SessionUpdate
from ._hot_py import Sender as Sender
from .context import Peer, Request, SuccessorPeer

__all__ = ["COMPILED", "IMPLEMENTATION", "Context", "NotificationHandler", "ProxyContext", "RequestHandler", "SessionUpdate",
           "UpdateDispatcher", "Sender"]

IMPLEMENTATION: str
COMPILED: bool

_T = TypeVar("_T")
_C_co = TypeVar("_C_co", bound=Peer, default=Peer, covariant=True)
_P_co = TypeVar("_P_co", bound=SuccessorPeer, default=SuccessorPeer, covariant=True)

class Context(Generic[_C_co]):
    def __init__(self, connection: _C_co, request: RequestContext | None, message: Message) -> None: ...
    @property
    def connection(self) -> _C_co: ...
    @property
    def request(self) -> RequestContext | None: ...
    @property
    def message(self) -> Message: ...
    @property
    def method(self) -> str: ...
    @property
    def id(self) -> RequestId | None: ...
    @property
    def version(self) -> int: ...
    @property
    def cancelled(self) -> bool: ...
    async def wait_cancelled(self) -> None: ...
    def raise_if_cancelled(self) -> None: ...
    async def run_until_cancelled(self, aw: Awaitable[_T]) -> _T: ...
    def defer(self) -> Responder: ...
    def send_request(self, method: str, params: Json = None, *, passthrough: bool = False,
                     timeout: float | None = None) -> Request[Json]: ...
    def send_notification(self, method: str, params: Json = None, *, passthrough: bool = False) -> bool: ...
    def send_session_update(self, session_id: str, update: JsonObject, *,
                            passthrough: bool = False, **fields: Json) -> bool: ...
    async def drain(self) -> None: ...
    def start_task(self, coro: Coroutine[object, object, _T]) -> asyncio.Task[_T]: ...

class ProxyContext(Context[_P_co]):
    def __init__(self, connection: _P_co, request: RequestContext | None, message: Message) -> None: ...
    def send_to_successor(self, method: str, params: Json = None, *, passthrough: bool = False,
                          timeout: float | None = None) -> Request[Json]: ...
    def notify_successor(self, method: str, params: Json = None, *, passthrough: bool = False) -> bool: ...
    @property
    def proxy(self) -> _P_co: ...

class RequestHandler:
    connection: Peer
    handler: Callable[[Json, Context], object]
    context_type: type[Context]
    def __init__(self, connection: Peer, handler: Callable[[Json, Context], object],
                 context_type: type[Context]) -> None: ...
    def __call__(self, rctx: RequestContext) -> RequestResult: ...

class NotificationHandler:
    connection: Peer
    handler: Callable[[Json, Context], object]
    context_type: type[Context]
    def __init__(self, connection: Peer, handler: Callable[[Json, Context], object],
                 context_type: type[Context]) -> None: ...
    def __call__(self, message: Message) -> object: ...

class UpdateDispatcher:
    connection: Peer
    gate: Gate
    classify: Callable[[Json], SessionUpdateView]
    apply_state: Callable[[Json, Json], None]
    on_update: Callable[[SessionUpdate, Context], object] | None
    fallback: Callable[[Json, Context], object] | None
    event_type: type[SessionUpdate]
    context_type: type[Context]
    def __init__(self, connection: Peer, gate: Gate,
                 classify: Callable[[Json], SessionUpdateView], apply_state: Callable[[Json, Json], None],
                 on_update: Callable[[SessionUpdate, Context], object] | None,
                 fallback: Callable[[Json, Context], object] | None, event_type: type[SessionUpdate],
                 context_type: type[Context]) -> None: ...
    def __call__(self, message: Message) -> object: ...
