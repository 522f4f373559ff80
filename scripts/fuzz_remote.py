#!/usr/bin/env python3
"""Fuzz of the remote server (``acp_fast.transport.remote``) with hostile client bytes.

The app is what ``acp-fast serve --testy`` serves (Testy v1 and v2 in-process, the default
:class:`~acp_fast.transport.remote.ServerPolicy`), on uvicorn, bound to 127.0.0.1 port 0 in
this process. Mutated JSON-RPC (deep nesting, newlines, lone surrogates, huge numbers,
batches, wrong types, truncated and invalid UTF-8, control characters, duplicate keys,
empty bodies) goes in as:

* POST bodies on a live Streamable HTTP connection (``--count`` of them), some with hostile
  headers (``Content-Type``, ``Acp-Session-Id``, ``Acp-Connection-Id``, ``Host``, ``Origin``)
  and some without a connection id (the ``initialize`` path); plus SSE GETs with hostile
  ``Last-Event-ID``, ``Acp-Session-Id`` and ``Accept`` headers;
* WebSocket frames on a live socket (``--count`` of them): text frames, binary frames, and
  text frames that are not UTF-8 (which the WebSocket protocol answers with close 1007; the
  fuzz then opens a new socket).

The property, checked for every input: no HTTP status 5xx; a malformed POST body is answered
400 with exactly the error line the engine answers the same line with on stdio; every request
that reached the agent is answered exactly once on a stream the client reads (the ids
answered, counted over the whole run, equal the ids the engine finds in what was sent, and
the id-less errors as many as its malformed batch entries); after the run a normal request
is answered on the same connection and socket; and nothing is logged with a traceback or at
ERROR (every logger, uvicorn's included), nor written to stderr.

Usage: python scripts/fuzz_remote.py --seed 1 --count 1000
Prints one summary line; exits 1 on any finding (printing the first ones, with the input and
the command that reproduces the run), 0 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import io
import json
import logging
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
import websockets  # noqa: E402

from acp_fast.transport.remote import served  # noqa: E402
from acp_fast.transport.remote._wire import SseParser  # noqa: E402
from acp_fast.transport.remote.gateway import testy_app  # noqa: E402

#: Seconds every answer may take to arrive after the last input of a path.
SETTLE = 10.0
INIT = {"jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}}
TEXTS = ["hi", "echo fuzz", "stream 3", "help", "", "echo é\u2028\ud83d\ude00"]


class LogTrap(logging.Handler):
    """Records what a clean run never logs: any record with a traceback, any at ERROR or
    above. Attach it with :meth:`attach` after the ASGI server configured its loggers
    (uvicorn's do not propagate to the root)."""

    NAMES = ("", "uvicorn", "uvicorn.error", "uvicorn.asgi", "asyncio", "acp_fast")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.bad: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            self.bad.append(f"{record.name} {record.levelname}: {text}")

    def attach(self) -> None:
        for name in self.NAMES:
            logging.getLogger(name).addHandler(self)

    def detach(self) -> None:
        for name in self.NAMES:
            logging.getLogger(name).removeHandler(self)


# ---------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------


class Gen:
    """Seeded hostile inputs built from valid messages of the ACP surface."""

    def __init__(self, rng: random.Random, sid: str) -> None:
        self.rng = rng
        self.sid = sid
        self.n = 0

    def ident(self) -> Any:
        self.n += 1
        r = self.rng.random()
        return f"q{self.n}" if r < 0.6 else 10_000_000 + self.n

    def message(self) -> dict[str, Any]:
        rng = self.rng
        sid = self.sid if rng.random() < 0.8 else rng.choice(["no-such-session", "", "x" * 300])
        text = [{"type": "text", "text": rng.choice(TEXTS)}]
        shapes: list[dict[str, Any]] = [
            {"id": 0, "method": "session/prompt", "params": {"sessionId": sid, "prompt": text}},
            {"id": 0, "method": "session/prompt", "params": {"prompt": text}},
            {"id": 0, "method": "session/set_mode", "params": {"sessionId": sid, "modeId": "x"}},
            {"id": 0, "method": "session/load", "params": {"sessionId": sid, "cwd": "/", "mcpServers": []}},
            {"id": 0, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}},
            {"id": 0, "method": "_test/echo", "params": {"a": [1, "é", None], "sessionId": sid}},
            {"id": 0, "method": "_test/echo"},
            {"id": 0, "method": "initialize", "params": INIT["params"]},
            {"id": 0, "method": "no/such_method", "params": {}},
            {"method": "_test/note", "params": {"n": 1}},
            {"method": "session/cancel", "params": {"sessionId": "no-such-session"}},
            {"method": "$/cancel_request", "params": {"requestId": "q-gone", "sessionId": sid}},
            {"method": "_proxy/successor", "params": {"method": "$/cancel_request", "params": {"requestId": 1}}},
            {"id": "never-asked", "result": {}},
            {"id": "never-asked", "error": {"code": 1, "message": "x"}},
        ]
        m = dict(rng.choice(shapes))
        m = {"jsonrpc": "2.0", **m}
        if "id" in m and m["id"] == 0:
            m["id"] = self.ident()
        return m

    def value(self, depth: int = 0) -> Any:
        rng = self.rng
        r = rng.random()
        if depth > 3 or r < 0.3:
            return rng.choice([0, -1, 1.5, 10**30, True, None, "", "\ud800", "\udfff x", "é" * 10, "\x00"])
        if r < 0.6:
            return [self.value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(["a", "sessionId", "id", "method", "\ud83d"]): self.value(depth + 1)
                for _ in range(rng.randint(0, 3))}

    def structural(self) -> Any:
        """A message, a batch, or a wrong-typed variant of one."""
        rng = self.rng
        r = rng.random()
        if r < 0.15:
            return [self.message() for _ in range(rng.randint(0, 6))]
        if r < 0.2:
            return [[self.message()], self.message(), rng.choice([1, "x", None, {}])]
        m = self.message()
        if r < 0.45:
            key = rng.choice(["id", "method", "params", "jsonrpc", "result"])
            m[key] = rng.choice([[1], {}, True, 1.5, None, "1.0", 2, -0.0, 10**40, self.value()])
        elif r < 0.5:
            m.pop(rng.choice(list(m)))
        return m

    def body(self) -> bytes:
        """One hostile JSON text (a POST body, a frame's payload)."""
        rng = self.rng
        r = rng.random()
        if r < 0.04:
            n = rng.choice([10, 200, 5000, 100_000])
            return b"[" * n + b"\n" + b"]" * n
        if r < 0.07:
            n = rng.choice([129, 600, 20_000])
            m = self.message()
            m["params"] = json.loads("[" * 100 + "]" * 100)
            raw = json.dumps(m).encode()
            return raw.replace(b"[" * 100, b"[" * n).replace(b"]" * 100, b"]" * n)
        if r < 0.09:
            return rng.choice([b"", b" ", b"\n", b"\r\n\t", b"null", b"0", b'""', b"[]", b"{}", b"[[]]"])
        value = self.structural()
        text = json.dumps(value, ensure_ascii=rng.random() < 0.3,
                          indent=rng.choice([None, None, None, 2, "\t"]))
        raw = text.encode("utf-8", "surrogatepass")
        return self.mangle(raw)

    def mangle(self, raw: bytes) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.45 or not raw:
            return raw
        b = bytearray(raw)
        if r < 0.55:  # truncated, possibly inside a multi-byte character
            return bytes(b[: rng.randrange(len(b))])
        if r < 0.62:  # newlines, in strings or between tokens
            for _ in range(rng.randint(1, 4)):
                b.insert(rng.randrange(len(b) + 1), 10)
            return bytes(b)
        if r < 0.68:  # invalid UTF-8: a cut multi-byte character, a raw surrogate, 0xff
            b.insert(rng.randrange(len(b) + 1), rng.choice([0xC3, 0xFF, 0x80]))
            if rng.random() < 0.3:
                b[rng.randrange(len(b)):0] = b"\xed\xa0\x80"
            return bytes(b)
        if r < 0.74:  # control characters and NUL
            b.insert(rng.randrange(len(b) + 1), rng.choice([0, 1, 9, 13, 27, 0x1F, 0x7F]))
            return bytes(b)
        if r < 0.8:  # huge numbers
            big = rng.choice([b"1e400", b"-1E999999", b"9" * 5000, b"1" + b"0" * 400, b"-0", b"0.0e-99999"])
            return raw.replace(b'"jsonrpc"', b'"n":' + big + b',"jsonrpc"', 1)
        if r < 0.85:  # duplicate keys
            return raw.replace(b'"jsonrpc": "2.0"', b'"jsonrpc": "2.0", "jsonrpc": "1.0"', 1).replace(
                b'"jsonrpc":"2.0"', b'"jsonrpc":"2.0","jsonrpc":"1.0"', 1)
        if r < 0.92:  # flipped bytes
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            return bytes(b)
        return bytes(b) * rng.randint(2, 3)  # concatenated texts

    def header_value(self) -> bytes:
        rng = self.rng
        inner = bytes(rng.choice([rng.randrange(0x20, 0x7F), rng.randrange(0x80, 0x100), 9])
                      for _ in range(rng.randint(0, rng.choice([8, 64, 3000]))))
        return b"x" + inner + b"x"  # a header value neither starts nor ends with whitespace


