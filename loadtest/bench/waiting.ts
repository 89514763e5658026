/**
 * Benchmark: 10,000 waiting streams on one gateway replica (issue 17).
 *
 *   npm run bench:waiting -w @fairgate/loadtest
 *
 * One gateway process with Redis (budget BENCH_BUDGET, default 2; queue TTL 10 minutes;
 * one tenant whose queue and the pool's queue caps admit them all), in front of an
 * upstream written here: a node:http server on 127.0.0.1 in a worker thread (its own event
 * loop, so the client's 10,000 sockets do not delay its clocks) that answers an
 * OpenAI-shaped SSE stream (role chunk, content chunk, usage chunk, `data: [DONE]`) after
 * BENCH_HOLD_MS (5 ms), and records per request its arrival, its finish and the sequence
 * number the client put in the `user` field.
 *
 * 1. Warm-up: BENCH_WARMUP streams through the gateway (JIT, pools, connections).
 * 2. The upstream holds from now on: `budget` blocker streams take every slot.
 *    Idle baseline: the gateway's VmRSS and its CPU over BENCH_WINDOW_S (10 s).
 * 3. BENCH_WAITING (10,000) streaming chat requests are sent in order, one per connection,
 *    in batches of BENCH_BATCH: a batch's connections are opened, its requests written in
 *    sequence order, then the client waits until the gateway's `fairgate_waiting` gauge
 *    counts the whole batch before it sends the next (so batch k is enqueued before batch
 *    k+1: order across batches is exact; inside a batch, enqueue order may race).
 * 4. While all wait and nothing changes: (a) VmRSS growth over the baseline, (b) the
 *    gateway's CPU (utime + stime from /proc) over BENCH_WINDOW_S. With BENCH_HEAP_USED=1,
 *    also after each window the gateway's JavaScript heap after a full GC (through its
 *    inspector: live objects only, so per waiting request it does not swing with V8's
 *    young-generation sizing as RSS does), and once more after the drain (nothing kept per
 *    request: the heap is back near idle). Opt-in because the inspector disturbs RSS: one
 *    run of 10,000 grew 220 MB with it against 127 MB without.
 * 5. The upstream lets the blockers finish and serves every request after BENCH_HOLD_MS:
 *    (c) the order in which requests reach the upstream against the client's (an inversion
 *    inside a ramp batch is an enqueue race; across batches, one between two requests that
 *    reached the upstream less than the hold apart is a race of two grants forwarded
 *    together; any other is out of queue order and fails the goal) and
 *    the next-grant latency = arrival at the upstream of the next request minus the finish
 *    of the one whose slot it took (the k-th finish frees the slot of the (k+budget)-th
 *    arrival; it includes the release, the dispatch, the notice and the forward).
 *    Measured in the same drain: the gateway's CPU and read/write system calls per request
 *    (the CPU also net of the rate of the waiting phase, which runs on whatever the drain
 *    does), Redis's CPU and the FCALLs and BLMPOPs it ran per request with its own time in an
 *    FCALL (against a release that grants run back to back on it once the replica has stopped:
 *    warm-release.ts), and the machine's floor
 *    (redis-hop-probe.ts: a separate, otherwise idle process writes to Redis every
 *    BENCH_FLOOR_MS and times the round trip, until the write's reply on the same
 *    connection, and the hop, until a BLMPOP on another connection returns what it wrote).
 *    Here a release carries its replica's next grant back in its reply, so a grant is at
 *    least that round trip, and its p99 over the round trip's is what the replica adds; on
 *    a machine whose floor is near or over the goal, the goal is out of reach there. With
 *    BENCH_TRACES=1 the grant's median on the replica's clock is split into the round trip's
 *    median, Redis's time in the script and what is left: the replica's own part.
 *
 * The gateway's config differs from the defaults in: scheduler.budget, queue_ttl_ms
 * (600,000), max_queue_depth and band_capacity (20,000: defaults 10,000 and 5,000), the
 * tenant's queue_max (20,000: default 100) and server.max_connections (12,000: the default
 * 10,000 leaves no room for 10,000 waiting streams plus the blockers and the client's
 * /metrics probes).
 *
 * Every loop is bounded in count and time; all traffic stays on 127.0.0.1. Needs Linux
 * (/proc), `npm run build` and redis-server (or REDIS_URL).
 *
 * Environment: BENCH_WAITING (10000), BENCH_BUDGET (2), BENCH_HOLD_MS (5), BENCH_BATCH
 * (50), BENCH_WARMUP (300), BENCH_WINDOW_S (10), BENCH_DRAIN_LIMIT_S (300), BENCH_FLOOR_MS
 * (10; 0 leaves the floor's probe out; with BENCH_PIN it runs on the measured path's core),
 * BENCH_GATEWAY_NODE_ARGS (extra node flags for the gateway, e.g. `--cpu-prof`),
 * BENCH_HEAP_USED (0; 1 runs the gateway with --inspect and adds the heap readings),
 * BENCH_TRACES (0; 1 has the gateway export its spans to an OTLP receiver here, and adds
 * the next grant on the gateway's own clock, below), BENCH_TRACES_EXPORT (live; `after`
 * holds every span in the replica until it stops after the drain, so the exporter's work
 * falls outside the measured window), BENCH_PIN (0; 1 puts the path under
 * test, the gateway and its redis-server, on CPU 0 and this process, which is the load
 * client, the upstream's thread and the OTLP receiver, on CPU 1, with `taskset`: the load
 * generator off the measured path's core, as on a real deployment. A release's grant is
 * then handed between two processes on one core, with no cross-CPU wake-up. Without it the
 * kernel places all four anywhere on the two cores; docs/performance-history.md, *Twentieth
 * round*, has both).
 *
 * With BENCH_TRACES=1 the drain is also measured as the issue words it, "the next grant
 * after a release", on the replica's own clock and from its own telemetry: the replica
 * exports its spans (OTLP/HTTP JSON, the SDK configured by OTEL_* variables only) to
 * bench/otlp-receiver.ts, and the j-th release (the end of a CLIENT span: the relay
 * releases the slot right before ending it) is paired with the j-th grant (the end of a
 * `fairgate.queue` span, t2). That leaves out the two hops through this bench's upstream
 * thread that the end-to-end figure holds (pod finish -> the replica reads it; forward ->
 * the upstream sees the next request). The replica then records and exports ~3 spans per
 * request, so its RSS and CPU readings in such a run are those of a replica with tracing on.
 */

