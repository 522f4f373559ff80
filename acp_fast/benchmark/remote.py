"""The remote rows of the benchmark: ACP over WebSocket and Streamable HTTP, server and client
in separate processes (`acp-fast bench --remote`, or `python -m acp_fast.benchmark.remote`).

Pairs (server + client, each a public-API program doing what a user's would):

* `acp_fast`: `acp-fast serve --testy` (Testy in-process, uvicorn) and
  `acp_fast.benchmark.remote_client` (`connect_url`, reads every update's text);
* `pysdk`: the official Python SDK's ASGI app on uvicorn (`peers/pysdk/remote_server.py`)
  and its HTTP / WebSocket clients (`peers/pysdk/remote_client.py`);
* `pysdk-dropin`: the same SDK agent and clients, the agent served by
  `acp_fast.compat.acp_sdk.create_asgi_app` instead of the SDK's own app (the server's
  `--dropin`: one import changed; the agent's code is the SDK's);
* `pysdk-dropin2`: the same, with the SDK clients also on the connection drop-in
  (`peers/pysdk/dropin.py connection`): an SDK user's two programs, one line each;
* `pysdk-ceiling`: the SDK's own clients (unchanged) against `acp-fast serve --testy`, an
  agent that costs next to nothing per update: what any server reaches with the SDK's
  client, a ceiling for the `pysdk-dropin` goals (shown beside them, never a target);
* `ts`: the TypeScript SDK's server and clients (`peers/ts/remote_server.mjs`,
  `remote_client.mjs`);
* `gateway`: `acp-fast serve -- acp-fast testy` (a stdio child per connection) with the
  acp_fast client, against `direct`: the same client spawning `acp-fast testy` on stdio;
* `fleet`: the same client against a fleet of one front (`acp-fast serve --redis URL`), one
  agent host (`acp-fast host --redis URL --testy`: Testy in-process on the host) and a
  `redis-server` on a free loopback port (Redis >= 7 on `PATH`, the `fleet` extra): what the
  store between front and agent costs against the `acp_fast` pair (its stream rate, and the
  latency a round trip adds); its server CPU per message is the front's, the host's and
  Redis's together, each also in the `parts` of the JSON;
* `floor`: over `tcp`, a minimal TCP ping-pong (`tcp_floor`: 100-byte echo, no HTTP,
  WebSocket or JSON) on the same loop, what any remote round trip costs at least on this
  machine; over `ws`, a dozen-line ASGI echo app on the same ASGI server as `acp-fast serve`
  and a websockets sans-I/O client, orjson on both sides (`ws_floor`), what any ACP pair
  pays at least per WebSocket round trip on that server. Ceilings measured with a shortcut,
  shown beside the round-trip rows, never targets.

ASGI servers (`--servers`, default: the default server of `acp-fast serve` only): the rows
whose server is acp_fast's (`acp_fast`, `gateway`, the `ws` floor, the connection row)
are measured on each server named, the `server` column says which; the goals are read from
the first one named.

Workloads: `stream` (one prompt streaming N `agent_message_chunk` updates of 100 bytes),
`roundtrips` (M sequential `_test/echo` requests; the peers' own round-trip request), and
`connections` (K WebSocket connections held open at once against one `acp-fast serve
--testy`, each with a session: all must be served; the server's RSS growth per connection).

Every Python process of a row runs the same event loop (`--loops`). Every acp_fast process
(the servers, the gateway's Testy, the acp_fast client) runs this interpreter and this
`acp_fast` whatever the working directory, through the reporting launcher, and what each
reported (engine twin, loop, package) is checked after every run ([`runtime`][acp_fast.benchmark.runtime]): the
`ran` column; a row whose processes disagree is an error, never a number. Rounds are interleaved
(round 1 of every row, then round 2, …) and each figure is the median of the rounds. CPU per
message per side is measured from outside: the server's CPU over the client's run (psutil) and
the client process's whole CPU (`os.wait4`), both including start-up and the warm-up, so
they are upper bounds, labelled as such.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..jsontypes import JsonObject
from ..protocol.facts import INITIALIZE, SESSION_NEW
from ..remote.runner import DEFAULT_SERVER, SERVERS
from .launch import REPORT_ENV, read_reports
from .machine import sdk_tracing_note
from .registry import find_peers
from .runtime import Process, RuntimeMismatch, check, child_env, launch, launch_script, summary

__all__ = ["GOALS", "RemoteConfig", "RemoteResult", "main", "read_json", "run_remote", "write_chart"]

#: The peers' folder by default (see :func:`~acp_fast.benchmark.registry.find_peers`).
PEERS = find_peers()[0]


@dataclass(frozen=True)
class RemoteConfig:
    """Sizes and repetitions of a remote benchmark run."""

    rounds: int = 3
    n: int = 20_000  #: streamed updates per prompt
    m: int = 1_000  #: sequential round trips
    connections: int = 1_000  #: concurrent WebSocket connections
    warmup: int = 1_000
    loops: tuple[str, ...] = ("uvloop",)
    #: the ASGI servers of the rows served by acp_fast (the first: the goals' rows)
    servers: tuple[str, ...] = (DEFAULT_SERVER,)
    peers: Path = PEERS
    timeout: float = 300.0

    @classmethod
    def quick(cls, **kw: Any) -> RemoteConfig:
        """One short round (about a minute)."""
        return cls(**{"rounds": 1, "n": 3_000, "m": 200, "connections": 200, "warmup": 200, **kw})


@dataclass
class RemoteResult:
    """One row: `pair`/`transport`/`workload` on `loop` (and `server`), its runs and
    their median."""

    pair: str
    transport: str
    workload: str
    loop: str
    unit: str
    server: str | None = None  #: the ASGI server of an acp_fast server process (None: the row has none)
    runs: list[float] = field(default_factory=list)
    server_us: list[float] = field(default_factory=list)
    #: the fleet rows: the server CPU per message of each of its processes (front, host, redis)
    parts: dict[str, list[float]] = field(default_factory=dict)
    client_us: list[float] = field(default_factory=list)
    error: str | None = None
    ran: str | None = None  #: what the acp_fast processes reported they ran (:func:`.runtime.summary`)
    invalid: bool = False  #: its processes disagreed with the row: no figures

    @property
    def median(self) -> float | None:
        """The median of the runs (`None` when none succeeded)."""
        return statistics.median(self.runs) if self.runs else None


@dataclass(frozen=True)
class Goal:
    """A target: `row` / `reference` of one workload and transport at least `ratio`."""

    label: str
    row: tuple[str, str, str]
    reference: tuple[str, str, str] | None
    ratio: float
    #: a row whose ratio to `reference` bounds this goal (the other side's own cost): shown beside it
    ceiling: tuple[str, str, str] | None = None


GOALS = (
    Goal("WebSocket streaming vs the Python SDK", ("acp_fast", "ws", "stream"), ("pysdk", "ws", "stream"), 10.0),
    Goal("WebSocket streaming vs the TS SDK", ("acp_fast", "ws", "stream"), ("ts", "ws", "stream"), 3.0),
    Goal("HTTP (SSE) streaming vs the Python SDK", ("acp_fast", "http", "stream"), ("pysdk", "http", "stream"), 10.0),
    Goal("WebSocket round trips vs the Python SDK", ("acp_fast", "ws", "roundtrips"), ("pysdk", "ws", "roundtrips"), 2.0),
    Goal("HTTP round trips vs the Python SDK", ("acp_fast", "http", "roundtrips"), ("pysdk", "http", "roundtrips"), 2.0),
    Goal("SDK agent on the drop-in, WebSocket streaming vs the SDK's server", ("pysdk-dropin", "ws", "stream"),
         ("pysdk", "ws", "stream"), 3.0, ("pysdk-ceiling", "ws", "stream")),
    Goal("SDK agent on the drop-in, HTTP (SSE) streaming vs the SDK's server", ("pysdk-dropin", "http", "stream"),
         ("pysdk", "http", "stream"), 3.0, ("pysdk-ceiling", "http", "stream")),
    Goal("SDK agent and clients on the drop-in, WebSocket streaming vs the SDK", ("pysdk-dropin2", "ws", "stream"),
         ("pysdk", "ws", "stream"), 3.0),
    Goal("SDK agent and clients on the drop-in, HTTP (SSE) streaming vs the SDK", ("pysdk-dropin2", "http", "stream"),
         ("pysdk", "http", "stream"), 3.0),
    Goal("gateway (WebSocket) vs the direct stdio pair", ("gateway", "ws", "stream"), ("direct", "stdio", "stream"), 0.5),
    Goal("fleet (1 front + 1 host + Redis), WebSocket streaming vs single-process serve", ("fleet", "ws", "stream"),
         ("acp_fast", "ws", "stream"), 0.5),
    Goal("fleet (1 front + 1 host + Redis), HTTP (SSE) streaming vs single-process serve",
         ("fleet", "http", "stream"), ("acp_fast", "http", "stream"), 0.5),
)
#: The fleet's round trips: the latency they add to single-process serve's, at most (ms, median).
FLEET_ADDED_LATENCY_MS = 0.5
#: The connection row's bound: server RSS growth per connection, KiB.
RSS_PER_CONNECTION_KIB = 200.0


# -- processes ---------------------------------------------------------------------------------


class _Server:
    """A server process; its port is read from its first line (stdout or stderr) that has
    one (and `ready`, when given; `port`: known already, wait for `ready` only)."""

    def __init__(self, argv: list[str], *, port_on_stderr: bool, env: dict[str, str] | None = None,
                 ready: str | None = None, port: int | None = None) -> None:
        # Output goes to files, never to a pipe nobody drains (a full pipe would stall the server).
        self.out = tempfile.TemporaryFile("w+")
        self.err = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(argv, stdout=self.out, stderr=self.err, start_new_session=True, text=True,
                                     env=env)
        watched = self.err if port_on_stderr else self.out
        deadline = time.monotonic() + 60
        found = None
        while found is None and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.05)
            watched.seek(0)
            for line in watched.read().splitlines():
                found = re.search(r"(?::|^)(\d{2,5})(?:/|\s*$)", line.strip() if port is None else f":{port}")
                if found and (ready is None or ready in line):
                    break
                found = None
        if not found:
            self.stop()
            self.err.seek(0)
            raise RuntimeError(f"server {argv[:3]} did not print its port: {self.err.read()[-300:]!r}")
        self.port = int(found.group(1))
        import psutil

        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        import psutil

        total = 0.0
        for p in [self.ps, *self.ps.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
            except psutil.Error:
                pass
        return total

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.out.close()
        self.err.close()


def _client(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[JsonObject, float]:
    """Run a client; its JSON line and the process's CPU seconds (`os.wait4`)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                out.seek(0)
                err.seek(0)
                return _last_json(out.read(), err.read()), usage.ru_utime + usage.ru_stime
            time.sleep(0.01)
        proc.kill()
        proc.wait()
    raise RuntimeError(f"client {argv[:3]} timed out after {timeout:.0f} s")


