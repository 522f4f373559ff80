"""The conductor's forwarding core, ``engine.Forwarder`` (both twins; the pure one is the
reference): routing per hop, fresh ids and pending tables, successor envelopes on the fast
path, what is claimed for Python, and a differential test of the twins on random traffic
fed in random chunks (hypothesis and a seeded corpus).
"""

from __future__ import annotations

import json
import random
from types import ModuleType
from typing import Any

import pytest
from wire_messages import note, ok, req

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None  # type: ignore[assignment]


def line(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def fast(engine: ModuleType, proxies: int, agent: bool = True, **kw: Any) -> Any:
    fw = engine.Forwarder(proxies, agent=agent, **kw)
    for h in range(fw.hops):
        fw.set_fast(h, True)
    return fw


def out(fw: Any) -> dict[int, list[Any]]:
    return {h: [json.loads(x) for x in data.splitlines()] for h, data in fw.take_all()}


# ---------------------------------------------------------------------------------------
# routing
# ---------------------------------------------------------------------------------------


def test_hops_and_arguments(engine: ModuleType) -> None:
    fw = engine.Forwarder(2)
    assert (fw.hops, fw.proxies, fw.agent, fw.dropped) == (4, 2, True, 0)
    assert engine.Forwarder(2, agent=False).hops == 3
    assert not fw.fast(0) and fw.successor(3) == "_proxy/successor"
    with pytest.raises(ValueError):
        engine.Forwarder(-1)
    with pytest.raises(ValueError):
        engine.Forwarder(1, successor="x/successor")
    with pytest.raises(IndexError):
        fw.feed(4, b"")
    with pytest.raises(TypeError):
        fw.write(0, "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fw.add_pending(1, 0, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        fw.set_successor(0, "initialize")


def test_off_the_fast_path_every_frame_is_returned(engine: ModuleType) -> None:
    fw = engine.Forwarder(0)
    data = line(req(1, "a")) + line(note("b")) + b"  \n" + line(ok(2, None))
    frames = fw.feed(0, data)
    assert [f.kind for f in frames] == [engine.REQUEST, engine.NOTIFICATION, engine.RESPONSE]
    assert fw.take_all() == [] and fw.pending(1) == 0


def test_one_proxy_chain_both_directions(engine: ModuleType) -> None:
    fw = fast(engine, 1)  # hops: 0 upstream, 1 proxy, 2 agent
    params = b'{"sessionId" : "s",  "prompt":[{"type":"text","text":"h\\u00e9"}],"_meta":{"k":1}}'
    src = b'{"jsonrpc":"2.0","id":"abc","method":"session/prompt","params":' + params + b"}\n"
    assert fw.feed(0, src + line(note("session/cancel", {"sessionId": "s"}))) == []
    data = fw.take(0), fw.take(1), fw.take(2)
    assert data[0] is None and data[2] is None
    assert data[1] == (b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":' + params + b"}\n"
                       + line(note("session/cancel", {"sessionId": "s"})))
    assert (fw.pending(1), fw.owed(0)) == (1, 1)
    # the proxy sends it on wrapped, with a hop-local envelope _meta
    env = (b'{"jsonrpc":"2.0","id":9,"method":"_proxy/successor","params":{"_meta":{"envelope":true},'
           b'"method":"session/prompt","params":' + params + b"}}\n")
    assert fw.feed(1, env) == []
    assert fw.take(2) == b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":' + params + b"}\n"
    # the agent answers; the proxy answers; ids are mapped back hop by hop, never wrapped
    assert fw.feed(2, line(ok(1, {"stopReason": "end_turn"}))) == []
    assert fw.take(1) == line(ok(9, {"stopReason": "end_turn"}))
    assert fw.feed(1, line(ok(1, {"stopReason": "end_turn"}))) == []
    assert fw.take(0) == line(ok("abc", {"stopReason": "end_turn"}))
    assert (fw.pending(1), fw.pending(2), fw.owed(0), fw.owed(1)) == (0, 0, 0, 0)
    # agent -> proxy: wrapped (fresh id on the proxy's hop); proxy -> client: plain
    assert fw.feed(2, line(req("a1", "session/request_permission", {"sessionId": "s"}))
                   + line(note("session/update", {"u": 1}))) == []
    assert out(fw) == {1: [
        req(2, "_proxy/successor", {"method": "session/request_permission", "params": {"sessionId": "s"}}),
        note("_proxy/successor", {"method": "session/update", "params": {"u": 1}})]}
    assert fw.feed(1, line(req(None, "session/request_permission", {"sessionId": "s"}))) == []
    assert out(fw) == {0: [req(1, "session/request_permission", {"sessionId": "s"})]}
    fw.feed(0, line(ok(1, {"outcome": "x"})))
    assert out(fw) == {1: [ok(None, {"outcome": "x"})]}
    fw.feed(1, line(ok(2, {"outcome": "x"})))
    assert out(fw) == {2: [ok("a1", {"outcome": "x"})]}


