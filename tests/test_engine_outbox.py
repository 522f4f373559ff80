"""A connection's queued output, ``engine.Outbox`` (both twins; the pure one is the reference):
encode and queue in one call, one ``write`` per flush in queue order, one ``schedule`` per
batch of lines (none while holding), the send-buffer limit with nothing of a refused message
queued, nothing of a message that fails to encode, close, and a differential run of the twins.
"""

from __future__ import annotations

import json
import random
from types import ModuleType
from typing import Any

import pytest

from acp_fast.engine import RawJson
from acp_fast.errors import EncodeError, SendBufferFull


class Loop:
    """The three ways out of an outbox, recorded; ``run()`` runs what was scheduled."""

    def __init__(self, engine: ModuleType, transport_buffered: int = 0, **kw: Any) -> None:
        self.writes: list[bytes] = []
        self.scheduled: list[Any] = []
        self.transport_buffered = transport_buffered
        self.box = engine.Outbox(self.writes.append, self.scheduled.append, lambda: self.transport_buffered, **kw)

    def run(self) -> None:
        calls, self.scheduled[:] = list(self.scheduled), []
        for fn in calls:
            fn()

    def lines(self) -> list[Any]:
        return [json.loads(x) for w in self.writes for x in w.splitlines()]


def test_lines_queued_in_one_turn_are_one_write_in_order(engine: ModuleType) -> None:
    lp = Loop(engine)
    for i in range(50):
        assert lp.box.notify("n", {"i": i}) is True
    lp.box.request(7, "m", [1, 2])
    lp.box.write(engine.encode_result(3, "ok"))
    assert lp.writes == [] and len(lp.scheduled) == 1  # one flush asked for, nothing written yet
    size = lp.box.size
    lp.run()
    assert len(lp.writes) == 1 and len(lp.writes[0]) == size and lp.box.size == 0
    assert lp.lines() == [*({"jsonrpc": "2.0", "method": "n", "params": {"i": i}} for i in range(50)),
                          {"jsonrpc": "2.0", "id": 7, "method": "m", "params": [1, 2]},
                          {"jsonrpc": "2.0", "id": 3, "result": "ok"}]
    lp.box.notify("again")  # the next line after a flush asks again
    assert len(lp.scheduled) == 1
    lp.run()
    assert lp.writes[1] == b'{"jsonrpc":"2.0","method":"again"}\n'


def test_lines_are_the_encoders_lines(engine: ModuleType) -> None:
    lp = Loop(engine)
    params = {"sessionId": "s", "update": {"content": {"type": "text", "text": "é\n\"x\""}}, "raw": RawJson(b'{"a":1}')}
    lp.box.notify("session/update", params)
    lp.box.request("r1", "session/prompt", None)
    lp.box.flush()
    assert lp.writes == [engine.encode_notification("session/update", params)
                         + engine.encode_request("r1", "session/prompt")]


def test_flush_at_writes_at_once(engine: ModuleType) -> None:
    lp = Loop(engine, flush_at=1000)
    for i in range(20):
        lp.box.notify("n", {"text": "x" * 90, "i": i})  # ~130 bytes a line
    assert len(lp.writes) == 2 and all(len(w) > 1000 for w in lp.writes)
    lp.run()
    assert [m["params"]["i"] for m in lp.lines()] == list(range(20))


def test_holding_schedules_nothing_and_release_flushes(engine: ModuleType) -> None:
    lp = Loop(engine)
    lp.box.holding = True
    for i in range(3):
        lp.box.notify("n", [i])
    assert lp.scheduled == [] and lp.writes == []
    lp.box.release()
    assert lp.box.holding is False and len(lp.writes) == 1 and lp.box.size == 0
    lp.box.release()  # nothing queued: no write
    assert len(lp.writes) == 1


