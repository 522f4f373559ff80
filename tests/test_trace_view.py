"""``acp-fast trace view|summary`` (:mod:`acp_fast.conductor.trace_view`, issue 10 "Trace").

The model (pairing, sessions, lanes), the loader's errors, the page's escaping and
self-containment are checked in Python. The page itself is checked in a real headless
Chromium (the Debian package): a trace written by a real conductor run (two in-process
pass-through proxies and ``acp-fast testy`` as a child process) and a synthetic
10,000-event trace are rendered; the DOM Chromium dumps is read back (lanes, one arrow per
message, pairing, errors, filters, the detail pane); a few runs append a small script to a
copy of the page to click, untick and scroll like a user. Screenshots are written under
``tmp_path`` and, when ``ACP_FAST_ARTEFACTS`` names a folder, copied there.

Chromium absent: skipped with the reason, unless the peers are required
(``tests/helpers/peer_rule.py``: ``ACP_FAST_REQUIRE_PEERS=1``, or ``CI`` with the flag unset):
then the tests fail.
A browser run has a hang guard (a timeout), never a timing threshold.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from browser import chromium as find_chromium
from browser import run_chromium
from conductor_support import Wire, cmd_testy, component_env, text_prompt
from peer_rule import require_module
from roles_support import RawPeer, run, v1_init

from acp_fast import Proxy
from acp_fast import engine as active_engine
from acp_fast.cli import main as cli
from acp_fast.conductor import Conductor
from acp_fast.conductor.trace_view import (
    TraceError,
    analyse,
    load_events,
    render_html,
    script_json,
    summary_table,
    viewer_asset,
)

BROWSER_GUARD = 180  # seconds: a hung browser run fails the test (not a timing threshold)
WINDOW = (1400, 900)

# ---------------------------------------------------------------------------------------
# traces
# ---------------------------------------------------------------------------------------


def _pass_through() -> Any:
    return Proxy.protocol_router().with_v1(Proxy.builder()).with_v2(Proxy.v2())


def conductor_trace(engine: ModuleType, path: Path) -> list[dict[str, Any]]:
    """A real chain run with ``--trace``: two in-process proxies, Testy as a child process;
    two sessions with a streamed prompt each, one error from the agent, one unknown method."""

    async def body() -> None:
        conductor = Conductor([_pass_through(), _pass_through(), cmd_testy(engine)], env=component_env(engine),
                              engine=engine, trace=path)
        async with conductor as upstream:
            w = Wire(RawPeer(upstream))
            await w.result("initialize", v1_init())
            sids = [(await w.result("session/new", {"cwd": "/", "mcpServers": []}))["sessionId"] for _ in range(2)]
            for sid in sids:
                reply, _ = await w.call("session/prompt", text_prompt(sid, "stream 3 chunks of 4 bytes"))
                assert reply["result"] == {"stopReason": "end_turn"}
            reply, _ = await w.call("session/set_mode", {"sessionId": sids[1], "modeId": "no-such-mode"})
            assert reply["error"]["code"] == -32602
            reply, _ = await w.call("_vendor/unknown", {"x": "</script><!--"})
            assert reply["error"]["code"] == -32601

    run(body)
    events, warnings = load_events(path)
    assert not warnings
    return events


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "trace.jsons"
    conductor_trace(active_engine, path)
    return path


CHAIN = ["Client", "Proxy(0)", "Proxy(1)", "Agent"]


def synthetic_events(total: int = 10_000) -> list[dict[str, Any]]:
    """``total`` events of prompt turns across 25 sessions through a 2-proxy chain: each turn
    is a request down every hop, 4 updates and the response back up each hop; every 7th turn
    the agent answers with an error."""
    events: list[dict[str, Any]] = []
    ts, turn = 0.0, 0

    def add(event: dict[str, Any]) -> None:
        nonlocal ts
        ts += 0.0001
        event["ts"] = ts
        events.append(event)

    while len(events) < total:
        turn += 1
        sid = f"s-{turn % 25}"
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": f"turn {turn}"}]}
        for a, b in pairwise(CHAIN):
            add({"type": "request", "protocol": "acp", "from": a, "to": b, "id": turn, "method": "session/prompt",
                 "session": sid, "params": params})
        for k in range(4):
            for a, b in zip(CHAIN[::-1], CHAIN[-2::-1]):
                add({"type": "notification", "protocol": "acp", "from": a, "to": b, "method": "session/update",
                     "session": sid, "params": {"sessionId": sid, "update": {"sessionUpdate": "agent_message_chunk",
                                                                             "content": {"type": "text", "text": f"{k}"}}}})
        error = turn % 7 == 0
        for a, b in zip(CHAIN[::-1], CHAIN[-2::-1]):
            add({"type": "response", "from": a, "to": b, "id": turn, "is_error": error,
                 "payload": {"code": -32603, "message": "Internal error"} if error else {"stopReason": "end_turn"}})
    return events[:total]


def write_jsonl(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------


def req(a: str, b: str, rid: Any, method: str, params: Any = None, **kw: Any) -> dict[str, Any]:
    return {"type": "request", "ts": 0.0, "protocol": "acp", "from": a, "to": b, "id": rid, "method": method,
            "params": params, **kw}


def resp(a: str, b: str, rid: Any, payload: Any = None, error: bool = False) -> dict[str, Any]:
    return {"type": "response", "ts": 0.0, "from": a, "to": b, "id": rid, "is_error": error, "payload": payload}


def note(a: str, b: str, method: str, params: Any = None, **kw: Any) -> dict[str, Any]:
    return {"type": "notification", "ts": 0.0, "protocol": "acp", "from": a, "to": b, "method": method,
            "params": params, **kw}


def test_pairing_is_per_hop_direction_and_exact_id() -> None:
    events = [
        req("Client", "Proxy(0)", 1, "a"),          # 0
        req("Proxy(0)", "Client", 1, "b"),          # 1: same id, other direction
        req("Client", "Proxy(0)", "1", "c"),        # 2: "1" is not 1
        resp("Proxy(0)", "Client", "1"),            # 3 -> 2
        resp("Client", "Proxy(0)", 1),              # 4 -> 1
        resp("Proxy(0)", "Client", 1),              # 5 -> 0
        req("Client", "Proxy(0)", 7, "d"),          # 6
        req("Client", "Proxy(0)", 7, "e"),          # 7: a reused id pairs first in, first out
        resp("Proxy(0)", "Client", 7),              # 8 -> 6
        resp("Proxy(0)", "Client", 7),              # 9 -> 7
        resp("Conductor", "Client", 99, {"code": -32600}, error=True),  # 10: unpaired
        req("Client", "Proxy(0)", 5, "never answered"),                  # 11
    ]
    model = analyse(events)
    pairs = [row[5] for row in model.rows]
    assert pairs == [5, 4, 3, 2, 1, 0, 8, 9, 6, 7, -1, -1]
    methods = [model.methods[row[3]] if row[3] >= 0 else None for row in model.rows]
    assert methods[3:6] == ["c", "b", "a"] and methods[8:10] == ["d", "e"] and methods[10] is None
    assert model.rows[10][6] == 1 and model.rows[5][6] == 0


def test_lanes_are_ordered_along_the_chain() -> None:
    events = [note("Agent", "Proxy(10)", "x"), note("Proxy(2)", "Proxy(10)", "x"), note("Successor", "Proxy(2)", "x"),
              resp("Conductor", "Client", 1), note("Mystery", "Agent", "x")]
    assert analyse(events).lanes == ["Client", "Conductor", "Proxy(2)", "Proxy(10)", "Agent", "Successor", "Mystery"]


def test_sessions_come_from_fields_session_openers_and_cancelled_requests() -> None:
    events = [
        req("Client", "Agent", 1, "initialize"),                                   # 0: no session
        resp("Agent", "Client", 1, {"protocolVersion": 1}),                        # 1
        req("Client", "Agent", 2, "session/new", {"cwd": "/"}),                    # 2: s1 from its result
        resp("Agent", "Client", 2, {"sessionId": "s1"}),                           # 3
        req("Client", "Agent", 3, "session/load", {"sessionId": "s2"}, session="s2"),  # 4
        resp("Agent", "Client", 3, {}),                                            # 5: its request's
        req("Client", "Agent", 4, "session/prompt", {"sessionId": "s1"}, session="s1"),  # 6
        note("Client", "Agent", "$/cancel_request", {"requestId": 4}),             # 7: the request's session
        resp("Agent", "Client", 4, {"code": -32800}, error=True),                  # 8
        req("Client", "Agent", 5, "session/new", {"cwd": "/"}),                    # 9: failed: no session
        resp("Agent", "Client", 5, {"code": -32603, "message": "x"}, error=True),  # 10
        req("Client", "Agent", 6, "other", {}),                                    # 11: not an opener
        resp("Agent", "Client", 6, {"sessionId": "s9"}),                           # 12
    ]
    model = analyse(events)
    sessions = [model.sessions[row[4]] if row[4] >= 0 else None for row in model.rows]
    assert sessions == [None, None, "s1", "s1", "s2", "s2", "s1", "s1", "s1", None, None, None, None]
    assert model.sessions == ["s1", "s2"]


def test_loader_drops_only_a_torn_last_line(tmp_path: Path) -> None:
    good = json.dumps(note("Client", "Agent", "x"))
    path = tmp_path / "t.jsons"
    path.write_text(f"{good}\n\n{good}\n{good[:20]}", encoding="utf-8")
    events, warnings = load_events(path)
    assert len(events) == 2 and len(warnings) == 1 and warnings[0].startswith("line 4: incomplete last line dropped")
    path.write_text(f"{good}\n{good[:20]}\n{good}\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"^line 2: not JSON"):
        load_events(path)


@pytest.mark.parametrize(("line", "message"), [
    ("[1]", "line 1: a trace event is a JSON object, not list"),
    ('{"type":"ping","from":"a","to":"b"}', "line 1: unknown event type 'ping' (expected one of request, response, notification)"),
    ('{"type":"response","from":1,"to":"b"}', "line 1: 'from' must be a component name (a string)"),
    ('{"type":"notification","from":"a","to":"b"}', "line 1: a notification needs a string 'method'"),
])
def test_loader_names_the_bad_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "t.jsons"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(TraceError) as exc:
        load_events(path)
    assert str(exc.value) == message


HOSTILE = "</script><script>alert(1)</script><!-- </SCRIPT "


def test_page_is_self_contained_and_no_message_breaks_out_of_the_data_island() -> None:
    events = [req("Client", "Agent", 1, "m</script>", {"text": HOSTILE, "lone": "\ud800", "u": "\u2028é"}),
              resp("Agent", "Client", 1, {"url": "https://example.invalid/x.js"})]
    model = analyse(events, title="<b>title</b> & co")
    page = render_html(model)
    # exactly our two script elements; the hostile text only ever appears escaped
    assert len(re.findall(r"(?i)<script", page)) == 2 and len(re.findall(r"(?i)</script", page)) == 2
    assert "<!--" not in page and HOSTILE not in page
    island = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', page, re.DOTALL)
    assert island is not None and "<" not in island.group(1)
    assert json.loads(island.group(1)) == json.loads(json.dumps(model.to_json()))
    assert "<title>&lt;b&gt;title&lt;/b&gt; &amp; co</title>" in page
    # nothing outside the data is fetched: no URL, no external reference of any kind
    chrome = page.replace(island.group(0), "")
    assert not re.search(r"(?i)https?:|//[a-z]|<link|@import|url\(|\ssrc=|<iframe|<img", chrome), chrome
    assert viewer_asset("viewer.css") in page and viewer_asset("viewer.js") in page


def test_script_json_escapes_every_angle_bracket() -> None:
    text = script_json({"a": "</script>", "b": ["<!--"]})
    assert "<" not in text and json.loads(text) == {"a": "</script>", "b": ["<!--"]}


@pytest.mark.parametrize("name", ["viewer.js", "viewer.css"])
def test_assets_cannot_end_their_element(name: str) -> None:
    text = viewer_asset(name)
    assert not re.search(r"(?i)</(script|style)|<!--", text)


def test_summary_counts_per_component_and_method(real_trace: Path) -> None:
    events, _ = load_events(real_trace)
    table = summary_table(analyse(events))
    lines = table.splitlines()
    assert lines[0] == f"{len(events)} events, 4 components, 2 sessions"
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:] if line and not line.startswith(("-", "method"))}
    # three hops: every client request is forwarded twice; 3 chunks per prompt, 2 prompts
    assert rows["session/prompt"] == ["6", "6", "0", "0", "0"]
    assert rows["session/update"] == ["0", "0", "0", "18", "0"]
    assert rows["session/set_mode"] == ["3", "3", "3", "0", "0"]
    assert rows["Client"] == ["7", "0", "0", "0", "7", "6"]  # initialize, 2 new, 2 prompts, 2 errors
    assert rows["Agent"] == ["0", "7", "6", "7", "0", "0"]


def test_cli_view_and_summary(real_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "page.html"
    assert cli.main(["trace", "view", str(real_trace), "-o", str(out), "--title", "chain"]) == 0
    assert "<title>chain</title>" in out.read_text(encoding="utf-8")
    assert capsys.readouterr().err.strip().endswith(f"-> {out}")
    assert cli.main(["trace", "summary", str(real_trace)]) == 0
    out_text = capsys.readouterr().out
    assert "session/prompt" in out_text
    # the chain's version selection (the trace's negotiation record), one line
    line = next(x for x in out_text.splitlines() if x.startswith("protocol version:"))
    assert line == ("protocol version: requested 1, selected 1 (probed; selected); Proxy(0): v1 accepted; "
                    "Proxy(1): v1 accepted; Agent: v1 answered 1"), line
    bad = tmp_path / "bad.jsons"
    bad.write_text("nope\n{}\n", encoding="utf-8")
    assert cli.main(["trace", "summary", str(bad)]) == 1
    assert capsys.readouterr().err == f"acp-fast trace: {bad}: line 1: not JSON (Expecting value: line 1 column 1 (char 0))\n"
    assert cli.main(["trace", "view", str(tmp_path / "missing.jsons")]) == 1
    assert "No such file" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# the page in headless Chromium
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> str:
    return find_chromium()


def browser(chromium: str, tmp_path: Path, page: Path, fragment: str = "", *, screenshot: Path | None = None,
            size: tuple[int, int] = WINDOW) -> str:
    """One headless Chromium run on ``page#fragment``: the serialized DOM (or writes ``screenshot``)."""
    args = ["--hide-scrollbars", f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=5000",
            f"--screenshot={screenshot}" if screenshot is not None else "--dump-dom"]
    out = run_chromium(chromium, page.as_uri() + (f"#{fragment}" if fragment else ""), args, guard=BROWSER_GUARD,
                       profile_dir=tmp_path)
    if screenshot is not None:
        assert screenshot.is_file(), f"no screenshot at {screenshot}"
    return out


