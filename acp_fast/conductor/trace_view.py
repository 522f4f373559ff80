"""`acp-fast trace view|summary`: read a conductor trace (`trace`, protocol.md §8.7.38).

`load_events` reads the JSONL file, `analyse` turns the events into a
`TraceModel` (lanes, sessions, methods, and one row per event with its
request/response pairing), `render_html` writes one self-contained page and
`summary_table` the text table of `acp-fast trace summary`.

The page
--------
No network: the CSS and JS are this package's data files `viewer/viewer.css` and
`viewer/viewer.js`, inlined into the page with the model, which is embedded as JSON in a
`<script type="application/json" id="trace-data">` (every `<` written as `\\u003c`,
so no string in a message can close the script element or open a comment). It shows a
sequence diagram: one lane per component (`Client`, `Conductor`, `Proxy(i)`,
`Agent`, `Successor`), one arrow per hop message; requests solid, responses dashed
(labelled `↩` with their request's method and id), notifications dotted and italic,
errors red, MCP-tagged messages marked; selecting a message highlights its partner and
bridges the pair on the requester's lane. Controls: a session picker (all, no session, each
session), component and method checkboxes, message-kind toggles, "errors only"; a detail
pane shows the selected event's JSON and jumps to its partner. The view state lives in the
URL fragment (`#session=…&hide=…&hideMethods=…&kinds=…&errors=1&sel=N`), so a view can be
shared and the tests set it without clicking.

Strategy (10,000+ events without freezing): the diagram is **virtualised**. The scroll area
holds a spacer as tall as all visible rows (fixed row height); one SVG is positioned at the
scroll offset and redrawn, on scroll (once per animation frame), with only the rows in the
viewport plus an overscan margin, so the DOM holds ~100 arrows whatever the trace size.
Filtering is one pass over an `Int32Array` of row indices; the pairing, sessions and
method table are computed here in Python, not in the browser. When drawing is done the
page sets `data-rendered="true"` on `<html>` (with `data-visible`, the number of rows
that pass the filters, and `data-drawn`, the number of arrows in the DOM).

Pairing: a request `{from: A, to: B, id}` is answered by the response `{from: B, to: A,
id}` (ids are per hop; `1` and `"1"` differ; a reused id pairs first-in first-out).
A response carries no method or session: it takes its request's. A request that opens a
session (`session/new`, `session/load`, `session/resume`, `session/fork`: no
`session` field but a `sessionId` in its result) is put in that session with its
response. `$/cancel_request` joins the session of the request it names on its hop.
Responses the conductor answers itself (`from: "Conductor"`) carry the requester's own id
and usually pair with nothing: they are drawn unpaired.
"""

from __future__ import annotations

import html
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ..jsontypes import Json, JsonObject
from ..protocol.facts import CANCEL_REQUEST, V1_SETUP_METHODS

__all__ = ["KINDS", "RECORDS", "TraceError", "TraceModel", "analyse", "load_events", "render_html",
           "summary_table", "viewer_asset"]

#: the event types of §8.7.38, in the order the model numbers them
KINDS = ("request", "response", "notification")
#: the conductor's own records, which are not hop messages (:mod:`.trace`): not drawn
RECORDS = ("negotiation",)
_REQ, _RESP, _NOTE = 0, 1, 2
#: the requests whose result opens a session (every version's setup methods)
_OPENERS = V1_SETUP_METHODS


class TraceError(ValueError):
    """A trace line that is not a §8.7.38 event (the message names the line)."""


def load_events(path: str | os.PathLike[str],
                records: list[JsonObject] | None = None) -> tuple[list[JsonObject], list[str]]:
    """Read a trace file: `(events, warnings)`; `events` are the hop messages only.

    Blank lines are skipped. A last line without its newline that is not valid JSON is
    dropped with a warning (a conductor killed mid-write leaves one). The conductor's own
    records (`RECORDS`: the `negotiation` of the chain's protocol version) are not
    events; they are appended to `records` when a list is given, else skipped.

    Raises:
        TraceError: any other line that is not a JSON object with a known `type` and
            string `from` / `to`.
        OSError: the file cannot be read.
    """
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = text.split("\n")
    events: list[JsonObject] = []
    warnings: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as exc:
            if number == len(lines):  # no newline after it: a torn last write
                warnings.append(f"line {number}: incomplete last line dropped ({exc})")
                continue
            raise TraceError(f"line {number}: not JSON ({exc})") from None
        if type(event) is dict and event.get("type") in RECORDS:
            if records is not None:
                records.append(event)
            continue
        _check(event, number)
        events.append(event)
    return events, warnings