def _last_json(out: str, err: str) -> JsonObject:
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            result: JsonObject = json.loads(line)
            return result
    raise RuntimeError(f"the client printed no result: {err.strip()[-300:]!r}")


def _testy(loop: str) -> tuple[str, ...]:
    return launch("agent", "acp_fast.cli.main", "testy", "--versions", "1", "--loop", loop)


def _server_argv(pair: str, loop: str, cfg: RemoteConfig, transport: str = "ws",
                 server: str = DEFAULT_SERVER) -> tuple[list[str], bool]:
    if pair == "acp_fast":
        return [*launch("server", "acp_fast.cli.main", "serve", "--testy", "--versions", "1", "--port", "0",
                        "--loop", loop, "--server", server)], True
    if pair == "gateway":
        return [*launch("server", "acp_fast.cli.main", "serve", "--port", "0", "--loop", loop, "--server", server,
                        "--", *_testy(loop))], True
    if pair == "fleet":
        raise ValueError("the fleet's processes are started by _Fleet")
    if pair == "pysdk-ceiling":
        return _server_argv("acp_fast", loop, cfg, transport, server)
    if pair in ("pysdk", "pysdk-dropin", "pysdk-dropin2"):
        dropin = [] if pair == "pysdk" else ["--dropin"]
        return [sys.executable, str(cfg.peers / "pysdk" / "remote_server.py"), "--port", "0", "--loop", loop,
                *dropin], False
    if pair == "ts":
        return ["node", str(cfg.peers / "ts" / "remote_server.mjs"), "--port", "0"], False
    if pair == "floor":
        asgi = ["--server", server] if transport == "ws" else []
        return [*launch("server", _FLOORS[transport], "serve", "--loop", loop, *asgi)], False
    raise ValueError(pair)