def test_three_proxies_positions(engine: ModuleType) -> None:
    fw = fast(engine, 3)  # 0 up, 1..3 proxies, 4 agent
    fw.feed(2, line(note("_proxy/successor", {"method": "m", "params": [1]})))
    fw.feed(3, line(note("_proxy/successor", {"method": "m"})))
    fw.feed(2, line(note("left")))
    fw.feed(1, line(note("left")))
    assert out(fw) == {0: [note("left")], 1: [note("_proxy/successor", {"method": "left"})],
                       3: [note("m", [1])], 4: [note("m")]}


def test_no_proxies_and_proxy_mode(engine: ModuleType) -> None:
    fw = fast(engine, 0)
    fw.feed(0, line(req(5, "_vendor/x", [1])))
    fw.feed(1, line(note("session/update", {"a": 1})) + line(ok(1, "r")))
    assert out(fw) == {1: [req(1, "_vendor/x", [1])], 0: [note("session/update", {"a": 1}), ok(5, "r")]}
    # proxy mode: the last proxy's successor traffic goes upstream wrapped, and back
    fw = fast(engine, 2, agent=False)  # 0 parent, 1..2 proxies
    fw.feed(2, line(req(3, "_proxy/successor", {"method": "session/prompt", "params": {"p": 1}, "meta": 1})))
    assert out(fw) == {0: [req(1, "_proxy/successor", {"method": "session/prompt", "params": {"p": 1}})]}
    fw.feed(0, line(note("proxy/successor", {"method": "session/update", "params": {"u": 2}})))
    assert out(fw) == {2: [note("_proxy/successor", {"method": "session/update", "params": {"u": 2}})]}
    assert fw.successor(0) == "proxy/successor"  # answered in the spelling it used
    fw.feed(0, line(ok(1, "done")))
    assert out(fw) == {2: [ok(3, "done")]}


def test_spelling_follows_each_hop(engine: ModuleType) -> None:
    fw = fast(engine, 1, successor="proxy/successor")
    fw.feed(2, line(note("n1")))
    fw.feed(1, line(note("_proxy/successor", {"method": "x"})))
    fw.feed(2, line(note("n2")))
    assert out(fw) == {1: [note("proxy/successor", {"method": "n1"}), note("_proxy/successor", {"method": "n2"})],
                       2: [note("x")]}
    fw.set_successor(1, "proxy/successor")
    fw.feed(2, line(note("n3")))
    assert out(fw) == {1: [note("proxy/successor", {"method": "n3"})]}


# ---------------------------------------------------------------------------------------
# claims
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("hop,msg", [
    (0, req(1, "initialize", {"protocolVersion": 2})),
    (0, note("$/cancel_request", {"requestId": 1})),
    (0, req(1, "_proxy/initialize", {})),
    (0, req(1, "proxy/initialize", {})),
    (0, req(1, "_proxy/successor", {"method": "x"})),  # misplaced: from the client (agent mode)
    (2, note("proxy/successor", {"method": "x"})),  # misplaced: from the agent
    (1, note("_proxy/successor", {"method": "$/cancel_request", "params": {"requestId": 1}})),
    (1, req(1, "_proxy/successor", {"method": "initialize", "params": {}})),
    (1, req(1, "_proxy/successor", {"method": "proxy/initialize", "params": {}})),
    (1, req(1, "_proxy/successor", {"params": {}})),
    (1, req(1, "_proxy/successor", {})),
    (1, req(1, "_proxy/successor", [1])),
    (1, req(1, "_proxy/successor")),
    (1, req(1, "_proxy/successor", {"method": 3})),
    (1, req(1, "_proxy/successor", {"method": "m", "params": 5})),
    (1, req(1, "_proxy/successor", {"method": "m", "params": "s"})),
    (1, req(1, "_proxy/successor", {"method": "m", "id": 1})),
    (1, req(1, "_proxy/successor", {"method": "m", "jsonrpc": "2.0"})),
    (1, req(1, "_proxy/successor", {"method": "m", "result": 1})),
    (1, req(1, "_proxy/successor", {"method": "m", "error": 1})),
])
def test_claimed_messages(engine: ModuleType, hop: int, msg: dict[str, Any]) -> None:
    fw = fast(engine, 1)
    (frame,) = fw.feed(hop, line(msg))
    assert frame.kind in (engine.REQUEST, engine.NOTIFICATION) and json.loads(bytes(frame.raw)) == msg
    assert fw.take_all() == [] and fw.pending(2) == 0 and fw.owed(hop) == 0


