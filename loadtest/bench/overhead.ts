/**
 * Benchmark: what one gateway replica adds on top of a pod.
 *
 *   npm run bench:overhead -w @fairgate/loadtest
 *
 * A zero-latency OpenAI-shaped upstream on loopback, reached directly (the
 * baseline), through one gateway replica with Redis (and one with the embedded
 * scheduler), through the node floor (bench/node-proxy.ts: node:http and undici with
 * no gateway logic, the floor of any proxy on Node's HTTP stack; BENCH_NODE_FLOOR=0
 * leaves it out) and, when nginx is installed, through a plain nginx reverse proxy
 * (the reference: what any proxy hop costs), at concurrency 1 and 16, for three
 * workloads (BENCH_WORKLOADS, default all):
 * - plain: non-streaming chat completions of 1 token;
 * - stream16 / stream256: streaming chat completions ("stream": true,
 *   ignore_eos) of 16 / 256 tokens, which the upstream sends as 16 / 256
 *   content chunks (one per token, plus the role chunk and [DONE]). The count
 *   is checked once per workload and path before measuring.
 *
 * The upstream (BENCH_UPSTREAM):
 * - static (default): bench/static-upstream.ts in its own process, every
 *   response body built once and sent with one write, so it costs almost
 *   nothing per request or chunk and the direct row is a floor, as the
 *   upstream of issue 17's reference figures (2-core VM, wrk, c=16: ~27,000
 *   plain and ~23,000 stream16 req/s direct, 35-45 us of its CPU per request
 *   whatever the chunk count: Node's HTTP server);
 * - sim: apps/vllm-sim at zero latency (alpha = beta = gamma = 0). It makes one
 *   engine iteration (one setImmediate turn) and one SSE write per token, ~45 us
 *   of its CPU per chunk on a 2-core VM: a 256-chunk stream takes it ~11 ms of
 *   CPU, so stream256 is bound by the sim (~100 req/s at c=16), its proxy rows
 *   mostly show the sim's cost, and a proxy that batches the sim's writes can
 *   even come out ahead of direct there. Plain direct is ~9,000 req/s, and the
 *   sim takes CPU the gateway needs on a 2-core machine.
 * Latency is to the last byte of the response. Prints p50/p99 latency, req/s,
 * the added latency and the throughput ratio, all measured in the same round,
 * plus the CPU time each process spent per request (Linux /proc), which is far
 * less sensitive to other load on the machine than latency or req/s; the
 * "proxy" column is the gateway process, the node floor's, or nginx's master + worker.
 * It ends with the issue's acceptance ratios (streams vs plain through Redis,
 * gateway vs direct) and the goals line.
 *
 * The machine this runs on is usually shared (2 cores for load client,
 * gateway, upstream and Redis), so the phases run in rounds (per workload and
 * concurrency: direct, Redis, embedded, node floor, nginx) and the summary takes the median
 * over rounds. With BENCH_COMPARE_WITH each gateway runs right next to its twin of the other
 * checkout, the two swapping places every other round (bench/round-order.ts): an even
 * BENCH_ROUNDS gives each the first place equally often. The load client is lean on purpose
 * (undici dispatch, no response stream per request): every microsecond it spends is taken
 * from the processes measured.
 *
 * Each process is warmed up first (BENCH_JIT_WARMUP requests at c=16 for
 * plain, a quarter of that for stream16, a sixteenth for stream256): V8 keeps
 * optimizing the gateway's hot path for the first ~10,000 requests, and until
 * then a request costs ~40% more CPU than in steady state, which is what a
 * long-running gateway sees. Each phase then has its own short warm-up.
 *
 * BENCH_COMPARE_WITH=<another checkout, built> adds that checkout's gateways
 * (Redis and embedded, same upstream and Redis) to every round: a before/after
 * comparison under the same conditions, which separate runs on a shared
 * machine do not give.
 *
 * BENCH_PIN=1 gives the proxies (every gateway, the node floor, nginx) CPU 0 and everything
 * else (Redis, the upstream, wrk, this process) CPU 1, with `taskset`: the gateway then
 * shares its core with nobody, as when Redis and the clients run on other machines. Left to
 * the kernel, the gateway and Redis trade places on two cores and each runs slower for it
 * (docs/performance-history.md, *Seventeenth round*). Pinned, the direct path has one core
 * for the upstream and wrk together, so only the ratios between proxies (BENCH_COMPARE_WITH)
 * and the CPU per request compare with an unpinned run.
 *
 * The load comes from wrk (Debian package `wrk`) when it is on the PATH, else
 * (or with BENCH_CLIENT=undici) from the in-process undici client: a C client
 * spends a fraction of the CPU per request (the Node client takes ~70 us of the
 * two cores' budget at c=16), so the processes measured get the machine, as in
 * the issue's reference figures. With wrk, phases are timed rather than
 * counted (1 s warm-up, then BENCH_WRK_SECONDS, default 4, for plain and
 * BENCH_STREAM_WRK_SECONDS, default BENCH_WRK_SECONDS, for streams), and the
 * client's CPU is not reported. Default run time with wrk: 3 rounds x 2
 * concurrencies x 5 paths x 3 workloads x 5 s = 7.5 min, plus ~1 min of
 * start-up and JIT warm-up (6.2 + 1 min measured before the node floor row
 * came, with the static upstream on a busy 2-core VM).
 *
 * The nginx row: nginx on the PATH (or in /usr/sbin), one worker, unbuffered,
 * HTTP/1.1 keep-alive (64) to the upstream, everything in a temporary prefix (no
 * root needed); it is stopped at the end and on SIGINT (bench/nginx-proxy.ts).
 *
 * Environment: BENCH_WORKLOADS (comma list of plain,stream16,stream256;
 * default all), BENCH_REQUESTS (per phase, default 6000), BENCH_WARMUP (per
 * phase, default 1000), BENCH_JIT_WARMUP (per process, default 12000); the
 * undici client divides these counts by 4 for stream16 and 16 for stream256,
 * BENCH_ROUNDS (default 3), BENCH_TIME_LIMIT_MS (per phase, 15000),
 * BENCH_WRK_SECONDS, BENCH_STREAM_WRK_SECONDS, BENCH_CLIENT (wrk|undici),
 * BENCH_NGINX (0: no nginx row), BENCH_NODE_FLOOR (0: no node floor row),
 * BENCH_COMPARE_WITH, BENCH_UPSTREAM
 * (static|sim, default static), BENCH_PIN (1: proxies on CPU 0, the rest on CPU 1),
 * BENCH_TRACES (1: adds the path "gateway, Redis, traced", a replica with Redis that
 * exports every span over OTLP/HTTP protobuf (the SDK's default encoding), OTEL_BSP_* unset
 * (fairgate's batches of 128), to a receiver in this process (bench/otlp-receiver.ts, which only
 * counts the bytes): what tracing every request costs, next to the untraced replica in the
 * same rounds; with OTEL_TRACES_SAMPLER set in this environment, what sampled tracing costs).
 */
