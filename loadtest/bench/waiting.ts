/**
 * Benchmark: thousands of waiting streams on one gateway replica.
 *
 *   npm run bench:waiting -w @fairgate/loadtest
 *
 * One gateway with Redis (budget BENCH_BUDGET, queue TTL 10 min, queues that admit them all)
 * in front of waiting-upstream.ts. 1. Warm-up: BENCH_WARMUP streams. 2. `budget` blockers take
 * every slot; the idle gateway's RSS and CPU over BENCH_WINDOW_S. 3. Ramp: BENCH_WAITING
 * streams in batches of BENCH_BATCH, each batch once the `fairgate_waiting` gauge counts the
 * last. 4. Everything waits: RSS growth and CPU. 5. Drain: the order requests reach the
 * upstream in against the client's, the next-grant latency (the k-th finish frees the slot of
 * the (k+budget)-th arrival), and per request the gateway's CPU and system calls and Redis's
 * CPU, FCALLs and BLMPOPs.
 *
 * Environment: BENCH_WAITING (10000), BENCH_BUDGET (2), BENCH_HOLD_MS (5: the upstream's time
 * per answer), BENCH_BATCH (50), BENCH_WARMUP (300), BENCH_WINDOW_S (10), BENCH_TRACES (1: the
 * replica exports its spans, and the next grant is also read on its own clock: the j-th
 * release, the end of a CLIENT span, against the j-th grant, the end of a `fairgate.queue`
 * span), BENCH_PIN (1: the gateway and its redis-server on CPU 0, this process on CPU 1).
 */
import { SpanNames } from '@fairgate/telemetry';
import { sha256Hex, startGatewayProcess, TEST_KEYS, writeGatewayConfig } from '@fairgate/testkit';
import {
  type OtlpReceiver,
  OtlpSpanKind,
  releaseToGrantMs,
  startOtlpReceiver,
} from '../../test/support/otlp-receiver.js';
import {
  commandDelta,
  cpuMicros,
  pinProcesses,
  redisCommandStats,
  rssMb,
  syscallCounts,
} from './harness/proc.js';
import { quantile, verdict } from './harness/report.js';
import { envNumber, runBench, sleep, startBenchRedis, timeLimit } from './harness/stack.js';
import { gauges, type Stream, sendStreams, waitFor } from './waiting-client.js';
import { startWaitingUpstream, type WaitingUpstream } from './waiting-upstream.js';

const WAITING = envNumber('BENCH_WAITING', 10_000);
const BUDGET = envNumber('BENCH_BUDGET', 2);
const HOLD_MS = envNumber('BENCH_HOLD_MS', 5);
const BATCH = envNumber('BENCH_BATCH', 50);
const WARMUP = envNumber('BENCH_WARMUP', 300);
const WINDOW_S = envNumber('BENCH_WINDOW_S', 10);
const TRACES = process.env.BENCH_TRACES === '1';
const PIN = process.env.BENCH_PIN === '1';
const DRAIN_LIMIT_MS = 300_000;
const GOALS = { rssMb: 150, cpuPercent: 10, nextGrantP99Ms: 2 };

type Stack = Awaited<ReturnType<typeof startStack>>;

/** Percent of one core the process used over `seconds`, with its RSS sampled each second. */
async function cpuWindow(pid: number, seconds: number): Promise<{ cpu: number; rss: number }> {
  let rss = 0;
  const start = cpuMicros(pid);
  const t0 = performance.now();
  for (let i = 0; i < seconds; i++) {
    await sleep(1_000);
    rss = Math.max(rss, rssMb(pid));
  }
  return { cpu: ((cpuMicros(pid) - start) / 1_000 / (performance.now() - t0)) * 100, rss };
}

async function startStack() {
  const redis = await startBenchRedis();
  const upstream = await startWaitingUpstream(HOLD_MS);
  const receiver = TRACES ? await startOtlpReceiver() : undefined;
  // Room for every waiting request: the pool's and the tenant's queues, and the connections.
  const config = writeGatewayConfig({
    redisUrl: redis.url,
    budget: BUDGET,
    pods: [{ name: 'pod-a', url: upstream.url, cap: 64 }],
    tenants: [
      {
        id: 'paying',
        api_key_sha256: [sha256Hex(TEST_KEYS.paying)],
        default_class: 'standard',
        queue_max: 20_000,
      },
    ],
    scheduler: { queue_ttl_ms: 600_000, max_queue_depth: 20_000, band_capacity: 20_000 },
    sections: { server: { max_connections: 12_000 } },
  });
  const gateway = await startGatewayProcess({
    config,
    replicaId: 'bench-waiting',
    ...(receiver ? { env: receiver.exportEnv() } : {}),
  });
  if (PIN) {
    if (redis.pid === undefined) throw new Error('BENCH_PIN=1 needs its own redis-server');
    pinProcesses('0', [gateway.pid, redis.pid]);
    pinProcesses('1', [process.pid]);
  }
  await waitFor(
    'the upstream is healthy',
    async () => (await fetch(`${gateway.url}/readyz`)).ok,
    15_000,
    100,
  );
  return { redis, upstream, receiver, gateway };
}

