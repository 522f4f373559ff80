#!/usr/bin/env node
// A pass-through ACP proxy (a proxy-chain component run by a conductor) on the official
// TypeScript SDK (@agentclientprotocol/sdk 2.4.0), newline-delimited JSON-RPC over stdio.
//
// SDK 2.4.0 has no proxy API: its schema names the proxy methods (PROXY_METHODS in the
// `/unstable` entrypoint: `proxy/initialize`, `proxy/successor`) and generates their types,
// but "does not route them through the agent or client APIs", and the JSON-RPC connection
// class (core/jsonrpc) is not exported. So the proxy is written on the public agent app
// layer: `acp.agent()` with raw `"*"` fallbacks for requests and notifications (no
// initialize handler, so the SDK's initialization gate stays off), `client.request(...)` /
// `client.notify(...)` to send any method on the single connection to the conductor, and the
// SDK's built-in `$/cancel_request` handling (the handler's AbortSignal, passed on as the
// forwarded request's `cancellationSignal`, which makes the SDK send `$/cancel_request` for
// the forwarded id: cancellation is re-issued per hop, never forwarded; the SDK also hands
// the `$/cancel_request` notification to the "*" fallback, which drops it).
//
// Routing (protocol.md §8.2, one connection to the conductor):
//   `proxy/initialize` | `_proxy/initialize` R  -> `initialize` wrapped in the successor
//                                                 envelope; its answer is our answer
//   `proxy/successor`  | `_proxy/successor` R/N -> from the successor: unwrapped and sent
//                                                 plain to the predecessor
//   anything else R/N                           -> from the predecessor: wrapped in the
//                                                 successor envelope
// The envelope spelling is the one the conductor used in its `…/initialize` (both are
// accepted). Params are forwarded as parsed JSON values (never re-shaped), results and errors
// (code, message, data) unchanged; the proxy never looks at the protocol version, so it
// serves ACP v1 and v2 chains alike.
//
// Env:
//   ACP_TS_PROXY_LOG=PATH  on exit, write a JSON summary of what was forwarded:
//                          {"name", "initialize", "spelling", "fromPredecessor": {method: n},
//                           "fromSuccessor": {method: n}, "cancelled": n}
//   ACP_TS_PROXY_NAME      the name in that summary (default "ts-proxy")
import { writeFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const LOG = process.env.ACP_TS_PROXY_LOG;
const summary = {
  name: process.env.ACP_TS_PROXY_NAME ?? "ts-proxy",
  initialize: 0,
  spelling: null,
  fromPredecessor: {},
  fromSuccessor: {},
  cancelled: 0,
};
const INITIALIZE = new Set(["proxy/initialize", "_proxy/initialize"]);
const SUCCESSOR = new Set(["proxy/successor", "_proxy/successor"]);
const CANCEL_REQUEST = acp.methods.protocol.cancelRequest; // "$/cancel_request"
let succ = "_proxy/successor"; // envelope method used toward the conductor (until it uses one)

function count(table, method) {
  table[method] = (table[method] ?? 0) + 1;
}

/** The inner message of a successor envelope, or a -32602 error. */
function unwrap(params) {
  if (params === null || typeof params !== "object" || Array.isArray(params) || typeof params.method !== "string") {
    throw acp.RequestError.invalidParams(undefined, "invalid successor envelope");
  }
  const inner = params.params;
  if (inner !== undefined && inner !== null && typeof inner !== "object") {
    throw acp.RequestError.invalidParams(undefined, "successor envelope params must be an object or array");
  }
  return { method: params.method, params: inner ?? undefined };
}

function envelope(method, params) {
  return params === undefined ? { method } : { method, params };
}

/** Send a request and give back its result; errors keep their code, message and data. */
async function forward(client, method, params, signal) {
  signal.addEventListener("abort", () => summary.cancelled++, { once: true });
  try {
    return await client.request(method, params, { cancellationSignal: signal });
  } catch (err) {
    if (err instanceof acp.RequestError) throw err;
    throw acp.RequestError.internalError(undefined, String(err?.message ?? err));
  }
}

const app = acp
  .agent({ name: "acp-fast-ts-proxy" })
  .onRequest("*", async ({ method, params, client, signal }) => {
    if (INITIALIZE.has(method)) {
      summary.initialize++;
      succ = method.startsWith("_") ? "_proxy/successor" : "proxy/successor";
      summary.spelling = succ;
      return forward(client, succ, envelope("initialize", params), signal);
    }
    if (SUCCESSOR.has(method)) {
      const inner = unwrap(params);
      count(summary.fromSuccessor, inner.method);
      return forward(client, inner.method, inner.params, signal);
    }
    count(summary.fromPredecessor, method);
    return forward(client, succ, envelope(method, params), signal);
  })
  .onNotification("*", ({ method, params, client }) => {
    // called in arrival order; notify() is called before any await, so order is kept
    if (method === CANCEL_REQUEST) return; // hop-local: the SDK already aborted that handler's signal
    if (SUCCESSOR.has(method)) {
      let inner;
      try {
        inner = unwrap(params);
      } catch {
        return; // a malformed envelope notification cannot be answered: dropped
      }
      if (inner.method === CANCEL_REQUEST) return; // never forwarded, even wrapped
      count(summary.fromSuccessor, inner.method);
      return client.notify(inner.method, inner.params);
    }
    count(summary.fromPredecessor, method);
    return client.notify(succ, envelope(method, params));
  });

const conn = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
conn.closed.then(() => {
  if (LOG) writeFileSync(LOG, JSON.stringify(summary) + "\n");
  process.exit(0);
});
