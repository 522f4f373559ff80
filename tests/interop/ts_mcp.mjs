#!/usr/bin/env node
// Interop: MCP-over-ACP with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0,
// experimental v2 with its unstable MCP-over-ACP helpers), resolved from
// $ACP_PEERS_TS/node_modules. Test-only (tests/interop/test_mcp_interop.py).
//
//   node ts_mcp.mjs agent
//       serve a v2 agent on stdio (McpOverAcpCaller): on session/prompt it lists the tools of
//       every ACP-transport MCP server its session declared and calls `add` {a: 2, b: 40}
//       (state running meanwhile), answers the prompt, then reports [{name, tools, call}] as
//       JSON in one agent_message_chunk and goes idle.
//   node ts_mcp.mjs client -- <agent command...>
//       a v2 client (McpOverAcpProvider) serving the MCP server "ts-tools" (tool `add`) to
//       the agent through buildSession().withMcpServer(); prints one JSON line with the
//       declaration, the MCP methods it served and the agent's reported text.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import path from "node:path";

const peers = process.env.ACP_PEERS_TS;
const req = createRequire(path.join(peers, "package.json"));
const acp = await import(pathToFileURL(req.resolve("@agentclientprotocol/sdk/experimental/v2/unstable")).href);

const mode = process.argv[2];

function serveAgent() {
  const mcp = new acp.McpOverAcpCaller({ clientInfo: { name: "ts-mcp-agent", version: "0" } });
  const declared = new Map();
  const app = acp
    .agent({ name: "ts-mcp-agent" })
    .onRequest(acp.methods.agent.initialize, () => ({
      protocolVersion: 2, info: { name: "ts-mcp-agent", version: "0" },
      capabilities: { session: { mcp: { acp: {} } } },
    }))
    .onNotification(acp.methods.agent.mcp.message, mcp.handleNotification)
    .onRequest(acp.methods.agent.session.new, ({ params }) => {
      const sessionId = `ts-mcp-session-${declared.size + 1}`;
      declared.set(sessionId, (params.mcpServers ?? []).filter(acp.isMcpServerAcp));
      return { sessionId };
    })
    .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
      const update = (u) => client.notify(acp.methods.client.session.update, { sessionId: params.sessionId, update: u });
      await update({ sessionUpdate: "state_update", state: "running" });
      const out = [];
      for (const d of declared.get(params.sessionId) ?? []) {
        const listed = await mcp.request(client, d.serverId, "tools/list", {});
        const called = await mcp.request(client, d.serverId, "tools/call", { name: "add", arguments: { a: 2, b: 40 } });
        out.push({ name: d.name, serverId: d.serverId, tools: (listed.result?.tools ?? []).map((t) => t.name),
                   listed, call: called.result ?? called });
      }
      setImmediate(async () => {
        await update({ sessionUpdate: "agent_message_chunk", messageId: "ts-a1",
                       content: { type: "text", text: JSON.stringify(out) } });
        await update({ sessionUpdate: "state_update", state: "idle", stopReason: "end_turn" });
      });
      return { messageId: "ts-m1" };
    });
  const conn = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
  conn.closed.then(() => process.exit(0));
}

async function runClient() {
  const argv = process.argv.slice(2);
  const cmd = argv.slice(argv.indexOf("--") + 1);
  const child = spawn(cmd[0], cmd.slice(1), { stdio: ["pipe", "pipe", "inherit"], env: process.env });
  const served = [];
  const provider = new acp.McpOverAcpProvider();
  const handler = async ({ method, params, protocolVersion }) => {
    served.push({ method, protocolVersion });
    if (method === "server/discover") {
      return { result: { supportedVersions: ["2026-07-28"], capabilities: { tools: {} }, resultType: "complete",
                         cacheScope: "private", ttlMs: 0,
                         _meta: { "io.modelcontextprotocol/serverInfo": { name: "ts-tools", version: "0" } } } };
    }
    if (method === "tools/list") {
      return { result: { resultType: "complete", cacheScope: "private", ttlMs: 0, tools: [{
        name: "add", description: "Add two numbers.",
        inputSchema: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"] },
      }] } };
    }
    if (method === "tools/call" && params?.name === "add") {
      const sum = params.arguments.a + params.arguments.b;
      return { result: { resultType: "complete", content: [{ type: "text", text: String(sum) }],
                         structuredContent: { result: sum }, isError: false } };
    }
    throw new acp.McpProtocolError(-32601, `no such MCP method: ${method}`);
  };
  const app = acp.client({ name: "ts-mcp-client" }).onRequest(acp.methods.client.mcp.message, provider.handleRequest);
  const out = await app.connectWith(
    acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout)),
    async (agent) => {
      const init = await agent.request(acp.methods.agent.initialize, {
        protocolVersion: 2, info: { name: "ts-mcp-client", version: "0" }, capabilities: {},
      });
      const tools = provider.registerServer(agent, { name: "ts-tools", handler });
      return agent.buildSession(process.cwd()).withMcpServer(tools.declaration).withSession(async (session) => {
        const receipt = await session.prompt("use the tools");
        const texts = [];
        for (;;) {
          const msg = await session.nextUpdate();
          if (msg.kind === "stop") return { init, declaration: tools.declaration, receipt, texts, served, stopReason: msg.stopReason };
          const u = msg.update;
          if (u?.sessionUpdate === "agent_message_chunk") texts.push(u.content.text);
        }
      });
    });
  child.stdin.end();
  console.log(JSON.stringify(out));
  process.exit(0);
}

if (mode === "agent") serveAgent();
else if (mode === "client") await runClient().catch((e) => {
  console.log(JSON.stringify({ thrown: { code: e?.code ?? null, message: e?.message ?? String(e), data: e?.data ?? null } }));
  process.exit(1);
});
else { console.error("usage: ts_mcp.mjs agent | client -- <agent command...>"); process.exit(2); }
