#!/usr/bin/env node
// Remote ACP client on the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0).
//
// Connects to an agent served over the network instead of spawning one:
// `http://…/acp` (or https) through the SDK's Streamable HTTP client transport
// (`@agentclientprotocol/sdk/experimental/http-client`, createHttpStream),
// `ws://…/acp` (or wss) through its WebSocket client transport
// (`@agentclientprotocol/sdk/experimental/ws-client`, createWebSocketStream).
// Protocol v1 uses the default entrypoint, v2 `@agentclientprotocol/sdk/experimental/v2`.
// Runs one scenario and prints one JSON line on stdout.
//
// Usage:
//   node remote_client.mjs URL SCENARIO [N] [--token T] [--protocol 1|2] [--timeout S]
//                          [--text PROMPT] [--method echo|set_mode] [--cancel-wait S]
//
// Scenarios (prompt texts of `acp-fast testy`, also understood by peers/ts/agent*.mjs):
//   stream N      one prompt `stream N chunks`; counts the agent_message_chunk updates,
//                 checks that their texts carry their index in order (testy starts each
//                 chunk's text with its index), reports the stop reason and the seconds.
//                 v1: the turn ends with the prompt response; v2: the prompt is answered
//                 with its receipt and the turn ends with the idle `state_update`.
//   permission    prompt `permission 1`: the agent asks session/request_permission
//                 mid-prompt; the client answers with the `allow` option and reports the
//                 outcome the agent streamed back (`permission:<optionId>`).
//   cancel        a long streamed prompt; after the first chunk the client sends the
//                 session/cancel notification; reports the stop reason (`cancelled`).
//   rpc-cancel    `$/cancel_request` through the SDK (aborting the request's
//                 `cancellationSignal`): v1 cancels a long streamed prompt after its first
//                 chunk, v2 a prompt held before insertion (testy's `hold_before_insert`,
//                 after its `running` state update); reports how the request ended
//                 (`error.code` -32800 expected, `honoured`) and whether `_test/echo`
//                 still works after.
//   roundtrips N  N sequential requests (`--method echo`: `_test/echo`, default;
//                 `set_mode`: session/set_mode, v1 only); reports the seconds.
//   suite N       stream N, permission, cancel and rpc-cancel, each on its own connection,
//                 in one process: `results` holds each one's fields, `ok` is true when
//                 every one is ok.
//
// Options:
//   --token T       `Authorization: Bearer T` on every HTTP request and on the upgrade
//   --protocol 1|2  ACP protocol version (default 1)
//   --timeout S     bound on each scenario (default 30 s); a hang is reported
//   --text PROMPT   overrides the scenario's prompt text
//   --cancel-wait S rpc-cancel: how long to wait for the cancelled request to end (default
//                   5 s); past that `honoured: false` and the turn is ended with session/cancel
//
// WebSocket needs `globalThis.WebSocket`; Node 20 has it behind --experimental-websocket,
// so the client re-runs itself with that flag when it is missing.
//
// Output fields: sdk, sdkVersion, transport (http/ws), protocol, scenario, ok,
// protocolVersion, agentName, initSeconds; per scenario updatesReceived,
// updatesAtResponse (v1: chunks seen when the prompt response resolved), inOrder,
// stopReason, seconds, updatesPerSec, permissionRequests, permissionOutcome,
// updatesBeforeCancel, cancelSeconds, result/error/honoured (rpc-cancel), echoAfter, m, method,
// roundTripsPerSec, closeSeconds (closing the connection); on failure ok: false with error {message, code?, data?}, the phase it
// failed in and the seconds since that phase started. Exit status 0 whenever the JSON line
// was printed (2 for a usage error).
import { spawnSync } from "node:child_process";

const SDK_VERSION = "2.4.0";
const SCENARIOS = new Set(["stream", "permission", "cancel", "rpc-cancel", "roundtrips", "suite"]);
const COUNTED = { stream: 1000, roundtrips: 100, suite: 1000 };
/** What `suite N` runs, each on its own connection. */
const SUITE = ["stream", "permission", "cancel", "rpc-cancel"];

function usage(message) {
  process.stderr.write(`remote_client.mjs: ${message}\n`);
  process.exit(2);
}