@pytest.mark.parametrize("raw", [
    b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"m\\u0078"}}',  # escaped method
    b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"meth\\u006fd":"m"}}',  # escaped key
    b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"m","para\\u006ds":[1]}}',
    b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"m","method":"n"}}',
    b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"m","params":{},"params":[]}}',
])
def test_envelopes_left_to_the_full_rules(engine: ModuleType, raw: bytes) -> None:
    fw = fast(engine, 1)
    (frame,) = fw.feed(1, raw + b"\n")
    assert bytes(frame.raw) == raw and fw.take_all() == []


def test_envelope_members_dropped_and_inner_kept(engine: ModuleType) -> None:
    fw = fast(engine, 1)
    raw = (b'{"jsonrpc":"2.0","method":"_proxy/successor","params": { "x" : [1,{"}":"]"}] , '
           b'"method" : "m/\xc3\xa9" ,"meta":{"a":"\\"}"},"params" : {"_meta":{"k":"\\\\"},"a":[]} , "_meta":null}}\n')
    assert fw.feed(1, raw) == []
    assert fw.take(2) == b'{"jsonrpc":"2.0","method":"m/\xc3\xa9","params":{"_meta":{"k":"\\\\"},"a":[]}}\n'
    fw.feed(1, b'{"jsonrpc":"2.0","id":"q","method":"_proxy/successor","params":{"params":null,"method":"z"}}\n')
    assert fw.take(2) == b'{"jsonrpc":"2.0","id":1,"method":"z"}\n'


def test_a_claim_stops_the_fast_path_for_the_rest_of_the_chunk(engine: ModuleType) -> None:
    fw = fast(engine, 0)
    data = (line(note("a")) + line(note("$/cancel_request", {"requestId": 1})) + line(note("b"))
            + b"not json\n" + line(req(4, "c")))
    frames = fw.feed(0, data)
    assert [getattr(f, "method", None) for f in frames] == ["$/cancel_request", "b", None, "c"]
    assert fw.take(1) == line(note("a"))
    assert fw.feed(0, line(note("d"))) == [] and fw.take(1) == line(note("d"))  # next chunk: fast again
    frames = fw.feed(0, line([req(1, "x")]) + line(note("e")))  # a batch is claimed
    assert [f.kind for f in frames] == [engine.BATCH, engine.NOTIFICATION]


def test_over_long_line_reported_in_place_without_stopping(engine: ModuleType) -> None:
    fw = fast(engine, 0, max_line_size=64)
    data = line(note("a")) + b'{"x":"' + b"y" * 100 + b'"}\n' + line(note("b"))
    (frame,) = fw.feed(0, data)
    assert frame.kind == engine.MALFORMED and frame.reason == "line too long"
    assert fw.take(1) == line(note("a")) + line(note("b"))


def test_responses_unknown_checked_and_closed(engine: ModuleType) -> None:
    fw = fast(engine, 0)
    assert fw.feed(1, line(ok(1, 1)) + line(ok("s", 1)) + line(ok(None, 1))) == []
    assert fw.dropped == 3 and fw.take_all() == []
    new = fw.add_pending(1, 0, "init", 2)
    (frame,) = fw.feed(1, line(ok(new, {"protocolVersion": 2})))
    assert frame.kind == engine.RESPONSE and fw.pending(1) == 1  # claimed, still pending
    assert fw.pop_pending(1, new) == (0, "init", 2) and fw.pop_pending(1, new) is None
    fw.feed(0, line(req("r", "m")))
    fw.close(0)
    assert fw.take(1) == line(req(2, "m"))
    assert fw.feed(1, line(ok(2, "late"))) == [] and fw.take_all() == [] and fw.owed(0) == 0


