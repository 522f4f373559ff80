"""Shared tools of the fault-injection suite (not a test module).

* :class:`RawChild` runs an agent as a child process on raw pipes: the test decides byte by
  byte what is written, whether stdout is read at all, and reads the child's memory from
  ``/proc/PID/status`` (``VmHWM`` is the peak resident set, ``VmRSS`` the current one);
* :func:`count_ids` tallies the responses on the raw wire per id (batch replies included).

Nothing here measures speed: every wait has a generous ceiling that only turns a hang into a
failure.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from package_path import pythonpath

HELPERS = Path(__file__).resolve().parent
REPO = HELPERS.parent.parent
FAULT_AGENT = HELPERS / "fault_agent.py"
HANG = 30.0  # seconds; only turns a hang into a failure


def child_env(engine_tag: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath()
    env["ACP_FAST_TEST_ENGINE"] = engine_tag
    env.update(extra)
    return env


def cmd_testy(engine_tag: str, versions: str = "1,2") -> list[str]:
    return [sys.executable, "-m", "acp_fast.cli.main", "testy", "--engine", engine_tag, "--versions", versions]


def agent_argv() -> list[str]:
    return [sys.executable, str(FAULT_AGENT)]


def proc_status(pid: int) -> dict[str, int]:
    """``{"hwm": VmHWM, "rss": VmRSS}`` in KiB (empty once the process is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    key, value = line.split(":", 1)
                    out["hwm" if key == "VmHWM" else "rss"] = int(value.split()[0])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def req(rid: Any, method: str, params: Any = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def note(method: str, params: Any = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def responses(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """Every response object in ``messages``, batch replies flattened."""
    out = []
    for m in messages:
        for item in (m if isinstance(m, list) else [m]):
            if isinstance(item, dict) and "method" not in item and ("result" in item or "error" in item):
                out.append(item)
    return out


def count_ids(messages: Iterable[Any]) -> Counter[Any]:
    """How many responses each id got on the wire (``None`` for id-less error replies)."""
    return Counter(json.dumps(r.get("id")) for r in responses(messages))


def key(rid: Any) -> str:
    """The :func:`count_ids` key of ``rid``."""
    return json.dumps(rid)


class RawChild:
    """An agent child process on raw pipes, read (or not) by background threads."""

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, cwd=str(REPO), bufsize=0)
        self.pid = self.proc.pid
        self.lines: list[Any] = []  # parsed stdout lines (raw bytes when not JSON)
        self.out_bytes = 0
        self.stderr: list[str] = []
        self._buf = b""
        self._cond = threading.Condition()
        self._reading = threading.Event()
        self._eof = threading.Event()
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.peak_kib = 0  # highest VmHWM sampled (the kernel keeps the true peak anyway)

    # -- stdout -----------------------------------------------------------------------

    def start_reading(self) -> None:
        self._reading.set()

    def stop_reading(self) -> None:
        """Stop reading stdout (after at most the one read already waiting for data)."""
        self._reading.clear()

    def _read_stdout(self) -> None:
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while True:
            self._reading.wait()
            try:
                data = os.read(fd, 1 << 20)
            except OSError:
                data = b""
            if not data:
                break
            self.out_bytes += len(data)
            *lines, self._buf = (self._buf + data).split(b"\n")
            parsed = []
            for line in lines:
                if line.strip():
                    try:
                        parsed.append(json.loads(line))
                    except ValueError:
                        parsed.append(line)
            with self._cond:
                self.lines.extend(parsed)
                self._cond.notify_all()
        with self._cond:
            if self._buf:
                self.lines.append(self._buf)  # an unterminated last line, kept raw
            self._eof.set()
            self._cond.notify_all()

    def _read_stderr(self) -> None:
        fd = self.proc.stderr.fileno()  # type: ignore[union-attr]
        buf = b""
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            *lines, buf = (buf + data).split(b"\n")
            with self._cond:
                self.stderr.extend(line.decode("utf-8", "replace") for line in lines)
                self._cond.notify_all()

    def clear_lines(self) -> None:
        """Forget the stdout lines read so far (long runs)."""
        with self._cond:
            self.lines.clear()

    def wait_for(self, pred: Callable[[], bool], timeout: float = HANG, what: str = "condition") -> None:
        """Wait until ``pred()`` (checked under the lock on every line); AssertionError on hang."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"hung waiting for {what}; stderr tail: {self.stderr[-5:]}")
                self._cond.wait(min(left, 0.2))

    def response(self, rid: Any, timeout: float = HANG) -> dict[str, Any]:
        """The (first) response to ``rid``; starts reading if not yet."""
        self.start_reading()
        found: list[dict[str, Any]] = []

        def seen() -> bool:
            found[:] = [r for r in responses(self.lines) if r.get("id") == rid]
            return bool(found)

        self.wait_for(seen, timeout, f"the response to {rid!r}")
        return found[0]

    def wait_eof(self, timeout: float = HANG) -> None:
        self.start_reading()
        if not self._eof.wait(timeout):
            raise AssertionError(f"the child never closed its stdout; stderr tail: {self.stderr[-5:]}")

    def stderr_has(self, prefix: str) -> bool:
        return any(line.startswith(prefix) for line in self.stderr)

    # -- stdin ------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """A blocking write of ``data`` (blocks while the child does not read)."""
        fd = self.proc.stdin.fileno()  # type: ignore[union-attr]
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def send_in_background(self, chunks: Iterable[bytes]) -> Flood:
        """Write ``chunks`` (each made of whole lines) from a thread; see :class:`Flood`."""
        return Flood(self, chunks)

    def close_stdin(self) -> None:
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass

    # -- memory and lifetime ----------------------------------------------------------

    def status(self) -> dict[str, int]:
        st = proc_status(self.pid)
        self.peak_kib = max(self.peak_kib, st.get("hwm", 0))
        return st

    def kill(self, sig: int = signal.SIGKILL) -> None:
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        """Kill (if still running) and reap; never leaves the process behind."""
        if self.proc.poll() is None:
            self.kill()
        try:
            self.proc.wait(HANG)
        finally:
            for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                try:
                    f.close()  # type: ignore[union-attr]
                except OSError:
                    pass

    def __enter__(self) -> RawChild:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Flood:
    """Writes chunks of whole lines to a child's stdin from a thread, until told to stop.

    Stopping takes effect between chunks, so the bytes written are always whole lines
    (``written_chunks`` of them); a write blocked because the child stopped reading stays
    blocked until the child reads again or dies.
    """

    def __init__(self, child: RawChild, chunks: Iterable[bytes]) -> None:
        self.child = child
        self.written_chunks = 0
        self.written_bytes = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._chunks = iter(chunks)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            for chunk in self._chunks:
                if self._stop.is_set():
                    break
                self.child.send(chunk)
                self.written_chunks += 1
                self.written_bytes += len(chunk)
        except OSError as exc:  # the child died: a broken pipe is the expected end
            self.error = exc
        finally:
            self._done.set()

    def stop(self) -> None:
        self._stop.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)
