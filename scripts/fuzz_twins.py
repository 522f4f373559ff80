#!/usr/bin/env python3
"""Differential fuzz of the engine twins (``acp_fast._engine_py`` vs ``acp_fast._engine_c``).

Decoding: random traffic (valid messages of every kind, batches, random JSON values with
every sort of string -- lone surrogate escapes included --, mutations of valid lines:
flipped, deleted and inserted bytes, truncations, invalid UTF-8, deep nesting around
``max_depth``, lines around ``max_line_size``, blank and CRLF lines) is decoded by both twins,
eager and lazy, fed whole, byte by byte and split at random points; every way must give the
same frames (kind, ids, methods, payloads decoded and raw, ``forward`` output, error replies,
batch replies).

Forwarding: the same traffic (plus successor envelopes of every shape) is fed to both twins
``Forwarder`` (random chain shape and hop, every hop on the fast path, a few requests
pending), split at random points; the claimed frames, every hop's output bytes and the
tables after each chunk must be the same.

Encoding: random Python values (lone surrogates, big ints, floats, nested containers,
non-str keys, ``RawJson``) go through both twins' ``encode_value``/``encode_result``; the
output must equal ``json.dumps(..., separators=(",", ":"), ensure_ascii=False,
allow_nan=False)`` as UTF-8 with lone surrogates written as ``\\udxxx`` escapes, be valid
UTF-8, and decode back (with both twins) to an equal value; values ``json.dumps`` refuses
must raise ``EncodeError`` in both.

Crashes: ``Decoder.feed`` never raises for bad input, and neither do the other calls made
here on frames the decoder returned (``forward``, ``error_reply``, ``BatchReply``, the
``Forwarder`` methods with valid arguments): an exception from either twin -- even the same
exception from both -- is a finding, as is a decoder holding more than ``max_line_size + 1``
bytes (``Decoder.buffered``). The only exceptions compared as values are the ones an API
documents: ``EncodeError`` from the encoders.

Usage: python scripts/fuzz_twins.py --seed 1 --count 20000
Prints one summary line; exits 1 on any divergence or crash (printing the first ones with
the seed, the input index and a command that reproduces them), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from acp_fast import _engine_c as C  # noqa: E402
from acp_fast import _engine_py as P  # noqa: E402
from acp_fast._strictjson import utf8_json  # noqa: E402
from acp_fast.errors import EncodeError  # noqa: E402

TWINS = (("py", P), ("c", C))


class Crash(Exception):
    """An exception raised by a twin where its API never raises (a finding by itself)."""

    def __init__(self, twin: str, exc: BaseException) -> None:
        self.twin = twin
        self.exc = exc
        tb = traceback.extract_tb(exc.__traceback__)[-3:]
        where = "; ".join(f"{Path(fr.filename).name}:{fr.lineno} in {fr.name}" for fr in tb)
        super().__init__(f"{twin} raised {exc!r} (at {where})")


class BoundExceeded(Exception):
    """A decoder buffered more than its line limit allows."""


def run_twin(name: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, with any exception turned into a :class:`Crash` naming the twin."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - any exception is a finding
        raise Crash(name, exc) from exc


# ---------------------------------------------------------------------------------------
# Random JSON text and values
# ---------------------------------------------------------------------------------------

_ESCAPES = ['\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u0041", "\\u00e9",
            "\\u2028", "\\ud83d\\ude00", "\\ud800", "\\udc00", "\\uDBFF", "\\udc00\\ud800",
            "\\ud800\\u0041", "\\u0000", "\\u001f"]
_CHARS = ["a", "z", " ", "é", "漢", "😀", "\u2028", "\x7f", "id", "method", "2.0"]


class Gen:
    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def string_text(self) -> str:
        r = self.r
        parts = []
        for _ in range(r.randint(0, 6)):
            parts.append(r.choice(_ESCAPES) if r.random() < 0.35 else r.choice(_CHARS))
        return '"' + "".join(parts) + '"'

    def number_text(self) -> str:
        r = self.r
        return r.choice([
            "0", "-0", "1", "-1", str(r.randint(-10**6, 10**6)), str(2**63 - 1), str(-2**63),
            str(2**63), str(r.randint(10**20, 10**25)), "1.5", "-0.0", "1e3", "1E-3", "2.5e+10",
            "1e308", "1e400", "-1e400", "0.1", "123456789012345678901234567890.5",
            "01", "1.", ".5", "-", "1e", "+1", "NaN", "Infinity",
        ])

    def value_text(self, depth: int = 0) -> str:
        r = self.r
        k = r.random()
        if depth > 4 or k < 0.45:
            return r.choice([self.string_text, self.number_text,
                             lambda: r.choice(["true", "false", "null"])])()
        if k < 0.75:
            return "[" + ",".join(self.value_text(depth + 1) for _ in range(r.randint(0, 4))) + "]"
        members = [f"{self.string_text()}:{self.value_text(depth + 1)}" for _ in range(r.randint(0, 4))]
        return "{" + ",".join(members) + "}"

    def ws(self) -> str:
        return self.r.choice(["", "", "", " ", "\t", " \r "])

    def envelope(self) -> str:
        r = self.r
        ident = r.choice(["1", "0", "-5", '"a"', '"\\ud800"', "null", "1.5", "true", str(2**63),
                          "[1]", str(r.randint(0, 10**6))])
        method = r.choice(['"m"', '"session/prompt"', '"é"', '"\\udc00"', "1", "null"])
        payload = self.value_text(1)
        shape = r.randint(0, 9)
        members: list[str] = []
        if r.random() < 0.95:
            members.append('"jsonrpc":' + r.choice(['"2.0"'] * 8 + ['"1.0"', "2", '"2.0 "']))
        if shape <= 3:  # request / notification
            if shape <= 2:
                members.append(f'"id":{ident}')
            members.append(f'"method":{method}')
            if r.random() < 0.8:
                members.append('"params":' + r.choice([payload, "{}", "[]", "null", "3"]))
        elif shape <= 6:  # result
            members.append(f'"id":{ident}')
            members.append(f'"result":{payload}')
        elif shape <= 8:  # error
            members.append(f'"id":{ident}')
            code = r.choice(["-32601", "1", "1.5", '"x"', str(2**31)])
            members.append('"error":{"code":' + code + ',"message":' + r.choice(['"no"', "1"])
                           + (',"data":' + payload if r.random() < 0.5 else "") + "}")
        else:  # odd
            members += [f'"id":{ident}', f'"method":{method}', f'"result":{payload}']
        if r.random() < 0.15:
            members.append(self.string_text() + ":" + self.value_text(2))
        if r.random() < 0.05:
            members.append(r.choice(members))  # a duplicate key
        r.shuffle(members)
        sep = "," + self.ws()
        return "{" + self.ws() + sep.join(m.replace(":", self.ws() + ":" + self.ws(), 1) for m in members) + "}"

    def successor(self) -> str:
        """A successor envelope (or a proxy-chain method) of a random, often irregular, shape."""
        r = self.r
        outer = r.choice(['"_proxy/successor"', '"proxy/successor"', '"_proxy/successor"',
                          '"initialize"', '"$/cancel_request"', '"_proxy/initialize"'])
        members = ['"method":' + r.choice(['"m"', '"session/update"', '"é"', '"$/cancel_request"',
                                           '"initialize"', '"proxy/initialize"', '"_proxy/successor"',
                                           '"m\\u0078"', "3", "null"])]
        if r.random() < 0.7:
            members.append('"params":' + r.choice([self.value_text(1), "{}", "[]", "null", "3", '"s"']))
        for key in ('"_meta"', '"meta"', '"x"', '"id"', '"meth\\u006fd"', '"para\\u006ds"',
                    '"params"', '"method"'):
            if r.random() < 0.08:
                members.append(key + ":" + self.value_text(2))
        if r.random() < 0.05:
            members = []
        r.shuffle(members)
        sep = "," + self.ws()
        inner = "{" + self.ws() + sep.join(m.replace(":", self.ws() + ":" + self.ws(), 1)
                                           for m in members) + self.ws() + "}"
        if r.random() < 0.05:
            inner = self.value_text(1)
        ident = r.choice(['"id":1,', '"id":"w",', '"id":null,', ""])
        return '{"jsonrpc":"2.0",' + ident + '"method":' + outer + ',"params":' + inner + "}"

    def line(self, max_depth: int, max_line: int) -> bytes:
        r = self.r
        if r.random() < 0.12:
            return self.successor().encode("utf-8", "surrogatepass")
        k = r.random()
        if k < 0.45:
            text = self.envelope()
        elif k < 0.6:
            text = "[" + ",".join(self.envelope() if r.random() < 0.8 else self.value_text(1)
                                  for _ in range(r.randint(0, 6))) + "]"
        elif k < 0.67:
            text = self.value_text()
        elif k < 0.72:
            d = r.randint(max(1, max_depth - 2), max_depth + 2)
            inner = "[" * (d - 1) + "]" * (d - 1)
            text = '{"jsonrpc":"2.0","method":"deep","params":' + (inner or "null") + "}"
        elif k < 0.75:
            pad = max(0, max_line - 40 + r.randint(-3, 3))
            text = '{"jsonrpc":"2.0","method":"long","params":["' + "x" * pad + '"]}'
        elif k < 0.78:
            text = r.choice(["", " ", "\t", "\r"])
        else:
            text = self.envelope()
        data = text.encode("utf-8", "surrogatepass")
        if k >= 0.78:
            data = self.mutate(data)
        if r.random() < 0.05:
            data += b"\r"
        return data.replace(b"\n", b" ") if b"\n" in data else data

    def mutate(self, data: bytes) -> bytes:
        r = self.r
        b = bytearray(data)
        for _ in range(r.randint(1, 3)):
            op = r.randint(0, 5)
            i = r.randint(0, len(b)) if b else 0
            if op == 0 and b:
                b[min(i, len(b) - 1)] = r.randint(0, 255)
            elif op == 1 and b:
                del b[min(i, len(b) - 1)]
            elif op == 2:
                b[i:i] = bytes([r.choice(b'{}[],:"\\ \x00\xff\xc3\xed\xa0\x80')])
            elif op == 3:
                b = b[:i]
            elif op == 4:
                b[i:i] = r.choice([b"\\ud800", b"\\u", b'"', b"\xef\xbb\xbf", b"\xed\xa0\x80", b"1e999"])
            else:
                b[i:i] = b[i:i + r.randint(1, 8)]
        return bytes(b)

    def value(self, depth: int = 0) -> Any:
        r = self.r
        k = r.random()
        if depth > 4 or k < 0.5:
            return r.choice([
                lambda: "".join(r.choice(["a", "é", "😀", "\ud800", "\udfff", "\n", '"', "\\",
                                          "\x00", "\u2028", "\ud83d\ude00"])
                                for _ in range(r.randint(0, 5))),
                lambda: r.randint(-2**70, 2**70), lambda: r.randint(-100, 100),
                lambda: r.choice([0.0, -0.0, 1.5, 1e300, 5e-324, 0.1, r.random() * 1e10]),
                lambda: r.choice([True, False, None]),
                lambda: r.choice([math.nan, math.inf, object(), b"x", {1, 2}]) if r.random() < 0.05 else 1,
                lambda: P.RawJson(r.choice([b"1", b'{"a":[1,2]}', b'"x"', b" [ ] "])),
            ])()
        if k < 0.75:
            return [self.value(depth + 1) for _ in range(r.randint(0, 4))]
        keys = [r.choice(["k", "é", "\ud800", 1, 2.5, True, None, "k2"]) for _ in range(r.randint(0, 4))]
        return {k: self.value(depth + 1) for k in keys}


# ---------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------


def _norm(v: Any) -> Any:
    """A comparable form keeping types apart (1 / 1.0 / True, -0.0 / 0.0)."""
    t = type(v)
    if t is dict:
        return ("d", tuple((_norm(k), _norm(x)) for k, x in v.items()))
    if t is list:
        return ("l", tuple(_norm(x) for x in v))
    if t is float:
        return ("f", repr(v))
    return (t.__name__, v)


def _raw(x: Any) -> Any:
    return None if x is None else bytes(x)


def describe(engine: Any, f: Any) -> Any:
    kind = f.kind
    if kind == engine.MALFORMED:
        return ("M", bytes(f.raw), f.code, f.reason, f.response_shaped, engine.error_reply(f))
    if kind == engine.BATCH:
        reply = engine.BatchReply(f)
        reply.fill_dropped()
        return ("B", bytes(f.raw), tuple(describe(engine, e) for e in f), reply.encode())
    raws = (_raw(f.params_raw), _raw(f.result_raw))
    return (kind, _norm(f.id), _norm(f.method), _norm(f.error), raws, _norm(f.params),
            _norm(f.result), bytes(f.raw), engine.forward(f),
            engine.forward(f, "z\ud800") if kind != engine.NOTIFICATION else None)


def decode_all(engine: Any, data: bytes, cuts: list[int], lazy: bool, kw: dict[str, int]) -> Any:
    dec = engine.Decoder(lazy=lazy, **kw)
    frames: list[Any] = []
    prev = 0
    for cut in cuts + [len(data)]:
        frames += dec.feed(data[prev:cut])
        # (not an assert: it must hold under python -O too, and is a finding of its own)
        if not dec.buffered <= kw["max_line_size"] + 1:
            raise BoundExceeded(f"Decoder.buffered={dec.buffered} > max_line_size + 1 = "
                                f"{kw['max_line_size'] + 1} after {cut} bytes")
        prev = cut
    frames += dec.feed_eof()
    return [describe(engine, f) for f in frames]


def forward_all(engine: Any, data: bytes, cuts: list[int], proxies: int, agent: bool, hop: int,
                kw: dict[str, int]) -> Any:
    """Everything a Forwarder does with ``data`` read from ``hop``, chunk by chunk."""
    fw = engine.Forwarder(proxies, agent=agent, **kw)
    for h in range(fw.hops):
        fw.set_fast(h, True)
        for sid in ("x", 7, None):  # responses 1..3 on every hop find a pending entry
            fw.add_pending(h, (h + 1) % fw.hops, sid, 0 if sid is not None else 2)
    out: list[Any] = []
    prev = 0
    h = hop % fw.hops
    for cut in cuts + [len(data)]:
        out.append([describe(engine, f) for f in fw.feed(h, data[prev:cut])])
        out.append(fw.take_all())
        prev = cut
    out.append([describe(engine, f) for f in fw.feed_eof(h)])
    out.append(fw.take_all())
    out.append([(fw.pending(x), fw.owed(x), fw.successor(x)) for x in range(fw.hops)])
    out.append((fw.dropped, fw.find_pending(h, 1), fw.drain_from(h)))
    return out


# ---------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------


def _has_raw(v: Any) -> bool:
    if isinstance(v, P.RawJson):
        return True
    if type(v) is list:
        return any(_has_raw(x) for x in v)
    if type(v) is dict:
        return any(_has_raw(x) for x in v.values())
    return False


def _strip_raw(v: Any) -> Any:
    if isinstance(v, P.RawJson):
        return json.loads(v)
    if type(v) is list:
        return [_strip_raw(x) for x in v]
    if type(v) is dict:
        return {k: _strip_raw(x) for k, x in v.items()}
    return v


def expected_encoding(v: Any) -> bytes | None:
    try:
        text = json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
    return utf8_json(text)


def check_encoders(value: Any, twins: Any = None) -> str | None:
    """The problem with encoding ``value`` (a divergence or a crash), or None.

    ``EncodeError`` is the encoders' documented error for a value JSON cannot represent:
    it is compared as a value. Any other exception, from a twin or from decoding the
    encoded text back, is a crash and reported as such.
    """
    twins = TWINS if twins is None else twins
    try:
        return _check_encoders(value, twins)
    except Crash as exc:
        return f"crash: {exc}"
    except Exception as exc:  # noqa: BLE001 - any exception is a finding
        return f"crash: {Crash('check', exc)}"


def _check_encoders(value: Any, twins: Any) -> str | None:
    if _has_raw(value):
        outs = []
        for name, eng in twins:
            try:
                outs.append(run_twin(name, lambda: eng.encode_value(value)))
            except Crash as crash:
                if not isinstance(crash.exc, EncodeError):
                    raise
                outs.append(("error", type(crash.exc).__name__))
        if outs[0] != outs[1]:
            return f"RawJson encoding differs: {outs!r}"
        if isinstance(outs[0], bytes):
            plain = expected_encoding(_strip_raw(value))
            if plain is not None and json.loads(outs[0]) != json.loads(plain):
                return f"RawJson splice changes the value: {outs[0]!r}"
        return None
    want = expected_encoding(value)
    for name, eng in twins:
        for call, wrap in ((eng.encode_value, lambda b: b),
                           (lambda v: eng.encode_result(7, v),
                            lambda b: b'{"jsonrpc":"2.0","id":7,"result":' + b + b"}\n")):
            try:
                got = run_twin(name, lambda: call(value))  # noqa: B023 - called at once
            except Crash as crash:
                if not isinstance(crash.exc, EncodeError):
                    raise
                if want is not None:
                    return f"{name}: EncodeError for a value json.dumps encodes: {value!r}"
                continue
            if want is None:
                return f"{name}: encoded a value json.dumps refuses: {value!r} -> {got!r}"
            if got != wrap(want):
                return f"{name}: {got!r} != {wrap(want)!r} for {value!r}"
            got.decode("utf-8")  # never invalid UTF-8
    if want is not None:
        line = b'{"jsonrpc":"2.0","id":1,"result":' + want + b"}\n"
        expect = _norm(json.loads(want))
        for name, eng in twins:
            (m,) = run_twin(name, lambda: eng.Decoder().feed(line))  # noqa: B023 - called at once
            if _norm(m.result) != expect:
                return f"{name}: round trip differs for {value!r}"
    return None


def compare_decoding(data: bytes, ways: dict[str, list[int]], kw: dict[str, int],
                     twins: Any = None) -> tuple[list[str], int]:
    """Decode ``data`` with every twin, eager and lazy, every way of cutting it.

    Returns the problems found (a crash of any twin, or a result that differs from the
    first one) and the number of frames of the first result. A crash is never a reference:
    two twins crashing alike is two findings, not an agreement.
    """
    twins = TWINS if twins is None else twins
    problems: list[str] = []
    reference = None
    ref_name = ""
    frames = 0
    for lazy in (False, True):
        for name, eng in twins:
            for way, cuts in ways.items():
                where = f"{name}, lazy={lazy}, {way}"
                try:
                    got = run_twin(name, lambda: decode_all(eng, data, cuts, lazy, kw))  # noqa: B023
                except Crash as crash:
                    problems.append(f"crash ({where}): {crash}")
                    continue
                if reference is None:
                    reference, ref_name = got, where
                    frames = len(got)
                elif got != reference:
                    problems.append(f"divergence ({where} vs {ref_name}):\n  got={got!r}\n"
                                    f"  reference={reference!r}")
    return problems, frames


def compare_forwarding(data: bytes, cuts: list[int], proxies: int, agent: bool, hop: int,
                       kw: dict[str, int], twins: Any = None) -> list[str]:
    """Run ``data`` through every twin's Forwarder; the crashes and the divergence found."""
    twins = TWINS if twins is None else twins
    problems: list[str] = []
    outs = []
    for name, eng in twins:
        try:
            outs.append((name, run_twin(name, lambda: forward_all(eng, data, cuts, proxies, agent, hop, kw))))  # noqa: B023
        except Crash as crash:
            problems.append(f"crash: {crash}")
    if len(outs) == len(twins) and outs[0][1] != outs[1][1]:
        problems.append(f"divergence:\n  {outs[0][0]}={outs[0][1]!r}\n  {outs[1][0]}={outs[1][1]!r}")
    return problems


# ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=2000, help="decoder inputs (and as many encoder values)")
    ap.add_argument("--show", type=int, default=3, help="findings (divergences, crashes) to print in full")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    gen = Gen(rng)
    t0 = time.monotonic()
    lines_total = frames_total = divergences = crashes = 0
    failures: list[str] = []
    for i in range(args.count):
        max_depth = rng.choice([P.DEFAULT_MAX_DEPTH, 3, 8, rng.randint(1, 12)])
        max_line = rng.choice([P.DEFAULT_MAX_LINE_SIZE, 200, rng.randint(20, 400)])
        kw = {"max_depth": max_depth, "max_line_size": max_line,
              "max_batch_size": rng.choice([P.DEFAULT_MAX_BATCH_SIZE, 2, 4])}
        lines = [gen.line(max_depth, max_line) for _ in range(rng.randint(1, 8))]
        data = b"\n".join(lines) + (b"\n" if rng.random() < 0.9 else b"")
        lines_total += len(lines)
        ways = {"whole": []}
        if len(data) <= 4096:
            ways["bytewise"] = list(range(1, len(data)))
        ways["random"] = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 6)))) \
            if len(data) > 1 else []
        reproduce = f"python scripts/fuzz_twins.py --seed {args.seed} --count {i + 1}"
        problems, frames = compare_decoding(data, ways, kw)
        frames_total += frames
        for problem in problems:
            crash = problem.startswith("crash")
            crashes, divergences = crashes + crash, divergences + (not crash)
            if len(failures) < args.show:
                failures.append(f"decoder, input #{i} (seed {args.seed}, {kw}; reproduce: {reproduce}):\n"
                                f"  data={data!r}\n  {problem}")
        proxies, agent, hop = rng.randint(0, 3), rng.random() < 0.8, rng.randint(0, 4)
        fkw = {k: v for k, v in kw.items() if k != "max_depth"} | {"max_depth": max(max_depth, 2)}
        for problem in compare_forwarding(data, ways["random"], proxies, agent, hop, fkw):
            crash = problem.startswith("crash")
            crashes, divergences = crashes + crash, divergences + (not crash)
            if len(failures) < args.show:
                failures.append(f"forwarder, input #{i} (seed {args.seed}, proxies={proxies}, agent={agent}, "
                                f"hop={hop}, {fkw}; reproduce: {reproduce}):\n  data={data!r}\n  {problem}")
        value = gen.value()
        problem = check_encoders(value)
        if problem:
            crash = problem.startswith("crash")
            crashes, divergences = crashes + crash, divergences + (not crash)
            if len(failures) < args.show:
                failures.append(f"encoder, value #{i} (seed {args.seed}; reproduce: {reproduce}): {problem}")
    dt = time.monotonic() - t0
    for f in failures:
        print(f, file=sys.stderr)
    print(f"fuzz_twins: seed={args.seed} inputs={args.count} lines={lines_total} frames={frames_total} "
          f"encoder_values={args.count} divergences={divergences} crashes={crashes} ({dt:.1f}s)")
    if divergences or crashes:
        print(f"fuzz_twins: FAILED: {divergences} divergence(s), {crashes} crash(es) "
              f"(seed {args.seed}; the first {min(args.show, divergences + crashes)} printed above)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