import { availableParallelism } from 'node:os';
import {
  findExecutable,
  startGatewayProcess,
  startRedis,
  startSim,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { type Dispatcher, Pool } from 'undici';
import { findNginx, type NginxProxy, startNginxProxy } from './nginx-proxy.js';
import { type OtlpReceiver, startOtlpReceiver } from './otlp-receiver.js';
import { cpuMicros, pinProcess, redisPid } from './proc.js';
import { roundOrder } from './round-order.js';
import {
  runWrk,
  startCheckoutGateway,
  startNodeProxy,
  startStaticUpstream,
  type Upstream,
  workloadBody,
} from './wrk.js';

const WARMUP = Number(process.env.BENCH_WARMUP ?? 1_000);
const JIT_WARMUP = Number(process.env.BENCH_JIT_WARMUP ?? 12_000);
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 6_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const TIME_LIMIT_MS = Number(process.env.BENCH_TIME_LIMIT_MS ?? 15_000);
const CONCURRENCY = [1, 16];
const COMPARE_WITH = process.env.BENCH_COMPARE_WITH;
const CLIENT = (process.env.BENCH_CLIENT ?? (findExecutable('wrk') ? 'wrk' : 'undici')) as
  | 'wrk'
  | 'undici';
const WRK_SECONDS = Number(process.env.BENCH_WRK_SECONDS ?? 4);
const STREAM_WRK_SECONDS = Number(process.env.BENCH_STREAM_WRK_SECONDS ?? WRK_SECONDS);
const NGINX = process.env.BENCH_NGINX === '0' ? undefined : findNginx();
const NODE_FLOOR = process.env.BENCH_NODE_FLOOR !== '0';
const TRACES = process.env.BENCH_TRACES === '1';
const PIN = process.env.BENCH_PIN === '1';
/** BENCH_PIN's cores: the proxies', and everything else's. */
const PROXY_CPU = '0';
const REST_CPU = '1';
const UPSTREAM = (process.env.BENCH_UPSTREAM ?? 'static') as 'static' | 'sim';
if (UPSTREAM !== 'static' && UPSTREAM !== 'sim') {
  throw new Error(
    `BENCH_UPSTREAM: expected static or sim, got ${JSON.stringify(process.env.BENCH_UPSTREAM)}`,
  );
}

/** One kind of request: its body, the content chunks it must get, its phase sizes. */
interface Workload {
  name: 'plain' | 'stream16' | 'stream256';
  stream: boolean;
  /** Tokens generated = content chunks of a stream. */
  tokens: number;
  body: string;
  /** The undici client's request counts are divided by this (a request costs more). */
  scale: number;
  /** wrk seconds per phase. */
  seconds: number;
}

function workload(name: Workload['name'], tokens: number, scale: number): Workload {
  const stream = name !== 'plain';
  return {
    name,
    stream,
    tokens,
    body: workloadBody(name),
    scale,
    seconds: stream ? STREAM_WRK_SECONDS : WRK_SECONDS,
  };
}

const ALL_WORKLOADS = [
  workload('plain', 1, 1),
  workload('stream16', 16, 4),
  workload('stream256', 256, 16),
];
const WORKLOADS = (() => {
  const wanted = (process.env.BENCH_WORKLOADS ?? 'plain,stream16,stream256')
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);
  const unknown = wanted.filter((name) => !ALL_WORKLOADS.some((w) => w.name === name));
  if (unknown.length > 0 || wanted.length === 0) {
    throw new Error(
      `BENCH_WORKLOADS: expected a comma list of ${ALL_WORKLOADS.map((w) => w.name).join(',')}, got ${JSON.stringify(process.env.BENCH_WORKLOADS)}`,
    );
  }
  return ALL_WORKLOADS.filter((w) => wanted.includes(w.name));
})();

