"""The benchmarked workloads: one function per (scenario, implementation).

Implementations, side by side in one run:

* ``c`` -- the compiled twin, ``acp_fast._engine_c`` (absent until it is built);
* ``py`` -- the pure-Python twin, ``acp_fast._engine_py`` (the reference);
* ``orjson`` -- split lines + ``orjson.loads`` + the same routing work in Python (check
  ``jsonrpc``, classify the kind by keys, read ``id``/``method``); it has no lazy mode, so
  its "lazy" rows decode everything;
* ``msgspec`` -- as its author would write it: ``msgspec.json`` decoding whole chunks with
  ``decode_lines`` straight into a Struct whose ``jsonrpc: Literal["2.0"]`` is checked while
  decoding: :class:`Message` (bodies ``Any``) for eager decoding, :class:`Envelope`
  (``params``/``result``/``error`` kept ``msgspec.Raw``) for lazy decoding and routing (the
  "envelope with the body kept raw" baseline); forwarding decodes each line into the
  Envelope and re-emits it with ``id`` replaced (notifications pass through unchanged).

Scenarios (each takes the corpus' pipe-sized chunks, or its Python messages for encode):

* ``decode-eager`` / ``decode-lazy`` -- feed every chunk, hand each chunk's frames to a
  sink; the timed runs drop them (streaming: memory stays bounded and hot), the verify run
  keeps them;
* ``route`` -- lazy feed, then per frame read ``kind``, ``id``, ``method`` only and do a tiny
  dispatch-table count; returns that digest;
* ``forward`` -- lazy feed, ``forward(msg, new_id)`` for requests and responses, verbatim
  for notifications; returns the output lines;
* ``encode`` -- encode the corpus' messages from Python objects (``encode_notification``,
  ``encode_request``, ``encode_result``, ``encode_error``; baselines serialise the
  equivalent envelope dict); returns the output lines;
* ``forwarder`` (engine twins only) -- the conductor's path, :class:`engine.Forwarder`
  with no proxies, the corpus read from the agent's hop: one ``feed`` per chunk routes
  every line (notifications verbatim, the agent's requests re-id'd on the client's hop,
  responses mapped back through the pending table, which the run first fills with one
  entry per response of the corpus, as the client's requests would have: that setup is
  not timed, see :func:`get_setup`); the client hop's output is taken per chunk and kept;
  returns the chunks;
* ``forwarder-route`` -- the same routing, the output taken per chunk and dropped (only
  its size is summed): frame, validate, classify, re-id and update the tables without
  keeping anything; returns ``(bytes out, requests pending, responses dropped)``.

:func:`summarize` turns any implementation's result into one comparable value, so the
suite can flag a fast-but-wrong implementation against the pure twin.

Strategy: a baseline "frame" is the tuple ``(kind, id, method, payload)`` -- one object per
message, like the engine's frame -- built after the same classification the engine does.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from .corpus import ERROR_RESPONSE, NOTIFICATION, REQUEST, RESPONSE, Msg

__all__ = [
    "IMPLS",
    "SCENARIOS",
    "FIRST_NEW_ID",
    "FIRST_CLIENT_ID",
    "FORWARDER_SCENARIOS",
    "ForwarderInput",
    "SAMPLE_EVERY",
    "load_engine",
    "engine_import_error",
    "baseline_available",
    "get_runner",
    "get_setup",
    "summarize",
]

IMPLS: tuple[str, ...] = ("py", "c", "orjson", "msgspec")
SCENARIOS: tuple[str, ...] = ("decode-eager", "decode-lazy", "route", "forward", "encode",
                              "forwarder", "forwarder-route")
#: The scenarios only the engine twins run (the conductor's Forwarder API).
FORWARDER_SCENARIOS: tuple[str, ...] = ("forwarder", "forwarder-route")
#: ``forwarder``: the client's ids of the requests the corpus' responses answer start here.
FIRST_CLIENT_ID = 1_000_000
#: ``forward`` gives requests and responses new ids counting up from here.
FIRST_NEW_ID = 1_000_000
#: Decode summaries compare the payload of every ``SAMPLE_EVERY``-th message.
SAMPLE_EVERY = 97

Chunks = Sequence[bytes]
Sink = Callable[[list[Any]], Any]
Runner = Callable[..., Any]

# ---------------------------------------------------------------------------------------
# Implementation loading
# ---------------------------------------------------------------------------------------

_ENGINE_MODULES = {"c": "acp_fast._engine_c", "py": "acp_fast._engine_py"}
_import_errors: dict[str, str] = {}
_probed = False


def _probe_compiled_twin() -> None:
    """Import the compiled twin in a child interpreter before this process touches it.

    Strategy: a broken build (a sanitizer build, an ABI mismatch) can kill the interpreter
    on import instead of raising ``ImportError``, and ``import acp_fast`` loads the compiled
    twin when it is present. If the child dies, the compiled rows are skipped with its last
    words as the reason and ``ACP_FAST_NO_EXTENSIONS=1`` keeps this process on the pure twin.
    """
    global _probed
    if _probed:
        return
    _probed = True
    if os.environ.get("ACP_FAST_NO_EXTENSIONS", "") not in ("", "0"):
        _import_errors["c"] = "ACP_FAST_NO_EXTENSIONS is set"
        return
    spec = importlib.util.find_spec("acp_fast")
    env = dict(os.environ)
    if spec is not None and spec.origin:
        root = os.path.dirname(os.path.dirname(spec.origin))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (root, env.get("PYTHONPATH"))))
    code = "import acp_fast._engine_c"  # this acp_fast, never the working directory's: -P (3.10: drop '')
    argv = ([sys.executable, "-P", "-c", code] if sys.version_info >= (3, 11)
            else [sys.executable, "-c", "import sys;del sys.path[0];" + code])
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        proc = None
    if proc is not None and proc.returncode == 0:
        return
    if proc is None:
        why = "importing it in a child interpreter timed out"
    else:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        why = f"importing it in a child interpreter failed (exit {proc.returncode}): {last[:300]}"
    _import_errors["c"] = why
    os.environ["ACP_FAST_NO_EXTENSIONS"] = "1"


def load_engine(impl: str) -> ModuleType | None:
    """The twin module for ``"c"``/``"py"``, or ``None`` when it cannot be imported."""
    _probe_compiled_twin()
    if impl in _import_errors:
        return None
    try:
        return importlib.import_module(_ENGINE_MODULES[impl])
    except ImportError as exc:
        _import_errors[impl] = f"{type(exc).__name__}: {exc}"
        return None


def engine_import_error(impl: str) -> str:
    """Why :func:`load_engine` returned ``None`` (empty when it did not)."""
    return _import_errors.get(impl, "")


def baseline_available(impl: str) -> str | None:
    """``None`` when baseline ``impl`` can run, else the reason it cannot."""
    try:
        importlib.import_module(impl)
    except ImportError as exc:
        return f"{impl} not installed ({exc}); pip install -e '.[bench]'"
    return None


def _drop(frames: list[Any]) -> None:
    """Sink of the timed decode runs: frames die with their chunk, as in a stream."""


# ---------------------------------------------------------------------------------------
# Engine twins (c and py share the code; only the module differs)
# ---------------------------------------------------------------------------------------


def _engine_decode(mod: ModuleType, lazy: bool) -> Runner:
    def run(chunks: Chunks, sink: Sink = _drop) -> int:
        feed = mod.Decoder(lazy=lazy).feed
        n = 0
        for chunk in chunks:
            frames = feed(chunk)
            n += len(frames)
            sink(frames)
        return n

    return run


def _engine_route(mod: ModuleType) -> Runner:
    response = RESPONSE
    request = REQUEST

    def run(chunks: Chunks) -> tuple[list[int], int, dict[str, int]]:
        feed = mod.Decoder(lazy=True).feed
        counts = [0] * 6
        idsum = 0
        by_method: dict[str, int] = {}
        get = by_method.get
        for chunk in chunks:
            for f in feed(chunk):
                k = f.kind
                counts[k] += 1
                if k == response:
                    idsum += f.id
                else:
                    m = f.method
                    by_method[m] = get(m, 0) + 1
                    if k == request:
                        idsum += f.id
        return counts, idsum, by_method

    return run


def _engine_forward(mod: ModuleType) -> Runner:
    notification = NOTIFICATION

    def run(chunks: Chunks) -> list[bytes]:
        feed = mod.Decoder(lazy=True).feed
        fwd = mod.forward
        out: list[bytes] = []
        append = out.append
        nid = FIRST_NEW_ID
        for chunk in chunks:
            for f in feed(chunk):
                if f.kind == notification:
                    append(fwd(f))
                else:
                    append(fwd(f, nid))
                    nid += 1
        return out

    return run


@dataclass(frozen=True)
class ForwarderInput:
    """What the ``forwarder`` scenarios read: the chunks and how many responses they hold."""

    chunks: Sequence[bytes]
    responses: int


def _forwarder_setup(mod: ModuleType, responses: int) -> Any:
    fw = mod.Forwarder(0)  # hop 0: the client, hop 1: the agent
    fw.set_fast(0, True)
    fw.set_fast(1, True)
    add = fw.add_pending
    for k in range(responses):  # the client's requests, re-id'd 1, 2, ... on the agent's hop
        add(1, 0, FIRST_CLIENT_ID + k)
    return fw


def _engine_forwarder(mod: ModuleType) -> Runner:
    def run(prepared: tuple[Any, ForwarderInput]) -> list[bytes]:
        fw, inp = prepared
        feed, take = fw.feed, fw.take
        out: list[bytes] = []
        append = out.append
        for chunk in inp.chunks:
            if feed(1, chunk):
                raise AssertionError("a line was claimed")
            data = take(0)
            if data is not None:
                append(data)
        return out

    return run


def _engine_forwarder_route(mod: ModuleType) -> Runner:
    def run(prepared: tuple[Any, ForwarderInput]) -> tuple[int, int, int]:
        fw, inp = prepared
        feed, take = fw.feed, fw.take
        size = 0
        for chunk in inp.chunks:
            if feed(1, chunk):
                raise AssertionError("a line was claimed")
            data = take(0)
            if data is not None:
                size += len(data)
        return size, fw.pending(0), fw.dropped

    return run


def _engine_encode(mod: ModuleType) -> Runner:
    enc_n, enc_req = mod.encode_notification, mod.encode_request
    enc_res, enc_err = mod.encode_result, mod.encode_error

    def run(messages: Sequence[Msg]) -> list[bytes]:
        out: list[bytes] = []
        append = out.append
        for k, i, m, p in messages:
            if k == NOTIFICATION:
                append(enc_n(m, p))
            elif k == REQUEST:
                append(enc_req(i, m, p))
            elif k == RESPONSE:
                append(enc_res(i, p))
            elif "data" in p:
                append(enc_err(i, p["code"], p["message"], p["data"]))
            else:
                append(enc_err(i, p["code"], p["message"]))
        return out

    return run


# ---------------------------------------------------------------------------------------
# orjson baseline
# ---------------------------------------------------------------------------------------


def _orjson_decode() -> Runner:
    import orjson

    loads = orjson.loads

    def run(chunks: Chunks, sink: Sink = _drop) -> int:
        tail = b""
        n = 0
        for chunk in chunks:
            if tail:
                chunk = tail + chunk
            lines = chunk.split(b"\n")
            tail = lines.pop()
            frames = []
            append = frames.append
            for line in lines:
                if not line:
                    continue
                obj = loads(line)
                if obj.get("jsonrpc") != "2.0":
                    raise ValueError("invalid jsonrpc version")
                method = obj.get("method")
                if method is not None:
                    if "id" in obj:
                        append((REQUEST, obj["id"], method, obj.get("params")))
                    else:
                        append((NOTIFICATION, None, method, obj.get("params")))
                elif "error" in obj:
                    append((ERROR_RESPONSE, obj["id"], None, obj["error"]))
                else:
                    append((RESPONSE, obj["id"], None, obj["result"]))
            n += len(frames)
            sink(frames)
        return n

    return run


def _orjson_route() -> Runner:
    import orjson

    loads = orjson.loads

    def run(chunks: Chunks) -> tuple[list[int], int, dict[str, int]]:
        counts = [0] * 6
        idsum = 0
        by_method: dict[str, int] = {}
        get = by_method.get
        tail = b""
        for chunk in chunks:
            if tail:
                chunk = tail + chunk
            lines = chunk.split(b"\n")
            tail = lines.pop()
            for line in lines:
                if not line:
                    continue
                obj = loads(line)
                if obj.get("jsonrpc") != "2.0":
                    raise ValueError("invalid jsonrpc version")
                m = obj.get("method")
                if m is None:
                    counts[RESPONSE] += 1
                    idsum += obj["id"]
                else:
                    by_method[m] = get(m, 0) + 1
                    if "id" in obj:
                        counts[REQUEST] += 1
                        idsum += obj["id"]
                    else:
                        counts[NOTIFICATION] += 1
        return counts, idsum, by_method

    return run


def _orjson_forward() -> Runner:
    import orjson

    loads, dumps, nl = orjson.loads, orjson.dumps, orjson.OPT_APPEND_NEWLINE

    def run(chunks: Chunks) -> list[bytes]:
        out: list[bytes] = []
        append = out.append
        nid = FIRST_NEW_ID
        tail = b""
        for chunk in chunks:
            if tail:
                chunk = tail + chunk
            lines = chunk.split(b"\n")
            tail = lines.pop()
            for line in lines:
                if not line:
                    continue
                obj = loads(line)
                if obj.get("jsonrpc") != "2.0":
                    raise ValueError("invalid jsonrpc version")
                if "method" in obj and "id" not in obj:
                    append(line + b"\n")
                else:
                    obj["id"] = nid
                    nid += 1
                    append(dumps(obj, option=nl))
        return out

    return run


def _dict_encode(dumps: Callable[[Any], bytes]) -> Runner:
    """Encode baseline: build the envelope dict and serialise it with ``dumps``."""

    def run(messages: Sequence[Msg]) -> list[bytes]:
        out: list[bytes] = []
        append = out.append
        for k, i, m, p in messages:
            if k == NOTIFICATION:
                append(dumps({"jsonrpc": "2.0", "method": m, "params": p}))
            elif k == REQUEST:
                append(dumps({"jsonrpc": "2.0", "id": i, "method": m, "params": p}))
            elif k == RESPONSE:
                append(dumps({"jsonrpc": "2.0", "id": i, "result": p}))
            else:
                append(dumps({"jsonrpc": "2.0", "id": i, "error": p}))
        return out

    return run


def _orjson_encode() -> Runner:
    import orjson

    dumps, nl = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    return _dict_encode(lambda obj: dumps(obj, option=nl))


# ---------------------------------------------------------------------------------------
# msgspec baseline
# ---------------------------------------------------------------------------------------

try:
    import msgspec
except ImportError:  # pragma: no cover - the msgspec rows are skipped then
    msgspec = None

if msgspec is not None:
    # As msgspec's author would write a JSON-RPC reader: decode straight into a Struct (the
    # version checked by a Literal during decoding), bodies as ``Raw`` (lazy) or ``Any``
    # (eager), many lines at once with ``Decoder.decode_lines``.

    class Envelope(msgspec.Struct, omit_defaults=True):
        """JSON-RPC envelope with the body kept raw (the msgspec "lazy" baseline).

        Field order is the wire order; absent members stay UNSET/empty and are omitted when
        encoding, so re-emitting a compact line reproduces it byte for byte.
        """

        jsonrpc: Literal["2.0"]
        id: int | str | None | msgspec.UnsetType = msgspec.UNSET
        method: str | msgspec.UnsetType = msgspec.UNSET
        params: msgspec.Raw = msgspec.Raw()
        result: msgspec.Raw = msgspec.Raw()
        error: msgspec.Raw = msgspec.Raw()

    class Message(msgspec.Struct):
        """JSON-RPC message with the bodies decoded (``Any``; the msgspec "eager" baseline)."""

        jsonrpc: Literal["2.0"]
        id: int | str | None | msgspec.UnsetType = msgspec.UNSET
        method: str | msgspec.UnsetType = msgspec.UNSET
        params: Any = msgspec.UNSET
        result: Any = msgspec.UNSET
        error: Any = msgspec.UNSET


def _msgspec_envelope() -> Any:
    return Envelope


def _msgspec_decode_eager() -> Runner:
    import msgspec

    decode_lines = msgspec.json.Decoder(Message).decode_lines

    def run(chunks: Chunks, sink: Sink = _drop) -> int:
        tail = b""
        n = 0
        for chunk in chunks:
            if tail:
                chunk = tail + chunk
            cut = chunk.rfind(b"\n") + 1
            tail = chunk[cut:]
            frames = decode_lines(chunk[:cut])  # the Struct is the frame, bodies decoded
            n += len(frames)
            sink(frames)
        return n

    return run


def _msgspec_decode_lazy() -> Runner:
    import msgspec

    decode_lines = msgspec.json.Decoder(_msgspec_envelope()).decode_lines

    def run(chunks: Chunks, sink: Sink = _drop) -> int:
        tail = b""
        n = 0
        for chunk in chunks:
            if tail:
                chunk = tail + chunk
            cut = chunk.rfind(b"\n") + 1
            tail = chunk[cut:]
            frames = decode_lines(chunk[:cut])  # the Struct is the frame
            n += len(frames)
            sink(frames)
        return n

    return run


def _msgspec_route() -> Runner:
    import msgspec

    decode_lines = msgspec.json.Decoder(_msgspec_envelope()).decode_lines
    unset = msgspec.UNSET

    def run(chunks: Chunks) -> tuple[list[int], int, dict[str, int]]:
        counts = [0] * 6
        idsum = 0
        by_method: dict[str, int] = {}
        get = by_method.get
        tail = b""
        for chunk in chunks:
            if tail:
                chunk = tail + chunk
            cut = chunk.rfind(b"\n") + 1
            tail = chunk[cut:]
            for env in decode_lines(chunk[:cut]):  # the Literal has checked the version
                m = env.method
                if m is unset:
                    counts[RESPONSE] += 1
                    idsum += env.id
                else:
                    by_method[m] = get(m, 0) + 1
                    i = env.id
                    if i is unset:
                        counts[NOTIFICATION] += 1
                    else:
                        counts[REQUEST] += 1
                        idsum += i
        return counts, idsum, by_method

    return run


def _msgspec_forward() -> Runner:
    import msgspec

    decode = msgspec.json.Decoder(_msgspec_envelope()).decode
    encode = msgspec.json.Encoder().encode
    unset = msgspec.UNSET

    def run(chunks: Chunks) -> list[bytes]:
        out: list[bytes] = []
        append = out.append
        nid = FIRST_NEW_ID
        tail = b""
        for chunk in chunks:
            if tail:
                chunk = tail + chunk
            lines = chunk.split(b"\n")
            tail = lines.pop()
            for line in lines:
                if not line:
                    continue
                env = decode(line)  # the Literal has checked the version
                if env.method is not unset and env.id is unset:
                    append(line + b"\n")
                else:
                    env.id = nid
                    nid += 1
                    append(encode(env) + b"\n")
        return out

    return run


def _msgspec_encode() -> Runner:
    import msgspec

    encode = msgspec.json.Encoder().encode
    return _dict_encode(lambda obj: encode(obj) + b"\n")


# ---------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------

_BASELINES: dict[tuple[str, str], Callable[[], Runner]] = {
    ("orjson", "decode-eager"): _orjson_decode,
    ("orjson", "decode-lazy"): _orjson_decode,  # orjson has no lazy mode
    ("orjson", "route"): _orjson_route,
    ("orjson", "forward"): _orjson_forward,
    ("orjson", "encode"): _orjson_encode,
    ("msgspec", "decode-eager"): _msgspec_decode_eager,
    ("msgspec", "decode-lazy"): _msgspec_decode_lazy,
    ("msgspec", "route"): _msgspec_route,
    ("msgspec", "forward"): _msgspec_forward,
    ("msgspec", "encode"): _msgspec_encode,
}


def get_setup(scenario: str, impl: str) -> Callable[[Any], Any] | None:
    """The untimed per-round preparation of ``scenario`` × ``impl`` (``None``: none).

    The ``forwarder`` scenarios get a fresh Forwarder whose pending table already holds the
    client's requests that the corpus' responses answer: ``setup(inp) -> (forwarder, inp)``.
    """
    if scenario not in FORWARDER_SCENARIOS:
        return None
    mod = load_engine(impl)
    if mod is None:
        raise LookupError(f"engine {impl!r} not importable: {engine_import_error(impl)}")
    return lambda inp: (_forwarder_setup(mod, inp.responses), inp)


def get_runner(scenario: str, impl: str) -> Runner:
    """The workload function for ``scenario`` × ``impl``.

    Decode runners are ``run(chunks, sink=drop) -> frame count``; route runners
    ``run(chunks) -> digest``; forward ``run(chunks) -> lines``; encode
    ``run(messages) -> lines``.

    Raises:
        LookupError: unknown pair, or the twin is not importable.
    """
    if impl in _ENGINE_MODULES:
        mod = load_engine(impl)
        if mod is None:
            raise LookupError(f"engine {impl!r} not importable: {engine_import_error(impl)}")
        if scenario == "decode-eager":
            return _engine_decode(mod, lazy=False)
        if scenario == "decode-lazy":
            return _engine_decode(mod, lazy=True)
        if scenario == "route":
            return _engine_route(mod)
        if scenario == "forward":
            return _engine_forward(mod)
        if scenario == "encode":
            return _engine_encode(mod)
        if scenario == "forwarder":
            return _engine_forwarder(mod)
        if scenario == "forwarder-route":
            return _engine_forwarder_route(mod)
    factory = _BASELINES.get((impl, scenario))
    if factory is None:
        raise LookupError(f"no runner for {impl!r} × {scenario!r}")
    return factory()


# ---------------------------------------------------------------------------------------
# Summaries (what "correct" compares)
# ---------------------------------------------------------------------------------------


def _norm(value: Any) -> Any:
    """Raw JSON (engine ``RawJson``, ``msgspec.Raw``) → decoded value; others unchanged."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return json.loads(bytes(value))
    if msgspec is not None and type(value) is msgspec.Raw:
        return json.loads(bytes(memoryview(value)))
    return value


