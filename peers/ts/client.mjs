#!/usr/bin/env node
// Minimal ACP v1 client built on the official TypeScript SDK
// (@agentclientprotocol/sdk 2.4.0, default entrypoint = stable ACP v1).
//
// Spawns an agent command over stdio, runs initialize -> session/new ->
// session/prompt (asking for N chunks), counts session/update notifications and
// the text bytes they carry, optionally runs M request round trips (sequential,
// or K in flight), prints one JSON line.
//
// Usage:
//   node client.mjs [--n N] [--m M] [--rtt-method echo|prompt|none]
//                   [--inflight K] [--inflight-m X] [--warmup W] [--permission]
//                   [--raw-updates] [--large] [-- <agent command> [args...]]
// Default agent command: node agent.mjs (next to this file).
//
// Phases, in order: initialize, session/new, [warm-up], one prompt of N chunks
// (skipped when N = 0), M sequential round trips, then X requests with K in flight.
// --rtt-method echo   : the M round trips are `_test/echo` extension requests
//                       (raw params, result checked)
// --rtt-method prompt : M sequential `session/prompt` requests asking for 0 chunks
//                       (full ACP method: zod validation on the agent side)
// --inflight K        : after the sequential phase, keep K `_test/echo` requests
//                       in flight until X (--inflight-m, default M) are answered
// --large             : large frames: the agent gets ACP_CHUNK=1048576 (unless
//                       ACP_CHUNK is already set) and N defaults to 100
// --warmup W          : one unmeasured prompt of W chunks and W echo round trips
//                       first, so the measured part runs on JIT-optimised code
//
// Output (one JSON line; times in ms unless the name says Us = microseconds):
//   startupMs (spawn -> initialize response), initMs, sessionNewMs, n, chunkSize,
//   prompt phase: updatesReceived, updatesOk, textBytes, textOk, stopReason,
//     promptMs, firstUpdateMs, notificationsPerSec, textMiBPerSec,
//     streamClientCpuUsPerMsg, streamAgentCpuUsPerMsg (CPU µs per notification
//     on each side during the prompt; the agent side needs `_test/stats`);
//   sequential phase: rttMethod, m, roundTripsPerSec, rttTotalMs, meanRttUs,
//     p50RttUs, p99RttUs, maxRttUs;
//   in-flight phase: inflight, inflightM, requestsPerSec, inflightRttTotalMs,
//     inflightMeanRttUs, inflightP50RttUs, inflightP99RttUs, inflightMaxRttUs;
//   agentMaxRssKiB, agentCpuMs (from `_test/stats`, null when unsupported),
//   clientMaxRssKiB, clientCpuMs, agentExit.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { parseArgs, latencySummary, runRequests, stopChild, cpuSnapshot, cpuPerMessage } from "./common.mjs";

const args = parseArgs(process.argv.slice(2), "agent.mjs", import.meta.url);
const { N, M, RTT_METHOD, INFLIGHT, INFLIGHT_M, WARMUP, PERMISSION, RAW_UPDATES, CHUNK, cmd, childEnv } = args;

const now = () => performance.now();
const tSpawn = now();
const child = spawn(cmd[0], cmd.slice(1), { stdio: ["pipe", "pipe", "inherit"], env: childEnv });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

let updates = 0;
let textBytes = 0;
let firstUpdateAt = 0;
let permissionRequests = 0;

// --raw-updates: receive session/update through the raw "*" fallback instead
// of the typed handler (skips the handler's own zod parse; the SDK's built-in
// session-update router still parses every session/update once).
const onUpdate = ({ params }) => {
  if (updates === 0) firstUpdateAt = now();
  updates++;
  const u = params.update;
  if (u.sessionUpdate === "agent_message_chunk" && u.content.type === "text") {
    textBytes += u.content.text.length;
  }
};
const app = acp.client({ name: "ts-sdk-test-client" });
if (RAW_UPDATES) app.onNotification("*", onUpdate);
else app.onNotification(acp.methods.client.session.update, onUpdate);
app.onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
  permissionRequests++;
  return { outcome: { outcome: "selected", optionId: params.options[0].optionId } };
});

