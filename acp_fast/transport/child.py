"""A child process as a stream: an agent started from a command line (protocol.md §8.6)."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import shlex
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import AcpFastError
from ._pipes import PIPE_SIZE, open_child_pipes
from .stream import Stream, _ReadPipeProtocol, _WritePipeProtocol, logger

__all__ = ["KILL_GRACE", "MINIMAL_ENV", "PIPE_SIZE", "STDERR_TAIL", "ChildExitError", "ChildStream", "parse_command", "spawn"]

#: How much of a child's stderr is kept for error reports (the newest bytes).
STDERR_TAIL = 64 * 1024
#: Seconds a child gets to exit after its stdin is closed before its process group is killed.
KILL_GRACE = 1.0

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_JSON_KEYS = frozenset(("name", "command", "args", "env"))


def parse_command(spec: str | Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Split a component spec into `(argv, env)` (protocol.md §8.6).

    * a string starting with `{` is JSON `{"name"?, "command", "args"?, "env"?}`; `env`
      is an object of strings or a list of `{"name", "value"}`; unknown keys are rejected;
    * any other string is split into shell words; leading `NAME=value` words become
      environment variables, the first other word is the command;
    * a sequence of strings is taken as `argv` already split.

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


class ChildExitError(AcpFastError):
    """A child process ended with a non-zero status (see [`ChildStream.exit_error`][acp_fast.transport.child.ChildStream.exit_error])."""


class ChildStream(Stream):
    """A child process's stdout (read) and stdin (write); its stderr is drained.

    Attributes:
        pid: the child's pid (also its process-group id).
        returncode: the exit status once it exited, else `None`.
    """

    reads_child_stdout = True

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
        """The last bytes the child wrote to stderr (at most `tail_size`)."""
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

    async def wait_exit(self) -> int | None:
        """Wait until the child process exited; returns its exit status."""
        await asyncio.shield(self._exited)
        return self.returncode

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
        """Close stdin, wait up to `grace` s for the child, then kill its process group."""
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
            if self._rt is not None:  # spawn's own stdout pipe (the process transport closed the loop's)
                self._rt.close()
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
        for fd in (1, 0):  # the loop's pipes where it made them (not on POSIX: spawn makes its own)
            pipe = transport.get_pipe_transport(fd)  # type: ignore[attr-defined]
            if pipe is not None:
                s._connected(pipe, read=fd == 1, write=fd == 0)

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


#: What a child started with ``inherit_env=False`` still gets from this process (when set).
MINIMAL_ENV = ("PATH", "SYSTEMROOT") if sys.platform == "win32" else ("PATH",)


def _child_env(spec_env: Mapping[str, str], env: Mapping[str, str] | None, inherit_env: bool) -> dict[str, str]:
    if inherit_env:
        full = dict(os.environ)
    else:
        full = {name: os.environ[name] for name in MINIMAL_ENV if name in os.environ}
        full.setdefault("PATH", os.defpath)
    full.update(spec_env)
    if env:
        full.update(env)
    return full


async def spawn(
    command: str | Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    inherit_env: bool = True,
    cwd: str | os.PathLike[str] | None = None,
    grace: float = KILL_GRACE,
    stderr_tail: int = STDERR_TAIL,
    on_stderr: Callable[[bytes], None] | None = None,
) -> ChildStream:
    """Start an agent as a child process and return a stream over its stdio.

    The child gets piped stdin/stdout/stderr and its own session (it leads a new process
    group, so [`ChildStream.close`][acp_fast.transport.child.ChildStream.close] can kill the whole tree). On POSIX its stdin and stdout
    are pipes made here with a 1 MiB kernel buffer where the system allows, on every loop
    (uvloop's own would be a socket pair: see `acp_fast.transport._pipes`).

    Its environment: by default the child **inherits this process's whole environment**
    (API keys and tokens included, as a shell would pass them on), with the spec's
    `NAME=value` words and then `env` merged over it. With `inherit_env=False` it gets
    only `PATH` from this process (`MINIMAL_ENV`; `os.defpath` when unset, so the
    command and what it starts are still found), then the spec's words and `env`; pass
    anything else the agent needs (`HOME`, `LANG`, its API key) in `env`.

    Args:
        command: a component spec string (see [`parse_command`][acp_fast.transport.child.parse_command]) or an argv sequence.
        env: environment variables merged over the rest (they win over the spec's).
        inherit_env: pass this process's environment on (default) or only `MINIMAL_ENV`.
        cwd: the child's working directory.
        grace: seconds to wait for the child after closing its stdin before SIGKILL.
        stderr_tail: how many bytes of stderr to keep for [`ChildStream.stderr_tail`][acp_fast.transport.child.ChildStream.stderr_tail].
        on_stderr: called with every stderr chunk (the tail is kept either way).
    """
    loop = asyncio.get_running_loop()
    argv, spec_env = parse_command(command)
    stream = ChildStream(loop, grace, stderr_tail, on_stderr)
    full_env = _child_env(spec_env, env, inherit_env)
    if os.name != "posix":  # pragma: no cover - the loop's pipes (Windows needs overlapped ones)
        await loop.subprocess_exec(lambda: _ChildProtocol(stream), *argv, stdin=asyncio.subprocess.PIPE,
                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                   env=full_env, cwd=cwd, start_new_session=True)
        return stream
    pipes = open_child_pipes()  # real, wide pipes on every loop (uvloop's PIPE is a socket pair: see _pipes)
    try:
        await loop.subprocess_exec(lambda: _ChildProtocol(stream), *argv, stdin=pipes.child_stdin,
                                   stdout=pipes.child_stdout, stderr=asyncio.subprocess.PIPE,
                                   env=full_env, cwd=cwd, start_new_session=True)
    except BaseException:
        os.close(pipes.stdin)
        os.close(pipes.stdout)
        raise
    finally:
        os.close(pipes.child_stdin)
        os.close(pipes.child_stdout)
    reader, writer = open(pipes.stdout, "rb", buffering=0), open(pipes.stdin, "wb", buffering=0)  # noqa: SIM115
    try:
        await loop.connect_read_pipe(lambda: _ReadPipeProtocol(stream), reader)
        await loop.connect_write_pipe(lambda: _WritePipeProtocol(stream), writer)
    except BaseException:  # cancelled while connecting: the child must not outlive its stream
        stream._killpg()
        stream._proc.close()
        reader.close()
        writer.close()
        raise
    return stream
