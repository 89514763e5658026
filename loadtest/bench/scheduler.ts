/**
 * Scheduler benchmark: RedisScheduler on a private redis-server, each result next to its goal
 * and ratios against baselines measured in the same run.
 *
 *   npm run bench:scheduler -w @fairgate/loadtest
 *
 * 1. enqueue+release pairs/s, every request granted at once (goal >= 10,000/s); 2. p50/p99 of
 * such an enqueue; 3. Redis calls per request (goal 2); 4. a dispatch with 10,000 idle tenants
 * and with 10,000 waiting against ~400 waiting (goal: within 20%); 5. a dispatch's Redis time
 * with prefix scoring on vs off, 64 blocks over 4 pods (goal <= 1.5x), and with both signals
 * (prefix scoring with every request for a LoRA adapter two of the pods hold, and its release
 * reporting the pod's cached blocks) vs prefix scoring alone (goal <= 1.2x); 6. the prefix index
 * after PREFIX_DISTINCT (1,000,000; 0 skips it) distinct prefixes, at most
 * PREFIX_INDEX_SECONDS (300): entries and MEMORY USAGE against the configured bound; 7. a
 * dispatch's Redis time with fairness in tokens against fairness in requests, the same short
 * and long requests released with their usage (goal <= 1.2x).
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { RedisScheduler } from '@fairgate/scheduler';
import { startRedis } from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { commandDelta as delta, redisCommandStats } from './harness/proc.js';
import { fmt, median, quantile } from './harness/report.js';
import { envNumber, runBench } from './harness/stack.js';

const PAIRS_SECONDS = 5;
const PAIRS_MAX = 200_000;
const CONNECTIONS = 2;
const WORKERS_PER_CONNECTION = 64;
const LATENCY_SAMPLES = 3_000;
const CALL_COUNT_PAIRS = 2_000;
const ACTIVE_TENANTS = 10;
const IDLE_TENANTS = 10_000;
/** Requests waiting in the deep pool's queues (spread over the active tenants). */
const DEEP_QUEUED = 10_000;
const DISPATCH_ROUNDS = 5;
const DISPATCHES_PER_ROUND = 1_000;
const PREFIX_BLOCKS = 64;
const PREFIX_DISTINCT = envNumber('PREFIX_DISTINCT', 1_000_000);
const PREFIX_INDEX_SECONDS = envNumber('PREFIX_INDEX_SECONDS', 300);
const PREFIX_ENTRIES_PER_POD = 65_536;
/** LoRA adapters of the both-signals pool (section 5): each held by two of its 4 pods. */
const ADAPTERS = 4;
/** Of its releases, every MISS_EVERY-th reports no cached blocks: a miss the index corrects. */
const MISS_EVERY = 16;

const redisHandle = await startRedis();
const url = redisHandle.url;
const admin = new Redis(url);
const opened: RedisScheduler[] = [];
const connections: Redis[] = [admin];

/** A connection that pipelines whatever is issued in the same tick (several workers share it). */
function pipelinedConnection(): Redis {
  const connection = new Redis(url, { enableAutoPipelining: true });
  connections.push(connection);
  return connection;
}

function open(pool: string, connection: Redis | string = url): RedisScheduler {
  const scheduler = new RedisScheduler({ pool, connection });
  opened.push(scheduler);
  return scheduler;
}

async function preparePool(
  scheduler: RedisScheduler,
  budget: number,
  tenants: number,
  settings: {
    queueTtlMs?: number;
    prefix?: boolean;
    pods?: number;
    queueDepth?: number;
    fairnessUnit?: 'requests' | 'tokens';
    /** Pod i holds adapters lora-i and lora-(i+1) of ADAPTERS: each on two pods. */
    adapters?: boolean;
  } = {},
): Promise<string[]> {
  const depth = settings.queueDepth; // room for that many waiting in the pool and one tenant
  await scheduler.configure({
    initialBudget: budget,
    queueTtlMs: settings.queueTtlMs ?? 60_000,
    prefix: { enabled: settings.prefix ?? false, entriesPerPod: PREFIX_ENTRIES_PER_POD },
    ...(settings.fairnessUnit ? { fairnessUnit: settings.fairnessUnit } : {}),
    ...(depth ? { maxQueueDepth: depth, bandCapacity: depth } : {}),
  });
  const ids = Array.from({ length: tenants }, (_, i) => `tenant-${i}`);
  for (let i = 0; i < ids.length; i += 500) {
    await scheduler.upsertTenants(
      ids.slice(i, i + 500).map((id) => (depth ? { id, queueMax: depth } : { id })),
    );
  }
  const pods = settings.pods ?? 2;
  await scheduler.upsertPods(
    Array.from({ length: pods }, (_, i) => ({ name: `pod-${i}`, cap: 1_000_000 })),
  );
  if (settings.adapters) {
    await scheduler.reportPodAdapters(
      Array.from({ length: pods }, (_, i) => ({
        pod: `pod-${i}`,
        adapters: [`lora-${i % ADAPTERS}`, `lora-${(i + 1) % ADAPTERS}`],
        slots: 2,
      })),
      0,
    );
  }
  return ids;
}

