#!/usr/bin/env node
// Interop probe: an ACP client on the official TypeScript SDK (@agentclientprotocol/sdk,
// resolved from $ACP_PEERS_TS/node_modules) runs one scenario against an agent command and
// prints one JSON line with what it observed. Test-only (tests/interop/test_ts.py).
//
//   node ts_probe.mjs <scenario> -- <agent command...>
//
// Scenarios: v1-cancel, v1-cancel-request, v1-errors, v1-callbacks, v1-init-error,
//            v2-cancel, v2-permission, v2-resume
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import path from "node:path";

const peers = process.env.ACP_PEERS_TS;
const req = createRequire(path.join(peers, "package.json"));
const v1 = await import(pathToFileURL(req.resolve("@agentclientprotocol/sdk")).href);
const v2 = await import(pathToFileURL(req.resolve("@agentclientprotocol/sdk/experimental/v2")).href);

const argv = process.argv.slice(2);
const scenario = argv[0];
const cmd = argv.slice(argv.indexOf("--") + 1);
const child = spawn(cmd[0], cmd.slice(1), { stdio: ["pipe", "pipe", "inherit"], env: process.env });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const errInfo = (e) => ({ code: e?.code ?? null, message: e?.message ?? String(e), data: e?.data ?? null });
const text = (t) => [{ type: "text", text: t }];

function stream(acp) {
  return acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
}

const V1_INIT = { protocolVersion: 1, clientCapabilities: {}, clientInfo: { name: "ts-probe", version: "0" } };

async function v1Client(body, setup = () => {}) {
  const updates = [];
  const app = v1.client({ name: "ts-probe" });
  app.onNotification(v1.methods.client.session.update, ({ params }) => { updates.push(params.update); });
  setup(app);
  return app.connectWith(stream(v1), (agent) => body(agent, updates));
}

async function v2Client(body, setup = () => {}) {
  const app = v2.client({ name: "ts-probe-v2" });
  setup(app);
  return app.connectWith(stream(v2), async (agent) => {
    const init = await agent.request(v2.methods.agent.initialize, {
      protocolVersion: 2, info: { name: "ts-probe-v2", version: "0" }, capabilities: {},
    });
    return body(agent, init);
  });
}

async function readUntilStop(session) {
  const kinds = [];
  const texts = [];
  for (;;) {
    const msg = await session.nextUpdate();
    const u = msg.update;
    kinds.push(u.sessionUpdate + (u.state ? `:${u.state}` : ""));
    if (u.sessionUpdate === "agent_message_chunk" && u.content?.type === "text") texts.push(u.content.text);
    if (msg.kind === "stop") return { kinds, texts, stopReason: msg.stopReason };
  }
}