type Path =
  | 'direct'
  | 'redis'
  | 'traced'
  | 'embedded'
  | 'node'
  | 'nginx'
  | 'redis@compare'
  | 'embedded@compare';
const PATH_NAMES: Record<Path, string> = {
  direct: `direct to ${UPSTREAM}`,
  redis: 'gateway, Redis',
  traced: 'gateway, Redis, traced',
  embedded: 'gateway, embedded',
  node: 'node floor (bare)',
  nginx: 'nginx (plain proxy)',
  'redis@compare': 'compare, Redis',
  'embedded@compare': 'compare, embedded',
};
/** A gateway's twin of the BENCH_COMPARE_WITH checkout (measured next to it, roundOrder). */
function compareTwin(path: Path): Path | undefined {
  if (path === 'redis') return 'redis@compare';
  if (path === 'embedded') return 'embedded@compare';
  return undefined;
}

interface PhaseResult {
  p50: number;
  p99: number;
  rps: number;
  errors: number;
  /** CPU microseconds per request, per process (NaN where not measurable). */
  cpu: { proxy: number; pod: number; redis: number; client: number };
}

/**
 * BENCH_TRACES: what exporting every span costs, per workload at c=16: the traced
 * replica's CPU per request against the untraced one's (both with Redis, the same rounds),
 * and its req/s over theirs; per-round differences and ratios, then the median.
 */
