#!/usr/bin/env node
// The test agents of agent.mjs (ACP v1) and agent_v2.mjs (draft v2) served remotely by
// the official TypeScript SDK's server transport (@agentclientprotocol/sdk 2.4.0,
// `experimental/server` AcpServer + `experimental/node` adapters): Streamable HTTP and
// WebSocket on one endpoint, the version picked per connection by the first
// `initialize` (agentProtocolRouter, as agent_dual.mjs does on stdio).
//
// The SDK's WebSocket upgrade handler needs a server object with `handleUpgrade` (the
// `ws` package's shape), which peers/ts does not install; MiniWebSocketServer below is
// this script's own small RFC 6455 server side (text/binary/continuation, ping/pong,
// close; no extensions), enough for the SDK's ws-server logic to run on.
//
// Prints the port it listens on (one line on stdout) once listening; serves until killed.
//
// Options:
//   --port P      port on 127.0.0.1 (default 0: any free port)
//   --path PATH   the ACP endpoint (default /acp); anything else but GET /health is 404
//   --token T     require `Authorization: Bearer T` on every request and the WebSocket
//                 handshake (401 otherwise); a check of this script's, the SDK has none
//   --max-buffered B  the SDK's maxBufferedBytes (agent output held for a client that is
//                 behind) per connection; default 256 KiB here. The SDK's default, 64 MiB,
//                 lets a streaming agent run megabytes ahead of its client, so that a
//                 prompt's reply (say, to session/cancel) waits behind all of them.
//   --number      prefix the text of each agent_message_chunk with its index in the
//                 session and a colon ("0:xxx", "1:xxx", ...), so a client can check order
// Env: ACP_N, ACP_CHUNK as for agent.mjs / agent_v2.mjs.
import { createServer } from "node:http";
import { createHash, timingSafeEqual } from "node:crypto";
import { EventEmitter } from "node:events";
import { AcpServer } from "@agentclientprotocol/sdk/experimental/server";
import {
  createNodeHttpHandler,
  createNodeWebSocketUpgradeHandler,
} from "@agentclientprotocol/sdk/experimental/node";
import { agentProtocolRouter } from "@agentclientprotocol/sdk/experimental/v2";
import { app as v1 } from "./agent.mjs";
import { app as v2 } from "./agent_v2.mjs";

function option(name, dflt) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}

const PORT = Number(option("--port", "0"));
const PATH = option("--path", "/acp");
const TOKEN = option("--token", undefined);
const NUMBER = process.argv.includes("--number");
const MAX_BUFFERED = Number(option("--max-buffered", String(256 * 1024)));
const MAX_FRAME = 16 * 1024 * 1024;
const WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

// ---------------------------------------------------------------------------------------
// A minimal WebSocket server side (RFC 6455), shaped as the SDK's node adapter expects
// ---------------------------------------------------------------------------------------

class MiniWebSocket extends EventEmitter {
  constructor(socket) {
    super();
    this.socket = socket;
    this.readyState = 1; // OPEN
    this.buffer = Buffer.alloc(0);
    this.fragments = null; // { opcode, parts, size } of a fragmented message
    socket.on("data", (chunk) => this.onData(chunk));
    socket.on("close", () => this.onClosed());
    socket.on("error", (err) => this.emit("error", err));
  }

  get bufferedAmount() {
    return this.socket.writableLength;
  }

  send(data) {
    if (this.readyState !== 1) throw new Error("WebSocket is not open");
    this.writeFrame(0x1, Buffer.from(String(data), "utf8"));
  }

  close(code = 1000, reason = "") {
    if (this.readyState >= 2) return;
    this.readyState = 2; // CLOSING
    const why = Buffer.from(String(reason).slice(0, 120), "utf8");
    const payload = Buffer.alloc(2 + why.length);
    payload.writeUInt16BE(code, 0);
    why.copy(payload, 2);
    this.writeFrame(0x8, payload);
    this.socket.end();
    setTimeout(() => this.socket.destroy(), 1000).unref();
  }