def _check(event: Json, number: int) -> None:
    if type(event) is not dict:
        raise TraceError(f"line {number}: a trace event is a JSON object, not {type(event).__name__}")
    if event.get("type") not in KINDS:
        raise TraceError(f"line {number}: unknown event type {event.get('type')!r} (expected one of {', '.join(KINDS)})")
    for key in ("from", "to"):
        if type(event.get(key)) is not str:
            raise TraceError(f"line {number}: {key!r} must be a component name (a string)")
    if event["type"] != "response" and type(event.get("method")) is not str:
        raise TraceError(f"line {number}: a {event['type']} needs a string 'method'")


def _lane_key(name: str, first_seen: int) -> tuple[int, int, str]:
    if name == "Client":
        return (0, 0, name)
    if name == "Conductor":
        return (1, 0, name)
    if name.startswith("Proxy(") and name.endswith(")") and name[6:-1].isdigit():
        return (2, int(name[6:-1]), name)
    if name == "Agent":
        return (3, 0, name)
    if name == "Successor":
        return (4, 0, name)
    return (5, first_seen, name)


@dataclass
class TraceModel:
    """What the page and the summary show.

    `rows[i]` describes `events[i]`: `[kind, from lane, to lane, method index (-1:
    none), session index (-1: none), partner row (-1: none), is_error, ts (seconds or
    null), is_mcp]`; `kind` indexes `KINDS`.
    """

    lanes: list[str]
    sessions: list[str]
    methods: list[str]
    rows: list[list[Any]]
    events: list[JsonObject]
    title: str = "ACP conductor trace"
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        """The model as one JSON-ready object (what the page's script reads), with `KINDS`."""
        return {"title": self.title, "lanes": self.lanes, "sessions": self.sessions, "methods": self.methods,
                "kinds": list(KINDS), "rows": self.rows, "events": self.events, "warnings": self.warnings}


def _idkey(value: Json) -> str:
    return json.dumps(value, sort_keys=True)


def analyse(events: list[JsonObject], *, title: str = "ACP conductor trace",
            warnings: list[str] | None = None) -> TraceModel:
    """Lanes, sessions, methods and the paired rows of `events` (see the module docstring)."""
    seen: dict[str, int] = {}
    for e in events:
        for name in (e["from"], e["to"]):
            seen.setdefault(name, len(seen))
    lanes = sorted(seen, key=lambda n: _lane_key(n, seen[n]))
    lane_of = {name: i for i, name in enumerate(lanes)}
    n = len(events)
    kind = [KINDS.index(e["type"]) for e in events]
    method: list[str | None] = [e.get("method") if kind[i] != _RESP else None for i, e in enumerate(events)]
    session: list[str | None] = [e["session"] if type(e.get("session")) is str else None for e in events]
    pair = [-1] * n
    pending: dict[tuple[str, str, str], list[int]] = {}
    requests: dict[tuple[str, str, str], int] = {}  # the latest request per hop and id ($/cancel_request)
    for i, e in enumerate(events):
        k = kind[i]
        if k == _REQ:
            key = (e["from"], e["to"], _idkey(e.get("id")))
            pending.setdefault(key, []).append(i)
            requests[key] = i
        elif k == _RESP:
            waiting = pending.get((e["to"], e["from"], _idkey(e.get("id"))))
            if waiting:
                j = waiting.pop(0)
                pair[i], pair[j] = j, i
                method[i] = method[j]
                if session[j] is None and method[j] in _OPENERS and not e.get("is_error"):
                    payload = e.get("payload")
                    sid = payload.get("sessionId") if type(payload) is dict else None
                    if type(sid) is str:
                        session[j] = sid
                session[i] = session[j]
        elif method[i] == CANCEL_REQUEST and session[i] is None:
            params = e.get("params")
            if type(params) is dict and "requestId" in params:
                j = requests.get((e["from"], e["to"], _idkey(params["requestId"])), -1)
                if j >= 0:
                    session[i] = session[j]
    sessions: list[str] = []
    session_of: dict[str, int] = {}
    methods: list[str] = []
    method_of: dict[str, int] = {}
    rows: list[list[Any]] = []
    for i, e in enumerate(events):
        s, m = session[i], method[i]
        if s is not None and s not in session_of:
            session_of[s] = len(sessions)
            sessions.append(s)
        if m is not None and m not in method_of:
            method_of[m] = len(methods)
            methods.append(m)
        ts = e.get("ts")
        rows.append([kind[i], lane_of[e["from"]], lane_of[e["to"]], -1 if m is None else method_of[m],
                     -1 if s is None else session_of[s], pair[i], 1 if e.get("is_error") else 0,
                     ts if type(ts) in (int, float) else None, 1 if e.get("protocol") == "mcp" else 0])
    return TraceModel(lanes, sessions, methods, rows, events, title, list(warnings or []))


