/**
 * Benchmark: does fairgate-sim deliver the throughput its queueing model predicts, and keep up
 * with 256 concurrent streams on this machine?
 *
 *   npm run bench:sim-capacity -w @fairgate/loadtest [-- config...]
 *
 * Per config: a sim, C closed-loop streaming clients (unique prompts: no prefix-cache hits),
 * then after a warm-up a fixed window: requests/s and tokens/s against the model's prediction,
 * the sim's mean iteration time, and how late iterations completed (the lag histogram, p99
 * interpolated as histogram_quantile). Prediction, W the work of one request
 * = (beta+gamma)*i + sum_{k=1}^{o-1} (beta + gamma*(i+k)): with C <= N a client's cycle is o+1
 * iterations, X = C / ((o+1)*alpha + C*W); with C > N, X = N / (o*alpha + N*W); tokens/s = X*o.
 */
import http from 'node:http';
import { cpus } from 'node:os';
import {
  type ChatCompletionRequest,
  chunkText,
  createSseDecoder,
  estimatePromptTokens,
  type StreamChunk,
} from '@fairgate/openai';
import { type AppHandle, startSim } from '@fairgate/testkit';
import { table } from './harness/report.js';
import { runBench } from './harness/stack.js';

/** alpha/beta/gamma in ms, N = max-num-seqs, C clients, i prompt and o output tokens. */
const CONFIGS = [
  { name: 'light', alphaMs: 10, betaMs: 0.02, gammaMs: 0.0005, n: 64, c: 8, i: 512, o: 64 },
  { name: 'full-batch', alphaMs: 10, betaMs: 0.02, gammaMs: 0.0005, n: 64, c: 64, i: 512, o: 64 },
  { name: 'queued', alphaMs: 10, betaMs: 0.02, gammaMs: 0.0005, n: 16, c: 48, i: 256, o: 64 },
  {
    name: 'prefill-heavy',
    alphaMs: 20,
    betaMs: 0.05,
    gammaMs: 0.001,
    n: 32,
    c: 16,
    i: 2000,
    o: 16,
  },
  {
    name: '256-streams',
    alphaMs: 8,
    betaMs: 0.01,
    gammaMs: 0.0002,
    n: 256,
    c: 256,
    i: 256,
    o: 128,
  },
];
type BenchConfig = (typeof CONFIGS)[number];

/** Warm-up and measuring window: at least 3 s / 8 s, and long enough for several cycles. */
function phases(cycleMs: number): { warmupMs: number; windowMs: number } {
  return { warmupMs: Math.max(3_000, 1.5 * cycleMs), windowMs: Math.max(8_000, 4 * cycleMs) };
}

/** The closed-form throughput of the header and the mean iteration time. */
function predict(config: BenchConfig, promptTokens: number) {
  const { alphaMs: a, betaMs: b, gammaMs: g, n, c, o } = config;
  const i = promptTokens;
  const work = (b + g) * i + (o - 1) * b + g * ((o - 1) * i + (o * (o - 1)) / 2);
  const [seats, iterationsPerCycle] = c <= n ? [c, o + 1] : [n, o];
  const cycleMs = iterationsPerCycle * a + seats * work;
  const requestsPerSecond = (1000 * seats) / cycleMs;
  const meanIterationMs = cycleMs / iterationsPerCycle;
  return { requestsPerSecond, tokensPerSecond: requestsPerSecond * o, meanIterationMs };
}

function chatRequest(config: BenchConfig, client: number, sequence: number): ChatCompletionRequest {
  // The unique salt leads the prompt, so the first KV block (and every later one) differs.
  const salt = `c${client}-r${sequence}-`;
  const filler = 'lorem ipsum dolor sit amet '.repeat(Math.ceil((config.i * 4) / 27));
  // The chat template adds ~5 tokens; trim the content so the prompt is close to the target.
  const content = (salt + filler).slice(0, Math.max(1, config.i * 4 - 20));
  return {
    model: 'bench',
    messages: [{ role: 'user', content }],
    max_tokens: config.o,
    stream: true,
    stream_options: { include_usage: true },
  };
}

/** The measuring window and what the clients counted in it. */
interface Window {
  start: number;
  end: number;
  requests: number;
  tokens: number;
  badUsage: number;
  errors: number;
}

const windowSeconds = (window: Window) => (window.end - window.start) / 1000;

/** One streaming request over node:http; calls onToken per content chunk. */
function streamOnce(
  agent: http.Agent,
  port: number,
  body: string,
  onToken: () => void,
  live: Set<http.ClientRequest>,
): Promise<number | null> {
  return new Promise((resolve, reject) => {
    const headers = { 'content-type': 'application/json', 'content-length': body.length };
    const path = '/v1/chat/completions';
    const request = http.request({ host: '127.0.0.1', port, path, method: 'POST', agent, headers });
    live.add(request);
    request.on('close', () => live.delete(request));
    request.on('error', reject);
    request.on('response', (response) => {
      if (response.statusCode !== 200) {
        response.resume();
        reject(new Error(`HTTP ${response.statusCode}`));
        return;
      }
      let completionTokens: number | null = null;
      const decoder = createSseDecoder((event) => {
        if (event.data === '[DONE]') return;
        const chunk = JSON.parse(event.data) as StreamChunk;
        if (chunkText(chunk).length > 0) onToken();
        if (chunk.usage) completionTokens = chunk.usage.completion_tokens;
      });
      response.on('data', (data: Buffer) => decoder.feed(data));
      response.on('end', () => {
        decoder.end();
        resolve(completionTokens);
      });
      response.on('error', reject);
    });
    request.end(body);
  });
}

