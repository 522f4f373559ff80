"""An agent written from the README, as a new user would: the agent of the
`acp_fast/acp_fast-readme` row of `acp-fast bench`.

Only the public API, the way the README's "For agent authors" snippet uses it: an
`Agent.builder()` with typed handlers, `cx.send_session_update` with a fresh update dict and
a fresh text per chunk, `await cx.drain()` every ~256 KiB of text, served by
`run_agent_stdio`. Nothing of Testy (no pre-sized padding, no extra yield after a drain), so
that the row shows what a user's own agent gets, on each loop:

```bash
python -m acp_fast.benchmark.readme_agent [--loop auto|asyncio|uvloop]
```

It behaves as the test agent of `peers/README.md` needs for the benchmark client: a prompt
streams N `agent_message_chunk` updates (N = the first integer of its text, else 10) of
`$ACP_CHUNK` bytes of text (default 100), then answers `end_turn`; `_test/echo` returns
its params, `_test/stats` this process's CPU, peak RSS, engine twin and loop.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import TYPE_CHECKING

from acp_fast import Agent, Context, run_agent_stdio
from acp_fast.jsontypes import Json, JsonObject
from acp_fast.protocol import methods_v1, types_v1
from acp_fast.testy.common import process_stats

if TYPE_CHECKING:
    from acp_fast.roles import V1, AgentBuilder

__all__ = ["DRAIN_EVERY", "build", "main"]

#: Text bytes sent between two ``await cx.drain()`` (the README's "every ~256 KiB").
DRAIN_EVERY = 256 * 1024

_INT = re.compile(r"\d+")


def build(chunk: int) -> AgentBuilder[V1]:
    """The agent's builder: `session/new`, `session/prompt` streaming `chunk`-byte texts,
    `_test/echo` and `_test/stats`."""
    agent = Agent.builder().with_info("readme-agent", "1.0")

    @agent.on_request(methods_v1.session.new)
    def new_session(params: types_v1.NewSessionRequest, cx: Context) -> types_v1.NewSessionResponse:
        return {"sessionId": "s1"}

    @agent.on_request(methods_v1.session.prompt)
    async def prompt(params: types_v1.PromptRequest, cx: Context) -> types_v1.PromptResponse:
        words = " ".join(b["text"] for b in params["prompt"] if b["type"] == "text")
        found = _INT.search(words)
        unsent = 0
        for i in range(int(found.group(0)) if found else 10):
            text = str(i).rjust(chunk, "x")[-chunk:] if chunk else ""
            cx.send_session_update(params["sessionId"], {
                "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
            unsent += chunk
            if unsent >= DRAIN_EVERY:
                unsent = 0
                await cx.drain()
        return {"stopReason": "end_turn"}

    @agent.on_request("_test/echo")
    def echo(params: Json, cx: Context) -> Json:
        return params if params is not None else {}

    @agent.on_request("_test/stats")
    def stats(params: Json, cx: Context) -> JsonObject:
        return process_stats(0)

    return agent


def main(argv: list[str] | None = None) -> None:
    """Serve the agent on stdio until EOF (`--loop` as every acp_fast runner)."""
    p = argparse.ArgumentParser(prog="acp_fast.benchmark.readme_agent", description=__doc__.split("\n\n")[0])
    p.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default=None,
                   help="event loop (default: ACP_FAST_LOOP, else uvloop when installed)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        chunk = max(0, int(os.environ.get("ACP_CHUNK", "100")))
    except ValueError:
        chunk = 100
    run_agent_stdio(build(chunk), loop=args.loop)


if __name__ == "__main__":
    main()