# ---------------------------------------------------------------------------------------
# what the engine says must be answered
# ---------------------------------------------------------------------------------------


def expected_answers(engine: Any, payload: bytes) -> tuple[list[Any], int, Any]:
    """(ids that must be answered, id-less errors that must come, the malformed top-level
    frame or ``None``) for one message as the server hands it to the agent."""
    frames = engine.Decoder(lazy=True).feed(as_line(payload))
    ids: list[Any] = []
    nulls = 0
    malformed = None
    for f in frames:
        if f.kind == engine.REQUEST:
            ids.append(f.id)
        elif f.kind == engine.MALFORMED:
            malformed = f
            if not f.response_shaped:
                nulls += 1
        elif f.kind == engine.BATCH:
            for e in f.entries:
                if e.kind == engine.REQUEST:
                    ids.append(e.id)
                elif e.kind == engine.MALFORMED and not e.response_shaped:
                    nulls += 1
    return ids, nulls, malformed


def as_line(payload: bytes) -> bytes:
    """A message as one stdio line, the oracle's own way (not the server's code): a newline
    inside valid JSON is whitespace, and a tab is too; in a string both are invalid raw."""
    return payload.strip().replace(b"\n", b"\t") + b"\n"


def key(ident: Any) -> str:
    return json.dumps(ident)