function tracingLines(
  runsOf: (load: Workload['name'], c: number, path: Path) => PhaseResult[] | undefined,
): string[] {
  const lines: string[] = [];
  // The SDK reads OTEL_TRACES_SAMPLER from the environment the replica inherits.
  const sampler = process.env.OTEL_TRACES_SAMPLER
    ? `sampler ${process.env.OTEL_TRACES_SAMPLER} ${process.env.OTEL_TRACES_SAMPLER_ARG ?? ''}`.trim()
    : 'every request';
  for (const load of WORKLOADS) {
    const traced = runsOf(load.name, 16, 'traced');
    const untraced = runsOf(load.name, 16, 'redis');
    if (!traced || !untraced) continue;
    const perRound = (f: (t: PhaseResult, u: PhaseResult) => number) =>
      median(traced.map((t, i) => f(t, untraced[i]!)));
    const cpu = (r: PhaseResult[]) => median(r.map((x) => x.cpu.proxy));
    lines.push(
      `    tracing (BENCH_TRACES, OTLP protobuf, ${sampler}), ${load.name} c=16: gateway CPU ` +
        `${cpu(traced).toFixed(0)} vs ${cpu(untraced).toFixed(0)} us per request untraced ` +
        `(+${perRound((t, u) => t.cpu.proxy - u.cpu.proxy).toFixed(0)}), req/s ` +
        `${perRound((t, u) => t.rps / u.rps).toFixed(2)}x`,
    );
  }
  return lines;
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

interface Pids {
  /** The gateway, or nginx's master and worker (summed). */
  proxy?: number[];
  /** The upstream (static server or sim). */
  pod: number;
  redis?: number;
}

type ServerCpu = Omit<PhaseResult['cpu'], 'client'>;

/** CPU microseconds used so far by each server process of a phase. */
function serverCpu(pids: Pids): ServerCpu {
  return {
    proxy: pids.proxy ? pids.proxy.reduce((sum, pid) => sum + cpuMicros(pid), 0) : Number.NaN,
    pod: cpuMicros(pids.pod),
    redis: cpuMicros(pids.redis),
  };
}

/** CPU microseconds per request since `before`, per server process. */
function serverCpuPerRequest(pids: Pids, before: ServerCpu, requests: number): ServerCpu {
  const now = serverCpu(pids);
  return {
    proxy: (now.proxy - before.proxy) / requests,
    pod: (now.pod - before.pod) / requests,
    redis: (now.redis - before.redis) / requests,
  };
}

interface Target {
  url: string;
  auth: boolean;
  pids: Pids;
}

function requestHeaders(auth: boolean): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (auth) headers.authorization = `Bearer ${TEST_KEYS.paying}`;
  return headers;
}

