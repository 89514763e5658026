import { type RedisClusterHandle, startRedisCluster } from '@fairgate/testkit';
import type { Cluster } from 'ioredis';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { library } from '../src/generated/scripts.js';
import { createRedisConnection, poolKeys, RedisScheduler } from '../src/index.js';
import { describeSchedulerConformance } from './conformance/index.js';
import { redisBackend, scanAll } from './support/backends.js';
import { requestCycles, sleep } from './support/pool.js';

/**
 * RedisScheduler on a real 3-master Redis Cluster through an ioredis Cluster connection:
 * every call is one FCALL routed by its keys to the master of the pool's slot, and the
 * function library lives on every master.
 */
let cluster: RedisClusterHandle | undefined;
let connection: Cluster | undefined;
const getConnection = (): Cluster => {
  if (!connection) throw new Error('cluster not started');
  return connection;
};
const getCluster = (): RedisClusterHandle => {
  if (!cluster) throw new Error('cluster not started');
  return cluster;
};

beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3 });
  connection = createRedisConnection({
    topology: { kind: 'cluster', nodes: cluster.nodes },
    commandTimeoutMs: 5_000,
  }) as Cluster;
});

afterAll(async () => {
  connection?.disconnect();
  await cluster?.stop();
});

describe('RedisScheduler conformance on a Redis Cluster', () => {
  const backend = redisBackend(getConnection);
  describeSchedulerConformance(() => backend);
});