def _frame_tuple(f: Any, lazy: bool) -> tuple[int, Any, Any, Any]:
    """``(kind, id, method, payload)`` of one frame of any implementation."""
    if type(f) is tuple:
        return f
    if msgspec is not None and type(f) is Message:
        UNSET = msgspec.UNSET
        if f.method is UNSET:
            if f.error is not UNSET:
                return (ERROR_RESPONSE, f.id, None, f.error)
            return (RESPONSE, f.id, None, f.result)
        params = None if f.params is UNSET else f.params
        return (NOTIFICATION, None, f.method, params) if f.id is UNSET else (REQUEST, f.id, f.method, params)
    if hasattr(f, "jsonrpc"):  # msgspec Envelope
        UNSET = msgspec.UNSET
        if f.method is UNSET:
            if len(memoryview(f.error)):
                return (ERROR_RESPONSE, f.id, None, f.error)
            return (RESPONSE, f.id, None, f.result)
        if f.id is UNSET:
            return (NOTIFICATION, None, f.method, f.params if len(memoryview(f.params)) else None)
        return (REQUEST, f.id, f.method, f.params if len(memoryview(f.params)) else None)
    kind = f.kind
    if kind == RESPONSE:
        if f.error is not None:
            return (ERROR_RESPONSE, f.id, None, f.error)
        return (RESPONSE, f.id, None, f.result_raw if lazy else f.result)
    return (kind, f.id, f.method, f.params_raw if lazy else f.params)


