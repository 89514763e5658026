/**
 * The benches' HTTP load on POST /v1/chat/completions: wrk (a C client that leaves the cores to
 * the processes measured), timed; or a lean in-process undici client, counted.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TEST_KEYS } from '@fairgate/testkit';
import { type Dispatcher, Pool } from 'undici';

export type WorkloadName = 'plain' | 'stream16' | 'stream256';

/** Tokens a workload asks for: a stream's content chunks. */
const WORKLOAD_TOKENS: Record<WorkloadName, number> = { plain: 1, stream16: 16, stream256: 256 };

/** The chat completion a workload sends (ignore_eos: a sim generates exactly max_tokens). */
export function workloadBody(name: string): string {
  const tokens = WORKLOAD_TOKENS[name as WorkloadName];
  if (tokens === undefined)
    throw new Error(`unknown workload '${name}' (plain, stream16, stream256)`);
  return JSON.stringify({
    model: 'sim-model',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: tokens,
    ...(name === 'plain' ? {} : { stream: true, ignore_eos: true }),
  });
}

export function requestHeaders(auth: boolean): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (auth) headers.authorization = `Bearer ${TEST_KEYS.paying}`;
  return headers;
}

/** What one load run measured: requests completed, latency to the last byte (ms), errors. */
export interface LoadResult {
  count: number;
  rps: number;
  p50: number;
  p99: number;
  errors: number;
}

export interface LoadOptions {
  url: string;
  body: string;
  auth: boolean;
  concurrency: number;
}

let scriptDir: string | undefined;

/** wrk's latency figure ("123.45us", "1.20ms", "2.00s") in ms. */
function wrkMillis(text: string): number {
  const match = /^([\d.]+)(us|ms|s)$/.exec(text);
  if (!match) return Number.NaN;
  const unit = { us: 0.001, ms: 1, s: 1_000 }[match[2] as 'us' | 'ms' | 's'];
  return Number(match[1]) * unit;
}

/** One timed wrk run (one thread); `cpus` runs wrk on those CPUs only (taskset). */
export async function runWrk(
  options: LoadOptions & { seconds: number; cpus?: string },
): Promise<LoadResult> {
  scriptDir ??= mkdtempSync(join(tmpdir(), 'fairgate-wrk-'));
  const script = join(scriptDir, `${options.auth}-${options.body.length}.lua`);
  const headers = Object.entries(requestHeaders(options.auth));
  writeFileSync(
    script,
    [
      'wrk.method = "POST"',
      `wrk.body = ${JSON.stringify(options.body)}`,
      ...headers.map(([name, value]) => `wrk.headers["${name}"] = "${value}"`),
    ].join('\n'),
  );
  const args = ['-t1', `-c${options.concurrency}`, `-d${options.seconds}s`, '--latency', '-s'];
  args.push(script, `${options.url}/v1/chat/completions`);
  const [command, argv] = options.cpus
    ? ['taskset', ['-c', options.cpus, 'wrk', ...args]]
    : ['wrk', args];
  const output = await new Promise<string>((resolve, reject) => {
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
  const number = (re: RegExp, none = Number.NaN) => Number(re.exec(output)?.[1] ?? none);
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(
    output,
  );
  const percentile = (label: string) =>
    wrkMillis(new RegExp(`^\\s+${label}%\\s+(\\S+)`, 'm').exec(output)?.[1] ?? '');
  return {
    count: number(/(\d+) requests in/),
    rps: number(/Requests\/sec:\s+([\d.]+)/),
    p50: percentile('50'),
    p99: percentile('99'),
    errors:
      number(/Non-2xx or 3xx responses: (\d+)/, 0) +
      (socket ? socket.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0),
  };
}

/** One request; resolves with the status once the whole response has arrived. */
function send(pool: Pool, options: Dispatcher.DispatchOptions): Promise<number> {
  return new Promise((resolve, reject) => {
    let status = 0;
    pool.dispatch(options, {
      onRequestStart() {}, // undici only takes the controller API when this is present
      onResponseStart(_controller, statusCode) {
        status = statusCode;
      },
      onResponseData() {},
      onResponseEnd() {
        resolve(status);
      },
      onResponseError(_controller, error) {
        reject(error);
      },
    });
  });
}

/** `count` requests (at most `limitMs`) from `concurrency` connections of this process. */
export async function runUndici(
  options: LoadOptions & { count: number; limitMs: number },
): Promise<LoadResult> {
  // A request stuck upstream counts as an error after 10 s (undici's default is 300 s).
  const pool = new Pool(options.url, {
    connections: options.concurrency,
    headersTimeout: 10_000,
    bodyTimeout: 10_000,
  });
  const dispatch: Dispatcher.DispatchOptions = {
    method: 'POST',
    path: '/v1/chat/completions',
    headers: requestHeaders(options.auth),
    body: options.body,
  };
  const latencies: number[] = [];
  let errors = 0;
  let issued = 0;
  const started = performance.now();
  const deadline = started + options.limitMs;
  const worker = async () => {
    while (issued < options.count && performance.now() < deadline) {
      issued++;
      const t0 = performance.now();
      if ((await send(pool, dispatch).catch(() => 0)) !== 200) errors++;
      latencies.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  const elapsed = performance.now() - started;
  await pool.close();
  latencies.sort((a, b) => a - b);
  const n = latencies.length;
  const at = (q: number) => latencies[Math.min(n - 1, Math.floor(q * n))] ?? Number.NaN;
  return { count: n, rps: (n / elapsed) * 1_000, p50: at(0.5), p99: at(0.99), errors };
}