function parseCli(argv) {
  const opts = { token: null, protocol: 1, timeout: 30, text: null, method: "echo", "cancel-wait": 5 };
  const pos = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a.startsWith("--")) {
      const name = a.slice(2);
      if (!["token", "protocol", "timeout", "text", "method", "cancel-wait"].includes(name)) usage(`unknown option ${a}`);
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      opts[name] = argv[++i];
    } else {
      pos.push(a);
    }
  }
  const [url, scenario, count] = pos;
  if (!url || !/^(https?|wss?):\/\//.test(url)) usage("URL must be http(s)://… or ws(s)://…");
  if (!SCENARIOS.has(scenario)) usage(`scenario must be one of ${[...SCENARIOS].join(", ")}`);
  opts.protocol = Number(opts.protocol);
  if (opts.protocol !== 1 && opts.protocol !== 2) usage("--protocol must be 1 or 2");
  opts.timeout = Number(opts.timeout);
  opts.cancelWait = Number(opts["cancel-wait"]);
  delete opts["cancel-wait"];
  if (!["echo", "set_mode"].includes(opts.method)) usage("--method must be echo or set_mode");
  return { url, scenario, count: count !== undefined ? Number(count) : (COUNTED[scenario] ?? 0), ...opts };
}

const args = parseCli(process.argv.slice(2));
const transportKind = /^wss?:/.test(args.url) ? "ws" : "http";

if (transportKind === "ws" && typeof globalThis.WebSocket !== "function") {
  if (process.env.ACP_REMOTE_CLIENT_REEXEC === "1") usage("this Node has no WebSocket (needs Node >= 20.10)");
  const r = spawnSync(process.execPath, ["--experimental-websocket", "--no-warnings", ...process.argv.slice(1)], {
    stdio: "inherit",
    env: { ...process.env, ACP_REMOTE_CLIENT_REEXEC: "1" },
  });
  process.exit(r.status ?? 1);
}

const acp = args.protocol === 2
  ? await import("@agentclientprotocol/sdk/experimental/v2")
  : await import("@agentclientprotocol/sdk");

const now = () => performance.now();
const secs = (ms) => +(ms / 1000).toFixed(4);
const tick = () => new Promise((r) => setImmediate(r));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const errInfo = (e) => {
  const info = { message: String(e?.message ?? e).slice(0, 500) };
  if (typeof e?.code === "number") info.code = e.code;
  if (e?.data !== undefined) info.data = e.data;
  return info;
};
const header = (scenario) => ({
  sdk: "ts",
  sdkVersion: SDK_VERSION,
  transport: transportKind,
  protocol: args.protocol,
  scenario,
  ok: false,
});
const headers = args.token ? { Authorization: `Bearer ${args.token}` } : undefined;

/** The stream for the URL's scheme. */
async function openStream() {
  if (transportKind === "http") {
    const { createHttpStream } = await import("@agentclientprotocol/sdk/experimental/http-client");
    return createHttpStream(args.url, { headers });
  }
  const { createWebSocketStream } = await import("@agentclientprotocol/sdk/experimental/ws-client");
  // The SDK calls `new WebSocket(url, protocols, { headers })`. Node's built-in WebSocket
  // takes headers in its second argument instead, so the token is passed on through that.
  const Native = globalThis.WebSocket;
  class WithHeaders extends Native {
    constructor(url, protocols, options) {
      if (options?.headers) super(url, { protocols: protocols ?? [], headers: options.headers });
      else super(url, protocols);
    }
  }
  return createWebSocketStream(args.url, { headers, WebSocket: WithHeaders });
}

function orderReport(texts) {
  for (let i = 0; i < texts.length; i++) {
    const m = /^\d+/.exec(texts[i]);
    if (!m || Number(m[0]) !== i) return { inOrder: false, firstOutOfOrder: i, firstOutOfOrderText: texts[i].slice(0, 40) };
  }
  return { inOrder: true };
}

/**
 * One scenario on its own connection: what the agent sent (`texts` of the chunks, `states`
 * of v2 state updates, permission requests), the result fields (`out`) and the phase.
 */
class Run {
  constructor(name, count) {
    this.name = name;
    this.count = count;
    this.out = header(name);
    this.texts = [];
    this.updates = 0;
    this.states = [];
    this.permissionRequests = 0;
    this.waiters = [];
    this.enter("connect");
  }

  enter(phase) {
    this.phase = phase;
    this.phaseStart = now();
  }

  onUpdate(params) {
    this.updates++;
    const u = params.update;
    if (u.sessionUpdate === "agent_message_chunk" && u.content?.type === "text") this.texts.push(u.content.text);
    if (u.sessionUpdate === "state_update") this.states.push({ state: u.state, stopReason: u.stopReason ?? null });
    for (const w of [...this.waiters]) {
      if (w.pred(params)) {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.resolve(params);
      }
    }
  }

  /** Resolves with the first update from now on that matches `pred`. */
  waitFor(pred) {
    return new Promise((resolve) => this.waiters.push({ pred, resolve }));
  }

  firstChunk() {
    return this.texts.length > 0
      ? Promise.resolve()
      : this.waitFor((p) => p.update.sessionUpdate === "agent_message_chunk");
  }