async function warmUp({ gateway }: Stack): Promise<void> {
  let errors = 0;
  for (let i = 0; i < WARMUP; i += 16) {
    const batch = sendStreams(gateway.port, -1_000_000 - i, Math.min(16, WARMUP - i));
    await Promise.race([Promise.all(batch.map((s) => s.finished)), timeLimit(10_000)]);
    for (const s of batch) {
      if (!s.served) errors++;
      s.close();
    }
  }
  console.error(`warm-up: ${WARMUP} streams, ${errors} errors`);
}

/** Blockers take every slot; the idle gateway's RSS and CPU. */
async function idleBaseline({
  gateway,
  upstream,
}: Stack): Promise<{ blockers: Stream[]; rss: number; cpu: number }> {
  upstream.send({ mode: 'hold', reset: true });
  const blockers = sendStreams(gateway.port, -BUDGET, BUDGET);
  await waitFor(
    'blockers in flight',
    async () => (await gauges(gateway.url)).inflight >= BUDGET,
    10_000,
  );
  await sleep(2_000);
  const rss = rssMb(gateway.pid);
  const { cpu } = await cpuWindow(gateway.pid, WINDOW_S);
  console.error(`idle: RSS ${rss.toFixed(1)} MB, CPU ${cpu.toFixed(2)}% over ${WINDOW_S} s`);
  return { blockers, rss, cpu };
}

/** Sends the waiting requests batch by batch, each acknowledged by the waiting gauge. */
async function ramp({ gateway }: Stack, streams: Stream[]): Promise<number> {
  const started = performance.now();
  for (let first = 0; first < WAITING; first += BATCH) {
    const batch = sendStreams(gateway.port, first, Math.min(BATCH, WAITING - first));
    streams.push(...batch);
    await waitFor(
      `batch at ${first} enqueued`,
      async () => {
        const refused = batch.find((s) => s.status !== 0 || s.error !== undefined);
        if (refused)
          throw new Error(`refused while ramping: ${refused.status} ${refused.error ?? ''}`);
        return (await gauges(gateway.url)).waiting >= streams.length;
      },
      30_000,
      2,
    );
  }
  const seconds = (performance.now() - started) / 1_000;
  console.error(`ramp: ${WAITING} waiting after ${seconds.toFixed(1)} s`);
  return seconds;
}

/** What the drain cost the gateway and Redis, over all its streams. */
async function drain(stack: Stack, streams: Stream[]) {
  const { gateway, redis, upstream } = stack;
  const startedAt = performance.now();
  const unixMs = Date.now();
  const [cpu, io, redisCpu] = [
    cpuMicros(gateway.pid),
    syscallCounts(gateway.pid),
    cpuMicros(redis.pid),
  ];
  const beforeCalls = await redisCommandStats(redis.url);
  upstream.send({ go: true });
  await Promise.race([Promise.all(streams.map((s) => s.finished)), timeLimit(DRAIN_LIMIT_MS)]);
  const seconds = (performance.now() - startedAt) / 1_000;
  const ioAfter = syscallCounts(gateway.pid);
  const calls = await redisCommandStats(redis.url);
  return {
    seconds,
    unixMs,
    timedOut: seconds * 1_000 >= DRAIN_LIMIT_MS,
    cpuMicros: cpuMicros(gateway.pid) - cpu,
    reads: ioAfter.reads - io.reads,
    writes: ioAfter.writes - io.writes,
    redisMicros: cpuMicros(redis.pid) - redisCpu,
    fcall: commandDelta(beforeCalls, calls, 'fcall'),
    blmpop: commandDelta(beforeCalls, calls, 'blmpop').calls,
  };
}