import { connect, type Socket } from 'node:net';
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { SpanNames } from '@fairgate/telemetry';
import {
  freePort,
  sha256Hex,
  startGatewayProcess,
  startRedis,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { heapUsedAfterGcMb } from './inspector.js';
import {
  type OtlpReceiver,
  OtlpSpanKind,
  type ReceivedSpan,
  releaseToGrantMs,
  startOtlpReceiver,
} from './otlp-receiver.js';
import {
  cpuMicros,
  pinProcess,
  redisCommandStats,
  redisPid,
  rssMb,
  syscallCounts,
} from './proc.js';
import { type RedisHopProbe, startRedisHopProbe } from './redis-hop-probe.js';
import { measureWarmRelease } from './warm-release.js';

const WAITING = Number(process.env.BENCH_WAITING ?? 10_000);
const BUDGET = Number(process.env.BENCH_BUDGET ?? 2);
const HOLD_MS = Number(process.env.BENCH_HOLD_MS ?? 5);
const BATCH = Number(process.env.BENCH_BATCH ?? 50);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 300);
const WINDOW_S = Number(process.env.BENCH_WINDOW_S ?? 10);
const DRAIN_LIMIT_S = Number(process.env.BENCH_DRAIN_LIMIT_S ?? 300);
const GATEWAY_NODE_ARGS = (process.env.BENCH_GATEWAY_NODE_ARGS ?? '').split(' ').filter(Boolean);
const HEAP_READINGS = process.env.BENCH_HEAP_USED === '1';
const TRACES = process.env.BENCH_TRACES === '1';
/**
 * BENCH_TRACES_EXPORT=after: the replica's batch processor keeps every span and exports them
 * when the replica stops, after the drain (otlp-receiver.ts, `batching: 'at-shutdown'`). Live
 * export (the default, every 200 ms) serialises ~3 spans per request on the replica's event
 * loop while it grants (docs/performance-history.md, *Twentieth round*); the receiver keeps
 * what arrives and parses it after the drain (*Twenty-second round*).
 */
const TRACES_AFTER = process.env.BENCH_TRACES_EXPORT === 'after';
const PIN = process.env.BENCH_PIN === '1';
/**
 * The machine's floor (redis-hop-probe.ts), measured during the drain: one write to Redis
 * every BENCH_FLOOR_MS (10: a hundred a second, about a third of the drain's grants, so that
 * the probe adds little to what it measures); BENCH_FLOOR_MS=0 leaves it out.
 */
const FLOOR_MS = Number(process.env.BENCH_FLOOR_MS ?? 10);
/** BENCH_PIN's cores: the gateway and its Redis; the load (this process). */
const [MEASURED_CPU, LOAD_CPU] = ['0', '1'];

/** Goals of the issue. */
const GOAL_RSS_MB = 150;
const GOAL_CPU_PERCENT = 10;
const GOAL_NEXT_GRANT_P99_MS = 2;

/**
 * The upstream, in a worker thread (CommonJS, evaluated). Messages in: {mode: 'serve' |
 * 'hold'}, {go: true} (finish what is held, serve from now on), {report: true}, {reset:
 * true}. Out: {port}, {report: {arrivals, finishes}} as flat [seq, ms, seq, ms, ...].
 */