#: The floor rows' module per transport (server and client in one module).
_FLOORS = {"tcp": "acp_fast.benchmark.tcp_floor", "ws": "acp_fast.benchmark.ws_floor"}


def _client_argv(pair: str, url: str, workload: str, n: int, loop: str, cfg: RemoteConfig) -> list[str]:
    if pair in ("acp_fast", "gateway", "direct", "fleet"):
        return [*launch("client", "acp_fast.benchmark.remote_client", url, workload, str(n),
                        "--warmup", str(cfg.warmup), "--loop", loop)]
    if pair in ("pysdk", "pysdk-dropin", "pysdk-ceiling", "pysdk-dropin2"):
        sdk = cfg.peers / "pysdk"
        args = (url, workload, str(n), "--timeout", str(cfg.timeout), "--loop", loop)
        if pair == "pysdk-dropin2":  # reported and checked as an acp_fast process
            return [*launch_script("client", str(sdk / "dropin.py"), "connection", str(sdk / "remote_client.py"),
                                   *args)]
        return [sys.executable, str(sdk / "remote_client.py"), *args]
    if pair == "ts":
        return ["node", str(cfg.peers / "ts" / "remote_client.mjs"), url, workload, str(n), "--timeout", str(cfg.timeout)]
    if pair == "floor":
        return [*launch("client", _FLOORS[url.split(":", 1)[0]], url, workload, str(n), "--warmup",
                        str(min(cfg.warmup, 200)), "--loop", loop)]
    raise ValueError(pair)