class Tally:
    """Answers expected and seen over one path, by id (``null`` for id-less errors)."""

    def __init__(self) -> None:
        self.expected: collections.Counter[str] = collections.Counter()
        self.seen: collections.Counter[str] = collections.Counter()
        self.requests_to_client: list[Any] = []
        self.results: dict[str, Any] = {}  # the last answer per id
        self.origin: dict[str, str] = {}  # the input that asked, per id

    def note(self, message: Any) -> None:
        for m in message if isinstance(message, list) else [message]:
            if not isinstance(m, dict):
                continue
            if "method" in m:
                if "id" in m:
                    self.requests_to_client.append(m["id"])
                continue
            k = key(m.get("id"))
            self.seen[k] += 1
            self.results[k] = m

    def missing(self) -> collections.Counter[str]:
        return self.expected - self.seen

    def extra(self) -> collections.Counter[str]:
        return self.seen - self.expected

    async def settle(self, deadline: float) -> None:
        while self.missing() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # a second answer would come right behind


# ---------------------------------------------------------------------------------------
# the runs
# ---------------------------------------------------------------------------------------


class Findings(list[str]):
    """What broke the property, in the order found."""

    def add(self, text: str) -> None:
        self.append(text)


async def _sse_reader(c: httpx.AsyncClient, url: str, headers: dict[str, Any], tally: Tally,
                      ended: asyncio.Event, status: asyncio.Future[int] | None = None) -> None:
    """Read one SSE stream into ``tally``; ``ended`` is set when a stream that opened ends."""
    parser = SseParser()
    try:
        async with c.stream("GET", url, headers={**headers, "accept": "text/event-stream"}) as resp:
            if status is not None:
                status.set_result(resp.status_code)
            if resp.status_code != 200:
                return
            try:
                async for chunk in resp.aiter_bytes():
                    for data in parser.feed(chunk):
                        tally.note(json.loads(data))
            finally:
                ended.set()
    except (httpx.TransportError, asyncio.CancelledError):
        pass