/** The sim's own metrics read at the window's ends (one sample each, by metric name). */
const SNAPSHOT_METRICS = {
  iterationSum: 'fairgate_sim_iteration_duration_seconds_sum',
  iterationCount: 'fairgate_sim_iteration_duration_seconds_count',
  lagSum: 'fairgate_sim_iteration_lag_seconds_sum',
  lagCount: 'fairgate_sim_iteration_lag_seconds_count',
  lagMax: 'fairgate_sim_iteration_lag_max_seconds',
  resyncs: 'fairgate_sim_engine_resyncs_total',
  runningMax: 'fairgate_sim_num_requests_running_max',
  preemptions: 'vllm:num_preemptions_total',
  cpuSeconds: 'process_cpu_seconds_total',
};
type Snapshot = Record<keyof typeof SNAPSHOT_METRICS, number> & {
  lagBuckets: Array<{ le: number; count: number }>;
};

async function snapshot(url: string): Promise<Snapshot> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const one = (name: string) =>
    Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
  const values = Object.fromEntries(
    Object.entries(SNAPSHOT_METRICS).map(([key, name]) => [key, one(name)]),
  ) as Record<keyof typeof SNAPSHOT_METRICS, number>;
  const lagBuckets = [
    ...text.matchAll(/^fairgate_sim_iteration_lag_seconds_bucket\{.*le="([^"]+)".*\} (\S+)$/gm),
  ].map((m) => ({ le: Number(m[1]), count: Number(m[2]) }));
  return { ...values, lagBuckets };
}

/** histogram_quantile over the bucket increase between two snapshots (seconds). */
function quantile(q: number, before: Snapshot, after: Snapshot): number {
  const buckets = after.lagBuckets.map((bucket, index) => ({
    le: bucket.le,
    count: bucket.count - (before.lagBuckets[index]?.count ?? 0),
  }));
  const rank = q * (buckets.at(-1)?.count ?? 0);
  if (rank === 0) return Number.NaN;
  let previous = { le: 0, count: 0 };
  for (const bucket of buckets) {
    if (bucket.count >= rank) {
      if (!Number.isFinite(bucket.le)) return previous.le;
      const inBucket = bucket.count - previous.count || 1;
      return previous.le + ((bucket.le - previous.le) * (rank - previous.count)) / inBucket;
    }
    previous = bucket;
  }
  return previous.le;
}

interface Row {
  config: BenchConfig;
  promptTokens: number;
  prediction: ReturnType<typeof predict>;
  window: Window;
  before: Snapshot;
  after: Snapshot;
}

async function runConfig(config: BenchConfig): Promise<Row> {
  const kvBlocks = Math.max(8192, config.c * Math.ceil((config.i + config.o) / 16) + 64);
  const sim: AppHandle = await startSim({
    args: {
      'alpha-ms': config.alphaMs,
      'beta-ms': config.betaMs,
      'gamma-ms': config.gammaMs,
      'max-num-seqs': config.n,
      'kv-blocks': kvBlocks,
      'max-waiting': config.c + 16,
      model: 'bench',
    },
  });
  const promptTokens = estimatePromptTokens(chatRequest(config, 0, 0));
  const prediction = predict(config, promptTokens);
  const agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
  const live = new Set<http.ClientRequest>();
  const cycleMs = (1000 * Math.min(config.c, config.n)) / prediction.requestsPerSecond;
  const { warmupMs, windowMs } = phases(cycleMs);
  const started = performance.now();
  const window: Window = {
    start: started + warmupMs,
    end: started + warmupMs + windowMs,
    requests: 0,
    tokens: 0,
    badUsage: 0,
    errors: 0,
  };
  const inWindow = () => {
    const now = performance.now();
    return now >= window.start && now < window.end;
  };

  const client = async (id: number) => {
    // Stagger the first requests over one cycle: the closed loop starts near steady state.
    await new Promise((resolve) => setTimeout(resolve, Math.random() * cycleMs));
    for (let sequence = 0; performance.now() < window.end; sequence++) {
      const body = JSON.stringify(chatRequest(config, id, sequence));
      const completion = await streamOnce(
        agent,
        sim.port,
        body,
        () => {
          if (inWindow()) window.tokens++;
        },
        live,
      ).catch(() => {
        if (performance.now() < window.end) window.errors++;
        return null;
      });
      if (completion === null) continue;
      if (completion !== config.o) window.badUsage++;
      if (inWindow()) window.requests++;
    }
  };

  let before: Snapshot | undefined;
  const snapshotAtStart = new Promise<void>((resolve) =>
    setTimeout(async () => {
      before = await snapshot(sim.url);
      resolve();
    }, warmupMs),
  );
  const clients = Array.from({ length: config.c }, (_, id) => client(id));
  await new Promise((resolve) => setTimeout(resolve, warmupMs + windowMs));
  const after = await snapshot(sim.url);
  await snapshotAtStart;
  for (const request of live) request.destroy();
  await Promise.all(clients);
  agent.destroy();
  await sim.stop();
  return { config, promptTokens, prediction, window, before: before!, after };
}