def _rate(result: JsonObject, workload: str, n: int) -> float:
    if not result.get("ok", False):
        raise RuntimeError(str(result.get("error") or result))
    if workload == "stream":
        got = result.get("updatesReceived", result.get("n"))
        if got != n:
            raise RuntimeError(f"{got} updates received of {n}")
        return float(result.get("rate") or result.get("updatesPerSec") or n / float(result["seconds"]))
    return float(result.get("rate") or result.get("roundTripsPerSec") or n / float(result["seconds"]))


ROWS: tuple[tuple[str, str, str], ...] = (
    ("acp_fast", "ws", "stream"), ("pysdk", "ws", "stream"), ("ts", "ws", "stream"),
    ("acp_fast", "http", "stream"), ("pysdk", "http", "stream"), ("ts", "http", "stream"),
    ("pysdk-dropin", "ws", "stream"), ("pysdk-dropin", "http", "stream"),
    ("pysdk-dropin2", "ws", "stream"), ("pysdk-dropin2", "http", "stream"),
    ("pysdk-ceiling", "ws", "stream"), ("pysdk-ceiling", "http", "stream"),
    ("acp_fast", "ws", "roundtrips"), ("pysdk", "ws", "roundtrips"),
    ("acp_fast", "http", "roundtrips"), ("pysdk", "http", "roundtrips"), ("floor", "ws", "roundtrips"),
    ("floor", "tcp", "roundtrips"),
    ("gateway", "ws", "stream"), ("direct", "stdio", "stream"),
    ("fleet", "ws", "stream"), ("fleet", "http", "stream"), ("fleet", "ws", "roundtrips"),
    ("fleet", "http", "roundtrips"),
)


#: The rows served by an ASGI server of acp_fast's: measured on each server of ``--servers``.
def _on_asgi(pair: str, transport: str) -> bool:
    return pair in ("acp_fast", "gateway", "fleet") or (pair == "floor" and transport == "ws")


#: The acp_fast processes of each pair's rows (the connection row: the acp_fast server), checked after
#: every run; the SDK rows have none (their processes report nothing of acp_fast).
PROCESSES: dict[str, tuple[Process, ...]] = {
    "acp_fast": (Process("client"), Process("server")),
    "gateway": (Process("client"), Process("server"), Process("agent")),
    "fleet": (Process("client"), Process("server"), Process("agent")),
    "direct": (Process("client"), Process("agent")),
    "floor": (Process("client"), Process("server")),
    "pysdk-ceiling": (Process("server"),),
    "pysdk-dropin2": (Process("client"),),
}


def _env(report: str) -> dict[str, str]:
    return {**os.environ, **child_env(), REPORT_ENV: report}


def _checked(row: RemoteResult, report: str, processes: Sequence[Process], result: JsonObject | None) -> None:
    """Check what the processes of one run reported ([`runtime.check`][acp_fast.benchmark.runtime.check]): sets `row.ran`,
    or raises [`RuntimeMismatch`][acp_fast.benchmark.runtime.RuntimeMismatch]."""
    procs = check(read_reports(report), processes, engine=None, loop=row.loop, result=result)
    row.ran = summary(procs) if processes else None