async def run_http(url: str, engine: Any, rng: random.Random, count: int, findings: Findings) -> int:
    tally = Tally()
    async with httpx.AsyncClient(timeout=30.0) as c:
        r = await c.post(url, json=INIT)
        cid = r.headers["acp-connection-id"]
        h = {"acp-connection-id": cid, "content-type": "application/json"}
        ended = asyncio.Event()
        readers = [asyncio.ensure_future(_sse_reader(c, url, h, tally, ended))]
        await asyncio.sleep(0.05)
        tally.expected[key("new")] += 1
        await c.post(url, json={"jsonrpc": "2.0", "id": "new", "method": "session/new",
                                "params": {"cwd": "/tmp", "mcpServers": []}}, headers=h)
        while not tally.seen[key("new")]:
            await asyncio.sleep(0.01)
        sid = tally.results[key("new")]["result"]["sessionId"]
        readers.append(asyncio.ensure_future(_sse_reader(c, url, {**h, "acp-session-id": sid}, tally, ended)))
        gen = Gen(rng, sid)
        opened = {sid.encode()}
        sent = 0
        for i in range(count):
            body = gen.body()
            headers: dict[str, Any] = dict(h)
            r = rng.random()
            no_cid = False
            if r < 0.1:
                headers["acp-session-id"] = rng.choice([sid, "no-such-session", gen.header_value()])
            elif r < 0.13:
                headers["content-type"] = rng.choice(["application/json; charset=utf-8", "text/plain", "",
                                                      "application/json;;;", "APPLICATION/JSON"])
            elif r < 0.15:
                headers["acp-connection-id"] = gen.header_value()
            elif r < 0.17:
                headers[rng.choice(["host", "origin", "authorization"])] = gen.header_value()
            elif r < 0.22:
                no_cid = True
                del headers["acp-connection-id"]
            try:
                resp = await c.post(url, content=body, headers=headers)
            except httpx.TransportError as exc:
                findings.add(f"http #{i}: the POST failed: {exc!r}; body={body[:200]!r}")
                continue
            sent += 1
            status = resp.status_code
            if status >= 500:
                findings.add(f"http #{i}: HTTP {status}; body={body[:300]!r} headers={headers}")
                continue
            ids, nulls, malformed = expected_answers(engine, body)
            if status == 202:
                await _read_session(c, url, h, headers, body, engine, tally, readers, opened, ended)
                for x in ids:
                    tally.origin[key(x)] = f"#{i} {body[:300]!r} headers={headers}"
                tally.expected.update(key(x) for x in ids)
                tally.expected[key(None)] += nulls
            elif status == 200:
                if not no_cid:
                    findings.add(f"http #{i}: 200 on a live connection; body={body[:200]!r}")
                new = resp.headers.get("acp-connection-id")
                if new:
                    await c.delete(url, headers={"acp-connection-id": new})
            elif status == 400:
                try:
                    err = json.loads(resp.content)
                    ok = err["error"]["code"] < 0 and err["id"] is None
                except (ValueError, KeyError, TypeError):
                    ok = False
                if not ok:
                    findings.add(f"http #{i}: 400 without a JSON-RPC error: {resp.content[:200]!r}")
                elif malformed is not None and not malformed.response_shaped and \
                        resp.content != engine.error_reply(malformed):
                    findings.add(f"http #{i}: a malformed body got {resp.content[:200]!r}, the engine answers "
                                 f"{engine.error_reply(malformed)[:200]!r}")
            elif status not in (404, 413, 415, 421, 403):
                findings.add(f"http #{i}: unexpected HTTP {status}; body={body[:200]!r}")
            if ended.is_set():
                findings.add(f"http #{i}: an SSE stream ended; body={body[:300]!r}")
                break
            await _answer_agent_requests(c, url, h, tally)
        await _get_fuzz(c, url, gen, rng, max(10, count // 10), findings)
        # afterwards: a normal request on the same connection is answered
        tally.expected[key("after")] += 1
        r = await c.post(url, json={"jsonrpc": "2.0", "id": "after", "method": "_test/echo", "params": {}},
                         headers=h)
        if r.status_code != 202:
            findings.add(f"http: the request after the run got HTTP {r.status_code}")
        await tally.settle(time.monotonic() + SETTLE)
        _compare(tally, "http", findings)
        if ended.is_set():
            findings.add("http: an SSE stream of the live connection ended")
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        await c.delete(url, headers=h)
    return sent


async def _read_session(c: httpx.AsyncClient, url: str, h: dict[str, str], headers: dict[str, Any], body: bytes,
                        engine: Any, tally: Tally, readers: list[Any], opened: set[bytes],
                        ended: asyncio.Event) -> None:
    """As a client does: after a POST naming a session (its header, or a string
    ``params.sessionId``), read that session's stream unless it is read already (the server
    refuses with 404 a session that is neither known nor named by a request in flight)."""
    named: set[bytes] = set()
    header = headers.get("acp-session-id")
    if header is not None:
        named.add(header if isinstance(header, bytes) else header.encode())
    for f in engine.Decoder(lazy=True).feed(as_line(body)):
        for e in (f.entries if f.kind == engine.BATCH else [f]):
            if e.kind in (engine.REQUEST, engine.NOTIFICATION) and isinstance(e.params, dict):
                sid = e.params.get("sessionId")
                if isinstance(sid, str):
                    named.add(sid.encode("utf-8", "surrogatepass"))
    for raw in named - opened:
        status: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(_sse_reader(c, url, {**h, "acp-session-id": raw}, tally, ended, status))
        await asyncio.wait({status, task}, return_when=asyncio.FIRST_COMPLETED)
        if status.done() and status.result() == 200:  # read it for good
            opened.add(raw)
            readers.append(task)


async def _answer_agent_requests(c: httpx.AsyncClient, url: str, h: dict[str, str], tally: Tally) -> None:
    while tally.requests_to_client:
        ident = tally.requests_to_client.pop()
        await c.post(url, json={"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no"}},
                     headers=h)


async def _get_fuzz(c: httpx.AsyncClient, url: str, gen: Gen, rng: random.Random, n: int,
                    findings: Findings) -> None:
    """SSE GETs with hostile headers, on a connection of their own (a resume would take the
    live connection's stream over)."""
    r = await c.post(url, json=INIT)
    cid = r.headers["acp-connection-id"]
    for i in range(n):
        headers: dict[str, Any] = {"acp-connection-id": cid, "accept": "text/event-stream"}
        which = rng.random()
        if which < 0.5:
            headers["last-event-id"] = rng.choice([gen.header_value(), "0", "-1", "1" * 5000,
                                                   "1e3", "+1", "\u0663".encode()])
        elif which < 0.8:
            headers["acp-session-id"] = gen.header_value()
        else:
            headers["accept"] = gen.header_value()
        try:
            async with c.stream("GET", url, headers=headers) as resp:
                status = resp.status_code
        except httpx.TransportError as exc:
            findings.add(f"get #{i}: failed: {exc!r}; headers={headers}")
            continue
        if status >= 500:
            findings.add(f"get #{i}: HTTP {status}; headers={headers}")
    await c.delete(url, headers={"acp-connection-id": cid})


def _compare(tally: Tally, path: str, findings: Findings) -> None:
    missing, extra = tally.missing(), tally.extra()
    if missing:
        findings.add(f"{path}: never answered: {dict(list(missing.items())[:10])}; asked by "
                     + "; ".join(tally.origin.get(k, "?") for k in list(missing)[:3]))
    if extra:
        findings.add(f"{path}: answered more often than asked (or never asked): {dict(list(extra.items())[:10])}")


async def run_ws(url: str, engine: Any, rng: random.Random, count: int, findings: Findings) -> int:
    """Frames on a live socket (half of the runs asking for batch frames); a text frame that
    is not UTF-8 must be refused with close 1007, after which a new socket carries on."""
    tally = Tally()
    gen = Gen(rng, "")
    sockets = 0

    async def opened() -> Any:
        nonlocal sockets
        sockets += 1
        headers = {"Acp-Batch-Frames": "1"} if rng.random() < 0.5 else {}
        ws = await websockets.connect(url, additional_headers=headers, max_size=None)
        await ws.send(json.dumps(INIT))
        tally.note(json.loads(await ws.recv()))
        tally.expected[key("init")] += 1
        ident = f"new{sockets}"
        tally.expected[key(ident)] += 1
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": "session/new",
                                  "params": {"cwd": "/tmp", "mcpServers": []}}))
        while not tally.seen[key(ident)]:
            tally.note(json.loads(await ws.recv()))
        gen.sid = tally.results[key(ident)]["result"]["sessionId"]
        return ws

    async def drain(ws: Any, until: str | None) -> None:
        """Read frames (answering the agent's requests) until ``until`` is answered, or for a
        moment when ``None``."""
        while True:
            try:
                frame = await asyncio.wait_for(ws.recv(), 0.3 if until is None else SETTLE)
            except asyncio.TimeoutError:
                if until is not None:
                    findings.add(f"ws: no answer to {until!r} within {SETTLE} s")
                return
            tally.note(json.loads(frame))
            while tally.requests_to_client:
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": tally.requests_to_client.pop(),
                                          "error": {"code": -32601, "message": "no"}}))
            if until is not None and tally.seen[key(until)]:
                return

    ws = await opened()
    sent = 0
    try:
        for i in range(count):
            body = gen.body()
            r = rng.random()
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            try:
                if r < 0.05:
                    await ws.send(body or b"\0")  # binary: ignored
                    ids, nulls = [], 0
                elif text is None:
                    await ws.send(body, text=True)  # not UTF-8: the protocol's close 1007
                    try:
                        await asyncio.wait_for(drain(ws, "never"), 5.0)
                    except websockets.ConnectionClosed as exc:
                        code = exc.rcvd.code if exc.rcvd is not None else None
                        if code != 1007:
                            findings.add(f"ws #{i}: a text frame that is not UTF-8 closed with {code}, not 1007")
                    else:
                        findings.add(f"ws #{i}: a text frame that is not UTF-8 did not close the socket")
                    ws = await opened()
                    sent += 1
                    continue
                else:
                    await ws.send(text)
                    ids, nulls, _ = expected_answers(engine, body)
                sent += 1
                tally.expected.update(key(x) for x in ids)
                tally.expected[key(None)] += nulls
                fence = f"fence{i}"
                tally.expected[key(fence)] += 1
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": fence, "method": "_test/echo"}))
                await drain(ws, fence)
            except websockets.ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else None
                findings.add(f"ws #{i}: the socket closed ({code}); body={body[:300]!r}")
                ws = await opened()
        tally.expected[key("after")] += 1
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": "after", "method": "_test/echo"}))
        await drain(ws, "after")
        deadline = time.monotonic() + SETTLE
        while tally.missing() and time.monotonic() < deadline:
            await drain(ws, None)
        await drain(ws, None)
    except websockets.ConnectionClosed as exc:
        findings.add(f"ws: the socket closed at the end ({exc!r})")
    finally:
        await ws.close()
    _compare(tally, "ws", findings)
    return sent