describe('RedisScheduler on a Redis Cluster', () => {
  const masterOf = (pool: string) => getCluster().masterForKey(poolKeys(pool).config);

  /** Two pool names whose hash tags land on different masters (bounded search). */
  async function poolsOnTwoMasters(prefix: string): Promise<[string, string]> {
    const first = `${prefix}-0`;
    const firstMaster = await masterOf(first);
    for (let i = 1; i < 50; i += 1) {
      const candidate = `${prefix}-${i}`;
      if ((await masterOf(candidate)) !== firstMaster) return [first, candidate];
    }
    throw new Error('no second pool name on another master in 50 tries');
  }

  async function openPool(pool: string): Promise<RedisScheduler> {
    const scheduler = new RedisScheduler({ pool, connection: getConnection() });
    await scheduler.configure({ initialBudget: 1, queueTtlMs: 60_000 });
    await scheduler.upsertTenants([{ id: 'a' }, { id: 'b', weight: 2 }]);
    await scheduler.upsertPods([{ name: 'pod-a', cap: 100 }]);
    return scheduler;
  }

  it('two pools on different masters each run the full request cycle', async () => {
    const pools = await poolsOnTwoMasters('cycle');
    const masters = await Promise.all(pools.map(masterOf));
    expect(masters[0]).not.toBe(masters[1]);

    for (const [index, pool] of pools.entries()) {
      const s = await openPool(pool);
      expect(await s.enqueue({ id: 'x', tenant: 'a', band: 0, replica: 'r1' })).toEqual({
        status: 'granted',
        pod: 'pod-a',
        retried: false,
      });
      expect(await s.enqueue({ id: 'y', tenant: 'b', band: 0, replica: 'r2' })).toEqual({
        status: 'queued',
        retried: false,
      });
      // The blocking wait (its own Cluster connection) wakes when x's release grants y.
      const woken = s.waitForNotices('r2', 5_000);
      expect(await s.release('x', { outcome: 'completed' })).toEqual({ was: 'granted' });
      expect(await woken).toEqual([{ kind: 'grant', id: 'y', pod: 'pod-a' }]);
      expect(await s.poll('r1')).toEqual([]);
      expect(await s.release('y', { outcome: 'completed' })).toEqual({ was: 'granted' });
      const snapshot = await s.snapshot();
      expect([snapshot.inflight, snapshot.waiting]).toEqual([0, 0]);
      expect(snapshot.counters.reduce((sum, c) => sum + c.outcomes.completed, 0)).toBe(2);
      await s.close();

      // Every key of the pool is on its own master, none on the other pool's.
      const own = new Redis(masters[index] as number, '127.0.0.1');
      const other = new Redis(masters[1 - index] as number, '127.0.0.1');
      try {
        expect((await scanAll(own, `${poolKeys(pool).tag}*`)).length).toBeGreaterThan(0);
        expect(await scanAll(other, `${poolKeys(pool).tag}*`)).toEqual([]);
      } finally {
        own.disconnect();
        other.disconnect();
      }
    }
    // The library was loaded on every master, also the one that holds neither pool.
    for (const node of getCluster().nodes) {
      const admin = new Redis(node.port, '127.0.0.1');
      const listed = (await admin.call('FUNCTION', 'LIST', 'LIBRARYNAME', library.name)) as [];
      admin.disconnect();
      expect(listed, `library on ${node.port}`).toHaveLength(1);
    }
  });

  it('FUNCTION FLUSH on every master under load causes zero errors', async () => {
    const pools = await poolsOnTwoMasters('flush');
    const schedulers = await Promise.all(pools.map(openPool));
    for (const s of schedulers) await s.configure({ initialBudget: 4, queueTtlMs: 60_000 });
    const masters = getConnection().nodes('master');
    expect(masters).toHaveLength(3);
    const loadsBefore = await Promise.all(masters.map(functionLoads));
    const errors: unknown[] = [];
    let flushes = 0;
    let lastFlush = -Infinity;
    const worker = (scheduler: RedisScheduler, index: number) =>
      requestCycles(scheduler, index, 300, errors, async (i) => {
        if (index === 0 && i % 100 === 50) {
          // Flushes at least 500 ms apart: a reload waits for every master, and a load of the
          // 64 KB library was seen taking ~200 ms here under parallel test files, so a faster
          // next flush could land between a reload and its retry (two losses within one
          // call, which the runner does not claim to hide).
          await sleep(Math.max(0, lastFlush + 500 - performance.now()));
          await Promise.all(masters.map((master) => master.call('FUNCTION', 'FLUSH')));
          lastFlush = performance.now();
          flushes += 1;
        }
      });
    await Promise.all(schedulers.map(worker));
    expect(flushes).toBe(3);
    expect(errors).toEqual([]);
    // Each flush made every master reload the library; each failed call (at most one per
    // worker per flush) reloaded it at most once.
    const loadsAfter = await Promise.all(masters.map(functionLoads));
    for (const [i, after] of loadsAfter.entries()) {
      const loads = after - (loadsBefore[i] as number);
      expect(loads).toBeGreaterThanOrEqual(flushes);
      expect(loads).toBeLessThanOrEqual(2 * flushes);
    }
    for (const s of schedulers) {
      const snapshot = await s.snapshot();
      expect([snapshot.inflight, snapshot.waiting]).toEqual([0, 0]);
      expect(snapshot.counters.reduce((sum, c) => sum + c.outcomes.completed, 0)).toBe(300);
      await s.close();
    }
  });
});

/** How many FUNCTION LOADs `server` has run (INFO commandstats). */
async function functionLoads(server: Redis): Promise<number> {
  const stats = await server.info('commandstats');
  return Number(/cmdstat_function\|load:calls=(\d+)/.exec(stats)?.[1] ?? 0);
}

it('with every node gone, a call fails within the command timeout', async () => {
  const own = await startRedisCluster({ masters: 3 });
  const bounded = createRedisConnection({
    topology: { kind: 'cluster', nodes: own.nodes },
    commandTimeoutMs: 250,
  }) as Cluster;
  const scheduler = new RedisScheduler({ pool: 'outage', connection: bounded });
  try {
    await scheduler.configure({});
    await own.stop();
    // Once no node answers, the Cluster parks commands in its own offline queue.
    for (let i = 0; i < 100 && bounded.status === 'ready'; i += 1) await sleep(20);
    expect(bounded.status).not.toBe('ready');
    const started = performance.now();
    const outcome = await Promise.race([
      scheduler.snapshot().then(
        () => 'answered',
        (error: Error) => error.message,
      ),
      sleep(2_000).then(() => 'still waiting after 2 s'),
    ]);
    expect(outcome).toBe('Command timed out');
    expect(performance.now() - started).toBeLessThan(1_000);
  } finally {
    await scheduler.close();
    bounded.disconnect();
    await own.stop();
  }
});
