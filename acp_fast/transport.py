"""Transports: asyncio ``Protocol`` glue between byte streams and one :class:`Connection`.

This is the I/O layer, between the sans-IO engine (``acp_fast._engine``) and the JSON-RPC
connection (``acp_fast.jsonrpc``). It knows bytes, pipes, sockets and processes; it knows
nothing about JSON-RPC. Every helper returns a :class:`Stream`, which a
:class:`~acp_fast.jsonrpc.Connection` consumes:

* :func:`connect_stdio` -- this process's own stdin/stdout (an agent's side);
* :func:`spawn` -- a child process from a command line (a client's side), protocol.md §8.6;
* :func:`connect_tcp` / :func:`serve_tcp`, :func:`connect_unix` / :func:`serve_unix`;
* :func:`memory_pair` -- two connected in-memory streams for tests, which still run through
  the same ``asyncio.Protocol`` callbacks as the real transports.

Reading is ``Protocol``-based (never ``readline()``): each ``data_received`` chunk goes to
the consumer as is, so the engine is fed once per read. A stream starts with reading paused
and resumes it when a consumer attaches; a chunk that arrived before is replayed.

Bounds (backpressure):

* Reads arrive in chunks of at most the event loop's read size (256 KiB for asyncio's
  selector loop). The consumer pauses reading with :meth:`Stream.pause_reading`; the
  transport then stops reading and the peer's writes block in the OS pipe/socket buffer.
* Writes go to the asyncio transport's buffer. When it holds more than ``high`` bytes
  (default :data:`WRITE_HIGH_WATER`, 256 KiB) the consumer is told (``on_writable(False)``)
  and again when it drains below ``low`` (:data:`WRITE_LOW_WATER`, 64 KiB). The buffer
  only grows past ``high`` by what the consumer writes after being told. (A pipe holds
  64 KiB, so a larger buffer buys no throughput against a slower reader, only peak RSS:
  1 MiB cost a streaming agent ~2 MiB of peak RSS for the same notifications/s.)

uvloop is used when installed (:func:`new_event_loop`, :func:`run`), never required.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import re
import shlex
import signal
import stat
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

__all__ = [
    "KILL_GRACE",
    "STDERR_TAIL",
    "WRITE_HIGH_WATER",
    "WRITE_LOW_WATER",
    "ChildStream",
    "Stream",
    "connect_stdio",
    "connect_tcp",
    "connect_unix",
    "memory_pair",
    "new_event_loop",
    "parse_command",
    "run",
    "serve_tcp",
    "serve_unix",
    "spawn",
]

logger = logging.getLogger("acp_fast.transport")

#: Write-buffer size above which the consumer is told to stop writing.
WRITE_HIGH_WATER = 256 * 1024
#: Write-buffer size below which the consumer is told it may write again.
WRITE_LOW_WATER = 64 * 1024
#: How much of a child's stderr is kept for error reports (the newest bytes).
STDERR_TAIL = 64 * 1024
#: Seconds a child gets to exit after its stdin is closed before its process group is killed.
KILL_GRACE = 1.0

_T = TypeVar("_T")
OnData = Callable[[bytes], None]
OnEof = Callable[["BaseException | None"], None]
OnWritable = Callable[[bool], None]


class Stream:
    """A duplex byte stream handed to exactly one consumer (normally a ``Connection``).

    Created by the helpers of this module, never directly. The consumer calls
    :meth:`attach` once; from then on every chunk read goes to ``on_data``, the end of input
    goes to ``on_eof`` exactly once (``None`` for a clean EOF, else the transport's error),
    and write-buffer pressure goes to ``on_writable``.

    Attributes:
        default_on_invalid: the policy a connection on this stream should use for lines
            that are not JSON-RPC: ``"reply"`` when we are the agent side (stdio, sockets,
            memory), ``"skip"`` when we read an agent's stdout (:func:`spawn`).
    """

    default_on_invalid = "reply"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._rt: Any = None  # read transport
        self._wt: Any = None  # write transport (the same object for sockets and memory)
        self._on_data: OnData = self._early_data
        self._ready = False  # True once a consumer gets the data directly
        self._on_eof: OnEof | None = None
        self._on_writable: OnWritable | None = None
        self._early: list[bytes] = []
        self._early_eof: list[BaseException | None] = []
        self._eof_reported = False
        self._paused = True  # until attach()
        self._closing = False
        self._write_paused = False
        self._transports = 0
        self._lost: asyncio.Future[None] = loop.create_future()
        self._extra: dict[str, Any] = {}

    # -- consumer side ------------------------------------------------------------------

    def attach(self, on_data: OnData, on_eof: OnEof, on_writable: OnWritable) -> None:
        """Start delivering to a consumer; resumes reading.

        Raises:
            RuntimeError: when a consumer is already attached.
        """
        if self._on_eof is not None:
            raise RuntimeError("a consumer is already attached to this stream")
        self._on_eof = on_eof
        self._on_writable = on_writable
        if self._early or self._early_eof:
            self._loop.call_soon(self._replay, on_data)
        else:
            self._on_data = on_data
            self._ready = True
            self.resume_reading()
        if self._write_paused:
            self._loop.call_soon(on_writable, False)

    def write(self, data: bytes) -> None:
        """Queue bytes on the transport (dropped once the stream is closing or lost)."""
        wt = self._wt
        if wt is not None and not self._closing and not wt.is_closing():
            wt.write(data)

    def pause_reading(self) -> None:
        """Stop reading (idempotent); the peer's writes then block in the OS buffer."""
        if not self._paused:
            self._paused = True
            rt = self._rt
            if rt is not None and not rt.is_closing():
                rt.pause_reading()

    def resume_reading(self) -> None:
        """Resume reading (idempotent)."""
        if self._paused and self._ready:
            self._paused = False
            rt = self._rt
            if rt is not None and not rt.is_closing():
                rt.resume_reading()

    @property
    def reading_paused(self) -> bool:
        return self._paused

    @property
    def writing_paused(self) -> bool:
        """True while the write buffer is above its high-water mark."""
        return self._write_paused

    @property
    def closing(self) -> bool:
        return self._closing

    def get_write_buffer_size(self) -> int:
        wt = self._wt
        return 0 if wt is None else int(wt.get_write_buffer_size())

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """Transport details (``"peername"``, ``"pid"``, ...), as in asyncio."""
        if name in self._extra:
            return self._extra[name]
        for t in (self._wt, self._rt):
            if t is not None:
                value = t.get_extra_info(name)
                if value is not None:
                    return value
        return default

    def close(self) -> None:
        """Close the stream: queued writes are flushed first, then the peer sees EOF."""
        if self._closing:
            return
        self._closing = True
        seen = set()
        for t in (self._wt, self._rt):
            if t is not None and id(t) not in seen:
                seen.add(id(t))
                t.close()
        if self._transports == 0 and not self._lost.done():
            self._lost.set_result(None)

    async def wait_closed(self) -> None:
        """Wait until every underlying transport (and process) is gone."""
        await asyncio.shield(self._lost)

    # -- protocol-glue side -------------------------------------------------------------

    def _early_data(self, data: bytes) -> None:
        self._early.append(bytes(data))
        rt = self._rt
        if rt is not None and not rt.is_closing():
            rt.pause_reading()

    def _replay(self, on_data: OnData) -> None:
        early, self._early = self._early, []
        self._on_data = on_data
        self._ready = True
        if early:
            on_data(b"".join(early))
        if self._early_eof:
            self._eof(self._early_eof[0])
        elif not self._closing:
            self.resume_reading()

    def _connected(self, transport: Any, *, read: bool, write: bool) -> None:
        self._transports += 1
        if read:
            self._rt = transport
            if self._paused:
                transport.pause_reading()
        if write:
            self._wt = transport
            transport.set_write_buffer_limits(WRITE_HIGH_WATER, WRITE_LOW_WATER)

    def _eof(self, exc: BaseException | None) -> None:
        if self._eof_reported:
            return
        if not self._ready:  # not attached yet (or its replay is still pending)
            if not self._early_eof:
                self._early_eof.append(exc)
            return
        self._eof_reported = True
        if self._on_eof is not None:
            self._on_eof(exc)

    def _pause_writing(self) -> None:
        self._write_paused = True
        if self._on_writable is not None:
            self._on_writable(False)

    def _resume_writing(self) -> None:
        self._write_paused = False
        if self._on_writable is not None:
            self._on_writable(True)

    def _transport_lost(self) -> None:
        self._transports -= 1
        if self._write_paused:
            self._resume_writing()
        if self._transports <= 0:
            self._closing = True
            if not self._lost.done():
                self._lost.set_result(None)


class _DuplexProtocol(asyncio.Protocol):
    """One bidirectional transport (socket, memory): reads and writes."""

    __slots__ = ("_s",)

    def __init__(self, stream: Stream) -> None:
        self._s = stream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._s._connected(transport, read=True, write=True)

    def data_received(self, data: bytes) -> None:
        self._s._on_data(data)

    def eof_received(self) -> bool:
        self._s._eof(None)
        return True  # keep the write side open: replies to what was read still go out

    def connection_lost(self, exc: BaseException | None) -> None:
        self._s._eof(exc)
        self._s._transport_lost()

    def pause_writing(self) -> None:
        self._s._pause_writing()

    def resume_writing(self) -> None:
        self._s._resume_writing()


class _ReadPipeProtocol(asyncio.Protocol):
    __slots__ = ("_s",)

    def __init__(self, stream: Stream) -> None:
        self._s = stream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._s._connected(transport, read=True, write=False)

    def data_received(self, data: bytes) -> None:
        self._s._on_data(data)

    def eof_received(self) -> None:
        self._s._eof(None)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._s._eof(exc)
        self._s._transport_lost()


class _WritePipeProtocol(asyncio.BaseProtocol):
    __slots__ = ("_s",)

    def __init__(self, stream: Stream) -> None:
        self._s = stream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._s._connected(transport, read=False, write=True)

    def connection_lost(self, exc: BaseException | None) -> None:
        if exc is not None:
            logger.debug("write pipe lost: %r", exc)
        self._s._transport_lost()

    def pause_writing(self) -> None:
        self._s._pause_writing()

    def resume_writing(self) -> None:
        self._s._resume_writing()


# ---------------------------------------------------------------------------------------
# stdio of this process
# ---------------------------------------------------------------------------------------


class _FileReadTransport(asyncio.ReadTransport):
    """Reads a regular file (``agent < requests.jsonl``) in a worker thread, in chunks."""

    CHUNK = 256 * 1024

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._loop = loop
        self._fd = fd
        self._protocol = protocol
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._closing = False
        protocol.connection_made(self)
        self._task = loop.create_task(self._pump())

    async def _pump(self) -> None:
        exc: Exception | None = None
        try:
            while not self._closing:
                await self._resumed.wait()
                data = await self._loop.run_in_executor(None, os.read, self._fd, self.CHUNK)
                if not data:
                    self._protocol.eof_received()
                    break
                self._protocol.data_received(data)
        except asyncio.CancelledError:
            pass
        except OSError as e:  # pragma: no cover - I/O error on a regular file
            exc = e
        os.close(self._fd)
        self._closing = True
        self._protocol.connection_lost(exc)

    def pause_reading(self) -> None:
        self._resumed.clear()

    def resume_reading(self) -> None:
        self._resumed.set()

    def is_reading(self) -> bool:
        return self._resumed.is_set()

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._task.cancel()


class _FileWriteTransport(asyncio.WriteTransport):
    """Writes to a regular file synchronously (a file never applies backpressure)."""

    def __init__(self, fd: int, protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self._fd = fd
        self._protocol = protocol
        self._closing = False
        protocol.connection_made(self)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            os.close(self._fd)
            asyncio.get_running_loop().call_soon(self._protocol.connection_lost, None)

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


class _StdioStream(Stream):
    def __init__(self, loop: asyncio.AbstractEventLoop, fds: tuple[int, int]) -> None:
        super().__init__(loop)
        self._fds = fds
        self._was_blocking = [os.get_blocking(fd) for fd in fds]

    def _transport_lost(self) -> None:
        super()._transport_lost()
        if self._transports <= 0:
            # asyncio made the (shared) file descriptions non-blocking; undo it so that
            # print() and friends behave again after the connection.
            for fd, blocking in zip(self._fds, self._was_blocking):
                try:
                    os.set_blocking(fd, blocking)
                except OSError:  # pragma: no cover
                    pass


async def connect_stdio(stdin: int = 0, stdout: int = 1) -> Stream:
    """A stream over this process's stdin (read) and stdout (write): the agent side.

    The descriptors are duplicated, so closing the stream leaves fds 0 and 1 open. Pipes,
    sockets and terminals are driven by the event loop; a regular file (``agent <
    file``) is read in a worker thread and written synchronously.

    Args:
        stdin: the descriptor to read.
        stdout: the descriptor to write.
    """
    loop = asyncio.get_running_loop()
    stream = _StdioStream(loop, (stdin, stdout))
    rfd, wfd = os.dup(stdin), os.dup(stdout)
    if stat.S_ISREG(os.fstat(rfd).st_mode):
        _FileReadTransport(loop, rfd, _ReadPipeProtocol(stream))
    else:
        await loop.connect_read_pipe(lambda: _ReadPipeProtocol(stream), open(rfd, "rb", buffering=0))  # noqa: ASYNC230,SIM115 (wraps an fd)
    if stat.S_ISREG(os.fstat(wfd).st_mode):
        _FileWriteTransport(wfd, _WritePipeProtocol(stream))
    else:
        await loop.connect_write_pipe(lambda: _WritePipeProtocol(stream), open(wfd, "wb", buffering=0))  # noqa: ASYNC230,SIM115 (wraps an fd)
    return stream


# ---------------------------------------------------------------------------------------
# child process
# ---------------------------------------------------------------------------------------

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_JSON_KEYS = frozenset(("name", "command", "args", "env"))


def parse_command(spec: str | Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Split a component spec into ``(argv, env)`` (protocol.md §8.6).

    * a string starting with ``{`` is JSON ``{"name"?, "command", "args"?, "env"?}``; ``env``
      is an object of strings or a list of ``{"name", "value"}``; unknown keys are rejected;
    * any other string is split into shell words; leading ``NAME=value`` words become
      environment variables, the first other word is the command;
    * a sequence of strings is taken as ``argv`` already split.

    Raises:
        ValueError: an empty command, invalid JSON or a JSON form of the wrong shape.
    """
    env: dict[str, str] = {}
    if not isinstance(spec, str):
        argv = [str(a) for a in spec]
    elif spec.lstrip().startswith("{"):
        try:
            obj = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON command spec: {exc}") from None
        if not isinstance(obj, dict) or set(obj) - _JSON_KEYS:
            raise ValueError(f"JSON command spec takes only the keys {sorted(_JSON_KEYS)}")
        command, args, raw_env = obj.get("command"), obj.get("args", []), obj.get("env", {})
        if not isinstance(command, str) or not isinstance(args, list) or not all(
            isinstance(a, str) for a in args
        ):
            raise ValueError('JSON command spec needs "command": str and "args": [str]')
        if isinstance(raw_env, list):
            try:
                raw_env = {e["name"]: e["value"] for e in raw_env}
            except (TypeError, KeyError):
                raise ValueError('"env" list entries need "name" and "value"') from None
        if not isinstance(raw_env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw_env.items()
        ):
            raise ValueError('"env" must map names to strings')
        argv = [command, *args]
        env = dict(raw_env)
    else:
        words = shlex.split(spec)
        while words and "=" in words[0] and _ENV_NAME.match(words[0].split("=", 1)[0]):
            name, value = words.pop(0).split("=", 1)
            env[name] = value
        argv = words
    if not argv or not argv[0]:
        raise ValueError(f"no command in {spec!r}")
    return argv, env


class ChildExitError(Exception):
    """A child process ended with a non-zero status (see :attr:`ChildStream.exit_error`)."""


class ChildStream(Stream):
    """A child process's stdout (read) and stdin (write); its stderr is drained.

    Attributes:
        pid: the child's pid (also its process-group id).
        returncode: the exit status once it exited, else ``None``.
    """

    default_on_invalid = "skip"

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        grace: float,
        tail_size: int,
        on_stderr: Callable[[bytes], None] | None,
    ) -> None:
        super().__init__(loop)
        self._proc: Any = None
        self.pid: int | None = None
        self.returncode: int | None = None
        self._grace = grace
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_len = 0
        self._tail_size = tail_size
        self._on_stderr = on_stderr
        self._exited: asyncio.Future[None] = loop.create_future()
        self._stderr_done: asyncio.Future[None] = loop.create_future()
        self._shutdown_task: asyncio.Task[None] | None = None

    @property
    def stderr_tail(self) -> bytes:
        """The last bytes the child wrote to stderr (at most ``tail_size``)."""
        return b"".join(self._tail)[-self._tail_size:] if self._tail_size else b""

    @property
    def exit_error(self) -> ChildExitError | None:
        """For a non-zero exit: an error naming the status and holding the stderr tail."""
        if not self.returncode:
            return None
        tail = self.stderr_tail.decode("utf-8", "replace")
        return ChildExitError(f"agent process {self.pid} exited with status {self.returncode}\n{tail}")

    def _stderr(self, data: bytes) -> None:
        if self._on_stderr is not None:
            try:
                self._on_stderr(data)
            except Exception:  # pragma: no cover
                logger.exception("stderr callback failed")
        if self._tail_size:
            self._tail.append(data)
            self._tail_len += len(data)
            while self._tail_len - len(self._tail[0]) >= self._tail_size:
                self._tail_len -= len(self._tail.popleft())

    def _killpg(self) -> None:
        if self.pid is None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _process_exited(self) -> None:
        self.returncode = self._proc.get_returncode()
        if self.returncode:
            logger.warning("%s", self.exit_error)
        self._killpg()  # the rest of its group (npx -> node, uvx -> python, ...)
        if not self._exited.done():
            self._exited.set_result(None)
        # A grandchild outside the group may hold stdout open: bound the wait for EOF.
        self._loop.call_later(self._grace, self._force_eof)

    def _force_eof(self) -> None:
        if not self._eof_reported and self._rt is not None and not self._rt.is_closing():
            self._rt.close()

    def close(self) -> None:
        """Close stdin, wait up to ``grace`` s for the child, then kill its process group."""
        if self._closing:
            return
        self._closing = True
        self._shutdown_task = self._loop.create_task(self._shutdown())

    async def _shutdown(self) -> None:
        try:
            if self._wt is not None:
                self._wt.close()
            try:
                await asyncio.wait_for(asyncio.shield(self._exited), self._grace)
            except asyncio.TimeoutError:
                logger.info("agent process %s did not exit within %ss: killing its group", self.pid, self._grace)
                self._killpg()
                await self._exited
            try:  # let the stderr tail complete (bounded: a grandchild may hold it open)
                await asyncio.wait_for(asyncio.shield(self._stderr_done), self._grace)
            except asyncio.TimeoutError:
                pass
        finally:
            self._killpg()
            if self._proc is not None:
                self._proc.close()
            if not self._lost.done():
                self._lost.set_result(None)

    def _transport_lost(self) -> None:  # pipes come and go; the process decides
        if self._write_paused:
            self._resume_writing()


class _ChildProtocol(asyncio.SubprocessProtocol):
    __slots__ = ("_s",)

    def __init__(self, stream: ChildStream) -> None:
        self._s = stream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        s = self._s
        s._proc = transport
        s.pid = transport.get_pid()  # type: ignore[attr-defined]
        s._extra["pid"] = s.pid
        s._connected(transport.get_pipe_transport(1), read=True, write=False)  # type: ignore[attr-defined]
        s._connected(transport.get_pipe_transport(0), read=False, write=True)  # type: ignore[attr-defined]

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self._s._on_data(data)
        else:
            self._s._stderr(data)

    def pipe_connection_lost(self, fd: int, exc: BaseException | None) -> None:
        if fd == 1:
            self._s._eof(exc)
        elif fd == 2 and not self._s._stderr_done.done():
            self._s._stderr_done.set_result(None)

    def pause_writing(self) -> None:
        self._s._pause_writing()

    def resume_writing(self) -> None:
        self._s._resume_writing()

    def process_exited(self) -> None:
        self._s._process_exited()


async def spawn(
    command: str | Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    grace: float = KILL_GRACE,
    stderr_tail: int = STDERR_TAIL,
    on_stderr: Callable[[bytes], None] | None = None,
) -> ChildStream:
    """Start an agent as a child process and return a stream over its stdio.

    The child gets piped stdin/stdout/stderr, the inherited environment plus the spec's
    ``NAME=value`` words plus ``env``, and its own session (it leads a new process group,
    so :meth:`ChildStream.close` can kill the whole tree).

    Args:
        command: a component spec string (see :func:`parse_command`) or an argv sequence.
        env: extra environment variables (win over the spec's).
        cwd: the child's working directory.
        grace: seconds to wait for the child after closing its stdin before SIGKILL.
        stderr_tail: how many bytes of stderr to keep for :attr:`ChildStream.stderr_tail`.
        on_stderr: called with every stderr chunk (the tail is kept either way).
    """
    loop = asyncio.get_running_loop()
    argv, spec_env = parse_command(command)
    full_env = dict(os.environ)
    full_env.update(spec_env)
    if env:
        full_env.update(env)
    stream = ChildStream(loop, grace, stderr_tail, on_stderr)
    await loop.subprocess_exec(
        lambda: _ChildProtocol(stream),
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
    )
    return stream


# ---------------------------------------------------------------------------------------
# sockets
# ---------------------------------------------------------------------------------------


async def connect_tcp(host: str, port: int, **kwargs: Any) -> Stream:
    """Connect to a TCP server (``kwargs`` go to ``loop.create_connection``)."""
    loop = asyncio.get_running_loop()
    stream = Stream(loop)
    await loop.create_connection(lambda: _DuplexProtocol(stream), host, port, **kwargs)
    return stream


async def connect_unix(path: str | os.PathLike[str], **kwargs: Any) -> Stream:
    """Connect to a Unix-domain stream socket."""
    loop = asyncio.get_running_loop()
    stream = Stream(loop)
    await loop.create_unix_connection(lambda: _DuplexProtocol(stream), os.fspath(path), **kwargs)
    return stream


OnStream = Callable[[Stream], "Awaitable[None] | None"]


def _server_factory(loop: asyncio.AbstractEventLoop, on_stream: OnStream) -> Callable[[], asyncio.Protocol]:
    tasks: set[asyncio.Task[Any]] = set()

    class _Accepted(_DuplexProtocol):
        __slots__ = ()

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            result = on_stream(self._s)
            if asyncio.iscoroutine(result):
                task = loop.create_task(result)
                tasks.add(task)
                task.add_done_callback(tasks.discard)

    return lambda: _Accepted(Stream(loop))


async def serve_tcp(on_stream: OnStream, host: str, port: int, **kwargs: Any) -> asyncio.Server:
    """Accept TCP connections; ``on_stream(stream)`` runs for each (a coroutine becomes a task)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(_server_factory(loop, on_stream), host, port, **kwargs)


async def serve_unix(on_stream: OnStream, path: str | os.PathLike[str], **kwargs: Any) -> asyncio.Server:
    """Accept Unix-domain stream connections; as :func:`serve_tcp`."""
    loop = asyncio.get_running_loop()
    return await loop.create_unix_server(_server_factory(loop, on_stream), os.fspath(path), **kwargs)


# ---------------------------------------------------------------------------------------
# in-memory pair
# ---------------------------------------------------------------------------------------


class _MemoryTransport(asyncio.Transport):
    """One end of an in-memory pipe pair, driving a protocol like a socket transport does.

    Bytes written on one end are delivered to the other end's ``data_received`` on a later
    loop turn, everything pending joined into one chunk (one "read"). While the reader is
    paused they wait in its inbox; the writer gets ``pause_writing`` once the inbox holds
    more than its high-water mark, and ``resume_writing`` when it drains below low.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self._peer: _MemoryTransport | None = None
        self._inbox: list[bytes] = []
        self._inbox_size = 0
        self._inbox_eof = False
        self._reading = True
        self._scheduled = False
        self._closing = False
        self._lost = False
        self._writer_paused = False
        self._high = 64 * 1024
        self._low = 16 * 1024

    # writer side
    def write(self, data: bytes | bytearray | memoryview) -> None:
        peer = self._peer
        if self._closing or peer is None or peer._lost:
            return
        peer._inbox.append(bytes(data))
        peer._inbox_size += len(data)
        peer._schedule()
        if not self._writer_paused and peer._inbox_size > self._high:
            self._writer_paused = True
            self._protocol.pause_writing()

    def _maybe_resume_writer(self) -> None:
        if self._writer_paused and (self._peer is None or self._peer._inbox_size <= self._low):
            self._writer_paused = False
            self._protocol.resume_writing()

    def get_write_buffer_size(self) -> int:
        return 0 if self._peer is None else self._peer._inbox_size

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is not None:
            self._high = high
        self._low = low if low is not None else self._high // 4

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        peer = self._peer
        if peer is not None and not peer._inbox_eof:
            peer._inbox_eof = True
            peer._schedule()

    # reader side
    def _schedule(self) -> None:
        if self._reading and not self._scheduled and not self._lost:
            self._scheduled = True
            self._loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        self._scheduled = False
        if not self._reading or self._lost:
            return
        if self._inbox:
            data = b"".join(self._inbox) if len(self._inbox) > 1 else self._inbox[0]
            self._inbox.clear()
            self._inbox_size = 0
            self._protocol.data_received(data)
            if self._peer is not None:
                self._peer._maybe_resume_writer()
        if self._inbox_eof and not self._inbox and self._reading and not self._lost:
            self._inbox_eof = False
            if not self._protocol.eof_received():
                self.close()

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if not self._reading:
            self._reading = True
            if self._inbox or self._inbox_eof:
                self._schedule()

    def is_reading(self) -> bool:
        return self._reading

    # both
    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.write_eof()
        self._loop.call_soon(self._connection_lost)

    def abort(self) -> None:
        self.close()

    def _connection_lost(self) -> None:
        self._lost = True
        self._inbox.clear()
        self._inbox_size = 0
        if self._peer is not None:
            self._peer._maybe_resume_writer()
        self._protocol.connection_lost(None)


def memory_pair() -> tuple[Stream, Stream]:
    """Two connected in-memory streams (call inside a running loop); for tests.

    They behave like a socket pair: asynchronous delivery, half-close on :meth:`Stream.close`,
    and backpressure (a reader that pauses makes the other side's writer pause once 64 KiB
    are waiting; tune with ``stream._wt.set_write_buffer_limits``).
    """
    loop = asyncio.get_running_loop()
    a, b = Stream(loop), Stream(loop)
    pa, pb = _DuplexProtocol(a), _DuplexProtocol(b)
    ta, tb = _MemoryTransport(loop, pa), _MemoryTransport(loop, pb)
    ta._peer, tb._peer = tb, ta
    pa.connection_made(ta)
    pb.connection_made(tb)
    for t in (ta, tb):  # keep the asyncio-like default limits in memory (smaller than pipes)
        t.set_write_buffer_limits(64 * 1024, 16 * 1024)
    return a, b


# ---------------------------------------------------------------------------------------
# event loop
# ---------------------------------------------------------------------------------------


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when uvloop is installed, else asyncio's default."""
    try:
        import uvloop  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()  # type: ignore[no-any-return, unused-ignore]


def run(main: Coroutine[Any, Any, _T], *, debug: bool | None = None) -> _T:
    """``asyncio.run(main)`` on :func:`new_event_loop` (uvloop when installed)."""
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=new_event_loop, debug=debug) as runner:
            return runner.run(main)
    loop = new_event_loop()  # pragma: no cover - Python 3.10
    try:  # pragma: no cover
        asyncio.set_event_loop(loop)
        if debug is not None:
            loop.set_debug(debug)
        return loop.run_until_complete(main)
    finally:  # pragma: no cover
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()