def _digest_lines(lines: Sequence[bytes]) -> tuple[int, str]:
    h = hashlib.blake2b(digest_size=16)
    for line in lines:
        h.update(line)
    return len(lines), h.hexdigest()


def summarize(scenario: str, result: Any, lazy: bool = False) -> Any:
    """A comparable summary of a runner's result.

    Decode: per-kind counts, a checksum of ids and methods, and every
    :data:`SAMPLE_EVERY`-th payload (raw payloads decoded first, so lazy and eager agree).
    Route: the digest itself. Forward/encode: line count and a hash of the bytes.
    """
    if scenario in ("decode-eager", "decode-lazy"):
        counts = [0] * 6
        h = hashlib.blake2b(digest_size=16)
        samples = []
        for n, f in enumerate(result):
            kind, ident, method, payload = _frame_tuple(f, lazy)
            counts[kind] += 1
            h.update(f"{kind}|{ident!r}|{method}\n".encode())
            if n % SAMPLE_EVERY == 0:
                samples.append(_norm(payload))
        return counts, h.hexdigest(), samples
    if scenario == "route":
        counts, idsum, by_method = result
        return list(counts), idsum, dict(sorted(by_method.items()))
    if scenario in ("forward", "encode"):
        return _digest_lines(result)
    if scenario == "forwarder":
        h = hashlib.blake2b(digest_size=16)
        lines = 0
        for data in result:
            h.update(data)
            lines += data.count(b"\n")
        return lines, h.hexdigest()
    if scenario == "forwarder-route":
        return tuple(result)
    raise LookupError(scenario)