class Dom(HTMLParser):
    """What the tests read back from a dumped DOM."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.root: dict[str, str | None] = {}
        self.msgs: list[dict[str, str | None]] = []
        self.lanes: list[str | None] = []
        self.bridges = 0
        self.detail_json = ""
        self._in_detail = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "html":
            self.root = a
        elif tag == "g" and "msg" in (a.get("class") or "").split():
            self.msgs.append(a)
        elif tag == "span" and (a.get("class") or "") == "lane":
            self.lanes.append(a.get("data-lane"))
        elif tag == "path" and a.get("class") == "bridge":
            self.bridges += 1
        elif tag == "pre" and a.get("id") == "detail-json":
            self._in_detail = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre":
            self._in_detail = False

    def handle_data(self, data: str) -> None:
        if self._in_detail:
            self.detail_json += data

    def indices(self) -> list[int]:
        return [int(m["data-i"] or -1) for m in self.msgs]

    def classes(self, i: int) -> set[str]:
        return next(set((m.get("class") or "").split()) for m in self.msgs if m["data-i"] == str(i))


def render_page(events: list[dict[str, Any]], folder: Path, name: str = "trace") -> Path:
    page = folder / f"{name}.html"
    page.write_text(render_html(analyse(events, title=name)), encoding="utf-8")
    return page


def with_script(page: Path, script: str) -> Path:
    """A copy of ``page`` with ``script`` run after the viewer's own (what a user would do)."""
    text = page.read_text(encoding="utf-8")
    head, tail = text.rsplit("</body>", 1)
    out = page.with_name(page.stem + "-driven.html")
    out.write_text(f"{head}<script>{script}</script></body>{tail}", encoding="utf-8")
    return out


