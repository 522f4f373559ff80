"""The remote rows of the benchmark (``acp-fast bench --remote``): the goals are computed from
the rows' medians, a failed run is an error in its row (never a number), and a tiny real run of
the acp_fast pair over WebSocket and HTTP and of the connection row produces its figures."""

from __future__ import annotations

import asyncio
import json

import pytest

from acp_fast.benchmark import remote
from acp_fast.benchmark.remote import RemoteConfig, RemoteResult, render, run_remote, verdicts


def _row(pair: str, transport: str, workload: str, runs: list[float]) -> RemoteResult:
    return RemoteResult(pair, transport, workload, "uvloop", "updates/s", runs=runs)


def test_verdicts_from_medians() -> None:
    cfg = RemoteConfig(loops=("uvloop",), connections=10)
    rows = [_row("acp_fast", "ws", "stream", [100.0, 300.0, 200.0]), _row("pysdk", "ws", "stream", [10.0, 30.0, 20.0]),
            _row("ts", "ws", "stream", [100.0]), _row("gateway", "ws", "stream", [40.0]),
            _row("direct", "stdio", "stream", [100.0]),
            RemoteResult("acp_fast", "ws", "connections", "uvloop", "KiB", runs=[150.0])]
    got = {v["goal"]: v for v in verdicts(rows, cfg)}
    assert got["WebSocket streaming vs the Python SDK"]["measured"] == pytest.approx(10.0)
    assert got["WebSocket streaming vs the Python SDK"]["met"]
    assert got["WebSocket streaming vs the TS SDK"]["measured"] == pytest.approx(2.0)
    assert not got["WebSocket streaming vs the TS SDK"]["met"]
    assert not got["gateway (WebSocket) vs the direct stdio pair"]["met"]
    assert got["HTTP round trips vs the Python SDK"]["measured"] is None  # no rows: no number
    assert got["10 WebSocket connections, server RSS per connection"]["met"]
    text = render(rows, cfg)
    assert "MISS" in text and "PASS" in text


def test_the_drop_in_goals_show_their_ceiling() -> None:
    cfg = RemoteConfig(loops=("uvloop",), connections=10)
    rows = [_row("pysdk", "http", "stream", [10.0]), _row("pysdk-dropin", "http", "stream", [25.0]),
            _row("pysdk-ceiling", "http", "stream", [28.0])]
    got = {v["goal"]: v for v in verdicts(rows, cfg)}
    sse = got["SDK agent on the drop-in, HTTP (SSE) streaming vs the SDK's server"]
    assert sse["measured"] == pytest.approx(2.5) and not sse["met"]
    assert sse["ceiling"] == pytest.approx(2.8)
    assert got["SDK agent on the drop-in, WebSocket streaming vs the SDK's server"]["ceiling"] is None  # no rows
    assert got["WebSocket streaming vs the Python SDK"]["ceiling"] is None  # no ceiling row named
    assert "2.80" in render(rows, cfg)


def test_a_goal_whose_rows_did_not_run_is_not_a_miss() -> None:
    """A run limited to some pairs (``--pairs``) judges only the goals of those pairs; the
    others say "not run", never MISS; a goal whose rows ran and fell short is a MISS."""
    cfg = RemoteConfig(loops=("uvloop",), connections=10)
    rows = [_row("pysdk", "ws", "stream", [10.0]), _row("pysdk-dropin", "ws", "stream", [20.0])]
    got = {v["goal"]: v for v in verdicts(rows, cfg)}
    assert got["SDK agent on the drop-in, WebSocket streaming vs the SDK's server"]["ran"]
    assert not got["WebSocket streaming vs the Python SDK"]["ran"]  # acp_fast's row absent
    assert not got["10 WebSocket connections, server RSS per connection"]["ran"]
    lines = {line.split("  ")[0]: line for line in render(rows, cfg).splitlines()}
    assert lines["SDK agent on the drop-in, WebSocket streaming vs the SDK's server"].endswith("MISS")
    assert lines["WebSocket streaming vs the Python SDK"].endswith("not run")
    assert lines["10 WebSocket connections, server RSS per connection"].endswith("not run")


