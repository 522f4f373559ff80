"""Kernel pipe buffers: a wide one where ACP's long lines cross a pipe (Linux `F_SETPIPE_SZ`).

A pipe's default 64 KiB buffer splits a 1 MiB message into sixteen writes, reads and wake-ups of
the two processes; a 1 MiB buffer takes it in one. Either end of a pipe may resize it: the
client side does it when it spawns the agent ([`acp_fast.transport.spawn`][acp_fast.transport.spawn], through
`open_child_pipes`), the agent side on its own stdin and stdout
([`acp_fast.transport.connect_stdio`][acp_fast.transport.connect_stdio]), so a pipe is wide whenever one of its ends is
acp_fast.

NOTE: `spawn` makes the child's stdin and stdout pipes itself (`open_child_pipes`) instead
of asking the loop for `subprocess.PIPE`: uvloop (libuv) answers `PIPE` with a Unix socket
pair, whose buffer stays at `net.core.wmem_default` (208 KiB) and which no pipe-widening end
can widen. Over such a pair a streaming agent's 256 KiB writes never fit: measured with the
README's agent on uvloop, per 1,000 streamed updates it made 2.6 write calls and 1.1 heap
calls (brk/mmap) against 1.8 and 0.7 over the pipes, its page faults per update fell from 0.036
to 0.014, and the client's sleeps in epoll from 1.3 to 0.1. With its own pipes the child gets the
same pipes on every loop.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

__all__ = ["PIPE_SIZE", "ChildPipes", "open_child_pipes", "widen_pipe"]

#: The kernel buffer asked for each of a connection's pipes (Linux; the default is 64 KiB, and
#: unprivileged processes may raise it to ``/proc/sys/fs/pipe-max-size``, 1 MiB unless changed).
#: Fewer, larger reads and writes: a 1 MiB message otherwise takes sixteen wake-ups and reads.
PIPE_SIZE = 1024 * 1024


def widen_pipe(fd: int) -> None:
    """Ask for a `PIPE_SIZE` kernel buffer on `fd` when it is a pipe (Linux).

    Never shrinks a buffer. Anything else leaves the descriptor as it was: not a pipe, not
    Linux, or a refusal (a lower `/proc/sys/fs/pipe-max-size`, or the user's pipes over
    `pipe-user-pages-soft`).
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


class ChildPipes(NamedTuple):
    """The descriptors of a child's stdin and stdout pipes (`open_child_pipes`)."""

    child_stdin: int  #: the read end the child gets as its stdin
    stdin: int  #: the write end this process keeps (to the child's stdin)
    stdout: int  #: the read end this process keeps (from the child's stdout)
    child_stdout: int  #: the write end the child gets as its stdout


def open_child_pipes() -> ChildPipes:
    """Two new pipes for a child's stdin and stdout, each widened (`widen_pipe`).

    All four descriptors are blocking and not inheritable (a child gets its two ends through
    its stdin/stdout redirection); the caller closes the child's ends once it has started
    and owns the other two.
    """
    in_r, in_w = os.pipe()
    try:
        out_r, out_w = os.pipe()
    except OSError:
        os.close(in_r)
        os.close(in_w)
        raise
    widen_pipe(in_w)
    widen_pipe(out_r)
    return ChildPipes(in_r, in_w, out_r, out_w)