def _invalidate(row: RemoteResult, exc: RuntimeMismatch) -> None:
    row.error = f"the processes disagree with the row: {exc}"[:600]
    row.ran = summary(exc.processes) if exc.processes else "?"
    row.invalid = True
    row.runs.clear()
    row.server_us.clear()
    row.client_us.clear()


def _one(pair: str, transport: str, workload: str, loop: str, cfg: RemoteConfig, row: RemoteResult) -> None:
    n = cfg.n if workload == "stream" else cfg.m
    server: _Server | None = None
    fleet: _Fleet | None = None
    fd, report = tempfile.mkstemp(prefix="acp-fast-bench-", suffix=".jsonl")
    os.close(fd)
    env = _env(report)
    try:
        if pair == "direct":
            target = shlex.join(_testy(loop))
        elif pair == "fleet":
            fleet = _Fleet(loop, row.server or DEFAULT_SERVER, env)
            server = fleet.front
            assert server is not None
            target = f"{transport}://127.0.0.1:{server.port}/acp"
        else:
            argv, on_stderr = _server_argv(pair, loop, cfg, transport, row.server or DEFAULT_SERVER)
            server = _Server(argv, port_on_stderr=on_stderr, env=env)
            target = f"{transport}://127.0.0.1:{server.port}/acp"
        cpu0 = server.cpu() if server else 0.0
        parts0 = fleet.cpu() if fleet else {}
        result, client_cpu = _client(_client_argv(pair, target, workload, n, loop, cfg), cfg.timeout, env)
        server_cpu = (server.cpu() - cpu0) if server else None
        parts = {k: v - parts0[k] for k, v in fleet.cpu().items()} if fleet else {}
        _checked(row, report, PROCESSES.get(pair, ()), result)
        row.runs.append(round(_rate(result, workload, n), 1))
        row.client_us.append(round(client_cpu / n * 1e6, 2))
        if parts:
            server_cpu = sum(parts.values())
            for name, cpu in parts.items():
                row.parts.setdefault(name, []).append(round(cpu / n * 1e6, 2))
        if server_cpu is not None:
            row.server_us.append(round(server_cpu / n * 1e6, 2))
    except RuntimeMismatch as exc:
        _invalidate(row, exc)
    except Exception as exc:  # a failed run is reported in its row, the others go on
        row.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        if fleet is not None:
            fleet.stop()
        elif server is not None:
            server.stop()
        os.unlink(report)


class _Fleet:
    """The fleet rows' processes: a `redis-server` on a free loopback port, one agent host
    (Testy in-process, reporting as the row's agent) and one front (the row's server)."""

    def __init__(self, loop: str, server: str, env: dict[str, str]) -> None:
        import shutil
        import socket

        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server (Redis >= 7) is not on PATH")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        url = f"redis://127.0.0.1:{port}/0"
        self.redis = _Server([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                              "--daemonize", "no", "--loglevel", "notice"], port_on_stderr=False,
                             ready="Ready to accept", port=port)
        self.host: _Server | None = None
        self.front: _Server | None = None
        try:
            self.host = _Server([*launch("agent", "acp_fast.cli.main", "host", "--redis", url, "--testy",
                                         "--versions", "1", "--slots", "4", "--loop", loop)],
                                port_on_stderr=True, env=env, ready="registered at")
            self.front = _Server([*launch("server", "acp_fast.cli.main", "serve", "--redis", url, "--port", "0",
                                          "--loop", loop, "--server", server)], port_on_stderr=True, env=env)
        except BaseException:
            self.stop()
            raise

    def cpu(self) -> dict[str, float]:
        """The CPU seconds of the front, the host and redis-server so far."""
        assert self.front is not None and self.host is not None
        return {"front": self.front.cpu(), "host": self.host.cpu(), "redis": self.redis.cpu()}

    def stop(self) -> None:
        for proc in (self.front, self.host, self.redis):
            if proc is not None:
                proc.stop()


