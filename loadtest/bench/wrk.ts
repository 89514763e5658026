/**
 * What the HTTP benchmarks share: the workloads' request bodies, wrk runs (Debian package
 * `wrk`: a C load client that leaves the cores to the processes measured) and the static
 * upstream (bench/static-upstream.ts) in its own process.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, spawnManaged, TEST_KEYS, waitUntil } from '@fairgate/testkit';

export type WorkloadName = 'plain' | 'stream16' | 'stream256';

/** Tokens a workload asks for: a stream's content chunks. */
export const WORKLOAD_TOKENS: Record<WorkloadName, number> = {
  plain: 1,
  stream16: 16,
  stream256: 256,
};

/**
 * The chat completion a workload sends: `max_tokens` tokens, streamed or not. ignore_eos:
 * the sim generates exactly max_tokens whatever its --output-len-mode (the static upstream
 * always does).
 */
export function workloadBody(name: string): string {
  const tokens = WORKLOAD_TOKENS[name as WorkloadName];
  if (tokens === undefined)
    throw new Error(`unknown workload '${name}' (plain, stream16, stream256)`);
  const stream = name !== 'plain';
  return JSON.stringify({
    model: 'sim-model',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: tokens,
    ...(stream ? { stream: true, ignore_eos: true } : {}),
  });
}

let scriptDir: string | undefined;
const scripts = new Map<string, string>();

/** The POST of `body` as a wrk script, with or without the test tenant's API key. */
export function wrkScriptFile(body: string, auth: boolean): string {
  const key = `${auth}:${body}`;
  const known = scripts.get(key);
  if (known) return known;
  scriptDir ??= mkdtempSync(join(tmpdir(), 'fairgate-wrk-'));
  const file = join(scriptDir, `${scripts.size}.lua`);
  const lines = [
    'wrk.method = "POST"',
    `wrk.body = ${JSON.stringify(body)}`,
    'wrk.headers["content-type"] = "application/json"',
    ...(auth ? [`wrk.headers["authorization"] = "Bearer ${TEST_KEYS.paying}"`] : []),
  ];
  writeFileSync(file, `${lines.join('\n')}\n`);
  scripts.set(key, file);
  return file;
}

export interface WrkResult {
  /** Requests completed. */
  count: number;
  rps: number;
  /** Latency percentiles in ms. */
  p50: number;
  p99: number;
  /** Non-2xx answers plus socket errors. */
  errors: number;
}

/** wrk's latency figure ("123.45us", "1.20ms", "2.00s") in milliseconds. */
function wrkMillis(text: string): number {
  const match = /^([\d.]+)(us|ms|s)$/.exec(text);
  if (!match) return Number.NaN;
  const value = Number(match[1]);
  return match[2] === 'us' ? value / 1_000 : match[2] === 's' ? value * 1_000 : value;
}

/** One timed wrk run (one thread, `concurrency` connections) against /v1/chat/completions. */
export async function runWrk(options: {
  url: string;
  body: string;
  auth: boolean;
  concurrency: number;
  seconds: number;
  /** Runs wrk on these CPUs only (taskset's list syntax); BENCH_PIN in overhead.ts. */
  cpus?: string;
}): Promise<WrkResult> {
  const script = wrkScriptFile(options.body, options.auth);
  const args = [
    '-t1',
    `-c${options.concurrency}`,
    `-d${options.seconds}s`,
    '--latency',
    '-s',
    script,
    `${options.url}/v1/chat/completions`,
  ];
  const output = await new Promise<string>((resolve, reject) => {
    const [command, argv] = options.cpus
      ? ['taskset', ['-c', options.cpus, 'wrk', ...args]]
      : ['wrk', args];
    const child = spawn(command, argv, { stdio: ['ignore', 'pipe', 'inherit'] });
    let text = '';
    child.stdout.on('data', (chunk: Buffer) => {
      text += chunk.toString();
    });
    child.once('error', reject);
    child.once('exit', (code) =>
      code === 0 ? resolve(text) : reject(new Error(`wrk exited ${code}: ${text}`)),
    );
  });
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(output)?.[1] ?? 0);
  const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(
    output,
  );
  const percentile = (label: string) =>
    wrkMillis(new RegExp(`^\\s+${label}%\\s+(\\S+)`, 'm').exec(output)?.[1] ?? '');
  return {
    count: Number(/(\d+) requests in/.exec(output)?.[1] ?? Number.NaN),
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(output)?.[1] ?? Number.NaN),
    p50: percentile('50'),
    p99: percentile('99'),
    errors:
      non2xx + (socketErrors ? socketErrors.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0),
  };
}

/** An upstream every path of a benchmark ends at. */
export interface Upstream {
  url: string;
  pid: number;
}

/**
 * One of the bench's own servers (bench-server.ts) in its own process (its CPU is measured
 * apart), through tsx as the benches run; ready once it prints its listening line. It exits
 * with this process (stdin pipe) and is stopped by stopAll().
 */
async function startBenchServer(name: string, args: string[] = []): Promise<Upstream> {
  const entry = fileURLToPath(new URL(`./${name}.ts`, import.meta.url));
  const ready = new RegExp(`^${name} listening on (http:\\/\\/\\S+)$`);
  let url: string | undefined;
  const child = spawnManaged({
    name,
    command: process.execPath,
    args: ['--import', 'tsx', entry, ...args],
    cwd: dirname(entry), // where tsx resolves
    exitWithStdin: true,
    onLine: (line) => {
      url ??= ready.exec(line)?.[1];
    },
  });
  await waitUntil(name, async () => url !== undefined, { process: child, timeoutMs: 15_000 });
  return { url: url!, pid: child.pid };
}

/** bench/static-upstream.ts: the upstream every path of a benchmark ends at. */
export function startStaticUpstream(): Promise<Upstream> {
  return startBenchServer('static-upstream');
}

/** bench/node-proxy.ts in front of `upstream`: the floor of a proxy hop on Node's HTTP stack. */
export function startNodeProxy(upstream: string): Promise<Upstream> {
  return startBenchServer('node-proxy', ['--upstream', upstream]);
}

/**
 * A gateway replica of another checkout, from its built dist/ (BENCH_COMPARE_WITH), on a
 * free port; ready once /healthz answers. `nodeArgs` go before the entry point.
 */
export async function startCheckoutGateway(
  root: string,
  config: string,
  replica: string,
  nodeArgs: string[] = [],
  env: Record<string, string> = {},
): Promise<{ url: string; pid: number; stop(): Promise<void> }> {
  const entry = join(resolve(root), 'apps/gateway/dist/main.js');
  if (!existsSync(entry)) throw new Error(`${entry} is missing: build that checkout first`);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = spawnManaged({
    name: `compare-gateway:${port}`,
    command: process.execPath,
    args: [
      ...nodeArgs,
      entry,
      '--config',
      config,
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
      '--replica-id',
      replica,
    ],
    env,
    exitWithStdin: true,
  });
  await waitUntil(
    `gateway of ${root} at ${url}`,
    async () => (await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1_000) })).ok,
    { process: child, timeoutMs: 15_000 },
  );
  return { url, pid: child.pid, stop: () => child.stop() };
}