  /** v2: the idle state_update carrying a stop reason (the end of the turn). */
  idle(sessionId) {
    return this.waitFor((p) => p.sessionId === sessionId && p.update.sessionUpdate === "state_update"
      && p.update.state === "idle" && p.update.stopReason != null);
  }

  /** v1: the TS SDK may run notification handlers after it resolved a later response; let
   * them run (until `expected` chunks arrived, or 50 ms passed without a new one). */
  async settle(expected) {
    let last = this.texts.length;
    let quietSince = now();
    for (;;) {
      await tick();
      if (this.texts.length >= expected) return;
      if (this.texts.length !== last) {
        last = this.texts.length;
        quietSince = now();
      } else if (now() - quietSince > 50) {
        return;
      }
      await sleep(1);
    }
  }

  /** A client app whose handlers record into this run. */
  app() {
    const app = acp.client({ name: "ts-remote-client" });
    app.onNotification(acp.methods.client.session.update, ({ params }) => {
      this.onUpdate(params);
    });
    app.onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
      this.permissionRequests++;
      const options = params.options ?? [];
      const chosen = options.find((o) => o.optionId === "allow")
        ?? options.find((o) => String(o.kind).startsWith("allow")) ?? options[0];
      return { outcome: { outcome: "selected", optionId: chosen.optionId } };
    });
    return app;
  }

  /** Runs the scenario under the timeout; failures become `ok: false` fields. */
  async main() {
    const t0 = now();
    let conn;
    let timer;
    const timedOut = new Promise((resolve) => {
      timer = setTimeout(() => resolve("timeout"), args.timeout * 1000);
    });
    const work = (async () => {
      conn = this.app().connect(await openStream());
      await this.scenario(conn.agent);
      return "done";
    })().catch((e) => {
      Object.assign(this.out, { ok: false, phase: this.phase, error: errInfo(e),
        seconds: secs(now() - this.phaseStart), updatesReceived: this.texts.length });
      return "failed";
    });
    const how = await Promise.race([work, timedOut]);
    clearTimeout(timer);
    if (how === "timeout") {
      Object.assign(this.out, {
        ok: false,
        phase: this.phase,
        error: { message: `timeout: no result within ${args.timeout} s` },
        seconds: secs(now() - this.phaseStart),
        updatesReceived: this.texts.length,
      });
    }
    const tClose = now();
    // closing the connection ends the transport (the HTTP one DELETEs the connection)
    conn?.close();
    if (conn) await Promise.race([conn.closed, sleep(5000)]);
    this.out.closeSeconds = secs(now() - tClose);
    this.out.totalSeconds = secs(now() - t0);
    return this.out;
  }

  async scenario(agent) {
    const out = this.out;
    const v2 = args.protocol === 2;
    this.enter("initialize");
    const init = v2
      ? await agent.request(acp.methods.agent.initialize, {
        protocolVersion: 2,
        info: { name: "ts-remote-client", version: "0.1.0" },
        capabilities: {},
      })
      : await agent.request(acp.methods.agent.initialize, {
        protocolVersion: 1,
        clientCapabilities: { fs: { readTextFile: false, writeTextFile: false } },
        clientInfo: { name: "ts-remote-client", version: "0.1.0" },
      });
    out.initSeconds = secs(now() - this.phaseStart);
    out.protocolVersion = init.protocolVersion;
    out.agentName = (v2 ? init.info?.name : init.agentInfo?.name) ?? null;
    this.enter("session/new");
    const { sessionId } = await agent.request(acp.methods.agent.session.new,
      v2 ? { cwd: process.cwd() } : { cwd: process.cwd(), mcpServers: [] });
    const promptOf = (text) => [{ type: "text", text }];

    /** One turn: v1 returns the prompt response's stop reason, v2 the idle update's. */
    const turn = async (text, options) => {
      if (!v2) {
        const r = await agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: promptOf(text) }, options);
        out.updatesAtResponse = this.texts.length;
        return r.stopReason;
      }
      const done = this.idle(sessionId);
      out.receipt = await agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: promptOf(text) }, options);
      return (await done).update.stopReason;
    };

    if (this.name === "stream") {
      this.enter("prompt");
      const stop = await turn(args.text ?? `stream ${this.count} chunks`);
      if (!v2) await this.settle(this.count);
      const s = (now() - this.phaseStart) / 1000;
      Object.assign(out, {
        n: this.count,
        updatesReceived: this.texts.length,
        allUpdates: this.updates,
        stopReason: stop,
        seconds: +s.toFixed(4),
        updatesPerSec: s > 0 ? Math.round(this.texts.length / s) : null,
        ...orderReport(this.texts),
      });
    } else if (this.name === "permission") {
      this.enter("prompt");
      const stop = await turn(args.text ?? "permission 1");
      if (!v2) await this.settle(2);
      // testy and agent*.mjs stream `permission:<optionId>` (peers/*/remote_server --number
      // puts the chunk index before it)
      const p = this.texts.map((t) => /permission:(.*)$/.exec(t)).find((m) => m);
      Object.assign(out, {
        permissionRequests: this.permissionRequests,
        permissionOutcome: p ? p[1] : null,
        stopReason: stop,
        updatesReceived: this.texts.length,
        seconds: secs(now() - this.phaseStart),
      });
    } else if (this.name === "cancel") {
      this.enter("prompt");
      const running = turn(args.text ?? "stream 100000000 chunks");
      running.catch(() => {});
      const first = await Promise.race([this.firstChunk().then(() => "update"), running.then(() => "ended")]);
      if (first === "ended") {
        Object.assign(out, { stopReason: await running, cancelSent: false, updatesReceived: this.texts.length });
      } else {
        const before = this.texts.length;
        this.enter("cancel");
        await agent.notify(acp.methods.agent.session.cancel, { sessionId });
        const stop = await running;
        Object.assign(out, {
          stopReason: stop,
          cancelSent: true,
          updatesBeforeCancel: before,
          updatesReceived: this.texts.length,
          cancelSeconds: secs(now() - this.phaseStart),
        });
      }
    } else if (this.name === "rpc-cancel") {
      this.enter("prompt");
      const ac = new AbortController();
      const text = args.text ?? (v2 ? "hold_before_insert" : "stream 100000000 chunks");
      const request = agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: promptOf(text) },
        { cancellationSignal: ac.signal })
        .then((result) => ({ result }), (error) => ({ error: errInfo(error) }));
      const started = v2
        ? this.waitFor((p) => p.sessionId === sessionId && p.update.sessionUpdate === "state_update"
          && p.update.state === "running")
        : this.firstChunk();
      const first = await Promise.race([started.then(() => "started"), request.then(() => "ended")]);
      out.cancelSent = first === "started";
      if (first === "started") {
        this.enter("cancel");
        ac.abort();
      }
      // An agent without $/cancel_request support keeps going: after --cancel-wait seconds
      // that is reported (honoured: false) and the turn is ended with session/cancel.
      const ended = await Promise.race([request, sleep(args.cancelWait * 1000).then(() => null)]);
      out.honoured = ended !== null && ended.error?.code === -32800;
      out.cancelSeconds = secs(now() - this.phaseStart);
      if (ended === null) {
        this.enter("session/cancel");
        await agent.notify(acp.methods.agent.session.cancel, { sessionId });
        Object.assign(out, await request);
      } else {
        Object.assign(out, ended);
      }
      out.updatesReceived = this.texts.length;
      if (v2) {
        // the work the held prompt started ends idle (testy: stop reason `cancelled`)
        const end = this.states.find((s) => s.state === "idle" && s.stopReason) ?? await Promise.race([
          this.idle(sessionId).then((p) => ({ stopReason: p.update.stopReason })), sleep(2000).then(() => null)]);
        out.stopReason = end?.stopReason ?? null;
      }
      this.enter("echo-after");
      const echo = await agent.request("_test/echo", { after: "rpc-cancel" });
      out.echoAfter = echo?.after === "rpc-cancel";
    } else if (this.name === "roundtrips") {
      this.enter("roundtrips");
      if (args.method === "set_mode") {
        if (v2) throw new Error("session/set_mode does not exist in ACP v2");
        const modes = ["plan", "chat"];
        for (let i = 0; i < this.count; i++) {
          await agent.request(acp.methods.agent.session.setMode, { sessionId, modeId: modes[i % 2] });
        }
      } else {
        for (let i = 0; i < this.count; i++) {
          const r = await agent.request("_test/echo", { i });
          if (r?.i !== i) throw new Error(`echo mismatch at ${i}: ${JSON.stringify(r)}`);
        }
      }
      const s = (now() - this.phaseStart) / 1000;
      Object.assign(out, {
        m: this.count,
        method: args.method,
        seconds: +s.toFixed(4),
        roundTripsPerSec: s > 0 ? Math.round(this.count / s) : null,
      });
    }
    out.ok = true;
  }
}

let result;
if (args.scenario === "suite") {
  const results = {};
  for (const name of SUITE) results[name] = await new Run(name, name === "stream" ? args.count : 0).main();
  result = { ...header("suite"), ok: Object.values(results).every((r) => r.ok), results };
} else {
  result = await new Run(args.scenario, args.count).main();
}
process.stdout.write(JSON.stringify(result) + "\n");
// Leave even if a socket is still open (a timed-out scenario's connection, keep-alive).
setTimeout(() => process.exit(0), 100).unref();
