"""A lean Redis client for the fleet's streaming path: RESP over an asyncio protocol, parsed by hiredis.

The store's hot calls (a client's push, an agent's append, and the blocking reads that wake a
front and a host) are a few commands each, per message. Through redis-py each costs a pool
checkout, a health-check clock, response callbacks and a stream reader's buffering on top of
the wire; measured here (`python bench/fleet_floor.py`), two sequential hops through redis-py
take about three times what the same commands take on a bare protocol. This client keeps the
wire and nothing else:

* **one shared connection** carries every non-blocking command of the process, pipelined
  (replies come back in order, each to its caller's future);
* **a blocking command** (`XREAD BLOCK`) takes a connection of its own from an idle list and
  gives it back when its reply came (a blocked connection cannot carry anything else);
* **every reply is bounded**: a command's deadline is the socket timeout (plus its block
  time); a connection whose oldest reply is late is aborted and each of its callers gets
  `TimeoutError`; a lost connection fails its callers with `ConnectionError` and is replaced
  by the next call (a command is never sent twice: it may have run);
* **a caller cancelled** while its blocking command is in flight closes that connection (its
  reply could not be told from the next command's); on the shared connection the reply is
  just dropped when it comes.

Scripts run by `EVALSHA`, and by `EVAL` once when the server does not know them (`NOSCRIPT`:
nothing ran), alone or in a pipeline (`Script.call`); in a pipeline that `EVAL` comes after
the other commands, so a script there must not depend on running before them.

The URL is parsed by redis-py (`redis://`, `rediss://`, `unix://`, password, user, db), so
both clients of the store reach the same server.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, List, Union, cast

import hiredis

__all__ = ["Command", "Reply", "ReplyError", "RespClient", "Script"]

#: A command: its name and arguments (str, bytes, int or float).
Command = Sequence[Any]

#: A reply of RESP2 as hiredis gives it: a bulk or simple string, an integer, nil, an array.
Reply = Union[bytes, int, None, List["Reply"]]


class ReplyError(Exception):
    """The server answered a command with an error (the command failed; the connection is fine)."""


#: Every script's text by its SHA1, for the `EVAL` after a `NOSCRIPT` (scripts are constants
#: of the modules that use them: the map stays small).
_TEXTS: dict[str, bytes] = {}


class Script:
    """A Lua script, with its SHA1 for `EVALSHA`."""

    __slots__ = ("text", "sha")

    def __init__(self, text: str) -> None:
        self.text = text.encode()
        self.sha = hashlib.sha1(self.text).hexdigest()
        _TEXTS[self.sha] = self.text

    def call(self, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]:
        """The `EVALSHA` command of this script, for a pipeline (`RespClient.pipeline` or
        `blocking` runs it again by `EVAL`, after the others, when the server does not know it)."""
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    def eval(self, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]:
        """The `EVAL` command of this script (the whole text, every time)."""
        return ("EVAL", self.text, len(keys), *keys, *args)


class _Group:
    """The replies one call waits for: `count` of them, due by `deadline` (loop time)."""

    __slots__ = ("future", "count", "replies", "deadline")

    def __init__(self, future: asyncio.Future[list[Any]], count: int, deadline: float) -> None:
        self.future = future
        self.count = count
        self.replies: list[Any] = []
        self.deadline = deadline


class _Connection(asyncio.Protocol):
    """One connection to Redis: commands go out pipelined, replies come back in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_close: Callable[[_Connection], None]) -> None:
        self.loop = loop
        self._on_close: Callable[[_Connection], None] | None = on_close
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reader = hiredis.Reader()
        self._waiting: deque[_Group] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._failure: BaseException | None = None

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport's subclasses

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        waiting = self._waiting
        try:
            reader.feed(data)
            while (reply := reader.gets()) is not False:
                if not waiting:
                    raise ConnectionError("Redis sent a reply to no command")
                group = waiting[0]
                group.replies.append(reply)
                if len(group.replies) == group.count:
                    waiting.popleft()
                    if not group.future.done():
                        group.future.set_result(group.replies)
        except (hiredis.ProtocolError, ConnectionError) as exc:
            self.fail(ConnectionError(f"Redis protocol error: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._close(self._failure or ConnectionError(
            f"connection to Redis lost: {exc}" if exc else "connection to Redis closed by the server"))

    # --- use -----------------------------------------------------------------------------

    def send(self, commands: Sequence[Command], timeout: float) -> asyncio.Future[list[Any]]:
        """Write `commands` at once; the future gets their replies, in order."""
        future: asyncio.Future[list[Any]] = self.loop.create_future()
        if self.closed or self.transport is None:
            future.set_exception(self._failure or ConnectionError("connection to Redis closed"))
            return future
        deadline = self.loop.time() + timeout
        self._waiting.append(_Group(future, len(commands), deadline))
        pack = hiredis.pack_command
        if len(commands) == 1:
            self.transport.write(pack(tuple(commands[0])))
        else:
            self.transport.write(b"".join([pack(tuple(c)) for c in commands]))
        if self._timer is None:
            self._timer = self.loop.call_at(deadline, self._check)
        return future

    def busy(self) -> bool:
        return bool(self._waiting)

    def fail(self, exc: BaseException) -> None:
        """Close the connection; every caller waiting on it gets `exc`."""
        if self._failure is None:
            self._failure = exc
        if self.loop.is_closed():  # a connection of an event loop that ended: nothing to wake
            self._waiting.clear()
        elif self.transport is not None and not self.closed:
            self.transport.abort()  # connection_lost follows, with the failure
        self._close(exc)

    def _check(self) -> None:
        self._timer = None
        if not self._waiting or self.closed:
            return
        head = self._waiting[0].deadline
        if self.loop.time() >= head:
            self.fail(TimeoutError("Redis did not answer within the socket timeout"))
        else:
            self._timer = self.loop.call_at(head, self._check)

    def _close(self, exc: BaseException) -> None:
        self.closed = True
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, deque()
        for group in waiting:
            if not group.future.done():
                group.future.set_exception(exc)


