// Shared helpers of the TS peer clients (client.mjs, client_v2.mjs): the common
// command line, the request-latency loop and its summary, child shutdown.
// Only Node built-ins here, so both SDK entrypoints can use it.
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

/** Chunk size the large-frames mode asks the agent for (1 MiB). */
export const LARGE_CHUNK = 1048576;

/**
 * Parses the client CLI shared by both clients:
 *   [--n N] [--m M] [--rtt-method echo|prompt|none] [--inflight K] [--inflight-m X]
 *   [--warmup W] [--permission] [--raw-updates] [--large] [-- <agent command...>]
 * `defaultAgent` is the agent file (next to `moduleUrl`) run when no command is given.
 * Returns the parsed options plus the agent command and the environment to spawn it with.
 */
export function parseArgs(argv, defaultAgent, moduleUrl) {
  const sep = argv.indexOf("--");
  const opts = sep >= 0 ? argv.slice(0, sep) : argv;
  let cmd = sep >= 0 ? argv.slice(sep + 1) : [];
  if (cmd.length === 0) {
    cmd = [process.execPath, join(dirname(fileURLToPath(moduleUrl)), defaultAgent)];
  }
  const known = new Set([
    "--n", "--m", "--rtt-method", "--inflight", "--inflight-m", "--warmup",
    "--permission", "--raw-updates", "--large",
  ]);
  const flags = new Set(["--permission", "--raw-updates", "--large"]);
  for (let i = 0; i < opts.length; i++) {
    if (!known.has(opts[i])) throw new Error(`unknown option ${opts[i]}`);
    if (!flags.has(opts[i])) i++;
  }
  const opt = (name, dflt) => {
    const i = opts.indexOf(name);
    return i >= 0 ? opts[i + 1] : dflt;
  };
  const LARGE = opts.includes("--large");
  const childEnv = { ...process.env };
  if (LARGE && childEnv.ACP_CHUNK === undefined) childEnv.ACP_CHUNK = String(LARGE_CHUNK);
  const CHUNK = Number(childEnv.ACP_CHUNK ?? 100);
  const N = Number(opt("--n", LARGE ? 100 : (process.env.ACP_N ?? 1000)));
  const M = Number(opt("--m", 0));
  const INFLIGHT = Math.max(0, Number(opt("--inflight", 0)));
  const INFLIGHT_M = Number(opt("--inflight-m", M));
  return {
    N,
    M,
    INFLIGHT,
    INFLIGHT_M,
    RTT_METHOD: opt("--rtt-method", "echo"),
    WARMUP: Number(opt("--warmup", 0)),
    PERMISSION: opts.includes("--permission"),
    RAW_UPDATES: opts.includes("--raw-updates"),
    LARGE,
    CHUNK,
    cmd,
    childEnv,
  };
}

/**
 * Runs `one(i)` for i = 0..m-1 with `inflight` calls outstanding at any time
 * (1 = strictly sequential round trips). Returns the wall time and each call's
 * latency in ms (Float64Array indexed by i).
 */
export async function runRequests(m, inflight, one, now) {
  const latMs = new Float64Array(m);
  let next = 0;
  const worker = async () => {
    while (next < m) {
      const i = next++;
      const t = now();
      await one(i);
      latMs[i] = now() - t;
    }
  };
  const t0 = now();
  await Promise.all(Array.from({ length: Math.min(inflight, m) }, worker));
  return { totalMs: now() - t0, latMs };
}

/** Nearest-rank percentile (p in 0..1) of an ascending-sorted array. */
function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const k = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return sorted[k];
}

/**
 * The JSON fields describing one request phase (see the clients' headers):
 * `rate` names the throughput field (roundTripsPerSec or requestsPerSec) and
 * `prefix` is put before the other names ("" for the sequential phase,
 * "inflight" for the in-flight one: inflightP50RttUs, ...).
 */
export function latencySummary(rate, prefix, totalMs, latMs) {
  const m = latMs.length;
  const sorted = Float64Array.from(latMs).sort();
  const us = (ms) => +(ms * 1000).toFixed(1);
  const name = (n) => (prefix ? prefix + n[0].toUpperCase() + n.slice(1) : n);
  let sum = 0;
  for (const x of latMs) sum += x;
  return {
    [rate]: Math.round(m / (totalMs / 1000)),
    [name("rttTotalMs")]: +totalMs.toFixed(3),
    [name("meanRttUs")]: us(sum / m),
    [name("p50RttUs")]: us(percentile(sorted, 0.5)),
    [name("p99RttUs")]: us(percentile(sorted, 0.99)),
    [name("maxRttUs")]: us(sorted[sorted.length - 1]),
  };
}

/** Closes the agent's stdin and waits for it to exit (SIGTERM after 2 s). */
export async function stopChild(child) {
  child.stdin.end();
  return new Promise((r) => {
    if (child.exitCode !== null) return r(child.exitCode);
    // the agent exits on stdin EOF; the grace is long enough for a loaded machine (a 2 s
    // grace killed a pure-twin Python agent mid-exit on a busy 2-core CI box)
    const t = setTimeout(() => child.kill("SIGTERM"), 10000);
    child.on("exit", (code, sig) => {
      clearTimeout(t);
      r(code ?? sig);
    });
  });
}

/**
 * CPU time used so far (µs, user + system) by this process and, through its
 * `_test/stats` extension, by the agent (null when the agent lacks it).
 */
export async function cpuSnapshot(agent) {
  const c = process.cpuUsage();
  let agentUs = null;
  try {
    const s = await agent.request("_test/stats", {});
    agentUs = s.userCpuUs + s.systemCpuUs;
  } catch {
    // agent without the _test/stats extension
  }
  return { clientUs: c.user + c.system, agentUs };
}

/** CPU µs per streamed notification on each side between two snapshots. */
export function cpuPerMessage(a, b, n) {
  if (!(n > 0)) return {};
  return {
    streamClientCpuUsPerMsg: +((b.clientUs - a.clientUs) / n).toFixed(2),
    streamAgentCpuUsPerMsg:
      a.agentUs === null || b.agentUs === null ? null : +((b.agentUs - a.agentUs) / n).toFixed(2),
  };
}