  writeFrame(opcode, payload) {
    if (this.socket.destroyed) return;
    let header;
    if (payload.length < 126) {
      header = Buffer.from([0x80 | opcode, payload.length]);
    } else if (payload.length < 65536) {
      header = Buffer.alloc(4);
      header[0] = 0x80 | opcode;
      header[1] = 126;
      header.writeUInt16BE(payload.length, 2);
    } else {
      header = Buffer.alloc(10);
      header[0] = 0x80 | opcode;
      header[1] = 127;
      header.writeBigUInt64BE(BigInt(payload.length), 2);
    }
    this.socket.write(Buffer.concat([header, payload]));
  }

  onData(chunk) {
    this.buffer = this.buffer.length ? Buffer.concat([this.buffer, chunk]) : chunk;
    for (;;) {
      const frame = this.parseFrame();
      if (frame === null) return;
      if (frame === false) return; // protocol error: closed
      this.onFrame(frame);
      if (this.readyState >= 2 && frame.opcode === 0x8) return;
    }
  }

  // One complete frame from the buffer, null when more bytes are needed, false after
  // closing for a protocol error.
  parseFrame() {
    const b = this.buffer;
    if (b.length < 2) return null;
    const fin = (b[0] & 0x80) !== 0;
    const opcode = b[0] & 0x0f;
    const masked = (b[1] & 0x80) !== 0;
    let len = b[1] & 0x7f;
    let off = 2;
    if (len === 126) {
      if (b.length < 4) return null;
      len = b.readUInt16BE(2);
      off = 4;
    } else if (len === 127) {
      if (b.length < 10) return null;
      const big = b.readBigUInt64BE(2);
      if (big > BigInt(MAX_FRAME)) return this.fail(1009, "message too big");
      len = Number(big);
      off = 10;
    }
    if (!masked) return this.fail(1002, "client frames must be masked");
    if (len > MAX_FRAME) return this.fail(1009, "message too big");
    if (b.length < off + 4 + len) return null;
    const mask = b.subarray(off, off + 4);
    const payload = Buffer.from(b.subarray(off + 4, off + 4 + len));
    for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
    this.buffer = b.subarray(off + 4 + len);
    return { fin, opcode, payload };
  }

  fail(code, reason) {
    this.close(code, reason);
    this.buffer = Buffer.alloc(0);
    return false;
  }

  onFrame({ fin, opcode, payload }) {
    if (opcode === 0x8) {
      // close: answer it (once) and end the TCP stream
      if (this.readyState === 1) {
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1000;
        this.close(code === 1005 || code === 1006 ? 1000 : code);
      }
      return;
    }
    if (opcode === 0x9) {
      this.writeFrame(0xa, payload); // ping -> pong
      return;
    }
    if (opcode === 0xa) return; // pong
    if (opcode === 0x1 || opcode === 0x2) {
      if (this.fragments !== null) return void this.fail(1002, "unfinished fragmented message");
      if (fin) return void this.emitMessage(opcode, payload);
      this.fragments = { opcode, parts: [payload], size: payload.length };
      return;
    }
    if (opcode === 0x0) {
      const f = this.fragments;
      if (f === null) return void this.fail(1002, "continuation without a message");
      f.parts.push(payload);
      f.size += payload.length;
      if (f.size > MAX_FRAME) return void this.fail(1009, "message too big");
      if (fin) {
        this.fragments = null;
        this.emitMessage(f.opcode, Buffer.concat(f.parts));
      }
      return;
    }
    this.fail(1002, "unknown opcode");
  }

  emitMessage(opcode, data) {
    // The `ws` package's event shape: (data, isBinary).
    this.emit("message", data, opcode === 0x2);
  }

  onClosed() {
    if (this.readyState === 3) return;
    this.readyState = 3; // CLOSED
    this.emit("close");
  }
}

