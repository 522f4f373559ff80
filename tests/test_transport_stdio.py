"""``connect_stdio`` on every kind of stdin/stdout an agent can be started with.

A real child (``tests/helpers/echo_agent.py``: ``connect_stdio`` + ``Connection`` on the
engine twin under test) runs on each event loop (asyncio, uvloop) with stdin from a pipe,
``/dev/null``, a regular file or closed, and stdout to a pipe, a regular file,
``/dev/null`` or closed. It must answer what it can, exit 0 at the end of its input, and
print no traceback. Closed descriptors are made with the shell (``<&-`` / ``>&-``).

The thread reader used for descriptors the loop cannot poll is also tested in process:
it reads at most one chunk ahead of a pause.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import acp_fast
from acp_fast.transport import Stream
from acp_fast.transport.stdio import _ThreadReadTransport
from acp_fast.transport.stream import _ReadPipeProtocol

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from package_path import pythonpath  # noqa: E402

HANG_GUARD = 30  # seconds; only stops a hung test, never asserts speed
HELPERS = Path(__file__).parent / "helpers"
CLOSED_STDOUT_WARNING = b"stdout is closed: discarding this process's output"


def _uvloop_missing() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return True
    return False


LOOPS = ["asyncio", pytest.param("uvloop", marks=pytest.mark.skipif(_uvloop_missing(), reason="uvloop cannot be imported"))]


def _env(engine: Any, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": pythonpath(), "ACP_FAST_TEST_ENGINE": engine.IMPLEMENTATION, **extra}


def _agent_argv(loop: str) -> list[str]:
    code = (f"import sys; sys.path.insert(0, {str(HELPERS)!r}); import echo_agent; "
            f"from acp_fast.transport import run; run(echo_agent.main(), loop={loop!r})")
    return [sys.executable, "-c", code]


def _requests() -> bytes:
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "sleep_echo", "params": ["async"]},
        {"jsonrpc": "2.0", "id": 2, "method": "echo", "params": ["sync"]},
        {"jsonrpc": "2.0", "id": 3, "method": "nope"},
    ]
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


def _check_replies(out: bytes) -> None:
    replies = {r["id"]: r for r in map(json.loads, out.splitlines())}
    assert replies[1]["result"] == ["async"]
    assert replies[2]["result"] == ["sync"]
    assert replies[3]["error"]["code"] == -32601
    assert len(replies) == 3


def _run_agent(argv: list[str], env: dict[str, str], stdin: str, stdout: str, tmp_path: Path) -> tuple[bytes, bytes]:
    """Run ``argv`` with the given stdin/stdout kinds; returns (what it wrote to stdout, stderr)."""
    infile, outfile = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    infile.write_bytes(_requests())
    outfile.write_bytes(b"")
    redirect = {"closed": "<&-", "devnull": "</dev/null", "file": '<"$ACP_IN"', "pipe": ""}[stdin]
    redirect += {"closed": " >&-", "devnull": " >/dev/null", "file": ' >"$ACP_OUT"', "pipe": ""}[stdout]
    shell = ["sh", "-c", f'exec "$0" "$@" {redirect}', *argv]
    proc = subprocess.run(shell, input=_requests() if stdin == "pipe" else None,
                          stdin=None if stdin == "pipe" else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False, timeout=HANG_GUARD,
                          env={**env, "ACP_IN": str(infile), "ACP_OUT": str(outfile)})
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    written = proc.stdout if stdout == "pipe" else outfile.read_bytes()
    return written, proc.stderr


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize(("stdin", "stdout"), [
    ("devnull", "pipe"), ("closed", "pipe"), ("file", "pipe"),
    ("pipe", "file"), ("file", "devnull"), ("file", "closed"), ("closed", "closed"),
])
def test_agent_serves_any_stdin_and_stdout_then_exits_cleanly(engine: Any, loop: str, stdin: str, stdout: str,
                                                              tmp_path: Path) -> None:
    written, stderr = _run_agent(_agent_argv(loop), _env(engine), stdin, stdout, tmp_path)
    if stdin in ("file", "pipe") and stdout in ("file", "pipe"):
        _check_replies(written)
    else:
        assert written == b""
    # a closed stdout is reported once, whatever was discarded; nothing else is
    assert stderr.count(CLOSED_STDOUT_WARNING) == (1 if stdout == "closed" and stdin != "closed" else 0), stderr


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize(("stdin", "stdout"), [("devnull", "pipe"), ("closed", "closed")])
def test_testy_command_exits_cleanly_without_input(loop: str, stdin: str, stdout: str, tmp_path: Path) -> None:
    """``acp-fast testy < /dev/null`` (issue: epoll's PermissionError traceback); ACP_FAST_LOOP picks the loop."""
    env = {**_env(acp_fast), "ACP_FAST_LOOP": loop}
    written, _ = _run_agent([sys.executable, "-m", "acp_fast.cli.main", "testy"], env, stdin, stdout, tmp_path)
    assert written == b""


def test_big_regular_file_on_stdin_is_read_in_chunks_and_answered(engine: Any, tmp_path: Path) -> None:
    n = 3000  # ~1 MiB of requests: several thread-reader chunks, with the connection pausing in between
    pad = "x" * 300
    lines = b"".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "echo", "params": [i, pad]}).encode() + b"\n"
                     for i in range(n))
    (tmp_path / "big.jsonl").write_bytes(lines)
    with open(tmp_path / "big.jsonl", "rb") as fin, open(tmp_path / "out.jsonl", "wb") as fout:
        proc = subprocess.run(_agent_argv("asyncio"), stdin=fin, stdout=fout, stderr=subprocess.PIPE, check=False,
                              env=_env(engine, ECHO_MAX_BACKLOG="16"), timeout=HANG_GUARD)
    assert proc.returncode == 0, proc.stderr
    ids = [json.loads(line)["id"] for line in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    assert sorted(ids) == list(range(n))


def test_thread_reader_reads_at_most_one_chunk_ahead_of_a_pause(tmp_path: Path) -> None:
    chunk = _ThreadReadTransport.CHUNK
    path = tmp_path / "data"
    path.write_bytes(b"a" * (chunk * 8))

    async def main() -> None:
        fd = os.open(path, os.O_RDONLY)
        probe = os.dup(fd)  # shares the file offset: how far the thread has read
        try:
            stream = Stream(asyncio.get_running_loop())
            transport = _ThreadReadTransport(asyncio.get_running_loop(), fd, _ReadPipeProtocol(stream))
            got: list[int] = []
            done = asyncio.get_running_loop().create_future()

            def on_data(data: bytes) -> None:
                got.append(len(data))
                stream.pause_reading()

            stream.attach(on_data, lambda exc: done.set_result(exc), lambda ok: None)
            while not got:
                await asyncio.sleep(0.01)
            for _ in range(20):  # give a runaway reader every chance to show itself
                await asyncio.sleep(0.01)
            assert got == [chunk]
            assert transport.is_reading() is False
            assert os.lseek(probe, 0, os.SEEK_CUR) <= 2 * chunk  # the chunk delivered + one held
            while not done.done():
                stream.resume_reading()
                await asyncio.sleep(0.001)
            assert await done is None
            assert sum(got) == 8 * chunk
            await stream.wait_closed()
        finally:
            os.close(probe)

    asyncio.run(asyncio.wait_for(main(), HANG_GUARD))


def test_thread_reader_with_no_descriptor_is_an_immediate_eof() -> None:
    async def main() -> None:
        stream = Stream(asyncio.get_running_loop())
        _ThreadReadTransport(asyncio.get_running_loop(), None, _ReadPipeProtocol(stream))
        eof = asyncio.get_running_loop().create_future()
        got: list[bytes] = []
        stream.attach(got.append, eof.set_result, lambda ok: None)
        assert await eof is None
        assert got == []
        await stream.wait_closed()

    asyncio.run(asyncio.wait_for(main(), HANG_GUARD))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are a Linux fcntl")
@pytest.mark.parametrize("loop", LOOPS)
def test_the_agent_widens_its_stdin_and_stdout_pipes_on_any_loop(loop: str) -> None:
    """``connect_stdio`` asks for ``PIPE_SIZE`` kernel buffers on the pipes it is given (or the
    system's limit, when lower), on every loop: a pipe is wide when either end is acp_fast, whoever
    made it. A regular file is left alone."""
    import fcntl

    from acp_fast.transport import connect_stdio, run
    from acp_fast.transport.child import PIPE_SIZE

    with open("/proc/sys/fs/pipe-max-size") as f:
        expected = min(PIPE_SIZE, int(f.read()))
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    assert fcntl.fcntl(r_in, fcntl.F_GETPIPE_SZ) < expected  # the default, 64 KiB

    async def main() -> None:
        stream = await connect_stdio(stdin=r_in, stdout=w_out)
        try:
            for fd in (r_in, w_out):  # the same pipes: connect_stdio duplicates the descriptors
                assert fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) == expected, fd
        finally:
            stream.close()

    try:
        run(main(), loop=loop)
    finally:
        for fd in (r_in, w_in, r_out, w_out):
            os.close(fd)


def test_widen_pipe_leaves_anything_but_a_pipe_alone(tmp_path: Path) -> None:
    from acp_fast.transport._pipes import widen_pipe

    with open(tmp_path / "f", "wb") as f:
        widen_pipe(f.fileno())  # a regular file: nothing to ask, nothing raised
    widen_pipe(10**6)  # not a descriptor at all: nothing raised
