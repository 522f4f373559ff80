"""Deterministic, seeded ACP corpora for the benchmark suite (bench-side only).

Three corpora of line-delimited ACP JSON-RPC 2.0, one message per line, matching the
definitions in the project's baselines notes (the numbers are copied here; nothing in
``bench/`` reads the notes at runtime):

* ``mixed`` -- 200k lines, mean ~343 B: 70 % ``session/update`` ``agent_message_chunk``
  notifications (text of 80-200 characters), 10 % ``tool_call``/``tool_call_update``
  notifications with nested content, 10 % requests with integer ids
  (``session/request_permission``, ``fs/read_text_file``, ``fs/write_text_file``,
  ``terminal/create``), 10 % responses (results, ~5 % of them errors).
* ``small`` -- 200k lines, mean ~120 B: token-sized chunks, status-only tool call updates,
  ``session/cancel``, small requests and tiny results.
* ``large`` -- 5k lines, mean ~17 KB: long message chunks, file contents, diffs.

Shapes follow the ACP v1 schema (``sessionId``, ``update.sessionUpdate``,
``content: {type: "text", text}``, ``toolCallId``, ``title``, ``kind``, ``status``,
``rawInput``, ``locations``, ``options`` …). Text is drawn from a seeded word pool with some
non-ASCII (accents, CJK, Cyrillic, emoji, typographic punctuation) and characters that need
JSON escapes (newlines, quotes, backslashes, tabs), written as raw UTF-8 the way the official
SDKs write it. Lines are compact JSON with envelope keys in the order
``jsonrpc, id, method, params | result | error``, byte-identical to
``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)``.

Strategy: every choice comes from one ``random.Random(seed)`` per corpus, so a corpus is a
pure function of ``(name, lines)``; text is sliced from a pre-built pool instead of being
assembled word by word, which keeps generating all three corpora at full size to a few
seconds.

Size: ``ACP_FAST_BENCH_SCALE`` (a float, default 1.0) scales every corpus' line count;
:func:`bench_scale` reads it.

The stream is handed to decoders in :data:`CHUNK_SIZE` reads, as a pipe would deliver it,
so lines straddle chunk boundaries.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CHUNK_SIZE",
    "CORPUS_NAMES",
    "DEFAULT_LINES",
    "SEED",
    "REQUEST",
    "NOTIFICATION",
    "RESPONSE",
    "ERROR_RESPONSE",
    "Corpus",
    "Msg",
    "bench_scale",
    "build_corpus",
    "get_corpus",
]

#: Bytes per simulated pipe read.
CHUNK_SIZE = 64 * 1024
#: Base seed; each corpus mixes in its own name.
SEED = 20250601
#: Line counts at scale 1.0.
DEFAULT_LINES: dict[str, int] = {"mixed": 200_000, "small": 200_000, "large": 5_000}
CORPUS_NAMES: tuple[str, ...] = ("mixed", "small", "large")

# Frame kinds, same values as the engine's (plain ints; bench code must not need the engine
# to describe a corpus). ERROR_RESPONSE is bench-only: a response carrying ``error``.
REQUEST = 0
NOTIFICATION = 1
RESPONSE = 2
ERROR_RESPONSE = 5

#: One message as the generator built it: ``(kind, id, method, payload)``. ``payload`` is
#: ``params`` for calls, ``result`` for responses and the error object for error responses.
Msg = tuple[int, int | None, str | None, Any]

_stdlib_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _dumps(obj: Any) -> bytes:
    return _stdlib_dumps(obj).encode("utf-8")


try:  # Strategy: orjson writes the same bytes ~10x faster; _check_fast_dumps() proves it.
    import orjson as _orjson

    _fast_dumps: Callable[[Any], bytes] = _orjson.dumps
except ImportError:  # pragma: no cover - orjson is a bench dependency
    _fast_dumps = _dumps


def bench_scale(default: float = 1.0) -> float:
    """The corpus size factor from ``ACP_FAST_BENCH_SCALE`` (``default`` when unset)."""
    raw = os.environ.get("ACP_FAST_BENCH_SCALE", "").strip()
    if not raw:
        return default
    value = float(raw)
    if not value > 0:
        raise ValueError(f"ACP_FAST_BENCH_SCALE must be > 0, got {raw!r}")
    return value


@dataclass
class Corpus:
    """A generated corpus: the byte stream, its pipe-sized chunks and the ground truth.

    Attributes:
        name: ``"mixed"``, ``"small"`` or ``"large"``.
        data: the whole stream; every line ends with ``\\n``.
        chunks: ``data`` cut into :data:`CHUNK_SIZE` pieces (lines straddle boundaries).
        messages: what the generator encoded, one :data:`Msg` per line, in order.
    """

    name: str
    data: bytes
    chunks: list[bytes]
    messages: list[Msg] = field(repr=False)

    @property
    def lines(self) -> int:
        return len(self.messages)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    @property
    def mean_line(self) -> float:
        return self.nbytes / max(1, self.lines)

    def prefix(self, lines: int) -> Corpus:
        """The corpus made of the first ``lines`` lines (``self`` when it is not longer).

        Statistically the same stream (messages are drawn independently), so per-line rates
        measured on a prefix compare with rates measured on the whole corpus.
        """
        if lines <= 0 or lines >= self.lines:
            return self
        key = (self.name, self.lines, lines)
        sub = _PREFIXES.get(key)
        if sub is None:
            data = self.data
            pos = 0
            for _ in range(lines):
                pos = data.index(b"\n", pos) + 1
            head = data[:pos]
            chunks = [head[i:i + CHUNK_SIZE] for i in range(0, len(head), CHUNK_SIZE)]
            sub = _PREFIXES[key] = Corpus(self.name, head, chunks, self.messages[:lines])
        return sub


_PREFIXES: dict[tuple[str, int, int], Corpus] = {}


# ---------------------------------------------------------------------------------------
# Text pool
# ---------------------------------------------------------------------------------------

_WORDS = (
    "the a to of and in is it that for on with as this be are you can we will not or by "
    "from at file function return value error test build run code line module class type "
    "import python rust json request response session update agent client tool call read "
    "write path config server stream buffer parse decode encode message method params "
    "result id status pending completed failed the the the a a of of to to and and is in "
    "let me check first I found here now then next should would could because so but if "
    "when which where into over under async await def self None True False list dict str "
    "int bytes loop task queue handler router proxy terminal output input diff patch"
).split()
# Non-ASCII words (2, 3 and 4 byte UTF-8) and escape-needing tokens, mixed in sparsely.
_RARE = (
    "café", "naïve", "Zürich", "façade", "über", "—", "–", "…", "“quoted”", "→", "✓", "×",
    "日本語", "中文字符", "한국어", "Привет", "мир", "Ελληνικά", "🚀", "✅", "🙂", "📄",
    '"quote"', "C:\\Users\\dev", "a\\b", "\t", "\n", "\n\n", "```python\n", "\n```\n",
)


def _text_pool(rng: random.Random, chars: int) -> str:
    """A deterministic blob of prose-and-code-like text at least ``chars`` long.

    Roughly 1.5 % of the tokens are rare ones (non-ASCII or needing a JSON escape) and ~8 %
    are capitalised with punctuation, so about a fifth of the 80-200 character chunks
    carry non-ASCII text.
    """
    punct = (".", ",", ":", "!", "?")
    vocab = list(_WORDS) + [w.capitalize() + p for w in _WORDS for p in punct] + list(_RARE)
    n_plain, n_cap = len(_WORDS), len(_WORDS) * len(punct)
    weights = [0.905 / n_plain] * n_plain + [0.08 / n_cap] * n_cap + [0.015 / len(_RARE)] * len(_RARE)
    tokens = rng.choices(vocab, weights=weights, k=chars // 5 + 16)
    text = " ".join(tokens)
    while len(text) < chars:  # pragma: no cover - the estimate above is generous
        text += " " + text
    return text


class _Rng(random.Random):
    """``random.Random`` with cheaper ``choice``/``randint``/``randrange``.

    Strategy: the stdlib versions go through ``_randbelow`` (several Python calls each);
    scaling one ``random()`` is plenty for corpus generation and cuts build time in half.
    Deterministic for a given seed, like the base class.
    """

    def choice(self, seq: Any) -> Any:
        return seq[int(self.random() * len(seq))]

    def randint(self, a: int, b: int) -> int:
        return a + int(self.random() * (b - a + 1))

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        if stop is None:
            start, stop = 0, start
        return start + int(self.random() * (stop - start))


class _Gen:
    """Shared building blocks for one corpus (one RNG, one text pool)."""

    def __init__(self, seed: int, pool_chars: int) -> None:
        self.rng = _Rng(seed)
        self.pool = _text_pool(self.rng, pool_chars)
        self.next_out_id = 0  # ids of requests we emit
        self.next_in_id = 0  # ids of the peer's requests we answer
        self.sessions = [f"sess_{self.rng.getrandbits(96):024x}" for _ in range(4)]
        self.calls = [f"call_{self.rng.getrandbits(64):016x}" for _ in range(64)]

    def text(self, lo: int, hi: int) -> str:
        n = self.rng.randint(lo, hi)
        pool = self.pool
        start = self.rng.randrange(0, len(pool) - n)
        return pool[start:start + n]

    def session(self) -> str:
        return self.rng.choice(self.sessions)

    def call_id(self) -> str:
        return self.rng.choice(self.calls)

    def path(self) -> str:
        r = self.rng
        return "/home/dev/project/" + r.choice(("src", "tests", "lib", "docs")) + "/" + r.choice(
            ("main", "engine", "transport", "router", "conn", "schema", "util")
        ) + r.choice((".py", ".rs", ".ts", ".md", ".json"))

    def out_id(self) -> int:
        self.next_out_id += 1
        return self.next_out_id

    def in_id(self) -> int:
        self.next_in_id += 1
        return self.next_in_id

    # -- messages -------------------------------------------------------------------------

    def chunk(self, lo: int, hi: int, sid: str | None = None) -> Msg:
        params = {
            "sessionId": sid or self.session(),
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": self.text(lo, hi)},
            },
        }
        return (NOTIFICATION, None, "session/update", params)

    def tool_call(self) -> Msg:
        r = self.rng
        path = self.path()
        kind = r.choice(("read", "edit", "search", "execute", "fetch", "think"))
        update = {
            "sessionUpdate": "tool_call",
            "toolCallId": self.call_id(),
            "title": f"{kind.capitalize()} {path.rsplit('/', 1)[1]}",
            "kind": kind,
            "status": "pending",
            "locations": [{"path": path, "line": r.randint(1, 900)}],
            "rawInput": {"path": path, "offset": r.randint(0, 500), "limit": 200,
                          "pattern": self.text(4, 24)},
        }
        return (NOTIFICATION, None, "session/update", {"sessionId": self.session(), "update": update})

    def tool_call_update(self, lo: int, hi: int) -> Msg:
        r = self.rng
        if r.random() < 0.7:
            content: list[Any] = [
                {"type": "content", "content": {"type": "text", "text": self.text(lo, hi)}}
            ]
        else:
            content = [{"type": "diff", "path": self.path(), "oldText": self.text(lo // 2, hi // 2),
                        "newText": self.text(lo // 2, hi // 2)}]
        update = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": self.call_id(),
            "status": r.choice(("in_progress", "completed", "completed", "failed")),
            "content": content,
        }
        return (NOTIFICATION, None, "session/update", {"sessionId": self.session(), "update": update})

    def status_update(self) -> Msg:
        update = {"sessionUpdate": "tool_call_update", "toolCallId": self.call_id(),
                  "status": self.rng.choice(("in_progress", "completed"))}
        return (NOTIFICATION, None, "session/update", {"sessionId": "s1", "update": update})

    def request(self, text_lo: int, text_hi: int) -> Msg:
        r = self.rng
        x = r.random()
        sid = self.session()
        if x < 0.4:
            path = self.path()
            params: dict[str, Any] = {
                "sessionId": sid,
                "toolCall": {"toolCallId": self.call_id(), "title": f"Edit {path}", "kind": "edit",
                             "status": "pending", "rawInput": {"path": path,
                                                               "newText": self.text(text_lo, text_hi)}},
                "options": [
                    {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
                    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
                ],
            }
            return (REQUEST, self.out_id(), "session/request_permission", params)
        if x < 0.7:
            params = {"sessionId": sid, "path": self.path(), "line": r.randint(1, 400), "limit": 200}
            return (REQUEST, self.out_id(), "fs/read_text_file", params)
        if x < 0.9:
            params = {"sessionId": sid, "path": self.path(), "content": self.text(text_lo, text_hi)}
            return (REQUEST, self.out_id(), "fs/write_text_file", params)
        params = {"sessionId": sid, "command": "pytest", "args": ["-q", "-x", "tests/"],
                  "cwd": "/home/dev/project", "outputByteLimit": 65536}
        return (REQUEST, self.out_id(), "terminal/create", params)

    def response(self, text_lo: int, text_hi: int) -> Msg:
        r = self.rng
        ident = self.in_id()
        x = r.random()
        if x < 0.05:
            err = {"code": -32603, "message": "Internal error",
                   "data": {"details": self.text(20, 80)}}
            return (ERROR_RESPONSE, ident, None, err)
        if x < 0.35:
            result: Any = {"outcome": {"outcome": "selected",
                                       "optionId": r.choice(("allow-once", "reject-once"))}}
        elif x < 0.65:
            result = {"content": self.text(text_lo, text_hi)}
        elif x < 0.8:
            result = {"stopReason": r.choice(("end_turn", "max_tokens", "cancelled"))}
        elif x < 0.9:
            result = {"terminalId": f"term_{r.getrandbits(32):08x}"}
        else:
            result = {}
        return (RESPONSE, ident, None, result)

    def tiny_response(self) -> Msg:
        r = self.rng
        result: Any = r.choice(({}, None, {"stopReason": "end_turn"}))
        return (RESPONSE, self.in_id(), None, result)


def _mixed(g: _Gen) -> Msg:
    x = g.rng.random()
    if x < 0.70:
        return g.chunk(80, 200)
    if x < 0.75:
        return g.tool_call()
    if x < 0.80:
        return g.tool_call_update(60, 600)
    if x < 0.90:
        return g.request(60, 500)
    return g.response(60, 600)


def _small(g: _Gen) -> Msg:
    x = g.rng.random()
    if x < 0.45:
        return g.chunk(1, 6, sid="s1")
    if x < 0.57:
        return g.status_update()
    if x < 0.70:
        return (NOTIFICATION, None, "session/cancel", {"sessionId": "s1"})
    if x < 0.80:
        params = {"sessionId": "s1", "path": g.rng.choice(("a.py", "lib.rs", "README.md"))}
        return (REQUEST, g.out_id(), "fs/read_text_file", params)
    return g.tiny_response()


def _large(g: _Gen) -> Msg:
    x = g.rng.random()
    if x < 0.50:
        return g.chunk(9_000, 28_000)
    if x < 0.70:
        return g.tool_call_update(12_000, 35_000)
    if x < 0.80:
        return g.request(9_000, 28_000)
    return g.response(12_000, 35_000)


_KINDS: dict[str, tuple[Callable[[_Gen], Msg], int]] = {
    # name: (message generator, text pool size in characters)
    "mixed": (_mixed, 1 << 20),
    "small": (_small, 1 << 16),
    "large": (_large, 1 << 20),
}


def _envelope(msg: Msg) -> dict[str, Any]:
    kind, ident, method, payload = msg
    if kind == NOTIFICATION:
        obj: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": payload}
    elif kind == REQUEST:
        obj = {"jsonrpc": "2.0", "id": ident, "method": method, "params": payload}
    elif kind == RESPONSE:
        obj = {"jsonrpc": "2.0", "id": ident, "result": payload}
    else:
        obj = {"jsonrpc": "2.0", "id": ident, "error": payload}
    return obj


def encode_msg(msg: Msg) -> bytes:
    """The compact JSON line (without ``\\n``) for one generated message.

    Byte-identical to ``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)``.
    """
    return _dumps(_envelope(msg))


def _encode_all(messages: list[Msg]) -> bytes:
    """The whole stream; uses orjson when it provably writes the stdlib's bytes."""
    head = messages[:500]
    fast = _fast_dumps
    if [fast(_envelope(m)) for m in head] != [encode_msg(m) for m in head]:
        fast = _dumps  # pragma: no cover - would mean orjson changed its output
    return b"\n".join([fast(_envelope(m)) for m in messages]) + b"\n"


