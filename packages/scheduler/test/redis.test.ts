import { RejectCode } from '@fairgate/core';
import { waitUntil } from '@fairgate/testkit';
import { Command, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { poolKeys, QUIET_MS, RedisScheduler } from '../src/index.js';
import { describeSchedulerConformance } from './conformance/index.js';
import { redisBackend, scanAll } from './support/backends.js';
import { startClusterCheckedRedis, type TestRedis } from './support/cluster-redis.js';
import { keySlot } from './support/keyslot.js';
import { requestCycles, sleep } from './support/pool.js';

/** A script that holds Redis for 200 ms (the commands behind it wait). */
const SPIN_200_MS = `local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= 200000
return 1`;

let redis: TestRedis | undefined;
const getRedis = (): TestRedis => {
  if (!redis) throw new Error('redis-server not started');
  return redis;
};

beforeAll(async () => {
  redis = await startClusterCheckedRedis();
});

afterAll(async () => {
  await redis?.stop();
});

/**
 * The notices `scheduler` delivers to `replica` through its blocking wait (the gateway's
 * way), as `kind|id`, until `stop()`.
 */
function blockingWait(scheduler: RedisScheduler, replica: string) {
  const delivered: string[] = [];
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const notices = await scheduler.waitForNotices(replica, 200).catch(() => []);
      delivered.push(...notices.map((notice) => `${notice.kind}|${notice.id}`));
    }
  })();
  return {
    delivered,
    /** Until `notice` has been delivered (at most 5 s). */
    until: (notice: string) =>
      waitUntil(`${notice} delivered`, async () => delivered.includes(notice), {
        timeoutMs: 5_000,
        intervalMs: 5,
      }),
    stop: async () => {
      stopped = true;
      await loop;
    },
  };
}

describe('RedisScheduler conformance', () => {
  const backend = redisBackend(() => getRedis().handle.url);
  describeSchedulerConformance(() => backend);
});

