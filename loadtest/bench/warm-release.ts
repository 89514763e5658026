/**
 * Redis's own time in a release that grants the next waiting request, with the script run
 * back to back (one call after another, nothing else between them: warm caches).
 * bench:waiting measures it on its own redis-server after the drain, as the baseline for the
 * same script's time in the drain, where Redis runs it once every few milliseconds on a core
 * it shares.
 *
 * One tenant, budget 2 and `waiting` requests queued on a pool of its own (the bench's shape);
 * then `releases` releases in sequence, each of a granted request, each granting the next.
 * Redis's time comes from `INFO commandstats` (its `usec` of FCALL), as in bench:waiting.
 * The pool's keys are deleted after (a REDIS_URL's server outlives the bench).
 */
import { poolKeys, RedisScheduler } from '@fairgate/scheduler';
import { Redis } from 'ioredis';
import { redisCommandStats } from './proc.js';

const POOL = 'bench-warm-release';

export interface WarmRelease {
  /** Redis's mean µs in one release with its granting pass. */
  readonly fcallMicros: number;
  readonly releases: number;
}

export async function measureWarmRelease(
  url: string,
  { waiting = 2_000, releases = 1_000 } = {},
): Promise<WarmRelease> {
  const scheduler = new RedisScheduler({ pool: POOL, connection: url });
  try {
    await scheduler.configure({
      initialBudget: 2,
      queueTtlMs: 600_000,
      maxQueueDepth: waiting + 2,
      bandCapacity: waiting + 2,
    });
    await scheduler.upsertTenants([{ id: 'warm', queueMax: waiting + 2 }]);
    await scheduler.upsertPods([{ name: 'pod-warm', cap: 1_000_000 }]);
    const granted: string[] = [];
    for (let i = 0; i < waiting + 2; i += 1) {
      const id = `warm-${i}`;
      const result = await scheduler.enqueue({ id, tenant: 'warm', band: 3, replica: 'warm' });
      if (result.status === 'granted') granted.push(id);
    }
    if (granted.length !== 2) throw new Error(`warm release: ${granted.length} granted, not 2`);
    const count = Math.min(releases, waiting);
    const before = (await redisCommandStats(url)).get('fcall');
    for (let i = 0; i < count; i += 1) {
      const usage = { inputTokens: 10, outputTokens: 5 };
      await scheduler.release(granted[i] as string, { outcome: 'completed', usage });
      granted.push(`warm-${i + 2}`);
    }
    const after = (await redisCommandStats(url)).get('fcall');
    const calls = (after?.calls ?? 0) - (before?.calls ?? 0);
    if (calls !== count) throw new Error(`warm release: ${calls} FCALLs for ${count} releases`);
    // Each release granted the next: two still hold the slots, the rest still wait.
    const { inflight, waiting: left } = await scheduler.snapshot();
    if (inflight !== 2 || left !== waiting - count) {
      throw new Error(`warm release: ${inflight} in flight and ${left} waiting after the loop`);
    }
    return { fcallMicros: ((after?.usec ?? 0) - (before?.usec ?? 0)) / calls, releases: count };
  } finally {
    await scheduler.close();
    await deletePool(url);
  }
}

/** Every key of the pool (all under its hash tag). */
async function deletePool(url: string): Promise<void> {
  const client = new Redis(url);
  try {
    for await (const keys of client.scanStream({ match: `${poolKeys(POOL).tag}*`, count: 1_000 })) {
      if ((keys as string[]).length > 0) await client.unlink(...(keys as string[]));
    }
  } finally {
    client.disconnect();
  }
}
