#!/usr/bin/env node
// Draft ACP v2 client on the official TS SDK (experimental v2 unstable entrypoint: fork and
// auth/status are unstable there) exercising the
// seed behaviours against an agent command (acp_fast's interop tests run it against
// `acp-fast testy --versions 2 --require-auth`):
//   auth/status before and after auth/login (auth/status is exempt from auth_required),
//   session/fork (unstable) and the fork's replay through session/resume,
//   a failure after insertion (the `auth_required` scenario: idle + error stop reason),
//   session/close of an uninserted prompt (the `hold_before_insert` scenario: -32800).
// Prints one JSON line with what it observed.
//
// Usage: node seeds_client_v2.mjs -- <agent command...>
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk/experimental/v2/unstable";

const argv = process.argv.slice(2);
const cmd = argv.slice(argv.indexOf("--") + 1);
const child = spawn(cmd[0], cmd.slice(1), { stdio: ["pipe", "pipe", "inherit"], env: process.env });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const errInfo = (e) => ({ code: e?.code ?? null, message: e?.message ?? String(e) });
const text = (t) => [{ type: "text", text: t }];
const seen = [];
const waiters = [];

function onUpdate(params) {
  seen.push(params);
  for (const w of [...waiters]) {
    if (w.pred(params)) {
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve(params);
    }
  }
}

// The TS client may run notification handlers after it resolved a later response, so
// waits are for a specific update, never for "the response arrived".
function nextIdle(sessionId, withReason = true) {
  const pred = (p) => p.sessionId === sessionId && p.update.sessionUpdate === "state_update" &&
    p.update.state === "idle" && (!withReason || p.update.stopReason != null);
  return new Promise((resolve) => waiters.push({ pred, resolve }));
}

const kinds = (list) => list.map((p) => p.update.sessionUpdate + (p.update.state ? `:${p.update.state}` : ""));

const app = acp.client({ name: "ts-seeds-client-v2" });
app.onNotification(acp.methods.client.session.update, ({ params }) => { onUpdate(params); });

let out;
try {
  out = await app.connectWith(stream, async (agent) => {
    const r = {};
    const init = await agent.request(acp.methods.agent.initialize, {
      protocolVersion: 2, info: { name: "ts-seeds-client-v2", version: "0" }, capabilities: {},
    });
    r.capabilities = init.capabilities;
    r.authMethods = init.authMethods ?? [];
    r.statusBefore = await agent.request(acp.methods.agent.auth.status, {});
    try {
      await agent.request(acp.methods.agent.session.new, { cwd: process.cwd() });
      r.newBeforeLogin = "accepted";
    } catch (e) {
      r.newBeforeLogin = errInfo(e);
    }
    r.login = await agent.request(acp.methods.agent.auth.login, { methodId: r.authMethods[0]?.methodId });
    r.statusAfter = await agent.request(acp.methods.agent.auth.status, {});

    const { sessionId } = await agent.request(acp.methods.agent.session.new, { cwd: process.cwd() });
    let idle = nextIdle(sessionId);
    r.receipt = await agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("echo remember me") });
    await idle;
    r.fork = await agent.request(acp.methods.agent.session.fork, { sessionId, cwd: process.cwd() });
    seen.length = 0;
    const snapshot = nextIdle(r.fork.sessionId, false);
    r.resumed = await agent.request(acp.methods.agent.session.resume, {
      sessionId: r.fork.sessionId, cwd: process.cwd(), replayFrom: { type: "start" },
    });
    await snapshot;
    r.forkReplay = seen.map((p) => ({ sessionId: p.sessionId, ...p.update }));

    // a failure after insertion: the prompt response stays successful, idle carries the error
    idle = nextIdle(r.fork.sessionId);
    seen.length = 0;
    r.failedReceipt = await agent.request(acp.methods.agent.session.prompt, {
      sessionId: r.fork.sessionId, prompt: text("auth_required"),
    });
    r.failedIdle = (await idle).update;
    r.failedKinds = kinds(seen);

    // close while a prompt is held before insertion: -32800 and idle cancelled before the close response
    seen.length = 0;
    const held = agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("hold_before_insert") })
      .then((v) => ({ result: v }), (e) => ({ error: errInfo(e) }));
    while (!seen.some((p) => p.update.state === "running")) await new Promise((res) => setTimeout(res, 10));
    const cancelled = nextIdle(sessionId);
    r.closed = await agent.request(acp.methods.agent.session.close, { sessionId });
    r.held = await held;
    r.closeIdle = (await cancelled).update;
    r.closeKinds = kinds(seen);
    return r;
  });
} catch (e) {
  out = { thrown: errInfo(e) };
}
child.stdin.end();
const exit = await new Promise((resolve) => {
  const t = setTimeout(() => { child.kill("SIGKILL"); resolve("killed"); }, 5000);
  child.on("exit", (code, sig) => { clearTimeout(t); resolve(code ?? sig); });
  if (child.exitCode !== null) { clearTimeout(t); resolve(child.exitCode); }
});
console.log(JSON.stringify({ ...out, agentExit: exit }));
