#!/usr/bin/env node
// Draft ACP v2 agent on the official TS SDK (experimental v2 unstable entrypoint: fork and
// auth/status are unstable there), over stdio, for acp_fast's interop tests of the seed
// behaviours from the client side:
//   initialize: capabilities session.fork + auth.status, one agent auth method;
//   auth/status: always answered (exempt from auth_required), auth/login signs in;
//   session/new: -32000 auth_required until auth/login;
//   session/prompt: answered with {messageId} once the user message is inserted, then
//     user_message, agent_message_chunk "echo: <text>", idle end_turn;
//   session/fork: a new session id with a copy of the source's history;
//   session/resume: replays the history (replayFrom start) and an idle snapshot before
//     the response.
import { Readable, Writable } from "node:stream";
import { randomUUID } from "node:crypto";
import * as acp from "@agentclientprotocol/sdk/experimental/v2/unstable";

const METHOD = "ts-seeds-auth";
const sessions = new Map(); // sessionId -> history (session updates)
let authenticated = false;

const known = (sessionId) => {
  const history = sessions.get(sessionId);
  if (!history) throw acp.RequestError.sessionNotFound(sessionId);
  return history;
};

const app = acp
  .agent({ name: "ts-seeds-agent-v2" })
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: 2,
    info: { name: "ts-seeds-agent-v2", version: "0.1.0" },
    capabilities: { session: { fork: {} }, auth: { status: {} } },
    authMethods: [{ type: "agent", methodId: METHOD, name: "TS sign-in" }],
  }))
  .onRequest(acp.methods.agent.auth.status, () => (authenticated ? { state: "authenticated" } : { state: "unauthenticated" }))
  .onRequest(acp.methods.agent.auth.login, ({ params }) => {
    if (params.methodId !== METHOD) throw acp.RequestError.invalidParams({ methodId: params.methodId });
    authenticated = true;
    return {};
  })
  .onRequest(acp.methods.agent.session.new, () => {
    if (!authenticated) throw acp.RequestError.authRequired();
    const sessionId = randomUUID();
    sessions.set(sessionId, []);
    return { sessionId };
  })
  .onRequest(acp.methods.agent.session.fork, ({ params }) => {
    const history = known(params.sessionId);
    const sessionId = randomUUID();
    sessions.set(sessionId, [...history]);
    return { sessionId, _meta: { forkedFrom: params.sessionId } };
  })
  .onRequest(acp.methods.agent.session.resume, async ({ params, client }) => {
    const history = known(params.sessionId);
    const update = (u) => client.notify(acp.methods.client.session.update, { sessionId: params.sessionId, update: u });
    if (params.replayFrom?.type === "start") for (const u of history) await update(u);
    await update({ sessionUpdate: "state_update", state: "idle" });
    return {};
  })
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const history = known(params.sessionId);
    const update = (u) => client.notify(acp.methods.client.session.update, { sessionId: params.sessionId, update: u });
    const text = params.prompt.filter((b) => b.type === "text").map((b) => b.text).join(" ");
    const messageId = randomUUID();
    const user = { sessionUpdate: "user_message", messageId, content: params.prompt };
    history.push(user);
    await update(user);
    setImmediate(async () => {
      await update({ sessionUpdate: "state_update", state: "running" });
      const reply = { type: "text", text: `echo: ${text}` };
      const agentId = randomUUID();
      await update({ sessionUpdate: "agent_message_chunk", messageId: agentId, content: reply });
      history.push({ sessionUpdate: "agent_message", messageId: agentId, content: [reply] });
      await update({ sessionUpdate: "state_update", state: "idle", stopReason: "end_turn" });
    });
    return { messageId };
  });

const conn = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
conn.closed.then(() => process.exit(0));
