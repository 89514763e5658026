/**
 * Benchmark: does fairgate-sim deliver the throughput its queueing model predicts, and does
 * it keep up with 256 concurrent streams on this machine?
 *
 *   npm run bench:sim-capacity -w @fairgate/loadtest [-- config...]
 *
 * For each config it starts a sim (testkit, 127.0.0.1), drives closed-loop load with C real
 * streaming HTTP clients (each sends its next request as soon as the previous one ends;
 * unique prompts, so no prefix-cache hits), and after a warm-up measures for a fixed window:
 * completed requests/s and streamed tokens/s, against the closed-form prediction of the
 * same model. It also reads the sim's own iteration metrics: mean model iteration time
 * against the prediction, and how late iterations completed against the model schedule
 * (fairgate_sim_iteration_lag_seconds; p99 interpolated from buckets like histogram_quantile).
 *
 * Prediction (prefill emits token 1, decode steps k = 1..o-1 emit the rest):
 *   work of one request W = (beta+gamma)*i + sum_{k=1}^{o-1} (beta + gamma*(i+k))
 *   C <= N (every client in the batch): a client's cycle is o+1 iterations (o in the batch,
 *     one waiting for the iteration in flight when it re-submits); in one cycle every client
 *     adds W once, so cycle = (o+1)*alpha + C*W and X = C / cycle.
 *   C > N (queue never empty): a seat's cycle is o iterations, X = N / (o*alpha + N*W).
 * tokens/s = X * o. Bounded in time: warm-up + window per config (about 70 s in all).
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

interface BenchConfig {
  name: string;
  alphaMs: number;
  betaMs: number;
  gammaMs: number;
  maxNumSeqs: number;
  clients: number;
  promptTokens: number;
  outputTokens: number;
}

/** name, alpha/beta/gamma ms, max-num-seqs N, clients C, prompt and output tokens. */
const CONFIGS: BenchConfig[] = (
  [
    ['light', 10, 0.02, 0.0005, 64, 8, 512, 64],
    ['full-batch', 10, 0.02, 0.0005, 64, 64, 512, 64],
    ['queued', 10, 0.02, 0.0005, 16, 48, 256, 64],
    ['prefill-heavy', 20, 0.05, 0.001, 32, 16, 2000, 16],
    ['256-streams', 8, 0.01, 0.0002, 256, 256, 256, 128],
  ] as const
).map(([name, alphaMs, betaMs, gammaMs, maxNumSeqs, clients, promptTokens, outputTokens]) => ({
  name,
  alphaMs,
  betaMs,
  gammaMs,
  maxNumSeqs,
  clients,
  promptTokens,
  outputTokens,
}));

/** Warm-up and measuring window: at least 3 s / 8 s, and long enough for several cycles. */
function phases(cycleMs: number): { warmupMs: number; windowMs: number } {
  return { warmupMs: Math.max(3_000, 1.5 * cycleMs), windowMs: Math.max(8_000, 4 * cycleMs) };
}

interface Prediction {
  requestsPerSecond: number;
  tokensPerSecond: number;
  meanIterationMs: number;
}

function predict(config: BenchConfig, promptTokens: number): Prediction {
  const { alphaMs: a, betaMs: b, gammaMs: g, maxNumSeqs: n, clients: c, outputTokens: o } = config;
  const i = promptTokens;
  const work = (b + g) * i + (o - 1) * b + g * ((o - 1) * i + (o * (o - 1)) / 2);
  const [seats, iterationsPerCycle] = c <= n ? [c, o + 1] : [n, o];
  const cycleMs = iterationsPerCycle * a + seats * work;
  const requestsPerSecond = (1000 * seats) / cycleMs;
  return {
    requestsPerSecond,
    tokensPerSecond: requestsPerSecond * o,
    meanIterationMs: cycleMs / iterationsPerCycle,
  };
}

function chatRequest(config: BenchConfig, client: number, sequence: number): ChatCompletionRequest {
  // The unique salt leads the prompt, so the first KV block (and every later one) differs.
  const salt = `c${client}-r${sequence}-`;
  const filler = 'lorem ipsum dolor sit amet '.repeat(Math.ceil((config.promptTokens * 4) / 27));
  // The chat template adds ~5 tokens; trim the content so the prompt is close to the target.
  const content = (salt + filler).slice(0, Math.max(1, config.promptTokens * 4 - 20));
  return {
    model: 'bench',
    messages: [{ role: 'user', content }],
    max_tokens: config.outputTokens,
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
    const request = http.request({
      host: '127.0.0.1',
      port,
      path: '/v1/chat/completions',
      method: 'POST',
      agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    });
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
  prediction: Prediction;
  window: Window;
  before: Snapshot;
  after: Snapshot;
}

async function runConfig(config: BenchConfig): Promise<Row> {
  const kvBlocks = Math.max(
    8192,
    config.clients * Math.ceil((config.promptTokens + config.outputTokens) / 16) + 64,
  );
  const sim: AppHandle = await startSim({
    args: {
      'alpha-ms': config.alphaMs,
      'beta-ms': config.betaMs,
      'gamma-ms': config.gammaMs,
      'max-num-seqs': config.maxNumSeqs,
      'kv-blocks': kvBlocks,
      'max-waiting': config.clients + 16,
      model: 'bench',
    },
  });
  const promptTokens = estimatePromptTokens(chatRequest(config, 0, 0));
  const prediction = predict(config, promptTokens);
  const agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
  const live = new Set<http.ClientRequest>();
  const cycleMs =
    (1000 * Math.min(config.clients, config.maxNumSeqs)) / prediction.requestsPerSecond;
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
      if (completion !== config.outputTokens) window.badUsage++;
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
  const clients = Array.from({ length: config.clients }, (_, id) => client(id));
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
  const delta = (pick: (snapshot: Snapshot) => number) => pick(after) - pick(before);
  return {
    seconds,
    requestsPerSecond: window.requests / seconds,
    tokensPerSecond: window.tokens / seconds,
    iterationMs: (1000 * delta((s) => s.iterationSum)) / delta((s) => s.iterationCount),
    lagMeanMs: (1000 * delta((s) => s.lagSum)) / delta((s) => s.lagCount),
    // Interpolation inside a bucket can overshoot the largest value actually seen.
    lagP99Ms: 1000 * Math.min(quantile(0.99, before, after), after.lagMax),
    cpuPercent: (100 * delta((s) => s.cpuSeconds)) / seconds,
  };
}

const COLUMNS: Array<[title: string, cell: (row: Row, m: ReturnType<typeof measured>) => string]> =
  [
    ['config', (row) => row.config.name],
    ['C', (row) => String(row.config.clients)],
    ['N', (row) => String(row.config.maxNumSeqs)],
    ['i', (row) => String(row.promptTokens)],
    ['o', (row) => String(row.config.outputTokens)],
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
    process.stderr.write(
      `running ${config.name} (C=${config.clients}, N=${config.maxNumSeqs}) ...\n`,
    );
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