const UPSTREAM_SOURCE = String.raw`
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const holdMs = workerData.holdMs;
let holding = false;
let held = [];
let arrivals = [];
let finishes = [];
let running = 0;
const id = 'chatcmpl-bench';
const created = Math.floor(Date.now() / 1000);
function event(object) { return 'data: ' + JSON.stringify(object) + '\n\n'; }
function chunk(delta, finish) {
  return event({ id, object: 'chat.completion.chunk', created, model: 'bench-model',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], usage: null });
}
const usage = { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 };
const streamBody =
  chunk({ role: 'assistant', content: '' }, null) +
  chunk({ content: 'ok' }, null) +
  chunk({ content: '.' }, 'stop');
const usageEvent = event({ id, object: 'chat.completion.chunk', created, model: 'bench-model',
  choices: [], usage });
function respond(res, seq, includeUsage) {
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  res.end(streamBody + (includeUsage ? usageEvent : '') + 'data: [DONE]\n\n');
  running--;
  finishes.push(seq, performance.now());
}
const server = http.createServer((req, res) => {
  if (req.method === 'GET') {
    if (req.url === '/health') return res.end('ok');
    if (req.url === '/metrics') {
      return res.end('vllm:num_requests_running{model_name="bench-model"} ' + running +
        '\nvllm:num_requests_waiting{model_name="bench-model"} 0' +
        '\nvllm:kv_cache_usage_perc{model_name="bench-model"} 0\n');
    }
    if (req.url === '/v1/models') {
      res.setHeader('content-type', 'application/json');
      return res.end(JSON.stringify({ object: 'list', data: [{ id: 'bench-model', object: 'model' }] }));
    }
    res.statusCode = 404;
    return res.end();
  }
  const at = performance.now();
  const parts = [];
  req.on('data', (c) => parts.push(c));
  req.on('end', () => {
    let body = {};
    try { body = JSON.parse(Buffer.concat(parts).toString('utf8')); } catch {}
    const seq = Number(String(body.user ?? 'seq-NaN').slice(4));
    const includeUsage = body.stream_options?.include_usage === true;
    arrivals.push(seq, at);
    running++;
    if (holding) held.push([res, seq, includeUsage]);
    else setTimeout(respond, holdMs, res, seq, includeUsage);
  });
});
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => parentPort.postMessage({ port: server.address().port }));
parentPort.on('message', (m) => {
  if (m.mode) holding = m.mode === 'hold';
  if (m.reset) { arrivals = []; finishes = []; }
  if (m.go) {
    holding = false;
    const now = held; held = [];
    for (const [res, seq, includeUsage] of now) respond(res, seq, includeUsage);
  }
  if (m.report) parentPort.postMessage({ report: { arrivals, finishes } });
  if (m.close) { server.closeAllConnections(); server.close(() => process.exit(0)); }
});
`;

interface Upstream {
  url: string;
  send(message: Record<string, unknown>): void;
  report(): Promise<{ arrivals: number[]; finishes: number[] }>;
  close(): Promise<void>;
}