def test_pending_tables_are_bounded(engine: ModuleType) -> None:
    with pytest.raises(ValueError):
        engine.Forwarder(0, max_pending=0)
    fw = fast(engine, 0, max_pending=2)
    assert fw.max_pending == 2 and engine.Forwarder(0).max_pending == 65536
    (frame,) = fw.feed(0, line(req(1, "a")) + line(req(2, "b")) + line(req(3, "c")))
    assert frame.id == 3 and fw.pending(1) == 2  # the third request is left to the caller
    assert fw.take(1) == line(req(1, "a")) + line(req(2, "b"))
    fw.feed(0, line(note("n")))  # notifications are not limited
    fw.feed(1, line(ok(1, "A")))
    assert fw.feed(0, line(req(4, "d"))) == [] and fw.pending(1) == 2


def test_pending_table_api(engine: ModuleType) -> None:
    fw = fast(engine, 1)
    a = fw.add_pending(1, 0, 7)
    b = fw.add_pending(2, 0, "x")
    c = fw.add_pending(2, 1, 7)
    d = fw.add_pending(1, 0, 7)  # the same id again: the latest wins for cancellation
    assert (a, b, c, d) == (1, 1, 2, 2)
    assert fw.find_pending(0, 7) == (1, 2) and fw.find_pending(1, 7) == (2, 2)
    assert fw.find_pending(0, "7") is None and fw.find_pending(2, 7) is None
    assert (fw.owed(0), fw.owed(1)) == (3, 1)
    assert fw.drain_from(0) == [7, "x", 7] and fw.owed(0) == 0
    assert fw.drain_pending(2) == [(1, 7)] and fw.owed(1) == 0
    assert fw.pop_pending(1, 2**70) is None and fw.pop_pending(1, "1") is None
    fw.write(1, b"x\n")
    fw.write(1, b"y\n")
    assert fw.take(1) == b"x\ny\n" and fw.take(1) is None


def test_feed_eof_routes_the_last_line(engine: ModuleType) -> None:
    fw = fast(engine, 0)
    assert fw.feed(0, line(note("a"))[:-1]) == []
    assert fw.feed_eof(0) == [] and fw.take(1) == line(note("a"))


# ---------------------------------------------------------------------------------------
# the twins agree (differential)
# ---------------------------------------------------------------------------------------

METHODS = ["session/update", "session/prompt", "initialize", "$/cancel_request", "_proxy/initialize",
           "proxy/initialize", "_proxy/successor", "proxy/successor", "_vendor/é", "a\"b"]
RAW_LINES = [
    b"", b"   ", b"not json", b"[]", b"[1]", b'{"jsonrpc":"2.0","id":1.5,"method":"m"}',
    b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"m\\u0078","params":[]}}',
    b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"meth\\u006fd":"m"}}',
    b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"m","para\\u006ds":[1]}}',
    b'{"jsonrpc":"2.0","id":"i\\u0064","method":"proxy/successor","params":{ "method" : "k" , "params" : null }}',
    b'{"jsonrpc":"2.0","id":3,"method":"_proxy/successor","params":{"method":"m","params":{},"params":[]}}',
    b'{"jsonrpc":"2.0","id":2,"result":{"a":"\\"}"}}', b'{"jsonrpc":"2.0","id":"x","error":{"code":1,"message":"m"}}',
    b'\xff\xfe', b'{"jsonrpc":"2.0","method":"m"}\r',
]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rng.choice([1, -2, 0.5, "s", "é\"}]", None, True, "\\", "\u2028"])
    if r < 0.65:
        return {rng.choice(["a", "_meta", "method", "params", "sessionId"]): random_value(rng, depth + 1)
                for _ in range(rng.randint(0, 3))}
    return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def random_line(rng: random.Random, hops: int) -> bytes:
    r = rng.random()
    if r < 0.06:
        return rng.choice(RAW_LINES) + b"\n"
    if r < 0.3:
        rid = rng.choice([rng.randint(1, 6), rng.randint(1, 6), "s", None, 2**40])
        if rng.random() < 0.2:
            return line({"jsonrpc": "2.0", "id": rid, "error": {"code": -1, "message": "e"}})
        return line(ok(rid, random_value(rng)))
    if r < 0.34:
        return line([random_line_obj(rng) for _ in range(rng.randint(1, 3))])
    return line(random_line_obj(rng))