const result = await app.connectWith(stream, async (agent) => {
  const t0 = now();
  const init = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false } },
    clientInfo: { name: "ts-sdk-test-client", version: "0.1.0" },
  });
  const tInit = now();
  const session = await agent.request(acp.methods.agent.session.new, {
    cwd: process.cwd(),
    mcpServers: [],
  });
  const tNew = now();

  if (WARMUP > 0) {
    await agent.request(acp.methods.agent.session.prompt, {
      sessionId: session.sessionId,
      prompt: [{ type: "text", text: `warmup ${WARMUP}` }],
    });
    for (let i = 0; i < WARMUP && M > 0 && RTT_METHOD === "echo"; i++) {
      await agent.request("_test/echo", { i });
    }
    await new Promise((r) => setImmediate(r));
    updates = 0;
    textBytes = 0;
    firstUpdateAt = 0;
  }

  const out = {
    sdk: "ts",
    sdkVersion: "2.4.0",
    agentCmd: cmd.join(" "),
    protocolVersion: init.protocolVersion,
    agentInfo: init.agentInfo ?? null,
    startupMs: +(tInit - tSpawn).toFixed(3),
    initMs: +(tInit - t0).toFixed(3),
    sessionNewMs: +(tNew - tInit).toFixed(3),
    n: N,
    chunkSize: CHUNK,
    warmup: WARMUP,
  };

  if (N > 0 || PERMISSION) {
    const text = `${PERMISSION ? "permission " : ""}stream ${N} chunks`;
    const cpu0 = await cpuSnapshot(agent);
    const tp0 = now();
    const resp = await agent.request(acp.methods.agent.session.prompt, {
      sessionId: session.sessionId,
      prompt: [{ type: "text", text }],
    });
    const tp1 = now();
    // Let any notification handlers still in the microtask queue finish.
    await new Promise((r) => setImmediate(r));
    const cpu1 = await cpuSnapshot(agent);
    const expected = N + (PERMISSION ? 1 : 0);
    const secs = (tp1 - tp0) / 1000;
    Object.assign(out, {
      updatesReceived: updates,
      updatesOk: updates === expected,
      textBytes,
      // With --permission one extra chunk carries "permission:<outcome>".
      textOk: PERMISSION ? textBytes >= N * CHUNK : textBytes === N * CHUNK,
      permissionRequests,
      stopReason: resp.stopReason,
      promptMs: +(tp1 - tp0).toFixed(3),
      firstUpdateMs: firstUpdateAt ? +(firstUpdateAt - tp0).toFixed(3) : null,
      notificationsPerSec: N > 0 ? Math.round(N / secs) : null,
      textMiBPerSec: N > 0 ? +(textBytes / 1048576 / secs).toFixed(2) : null,
      ...cpuPerMessage(cpu0, cpu1, N),
    });
  }

  if (M > 0 && RTT_METHOD !== "none") {
    let one;
    if (RTT_METHOD === "echo") {
      one = async (i) => {
        const r = await agent.request("_test/echo", { i });
        if (r.i !== i) throw new Error(`echo mismatch at ${i}`);
      };
    } else if (RTT_METHOD === "prompt") {
      one = async () => {
        await agent.request(acp.methods.agent.session.prompt, {
          sessionId: session.sessionId,
          prompt: [{ type: "text", text: "0" }],
        });
      };
    } else {
      throw new Error(`unknown --rtt-method ${RTT_METHOD}`);
    }
    const { totalMs, latMs } = await runRequests(M, 1, one, now);
    Object.assign(out, { rttMethod: RTT_METHOD, m: M }, latencySummary("roundTripsPerSec", "", totalMs, latMs));
  }

  if (INFLIGHT > 0 && INFLIGHT_M > 0) {
    const echo = async (i) => {
      const r = await agent.request("_test/echo", { i });
      if (r.i !== i) throw new Error(`echo mismatch at ${i}`);
    };
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

result.agentExit = await stopChild(child);
console.log(JSON.stringify(result));