def build_corpus(name: str, lines: int, chunk_size: int = CHUNK_SIZE) -> Corpus:
    """Generate corpus ``name`` with ``lines`` messages (deterministic for given args)."""
    if name not in _KINDS:
        raise ValueError(f"unknown corpus {name!r}; expected one of {CORPUS_NAMES}")
    make, pool_chars = _KINDS[name]
    seed = SEED ^ int.from_bytes(name.encode(), "little")
    g = _Gen(seed, pool_chars)
    messages = [make(g) for _ in range(max(1, lines))]
    data = _encode_all(messages)
    chunks = [data[i:i + chunk_size] for i in range(0, len(data), chunk_size)]
    return Corpus(name=name, data=data, chunks=chunks, messages=messages)


_CACHE: dict[tuple[str, int], Corpus] = {}


def get_corpus(name: str, scale: float = 1.0) -> Corpus:
    """The corpus ``name`` at ``scale`` times its default size, generated once per process."""
    lines = max(1, round(DEFAULT_LINES[name] * scale))
    key = (name, lines)
    corpus = _CACHE.get(key)
    if corpus is None:
        corpus = _CACHE[key] = build_corpus(name, lines)
    return corpus


if __name__ == "__main__":  # pragma: no cover - manual inspection helper
    import sys
    import time

    scale = float(sys.argv[1]) if len(sys.argv) > 1 else bench_scale()
    for corpus_name in CORPUS_NAMES:
        t0 = time.perf_counter()
        c = get_corpus(corpus_name, scale)
        dt = time.perf_counter() - t0
        kinds = [0] * 6
        for m in c.messages:
            kinds[m[0]] += 1
        non_ascii = sum(not line.isascii() for line in c.data.split(b"\n")[:-1])
        print(f"{corpus_name}: {c.lines} lines, {c.nbytes / 1e6:.1f} MB, mean {c.mean_line:.0f} B, "
              f"req/notif/resp/err {kinds[0]}/{kinds[1]}/{kinds[2]}/{kinds[5]}, "
              f"non-ASCII lines {non_ascii}, {len(c.chunks)} chunks, built in {dt:.2f}s")
