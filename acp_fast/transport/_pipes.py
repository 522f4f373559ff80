"""Kernel pipe buffers: a wide one where ACP's long lines cross a pipe (Linux ``F_SETPIPE_SZ``).

A pipe's default 64 KiB buffer splits a 1 MiB message into sixteen writes, reads and wake-ups of
the two processes; a 1 MiB buffer takes it in one. Either end of a pipe may resize it: the
client side does it when it spawns the agent (:func:`acp_fast.transport.spawn`, where the loop
exposes the pipe), the agent side on its own stdin and stdout
(:func:`acp_fast.transport.connect_stdio`, on any loop), so a pipe is wide whenever one of its
ends is acp_fast.
"""

from __future__ import annotations

import asyncio
import os
import stat

__all__ = ["PIPE_SIZE", "widen_child_pipes", "widen_pipe"]

#: The kernel buffer asked for each of a connection's pipes (Linux; the default is 64 KiB, and
#: unprivileged processes may raise it to ``/proc/sys/fs/pipe-max-size``, 1 MiB unless changed).
#: Fewer, larger reads and writes: a 1 MiB message otherwise takes sixteen wake-ups and reads.
PIPE_SIZE = 1024 * 1024


def widen_pipe(fd: int) -> None:
    """Ask for a :data:`PIPE_SIZE` kernel buffer on ``fd`` when it is a pipe (Linux).

    Never shrinks a buffer. Anything else leaves the descriptor as it was: not a pipe, not
    Linux, or a refusal (a lower ``/proc/sys/fs/pipe-max-size``, or the user's pipes over
    ``pipe-user-pages-soft``).
    """
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    getsize = getattr(fcntl, "F_GETPIPE_SZ", None)
    if setsize is None or getsize is None:
        return
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode) or fcntl.fcntl(fd, getsize) >= PIPE_SIZE:
            return
        fcntl.fcntl(fd, setsize, PIPE_SIZE)
    except (OSError, ValueError):
        pass


def widen_child_pipes(transport: asyncio.SubprocessTransport) -> None:
    """:func:`widen_pipe` on a child's stdin and stdout where the loop exposes the pipes' files,
    as asyncio's does; uvloop's does not (an acp_fast agent widens its own end instead)."""
    for fd in (0, 1):
        pipe_transport = transport.get_pipe_transport(fd)
        pipe = pipe_transport.get_extra_info("pipe") if pipe_transport is not None else None
        if pipe is not None:
            widen_pipe(pipe.fileno())
