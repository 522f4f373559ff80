"""Transports (acp_fast.transport) with a real Connection, on both engine twins.

The ``engine`` fixture (tests/conftest.py) runs every test on both twins. Stdio on files,
``/dev/null`` and closed descriptors is in ``test_transport_stdio.py``; the event-loop
choice in ``test_transport_loop.py``.

Child-process tests start ``tests/helpers/echo_agent.py`` (the real stack on its own
stdio) through :func:`spawn`, over real OS pipes; socket tests use 127.0.0.1 and a Unix
socket in a temporary directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from acp_fast.errors import JsonRpcError
from acp_fast.jsonrpc import Connection, RequestContext
from acp_fast.transport import (
    ChildStream,
    Stream,
    connect_tcp,
    connect_unix,
    memory_pair,
    parse_command,
    serve_tcp,
    serve_unix,
    spawn,
)
from acp_fast.transport.child import _child_env
from acp_fast.transport.stream import _DuplexProtocol

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from package_path import pythonpath  # noqa: E402

HANG_GUARD = 30  # seconds; only stops a hung test, never asserts speed
HELPER = Path(__file__).parent / "helpers" / "echo_agent.py"


def run(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(fn(*args), HANG_GUARD)

    return asyncio.run(guarded())


def agent_env(engine: Any, **extra: str) -> dict[str, str]:
    return {"PYTHONPATH": pythonpath(), "ACP_FAST_TEST_ENGINE": engine.IMPLEMENTATION, **extra}


async def start_agent(engine: Any, *, on_invalid: Any = None, grace: float = 1.0,
                      **env: str) -> tuple[Connection, ChildStream]:
    stream = await spawn([sys.executable, str(HELPER)], env=agent_env(engine, **env), grace=grace)
    return Connection(stream, engine=engine, on_invalid=on_invalid), stream


# ---------------------------------------------------------------------------------------
# component spec parsing (protocol.md §8.6)
# ---------------------------------------------------------------------------------------


def test_parse_command_shell_words_with_leading_env_assignments() -> None:
    assert parse_command("FOO=1 BAR='a b' npx -y @zed/agent --acp X=2") == (
        ["npx", "-y", "@zed/agent", "--acp", "X=2"], {"FOO": "1", "BAR": "a b"})
    assert parse_command("A-B=1 cmd") == (["A-B=1", "cmd"], {})  # not a valid name: the command
    assert parse_command(["python", "a b.py"]) == (["python", "a b.py"], {})
    for bad in ("", "   ", "FOO=1", []):
        with pytest.raises(ValueError):
            parse_command(bad)


def test_parse_command_json_form() -> None:
    spec = json.dumps({"name": "a", "command": "node", "args": ["x.js", "--acp"], "env": {"K": "v"}})
    assert parse_command(spec) == (["node", "x.js", "--acp"], {"K": "v"})
    listed = json.dumps({"command": "node", "env": [{"name": "K", "value": "v"}]})
    assert parse_command(listed) == (["node"], {"K": "v"})
    for bad in ('{"command": "node", "cwd": "/"}', '{"args": []}', '{"command": "x", "args": [1]}',
                '{"command": "x", "env": {"K": 1}}', '{"command": ', '{"command": "x", "env": [{"n": 1}]}'):
        with pytest.raises(ValueError):
            parse_command(bad)


# ---------------------------------------------------------------------------------------
# child process over real pipes
# ---------------------------------------------------------------------------------------


def test_child_roundtrip_on_the_same_engine_twin(engine: Any) -> None:
    async def main() -> None:
        conn, stream = await start_agent(engine)
        assert await conn.request("engine") == engine.IMPLEMENTATION
        big = {"text": "é" * 100_000, "n": list(range(1000))}  # spans many pipe reads
        assert await conn.request("echo", big) == big
        assert isinstance(stream.pid, int) and stream.get_extra_info("pid") == stream.pid
        async with conn:
            pass
        assert stream.returncode == 0

    run(main)


def test_child_spec_string_env_assignments_and_env_param(engine: Any) -> None:
    async def main() -> None:
        spec = f"ACP_SPEC_VAR='from spec' {shlex.quote(sys.executable)} {shlex.quote(str(HELPER))}"
        stream = await spawn(spec, env=agent_env(engine, ACP_PARAM_VAR="from param"))
        async with Connection(stream, engine=engine) as conn:
            assert await conn.request("env", {"name": "ACP_SPEC_VAR"}) == "from spec"
            assert await conn.request("env", {"name": "ACP_PARAM_VAR"}) == "from param"
            assert await conn.request("env", {"name": "HOME"}) == os.environ.get("HOME")  # inherited
        spec = json.dumps({"name": "echo", "command": sys.executable, "args": [str(HELPER)],
                           "env": {"ACP_JSON_VAR": "from json", **agent_env(engine)}})
        async with Connection(await spawn(spec), engine=engine) as conn:
            assert await conn.request("env", {"name": "ACP_JSON_VAR"}) == "from json"

    run(main)


def test_child_inherits_the_whole_environment_by_default(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_PARENT_ONLY", "parent secret")

    async def main() -> None:
        async with Connection(await spawn([sys.executable, str(HELPER)], env=agent_env(engine)),
                              engine=engine) as conn:
            assert await conn.request("env", {"name": "ACP_PARENT_ONLY"}) == "parent secret"

    run(main)


def test_child_without_inherited_environment_gets_only_path_and_what_it_is_given(
        engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_PARENT_ONLY", "parent secret")
    monkeypatch.setenv("ACP_SPEC_VAR", "parent value")

    async def main() -> None:
        spec = f"ACP_SPEC_VAR=spec ACP_BOTH=spec {shlex.quote(sys.executable)} {shlex.quote(str(HELPER))}"
        stream = await spawn(spec, env=agent_env(engine, ACP_BOTH="param"), inherit_env=False)
        async with Connection(stream, engine=engine) as conn:
            seen = {name: await conn.request("env", {"name": name})
                    for name in ("ACP_PARENT_ONLY", "HOME", "PATH", "ACP_SPEC_VAR", "ACP_BOTH")}
            keys = await conn.request("env_keys")
        assert seen == {"ACP_PARENT_ONLY": None, "HOME": None, "PATH": os.environ["PATH"],
                        "ACP_SPEC_VAR": "spec", "ACP_BOTH": "param"}
        allowed = {"PATH", "ACP_SPEC_VAR", "ACP_BOTH", *agent_env(engine)}
        # the interpreter may add a few of its own (LC_CTYPE when it coerces the C locale)
        assert set(keys) - allowed <= {"LC_CTYPE"}, keys

    run(main)


def test_child_env_without_inheritance_falls_back_to_the_default_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PATH", raising=False)
    monkeypatch.setenv("ACP_PARENT_ONLY", "x")
    assert _child_env({"A": "1"}, {"B": "2"}, False) == {"PATH": os.defpath, "A": "1", "B": "2"}
    assert _child_env({}, {"PATH": "/mine"}, False) == {"PATH": "/mine"}
    assert _child_env({"A": "1"}, {"A": "2"}, True)["ACP_PARENT_ONLY"] == "x"


def test_child_handler_awaits_its_request_back_to_us(engine: Any) -> None:
    async def main() -> None:
        conn, _ = await start_agent(engine)
        conn.on_request("client/ask", lambda ctx: f"allowed {ctx.params['tool']}")
        async with conn:
            results = await asyncio.gather(*[conn.request("ask_back", {"tool": f"t{i}"}) for i in range(20)])
            assert results == [{"answer": f"allowed t{i}"} for i in range(20)]

    run(main)


def test_child_cancellation_both_directions(engine: Any) -> None:
    async def main() -> None:
        conn, _ = await start_agent(engine)
        started = asyncio.Event()
        conn.on_notification("started", lambda msg: started.set())

        async def slow(ctx: RequestContext) -> str:
            return await ctx.run_until_cancelled(asyncio.Event().wait())

        conn.on_request("client/slow", slow)
        async with conn:
            handle = conn.request("wait_cancel")
            await started.wait()
            assert handle.cancel()
            with pytest.raises(JsonRpcError) as info:
                await handle
            assert info.value.code == -32800
            # the agent cancels its own request to us; our handler answers -32800
            assert await conn.request("cancel_back") == {"code": -32800}

    run(main)


def test_child_banner_is_skipped_by_default_and_answered_on_request(engine: Any) -> None:
    async def main() -> None:
        conn, stream = await start_agent(engine, ECHO_BANNER="Welcome to agent 1.0")
        async with conn:
            assert await conn.request("echo", [1]) == [1]
        assert b"unknown request id" not in stream.stderr_tail  # nothing was sent back
        conn, stream = await start_agent(engine, on_invalid="reply", ECHO_BANNER="Welcome to agent 1.0")
        async with conn:
            assert await conn.request("echo", [2]) == [2]
        assert b"unknown request id None" in stream.stderr_tail  # the agent got our -32700

    run(main)


def test_child_exit_fails_pending_requests_and_reports_status(engine: Any) -> None:
    async def main() -> None:
        conn, stream = await start_agent(engine)
        with pytest.raises(JsonRpcError) as info:
            await conn.request("die", {"code": 3})
        assert info.value.to_dict() == {"code": -32603, "message": "Incoming transport closed",
                                        "data": {"reason": "incoming_transport_closed", "method": "die"}}
        with pytest.raises(JsonRpcError):
            await conn.request("echo")
        await conn.wait_closed()
        assert stream.returncode == 3
        assert stream.exit_error is not None and "dying on purpose" in str(stream.exit_error)

    run(main)


def test_child_stderr_is_drained_and_its_tail_bounded(engine: Any) -> None:
    async def main() -> None:
        stream = await spawn([sys.executable, str(HELPER)], env=agent_env(engine), stderr_tail=64 * 1024)
        chunks: list[bytes] = []
        stream._on_stderr = chunks.append
        async with Connection(stream, engine=engine) as conn:
            # 1 MiB of stderr would block the child for good if nobody drained the pipe
            assert await conn.request("spew", {"bytes": 1024 * 1024}) is None
        tail = stream.stderr_tail
        assert 0 < len(tail) <= 64 * 1024 and tail.endswith(b"END\n")
        assert sum(map(len, chunks)) >= 1024 * 1024

    run(main)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie is dead
    except FileNotFoundError:
        return True


def test_child_close_kills_its_process_group(engine: Any) -> None:
    async def main() -> None:
        conn, stream = await start_agent(engine)
        async with conn:
            grandchild = await conn.request("grandchild")
            assert not _gone(grandchild)
        await stream.wait_closed()
        for _ in range(200):
            if _gone(grandchild):
                break
            await asyncio.sleep(0.01)
        assert _gone(grandchild)

    run(main)


def test_child_ignoring_stdin_eof_is_killed_after_the_grace_period(engine: Any) -> None:
    async def main() -> None:
        conn, stream = await start_agent(engine, grace=0.2, ECHO_IGNORE_EOF="1")
        assert await conn.request("echo", [1]) == [1]
        conn.close()
        await conn.wait_closed()
        assert stream.returncode == -signal.SIGKILL

    run(main)


def test_child_backpressure_slow_agent_pauses_our_writer(engine: Any) -> None:
    async def main() -> None:
        conn, stream = await start_agent(engine, ECHO_MAX_BACKLOG="8")
        assert await conn.request("echo", [0]) == [0]  # the agent is up
        pad = "x" * 1000
        sent = 0
        while not conn.writing_paused:
            conn.notify("hold", {"i": sent, "pad": pad})
            sent += 1
            if sent % 16 == 0:
                await asyncio.sleep(0)
            assert sent < 20_000, "the writer never saw backpressure"  # ~1.4 MB is enough
        assert stream.writing_paused
        assert stream.get_write_buffer_size() <= 2 * 1024 * 1024  # about the high-water mark
        assert stream.pid is not None
        os.kill(stream.pid, signal.SIGUSR1)  # open the agent's gate
        await conn.drain()
        stats = await conn.request("stats")
        assert stats["held"] == sent
        assert stats["paused_seen"]
        # bounded: one read (<= 256 KiB, ~255 frames) above the agent's max_backlog
        assert stats["max_queue"] <= 8 + 256
        await conn.__aexit__(None, None, None)

    run(main)


# ---------------------------------------------------------------------------------------
# this process's stdio (the agent side), driven by plain subprocess
# ---------------------------------------------------------------------------------------

def _requests() -> bytes:
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "sleep_echo", "params": ["async"]},
        {"jsonrpc": "2.0", "id": 2, "method": "echo", "params": ["sync"]},
        {"jsonrpc": "2.0", "id": 3, "method": "nope"},
    ]
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines) + b"not json"  # no final newline


def _check_replies(out: bytes) -> None:
    replies = {r["id"]: r for r in map(json.loads, out.splitlines())}
    assert replies[1]["result"] == ["async"]  # answered after stdin EOF
    assert replies[2]["result"] == ["sync"]
    assert replies[3]["error"]["code"] == -32601
    assert replies[None]["error"] == {"code": -32700, "message": "Parse error", "data": {"line": "not json"}}


def test_stdio_agent_answers_everything_before_exiting_at_eof(engine: Any) -> None:
    proc = subprocess.run([sys.executable, str(HELPER)], input=_requests(), capture_output=True, check=False,
                          env={**os.environ, **agent_env(engine)}, timeout=HANG_GUARD)
    assert proc.returncode == 0, proc.stderr
    _check_replies(proc.stdout)


def test_stdio_agent_reads_and_writes_regular_files(engine: Any, tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_bytes(_requests())
    with open(tmp_path / "in.jsonl", "rb") as fin, open(tmp_path / "out.jsonl", "wb") as fout:
        proc = subprocess.run([sys.executable, str(HELPER)], stdin=fin, stdout=fout, stderr=subprocess.PIPE, check=False,
                              env={**os.environ, **agent_env(engine)}, timeout=HANG_GUARD)
    assert proc.returncode == 0, proc.stderr
    _check_replies((tmp_path / "out.jsonl").read_bytes())


# ---------------------------------------------------------------------------------------
# sockets
# ---------------------------------------------------------------------------------------


async def _socket_session(engine: Any, serve: Callable[..., Awaitable[asyncio.AbstractServer]],
                          connect: Callable[[], Awaitable[Stream]]) -> None:
    server_done: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()

    def on_stream(stream: Stream) -> None:
        agent = Connection(stream, engine=engine)

        async def prompt(ctx: RequestContext) -> Any:
            return {"client said": await ctx.connection.request("client/hello", ctx.params)}

        agent.on_request("prompt", prompt)
        agent.closed.add_done_callback(lambda _: server_done.set_result(agent))

    server = await serve(on_stream)
    async with server:
        client = Connection(await connect(), engine=engine)
        client.on_request("client/hello", lambda ctx: ctx.params[::-1])
        assert await client.request("prompt", [1, 2, 3]) == {"client said": [3, 2, 1]}
        await client.drain()
        client.close()
        agent = await server_done  # the agent saw EOF and closed by itself
        assert agent.eof
        await client.wait_closed()


def test_tcp_server_and_client(engine: Any) -> None:
    async def main() -> None:
        port: list[int] = []

        async def serve(on_stream: Any) -> asyncio.AbstractServer:
            server = await serve_tcp(on_stream, "127.0.0.1", 0)
            port.append(server.sockets[0].getsockname()[1])
            return server

        await _socket_session(engine, serve, lambda: connect_tcp("127.0.0.1", port[0]))

    run(main)


def test_tcp_server_listens_on_loopback_by_default(engine: Any) -> None:
    async def main() -> None:
        port: list[int] = []

        async def serve(on_stream: Any) -> asyncio.AbstractServer:
            server = await serve_tcp(on_stream)  # no host, no port
            addresses = [sock.getsockname() for sock in server.sockets]
            assert [a[0] for a in addresses] == ["127.0.0.1"], addresses
            port.append(addresses[0][1])
            assert port[0] != 0
            return server

        await _socket_session(engine, serve, lambda: connect_tcp("127.0.0.1", port[0]))

    run(main)


def test_unix_socket_server_and_client(engine: Any, tmp_path: Path) -> None:
    path = tmp_path / "acp.sock"

    async def main() -> None:
        await _socket_session(engine, lambda on_stream: serve_unix(on_stream, path), lambda: connect_unix(path))

    run(main)


# ---------------------------------------------------------------------------------------
# memory pair, stream attach, event loop helpers
# ---------------------------------------------------------------------------------------


def test_memory_pair_goes_through_the_protocol_callbacks(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = _DuplexProtocol.data_received

    def counting(self: _DuplexProtocol, data: bytes) -> None:
        calls.append(len(data))
        real(self, data)

    monkeypatch.setattr(_DuplexProtocol, "data_received", counting)

    async def main() -> None:
        a, b = memory_pair()
        client, agent = Connection(a, engine=engine), Connection(b, engine=engine)
        agent.on_request("echo", lambda ctx: ctx.params)
        assert await client.request("echo", ["x"]) == ["x"]
        client.close()
        await agent.wait_closed()  # half-close: the agent saw EOF, then closed itself

    run(main)
    assert len(calls) == 2


def test_memory_pair_hands_frames_in_order_with_bytes_and_counts_them() -> None:
    """Bytes written with their frames reach a consumer that takes frames of that decoder
    as the frames, in the order written with plain bytes around them; a consumer of another
    decoder (or of bytes only) gets the bytes; frames count toward the writer's pause like
    bytes, and nothing of them is delivered while the reader is paused."""

    async def main() -> None:
        a, b = memory_pair()
        mine, other = object(), object()
        got: list[object] = []
        writable: list[bool] = []
        a.attach(lambda data: got.append(data), lambda exc: None, lambda ok: None)
        b.attach(lambda data: None, lambda exc: None, writable.append)
        assert b.peer_frame_decoder is None  # the consumer takes bytes only
        a.accept_frames(lambda frames: got.append(tuple(frames)), mine)
        assert b.peer_frame_decoder is mine and a.frame_decoder is mine
        b.write(b"one\n")
        b.write_frames(b"two\n", ["F2"], mine)
        b.write_frames(b"2b\n", ["F2b"], mine)  # one run of frames: one delivery, as one read
        b.write(b"three\n")
        b.write(b"four\n")
        b.write_frames(b"five\n", ["F5"], other)  # not the consumer's decoder: bytes
        b.write_frames(b"six\n", ["F6"], mine)
        await asyncio.sleep(0)
        assert got == [b"one\n", ("F2", "F2b"), b"three\nfour\n", b"five\n", ("F6",)]
        got.clear()
        a.pause_reading()
        for i in range(40):
            b.write_frames(b"x" * 2047 + b"\n", [i], mine)
        await asyncio.sleep(0)
        assert got == [] and writable == [False]  # 80 KiB waiting: over the 64 KiB mark
        a.resume_reading()
        await asyncio.sleep(0)
        assert got == [tuple(range(40))] and writable == [False, True]

    run(main)


_REPORT_STDIO = """
import fcntl, os, stat, sys
for fd in (0, 1):
    mode = os.fstat(fd).st_mode
    size = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) if stat.S_ISFIFO(mode) else None
    sys.stderr.write(f"{fd} {'pipe' if stat.S_ISFIFO(mode) else 'socket' if stat.S_ISSOCK(mode) else 'other'} {size}\\n")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are a Linux fcntl")
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_child_gets_wide_pipes_on_every_loop(loop: str) -> None:
    """The child's stdin and stdout are pipes widened to ``PIPE_SIZE`` (or the system's limit,
    when lower) on every loop, as the child itself sees them: uvloop's own ``PIPE`` would be a
    socket pair that no end can widen (``transport._pipes``)."""
    from acp_fast.transport import run
    from acp_fast.transport.child import PIPE_SIZE

    pytest.importorskip(loop)
    with open("/proc/sys/fs/pipe-max-size") as f:
        expected = min(PIPE_SIZE, int(f.read()))
    seen: list[bytes] = []

    async def main() -> None:
        stream = await spawn([sys.executable, "-c", _REPORT_STDIO], on_stderr=seen.append)
        try:
            assert await asyncio.wait_for(stream.wait_exit(), HANG_GUARD) == 0
        finally:
            stream.close()
            await stream.wait_closed()

    run(main(), loop=loop)
    assert b"".join(seen).decode().split("\n")[:2] == [f"0 pipe {expected}", f"1 pipe {expected}"]