const commandStats = () => redisCommandStats(url);
const report = (line: string) => console.log(line);

/**
 * Enqueue + release pairs, every one granted at once, from CONNECTIONS pipelined connections
 * with WORKERS_PER_CONNECTION each in flight, until `max` pairs or `seconds`; `prefix` gives
 * the n-th request its block hashes. Returns the pairs made and the seconds they took.
 */
async function grantedPairs(
  pool: string,
  max: number,
  seconds: number,
  settings: { prefix?: boolean; pods?: number } = {},
  prefix?: (n: number) => string[],
): Promise<{ done: number; seconds: number }> {
  const schedulers = Array.from({ length: CONNECTIONS }, () => open(pool, pipelinedConnection()));
  const tenants = await preparePool(schedulers[0]!, 1_000_000, 16, settings);
  let serial = 0;
  let done = 0;
  const started = performance.now();
  const deadline = started + seconds * 1_000;
  const worker = async (scheduler: RedisScheduler, replica: string) => {
    while (serial < max && performance.now() < deadline) {
      const n = ++serial;
      const id = `${pool}-${n}`;
      const tenant = tenants[n % tenants.length]!;
      const request = { id, tenant, band: 3, replica, ...(prefix ? { prefix: prefix(n) } : {}) };
      const result = await scheduler.enqueue(request);
      if (result.status !== 'granted') throw new Error(`${pool}: ${result.status}, not granted`);
      await scheduler.release(id, { outcome: 'completed' });
      done++;
    }
  };
  await Promise.all(
    schedulers.flatMap((scheduler, c) =>
      Array.from({ length: WORKERS_PER_CONNECTION }, () => worker(scheduler, `bench-${c}`)),
    ),
  );
  return { done, seconds: (performance.now() - started) / 1_000 };
}

// 2. Latency of an enqueue granted at once ------------------------------------------------
async function grantLatency(): Promise<{ p50: number; p99: number }> {
  const scheduler = open('latency');
  const tenants = await preparePool(scheduler, 1_000_000, 4);
  const samples: number[] = [];
  for (let i = 0; i < LATENCY_SAMPLES + 200; i += 1) {
    const id = `l${i}`;
    const started = performance.now();
    const result = await scheduler.enqueue({ id, tenant: tenants[i % 4]!, band: 3, replica: 'l' });
    const elapsed = performance.now() - started;
    if (result.status !== 'granted') throw new Error('latency run: expected a grant');
    if (i >= 200) samples.push(elapsed);
    await scheduler.release(id, { outcome: 'completed' });
  }
  samples.sort((a, b) => a - b);
  return { p50: quantile(samples, 0.5), p99: quantile(samples, 0.99) };
}

// 3. Redis calls per unqueued request -----------------------------------------------------
async function callsPerRequest(): Promise<{ clientCalls: number; scriptCommands: number }> {
  const scheduler = open('calls');
  await preparePool(scheduler, 1_000_000, 4);
  await scheduler.enqueue({ id: 'warm', tenant: 'tenant-0', band: 3, replica: 'calls' });
  await scheduler.release('warm', { outcome: 'completed' });
  const before = await commandStats();
  for (let i = 0; i < CALL_COUNT_PAIRS; i += 1) {
    await scheduler.enqueue({ id: `c${i}`, tenant: 'tenant-0', band: 3, replica: 'calls' });
    await scheduler.release(`c${i}`, { outcome: 'completed' });
  }
  const after = await commandStats();
  let scripts = 0;
  let inside = 0;
  for (const name of new Set([...after.keys(), ...before.keys()])) {
    const calls = delta(before, after, name).calls;
    // The engine runs as Redis functions (FCALL); INFO also counts the commands they run.
    if (name === 'fcall' || name === 'fcall_ro') scripts += calls;
    else if (name !== 'info' && !name.startsWith('function')) inside += calls;
  }
  return { clientCalls: scripts / CALL_COUNT_PAIRS, scriptCommands: inside / CALL_COUNT_PAIRS };
}

