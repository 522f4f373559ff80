"""Testy's benchmark streams: `stream N [chunks [of S bytes]]` sends N `agent_message_chunk`
updates of S bytes of text.

Two ways, chosen per agent (`acp-fast testy --stream api|preencoded`):

* [`stream_updates`][acp_fast.testy.streaming.stream_updates] (`api`, the default) is what a user's agent does: every chunk's
  update dict is built with fresh text (the chunk index, padded to S bytes) and sent with
  `cx.send_session_update`, through the write guard; backpressure through `cx.drain()`.
* [`stream_preencoded`][acp_fast.testy.streaming.stream_preencoded] (`preencoded`) sends the first update through the write guard,
  encodes its params once (`acp_fast.engine.RawJson`) and re-sends that line: a raw ceiling of the
  write path, not what an agent does, never used in a comparison.

Both drain every ~256 KiB of text (`drain_every`) and then yield once, so that a
`session/cancel` can be read while streaming.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ..engine import RawJson, encode_value
from ..protocol.facts import SESSION_UPDATE

__all__ = ["STREAM_MODES", "drain_every", "stream", "stream_preencoded", "stream_updates"]

#: the values of ``acp-fast testy --stream``
STREAM_MODES = ("api", "preencoded")


def drain_every(size: int) -> int:
    """Chunks between two `await cx.drain()`: about 256 KiB of JSON lines."""
    return max(1, (256 * 1024) // (size + 96))


def chunk_text(i: int, size: int, pad: str) -> str:
    """Chunk `i`'s text: its index then `pad` up to `size` characters (`pad` is `size` × "x")."""
    head = str(i)
    return head + pad[len(head):] if len(head) < size else head[:size]


async def stream_updates(cx: Any, session_id: str, n: int, size: int, message_id: str | None,
                         stopped: Callable[[], bool]) -> bool:
    """Send `n` chunks as a user's agent would (see the module docstring).

    `stopped()` is asked before the first chunk and after each yield: a cancellation is
    read by the event loop, so it can only arrive while this coroutine waits (asking per
    chunk would cost a call and two attribute reads per update and see nothing new). The
    text is `chunk_text`'s, written out in the loop (one Python call less per update).

    Returns:
        False when `stopped()` became true (or a send was refused) before the end.
    """
    if n > 0 and stopped():
        return False
    pad = "x" * size
    every = drain_every(size)
    send = cx.send_session_update
    left = every
    for i in range(n):
        head = str(i)
        update: dict[str, Any] = {"sessionUpdate": "agent_message_chunk", "content": {
            "type": "text", "text": head + pad[len(head):] if len(head) < size else head[:size]}}
        if message_id is not None:
            update["messageId"] = message_id
        if not send(session_id, update):
            return False
        left -= 1
        if not left:
            left = every
            await cx.drain()
            await asyncio.sleep(0)
            if i + 1 < n and stopped():
                return False
    await cx.drain()
    return True


async def stream_preencoded(cx: Any, session_id: str, n: int, size: int, message_id: str | None,
                            stopped: Callable[[], bool]) -> bool:
    """Send `n` chunks by re-sending one pre-encoded line (a ceiling, see the module docstring)."""
    if n <= 0:
        return True
    update: dict[str, Any] = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x" * size}}
    if message_id is not None:
        update["messageId"] = message_id
    if not cx.send_session_update(session_id, update):
        return False
    line = RawJson(encode_value({"sessionId": session_id, "update": update}))
    notify = cx.send_notification
    every = drain_every(size)
    count = 0
    for _ in range(n - 1):
        if stopped() or not notify(SESSION_UPDATE, line):
            return False
        count += 1
        if count >= every:
            count = 0
            await cx.drain()
            await asyncio.sleep(0)
    await cx.drain()
    return True


def stream(mode: str) -> Callable[..., Awaitable[bool]]:
    """The stream function of `mode` (one of `STREAM_MODES`)."""
    if mode == "preencoded":
        return stream_preencoded
    if mode == "api":
        return stream_updates
    raise ValueError(f"unknown stream mode {mode!r}; expected one of {', '.join(STREAM_MODES)}")