def random_line_obj(rng: random.Random) -> dict[str, Any]:
    method = rng.choice(METHODS)
    params: Any = random_value(rng) if rng.random() < 0.7 else None
    if method.endswith("successor") and rng.random() < 0.8:
        inner: dict[str, Any] = {"method": rng.choice(METHODS)}
        if rng.random() < 0.7:
            inner["params"] = rng.choice([{"a": random_value(rng), "_meta": {"k": 1}}, [1], None, 3])
        if rng.random() < 0.3:
            inner[rng.choice(["_meta", "meta", "x", "id"])] = random_value(rng)
        params = inner
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if rng.random() < 0.5:
        msg["id"] = rng.choice([rng.randint(0, 9), "r", None, "é"])
    if params is not None and not isinstance(params, (dict, list)):
        params = [params]
    if params is not None:
        msg["params"] = params
    return msg


def describe(engine: ModuleType, f: Any) -> Any:
    if f.kind == engine.MALFORMED:
        return ("M", bytes(f.raw), f.code, f.reason)
    if f.kind == engine.BATCH:
        return ("B", bytes(f.raw), [describe(engine, e) for e in f.entries])
    return (f.kind, f.id, f.method, bytes(f.raw))


def run_twins(both: tuple[ModuleType, ModuleType], seed: int, steps: int) -> None:
    rng = random.Random(seed)
    proxies = rng.randint(0, 3)
    agent = rng.random() < 0.8 or proxies == 0
    kw = {"max_line_size": rng.choice([64, 1 << 20]), "max_pending": rng.choice([2, 65536])}
    fws = [eng.Forwarder(proxies, agent=agent, **kw) for eng in both]
    hops = fws[0].hops

    def same(call: str, *args: Any) -> Any:
        results = [getattr(fw, call)(*args) for fw in fws]
        assert results[0] == results[1], (call, args, results)
        return results[0]

    for h in range(hops):
        same("set_fast", h, rng.random() < 0.9)
    for _ in range(steps):
        r = rng.random()
        hop = rng.randrange(hops)
        if r < 0.8:
            data = b"".join(random_line(rng, hops) for _ in range(rng.randint(1, 12)))
            cuts = sorted(rng.sample(range(len(data) + 1), min(3, len(data) + 1)))
            for a, b in zip([0, *cuts], [*cuts, len(data)]):
                frames = [fw.feed(hop, data[a:b]) for fw in fws]
                assert [describe(both[0], f) for f in frames[0]] == \
                    [describe(both[1], f) for f in frames[1]], (seed, data)
        elif r < 0.85:
            same("add_pending", rng.randrange(hops), hop, rng.choice([1, "x", None]), rng.choice([0, 0, 2]))
        elif r < 0.88:
            same("pop_pending", hop, rng.randint(0, 6))
        elif r < 0.9:
            same("find_pending", hop, rng.choice([1, "x", None, "r", 0]))
        elif r < 0.92:
            same("set_successor", hop, rng.choice(["_proxy/successor", "proxy/successor"]))
        elif r < 0.94:
            same("set_fast", hop, rng.random() < 0.7)
        elif r < 0.95:
            same("close", hop)
        elif r < 0.96:
            same("drain_pending", hop)
        elif r < 0.97:
            same("drain_from", hop)
        else:
            same("take_all")
        for h in range(hops):
            same("owed", h)
            same("pending", h)
            same("successor", h)
            same("fast", h)
            same("closed", h)
    for h in range(hops):
        frames = [fw.feed_eof(h) for fw in fws]
        assert [describe(both[0], f) for f in frames[0]] == [describe(both[1], f) for f in frames[1]]
    same("take_all")
    assert fws[0].dropped == fws[1].dropped


@pytest.mark.parametrize("seed", range(40))
def test_twins_agree_on_random_traffic(both_engines: tuple[ModuleType, ModuleType], seed: int) -> None:
    run_twins(both_engines, seed, 60)


if given is not None:

    @settings(max_examples=60)
    @given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 40))
    def test_twins_agree_hypothesis(both_engines: tuple[ModuleType, ModuleType], seed: int, steps: int) -> None:
        run_twins(both_engines, seed, steps)