// 4. Dispatch rate: idle tenants cost nothing ---------------------------------------------
interface DispatchPool {
  name: string;
  scheduler: RedisScheduler;
  held: string[];
  tenantOf: Map<string, string>;
  serial: number;
  /** Requests carry PREFIX_BLOCKS block hashes (8 conversations, each request its own tail). */
  prefix: boolean;
  /**
   * Both signals (section 5): requests also name an adapter, and releases report the pod's
   * cached blocks (the conversation's shared blocks; none every MISS_EVERY-th).
   */
  signals: boolean;
  /**
   * Requests carry sizes (even tenants 200 in / 20 out, odd ones 2,000 / 300) and are
   * released with that usage (section 7).
   */
  sized: boolean;
}

const SIZES = [
  { inputTokens: 200, maxTokens: 20 },
  { inputTokens: 2_000, maxTokens: 300 },
] as const;
const sizeOf = (tenant: string) => SIZES[Number(tenant.slice('tenant-'.length)) % 2]!;

/** Requests each active tenant enqueues before a dispatch round: ~400 wait in the pool. */
const QUEUED_PER_TENANT = 40;

async function dispatchPool(
  name: string,
  idle: number,
  prefix?: { enabled: boolean; signals?: boolean },
  queuedPerTenant = QUEUED_PER_TENANT,
  fairnessUnit?: 'requests' | 'tokens',
): Promise<DispatchPool> {
  const scheduler = open(name, pipelinedConnection());
  const budget = 8;
  // A deeper queue than the defaults admit gets the room, and waits through every round
  // with no expiry on the way.
  const deep = queuedPerTenant > QUEUED_PER_TENANT;
  const tenants = await preparePool(scheduler, budget, ACTIVE_TENANTS + idle, {
    ...(prefix ? { prefix: prefix.enabled, pods: 4, adapters: !!prefix.signals } : {}),
    ...(deep ? { queueDepth: ACTIVE_TENANTS * queuedPerTenant * 2, queueTtlMs: 600_000 } : {}),
    ...(fairnessUnit ? { fairnessUnit } : {}),
  });
  // Idle tenants have a history (a request came and went) but nothing waiting now.
  const idleIds = tenants.slice(ACTIVE_TENANTS);
  for (let i = 0; i < idleIds.length; i += 1_000) {
    await Promise.all(
      idleIds.slice(i, i + 1_000).map(async (tenant) => {
        await scheduler.enqueue({ id: `idle-${tenant}`, tenant, band: 3, replica: 'warmup' });
        await scheduler.release(`idle-${tenant}`, { outcome: 'completed' });
      }),
    );
  }
  const pool = {
    name,
    scheduler,
    held: [],
    tenantOf: new Map(),
    serial: 0,
    prefix: !!prefix,
    signals: !!prefix?.signals,
    sized: !!fairnessUnit,
  };
  for (let round = 0; round < queuedPerTenant; round += 1) {
    await Promise.all(tenants.slice(0, ACTIVE_TENANTS).map((tenant) => enqueueFor(pool, tenant)));
  }
  if (pool.held.length !== budget) throw new Error(`${name}: expected ${budget} initial grants`);
  return pool;
}

async function enqueueFor(pool: DispatchPool, tenant: string): Promise<void> {
  pool.serial += 1;
  const id = `${tenant}-${pool.serial}`;
  pool.tenantOf.set(id, tenant);
  const blocks = pool.prefix ? { prefix: promptBlocks(pool.serial % 8, pool.serial) } : {};
  const size = pool.sized ? sizeOf(tenant) : {};
  const adapter = pool.signals ? { adapter: `lora-${pool.serial % ADAPTERS}` } : {};
  const request = { id, tenant, band: 3, replica: 'disp', ...blocks, ...size, ...adapter };
  const result = await pool.scheduler.enqueue(request);
  if (result.status === 'granted') pool.held.push(id);
}

/**
 * Block hashes of a request in conversation `family`: the family's shared first three
 * quarters (a system prompt), then blocks of its own (`serial`).
 */
function promptBlocks(family: number, serial: number): string[] {
  const shared = Math.floor((PREFIX_BLOCKS * 3) / 4);
  return Array.from(
    { length: PREFIX_BLOCKS },
    (_, i) => `${i < shared ? `f${family}` : `s${serial}`}b${i}`,
  );
}

