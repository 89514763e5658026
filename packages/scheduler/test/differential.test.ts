import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Divergence, describeDivergence, runSeed } from './differential/runner.js';
import { startClusterCheckedRedis, type TestRedis } from './support/cluster-redis.js';

/**
 * The Lua engine pinned to its TypeScript mirror: seeded random operation sequences run on
 * RedisScheduler and LocalScheduler on one test clock, every result compared, snapshots every
 * SNAPSHOT_EVERY operations. Replay one seed: DIFF_SEED=<seed> (DIFF_LOG=all for the whole
 * log); DIFF_SEEDS / DIFF_OPS / DIFF_FIRST_SEED / DIFF_SNAPSHOT_EVERY change the sweep.
 */
const envInt = (name: string, fallback: number) => {
  const value = process.env[name];
  return value === undefined || value === '' ? fallback : Number.parseInt(value, 10);
};
const replaySeed = process.env.DIFF_SEED;
const FIRST_SEED = replaySeed ? Number.parseInt(replaySeed, 10) : envInt('DIFF_FIRST_SEED', 1);
/**
 * `npm test` sweeps 50 seeds (~20 s on a 2-core VM): every answer in REACHED occurs in them.
 * `npm run test:differential` sweeps 200 (the sweep to run after changing either engine).
 */
const SEEDS = replaySeed ? 1 : envInt('DIFF_SEEDS', 50);
const OPERATIONS = envInt('DIFF_OPS', 2_000);
const SNAPSHOT_EVERY = envInt('DIFF_SNAPSHOT_EVERY', 100);
/** Seeds in flight at once, each on its own pool and connection: Redis works while Node does. */
const CONCURRENCY = 12;
/**
 * A sweep takes ~0.2-0.3 ms an operation on a 2-core VM (200 seeds x 2,000: 80-120 s): a
 * larger DIFF_SEEDS / DIFF_OPS gets time in proportion (0.6 ms an operation), never less
 * than 300 s.
 */
const TIMEOUT_MS = Math.max(300_000, Math.ceil(SEEDS * OPERATIONS * 0.6));

/** Answers every full sweep must have produced at least once. */
const REACHED = [
  'enqueue:granted',
  'enqueue:queued',
  'enqueue:granted:retried',
  'enqueue:rejected:tenant_queue_full',
  'enqueue:rejected:rate_limited',
  'enqueue:rejected:rate_limited:requests',
  'enqueue:rejected:budget_exhausted:tokens',
  'notice:grant',
  'notice:expired',
  'notice:evict',
  'notice:shed',
  'release:granted',
  'release:predicted',
  'cancel:queued',
  'heartbeat:lost',
  'handover:uncontended',
  'handover:contended',
  'handover:refused',
  'handover:limited',
];

let redis: TestRedis | undefined;

beforeAll(async () => {
  redis = await startClusterCheckedRedis();
});

afterAll(async () => {
  await redis?.stop();
});

describe('differential: RedisScheduler against LocalScheduler', () => {
  it(
    `${SEEDS} seeds x ${OPERATIONS} operations give the same results and snapshots`,
    async () => {
      const redisUrl = (redis as TestRedis).handle.url;
      const divergences: Divergence[] = [];
      const tally = new Map<string, number>();
      let nextSeed = FIRST_SEED;
      const lastSeed = FIRST_SEED + SEEDS - 1;
      const worker = async () => {
        while (nextSeed <= lastSeed) {
          const seed = nextSeed;
          nextSeed += 1;
          const divergence = await runSeed({
            seed,
            operations: OPERATIONS,
            snapshotEvery: SNAPSHOT_EVERY,
            redisUrl,
            tally,
          });
          if (divergence) divergences.push(divergence);
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, worker));
      divergences.sort((a, b) => a.seed - b.seed);
      const report = divergences.map((d) => describeDivergence(d)).slice(0, 3);
      if (divergences.length > 0) {
        report.unshift(
          `${divergences.length} of ${SEEDS} seeds diverged: ${divergences.map((d) => d.seed).join(', ')}`,
        );
      }
      // Thrown rather than compared with expect, so the report prints as written.
      if (divergences.length > 0) throw new Error(report.join('\n\n'));
      if (process.env.DIFF_TALLY)
        console.log(
          [...tally]
            .sort()
            .map(([k, n]) => `${k} ${n}`)
            .join('\n'),
        );
      // The sweep must reach what it claims to compare (a vacuous generator would pass).
      if (!replaySeed) {
        for (const kind of REACHED) expect(tally.get(kind) ?? 0, kind).toBeGreaterThan(0);
      }
    },
    TIMEOUT_MS,
  );
});