/** Pairwise inversions of a sequence, O(n log n) by merge counting (sorts `values`). */
function countInversions(values: number[]): number {
  if (values.length < 2) return 0;
  const mid = values.length >> 1;
  const left = values.slice(0, mid);
  const right = values.slice(mid);
  let count = countInversions(left) + countInversions(right);
  let i = 0;
  let j = 0;
  let k = 0;
  while (i < left.length && j < right.length) {
    if (left[i]! <= right[j]!) values[k++] = left[i++]!;
    else {
      values[k++] = right[j++]!;
      count += left.length - i;
    }
  }
  while (i < left.length) values[k++] = left[i++]!;
  while (j < right.length) values[k++] = right[j++]!;
  return count;
}

/** Pairs [seq, ms, ...] sorted by time. */
function byTime(flat: number[]): Array<[number, number]> {
  const pairs: Array<[number, number]> = [];
  for (let i = 0; i + 1 < flat.length; i += 2) pairs.push([flat[i]!, flat[i + 1]!]);
  return pairs.sort((a, b) => a[1] - b[1]);
}

/**
 * The order the waiting requests reached the upstream in, against the client's. A request
 * behind a later one inside a ramp batch is an enqueue race; across batches, one less than
 * the hold apart from it is two grants forwarded together; any other is out of queue order.
 * And the next-grant gaps, sorted.
 */
async function arrivalOrder(upstream: WaitingUpstream) {
  const report = await upstream.report();
  const arrivals = byTime(report.arrivals);
  const finishes = byTime(report.finishes);
  const waiting = arrivals.filter(([seq]) => seq >= 0);
  let [displaced, crossBatch, forwardRaces, maxSoFar, maxSoFarAt] = [0, 0, 0, -1, 0];
  for (const [seq, at] of waiting) {
    if (seq >= maxSoFar) {
      [maxSoFar, maxSoFarAt] = [seq, at];
      continue;
    }
    displaced++;
    if (Math.floor(seq / BATCH) === Math.floor(maxSoFar / BATCH)) continue;
    if (at - maxSoFarAt < HOLD_MS) forwardRaces++;
    else crossBatch++;
  }
  // The first `budget` grants follow the blockers, which the bench released together.
  const gaps: number[] = [];
  for (let k = BUDGET; k + BUDGET < arrivals.length && k < finishes.length; k++) {
    gaps.push(arrivals[k + BUDGET]![1] - finishes[k]![1]);
  }
  gaps.sort((a, b) => a - b);
  const order = waiting.map(([seq]) => seq);
  const inversions = countInversions(order);
  return { reached: order.length, inversions, displaced, crossBatch, forwardRaces, gaps };
}

/** Release -> next grant from the replica's exported spans, once the drain's have arrived. */
async function ownClockGaps(receiver: OtlpReceiver, sinceUnixMs: number) {
  const collect = () => {
    const spans = receiver.spans.filter((s) => s.endMs >= sinceUnixMs);
    return {
      releases: spans.filter((s) => s.kind === OtlpSpanKind.client).map((s) => s.endMs),
      grants: spans.filter((s) => s.name === SpanNames.queue).map((s) => s.endMs),
    };
  };
  const deadline = performance.now() + 30_000;
  let seen = collect();
  while (
    (seen.releases.length < WAITING + BUDGET || seen.grants.length < WAITING) &&
    performance.now() < deadline
  ) {
    await sleep(200);
    seen = collect();
  }
  const gaps = releaseToGrantMs(seen.releases, seen.grants).sort((a, b) => a - b);
  return { gaps, releases: seen.releases.length, grants: seen.grants.length };
}

const spread = (ms: number[]) =>
  `p50 ${quantile(ms, 0.5).toFixed(3)} ms, p90 ${quantile(ms, 0.9).toFixed(3)} ms, p99 ${quantile(ms, 0.99).toFixed(3)} ms, max ${(ms.at(-1) ?? Number.NaN).toFixed(3)} ms`;