def _connections(loop: str, cfg: RemoteConfig, row: RemoteResult) -> None:
    fd, report = tempfile.mkstemp(prefix="acp-fast-bench-", suffix=".jsonl")
    os.close(fd)
    server = _Server(_server_argv("acp_fast", loop, cfg, server=row.server or DEFAULT_SERVER)[0],
                     port_on_stderr=True, env=_env(report))
    try:
        asyncio.run(_hold_and_measure(server, 20))  # warm: imports, first allocations
        before = server.rss()
        served = asyncio.run(_hold_and_measure(server, cfg.connections))
        growth_kib = (served[1] - before) / max(served[0], 1) / 1024
        if served[0] != cfg.connections:
            row.error = f"{served[0]} of {cfg.connections} connections served"
        _checked(row, report, (Process("server"),), None)
        row.runs.append(round(growth_kib, 1))
    except RuntimeMismatch as exc:
        _invalidate(row, exc)
    except Exception as exc:
        row.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        server.stop()
        os.unlink(report)


async def _hold_and_measure(server: _Server, k: int) -> tuple[int, int]:
    served = await _hold_connections_keep(server.port, k)
    rss = server.rss()
    for ws in served:
        await ws.close()
    return len(served), rss


async def _hold_connections_keep(port: int, k: int) -> list[Any]:
    import websockets

    init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": INITIALIZE,
                       "params": {"protocolVersion": 1, "clientCapabilities": {}}})
    new = json.dumps({"jsonrpc": "2.0", "id": 1, "method": SESSION_NEW, "params": {"cwd": "/", "mcpServers": []}})
    held: list[Any] = []
    gate = asyncio.Semaphore(64)

    async def one() -> None:
        async with gate:
            ws = await websockets.connect(f"ws://127.0.0.1:{port}/acp", open_timeout=60, max_queue=4)
            await ws.send(init)
            await ws.recv()
            await ws.send(new)
            if "sessionId" in str(await ws.recv()):
                held.append(ws)

    await asyncio.gather(*[one() for _ in range(k)], return_exceptions=True)
    return held


def run_remote(cfg: RemoteConfig, *, rows: Sequence[tuple[str, str, str]] = ROWS,
               progress: Any = None) -> list[RemoteResult]:
    """Run every row on every loop (the rows served by acp_fast on every server of
    `cfg.servers`), rounds interleaved; returns the rows."""
    for name in cfg.servers:
        if name not in SERVERS:
            raise ValueError(f"unknown ASGI server {name!r}: one of {', '.join(SERVERS)}")
    results: dict[tuple[str, str, str, str, str | None], RemoteResult] = {}
    for loop in cfg.loops:
        for pair, transport, workload in rows:
            unit = "updates/s" if workload == "stream" else "round trips/s"
            servers: tuple[str | None, ...] = cfg.servers if _on_asgi(pair, transport) else (None,)
            for server in servers:
                results[(pair, transport, workload, loop, server)] = RemoteResult(
                    pair, transport, workload, loop, unit, server)
        for name in cfg.servers:
            results[("acp_fast", "ws", "connections", loop, name)] = RemoteResult(
                "acp_fast", "ws", "connections", loop, "KiB RSS per connection", name)
    for r in range(cfg.rounds):
        for key, row in results.items():
            if row.invalid:
                continue  # its processes ran something else: no further rounds
            if progress is not None:
                on = f", {key[4]}" if key[4] else ""
                progress(f"round {r + 1}/{cfg.rounds}: {key[0]} {key[1]} {key[2]} ({key[3]}{on})")
            if row.workload == "connections":
                _connections(row.loop, cfg, row)
            else:
                _one(row.pair, row.transport, row.workload, row.loop, cfg, row)
    return list(results.values())


