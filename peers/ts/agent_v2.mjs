#!/usr/bin/env node
// Minimal *draft ACP v2* agent on the official TS SDK's experimental entrypoint
// (@agentclientprotocol/sdk/experimental/v2, PROTOCOL_VERSION = 2), over stdio.
// v2 prompt lifecycle: session/prompt is answered with {messageId} once the
// user message is inserted; progress and completion are reported through
// session/update `state_update` (running ... idle + stopReason).
//
// session/prompt: sends state_update running, user_message (echo), then N
// agent_message_chunk updates (N = first integer in the prompt text, else
// $ACP_N, else 10), then state_update idle with stopReason end_turn.
// _test/echo: extension request, returns its params.
// _test/stats: extension request, returns the agent's RSS/heap/CPU numbers.
// Env: ACP_N (default chunk count), ACP_CHUNK (chunk text size, default 100).
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import { randomUUID } from "node:crypto";
import * as acp from "@agentclientprotocol/sdk/experimental/v2";

const DEFAULT_N = Number(process.env.ACP_N ?? 10);
const TEXT = "x".repeat(Number(process.env.ACP_CHUNK ?? 100));
const sessions = new Set();

async function runTurn(client, sessionId, userMessageId, prompt, n) {
  const update = (u) =>
    client.notify(acp.methods.client.session.update, { sessionId, update: u });
  await update({ sessionUpdate: "user_message", messageId: userMessageId, content: prompt });
  const agentMessageId = randomUUID();
  for (let i = 0; i < n; i++) {
    await update({
      sessionUpdate: "agent_message_chunk",
      messageId: agentMessageId,
      content: { type: "text", text: TEXT },
    });
  }
  await update({ sessionUpdate: "state_update", state: "idle", stopReason: "end_turn" });
}

const app = acp
  .agent({ name: "ts-sdk-test-agent-v2" })
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    info: { name: "ts-sdk-test-agent-v2", version: "0.1.0" },
    capabilities: {},
  }))
  .onRequest(acp.methods.agent.session.new, () => {
    const sessionId = randomUUID();
    sessions.add(sessionId);
    return { sessionId };
  })
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    if (!sessions.has(params.sessionId)) throw acp.RequestError.sessionNotFound(params.sessionId);
    const text = params.prompt.filter((b) => b.type === "text").map((b) => b.text).join(" ");
    const m = /\d+/.exec(text);
    const n = m ? Number(m[0]) : DEFAULT_N;
    const messageId = randomUUID();
    await client.notify(acp.methods.client.session.update, {
      sessionId: params.sessionId,
      update: { sessionUpdate: "state_update", state: "running" },
    });
    // Respond first (prompt inserted), then stream the turn.
    setImmediate(() => {
      runTurn(client, params.sessionId, messageId, params.prompt, n).catch((e) =>
        console.error("turn failed", e),
      );
    });
    return { messageId };
  })
  .onRequest("_test/echo", (p) => p, ({ params }) => params ?? {})
  .onRequest("_test/stats", (p) => p, () => {
    const ru = process.resourceUsage();
    const mu = process.memoryUsage();
    return {
      maxRssKiB: ru.maxRSS,
      rssBytes: mu.rss,
      heapUsedBytes: mu.heapUsed,
      userCpuUs: ru.userCPUTime,
      systemCpuUs: ru.systemCPUTime,
    };
  });

export { app };

// Serve on stdio when run directly (agent_dual.mjs imports `app` instead).
if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const conn = app.connect(
    acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)),
  );
  conn.closed.then(() => process.exit(0));
}