@pytest.mark.parametrize("paused", [False, True])
def test_send_buffer_full_queues_nothing_of_the_refused_message(engine: ModuleType, paused: bool) -> None:
    lp = Loop(engine, max_buffer=1000, flush_at=1 << 20)
    lp.box.paused = paused
    lp.transport_buffered = 900 if paused else 0
    sent = 0
    with pytest.raises(SendBufferFull) as info:
        for _ in range(100):
            lp.box.notify("n", {"text": "y" * 40})
            sent += 1
    size = lp.box.size
    assert info.value.limit == 1000 and info.value.buffered == size + lp.transport_buffered > 1000
    per = len(engine.encode_notification("n", {"text": "y" * 40}))
    # a send is refused once the bytes already waiting are over the limit; paused, the
    # transport's bytes count as well
    assert sent == ((1000 - 900) // per + 1 if paused else 1000 // per + 1)
    with pytest.raises(SendBufferFull):
        lp.box.check_room()
    assert lp.box.size == size  # nothing of the refused message
    lp.box.write(engine.encode_result(1, None))  # answers are never refused
    lp.box.request(2, "m")  # nor requests (the caller checks the room first)
    lp.box.flush()
    assert [m.get("params", m.get("id")) for m in lp.lines()] == [{"text": "y" * 40}] * sent + [1, 2]
    lp.box.paused = False
    lp.transport_buffered = 0
    lp.box.check_room()
    assert lp.box.notify("n") is True


def test_a_message_that_fails_to_encode_queues_nothing(engine: ModuleType) -> None:
    lp = Loop(engine)
    lp.box.notify("a", [1])
    size = lp.box.size
    for bad in ({"x": object()}, {"deep": [float("nan")]}, "not params"):
        with pytest.raises(EncodeError):
            lp.box.notify("b", bad)
        with pytest.raises(EncodeError):
            lp.box.request(1, "b", bad)
    with pytest.raises(EncodeError):
        lp.box.request(1.5, "b")
    with pytest.raises(TypeError):
        lp.box.write("not bytes")
    assert lp.box.size == size
    lp.box.notify("c", [2])
    lp.run()
    assert [m["method"] for m in lp.lines()] == ["a", "c"]


def test_a_notify_from_inside_an_encode_goes_first(engine: ModuleType) -> None:
    lp = Loop(engine)

    class Sneaky(dict):  # type: ignore[type-arg]
        def items(self) -> Any:
            lp.box.notify("inner", {"k": 1})
            return super().items()

    lp.box.notify("outer", Sneaky(v=2))
    lp.run()
    assert lp.lines() == [{"jsonrpc": "2.0", "method": "inner", "params": {"k": 1}},
                          {"jsonrpc": "2.0", "method": "outer", "params": {"v": 2}}]


def test_close_queues_nothing_more_but_flushes_what_is_queued(engine: ModuleType) -> None:
    lp = Loop(engine)
    lp.box.notify("kept")
    lp.box.close()
    assert lp.box.closed is True
    assert lp.box.notify("late") is False
    assert lp.box.request(1, "late") is False
    assert lp.box.write(b'{"late":1}\n') is False
    lp.box.flush()
    assert [m["method"] for m in lp.lines()] == ["kept"]


def test_arguments_are_checked(engine: ModuleType) -> None:
    for kw in ({"max_buffer": -1}, {"flush_at": -1}, {"max_buffer": 1.5}):
        with pytest.raises(ValueError):
            engine.Outbox(print, print, int, **kw)
    box = engine.Outbox(print, print, int)
    assert (box.max_buffer, box.flush_at) == (engine.DEFAULT_MAX_WRITE_BUFFER, engine.DEFAULT_FLUSH_AT)


def test_twins_write_the_same_bytes(twin_pair: tuple[ModuleType, ModuleType]) -> None:
    rng = random.Random(5)
    outs = []
    for engine in twin_pair:
        rng.seed(5)
        lp = Loop(engine, max_buffer=4000, flush_at=1500)
        events = []
        for i in range(400):
            op = rng.random()
            try:
                if op < 0.6:
                    events.append(lp.box.notify("n", {"i": i, "t": "z" * rng.randrange(200)}))
                elif op < 0.7:
                    events.append(lp.box.request(i, "r", [i]))
                elif op < 0.8:
                    events.append(lp.box.write(engine.encode_error(i, -32600)))
                elif op < 0.9:
                    lp.box.paused = not lp.box.paused
                    lp.transport_buffered = rng.randrange(5000)
                else:
                    lp.run()
            except SendBufferFull as exc:
                events.append(("full", exc.buffered))
        lp.box.flush()
        outs.append((lp.writes, events))
    assert outs[0] == outs[1]
    assert any(e != True for e in outs[0][1])  # noqa: E712 - some sends were refused