/** The prefix index after PREFIX_DISTINCT requests, each its own prefix from the first block. */
async function prefixIndexBound() {
  const pods = 4;
  const run = await grantedPairs(
    'prefix-index',
    PREFIX_DISTINCT,
    PREFIX_INDEX_SECONDS,
    { prefix: true, pods },
    (n) => Array.from({ length: 16 }, (_, i) => `u${n}b${i}`),
  );
  let entries = 0;
  let bytes = 0;
  for (let pod = 0; pod < pods; pod += 1) {
    for (const generation of ['pxc', 'pxo']) {
      const key = `{fg:prefix-index}:${generation}:pod-${pod}`;
      entries += await admin.scard(key);
      bytes += Number((await admin.memory('USAGE', key, 'SAMPLES', '0')) ?? 0);
    }
  }
  const bound = pods * (PREFIX_ENTRIES_PER_POD + 16);
  return { distinct: run.done, entries, bound, bytes, seconds: run.seconds };
}

/** Frees one slot at a time; each release runs the dispatch pass that grants the next. */
async function dispatchRound(pool: DispatchPool) {
  const before = await commandStats();
  const started = performance.now();
  for (let made = 0; made < DISPATCHES_PER_ROUND; made += 1) {
    const done = pool.held.shift() as string;
    const size = sizeOf(pool.tenantOf.get(done) ?? 'tenant-0');
    const cached = made % MISS_EVERY === 0 ? 0 : Math.floor((PREFIX_BLOCKS * 3) / 4);
    await pool.scheduler.release(done, {
      outcome: 'completed',
      ...(pool.sized
        ? { usage: { inputTokens: size.inputTokens, outputTokens: size.maxTokens } }
        : {}),
      ...(pool.signals ? { prefixCachedBlocks: cached } : {}),
    });
    pool.tenantOf.delete(done);
    const notices = await pool.scheduler.poll('disp');
    const granted = notices[0];
    if (notices.length !== 1 || granted?.kind !== 'grant') throw new Error('expected one grant');
    pool.held.push(granted.id);
    await enqueueFor(pool, pool.tenantOf.get(granted.id) as string);
  }
  const perSecond = (DISPATCHES_PER_ROUND * 1000) / (performance.now() - started);
  const fcall = delta(before, await commandStats(), 'fcall');
  return { perSecond, redisUsecPerDispatch: fcall.usec / DISPATCHES_PER_ROUND };
}

const load = () =>
  loadavg()
    .map((n) => n.toFixed(2))
    .join(' ');

/** 1-3: pairs per second, the latency of a grant, Redis calls per request. */
async function reportUnqueued(): Promise<void> {
  const run = await grantedPairs('pairs', PAIRS_MAX, PAIRS_SECONDS);
  const pairs = run.done / run.seconds;
  report(
    `enqueue+release pairs/s      ${fmt(pairs)}  (${CONNECTIONS} connections x ${WORKERS_PER_CONNECTION} in flight; goal >= 10,000, ratio ${fmt(pairs / 10_000, 2)})`,
  );
  const latency = await grantLatency();
  report(
    `granted-at-once enqueue      p50 ${fmt(latency.p50 * 1000)} us  p99 ${fmt(latency.p99 * 1000)} us  (sequential, one connection)`,
  );
  const calls = await callsPerRequest();
  report(
    `Redis calls per request      ${fmt(calls.clientCalls, 2)}  (goal 2: enqueue + release; commands run inside the two scripts: ${fmt(calls.scriptCommands, 1)})`,
  );
}

/** Rounds of `dispatchRound` over `pools`, alternating, so background load hits each alike. */
async function alternate<K extends string>(pools: Record<K, DispatchPool>) {
  const rates = {} as Record<K, number[]>;
  const costs = {} as Record<K, number[]>;
  const keys = Object.keys(pools) as K[];
  for (const key of keys) [rates[key], costs[key]] = [[], []];
  for (let round = 0; round < DISPATCH_ROUNDS; round += 1) {
    for (const key of keys) {
      const result = await dispatchRound(pools[key]);
      rates[key].push(result.perSecond);
      costs[key].push(result.redisUsecPerDispatch);
    }
  }
  return { rate: (key: K) => median(rates[key]), cost: (key: K) => median(costs[key]) };
}