def verdicts(rows: Sequence[RemoteResult], cfg: RemoteConfig) -> list[JsonObject]:
    """Each goal on each loop: the measured ratio (or value), whether it is met, and whether its
    rows ran at all (`ran`: a goal of pairs left out of the run is neither met nor missed; the
    rows of acp_fast's servers: those on the first server of `cfg.servers`)."""
    first = cfg.servers[0] if cfg.servers else DEFAULT_SERVER
    by = {(r.pair, r.transport, r.workload, r.loop): r for r in rows if r.server in (None, first)}
    out: list[JsonObject] = []
    for loop in cfg.loops:
        for g in GOALS:
            a = by.get((*g.row, loop))
            b = by.get((*g.reference, loop)) if g.reference else None
            value = ceiling = None
            if a and b and a.median and b.median:
                value = a.median / b.median
            top = by.get((*g.ceiling, loop)) if g.ceiling else None
            if top and b and top.median and b.median:
                ceiling = top.median / b.median
            out.append({"goal": g.label, "loop": loop, "target": f">= {g.ratio:g}x", "measured": value,
                        "met": value is not None and value >= g.ratio, "ceiling": ceiling,
                        "ran": a is not None and (b is not None or not g.reference)})
        for transport in ("ws", "http"):
            fleet = by.get(("fleet", transport, "roundtrips", loop))
            single = by.get(("acp_fast", transport, "roundtrips", loop))
            added = None
            if fleet and single and fleet.median and single.median:
                added = (1 / fleet.median - 1 / single.median) * 1000
            out.append({"goal": f"fleet, {'WebSocket' if transport == 'ws' else 'HTTP'} round trips: latency added "
                                "to single-process serve (ms)", "loop": loop,
                        "target": f"<= {FLEET_ADDED_LATENCY_MS:g} ms", "measured": added,
                        "met": added is not None and added <= FLEET_ADDED_LATENCY_MS, "ceiling": None,
                        "ran": fleet is not None and single is not None})
        c = by.get(("acp_fast", "ws", "connections", loop))
        value = c.median if c else None
        out.append({"goal": f"{cfg.connections} WebSocket connections, server RSS per connection", "loop": loop,
                    "target": f"<= {RSS_PER_CONNECTION_KIB:g} KiB, all served",
                    "measured": value, "met": value is not None and value <= RSS_PER_CONNECTION_KIB
                    and c is not None and c.error is None, "ran": c is not None})
    return out


def render(rows: Sequence[RemoteResult], cfg: RemoteConfig) -> str:
    """The rows and the goals as two plain-text tables."""
    from tabulate import tabulate

    table = [[r.pair, r.transport, r.workload, r.loop, r.server or "", r.ran or "—",
              "ERROR" if r.invalid else "" if r.median is None else f"{r.median:,.1f}", r.unit,
              " / ".join(f"{v:,.0f}" for v in r.runs),
              "" if not r.server_us else f"{statistics.median(r.server_us):.1f}",
              "" if not r.client_us else f"{statistics.median(r.client_us):.1f}",
              r.error or ""] for r in rows]
    head = ["pair", "transport", "workload", "loop", "server", "ran†", "median", "unit", "runs", "server µs/msg*",
            "client µs/msg*", "error"]
    parts = [[r.pair, r.transport, r.workload, r.loop, r.server or "",
              *(f"{statistics.median(r.parts[k]):.1f}" if r.parts.get(k) else "" for k in ("front", "host", "redis"))]
             for r in rows if r.parts]
    goals = [[v["goal"], v["loop"], v["target"], "" if v["measured"] is None else f"{v['measured']:.2f}",
              "" if v.get("ceiling") is None else f"{v['ceiling']:.2f}",
              "PASS" if v["met"] else "MISS" if v.get("ran", True) else "not run"] for v in verdicts(rows, cfg)]
    return (tabulate(table, head, disable_numparse=True) + "\n\n* CPU per message of the whole process, "
            "start-up and warm-up included (an upper bound)\n† the engine twin each acp_fast process of the row "
            "reported itself (client, server, agent), each on the row's loop and this acp_fast, checked after every "
            "run (— : SDK processes only)\n\n"
            + (tabulate(parts, ["pair", "transport", "workload", "loop", "server", "front µs/msg§", "host µs/msg§",
                                "redis µs/msg§"], disable_numparse=True)
               + "\n\n§ CPU per message of each fleet process over the client's run (warm-up included)\n\n"
               if parts else "")
            + tabulate(goals, ["goal", "loop", "target", "measured", "ceiling‡", ""], disable_numparse=True)
            + "\n\n‡ the same reference against the ceiling row (`pysdk-ceiling`: the SDK's client against an agent "
            "that costs next to nothing per update): no server reaches more with that client on this machine")