class RespClient:
    """The store's lean client (see the module docstring).

    Args:
        url: a redis-py URL (`redis://[[user]:password@]host:port/db`, `rediss://`,
            `unix://path?db=N`).
        socket_timeout: seconds a reply may take (beyond a blocking command's block time).
        connect_timeout: seconds connecting (and authenticating) may take.
        max_connections: connections open at most (the shared one and the blocking ones); a
            call beyond it gets `ConnectionError`.
    """

    def __init__(self, url: str, *, socket_timeout: float, connect_timeout: float,
                 max_connections: int) -> None:
        from redis.asyncio.connection import SSLConnection, parse_url

        params: dict[str, Any] = dict(parse_url(url))
        self._path: str | None = params.get("path")
        self._host: str = params.get("host") or "localhost"
        self._port: int = int(params.get("port") or 6379)
        self._ssl: ssl.SSLContext | None = None
        if params.get("connection_class") is SSLConnection:
            context = ssl.create_default_context(cafile=params.get("ssl_ca_certs"))
            if str(params.get("ssl_cert_reqs", "required")).lower() in ("none", "cert_none"):
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if params.get("ssl_certfile"):
                context.load_cert_chain(params["ssl_certfile"], params.get("ssl_keyfile"))
            self._ssl = context
        hello: list[tuple[Any, ...]] = []
        if params.get("password") is not None:
            user = params.get("username")
            hello.append(("AUTH", user, params["password"]) if user else ("AUTH", params["password"]))
        if int(params.get("db") or 0):
            hello.append(("SELECT", int(params["db"])))
        self._hello = hello
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self._shared: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    # --- calls ---------------------------------------------------------------------------

    async def call(self, *command: Any) -> Reply:
        """One command on the shared connection; its reply (an error reply raises `ReplyError`)."""
        replies = await self.pipeline((command,))
        reply: Reply = replies[0]
        return reply

    async def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        """Commands written at once on the shared connection; their replies, in order (the
        first error reply raises `ReplyError` once every reply came; a script's `NOSCRIPT` is
        answered by its `EVAL`, see `Script.call`)."""
        replies = await self._send(commands)
        for reply in replies:
            if isinstance(reply, hiredis.ReplyError):
                return await self._mended(commands, replies)
        return replies

    async def _send(self, commands: Sequence[Command]) -> list[Any]:
        connection = self._shared
        if connection is None or connection.closed or connection.loop is not asyncio.get_running_loop():
            connection = await self._shared_connection()
        return await connection.send(commands, self.socket_timeout)

    async def script(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> Reply:
        """Run `script` (`EVALSHA`, then `EVAL` once if the server does not know it)."""
        reply: Reply = (await self.pipeline((script.call(keys, args),)))[0]
        return reply

    async def _mended(self, commands: Sequence[Command], replies: list[Any]) -> list[Any]:
        """`replies` with each `NOSCRIPT` of a script's `EVALSHA` replaced by its `EVAL`'s reply;
        `ReplyError` for the first other error reply."""
        for i, reply in enumerate(replies):
            if not isinstance(reply, hiredis.ReplyError):
                continue
            command = commands[i]
            text = _TEXTS.get(str(command[1])) if command[0] == "EVALSHA" and str(reply).startswith("NOSCRIPT") else None
            if text is None:
                raise ReplyError(str(reply))
            (replies[i],) = await self._send((("EVAL", text, *command[2:]),))
            if isinstance(replies[i], hiredis.ReplyError):
                raise ReplyError(str(replies[i]))
        return replies

    async def blocking(self, commands: Sequence[Command], block: float) -> list[Any]:
        """Commands on a connection of their own, the last one blocking up to `block` seconds;
        their replies, in order (the first error reply raises, as `pipeline`)."""
        loop = asyncio.get_running_loop()
        connection = None
        while self._idle:
            candidate = self._idle.pop()
            if not candidate.closed and candidate.loop is loop:
                connection = candidate
                break
            candidate.fail(ConnectionError("a connection of another event loop"))
        if connection is None:
            connection = await self._connect()
        try:
            replies = await connection.send(commands, self.socket_timeout + block)
        except BaseException:
            connection.fail(ConnectionError("a blocking command was abandoned"))  # no-op when failed
            raise
        if not connection.closed:
            self._idle.append(connection)
        for reply in replies:
            if isinstance(reply, hiredis.ReplyError):
                return await self._mended(commands, replies)
        return replies

    async def close(self) -> None:
        """Close every connection; calls in flight get `ConnectionError`."""
        for connection in list(self._open):
            connection.fail(ConnectionError("the store was closed"))
        self._idle.clear()

    # --- connections ---------------------------------------------------------------------

    async def _shared_connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        pending = self._connecting
        if pending is None or pending.get_loop() is not loop:
            pending = self._connecting = loop.create_future()
            try:
                connection = await self._connect()
            except BaseException as exc:
                self._connecting = None
                if not pending.done():
                    pending.set_exception(exc)
                    pending.exception()  # retrieved: the callers waiting on it re-raise it
                raise
            self._shared = connection
            self._connecting = None
            pending.set_result(connection)
            return connection
        return await asyncio.shield(pending)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        for old in [c for c in self._open if c.loop is not loop]:
            old.fail(ConnectionError("a connection of another event loop"))
        if len(self._open) >= self.max_connections:
            raise ConnectionError(f"too many connections to Redis ({self.max_connections})")

        def protocol() -> _Connection:
            return _Connection(loop, self._drop)

        opening: Awaitable[tuple[asyncio.BaseTransport, _Connection]]
        if self._path is not None:
            opening = loop.create_unix_connection(protocol, self._path)
        else:
            opening = loop.create_connection(protocol, self._host, self._port, ssl=self._ssl)
        try:
            _, connection = await asyncio.wait_for(opening, self.connect_timeout)
        except asyncio.TimeoutError as exc:
            raise TimeoutError(f"connecting to Redis took more than {self.connect_timeout} s") from exc
        if not connection.closed:
            self._open.add(connection)
        if self._hello:
            try:
                replies = await asyncio.wait_for(connection.send(self._hello, self.connect_timeout),
                                                 self.connect_timeout)
            except BaseException:
                connection.fail(ConnectionError("connecting to Redis was abandoned"))
                raise
            for reply in replies:
                if isinstance(reply, hiredis.ReplyError):
                    connection.fail(ConnectionError(f"Redis refused the connection: {reply}"))
                    raise ConnectionError(f"Redis refused the connection: {reply}")
        return connection

    def _drop(self, connection: _Connection) -> None:
        """A connection closed (its `on_close`)."""
        self._open.discard(connection)
        if self._shared is connection:
            self._shared = None