const scenarios = {
  "v1-cancel": () => v1Client(async (agent) => {
    await agent.request(v1.methods.agent.initialize, V1_INIT);
    const { sessionId } = await agent.request(v1.methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] });
    const pending = agent.request(v1.methods.agent.session.prompt, { sessionId, prompt: text("wait_for_cancel") });
    await sleep(100);
    await agent.notify(v1.methods.agent.session.cancel, { sessionId });
    return { result: await pending };
  }),
  "v1-cancel-request": () => v1Client(async (agent) => {
    await agent.request(v1.methods.agent.initialize, V1_INIT);
    const { sessionId } = await agent.request(v1.methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] });
    const abort = new AbortController();
    const pending = agent.request(v1.methods.agent.session.prompt,
      { sessionId, prompt: text("wait_for_cancel") }, { cancellationSignal: abort.signal });
    await sleep(100);
    abort.abort();
    try { return { result: await pending }; } catch (e) { return { error: errInfo(e) }; }
  }),
  "v1-errors": () => v1Client(async (agent) => {
    await agent.request(v1.methods.agent.initialize, V1_INIT);
    const out = {};
    try { await agent.request("_no/such_method", {}); out.unknown = null; } catch (e) { out.unknown = errInfo(e); }
    try { await agent.request("session/prompt", { sessionId: "testy-session-404", prompt: text("hi") }); out.unknownSession = null; }
    catch (e) { out.unknownSession = errInfo(e); }
    try { await agent.request("session/new", { cwd: 42, mcpServers: [] }); out.badParams = null; }
    catch (e) { out.badParams = errInfo(e); }
    out.echo = await agent.request("_test/echo", { deep: { a: [1, "two", null] } });
    return out;
  }),
  "v1-init-error": () => v1Client(async (agent) => {
    try { return { result: await agent.request(v1.methods.agent.initialize, V1_INIT) }; }
    catch (e) { return { error: errInfo(e) }; }
  }),
  "v1-callbacks": () => {
    const asked = [];
    return v1Client(async (agent, updates) => {
      await agent.request(v1.methods.agent.initialize, {
        ...V1_INIT, clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
      });
      const { sessionId } = await agent.request(v1.methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] });
      const result = await agent.request(v1.methods.agent.session.prompt, { sessionId, prompt: text("callbacks") });
      const last = updates.filter((u) => u.sessionUpdate === "agent_message_chunk").pop();
      return { result, asked, report: last?.content?.text ?? null };
    }, (app) => {
      const files = new Map();
      app.onRequest(v1.methods.client.session.requestPermission, ({ params }) => {
        asked.push("session/request_permission");
        return { outcome: { outcome: "selected", optionId: params.options[0].optionId } };
      });
      app.onRequest("fs/write_text_file", (p) => p, ({ params }) => {
        asked.push("fs/write_text_file"); files.set(params.path, params.content); return {};
      });
      app.onRequest("fs/read_text_file", (p) => p, ({ params }) => {
        asked.push("fs/read_text_file"); return { content: files.get(params.path) ?? "" };
      });
    });
  },
  "v2-cancel": () => v2Client(async (agent, init) =>
    agent.buildSession(process.cwd()).withSession(async (session) => {
      const receipt = await session.prompt("wait_for_cancel");
      await sleep(100);
      await agent.notify("session/cancel", { sessionId: session.sessionId });
      return { init, receipt, ...(await readUntilStop(session)) };
    })),
  "v2-permission": () => {
    const asked = [];
    return v2Client(async (agent, init) =>
      agent.buildSession(process.cwd()).withSession(async (session) => {
        const receipt = await session.prompt("permission stream 2 chunks of 3 bytes");
        return { receipt, asked, ...(await readUntilStop(session)) };
      }), (app) => {
      app.onRequest(v2.methods.client.session.requestPermission, ({ params }) => {
        asked.push(params.title);
        return { outcome: { outcome: "selected", optionId: params.options[1].optionId } };
      });
    });
  },
  "v2-resume": () => {
    const seen = [];
    return v2Client(async (agent) => {
      const { sessionId } = await agent.request("session/new", { cwd: process.cwd() });
      const receipt = await agent.request("session/prompt", { sessionId, prompt: text("echo remember me") });
      await sleep(200);
      seen.length = 0;
      const resumed = await agent.request("session/resume", { sessionId, cwd: process.cwd(), replayFrom: { type: "start" } });
      const atResponse = seen.length;
      return { receipt, resumed, seen, atResponse };
    }, (app) => {
      app.onNotification(v2.methods.client.session.update, ({ params }) => { seen.push(params.update); });
    });
  },
};

const run = scenarios[scenario];
if (!run) { console.error(`unknown scenario ${scenario}`); process.exit(2); }
let out;
try { out = await run(); } catch (e) { out = { thrown: errInfo(e) }; }
child.stdin.end();
const exit = await new Promise((resolve) => {
  const t = setTimeout(() => { child.kill("SIGKILL"); resolve("killed"); }, 5000);
  child.on("exit", (code, sig) => { clearTimeout(t); resolve(code ?? sig); });
  if (child.exitCode !== null) { clearTimeout(t); resolve(child.exitCode); }
});
console.log(JSON.stringify({ scenario, ...out, agentExit: exit }));