def test_goals_read_the_first_servers_rows() -> None:
    """With several ASGI servers the rows served by acp_fast exist once per server (the
    ``server`` column says which) and the goals are read from the first server's rows; the
    SDK rows have no server. An unknown server name is refused before anything runs."""
    cfg = RemoteConfig(loops=("uvloop",), servers=("granian", "uvicorn"))

    def on(server: str | None, pair: str, runs: list[float]) -> RemoteResult:
        return RemoteResult(pair, "ws", "stream", "uvloop", "updates/s", server=server, runs=runs)

    rows = [on("uvicorn", "acp_fast", [300.0]), on("granian", "acp_fast", [150.0]), on(None, "pysdk", [10.0])]
    got = {v["goal"]: v for v in verdicts(rows, cfg)}
    assert got["WebSocket streaming vs the Python SDK"]["measured"] == pytest.approx(15.0)
    text = render(rows, cfg)
    assert "granian" in text and "uvicorn" in text
    with pytest.raises(ValueError, match="unknown ASGI server"):
        run_remote(RemoteConfig(servers=("nginx",)), rows=[])


def test_a_failed_run_is_an_error_not_a_number() -> None:
    with pytest.raises(RuntimeError):
        remote._rate({"ok": True, "updatesReceived": 999, "seconds": 1.0}, "stream", 1000)
    with pytest.raises(RuntimeError):
        remote._rate({"ok": False, "error": "boom"}, "stream", 10)
    assert remote._rate({"ok": True, "n": 10, "seconds": 2.0}, "stream", 10) == 5.0


def test_tiny_real_run_of_the_acp_fast_rows() -> None:
    cfg = RemoteConfig(rounds=1, n=200, m=20, connections=20, warmup=10, loops=("asyncio",), timeout=60.0)
    rows = run_remote(cfg, rows=[("acp_fast", "ws", "stream"), ("acp_fast", "http", "roundtrips"),
                                 ("direct", "stdio", "stream"), ("floor", "tcp", "roundtrips"),
                                 ("floor", "ws", "roundtrips")])
    by = {(r.pair, r.transport, r.workload): r for r in rows}
    for key in (("acp_fast", "ws", "stream"), ("acp_fast", "http", "roundtrips"), ("direct", "stdio", "stream"),
                ("acp_fast", "ws", "connections"), ("floor", "tcp", "roundtrips"), ("floor", "ws", "roundtrips")):
        row = by[key]
        assert row.error is None, (key, row.error)
        assert len(row.runs) == 1 and row.runs[0] > 0
    for floor in ("tcp", "ws"):
        assert by[("floor", floor, "roundtrips")].ran is not None  # its two processes reported their loop



def test_the_websocket_floor_app_answers_requests_only() -> None:
    """The ASGI echo app of the ``floor`` ``ws`` row: a request gets its params back as the
    result, a notification and a binary frame get nothing, any HTTP request a 404."""
    from acp_fast.benchmark.ws_floor import echo_app

    incoming = [{"type": "websocket.connect"},
                {"type": "websocket.receive", "text": '{"jsonrpc":"2.0","method":"n","params":{}}'},
                {"type": "websocket.receive", "bytes": b"\x00"},
                {"type": "websocket.receive", "text": '{"jsonrpc":"2.0","id":7,"method":"_test/echo","params":{"i":7}}'},
                {"type": "websocket.disconnect", "code": 1000}]
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return incoming.pop(0)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    asyncio.run(echo_app({"type": "websocket"}, receive, send))
    assert [m["type"] for m in sent] == ["websocket.accept", "websocket.send"]
    assert json.loads(str(sent[1]["text"])) == {"jsonrpc": "2.0", "id": 7, "result": {"i": 7}}
    sent.clear()
    asyncio.run(echo_app({"type": "http"}, receive, send))
    assert sent[0]["status"] == 404


def test_pairs_limit_the_rows(tmp_path: object) -> None:
    """``--pairs`` keeps the rows of the pairs named (here none: only the connection row,
    which every run has) and ``--servers`` names the server of each row served by acp_fast."""
    from pathlib import Path

    out = Path(str(tmp_path)) / "rows.json"
    assert remote.main(["--quick", "--pairs", "nothing", "--connections", "5", "--loops", "asyncio",
                        "--servers", "uvicorn", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["pair"], r["workload"], r["server"]) for r in rows] == [("acp_fast", "connections", "uvicorn")]
    assert rows[0]["error"] is None and rows[0]["runs"]
