/**
 * Benchmark: what one gateway replica adds on top of a pod.
 *
 *   npm run bench:overhead -w @fairgate/loadtest
 *
 * A zero-latency upstream (harness/static-upstream.ts, its own process) reached directly (the
 * baseline), through a replica with Redis and through one on the embedded scheduler, at c=1
 * and c=16, for plain requests (1 token) and streams of 16 and 256 chunks (each path checked
 * for the token count first). Every process first serves BENCH_JIT_WARMUP plain requests (/4
 * stream16, /16 stream256): V8 optimises the hot path over the first ~10,000. The phases run
 * in rounds; per row the median over rounds of p50/p99 to the last byte, req/s, the added
 * latency and ratio to the direct row of the same round, and the CPU µs per request of each
 * process (/proc); then the goals, each met / NOT met.
 *
 * BENCH_COMPARE_WITH=<another built checkout> adds its two gateways to every round, each next
 * to its twin of this tree, first in turn (harness/rounds.ts): a before/after in one run.
 * Load: wrk when on the PATH (BENCH_WRK_SECONDS per phase after 1 s of warm-up), else (or with
 * BENCH_CLIENT=undici) the in-process undici client (BENCH_REQUESTS per phase after
 * BENCH_WARMUP, /4 stream16, /16 stream256).
 *
 * Environment: BENCH_WORKLOADS (plain,stream16,stream256), BENCH_ROUNDS (3), BENCH_JIT_WARMUP
 * (12000), BENCH_WRK_SECONDS (4), BENCH_REQUESTS (6000), BENCH_WARMUP (1000), BENCH_CLIENT,
 * BENCH_COMPARE_WITH, BENCH_PIN (1: the gateways on CPU 0, the rest on CPU 1), BENCH_TRACES
 * (1: adds a replica with Redis exporting every span as OTLP protobuf, SDK-default batching,
 * and a line of what tracing costs a request), BENCH_LIMITS (budget: this tree's gateways
 * give the load's tenant a daily token budget, all: a daily and a monthly budget and a
 * request rate; each too large to refuse anything: every request is checked, reserved,
 * trued up and answered with its x-ratelimit-* headers, in its enqueue or its slot's
 * handover; BENCH_COMPARE_WITH's keep the plain config).
 */
