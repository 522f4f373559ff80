#!/usr/bin/env node
// Minimal *draft ACP v2* client on the TS SDK's experimental entrypoint
// (@agentclientprotocol/sdk/experimental/v2, PROTOCOL_VERSION = 2).
// Spawns an agent over stdio (default: node agent_v2.mjs), initializes with
// protocolVersion 2, opens a session, sends one prompt asking for N chunks and
// reads session updates (ActiveSession.nextUpdate) until the idle state_update
// that ends the turn; optionally runs M `_test/echo` round trips. Prints one
// JSON line with the same fields as client.mjs.
//
// Usage:
//   node client_v2.mjs [--n N] [--m M] [--rtt-method echo|none] [--inflight K]
//                      [--inflight-m X] [--warmup W] [--large] [-- <agent command...>]
// Phases and output fields as in client.mjs.
// (--permission and --rtt-method prompt are v1-only; --raw-updates is ignored.)
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk/experimental/v2";
import { parseArgs, latencySummary, runRequests, stopChild, cpuSnapshot, cpuPerMessage } from "./common.mjs";

const args = parseArgs(process.argv.slice(2), "agent_v2.mjs", import.meta.url);
const { N, M, RTT_METHOD, INFLIGHT, INFLIGHT_M, WARMUP, PERMISSION, CHUNK, cmd, childEnv } = args;
if (PERMISSION) throw new Error("--permission is not supported by the v2 client");
if (RTT_METHOD !== "echo" && RTT_METHOD !== "none") {
  throw new Error(`--rtt-method ${RTT_METHOD} is not supported by the v2 client`);
}

const now = () => performance.now();
const tSpawn = now();
const child = spawn(cmd[0], cmd.slice(1), { stdio: ["pipe", "pipe", "inherit"], env: childEnv });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

/**
 * Sends one prompt and reads the session's updates until the idle state_update.
 * Returns per-kind counts, the text bytes of agent_message_chunk updates, the
 * stop reason and the time of the first update.
 */
async function turn(session, text) {
  const kinds = {};
  let textBytes = 0;
  let firstUpdateAt = 0;
  const promptResponse = await session.prompt(text);
  for (;;) {
    const msg = await session.nextUpdate();
    if (!firstUpdateAt) firstUpdateAt = now();
    const u = msg.update;
    const key = u.sessionUpdate + (u.state ? `:${u.state}` : "");
    kinds[key] = (kinds[key] ?? 0) + 1;
    if (u.sessionUpdate === "agent_message_chunk" && u.content.type === "text") {
      textBytes += u.content.text.length;
    }
    if (msg.kind === "stop") return { kinds, textBytes, firstUpdateAt, promptResponse, stopReason: msg.stopReason };
  }
}

const result = await acp.client({ name: "ts-sdk-test-client-v2" }).connectWith(stream, async (agent) => {
  const t0 = now();
  const init = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    info: { name: "ts-sdk-test-client-v2", version: "0.1.0" },
    capabilities: {},
  });
  const tInit = now();
  return agent.buildSession(process.cwd()).withSession(async (session) => {
    const tNew = now();
    if (WARMUP > 0) {
      await turn(session, `warmup ${WARMUP}`);
      for (let i = 0; i < WARMUP && M > 0 && RTT_METHOD === "echo"; i++) {
        await agent.request("_test/echo", { i });
      }
    }
    const out = {
      sdk: "ts",
      sdkVersion: "2.4.0",
      agentCmd: cmd.join(" "),
      protocolVersion: init.protocolVersion,
      agentInfo: init.info ?? null,
      startupMs: +(tInit - tSpawn).toFixed(3),
      initMs: +(tInit - t0).toFixed(3),
      sessionNewMs: +(tNew - tInit).toFixed(3),
      n: N,
      chunkSize: CHUNK,
      warmup: WARMUP,
    };
    if (N > 0) {
      const cpu0 = await cpuSnapshot(agent);
      const tp0 = now();
      const r = await turn(session, `stream ${N} chunks`);
      const tp1 = now();
      const cpu1 = await cpuSnapshot(agent);
      const secs = (tp1 - tp0) / 1000;
      const chunks = r.kinds.agent_message_chunk ?? 0;
      Object.assign(out, {
        promptResponse: r.promptResponse,
        updates: r.kinds,
        updatesReceived: chunks,
        updatesOk: chunks === N,
        textBytes: r.textBytes,
        textOk: r.textBytes === N * CHUNK,
        stopReason: r.stopReason,
        promptMs: +(tp1 - tp0).toFixed(3),
        firstUpdateMs: +(r.firstUpdateAt - tp0).toFixed(3),
        notificationsPerSec: Math.round(N / secs),
        textMiBPerSec: +(r.textBytes / 1048576 / secs).toFixed(2),
        ...cpuPerMessage(cpu0, cpu1, N),
      });
    }
    const echo = async (i) => {
      const r = await agent.request("_test/echo", { i });
      if (r.i !== i) throw new Error(`echo mismatch at ${i}`);
    };
    if (M > 0 && RTT_METHOD === "echo") {
      const { totalMs, latMs } = await runRequests(M, 1, echo, now);
      Object.assign(out, { rttMethod: RTT_METHOD, m: M }, latencySummary("roundTripsPerSec", "", totalMs, latMs));
    }
    if (INFLIGHT > 0 && INFLIGHT_M > 0) {
      const { totalMs, latMs } = await runRequests(INFLIGHT_M, INFLIGHT, echo, now);
      Object.assign(
        out,
        { inflight: INFLIGHT, inflightM: INFLIGHT_M },
        latencySummary("requestsPerSec", "inflight", totalMs, latMs),
      );
    }
    try {
      const stats = await agent.request("_test/stats", {});
      out.agentMaxRssKiB = stats.maxRssKiB;
      out.agentCpuMs = Math.round((stats.userCpuUs + stats.systemCpuUs) / 1000);
    } catch {
      out.agentMaxRssKiB = null; // agent without the _test/stats extension
      out.agentCpuMs = null;
    }
    const ru = process.resourceUsage();
    out.clientMaxRssKiB = ru.maxRSS;
    out.clientCpuMs = Math.round((ru.userCPUTime + ru.systemCPUTime) / 1000);
    return out;
  });
});

result.agentExit = await stopChild(child);
console.log(JSON.stringify(result));
