import { type RedisSentinelHandle, startRedisSentinel } from '@fairgate/testkit';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { createRedisConnection, RedisScheduler, SchedulerError, ScriptCode } from '../src/index.js';
import { sleep } from './support/pool.js';

/**
 * RedisScheduler on a Sentinel-managed primary (1 primary, 1 replica, 3 sentinels, down-after
 * 1 s), with the gateway's connection settings (createRedisConnection, 250 ms command
 * timeout): after the primary dies or stalls and the sentinels promote the replica, the
 * scheduler serves again by itself, within a measured bound. Each test gets its own setup:
 * after a failover there is no replica left to promote.
 */
let setup: RedisSentinelHandle | undefined;

beforeEach(async () => {
  setup = await startRedisSentinel({ downAfterMs: 1_000 });
});

afterEach(async () => {
  await setup?.stop();
  setup = undefined;
});

it('serves again within down-after + 3 s after the primary is killed', async () => {
  const sentinel = setup as RedisSentinelHandle;
  await failover(sentinel, () => sentinel.killPrimary(), sentinel.downAfterMs + 3_000);
}, 40_000);

// A stalled primary keeps its connections open: only the sentinels' +switch-master moves
// the client (failoverDetector). The sentinels also see the stall up to one ping period
// (1 s) later than a refused connection, hence one second more.
it('serves again within down-after + 4 s after the primary stalls (SIGSTOP)', async () => {
  const sentinel = setup as RedisSentinelHandle;
  await failover(sentinel, () => sentinel.pausePrimary(), sentinel.downAfterMs + 4_000);
}, 40_000);

async function failover(
  sentinel: RedisSentinelHandle,
  outage: () => Promise<void>,
  boundMs: number,
): Promise<void> {
  const connection = createRedisConnection({
    topology: { kind: 'sentinel', sentinels: sentinel.sentinels, name: sentinel.name },
    commandTimeoutMs: 250,
  }) as Redis;
  const scheduler = new RedisScheduler({ pool: 'sentinel', connection });
  // What the gateway's self-healing does when the promoted replica missed the last writes.
  const setupPool = async () => {
    await scheduler.configure({ initialBudget: 10, queueTtlMs: 60_000 });
    await scheduler.upsertTenants([{ id: 't' }]);
    await scheduler.upsertPods([{ name: 'pod-a', cap: 100 }]);
  };
  try {
    await setupPool();
    const first = await scheduler.enqueue({ id: 'before', tenant: 't', band: 0, replica: 'r1' });
    expect(first).toMatchObject({ status: 'granted' });
    await scheduler.release('before', { outcome: 'completed' });
    expect(await scheduler.waitForNotices('r1', 50)).toEqual([]); // opens the blocking connection
    const oldPrimary = sentinel.primaryPort();

    // A blocking wait in flight when the primary goes away settles (answer or error).
    const waiting = scheduler.waitForNotices('r1', 1_000).then(
      () => 'answered',
      () => 'failed',
    );
    await outage();
    const outageAt = performance.now();

    let attempts = 0;
    let reconfigured = 0;
    const errors = new Set<string>();
    for (;;) {
      attempts += 1;
      if (performance.now() - outageAt > 15_000) {
        throw new Error(`not serving 15 s after the outage; errors: ${[...errors].join(' | ')}`);
      }
      try {
        const id = `after-${attempts}`;
        const result = await scheduler.enqueue({ id, tenant: 't', band: 0, replica: 'r1' });
        expect(result).toMatchObject({ status: 'granted' });
        await scheduler.release(id, { outcome: 'completed' });
        break;
      } catch (error) {
        const code = error instanceof SchedulerError ? error.code : undefined;
        if (code === ScriptCode.NotConfigured || code === ScriptCode.UnknownTenant) {
          reconfigured += 1;
          await setupPool().catch(() => {});
          continue;
        }
        errors.add((error as Error).message);
        await sleep(50);
      }
    }
    const recoveredMs = performance.now() - outageAt;
    // A call that timed out on the client may still have run on the new primary (ioredis
    // sends a command queued while reconnecting even after its timeout fired): end those
    // orphans as lease expiry would, so they hold no budget.
    let orphans = 0;
    for (let i = 1; i < attempts; i += 1) {
      if ((await scheduler.cancel(`after-${i}`)).was !== 'unknown') orphans += 1;
    }
    const promoted = await sentinel.waitForFailover(5_000);
    console.log(
      `primary ${oldPrimary} gone; serving on ${promoted} after ${Math.round(recoveredMs)} ms ` +
        `(bound ${boundMs} ms), ${attempts} attempts (${orphans} ran unseen), ` +
        `${reconfigured} reconfigures; errors meanwhile: ${[...errors].join(' | ')}`,
    );
    expect(promoted).not.toBe(oldPrimary);
    expect(await connection.config('GET', 'port')).toEqual(['port', String(promoted)]);
    expect(recoveredMs).toBeLessThan(boundMs);
    expect(await Promise.race([waiting, sleep(5_000).then(() => 'pending')])).not.toBe('pending');

    // The blocking connection (opened before the outage) follows the failover too: with the
    // budget of 10 taken, a wait wakes when a release grants the queued request.
    const held = Array.from({ length: 10 }, (_, i) => `g${i}`);
    for (const id of held) {
      const result = await scheduler.enqueue({ id, tenant: 't', band: 0, replica: 'r2' });
      expect(result).toMatchObject({ status: 'granted' });
    }
    const queued = await scheduler.enqueue({ id: 'q', tenant: 't', band: 0, replica: 'r2' });
    expect(queued).toMatchObject({ status: 'queued' });
    const woken = waitUntilNotice(scheduler, 'r2');
    await scheduler.release('g0', { outcome: 'completed' });
    expect(await woken).toEqual([{ kind: 'grant', id: 'q', pod: 'pod-a' }]);
    for (const id of [...held.slice(1), 'q']) await scheduler.release(id, { outcome: 'completed' });
    expect((await scheduler.snapshot()).inflight).toBe(0);
  } finally {
    await scheduler.close();
    connection.disconnect();
  }
}

/** waitForNotices until something arrives (at most 5 waits of 1 s). */
async function waitUntilNotice(scheduler: RedisScheduler, replica: string) {
  for (let i = 0; i < 5; i += 1) {
    const notices = await scheduler.waitForNotices(replica, 1_000).catch(() => []);
    if (notices.length > 0) return notices;
  }
  return [];
}