import {
  defaultTestTenants,
  findExecutable,
  startGatewayProcess,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { type OtlpReceiver, startOtlpReceiver } from '../../test/support/otlp-receiver.js';
import {
  type LoadResult,
  requestHeaders,
  runUndici,
  runWrk,
  workloadBody,
} from './harness/load.js';
import { cpuMicros, pinProcesses, syscallCounts } from './harness/proc.js';
import { median, perRound, verdict } from './harness/report.js';
import { roundOrder } from './harness/rounds.js';
import {
  envNumber,
  runBench,
  startBenchRedis,
  startCheckoutGateway,
  startStaticUpstream,
  type Upstream,
} from './harness/stack.js';

const ROUNDS = envNumber('BENCH_ROUNDS', 3);
const JIT_WARMUP = envNumber('BENCH_JIT_WARMUP', 12_000);
const WRK_SECONDS = envNumber('BENCH_WRK_SECONDS', 4);
const REQUESTS = envNumber('BENCH_REQUESTS', 6_000);
const WARMUP = envNumber('BENCH_WARMUP', 1_000);
const COMPARE_WITH = process.env.BENCH_COMPARE_WITH;
const CLIENT = process.env.BENCH_CLIENT ?? (findExecutable('wrk') ? 'wrk' : 'undici');
const PIN = process.env.BENCH_PIN === '1';
const TRACES = process.env.BENCH_TRACES === '1';
/** BENCH_LIMITS: the `limits` of the load's tenant on this tree's gateways. */
const LIMITS = (() => {
  const choice = process.env.BENCH_LIMITS;
  if (choice === undefined || choice === '') return undefined;
  const never = { day: 1_000_000_000_000, minute: 1_000_000_000 };
  if (choice === 'budget') return { tokens_per_day: never.day };
  if (choice === 'all') {
    return {
      tokens_per_day: never.day,
      tokens_per_month: never.day,
      requests_per_minute: never.minute,
    };
  }
  throw new Error(`BENCH_LIMITS: 'budget' or 'all', got '${choice}'`);
})();
const CONCURRENCY = [1, 16];
/** BENCH_PIN's cores: the gateways', and everything else's. */
const [PROXY_CPU, REST_CPU] = ['0', '1'];

/** Each workload, and by how much the undici client divides its request counts. */
const ALL_WORKLOADS = { plain: 1, stream16: 4, stream256: 16 } as const;
type Workload = keyof typeof ALL_WORKLOADS;
const WORKLOADS = (process.env.BENCH_WORKLOADS ?? 'plain,stream16,stream256')
  .split(',')
  .map((name) => name.trim()) as Workload[];
for (const name of WORKLOADS) {
  if (!(name in ALL_WORKLOADS)) throw new Error(`BENCH_WORKLOADS: unknown workload '${name}'`);
}

type Path = 'direct' | 'redis' | 'embedded' | 'traced' | 'redis@compare' | 'embedded@compare';
const PATH_NAMES: Record<Path, string> = {
  direct: 'direct to static',
  redis: 'gateway, Redis',
  embedded: 'gateway, embedded',
  traced: 'gateway, Redis, traced',
  'redis@compare': 'compare, Redis',
  'embedded@compare': 'compare, embedded',
};
const twinOf = (path: Path): Path | undefined =>
  path === 'redis' || path === 'embedded' ? `${path}@compare` : undefined;

/** Where a path's requests go and whose CPU they cost. */
interface Target {
  url: string;
  auth: boolean;
  gateway?: number;
  pod: number;
  redis?: number;
}

/**
 * A phase's load figures, CPU µs per request of each process and the proxy's read- and
 * write-like system calls per request (NaN where not measured).
 */
type Cpu = Record<'proxy' | 'pod' | 'redis' | 'client' | 'proxyReads' | 'proxyWrites', number>;
type PhaseResult = LoadResult & { cpu: Cpu };

/** The upstream, Redis, and the gateways of this tree (and of BENCH_COMPARE_WITH). */
async function startTargets(): Promise<{ targets: Map<Path, Target>; receiver?: OtlpReceiver }> {
  const redis = await startBenchRedis();
  const upstream = await startStaticUpstream();
  const pods = [{ name: 'pod-a', url: upstream.url, cap: 64 }];
  // BENCH_LIMITS: the load's tenant with limits it never reaches, on this tree only.
  const limited = LIMITS
    ? {
        tenants: defaultTestTenants().map((t) =>
          t.id === 'paying' ? { ...t, limits: LIMITS } : t,
        ),
      }
    : {};
  const plainRedis = writeGatewayConfig({ redisUrl: redis.url, budget: 64, pods });
  const plainEmbedded = writeGatewayConfig({ budget: 64, pods });
  const withRedis = LIMITS
    ? writeGatewayConfig({ redisUrl: redis.url, budget: 64, pods, ...limited })
    : plainRedis;
  const embedded = LIMITS ? writeGatewayConfig({ budget: 64, pods, ...limited }) : plainEmbedded;
  const target = (app: Upstream, scheduler: 'redis' | 'embedded'): Target => ({
    url: app.url,
    auth: true,
    gateway: app.pid,
    pod: upstream.pid,
    ...(scheduler === 'redis' ? { redis: redis.pid } : {}),
  });
  const start = (config: string, replicaId: string, env?: Record<string, string>) =>
    startGatewayProcess({ config, replicaId, ...(env ? { env } : {}) });
  const targets = new Map<Path, Target>([
    ['direct', { url: upstream.url, auth: false, pod: upstream.pid }],
    ['redis', target(await start(withRedis, 'bench-redis'), 'redis')],
    ['embedded', target(await start(embedded, 'bench-embedded'), 'embedded')],
  ]);
  let receiver: OtlpReceiver | undefined;
  if (TRACES) {
    receiver = await startOtlpReceiver({ keepSpans: false });
    const env = receiver.exportEnv({ protocol: 'http/protobuf', batching: 'sdk-default' });
    targets.set('traced', target(await start(withRedis, 'bench-traced', env), 'redis'));
  }
  if (COMPARE_WITH) {
    const other = (config: string, id: string) => startCheckoutGateway(COMPARE_WITH, config, id);
    targets.set('redis@compare', target(await other(plainRedis, 'bench-redis-compare'), 'redis'));
    targets.set(
      'embedded@compare',
      target(await other(plainEmbedded, 'bench-embedded-compare'), 'embedded'),
    );
  }
  if (PIN) {
    pinProcesses(
      PROXY_CPU,
      [...targets.values()].map((t) => t.gateway),
    );
    pinProcesses(REST_CPU, [process.pid, upstream.pid, redis.pid]);
  }
  return { targets, ...(receiver ? { receiver } : {}) };
}

/** One request of the workload: its content chunks (a stream) or completion tokens (plain). */
async function contentCount(target: Target, load: Workload): Promise<number> {
  const response = await fetch(`${target.url}/v1/chat/completions`, {
    method: 'POST',
    headers: requestHeaders(target.auth),
    body: workloadBody(load),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`status ${response.status}: ${text.slice(0, 300)}`);
  if (load === 'plain')
    return (JSON.parse(text) as { usage: { completion_tokens: number } }).usage.completion_tokens;
  return text
    .split('\n')
    .filter((line) => line.startsWith('data: {') && /"delta":\{"content":"[^"]/.test(line)).length;
}

/** Checks every path answers the workload's token count; the line to print. */
async function verify(targets: Map<Path, Target>, load: Workload): Promise<string> {
  const expected = load === 'plain' ? 1 : Number(load.slice(6));
  const seen: string[] = [];
  for (const [path, target] of targets) {
    const count = await contentCount(target, load);
    if (count !== expected)
      throw new Error(`${load} via ${PATH_NAMES[path]}: ${count}, expected ${expected}`);
    seen.push(`${PATH_NAMES[path]} ${count}`);
  }
  return `${load}: ${load === 'plain' ? 'completion tokens' : 'content chunks'}: ${seen.join(', ')}`;
}

/** One measured phase of `load` at `concurrency` through `target`, with the CPU it cost. */
async function phase(target: Target, load: Workload, concurrency: number): Promise<PhaseResult> {
  const options = { url: target.url, body: workloadBody(load), auth: target.auth, concurrency };
  const run = (seconds: number, count: number) =>
    CLIENT === 'wrk'
      ? runWrk({ ...options, seconds, ...(PIN ? { cpus: REST_CPU } : {}) })
      : runUndici({ ...options, count: Math.ceil(count / ALL_WORKLOADS[load]), limitMs: 15_000 });
  await run(1, WARMUP);
  const cpu = (): Cpu => {
    const calls = syscallCounts(target.gateway);
    return {
      proxy: cpuMicros(target.gateway),
      pod: cpuMicros(target.pod),
      redis: cpuMicros(target.redis),
      client: CLIENT === 'wrk' ? Number.NaN : cpuMicros(process.pid),
      proxyReads: calls.reads,
      proxyWrites: calls.writes,
    };
  };
  const before = cpu();
  const result = await run(WRK_SECONDS, REQUESTS);
  const after = cpu();
  const used = Object.fromEntries(
    Object.keys(before).map((k) => [
      k,
      (after[k as keyof Cpu] - before[k as keyof Cpu]) / result.count,
    ]),
  ) as Cpu;
  return { ...result, cpu: used };
}

type Results = Map<string, PhaseResult[]>;
const key = (load: Workload, c: number, path: Path) => `${load}:${c}:${path}`;

/** Every path through every workload at c=16 (undici), until V8 has optimised it. */
async function warmUp(targets: Map<Path, Target>): Promise<void> {
  for (const load of WORKLOADS) {
    for (const [path, { url, auth }] of targets) {
      const count = Math.ceil(JIT_WARMUP / ALL_WORKLOADS[load]);
      const body = workloadBody(load);
      const r = await runUndici({ url, auth, body, concurrency: 16, count, limitMs: 120_000 });
      const errors = r.errors > 0 ? ` (${r.errors} errors)` : '';
      console.error(`warm-up ${load} ${PATH_NAMES[path]}: ${r.count} requests${errors}`);
    }
  }
}

async function measureRounds(targets: Map<Path, Target>): Promise<Results> {
  const results: Results = new Map();
  const paths = [...targets.keys()];
  for (let round = 1; round <= ROUNDS; round++) {
    for (const load of WORKLOADS) {
      for (const c of CONCURRENCY) {
        for (const path of roundOrder(paths, round, twinOf)) {
          const result = await phase(targets.get(path)!, load, c);
          results.set(key(load, c, path), [...(results.get(key(load, c, path)) ?? []), result]);
          console.error(
            `round ${round}/${ROUNDS} ${load} c=${c} ${PATH_NAMES[path]}: p50 ${result.p50.toFixed(3)} ms, ${result.rps.toFixed(0)} req/s`,
          );
        }
      }
    }
  }
  return results;
}

function printTable(results: Results, paths: Path[]): void {
  const num = (n: number, digits: number, width: number) =>
    (Number.isNaN(n) ? '-' : n.toFixed(digits)).padStart(width);
  const rows = [
    'workload  | c  | path                   | p50 ms  | p99 ms  | added p50 | added p99 | req/s | vs direct | cpu us/req: proxy   pod redis client | proxy syscalls/req: read write',
  ];
  for (const load of WORKLOADS) {
    for (const c of CONCURRENCY) {
      const direct = results.get(key(load, c, 'direct'))!;
      for (const path of paths) {
        const runs = results.get(key(load, c, path))!;
        const m = (pick: (r: PhaseResult) => number, digits = 0, width = 5) =>
          num(median(runs.map(pick)), digits, width);
        const vsDirect = (f: (r: PhaseResult, d: PhaseResult) => number, digits: number) =>
          num(perRound(runs, direct, f), digits, digits === 3 ? 7 : 9);
        const cpu = (['proxy', 'pod', 'redis', 'client'] as const).map((k) => m((r) => r.cpu[k]));
        const errors = runs.reduce((sum, r) => sum + r.errors, 0);
        const cells = [load.padEnd(9), String(c).padEnd(2), PATH_NAMES[path].padEnd(22)];
        cells.push(
          m((r) => r.p50, 3, 7),
          m((r) => r.p99, 3, 7),
        );
        cells.push(
          `${vsDirect((r, d) => r.p50 - d.p50, 3)}  `,
          `${vsDirect((r, d) => r.p99 - d.p99, 3)}  `,
        );
        cells.push(
          m((r) => r.rps),
          vsDirect((r, d) => r.rps / d.rps, 2),
        );
        cells.push(`            ${cpu.join(' ')}`);
        cells.push(`${m((r) => r.cpu.proxyReads, 1)} ${m((r) => r.cpu.proxyWrites, 1)}`);
        rows.push(cells.join(' | ') + (errors > 0 ? `  (${errors} errors)` : ''));
      }
    }
  }
  console.log(rows.join('\n'));
}

/** The goals, each judged on this run's per-round ratios and differences (median over rounds). */
function printGoals(results: Results): void {
  const runs = (load: Workload, c: number, path: Path) => results.get(key(load, c, path));
  const rps = (x: PhaseResult, y: PhaseResult) => x.rps / y.rps;
  const p50 = (x: PhaseResult, y: PhaseResult) => x.p50 - y.p50;
  const plainRatio = (a: Path, b: Path) =>
    perRound(runs('plain', 16, a), runs('plain', 16, b), rps);
  const redisRps = median((runs('plain', 16, 'redis') ?? []).map((r) => r.rps));
  /** [label, value, unit, goal, met]. */
  const goals: Array<[string, number, string, string, boolean]> = [];
  const goal = (
    label: string,
    value: number,
    unit: string,
    text: string,
    met: (v: number) => boolean,
  ) => goals.push([label, value, unit, text, met(value)]);
  const streamVsPlain = perRound(runs('stream16', 16, 'redis'), runs('plain', 16, 'redis'), rps);
  goal(
    'stream16 c=16 req/s through Redis / plain c=16 through Redis',
    streamVsPlain,
    '',
    '>= 0.8',
    (v) => v >= 0.8,
  );
  const streamAdded = perRound(runs('stream16', 1, 'redis'), runs('stream16', 1, 'direct'), p50);
  goal(
    'stream16 c=1 added p50 through Redis over direct',
    streamAdded,
    ' ms',
    '<= 0.35 ms',
    (v) => v <= 0.35,
  );
  const plainAdded = perRound(runs('plain', 1, 'redis'), runs('plain', 1, 'direct'), p50);
  goal(
    'plain c=1 added p50 through Redis over direct',
    plainAdded,
    ' ms',
    '<= 0.5 ms',
    (v) => v <= 0.5,
  );
  goal('plain c=16 through Redis', redisRps, ' req/s', '>= 3,000', (v) => v >= 3_000);
  goal(
    'plain c=16 req/s, gateway with Redis / direct',
    plainRatio('redis', 'direct'),
    '',
    '>= 0.17',
    (v) => v >= 0.17,
  );
  goal(
    'plain c=16 req/s, gateway embedded / direct',
    plainRatio('embedded', 'direct'),
    '',
    '>= 0.25',
    (v) => v >= 0.25,
  );
  const lines = ['\ngoals (per-round ratios and differences, median over rounds):'];
  for (const [label, value, unit, text, met] of goals) {
    const shown = value.toFixed({ ' ms': 3, ' req/s': 0 }[unit] ?? 2);
    lines.push(
      `  ${label}: ${Number.isNaN(value) ? 'n/a (needs that workload and path)' : `${shown}${unit} ${text}: ${verdict(met)}`}`,
    );
  }
  for (const path of COMPARE_WITH ? (['redis', 'embedded'] as const) : []) {
    const ratio = plainRatio(path, `${path}@compare`);
    lines.push(
      `  plain c=16 req/s, ${PATH_NAMES[path]} / the same path of BENCH_COMPARE_WITH: ${ratio.toFixed(2)}x`,
    );
  }
  for (const load of TRACES ? WORKLOADS : []) {
    const [traced, untraced] = [runs(load, 16, 'traced'), runs(load, 16, 'redis')];
    const cpu = (r: PhaseResult[] | undefined) =>
      median((r ?? []).map((x) => x.cpu.proxy)).toFixed(0);
    const extra = perRound(traced, untraced, (t, u) => t.cpu.proxy - u.cpu.proxy).toFixed(0);
    lines.push(
      `  tracing every span (OTLP protobuf), ${load} c=16: gateway CPU ${cpu(traced)} vs ${cpu(untraced)} us per request untraced` +
        ` (+${extra}), req/s ${perRound(traced, untraced, rps).toFixed(2)}x`,
    );
  }
  console.log(lines.join('\n'));
}

let receiver: OtlpReceiver | undefined;
await runBench(
  async () => {
    const started = await startTargets();
    receiver = started.receiver;
    const { targets } = started;
    const verified: string[] = [];
    for (const load of WORKLOADS) verified.push(await verify(targets, load));
    await warmUp(targets);
    const benchStarted = performance.now();
    const results = await measureRounds(targets);
    const perPhase =
      CLIENT === 'wrk'
        ? `wrk, ${WRK_SECONDS} s per phase after 1 s of warm-up`
        : `undici, ${REQUESTS} plain requests per phase (/4 stream16, /16 stream256) after ${WARMUP} of warm-up`;
    console.log(
      `\noverhead benchmark: ${perPhase}; every process first served ${JIT_WARMUP} plain requests (/4, /16);` +
        ` median of ${ROUNDS} round(s)${PIN ? `; gateways pinned to CPU ${PROXY_CPU}, the rest to CPU ${REST_CPU}` : ''};` +
        ` measured phases took ${((performance.now() - benchStarted) / 1_000).toFixed(0)} s\n`,
    );
    console.log(`verified per path (one request each):\n  ${verified.join('\n  ')}\n`);
    console.log('latency to the last byte; proxy = the gateway process\n');
    printTable(results, [...targets.keys()]);
    printGoals(results);
  },
  async () => receiver?.close(),
);