async function phase(
  target: Target,
  body: string,
  concurrency: number,
  count: number,
): Promise<PhaseResult> {
  const { url, auth, pids } = target;
  // A request stuck upstream counts as an error after 10 s (undici's default is 300 s).
  const pool = new Pool(url, {
    connections: concurrency,
    pipelining: 1,
    headersTimeout: 10_000,
    bodyTimeout: 10_000,
  });
  const options: Dispatcher.DispatchOptions = {
    method: 'POST',
    path: '/v1/chat/completions',
    headers: requestHeaders(auth),
    body,
  };
  const latencies: number[] = [];
  let errors = 0;
  let issued = 0;
  const deadline = performance.now() + TIME_LIMIT_MS;
  const before = { servers: serverCpu(pids), client: process.cpuUsage() };
  const started = performance.now();
  const worker = async () => {
    while (issued < count && performance.now() < deadline) {
      issued++;
      const t0 = performance.now();
      try {
        if ((await send(pool, options)) !== 200) errors++;
      } catch {
        errors++;
      }
      latencies.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const elapsed = performance.now() - started;
  const client = process.cpuUsage(before.client);
  const n = latencies.length;
  const cpu = {
    ...serverCpuPerRequest(pids, before.servers, n),
    client: (client.user + client.system) / n,
  };
  await pool.close();
  latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(n - 1, Math.floor(q * n))] ?? Number.NaN;
  return { p50: at(0.5), p99: at(0.99), rps: (n / elapsed) * 1_000, errors, cpu };
}

/** One timed phase driven by wrk (one thread, `concurrency` connections). */
async function wrkPhase(
  target: Target,
  load: Workload,
  concurrency: number,
  seconds: number,
): Promise<PhaseResult> {
  const { url, auth, pids } = target;
  const before = serverCpu(pids);
  const result = await runWrk({
    url,
    body: load.body,
    auth,
    concurrency,
    seconds,
    ...(PIN ? { cpus: REST_CPU } : {}),
  });
  return {
    p50: result.p50,
    p99: result.p99,
    rps: result.rps,
    errors: result.errors,
    cpu: { ...serverCpuPerRequest(pids, before, result.count), client: Number.NaN },
  };
}

async function measure(target: Target, load: Workload, concurrency: number): Promise<PhaseResult> {
  if (CLIENT === 'wrk') {
    await wrkPhase(target, load, concurrency, 1);
    return wrkPhase(target, load, concurrency, load.seconds);
  }
  await phase(target, load.body, concurrency, Math.ceil(WARMUP / load.scale));
  return phase(target, load.body, concurrency, Math.ceil(REQUESTS / load.scale));
}

/**
 * One request of the workload through `target`: for a stream, the `data:` lines and how
 * many of them carry content (the role chunk and [DONE] do not); for a plain request,
 * usage.completion_tokens.
 */
async function checkResponse(
  target: Target,
  load: Workload,
): Promise<{ content: number; dataLines: number }> {
  const response = await fetch(`${target.url}/v1/chat/completions`, {
    method: 'POST',
    headers: requestHeaders(target.auth),
    body: load.body,
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`status ${response.status}: ${text.slice(0, 300)}`);
  if (!load.stream) {
    const json = JSON.parse(text) as { usage?: { completion_tokens?: number } };
    return { content: json.usage?.completion_tokens ?? Number.NaN, dataLines: 0 };
  }
  let content = 0;
  let dataLines = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data:')) continue;
    dataLines++;
    const data = line.slice(5).trim();
    if (data === '[DONE]') continue;
    const chunk = JSON.parse(data) as { choices?: { delta?: { content?: string } }[] };
    if (chunk.choices?.[0]?.delta?.content) content++;
  }
  return { content, dataLines };
}

/** Checks every path gives the workload's token/chunk count; returns the line to print. */
async function verifyWorkload(
  load: Workload,
  paths: Path[],
  targets: Partial<Record<Path, Target>>,
): Promise<string> {
  const seen: string[] = [];
  for (const path of paths) {
    const { content, dataLines } = await checkResponse(targets[path]!, load);
    if (content !== load.tokens) {
      throw new Error(
        `${load.name} via ${PATH_NAMES[path]}: ${content} ${load.stream ? 'content chunks' : 'completion tokens'}, expected ${load.tokens}`,
      );
    }
    seen.push(
      load.stream
        ? `${PATH_NAMES[path]} ${content} (${dataLines} data: lines)`
        : `${PATH_NAMES[path]} ${content}`,
    );
  }
  const what = load.stream ? 'content chunks' : 'completion token(s)';
  return `${load.name}: ${what}: ${seen.join(', ')}`;
}

function median(values: number[]): number {
  const sorted = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** BENCH_PIN: every proxy on PROXY_CPU; Redis, the upstream and this process on REST_CPU. */
function pinProcesses(targets: Partial<Record<Path, Target>>, paths: Path[]): void {
  if (availableParallelism() < 2) throw new Error('BENCH_PIN=1 needs at least 2 CPUs');
  const rest = new Set<number>([process.pid]);
  for (const path of paths) {
    const { proxy = [], pod, redis } = targets[path]!.pids;
    for (const pid of proxy) pinProcess(pid, PROXY_CPU);
    for (const pid of [pod, redis]) if (pid !== undefined) rest.add(pid);
  }
  for (const pid of rest) pinProcess(pid, REST_CPU);
}

let nginx: NginxProxy | undefined;
let receiver: OtlpReceiver | undefined;

async function main(): Promise<void> {
  const redis = await startRedis();
  try {
    const upstream: Upstream =
      UPSTREAM === 'static'
        ? await startStaticUpstream()
        : await startSim({
            args: {
              'alpha-ms': 0,
              'beta-ms': 0,
              'gamma-ms': 0,
              model: 'sim-model',
              'output-len-mode': 'max',
            },
          });
    const pods = [{ name: 'pod-a', url: upstream.url, cap: 64 }];
    // Each gateway runs in its own process (built dist/), as deployed.
    const withRedis = await startGatewayProcess({
      config: writeGatewayConfig({ redisUrl: redis.url, budget: 64, pods }),
      replicaId: 'bench-redis',
    });
    const embedded = await startGatewayProcess({
      config: writeGatewayConfig({ budget: 64, pods }),
      replicaId: 'bench-embedded',
    });
    const redisServer = redis.source === 'redis-server' ? await redisPid(redis.url) : undefined;
    /** A gateway process as a target: its CPU is the proxy's; with Redis, Redis's too. */
    const gateway = (app: { url: string; pid: number }, scheduler: 'redis' | 'embedded') => ({
      url: app.url,
      auth: true,
      pids: {
        proxy: [app.pid],
        pod: upstream.pid,
        ...(scheduler === 'redis' && redisServer ? { redis: redisServer } : {}),
      },
    });
    const targets: Partial<Record<Path, Target>> = {
      direct: { url: upstream.url, auth: false, pids: { pod: upstream.pid } },
      redis: gateway(withRedis, 'redis'),
      embedded: gateway(embedded, 'embedded'),
    };
    const paths: Path[] = ['direct', 'redis', 'embedded'];
    if (TRACES) {
      receiver = await startOtlpReceiver({ keepSpans: false });
      const traced = await startGatewayProcess({
        config: writeGatewayConfig({ redisUrl: redis.url, budget: 64, pods }),
        replicaId: 'bench-traced',
        env: receiver.exportEnv({ protocol: 'http/protobuf', batching: 'sdk-default' }),
      });
      targets.traced = gateway(traced, 'redis');
      paths.push('traced');
    }
    if (NODE_FLOOR) {
      const floor = await startNodeProxy(upstream.url);
      targets.node = {
        url: floor.url,
        auth: false,
        pids: { proxy: [floor.pid], pod: upstream.pid },
      };
      paths.push('node');
    }
    if (NGINX) {
      nginx = await startNginxProxy(NGINX, upstream.url);
      targets.nginx = {
        url: nginx.url,
        auth: false,
        pids: { proxy: nginx.pids, pod: upstream.pid },
      };
      paths.push('nginx');
    }
    if (COMPARE_WITH) {
      const other = await startCheckoutGateway(
        COMPARE_WITH,
        writeGatewayConfig({ redisUrl: redis.url, budget: 64, pods }),
        'bench-redis-compare',
      );
      const otherEmbedded = await startCheckoutGateway(
        COMPARE_WITH,
        writeGatewayConfig({ budget: 64, pods }),
        'bench-embedded-compare',
      );
      targets['redis@compare'] = gateway(other, 'redis');
      targets['embedded@compare'] = gateway(otherEmbedded, 'embedded');
      paths.push('redis@compare', 'embedded@compare');
    }

    if (PIN) pinProcesses(targets, paths);

    const verified: string[] = [];
    for (const load of WORKLOADS) {
      const line = await verifyWorkload(load, paths, targets);
      verified.push(line);
      console.error(`verified ${line}`);
    }
    for (const load of WORKLOADS) {
      for (const path of paths) {
        const started = performance.now();
        const { errors } = await phase(
          targets[path]!,
          load.body,
          16,
          Math.ceil(JIT_WARMUP / load.scale),
        );
        console.error(
          `warm-up ${load.name} ${PATH_NAMES[path]}: ${((performance.now() - started) / 1_000).toFixed(1)} s` +
            (errors > 0 ? ` (${errors} errors)` : ''),
        );
      }
    }
    const results = new Map<string, PhaseResult[]>();
    const key = (load: Workload['name'], c: number, path: Path) => `${load}:${c}:${path}`;
    const runsOf = (load: Workload['name'], c: number, path: Path) =>
      results.get(key(load, c, path));
    const benchStarted = performance.now();
    for (let round = 1; round <= ROUNDS; round++) {
      for (const load of WORKLOADS) {
        for (const concurrency of CONCURRENCY) {
          for (const path of roundOrder(paths, round, compareTwin)) {
            const result = await measure(targets[path]!, load, concurrency);
            const list = results.get(key(load.name, concurrency, path)) ?? [];
            list.push(result);
            results.set(key(load.name, concurrency, path), list);
            console.error(
              `round ${round}/${ROUNDS} ${load.name} c=${concurrency} ${PATH_NAMES[path]}: p50 ${result.p50.toFixed(3)} ms, ${result.rps.toFixed(0)} req/s`,
            );
          }
        }
      }
    }
    const benchSeconds = (performance.now() - benchStarted) / 1_000;

    const fmt = (n: number, width = 7) => (Number.isNaN(n) ? '-' : n.toFixed(3)).padStart(width);
    const us = (n: number) => (Number.isNaN(n) ? '-' : n.toFixed(0)).padStart(5);
    const rows = [
      'workload  | c  | path                | p50 ms  | p99 ms  | added p50 | added p99 | req/s | vs direct | cpu us/req: proxy   pod redis client',
    ];
    for (const load of WORKLOADS) {
      for (const concurrency of CONCURRENCY) {
        const direct = runsOf(load.name, concurrency, 'direct')!;
        for (const path of paths) {
          const runs = runsOf(load.name, concurrency, path)!;
          const m = (pick: (r: PhaseResult) => number) => median(runs.map(pick));
          // Added latency and ratios are taken per round (same conditions), then the median.
          const added = (pick: (r: PhaseResult) => number) =>
            median(runs.map((r, i) => pick(r) - pick(direct[i]!)));
          const ratio = median(runs.map((r, i) => r.rps / direct[i]!.rps));
          const errors = runs.reduce((sum, r) => sum + r.errors, 0);
          rows.push(
            `${load.name.padEnd(9)} | ${String(concurrency).padEnd(2)} | ${PATH_NAMES[path].padEnd(19)} | ${fmt(m((r) => r.p50))} | ${fmt(m((r) => r.p99))} |` +
              ` ${fmt(added((r) => r.p50))}   | ${fmt(added((r) => r.p99))}   | ${m((r) => r.rps)
                .toFixed(0)
                .padStart(5)} |` +
              ` ${ratio.toFixed(2).padStart(9)} |             ${us(m((r) => r.cpu.proxy))} ${us(m((r) => r.cpu.pod))} ${us(m((r) => r.cpu.redis))} ${us(m((r) => r.cpu.client))}` +
              (errors > 0 ? `  (${errors} errors)` : ''),
          );
        }
      }
    }
    const perPhase =
      CLIENT === 'wrk'
        ? `wrk, ${WRK_SECONDS} s per plain phase and ${STREAM_WRK_SECONDS} s per stream phase (each after 1 s of warm-up; every process first served ${JIT_WARMUP} plain requests, ${Math.ceil(JIT_WARMUP / 4)} stream16, ${Math.ceil(JIT_WARMUP / 16)} stream256)`
        : `${REQUESTS} plain requests per phase, ${Math.ceil(REQUESTS / 4)} stream16, ${Math.ceil(REQUESTS / 16)} stream256 (after the same /1, /4, /16 of ${JIT_WARMUP} + ${WARMUP} warm-up)`;
    console.log(
      `\noverhead benchmark: ${perPhase}, upstream ${UPSTREAM === 'static' ? 'static (bench/static-upstream.ts)' : 'vllm-sim at zero latency'}, median of ${ROUNDS} round(s)${PIN ? `, proxies pinned to CPU ${PROXY_CPU} and the rest to CPU ${REST_CPU} (BENCH_PIN)` : ''}; measured phases took ${benchSeconds.toFixed(0)} s\n`,
    );
    console.log(`verified per path (one request each):\n  ${verified.join('\n  ')}\n`);
    console.log(
      'latency to the last byte; proxy = the gateway process, the node floor process, or nginx master + worker\n',
    );
    console.log(rows.join('\n'));

    const verdict = (met: boolean) => (met ? 'met' : 'NOT met');
    // Per-round ratios and differences (same conditions), then the median over rounds.
    const perRound = (
      a: PhaseResult[] | undefined,
      b: PhaseResult[] | undefined,
      f: (x: PhaseResult, y: PhaseResult) => number,
    ) => (a && b ? median(a.map((x, i) => f(x, b[i]!))) : Number.NaN);
    const rpsRatio = (x: PhaseResult, y: PhaseResult) => x.rps / y.rps;
    const line = (label: string, value: number, unit: string, goal: string, met: boolean) =>
      Number.isNaN(value)
        ? `  ${label}: n/a (needs that workload and path in BENCH_WORKLOADS)`
        : `  ${label}: ${value.toFixed(unit === ' ms' ? 3 : 2)}${unit} ${goal}: ${verdict(met)}`;
    const streamVsPlain = perRound(
      runsOf('stream16', 16, 'redis'),
      runsOf('plain', 16, 'redis'),
      rpsRatio,
    );
    const streamAdded = perRound(
      runsOf('stream16', 1, 'redis'),
      runsOf('stream16', 1, 'direct'),
      (x, y) => x.p50 - y.p50,
    );
    // Plain c=16 req/s of one path over another's, per round.
    const plainRatio = (a: Path, b: Path) =>
      perRound(runsOf('plain', 16, a), runsOf('plain', 16, b), rpsRatio);
    const redisVsDirect = plainRatio('redis', 'direct');
    const embeddedVsDirect = plainRatio('embedded', 'direct');
    const floorVsDirect = plainRatio('node', 'direct');
    const embeddedVsFloor = plainRatio('embedded', 'node');
    const redisVsCompare = plainRatio('redis', 'redis@compare');
    console.log(
      [
        '\nissue 17 acceptance (this run; per-round ratios and differences, median over rounds):',
        line(
          '(1) stream16 c=16 req/s through Redis / plain c=16 through Redis',
          streamVsPlain,
          '',
          '>= 0.8',
          streamVsPlain >= 0.8,
        ),
        line(
          '    stream16 c=1 added p50 through Redis over direct',
          streamAdded,
          ' ms',
          '<= 0.35 ms',
          streamAdded <= 0.35,
        ),
        line(
          '(2) plain c=16 req/s, gateway with Redis / direct',
          redisVsDirect,
          '',
          '>= 0.17',
          redisVsDirect >= 0.17,
        ),
        line(
          '    plain c=16 req/s, gateway embedded / direct',
          embeddedVsDirect,
          '',
          '>= 0.25',
          embeddedVsDirect >= 0.25,
        ),
        ...(Number.isNaN(floorVsDirect)
          ? []
          : [
              `    for reference, the node floor (node:http + undici, no gateway logic) / direct: ${floorVsDirect.toFixed(2)};` +
                ` gateway embedded / node floor: ${embeddedVsFloor.toFixed(2)}`,
            ]),
        ...tracingLines(runsOf),
        // Acceptance 2's first goal is against the tree the issue was filed on (8d54de5):
        // with that tree as BENCH_COMPARE_WITH, this is the ratio it asks 1.5x of.
        ...(Number.isNaN(redisVsCompare)
          ? []
          : [
              line(
                '    plain c=16 req/s through Redis / BENCH_COMPARE_WITH through Redis (the same rounds)',
                redisVsCompare,
                'x',
                '>= 1.5x when that is 8d54de5, the filing-day tree',
                redisVsCompare >= 1.5,
              ),
            ]),
      ].join('\n'),
    );

    // The goals (+0.5 ms p50 at c=1, 3,000 req/s at c=16 through Redis:
    // docs/performance-history.md, *Before issue 17*), judged on this run's medians through
    // Redis.
    const c1 = runsOf('plain', 1, 'redis');
    const c1Direct = runsOf('plain', 1, 'direct');
    const c16 = runsOf('plain', 16, 'redis');
    if (c1 && c1Direct && c16) {
      const addedP50 = median(c1.map((r, i) => r.p50 - c1Direct[i]!.p50));
      const rps16 = median(c16.map((r) => r.rps));
      console.log(
        `\ngoals (gateway with Redis, plain): added p50 at c=1 ${addedP50.toFixed(3)} ms <= 0.5 ms: ${verdict(addedP50 <= 0.5)};` +
          ` ${rps16.toFixed(0)} req/s at c=16 >= 3,000: ${verdict(rps16 >= 3_000)}`,
      );
    }
  } finally {
    await nginx?.stop();
    await receiver?.close();
    await stopAll();
    await redis.stop();
  }
}

process.once('SIGINT', () => {
  nginx?.killNow(); // synchronously: testkit's own SIGINT hook ends this process right after
  void stopAll().then(() => process.exit(130));
});
await main();