def viewer_asset(name: str) -> str:
    """The text of a viewer data file (`viewer.css`, `viewer.js`)."""
    return resources.files(__package__).joinpath("viewer").joinpath(name).read_text(encoding="utf-8")


def script_json(value: Json) -> str:
    """`value` as JSON safe inside a `<script>` element: ASCII, every `<` escaped."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).replace("<", "\\u003c")


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>{title}</title>
<style>
{css}
</style>
</head>
<body>
<header id="bar">
  <h1>{title}</h1>
  <label>Session <select id="session"></select></label>
  <span class="group" id="kinds"></span>
  <label><input type="checkbox" id="errors"> errors only</label>
  <span id="status" role="status">loading…</span>
</header>
<main>
  <aside id="filters">
    <section><h2>Components</h2><div id="lane-filter"></div></section>
    <section><h2>Methods <button type="button" id="methods-all">all</button>
      <button type="button" id="methods-none">none</button></h2>
      <input type="search" id="method-search" placeholder="find a method">
      <div id="method-filter"></div></section>
  </aside>
  <section id="diagram">
    <div id="lane-head"></div>
    <div id="scroller"><div id="spacer"></div><svg id="rows"></svg></div>
  </section>
  <aside id="detail"><p class="hint">Click a message to see its JSON.</p></aside>
</main>
<script type="application/json" id="trace-data">{data}</script>
<script>
{js}
</script>
</body>
</html>
"""


def render_html(model: TraceModel) -> str:
    """The self-contained page for `model` (no external resource of any kind)."""
    return _PAGE.format(title=html.escape(model.title), css=viewer_asset("viewer.css"),
                        js=viewer_asset("viewer.js"), data=script_json(model.to_json()))


def summary_table(model: TraceModel) -> str:
    """`acp-fast trace summary`: per component (sent / received by kind) and per method
    (requests, responses, errors, notifications, unanswered requests), as aligned text."""
    sent: Counter[tuple[int, int]] = Counter()
    received: Counter[tuple[int, int]] = Counter()
    per_method: dict[int, list[int]] = {i: [0, 0, 0, 0, 0] for i in range(len(model.methods))}
    unpaired_responses = 0
    for row in model.rows:
        k, src, dst, m, _, partner, err = row[:7]
        sent[(src, k)] += 1
        received[(dst, k)] += 1
        if m < 0:
            unpaired_responses += 1
            continue
        counts = per_method[m]
        if k == _REQ:
            counts[0] += 1
            if partner < 0:
                counts[4] += 1
        elif k == _RESP:
            counts[1] += 1
            counts[2] += err
        else:
            counts[3] += 1
    lane_rows = [[name, *(str(sent[(i, k)]) for k in range(3)), *(str(received[(i, k)]) for k in range(3))]
                 for i, name in enumerate(model.lanes)]
    method_rows = sorted(([name, *map(str, per_method[i])] for i, name in enumerate(model.methods)),
                         key=lambda r: (-(int(r[1]) + int(r[2]) + int(r[4])), r[0]))
    if unpaired_responses:
        method_rows.append(["(unpaired responses)", "0", str(unpaired_responses), "-", "0", "0"])
    out = [f"{len(model.events)} events, {len(model.lanes)} components, {len(model.sessions)} sessions", ""]
    out += _table(["component", "sent req", "sent resp", "sent notif", "recv req", "recv resp", "recv notif"],
                  lane_rows)
    out.append("")
    out += _table(["method", "requests", "responses", "errors", "notifications", "unanswered"], method_rows)
    out += [f"warning: {w}" for w in model.warnings]
    return "\n".join(out) + "\n"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[c]) for r in [head, *rows]) for c in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)]