def test_stream_keeps_data_and_eof_that_arrive_before_attach(engine: Any) -> None:
    async def main() -> None:
        a, b = memory_pair()
        b.write(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}\n')
        b.write(b'{"jsonrpc":"2.0","id":2,"method":"echo","params":[2]}')
        b._wt.write_eof()
        for _ in range(5):
            await asyncio.sleep(0)
        assert a.reading_paused
        conn = Connection(a, engine=engine)
        conn.on_request("echo", lambda ctx: ctx.params)
        got: list[bytes] = []
        b.attach(got.append, lambda exc: None, lambda ok: None)
        await conn.wait_closed()
        for _ in range(5):
            await asyncio.sleep(0)
        assert b"".join(got).splitlines() == [b'{"jsonrpc":"2.0","id":1,"result":[1]}',
                                              b'{"jsonrpc":"2.0","id":2,"result":[2]}']
        with pytest.raises(RuntimeError):
            a.attach(got.append, lambda exc: None, lambda ok: None)

    run(main)


class _DeafTransport(asyncio.Transport):
    """A transport that keeps delivering while paused (as asyncio's subprocess replay can)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.pauses = 0

    def pause_reading(self) -> None:
        self.pauses += 1

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))


def test_stream_buffers_chunks_delivered_before_attach_even_if_transport_ignores_pause(engine: Any) -> None:
    async def main() -> None:
        stream = Stream(asyncio.get_running_loop())
        proto = _DuplexProtocol(stream)
        transport = _DeafTransport()
        proto.connection_made(transport)
        proto.data_received(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}\n{"jsonrpc"')
        proto.data_received(b':"2.0","id":2,"method":"echo","params":[2]}')
        proto.eof_received()
        assert transport.pauses >= 1
        conn = Connection(stream, engine=engine)
        conn.on_request("echo", lambda ctx: ctx.params)
        while not conn.eof:
            await asyncio.sleep(0)
        assert b"".join(transport.written).splitlines() == [b'{"jsonrpc":"2.0","id":1,"result":[1]}',
                                                             b'{"jsonrpc":"2.0","id":2,"result":[2]}']

    run(main)


def test_a_transport_built_outside_the_package_feeds_a_stream() -> None:
    """``Stream.protocol()`` is what a transport written elsewhere (the remote WebSocket link)
    drives; ``set_extra_info`` names it; ``memory_pair(first=...)`` builds a subclass end."""

    class Outside(asyncio.Transport):
        def __init__(self) -> None:
            super().__init__()
            self.written: list[bytes] = []
            self.paused = False

        def write(self, data: bytes | bytearray | memoryview) -> None:
            self.written.append(bytes(data))

        def pause_reading(self) -> None:
            self.paused = True

        def resume_reading(self) -> None:
            self.paused = False

        def is_closing(self) -> bool:
            return False

        def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
            pass

        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return {"peername": ("10.0.0.1", 1)}.get(name, default)

    class Named(Stream):
        pass

    async def main() -> None:
        stream = Stream(asyncio.get_running_loop())
        proto, link = stream.protocol(), Outside()
        proto.connection_made(link)
        stream.set_extra_info("transport", "outside")
        got: list[bytes] = []
        ended: list[BaseException | None] = []
        stream.attach(got.append, ended.append, lambda ok: None)
        proto.data_received(b'{"a":1}\n')
        stream.write(b"out\n")
        proto.eof_received()
        assert got == [b'{"a":1}\n'] and ended == [None] and link.written == [b"out\n"]
        assert stream.get_extra_info("transport") == "outside"
        assert stream.get_extra_info("peername") == ("10.0.0.1", 1)
        a, b = memory_pair(first=Named)
        assert type(a) is Named and type(b) is Stream

    run(main)