def keep_artefact(path: Path) -> None:
    folder = os.environ.get("ACP_FAST_ARTEFACTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        shutil.copy2(path, Path(folder) / path.name)


TALL = (1400, 3000)  # every row of the real trace fits: all of them are drawn


def test_real_conductor_trace_draws_lanes_and_one_arrow_per_message(engine: ModuleType, chromium: str,
                                                                      tmp_path: Path) -> None:
    events = conductor_trace(engine, tmp_path / "trace.jsons")
    dom = Dom(browser(chromium, tmp_path, render_page(events, tmp_path), size=TALL))
    assert dom.root.get("data-rendered") == "true" and dom.root.get("data-visible") == str(len(events))
    assert dom.lanes == CHAIN
    assert dom.indices() == list(range(len(events)))  # one arrow per message, in order
    kinds = {"request": "req", "response": "resp", "notification": "note"}
    for m, e in zip(dom.msgs, events):
        assert (m["data-from"], m["data-to"], m["data-kind"]) == (e["from"], e["to"], e["type"])
        assert kinds[e["type"]] in (m["class"] or "").split()
        assert ("err" in (m["class"] or "").split()) == bool(e.get("is_error"))
    # every request is paired with the response on the same hop, the other way, same id
    for i, (m, e) in enumerate(zip(dom.msgs, events)):
        if e["type"] != "notification":
            j = int(m["data-pair"] or -1)
            other = events[j]
            assert {e["type"], other["type"]} == {"request", "response"}
            assert (other["from"], other["to"], other["id"]) == (e["to"], e["from"], e["id"]), (i, j)
    assert sum(1 for e in events if e.get("is_error")) == 6  # set_mode and the unknown method, 3 hops each


def test_filters_from_the_fragment_change_the_visible_set(real_trace: Path, chromium: str, tmp_path: Path) -> None:
    events, _ = load_events(real_trace)
    page = render_page(events, tmp_path)
    updates = {i for i, e in enumerate(events) if e.get("method") == "session/update"}
    assert updates
    dom = Dom(browser(chromium, tmp_path, page, "hideMethods=session%2Fupdate", size=TALL))
    assert set(dom.indices()) == set(range(len(events))) - updates
    assert dom.root.get("data-visible") == str(len(events) - len(updates))

    dom = Dom(browser(chromium, tmp_path, page, "hide=Agent", size=TALL))
    assert dom.lanes == ["Client", "Proxy(0)", "Proxy(1)"]
    assert set(dom.indices()) == {i for i, e in enumerate(events) if "Agent" not in (e["from"], e["to"])}

    # the second session (the one the failing set_mode went to): from the last session/new result
    sid = [e for e in events if e.get("type") == "response" and isinstance(e.get("payload"), dict)
           and "sessionId" in e["payload"]][-1]["payload"]["sessionId"]
    dom = Dom(browser(chromium, tmp_path, page, f"session={sid}&errors=1", size=TALL))
    shown = [events[i] for i in dom.indices()]
    assert len(shown) == 3 and all(e["is_error"] and e["payload"]["code"] == -32602 for e in shown)


def test_an_empty_trace_renders_an_empty_diagram(chromium: str, tmp_path: Path) -> None:
    trace = tmp_path / "empty.jsons"
    trace.write_text("", encoding="utf-8")
    page = tmp_path / "empty.html"
    assert cli.main(["trace", "view", str(trace), "-o", str(page)]) == 0
    dom = Dom(browser(chromium, tmp_path, page))
    assert dom.root.get("data-rendered") == "true" and dom.root.get("data-visible") == "0" and not dom.msgs


def test_selection_fills_the_detail_pane_and_bridges_the_pair(real_trace: Path, chromium: str,
                                                               tmp_path: Path) -> None:
    events, _ = load_events(real_trace)
    page = render_page(events, tmp_path)
    k = next(i for i, e in enumerate(events) if e.get("method") == "session/prompt")
    dom = Dom(browser(chromium, tmp_path, page, f"sel={k}", size=TALL))
    assert json.loads(dom.detail_json) == events[k]
    pair = next(int(m["data-pair"] or -1) for m in dom.msgs if m["data-i"] == str(k))
    assert "sel" in dom.classes(k) and "pair" in dom.classes(pair) and dom.bridges == 1
    # the same through the UI: a click on an arrow, then untick a component
    driven = with_script(page, f"""
        document.querySelector('g.msg[data-i="{pair}"] .hit').dispatchEvent(new MouseEvent("click", {{bubbles: true}}));
        var box = document.querySelector('#lane-filter input[data-name="Proxy(1)"]');
        box.checked = false; box.dispatchEvent(new Event("change"));""")
    dom = Dom(browser(chromium, tmp_path, driven, size=TALL))
    assert json.loads(dom.detail_json) == events[pair]
    assert "Proxy(1)" not in dom.lanes and dom.indices()
    assert all("Proxy(1)" not in (m["data-from"], m["data-to"]) for m in dom.msgs)
    # the arrow keys step through the visible rows (here: the next one not touching Proxy(1))
    driven = with_script(page, """
        document.querySelector('#lane-filter input[data-name="Proxy(1)"]').click();
        document.getElementById("scroller").dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowDown"}));""")
    after = next(i for i, e in enumerate(events) if "Proxy(1)" not in (e["from"], e["to"]))
    dom = Dom(browser(chromium, tmp_path, driven, size=TALL))
    assert json.loads(dom.detail_json) == events[after] and "sel" in dom.classes(after)


def test_screenshot_of_a_real_trace(real_trace: Path, chromium: str, tmp_path: Path) -> None:
    events, _ = load_events(real_trace)
    page = render_page(events, tmp_path, "conductor-trace")
    k = next(i for i, e in enumerate(events) if e.get("method") == "session/prompt")
    shot = tmp_path / "trace-view-conductor.png"
    browser(chromium, tmp_path, page, f"sel={k}", screenshot=shot, size=(1400, 1800))  # every row
    keep_artefact(shot)
    assert_drawn(shot, (1400, 1800), [REQUEST_BLUE, ERROR_RED, NOTIFICATION_BROWN])


REQUEST_BLUE, ERROR_RED, NOTIFICATION_BROWN = (0x24, 0x58, 0xB3), (0xC5, 0x30, 0x30), (0x7C, 0x5A, 0x12)


def assert_drawn(shot: Path, size: tuple[int, int], colours: list[tuple[int, int, int]]) -> None:
    """The PNG has the window's size and shows strokes of each of ``colours`` (viewer.css)."""
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    image_module = require_module("PIL.Image", "pillow", "Pillow (a matplotlib dependency) reads the PNG")
    image = image_module.open(shot).convert("RGB")
    assert image.size == size
    counts = image.getcolors(maxcolors=1 << 22) or []
    for rgb in colours:
        near = sum(n for n, c in counts if all(abs(a - b) <= 24 for a, b in zip(c, rgb)))
        assert near > 50, (rgb, near)


def test_ten_thousand_events_render_virtualised(chromium: str, tmp_path: Path) -> None:
    events = synthetic_events(10_000)
    trace = write_jsonl(tmp_path / "big.jsons", events)
    page = tmp_path / "big.html"
    assert cli.main(["trace", "view", str(trace), "-o", str(page)]) == 0
    dom = Dom(browser(chromium, tmp_path, page))
    assert dom.root.get("data-rendered") == "true" and dom.root.get("data-visible") == "10000"
    drawn = dom.indices()
    assert 0 < len(drawn) == int(dom.root.get("data-drawn") or -1) < 200  # only the viewport's rows
    assert drawn == list(range(len(drawn)))
    assert len(dom.lanes) == 4
    # scrolling draws the rows at the new position (the next animation frame)
    driven = with_script(page, "var s = document.getElementById('scroller'); s.scrollTop = 6000 * 24;"
                               "s.dispatchEvent(new Event('scroll'));")
    drawn = Dom(browser(chromium, tmp_path, driven)).indices()
    assert drawn and drawn[0] <= 6000 <= drawn[-1] and drawn == list(range(drawn[0], drawn[-1] + 1))
    # a filter over all 10,000 rows: errors only (every 7th turn, 3 hops)
    errors = [i for i, e in enumerate(events) if e.get("is_error")]
    dom = Dom(browser(chromium, tmp_path, page, "errors=1"))
    assert dom.root.get("data-visible") == str(len(errors)) and dom.indices() == errors[:len(dom.indices())]
    shot = tmp_path / "trace-view-10k.png"
    browser(chromium, tmp_path, page, "sel=40", screenshot=shot)
    keep_artefact(shot)
    assert_drawn(shot, WINDOW, [REQUEST_BLUE, NOTIFICATION_BROWN])