async function startUpstream(): Promise<Upstream> {
  // No loader flags: the worker runs plain CommonJS.
  const worker = new Worker(UPSTREAM_SOURCE, {
    eval: true,
    workerData: { holdMs: HOLD_MS },
    execArgv: [],
  });
  const port = await new Promise<number>((resolve, reject) => {
    worker.once('error', reject);
    worker.once('message', (m: { port: number }) => resolve(m.port));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    send: (message) => worker.postMessage(message),
    report: () =>
      new Promise((resolve) => {
        const onMessage = (m: { report?: { arrivals: number[]; finishes: number[] } }) => {
          if (!m.report) return;
          worker.off('message', onMessage);
          resolve(m.report);
        };
        worker.on('message', onMessage);
        worker.postMessage({ report: true });
      }),
    close: async () => {
      worker.postMessage({ close: true });
      const exited = new Promise((resolve) => worker.once('exit', resolve));
      await Promise.race([exited, limit(2_000)]);
      await worker.terminate();
    },
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A time limit to race against: unlike `sleep`, its timer does not keep the process alive
 * (the drain's 300 s limit used to hold the finished bench open for minutes).
 */
function limit(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/** Percent of one core the process used over `seconds`, with its RSS sampled each second. */
async function cpuWindow(pid: number, seconds: number): Promise<{ cpu: number; rss: number[] }> {
  const rss: number[] = [];
  const start = cpuMicros(pid);
  const t0 = performance.now();
  for (let i = 0; i < seconds; i++) {
    await sleep(1_000);
    rss.push(rssMb(pid));
  }
  const elapsed = performance.now() - t0;
  return { cpu: ((cpuMicros(pid) - start) / 1_000 / elapsed) * 100, rss };
}

/** One streaming request on its own connection, read just enough to know how it ended. */
class Stream {
  status = 0;
  done = false;
  sawDone = false;
  error: string | undefined;
  #socket: Socket | undefined;
  #head = '';
  #tail = '';
  #contentLength = -1;
  #bodyBytes = 0;
  #chunked = false;
  readonly #finished: Promise<void>;
  #resolve!: () => void;

  constructor() {
    this.#finished = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  get finished(): Promise<void> {
    return this.#finished;
  }

  open(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const socket = connect({ host: '127.0.0.1', port }, () => resolve());
      this.#socket = socket;
      socket.setNoDelay(true);
      socket.once('error', (error) => {
        this.#end(error.message);
        reject(error);
      });
      socket.on('data', (data: Buffer) => this.#onData(data));
      socket.once('close', () => this.#end(this.done ? undefined : 'closed'));
    });
  }

  send(request: string): void {
    this.#socket?.write(request);
  }

  close(): void {
    this.#socket?.destroy();
  }

  #onData(data: Buffer): void {
    let text = data.toString('latin1');
    if (!this.status) {
      this.#head += text;
      const end = this.#head.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = this.#head.slice(0, end);
      this.status = Number(head.slice(9, 12));
      const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
      if (length) this.#contentLength = Number(length[1]);
      this.#chunked = /\r\ntransfer-encoding:\s*chunked/i.test(head);
      text = this.#head.slice(end + 4);
      this.#head = '';
    }
    if (text.includes('[DONE]')) this.sawDone = true;
    this.#bodyBytes += text.length;
    this.#tail = (this.#tail + text).slice(-16);
    if (
      (this.#contentLength >= 0 && this.#bodyBytes >= this.#contentLength) ||
      (this.#chunked && this.#tail.endsWith('\r\n0\r\n\r\n'))
    ) {
      this.done = true;
      this.#end(undefined);
    }
  }

  #end(error: string | undefined): void {
    if (this.error === undefined && !this.done && error) this.error = error;
    this.#resolve();
  }
}

function requestText(port: number, seq: number): string {
  const body = JSON.stringify({
    model: 'bench-model',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 2,
    stream: true,
    user: `seq-${seq}`,
  });
  return (
    `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\n` +
    `authorization: Bearer ${TEST_KEYS.paying}\r\ncontent-type: application/json\r\n` +
    `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
  );
}

/** The gateway's fairgate_waiting and fairgate_inflight gauges. */
async function gauges(url: string): Promise<{ waiting: number; inflight: number }> {
  const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
  const read = (name: string) =>
    Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
  return { waiting: read('fairgate_waiting'), inflight: read('fairgate_inflight') };
}

async function waitFor(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs: number,
  everyMs = 5,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (await check()) return;
    await sleep(everyMs);
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}

/**
 * The drain's releases and grants from the replica's spans (bench/otlp-receiver.ts), once
 * the last of them arrived (the exporter sends every 200 ms, or all at once as the replica
 * stops; 30 s at most), paired. Spans that ended before the drain (the warm-up's, the
 * blockers' grants) are left out by their end time.
 */
async function releasesAndGrants(
  receiver: OtlpReceiver,
  sinceUnixMs: number,
): Promise<{ gaps: number[]; releases: number; grants: number }> {
  const inDrain = (s: ReceivedSpan) => s.endMs >= sinceUnixMs;
  const collect = () => {
    const spans = receiver.spans; // parses what arrived since the last read
    return {
      releases: spans
        .filter((s) => s.kind === OtlpSpanKind.client && inDrain(s))
        .map((s) => s.endMs),
      grants: spans.filter((s) => s.name === SpanNames.queue && inDrain(s)).map((s) => s.endMs),
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

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** Pairs [seq, ms, ...] sorted by time. */
function byTime(flat: number[]): Array<[number, number]> {
  const pairs: Array<[number, number]> = [];
  for (let i = 0; i + 1 < flat.length; i += 2) pairs.push([flat[i]!, flat[i + 1]!]);
  return pairs.sort((a, b) => a[1] - b[1]);
}

/** BENCH_PIN: the gateway and its redis-server on one core, this process on the other. */
function pinMeasuredPath(
  gatewayPid: number,
  redisServer: number | undefined,
  probePid: number | undefined,
): void {
  if (availableParallelism() < 2) throw new Error('BENCH_PIN=1 needs at least 2 CPUs');
  if (redisServer === undefined) {
    throw new Error('BENCH_PIN=1 needs its own redis-server (unset REDIS_URL) and its pid');
  }
  for (const measured of [gatewayPid, redisServer, probePid]) {
    if (measured !== undefined) pinProcess(measured, MEASURED_CPU);
  }
  pinProcess(process.pid, LOAD_CPU);
}

async function main(): Promise<void> {
  const redis = await startRedis();
  // Only a redis-server of this machine started here: a REDIS_URL's pid may be anyone's.
  const redisServer = redis.source === 'redis-server' ? await redisPid(redis.url) : undefined;
  const upstream = await startUpstream();
  const receiver = TRACES ? await startOtlpReceiver() : undefined;
  const streams: Stream[] = [];
  const blockers: Stream[] = [];
  let probe: RedisHopProbe | undefined;
  try {
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
      scheduler: {
        queue_ttl_ms: 600_000,
        max_queue_depth: 20_000,
        band_capacity: 20_000,
      },
      sections: { server: { max_connections: 12_000 } },
    });
    // The heap readings go through the gateway's inspector (loopback, a free port); opt-in.
    const inspectPort = HEAP_READINGS ? await freePort() : undefined;
    const nodeArgs = [
      ...(inspectPort ? [`--inspect=127.0.0.1:${inspectPort}`] : []),
      ...GATEWAY_NODE_ARGS,
    ];
    const heapMb = async () => (inspectPort ? await heapUsedAfterGcMb(inspectPort) : Number.NaN);
    const gateway = await startGatewayProcess({
      config,
      replicaId: 'bench-waiting',
      ...(nodeArgs.length > 0 ? { nodeArgs } : {}),
      ...(receiver
        ? { env: receiver.exportEnv({ batching: TRACES_AFTER ? 'at-shutdown' : 'every-span' }) }
        : {}),
    });
    const pid = gateway.pid;
    if (pid === undefined) throw new Error('gateway has no pid');
    if (FLOOR_MS > 0) probe = await startRedisHopProbe(redis.url, FLOOR_MS);
    if (PIN) pinMeasuredPath(pid, redisServer, probe?.pid);
    const port = gateway.port;
    await waitFor(
      'the upstream is healthy',
      async () => (await fetch(`${gateway.url}/readyz`)).ok,
      15_000,
      100,
    );

    // 1. Warm-up, 16 at a time.
    const warmupStart = performance.now();
    let warmupErrors = 0;
    for (let i = 0; i < WARMUP; i += 16) {
      const batch = Array.from({ length: Math.min(16, WARMUP - i) }, () => new Stream());
      await Promise.all(batch.map((s) => s.open(port)));
      for (const [j, s] of batch.entries()) s.send(requestText(port, -1_000_000 - i - j));
      await Promise.race([Promise.all(batch.map((s) => s.finished)), limit(10_000)]);
      for (const s of batch) {
        if (s.status !== 200 || !s.sawDone) warmupErrors++;
        s.close();
      }
    }
    console.error(
      `warm-up: ${WARMUP} streams in ${((performance.now() - warmupStart) / 1_000).toFixed(1)} s, ${warmupErrors} errors`,
    );

    // 2. Blockers take every slot; idle baseline.
    upstream.send({ mode: 'hold', reset: true });
    blockers.push(...Array.from({ length: BUDGET }, () => new Stream()));
    for (const [i, s] of blockers.entries()) {
      await s.open(port);
      s.send(requestText(port, -BUDGET + i));
    }
    await waitFor(
      'blockers in flight',
      async () => (await gauges(gateway.url)).inflight >= BUDGET,
      10_000,
    );
    await sleep(2_000);
    if (process.env.BENCH_HEAP_SIGNAL) {
      // With BENCH_GATEWAY_NODE_ARGS=--heapsnapshot-signal=SIGUSR2: a heap snapshot of the
      // idle gateway, to compare with the one taken while everything waits (below).
      process.kill(pid, process.env.BENCH_HEAP_SIGNAL as NodeJS.Signals);
      await sleep(Number(process.env.BENCH_HEAP_WAIT_MS ?? 15_000));
    }
    const idleRss = rssMb(pid);
    const idle = await cpuWindow(pid, WINDOW_S);
    // After the idle RSS and CPU readings (a full GC, forced).
    const idleHeap = await heapMb();
    console.error(
      `idle: RSS ${idleRss.toFixed(1)} MB, CPU ${idle.cpu.toFixed(2)}% over ${WINDOW_S} s${HEAP_READINGS ? `, heap after GC ${idleHeap.toFixed(1)} MB` : ''}`,
    );

    // 3. Ramp: batches in order; each batch acknowledged by the waiting gauge.
    const rampStart = performance.now();
    for (let first = 0; first < WAITING; first += BATCH) {
      const batch = Array.from({ length: Math.min(BATCH, WAITING - first) }, () => new Stream());
      await Promise.all(batch.map((s) => s.open(port)));
      for (const [j, s] of batch.entries()) s.send(requestText(port, first + j));
      streams.push(...batch);
      const expected = first + batch.length;
      await waitFor(
        `batch at ${first} enqueued`,
        async () => {
          const failed = batch.find((s) => s.status !== 0 || s.error !== undefined);
          if (failed) {
            throw new Error(
              `request refused while ramping: status ${failed.status} ${failed.error ?? ''}`,
            );
          }
          return (await gauges(gateway.url)).waiting >= expected;
        },
        30_000,
        2,
      );
    }
    const rampS = (performance.now() - rampStart) / 1_000;
    console.error(`ramp: ${WAITING} waiting after ${rampS.toFixed(1)} s`);

    // 4. Everything waits, nothing changes.
    await sleep(2_000);
    const waitingNow = await gauges(gateway.url);
    const busy = await cpuWindow(pid, WINDOW_S);
    const stillWaiting = await gauges(gateway.url);
    const waitRss = Math.max(...busy.rss);
    const waitHeap = await heapMb();
    if (process.env.BENCH_HEAP_SIGNAL) {
      // With BENCH_GATEWAY_NODE_ARGS=--heapsnapshot-signal=SIGUSR2: a heap snapshot of the
      // gateway while everything waits (written to its working directory).
      process.kill(pid, process.env.BENCH_HEAP_SIGNAL as NodeJS.Signals);
      await sleep(Number(process.env.BENCH_HEAP_WAIT_MS ?? 15_000));
    }
    console.error(
      `waiting: ${stillWaiting.waiting} (before ${waitingNow.waiting}); RSS ${waitRss.toFixed(1)} MB, CPU ${busy.cpu.toFixed(2)}%`,
    );

    // 5. Capacity frees.
    const drainStart = performance.now();
    const drainStartUnixMs = Date.now();
    const drainStartCpu = cpuMicros(pid);
    const drainStartSyscalls = syscallCounts(pid);
    const redisStartCpu = cpuMicros(redisServer);
    const redisStartCalls = await redisCommandStats(redis.url);
    probe?.record();
    upstream.send({ go: true });
    const drainDeadline = drainStart + DRAIN_LIMIT_S * 1_000;
    await Promise.race([
      Promise.all([...blockers, ...streams].map((s) => s.finished)),
      limit(DRAIN_LIMIT_S * 1_000),
    ]);
    const drainS = (performance.now() - drainStart) / 1_000;
    const drainCpuMicros = cpuMicros(pid) - drainStartCpu;
    const drainSyscalls = syscallCounts(pid);
    const redisCpuMicros = cpuMicros(redisServer) - redisStartCpu;
    const redisCalls = await redisCommandStats(redis.url);
    const floorReadings = await probe?.stop();
    const hopFloor = floorReadings?.hops.sort((a, b) => a - b);
    const roundTripFloor = floorReadings?.roundTrips.sort((a, b) => a - b);
    probe = undefined;
    const timedOut = performance.now() >= drainDeadline;
    const report = await upstream.report();
    // Everything served: the heap should be back where it was idle (nothing kept per request).
    const drainedHeap = await heapMb();

    // Order: the arrival order of the waiting requests against the client's. Inside a ramp
    // batch the enqueue order itself may race. Across batches the queue order is exact, so a
    // request arriving after a later one is either a race of two grants forwarded together
    // (the later one's arrival less than the hold before it: both in flight at once, their
    // slots freed by one pass) or a FIFO violation.
    const arrivals = byTime(report.arrivals);
    const finishes = byTime(report.finishes);
    const waitingArrivals = arrivals.filter(([seq]) => seq >= 0);
    const order = waitingArrivals.map(([seq]) => seq);
    let inversions = 0;
    let crossBatch = 0;
    let forwardRaces = 0;
    let maxSoFar = -1;
    let maxSoFarAt = 0;
    let displaced = 0;
    for (const [seq, at] of waitingArrivals) {
      if (seq < maxSoFar) {
        displaced++;
        if (Math.floor(seq / BATCH) < Math.floor(maxSoFar / BATCH)) {
          if (at - maxSoFarAt < HOLD_MS) forwardRaces++;
          else crossBatch++;
        }
      } else {
        maxSoFar = seq;
        maxSoFarAt = at;
      }
    }
    // Pairwise inversions, O(n log n) by merge counting.
    const countInversions = (values: number[]): number => {
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
    };
    inversions = countInversions([...order]);

    // Next grant after a release: the k-th finish frees the slot of the (k+budget)-th arrival.
    // The first `budget` grants follow the blockers, which the bench released together.
    const gaps: number[] = [];
    for (let k = BUDGET; k + BUDGET < arrivals.length && k < finishes.length; k++) {
      gaps.push(arrivals[k + BUDGET]![1] - finishes[k]![1]);
    }
    gaps.sort((a, b) => a - b);
    // The replica stops here: held spans leave then (its drain, then the SDK's shutdown
    // flush), and its own FCALLs stay out of the warm baseline below.
    await gateway.stop(120_000);
    const ownClock = receiver ? await releasesAndGrants(receiver, drainStartUnixMs) : undefined;
    const ownP99 = ownClock ? quantile(ownClock.gaps, 0.99) : Number.NaN;
    // The release's script back to back on the same redis-server: the baseline for its time
    // in the drain.
    const warm = await measureWarmRelease(redis.url);
    const served = streams.filter((s) => s.status === 200 && s.sawDone).length;
    const failed = streams.length - served;

    const rssGrowth = waitRss - idleRss;
    const p50 = quantile(gaps, 0.5);
    const p99 = quantile(gaps, 0.99);
    const verdict = (met: boolean) => (met ? 'met' : 'NOT met');
    const orderMet = crossBatch === 0 && served === WAITING && order.length === WAITING;
    console.log(
      `\nwaiting benchmark: ${WAITING} streaming chat requests queued on one gateway replica (Redis),` +
        ` budget ${BUDGET}, one tenant and class, queue TTL 600 s, upstream hold ${HOLD_MS} ms,` +
        ` ramp in batches of ${BATCH} (${rampS.toFixed(1)} s), ${WINDOW_S} s windows` +
        `${PIN ? `; the gateway and Redis pinned to CPU ${MEASURED_CPU}, the load to CPU ${LOAD_CPU} (BENCH_PIN)` : ''}\n`,
    );
    console.log(
      [
        'phase                         | gateway RSS MB | gateway CPU % of one core',
        `idle (${BUDGET} in flight, 0 waiting)    | ${idleRss.toFixed(1).padStart(14)} | ${idle.cpu.toFixed(2).padStart(6)}`,
        `${String(stillWaiting.waiting).padStart(5)} waiting, nothing changes | ${waitRss.toFixed(1).padStart(14)} | ${busy.cpu.toFixed(2).padStart(6)}`,
      ].join('\n'),
    );
    if (HEAP_READINGS) {
      const perRequestKb = ((waitHeap - idleHeap) * 1024) / stillWaiting.waiting;
      console.log(
        `\nJavaScript heap after a full GC (live objects; RSS also counts garbage and V8's spare young-generation room):` +
          ` idle ${idleHeap.toFixed(1)} MB, waiting ${waitHeap.toFixed(1)} MB (${perRequestKb.toFixed(2)} KB per waiting request),` +
          ` after the drain ${drainedHeap.toFixed(1)} MB (${(drainedHeap - idleHeap).toFixed(1)} MB over idle)`,
      );
    }
    console.log(
      `\ndrain: ${served}/${WAITING} streams served in ${drainS.toFixed(1)} s${timedOut ? ' (time limit reached)' : ''}, ${failed} failed;` +
        ` ${order.length} reached the upstream; next grant after a release (${gaps.length} grants):` +
        ` p50 ${p50.toFixed(3)} ms, p99 ${p99.toFixed(3)} ms, max ${(gaps.at(-1) ?? Number.NaN).toFixed(3)} ms;` +
        ` order against the client's: ${inversions} pairwise inversions, ${displaced} requests behind a later one` +
        ` (inside a ramp batch of ${BATCH}, enqueue-order races: ${displaced - crossBatch - forwardRaces};` +
        ` across batches: ${forwardRaces} forwarded together with the later one, less than the ${HOLD_MS} ms hold apart;` +
        ` ${crossBatch} out of queue order)`,
    );
    if (ownClock) {
      const { gaps: own, releases, grants } = ownClock;
      console.log(
        `\nnext grant on the gateway's own clock (release -> the next waiting request resumed with its pod, from the replica's exported spans:` +
          ` ${releases} releases, ${grants} grants, ${own.length} pairs): p50 ${quantile(own, 0.5).toFixed(3)} ms,` +
          ` p90 ${quantile(own, 0.9).toFixed(3)} ms, p99 ${ownP99.toFixed(3)} ms, max ${(own.at(-1) ?? Number.NaN).toFixed(3)} ms` +
          `${own[0] !== undefined && own[0] < 0 ? ' (NEGATIVE gaps: the pairing premise broke)' : ''}`,
      );
    }
    const hopP99 = hopFloor ? quantile(hopFloor, 0.99) : Number.NaN;
    const roundTripP99 = roundTripFloor ? quantile(roundTripFloor, 0.99) : Number.NaN;
    if (hopFloor && roundTripFloor) {
      const spread = (ms: number[]) =>
        `p50 ${quantile(ms, 0.5).toFixed(3)} ms, p90 ${quantile(ms, 0.9).toFixed(3)} ms,` +
        ` p99 ${quantile(ms, 0.99).toFixed(3)} ms, max ${(ms.at(-1) ?? Number.NaN).toFixed(3)} ms`;
      console.log(
        `\nthe machine's floor during the drain (redis-hop-probe.ts: an idle process writes every ${FLOOR_MS} ms, the two kinds in turn):` +
          ` the round trip, an INCR until its reply on the same connection (the path of a grant a release carries back): ${roundTripFloor.length},` +
          ` ${spread(roundTripFloor)}; the hop, an LPUSH until a BLMPOP on another connection returns it (the path of a grant` +
          ` another replica's pass makes): ${hopFloor.length}, ${spread(hopFloor)}`,
      );
    }
    const drained = served + BUDGET;
    // What the replica spends whatever the drain does (its timers, the leader's loops), at the
    // rate it spent while everything waited: at a slow pace it is a large share per request.
    const backgroundMicros = (busy.cpu / 100) * drainS * 1_000_000;
    console.log(
      `\ngateway CPU in the drain: ${(drainCpuMicros / drained).toFixed(0)} µs per request (${(drainCpuMicros / 1_000_000).toFixed(1)} s` +
        ` of CPU for ${drained} streams, ${(drainCpuMicros / 10_000 / drainS).toFixed(1)}% of one core);` +
        ` ${((drainCpuMicros - backgroundMicros) / drained).toFixed(0)} µs per request over the ${busy.cpu.toFixed(1)}% it used while they waited;` +
        ` per request ${((drainSyscalls.reads - drainStartSyscalls.reads) / drained).toFixed(2)} reads and` +
        ` ${((drainSyscalls.writes - drainStartSyscalls.writes) / drained).toFixed(2)} writes (system calls)`,
    );
    // Redis's side of the same drain. The floor's probe runs on it too: an INCR and an LPUSH
    // every two periods and one BLMPOP a hop (its hops are counted above), left out of the
    // commands.
    const ran = (command: string, what: 'calls' | 'usec' = 'calls') =>
      (redisCalls.get(command)?.[what] ?? 0) - (redisStartCalls.get(command)?.[what] ?? 0);
    const probeHops = hopFloor?.length ?? 0;
    const fcallMicros = ran('fcall', 'usec') / ran('fcall');
    console.log(
      `\nRedis in the drain: ${redisServer === undefined ? 'CPU unknown (not its own redis-server)' : `${(redisCpuMicros / drained).toFixed(0)} µs of CPU per request`};` +
        ` per request ${(ran('fcall') / drained).toFixed(2)} FCALL (the engine's calls, batched or alone;` +
        ` Redis's own time in one: ${fcallMicros.toFixed(0)} µs, part of every grant's round trip;` +
        ` a release with its granting pass takes ${warm.fcallMicros.toFixed(0)} µs run back to back after the drain,` +
        ` so ${(fcallMicros / warm.fcallMicros).toFixed(1)}x in it) and` +
        ` ${((ran('blmpop') - probeHops) / drained).toFixed(2)} BLMPOP (the replica's blocking waits)` +
        (probeHops > 0 ? `, the floor's probe's ${probeHops} hops left out` : ''),
    );
    if (ownClock && roundTripFloor) {
      // A grant a release carries back is one round trip with the release's script in it; what
      // is left of its median is the replica's own part (the release sent, the reply read, the
      // waiting request resumed). Approximate (a median of a sum is not the sum of medians), and
      // only at the median: at the p99 the parts' tails seldom line up, so such a split means
      // nothing there.
      const fcallMs = fcallMicros / 1_000;
      const ownP50 = quantile(ownClock.gaps, 0.5);
      const redisPart = quantile(roundTripFloor, 0.5) + fcallMs;
      console.log(
        `\nthe next grant's median on the gateway's clock, ${ownP50.toFixed(3)} ms, part by part: the round trip's median` +
          ` ${quantile(roundTripFloor, 0.5).toFixed(3)} ms + Redis's mean time in an FCALL ${fcallMs.toFixed(3)} ms` +
          ` = ${redisPart.toFixed(3)} ms; the replica's own part ${(ownP50 - redisPart).toFixed(3)} ms`,
      );
    }
    console.log(
      `\ngoals: (a) RSS growth ${rssGrowth.toFixed(1)} MB <= ${GOAL_RSS_MB} MB: ${verdict(rssGrowth <= GOAL_RSS_MB)};` +
        ` (b) CPU while waiting ${busy.cpu.toFixed(2)}% <= ${GOAL_CPU_PERCENT}%: ${verdict(busy.cpu <= GOAL_CPU_PERCENT)};` +
        ` (c) in order (none out of queue order, all served): ${verdict(orderMet)},` +
        ` next grant p99 ${p99.toFixed(3)} ms <= ${GOAL_NEXT_GRANT_P99_MS} ms: ${verdict(p99 <= GOAL_NEXT_GRANT_P99_MS)}` +
        ` (end to end: pod finish -> next pod arrival)` +
        (ownClock
          ? `; on the gateway's clock (release -> grant) p99 ${ownP99.toFixed(3)} ms <= ${GOAL_NEXT_GRANT_P99_MS} ms: ${verdict(ownP99 <= GOAL_NEXT_GRANT_P99_MS)}`
          : '') +
        (hopFloor
          ? `; the machine's floor p99: the round trip ${roundTripP99.toFixed(3)} ms, the hop ${hopP99.toFixed(3)} ms;` +
            ` the next grant ${(p99 / roundTripP99).toFixed(1)}x the round trip end to end` +
            (ownClock
              ? `, ${(ownP99 / roundTripP99).toFixed(1)}x on the gateway's clock (${(ownP99 / hopP99).toFixed(1)}x the hop)`
              : '') +
            // A grant is at least one round trip: past the goal, no replica meets it here.
            (roundTripP99 > GOAL_NEXT_GRANT_P99_MS
              ? `; the round trip alone is over ${GOAL_NEXT_GRANT_P99_MS} ms at p99, so this machine cannot show the line`
              : '')
          : ''),
    );
  } finally {
    await probe?.stop().catch(() => {});
    for (const s of [...blockers, ...streams]) s.close();
    await upstream.close();
    await receiver?.close();
    await stopAll();
    await redis.stop();
  }
}

process.once('SIGINT', () => void stopAll().then(() => process.exit(130)));
await main();