/** Derived figures of one run, per second of its measuring window. */
function measured(row: Row) {
  const { window, before, after } = row;
  const seconds = windowSeconds(window);
  const delta = (key: keyof typeof SNAPSHOT_METRICS) => after[key] - before[key];
  return {
    seconds,
    requestsPerSecond: window.requests / seconds,
    tokensPerSecond: window.tokens / seconds,
    iterationMs: (1000 * delta('iterationSum')) / delta('iterationCount'),
    lagMeanMs: (1000 * delta('lagSum')) / delta('lagCount'),
    // Interpolation inside a bucket can overshoot the largest value actually seen.
    lagP99Ms: 1000 * Math.min(quantile(0.99, before, after), after.lagMax),
    cpuPercent: (100 * delta('cpuSeconds')) / seconds,
  };
}

const COLUMNS: Array<[title: string, cell: (row: Row, m: ReturnType<typeof measured>) => string]> =
  [
    ['config', (row) => row.config.name],
    ['C', (row) => String(row.config.c)],
    ['N', (row) => String(row.config.n)],
    ['i', (row) => String(row.promptTokens)],
    ['o', (row) => String(row.config.o)],
    ['model req/s', (row) => row.prediction.requestsPerSecond.toFixed(1)],
    ['sim req/s', (_, m) => m.requestsPerSecond.toFixed(1)],
    ['ratio', (row, m) => (m.requestsPerSecond / row.prediction.requestsPerSecond).toFixed(3)],
    ['model tok/s', (row) => row.prediction.tokensPerSecond.toFixed(0)],
    ['sim tok/s', (_, m) => m.tokensPerSecond.toFixed(0)],
    ['ratio', (row, m) => (m.tokensPerSecond / row.prediction.tokensPerSecond).toFixed(3)],
    ['model iter ms', (row) => row.prediction.meanIterationMs.toFixed(2)],
    ['sim iter ms', (_, m) => m.iterationMs.toFixed(2)],
    ['lag mean ms', (_, m) => m.lagMeanMs.toFixed(2)],
    ['lag p99 ms', (_, m) => m.lagP99Ms.toFixed(2)],
    ['lag max ms', (row) => (1000 * row.after.lagMax).toFixed(2)],
    ['resyncs', (row) => String(row.after.resyncs)],
    ['max running', (row) => String(row.after.runningMax)],
    ['sim CPU %', (_, m) => m.cpuPercent.toFixed(0)],
  ];

function format(rows: Row[]): string {
  return table(
    COLUMNS.map(([title]) => title),
    rows.map((row) => {
      const m = measured(row);
      return COLUMNS.map(([, cell]) => cell(row, m));
    }),
  );
}

async function main(): Promise<void> {
  // Optional config names on the command line run a subset: `... sim-capacity.ts 256-streams`.
  const only = process.argv.slice(2);
  const unknown = only.filter((name) => !CONFIGS.some((config) => config.name === name));
  if (unknown.length > 0) throw new Error(`unknown config(s): ${unknown.join(', ')}`);
  const rows: Row[] = [];
  for (const config of CONFIGS.filter((c) => only.length === 0 || only.includes(c.name))) {
    process.stderr.write(`running ${config.name} (C=${config.c}, N=${config.n}) ...\n`);
    const row = await runConfig(config);
    rows.push(row);
    if (row.window.errors > 0) process.stderr.write(`  ${row.window.errors} failed requests!\n`);
    if (row.window.badUsage > 0)
      process.stderr.write(`  ${row.window.badUsage} requests with wrong usage!\n`);
    const seconds = windowSeconds(row.window).toFixed(1);
    process.stderr.write(`  measured over ${seconds} s after a warm-up\n`);
    if (row.after.preemptions > 0)
      process.stderr.write(`  ${row.after.preemptions} preemptions (KV too small?)\n`);
  }
  process.stdout.write(
    `fairgate-sim capacity: closed-loop streaming clients on 127.0.0.1, ${cpus().length} CPUs, ` +
      `node ${process.version}\n`,
  );
  process.stdout.write(`${format(rows)}\n`);
  process.stdout.write(
    'ratio = sim / model. lag = how late an iteration completed against the model schedule ' +
      '(drift-corrected: lateness does not accumulate).\n',
  );
}

await runBench(main);