/** 4: the dispatch rate with idle tenants and a deep queue against the baseline. */
async function reportDispatch(): Promise<void> {
  const { rate, cost } = await alternate({
    baseline: await dispatchPool('dispatch-10', 0),
    crowded: await dispatchPool('dispatch-10k', IDLE_TENANTS),
    deep: await dispatchPool('dispatch-deep', 0, undefined, DEEP_QUEUED / ACTIVE_TENANTS),
  });
  report(
    `dispatch rate, 10 tenants    ${fmt(rate('baseline'))} dispatches/s, ${fmt(cost('baseline'), 1)} us Redis time per dispatch  (baseline: ~${fmt(ACTIVE_TENANTS * QUEUED_PER_TENANT)} waiting; release + poll + enqueue each, sequential)`,
  );
  for (const [key, label] of [
    ['crowded', 'dispatch rate, +10,000 idle '],
    ['deep', 'dispatch rate, 10,000 wait  '],
  ] as const) {
    report(
      `${label} ${fmt(rate(key))} dispatches/s, ${fmt(cost(key), 1)} us Redis time per dispatch  (rate ratio ${fmt(rate(key) / rate('baseline'), 3)}, Redis-time ratio ${fmt(cost(key) / cost('baseline'), 3)}; goal 0.80-1.20)`,
    );
  }
}

/** 7: a dispatch with fairness in tokens against fairness in requests. */
async function reportTokenUnit(): Promise<void> {
  const { rate, cost } = await alternate({
    requests: await dispatchPool('dispatch-unit-req', 0, undefined, QUEUED_PER_TENANT, 'requests'),
    tokens: await dispatchPool('dispatch-unit-tok', 0, undefined, QUEUED_PER_TENANT, 'tokens'),
  });
  report(
    `dispatch, fairness in tokens ${fmt(cost('tokens'), 1)} us Redis time per dispatch, ${fmt(cost('requests'), 1)} us in requests  (short and long requests released with usage; ratio ${fmt(cost('tokens') / cost('requests'), 3)}, goal <= 1.2; rate ${fmt(rate('tokens'))} vs ${fmt(rate('requests'))} dispatches/s)`,
  );
}

/** 5-6: prefix scoring's cost per dispatch, and the prefix index's bound. */
async function reportPrefix(): Promise<void> {
  const { cost } = await alternate({
    off: await dispatchPool('dispatch-px-off', 0, { enabled: false }),
    on: await dispatchPool('dispatch-px-on', 0, { enabled: true }),
    both: await dispatchPool('dispatch-px-both', 0, { enabled: true, signals: true }),
  });
  report(
    `dispatch with prefix scoring ${fmt(cost('on'), 1)} us Redis time per dispatch, ${fmt(cost('off'), 1)} us without  (${PREFIX_BLOCKS} blocks, 4 pods; ratio ${fmt(cost('on') / cost('off'), 3)}; goal <= 1.5)`,
  );
  report(
    `dispatch with both signals ${fmt(cost('both'), 1)} us Redis time per dispatch, ${fmt(cost('on'), 1)} us with prefix scoring alone  (each request for one of ${ADAPTERS} adapters held by 2 of the 4 pods, each release reporting its cached blocks, 1 in ${MISS_EVERY} a miss; ratio ${fmt(cost('both') / cost('on'), 3)}; goal <= 1.2)`,
  );
  if (PREFIX_DISTINCT <= 0 || PREFIX_INDEX_SECONDS <= 0) return;
  const index = await prefixIndexBound();
  report(
    `prefix index after ${fmt(index.distinct)} distinct prefixes (16 blocks each, ${fmt(index.seconds, 0)} s): ${fmt(index.entries)} entries of at most ${fmt(index.bound)} (4 pods x ${fmt(PREFIX_ENTRIES_PER_POD)} + one request's blocks each), ${fmt(index.bytes / 1_048_576, 1)} MiB by MEMORY USAGE (${fmt(index.bytes / Math.max(1, index.entries), 1)} bytes per entry; ratio to the bound ${fmt(index.entries / index.bound, 3)})`,
  );
}

await runBench(
  async () => {
    console.log(`scheduler benchmark: redis-server ${url}`);
    console.log(`machine load average at start: ${load()} (2 cores shared with other work)\n`);
    await reportUnqueued();
    await reportDispatch();
    await reportTokenUnit();
    await reportPrefix();
    console.log(`\nmachine load average at end: ${load()}`);
  },
  async () => {
    await Promise.all(opened.map((scheduler) => scheduler.close().catch(() => {})));
    for (const connection of connections) connection.disconnect();
    await redisHandle.stop();
  },
);