async def fuzz(seed: int, count: int, engine_name: str | None, findings: Findings) -> tuple[int, int]:
    """Both paths against one app; returns the inputs sent on each."""
    import importlib

    engine = importlib.import_module("acp_fast._engine_py" if engine_name == "py" else "acp_fast.engine")
    app = testy_app(engine=engine_name)
    async with served(app) as where:
        trap = LogTrap()
        trap.attach()
        try:
            sent_http = await run_http(where.http_url, engine, random.Random(seed), count, findings)
            sent_ws = await run_ws(where.ws_url, engine, random.Random(seed + 1), count, findings)
        finally:
            trap.detach()
    findings.extend(f"logged: {text}" for text in trap.bad)
    return sent_http, sent_ws


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=1000, help="inputs per path (POST bodies; WebSocket frames)")
    ap.add_argument("--engine", choices=("c", "py"), default=None, help="the engine twin (default: the active one)")
    ap.add_argument("--show", type=int, default=5, help="findings to print in full")
    args = ap.parse_args(argv)
    findings = Findings()
    err = io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stderr(err):  # uvicorn's handlers write to the stderr they find
        sent_http, sent_ws = asyncio.run(fuzz(args.seed, args.count, args.engine, findings))
    if "Traceback" in err.getvalue() or "ERROR" in err.getvalue():
        findings.add(f"stderr: {err.getvalue()[-3000:]}")
    took = time.monotonic() - t0
    print(f"fuzz_remote: seed {args.seed}: {sent_http} POST bodies, {sent_ws} WebSocket frames, "
          f"{len(findings)} findings, {took:.1f} s")
    if findings:
        for text in findings[:args.show]:
            print(f"  {text}", file=sys.stderr)
        print(f"reproduce: python scripts/fuzz_remote.py --seed {args.seed} --count {args.count}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