async function main(): Promise<void> {
  const stack = await startStack();
  const streams: Stream[] = [];
  let blockers: Stream[] = [];
  try {
    await warmUp(stack);
    const idle = await idleBaseline(stack);
    blockers = idle.blockers;
    const rampS = await ramp(stack, streams);
    await sleep(2_000);
    const busy = await cpuWindow(stack.gateway.pid, WINDOW_S);
    const stillWaiting = (await gauges(stack.gateway.url)).waiting;
    console.error(
      `waiting: ${stillWaiting}; RSS ${busy.rss.toFixed(1)} MB, CPU ${busy.cpu.toFixed(2)}%`,
    );
    const cost = await drain(stack, [...blockers, ...streams]);
    const order = await arrivalOrder(stack.upstream);
    // The replica stops here, so that its spans leave (the exporter's flush at shutdown).
    await stack.gateway.stop(120_000);
    const own = stack.receiver ? await ownClockGaps(stack.receiver, cost.unixMs) : undefined;
    const served = streams.filter((s) => s.served).length;
    const drained = served + BUDGET;
    const p99 = quantile(order.gaps, 0.99);
    console.log(
      `\nwaiting benchmark: ${WAITING} streaming chat requests queued on one gateway replica (Redis), budget ${BUDGET},` +
        ` queue TTL 600 s, upstream hold ${HOLD_MS} ms, ramp in batches of ${BATCH} (${rampS.toFixed(1)} s), ${WINDOW_S} s windows` +
        `${PIN ? '; the gateway and Redis pinned to CPU 0, the load to CPU 1' : ''}\n`,
    );
    console.log(
      [
        'phase                         | gateway RSS MB | gateway CPU % of one core',
        `idle (${BUDGET} in flight, 0 waiting)    | ${idle.rss.toFixed(1).padStart(14)} | ${idle.cpu.toFixed(2).padStart(6)}`,
        `${String(stillWaiting).padStart(5)} waiting, nothing changes | ${busy.rss.toFixed(1).padStart(14)} | ${busy.cpu.toFixed(2).padStart(6)}`,
      ].join('\n'),
    );
    console.log(
      `\ndrain: ${served}/${WAITING} streams served in ${cost.seconds.toFixed(1)} s${cost.timedOut ? ' (time limit reached)' : ''},` +
        ` ${streams.length - served} failed; ${order.reached} reached the upstream; next grant after a release` +
        ` (${order.gaps.length} grants): ${spread(order.gaps)}; order against the client's: ${order.inversions} pairwise inversions,` +
        ` ${order.displaced} requests behind a later one (inside a ramp batch: ${order.displaced - order.crossBatch - order.forwardRaces};` +
        ` across batches: ${order.forwardRaces} forwarded together, less than the ${HOLD_MS} ms hold apart; ${order.crossBatch} out of queue order)`,
    );
    if (own) {
      console.log(
        `\nnext grant on the gateway's own clock (release -> grant, from its spans: ${own.releases} releases,` +
          ` ${own.grants} grants, ${own.gaps.length} pairs): ${spread(own.gaps)}`,
      );
    }
    const backgroundMicros = (busy.cpu / 100) * cost.seconds * 1_000_000;
    console.log(
      `\ngateway CPU in the drain: ${(cost.cpuMicros / drained).toFixed(0)} µs per request` +
        ` (${((cost.cpuMicros - backgroundMicros) / drained).toFixed(0)} µs over the ${busy.cpu.toFixed(1)}% it used while they waited);` +
        ` per request ${(cost.reads / drained).toFixed(2)} reads and ${(cost.writes / drained).toFixed(2)} writes (system calls)`,
    );
    console.log(
      `Redis in the drain: ${stack.redis.pid === undefined ? 'CPU unknown (not its own redis-server)' : `${(cost.redisMicros / drained).toFixed(0)} µs of CPU per request`};` +
        ` per request ${(cost.fcall.calls / drained).toFixed(2)} FCALL (${(cost.fcall.usec / cost.fcall.calls).toFixed(0)} µs of Redis's own time each)` +
        ` and ${(cost.blmpop / drained).toFixed(2)} BLMPOP`,
    );
    const rssGrowth = busy.rss - idle.rss;
    const inOrder = order.crossBatch === 0 && served === WAITING && order.reached === WAITING;
    const ownP99 = own ? quantile(own.gaps, 0.99) : Number.NaN;
    console.log(
      `\ngoals: (a) RSS growth ${rssGrowth.toFixed(1)} MB <= ${GOALS.rssMb} MB: ${verdict(rssGrowth <= GOALS.rssMb)};` +
        ` (b) CPU while waiting ${busy.cpu.toFixed(2)}% <= ${GOALS.cpuPercent}%: ${verdict(busy.cpu <= GOALS.cpuPercent)};` +
        ` (c) in order (none out of queue order, all served): ${verdict(inOrder)},` +
        ` next grant p99 ${p99.toFixed(3)} ms <= ${GOALS.nextGrantP99Ms} ms: ${verdict(p99 <= GOALS.nextGrantP99Ms)} (pod finish -> next pod arrival)` +
        (own
          ? `; on the gateway's clock p99 ${ownP99.toFixed(3)} ms: ${verdict(ownP99 <= GOALS.nextGrantP99Ms)}`
          : ''),
    );
  } finally {
    for (const s of [...blockers, ...streams]) s.close();
    await stack.upstream.close();
    await stack.receiver?.close();
    await stack.redis.stop();
  }
}

await runBench(main);