describe('RedisScheduler on Redis', () => {
  let admin: Redis;
  beforeAll(() => {
    admin = new Redis(getRedis().handle.url);
  });
  afterAll(() => {
    admin.disconnect();
  });

  async function openPool(pool: string, replicas: number) {
    const schedulers = Array.from(
      { length: replicas },
      () => new RedisScheduler({ pool, connection: getRedis().handle.url }),
    );
    const first = schedulers[0] as RedisScheduler;
    await first.configure({ initialBudget: 4, queueTtlMs: 60_000 });
    await first.upsertTenants([{ id: 'a' }, { id: 'b', weight: 2 }]);
    await first.upsertPods([{ name: 'pod-a', cap: 100 }]);
    return schedulers;
  }

  it('FUNCTION FLUSH (a restart without persistence) in the middle of a run causes zero errors', async () => {
    const schedulers = await openPool('flush', 2);
    const errors: unknown[] = [];
    let flushes = 0;
    const worker = (scheduler: RedisScheduler, index: number) =>
      requestCycles(scheduler, index, 400, errors, async (i) => {
        if (index === 0 && i % 100 === 50) {
          await admin.call('FUNCTION', 'FLUSH');
          flushes += 1;
        }
      });
    await Promise.all(schedulers.map(worker));
    expect(flushes).toBe(4);
    expect(errors).toEqual([]);
    const snapshot = await (schedulers[0] as RedisScheduler).snapshot();
    expect([snapshot.inflight, snapshot.waiting]).toEqual([0, 0]);
    expect(snapshot.counters.reduce((sum, c) => sum + c.outcomes.completed, 0)).toBe(800);
    await Promise.all(schedulers.map((s) => s.close()));
  });

  it('a release made while the library loads reaches Redis after the handover it follows', async () => {
    // Slot recycling after a flush: the handover that registers `r` in `p`'s slot is refused
    // for the missing library, and `r` ends on its pod while the library loads. Its release
    // must run after the handover's retry; before it, it would be a no-op and the retry
    // would register `r` for good (a slot held until its lease expired).
    const [scheduler] = await openPool('flush-order', 1);
    const s = scheduler as RedisScheduler;
    expect((await s.enqueue({ id: 'p', tenant: 'a', band: 0, replica: 'r1' })).status).toBe(
      'granted',
    );
    await admin.call('FUNCTION', 'FLUSH');
    const connection = (s as unknown as { redis: Redis }).redis;
    const original = connection.sendCommand.bind(connection);
    let released: Promise<unknown> | undefined;
    connection.sendCommand = ((command: Command, stream?: Parameters<Redis['sendCommand']>[1]) => {
      if (released || command.name.toLowerCase() !== 'function') return original(command, stream);
      // The load is written behind a 200 ms script, so its reply comes late; `r` ends now.
      void original(new Command('eval', [SPIN_200_MS, 0]));
      const loaded = original(command, stream);
      released = s.release('r', { outcome: 'completed' });
      return loaded;
    }) as Redis['sendCommand'];
    const handedOver = await s.handover(
      'p',
      { outcome: 'completed' },
      { id: 'r', tenant: 'a', band: 0, replica: 'r1' },
    );
    await released;
    connection.sendCommand = original;
    expect(handedOver).toMatchObject({ handedOver: true });
    const snapshot = await s.snapshot();
    expect([snapshot.inflight, snapshot.waiting]).toEqual([0, 0]);
    expect(snapshot.counters.reduce((sum, c) => sum + c.outcomes.completed, 0)).toBe(2);
    await s.close();
  });

  it('an unqueued request costs two Redis calls: enqueue and release', async () => {
    const [scheduler] = await openPool('calls', 1);
    const s = scheduler as RedisScheduler;
    await s.enqueue({ id: 'warm', tenant: 'a', band: 0, replica: 'r1' });
    await s.release('warm', { outcome: 'completed' });
    const connection = (s as unknown as { redis: Redis }).redis;
    let sent = 0;
    const original = connection.sendCommand.bind(connection);
    connection.sendCommand = ((...args: Parameters<Redis['sendCommand']>) => {
      sent += 1;
      return original(...args);
    }) as Redis['sendCommand'];
    for (let i = 0; i < 50; i += 1) {
      const result = await s.enqueue({ id: `c${i}`, tenant: 'a', band: 0, replica: 'r1' });
      expect(result.status).toBe('granted');
      await s.release(`c${i}`, { outcome: 'completed' });
    }
    expect(sent).toBe(100);
    await s.close();
  });

  it('waiting on a full budget: polls stay quiet, a release hands its slot on with a hint, other writes end it', async () => {
    const scheduler = new RedisScheduler({ pool: 'quiet', connection: getRedis().handle.url });
    await scheduler.configure({ initialBudget: 1, queueTtlMs: 60_000 });
    await scheduler.upsertTenants([{ id: 'a' }]);
    await scheduler.upsertPods([{ name: 'pod-a', cap: 100 }]);
    const inner = scheduler as unknown as { redis: Redis; quietUntil: number };
    let sent = 0; // commands on the main connection (the blocking wait has its own)
    const original = inner.redis.sendCommand.bind(inner.redis);
    inner.redis.sendCommand = ((...args: Parameters<Redis['sendCommand']>) => {
      sent += 1;
      return original(...args);
    }) as Redis['sendCommand'];
    const enqueue = (id: string) => scheduler.enqueue({ id, tenant: 'a', band: 0, replica: 'r1' });

    // No blocking wait: a release asks for no hint (its notices come by poll).
    expect((await enqueue('w0')).status).toBe('granted');
    for (const id of ['w1', 'w2', 'w3', 'w4']) expect((await enqueue(id)).status).toBe('queued');
    await scheduler.release('w0', { outcome: 'completed' }); // its pass grants w1
    expect(inner.quietUntil).toBe(0);
    expect((await scheduler.poll('r1')).map((notice) => notice.id)).toEqual(['w1']);

    // The gateway's way: notices through the blocking wait, polls on the quiet schedule.
    const waiting = blockingWait(scheduler, 'r1');
    await sleep(50); // the wait is in flight
    sent = 0;
    const quiet = await scheduler.poll('r1'); // the pool waits on its full budget
    expect(quiet).toEqual([]);
    expect(quiet[QUIET_MS]).toBeGreaterThanOrEqual(1);
    await scheduler.poll('r1');
    expect(sent).toBe(1); // the second poll was answered without Redis

    // A release hands its slot on (its pass grants w2, the budget is full again) and keeps
    // the pool quiet: no poll after it; w2's grant comes through the blocking wait.
    sent = 0;
    await scheduler.release('w1', { outcome: 'completed' });
    expect(inner.quietUntil).toBeGreaterThan(0);
    await scheduler.poll('r1');
    expect(sent).toBe(1); // the release only
    await waiting.until('grant|w2');

    // A write that may let a pass grant ends the quiet: the next poll goes to Redis.
    await scheduler.upsertTenants([{ id: 'a' }]);
    expect(inner.quietUntil).toBe(0);
    sent = 0;
    await scheduler.poll('r1');
    expect(sent).toBe(1);

    // Nothing waits any more: the releases give no hint.
    await scheduler.release('w2', { outcome: 'completed' }); // grants w3
    await scheduler.release('w3', { outcome: 'completed' }); // grants w4
    await scheduler.release('w4', { outcome: 'completed' });
    expect(inner.quietUntil).toBe(0);
    await waiting.until('grant|w4');
    await waiting.stop();
    await scheduler.close();
  });

  it("a release carries its pass's grant for this process's outstanding BLMPOP, which stays for other replicas' grants", async () => {
    const pool = 'carry';
    const url = getRedis().handle.url;
    const r1 = new RedisScheduler({ pool, connection: url });
    const r2 = new RedisScheduler({ pool, connection: url });
    await r1.configure({ initialBudget: 2, queueTtlMs: 60_000 });
    await r1.upsertTenants([{ id: 'a' }]);
    await r1.upsertPods([{ name: 'pod-a', cap: 100 }]);
    const enqueue = (scheduler: RedisScheduler, id: string, replica: string) =>
      scheduler.enqueue({ id, tenant: 'a', band: 0, replica });
    expect((await enqueue(r1, 'g1', 'r1')).status).toBe('granted');
    expect((await enqueue(r2, 'g2', 'r2')).status).toBe('granted');
    for (const id of ['w1', 'w2', 'w3', 'w4']) {
      expect((await enqueue(r1, id, 'r1')).status).toBe('queued');
    }
    const grants = (notices: readonly { kind: string; id: string }[]) =>
      notices.map((notice) => `${notice.kind}|${notice.id}`);

    // Count what the blocking connection sends once it is open.
    expect(await r1.waitForNotices('r1', 10)).toEqual([]); // opens it
    const blocking = (r1 as unknown as { blocking: Redis }).blocking;
    const blmpops: string[] = [];
    const send = blocking.sendCommand.bind(blocking);
    blocking.sendCommand = ((...args: Parameters<Redis['sendCommand']>) => {
      blmpops.push(args[0].name);
      return send(...args);
    }) as Redis['sendCommand'];
    const first = r1.waitForNotices('r1', 5_000);
    await sleep(50); // its BLMPOP is blocked in Redis

    // r1's own release: its pass grants w1, and the grant comes back in the release's reply.
    await r1.release('g1', { outcome: 'completed' });
    expect(grants(await first)).toEqual(['grant|w1']);
    // The next wait takes the same BLMPOP, which another replica's pass wakes (w2's grant).
    const second = r1.waitForNotices('r1', 5_000);
    await r2.release('g2', { outcome: 'completed' });
    expect(grants(await second)).toEqual(['grant|w2']);
    expect(blmpops).toEqual(['BLMPOP']); // one BLMPOP for both grants

    // A wait shorter than the outstanding BLMPOP ends in its own time.
    const long = r1.waitForNotices('r1', 3_000);
    await sleep(50);
    expect(blmpops).toEqual(['BLMPOP', 'BLMPOP']);
    const started = performance.now();
    expect(await r1.waitForNotices('r1', 30)).toEqual([]);
    expect(performance.now() - started).toBeLessThan(1_000);
    await r1.release('w1', { outcome: 'completed' }); // grants w3, carried to the long wait
    expect(grants(await long)).toEqual(['grant|w3']);
    // The BLMPOP, now with no wait attached, is woken by another replica's pass (w4): what it
    // brings is not lost, the replica's next poll (or wait) returns it.
    await r2.release('w2', { outcome: 'completed' });
    await sleep(100);
    expect(grants(await r1.poll('r1'))).toEqual(['grant|w4']);
    expect(blmpops).toEqual(['BLMPOP', 'BLMPOP']);

    for (const id of ['w3', 'w4']) await r1.release(id, { outcome: 'completed' });
    const snapshot = await r1.snapshot();
    expect([snapshot.inflight, snapshot.waiting]).toEqual([0, 0]);
    await Promise.all([r1.close(), r2.close()]);
  });

  it('a BLMPOP whose connection is cut is sent again on the new one: its wait still gets the grant', async () => {
    const url = getRedis().handle.url;
    const r1 = new RedisScheduler({ pool: 'cut', connection: url });
    const r2 = new RedisScheduler({ pool: 'cut', connection: url });
    await r1.configure({ initialBudget: 1, queueTtlMs: 60_000 });
    await r1.upsertTenants([{ id: 'a' }]);
    await r1.upsertPods([{ name: 'pod-a', cap: 100 }]);
    expect((await r2.enqueue({ id: 'g', tenant: 'a', band: 0, replica: 'r2' })).status).toBe(
      'granted',
    );
    expect((await r1.enqueue({ id: 'w', tenant: 'a', band: 0, replica: 'r1' })).status).toBe(
      'queued',
    );
    const blockedId = async () =>
      /id=(\d+) [^\n]*cmd=blmpop/.exec(String(await admin.client('LIST')))?.[1];
    const waiting = r1.waitForNotices('r1', 5_000);
    await waitUntil('the BLMPOP is blocked', async () => (await blockedId()) !== undefined);
    const cut = (await blockedId()) as string;
    await admin.client('KILL', 'ID', cut);
    await waitUntil('the BLMPOP is blocked again', async () => {
      const id = await blockedId();
      return id !== undefined && id !== cut;
    });
    await r2.release('g', { outcome: 'completed' });
    expect(await waiting).toEqual([{ kind: 'grant', id: 'w', pod: 'pod-a' }]);
    await r1.release('w', { outcome: 'completed' });
    await Promise.all([r1.close(), r2.close()]);
  });

  it('a new config takes effect at the next call, also after FLUSHALL (the engine caches settings per config rev)', async () => {
    const scheduler = new RedisScheduler({ pool: 'rev', connection: getRedis().handle.url });
    const setUp = async (policy: 'reject-all' | 'always-admit') => {
      await scheduler.configure({ initialBudget: 4, admission: { policy } });
      await scheduler.upsertTenants([{ id: 'a' }]);
      await scheduler.upsertPods([{ name: 'pod-a', cap: 100 }]);
    };
    let n = 0;
    const admit = async () => {
      n += 1;
      const result = await scheduler.enqueue({ id: `r${n}`, tenant: 'a', band: 0, replica: 'r1' });
      if (result.status === 'granted') await scheduler.release(`r${n}`, { outcome: 'completed' });
      return result.status === 'rejected' ? result.code : result.status;
    };
    await setUp('always-admit');
    expect(await admit()).toBe('granted'); // read and kept
    expect(await admit()).toBe('granted'); // from the cache
    await setUp('reject-all');
    expect(await admit()).toBe(RejectCode.RejectedByPolicy);
    await setUp('always-admit');
    expect(await admit()).toBe('granted');
    // The keyspace is lost and rebuilt with other settings: a new rev, never the cached one.
    await admin.flushall();
    await setUp('reject-all');
    expect(await admit()).toBe(RejectCode.RejectedByPolicy);
    await admin.flushall();
    await setUp('always-admit');
    expect(await admit()).toBe('granted');
    await scheduler.close();
  });

  it("another replica's budget or config write runs its own pass: a quiet replica's requests are granted without its polls", async () => {
    const pool = 'quiet-writes';
    const url = getRedis().handle.url;
    const settings = { initialBudget: 1, queueTtlMs: 60_000 };
    const r1 = new RedisScheduler({ pool, connection: url });
    const leader = new RedisScheduler({ pool, connection: url });
    await r1.configure(settings);
    await r1.upsertTenants([{ id: 'a' }]);
    await r1.upsertPods([{ name: 'pod-a', cap: 100 }]);
    const enqueue = (id: string, band: number) =>
      r1.enqueue({ id, tenant: 'a', band, replica: 'r1' });
    expect((await enqueue('g0', -1)).status).toBe('granted');
    for (const id of ['w1', 'w2']) expect((await enqueue(id, 0)).status).toBe('queued');
    // r1 waits as the gateway does, through its blocking wait, and never polls again: its
    // last poll found the pool quiet on its full budget (for more than the old 20 ms bound).
    const waiting = blockingWait(r1, 'r1');
    await sleep(50); // the wait is in flight
    expect((await r1.poll('r1'))[QUIET_MS]).toBeGreaterThan(20);

    // The leader raises the budget: its write's pass grants w1.
    const lead = await leader.acquireLeadership('leader', 60_000);
    if (!lead.leader) throw new Error('no leadership');
    expect(await leader.setControl({ replica: 'leader', epoch: lead.epoch }, { budget: 2 })).toBe(
      true,
    );
    await waiting.until('grant|w1');
    // A config write that opens room (in-flight eviction on): its pass evicts g0 for w2.
    await leader.configure({ ...settings, inflightEviction: true });
    await waiting.until('grant|w2');
    expect(waiting.delivered).toEqual(['grant|w1', 'evict|g0', 'grant|w2']);
    await waiting.stop();
    for (const id of ['w1', 'w2']) await r1.release(id, { outcome: 'completed' });
    await Promise.all([r1.close(), leader.close()]);
  });

  it('stale shedding and eviction index entries (an older release in a rolling deploy) are skipped and dropped', async () => {
    const pool = 'stale-index';
    const keys = poolKeys(pool);
    const s = new RedisScheduler({ pool, connection: getRedis().handle.url });
    await s.configure({
      initialBudget: 1,
      queueTtlMs: 60_000,
      queueShedding: true,
      inflightEviction: true,
    });
    await s.upsertTenants([{ id: 't', queueMax: 1 }]);
    await s.upsertPods([{ name: 'pod-a', cap: 10 }]);
    const lowest = -1_000 * 2 ** 43;
    expect(await s.enqueue({ id: 'g', tenant: 't', band: -1, replica: 'r1' })).toMatchObject({
      status: 'granted',
    });
    // Lower scores than any live entry: a gone id, and a live one in the wrong state.
    await admin.zadd(keys.evictable, lowest, 'gone-1');
    expect(await s.enqueue({ id: 'w', tenant: 't', band: -2, replica: 'r1' })).toMatchObject({
      status: 'queued',
    });
    await admin.zadd(keys.evictable, lowest + 1, 'w');
    await admin.zadd(keys.sheddable, lowest, 'gone-2');
    await admin.zadd(`${keys.sheddableByTenantPrefix}t`, lowest, 'gone-3');
    await admin.zadd(`${keys.sheddableByTenantPrefix}t`, lowest + 1, 'g');
    // No budget: c evicts past the stale entries (gone-1, and w which is not granted) to g.
    expect(await s.enqueue({ id: 'c', tenant: 't', band: 3, replica: 'r1' })).toMatchObject({
      status: 'granted',
    });
    expect((await s.poll('r1')).map((n) => `${n.kind}|${n.id}`)).toEqual(['evict|g']);
    expect(await admin.zrange(keys.evictable, 0, -1)).toEqual([]);
    // Tenant queue full: the stale gone-3 and g are dropped; nothing lies below band -3.
    expect(await s.enqueue({ id: 'v', tenant: 't', band: -3, replica: 'r1' })).toEqual({
      status: 'rejected',
      code: RejectCode.TenantQueueFull,
    });
    expect(await admin.zrange(`${keys.sheddableByTenantPrefix}t`, 0, -1)).toEqual(['w']);
    expect(await s.enqueue({ id: 'c2', tenant: 't', band: 3, replica: 'r1' })).toMatchObject({
      status: 'queued',
    });
    expect((await s.poll('r1')).map((n) => `${n.kind}|${n.id}`)).toEqual(['shed|w']);
    for (const id of ['c', 'c2']) await s.cancel(id);
    expect(await admin.zcard(keys.sheddable)).toBe(1); // gone-2: only dropped when reached
    await admin.zrem(keys.sheddable, 'gone-2');
    await s.close();
  });

  it('a script touching a key outside its declared slot is refused (the check is live)', async () => {
    if (!getRedis().clusterChecked) return;
    const probe = '#!lua\nreturn redis.call("GET", "{elsewhere}:x")';
    await expect(admin.eval(probe, 1, '{fg:probe}:x')).rejects.toThrow(/same slot/);
  });

  it('every key of every pool used above hashes to its pool slot', async () => {
    await sleep(0);
    const keys = await scanAll(admin, '*');
    expect(keys.length).toBeGreaterThan(0);
    for (const key of keys) {
      const pool = /^\{fg:([^}]+)\}:/.exec(key)?.[1];
      expect(pool, `key outside any pool: ${key}`).toBeDefined();
      const slot = keySlot(poolKeys(pool as string).config);
      expect(keySlot(key)).toBe(slot);
      if (getRedis().clusterChecked) {
        expect(await admin.call('CLUSTER', 'KEYSLOT', key)).toBe(slot);
      }
    }
  });
});