def read_json(path: str | os.PathLike[str]) -> tuple[list[RemoteResult], RemoteConfig, float | None]:
    """The rows, config and load at start of the `--json` a remote run wrote.

    Raises:
        BenchJSONError: `path` is not such a file.
    """
    from .tables import BenchJSONError, load_json

    what = "the JSON of acp-fast bench --remote"
    doc = load_json(path, what, ("config", "rows", "verdicts"))
    try:
        names = {f.name for f in fields(RemoteResult)}
        rows = [RemoteResult(**{k: v for k, v in r.items() if k in names}) for r in doc["rows"]]
        conf = {f.name: doc["config"][f.name] for f in fields(RemoteConfig) if f.name in doc["config"]}
        conf["loops"] = tuple(conf.get("loops", ()))
        conf["peers"] = Path(conf.get("peers", PEERS))
        load = doc.get("load")
        return rows, RemoteConfig(**conf), float(load) if isinstance(load, (int, float)) else None
    except (TypeError, AttributeError, KeyError) as exc:
        raise BenchJSONError(f"{path}: not {what}: {exc}") from None


def write_chart(path: str | os.PathLike[str], rows: Sequence[RemoteResult], cfg: RemoteConfig,
                load: float | None) -> None:
    """The rows' chart ([`acp_fast.benchmark.chart.write_remote_png`][acp_fast.benchmark.chart.write_remote_png]), the RSS goal drawn.

    Raises:
        MissingMatplotlib: matplotlib is not installed.
    """
    from .chart import write_remote_png

    title = (f"acp-fast bench --remote (medians of {cfg.rounds}"
             + ("" if load is None else f"; load {load:.2f}") + ")")
    write_remote_png(path, [asdict(r) | {"median": r.median} for r in rows], title, rss_goal=RSS_PER_CONNECTION_KIB)


def main(argv: list[str] | None = None) -> int:
    """`python -m acp_fast.benchmark.remote [--quick] [--rounds R] [--loops L,L] [--servers S,S]
    [--pairs P,P] [--json PATH] [--png PATH]`."""
    parser = argparse.ArgumentParser(prog="python -m acp_fast.benchmark.remote", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short round")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--n", type=int, help="streamed updates per prompt (default 20,000)")
    parser.add_argument("--m", type=int, help="sequential round trips (default 1,000)")
    parser.add_argument("--connections", type=int, help="concurrent WebSocket connections (default 1,000)")
    parser.add_argument("--loops", default="uvloop", help="comma-separated: asyncio,uvloop (default uvloop)")
    parser.add_argument("--servers", default=DEFAULT_SERVER,
                        help=f"comma-separated ASGI servers of acp_fast's rows, the first the goals' "
                             f"({', '.join(SERVERS)}; default {DEFAULT_SERVER})")
    parser.add_argument("--pairs", help="comma-separated: only these pairs' rows (e.g. acp_fast,floor; default all)")
    parser.add_argument("--peers", type=Path, default=PEERS, help="the peers/ folder (with peers/ts/node_modules)")
    parser.add_argument("--json", type=Path, help="write the rows and verdicts as JSON")
    parser.add_argument("--png", type=Path, help="draw the rows' chart (needs matplotlib)")
    args = parser.parse_args(argv)
    kw: dict[str, Any] = {"loops": tuple(x for x in args.loops.split(",") if x), "peers": args.peers,
                          "servers": tuple(x for x in args.servers.split(",") if x)}
    for name in ("rounds", "n", "m", "connections"):
        if getattr(args, name) is not None:
            kw[name] = getattr(args, name)
    cfg = RemoteConfig.quick(**kw) if args.quick else RemoteConfig(**kw)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    pairs = set(args.pairs.split(",")) if args.pairs else None
    only = ROWS if pairs is None else tuple(r for r in ROWS if r[0] in pairs)
    rows = run_remote(cfg, rows=only, progress=lambda s: print(s, file=sys.stderr, flush=True))
    tracing = sdk_tracing_note()
    print(f"remote rows: {cfg.rounds} round(s), N={cfg.n}, M={cfg.m}, K={cfg.connections}, "
          f"servers {', '.join(cfg.servers)}, load at start {load}")
    print(render(rows, cfg))
    if tracing:
        print(f"WARNING: {tracing}")
    if args.json:
        args.json.write_text(json.dumps({"config": {**asdict(cfg), "peers": "peers"}, "load": load,
                                         "sdk_tracing": tracing,
                                         "rows": [asdict(r) | {"median": r.median} for r in rows],
                                         "verdicts": verdicts(rows, cfg)}, indent=1))
    if args.png:
        from .chart import MissingMatplotlib

        try:
            write_chart(args.png, rows, cfg, load)
        except MissingMatplotlib as exc:
            print(f"chart skipped: {exc}", file=sys.stderr)
            return 1
        print(f"chart written to {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