class MiniWebSocketServer extends EventEmitter {
  handleUpgrade(req, socket, head, callback) {
    const key = req.headers["sec-websocket-key"];
    if (typeof key !== "string" || req.headers["sec-websocket-version"] !== "13") {
      socket.end("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
      return;
    }
    const accept = createHash("sha1").update(key + WS_GUID).digest("base64");
    const headers = [
      "HTTP/1.1 101 Switching Protocols",
      "Upgrade: websocket",
      "Connection: Upgrade",
      `Sec-WebSocket-Accept: ${accept}`,
    ];
    this.emit("headers", headers, req); // the SDK's adapter adds Acp-Connection-Id here
    socket.setNoDelay(true);
    socket.write(headers.join("\r\n") + "\r\n\r\n");
    const ws = new MiniWebSocket(socket);
    if (head && head.length) ws.onData(head);
    callback(ws);
  }
}

// ---------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------

function authorized(req) {
  if (TOKEN === undefined) return true;
  const got = Buffer.from(String(req.headers["authorization"] ?? ""), "utf8");
  const want = Buffer.from(`Bearer ${TOKEN}`, "utf8");
  return got.length === want.length && timingSafeEqual(got, want);
}

function pathOf(req) {
  return new URL(req.url ?? "/", "http://localhost").pathname;
}

// Every message the agent writes passes through here on its way to the transport: with
// --number, agent_message_chunk texts get their index; and each write ends with a yield to
// Node's event loop (setImmediate). Without it, while the client keeps up, the SDK hands
// each message to the socket and the agent's next `await client.notify(...)` resumes in
// the same run of promise callbacks, so a long streamed prompt never lets Node read the
// next request (session/cancel is only seen after the prompt ends).
function agentView(stream) {
  const counts = new Map();
  const writer = stream.writable.getWriter();
  const number = (msg) => {
    const update = msg?.method === "session/update" ? msg.params?.update : undefined;
    if (!NUMBER || update?.sessionUpdate !== "agent_message_chunk" || update.content?.type !== "text") {
      return msg;
    }
    const sid = msg.params.sessionId;
    const k = counts.get(sid) ?? 0;
    counts.set(sid, k + 1);
    const content = { ...update.content, text: `${k}:${update.content.text}` };
    return { ...msg, params: { ...msg.params, update: { ...update, content } } };
  };
  const writable = new WritableStream({
    write: async (msg) => {
      await writer.write(number(msg));
      await new Promise((resolve) => setImmediate(resolve));
    },
    close: () => writer.close(),
    abort: (reason) => writer.abort(reason),
  });
  return { readable: stream.readable, writable };
}

const router = agentProtocolRouter().withV1(v1).withV2(v2);
const agent = { connect: (stream, options) => router.connect(agentView(stream), options) };
const acpServer = new AcpServer({ agent, maxBufferedBytes: MAX_BUFFERED });
const handleHttp = createNodeHttpHandler(acpServer);
const handleUpgrade = createNodeWebSocketUpgradeHandler(acpServer, new MiniWebSocketServer());

const server = createServer((req, res) => {
  const path = pathOf(req);
  if (path === "/health" && req.method === "GET") {
    res.writeHead(200, { "Content-Type": "text/plain" }).end("ok");
    return;
  }
  if (path !== PATH) {
    res.writeHead(404, { "Content-Type": "text/plain" }).end("not found");
    return;
  }
  if (!authorized(req)) {
    res.writeHead(401, { "Content-Type": "text/plain" }).end("unauthorized");
    return;
  }
  handleHttp(req, res);
});

server.on("upgrade", (req, socket, head) => {
  const refuse = (status) => {
    socket.end(`HTTP/1.1 ${status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
  };
  if (pathOf(req) !== PATH) return refuse("404 Not Found");
  if (!authorized(req)) return refuse("401 Unauthorized");
  handleUpgrade(req, socket, head);
});

server.listen(PORT, "127.0.0.1", () => {
  process.stdout.write(`${server.address().port}\n`);
});

const stop = () => {
  server.close();
  acpServer.close().finally(() => process.exit(0));
  setTimeout(() => process.exit(0), 1000).unref();
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
