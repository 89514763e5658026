import { type RedisHandle, startRedis } from '@fairgate/testkit';
import { type Command, Redis, ReplyError } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Notice, poolKeys, RedisScheduler } from '../src/index.js';
import { gatewayConnection } from './support/connection.js';

/**
 * EngineBatch against a real redis-server: the engine calls made in one event-loop turn
 * while the connection awaits a reply leave as one `batch` FCALL (lua/batch-1.lua), and
 * each still gets exactly the reply, or the error, its own FCALL would have given, in the
 * order the calls were made. An enqueue (urgent: its request waits on the reply) never
 * joins a batch: it sends the open one first, then itself, at once. A handover (lazy: no
 * request waits on it) waits 1 ms for company.
 */
let redis: RedisHandle;
let admin: Redis;

beforeAll(async () => {
  redis = await startRedis();
  admin = new Redis(redis.url);
});

afterAll(async () => {
  admin.disconnect();
  await redis.stop();
});

/** The engine FCALLs a scheduler's connection sends: each one's function (without the library). */
function countFunctions(scheduler: RedisScheduler): string[] {
  const connection = (scheduler as unknown as { redis: Redis }).redis;
  const sent: string[] = [];
  const send = connection.sendCommand.bind(connection);
  connection.sendCommand = ((command: Command, ...rest: unknown[]) => {
    if (command.name.toLowerCase() === 'fcall')
      sent.push(String(command.args[0]).replace(/^.*_/, ''));
    return (send as (...args: unknown[]) => unknown)(command, ...rest);
  }) as Redis['sendCommand'];
  return sent;
}

async function openPool(
  pool: string,
  budget: number,
  connection: string | Redis = redis.url,
): Promise<RedisScheduler> {
  const scheduler = new RedisScheduler({ pool, connection });
  await scheduler.configure({ initialBudget: budget, queueTtlMs: 60_000, dispatchOrder: 'fifo' });
  await scheduler.upsertTenants([{ id: 'a' }, { id: 'b' }]);
  await scheduler.upsertPods([{ name: 'pod-a', cap: 100 }]);
  return scheduler;
}

const enqueue = (scheduler: RedisScheduler, id: string, tenant = 'a') =>
  scheduler.enqueue({ id, tenant, band: 0, replica: 'r1' });

/** Enqueues `ids` one after another (each granted on a pool with room): requests to release. */
async function admitted(scheduler: RedisScheduler, ids: string[]): Promise<void> {
  for (const id of ids) expect((await enqueue(scheduler, id)).status).toBe('granted');
}

describe('engine calls batched per event-loop turn', () => {
  it('the calls of one turn leave as one batch, each with its own reply, in call order', async () => {
    const scheduler = await openPool('batch-order', 3);
    try {
      const sent = countFunctions(scheduler);
      // Enqueues made in one turn each leave at once, alone (urgent), in the order made.
      const ids = Array.from({ length: 8 }, (_, i) => `e${i}`);
      const results = await Promise.all(ids.map((id) => enqueue(scheduler, id)));
      expect(sent).toEqual(Array.from({ length: 8 }, () => 'enqueue'));
      expect(results.map((r) => r.status)).toEqual([
        'granted',
        'granted',
        'granted',
        'queued',
        'queued',
        'queued',
        'queued',
        'queued',
      ]);
      // The queue holds them in the order they were made: each release grants the next.
      const granted: string[] = [];
      for (const id of ['e0', 'e1', 'e2', 'e3', 'e4']) {
        await scheduler.release(id, { outcome: 'completed' });
        const notices: Notice[] = await scheduler.poll('r1');
        granted.push(...notices.filter((n) => n.kind === 'grant').map((n) => n.id));
      }
      expect(granted).toEqual(['e3', 'e4', 'e5', 'e6', 'e7']);
      // Releases made in one turn: the first finds the connection idle and leaves alone; the
      // ones made while it awaits its reply leave together at the check phase, and each
      // answers its own state.
      sent.length = 0;
      const ends = await Promise.all(
        ['e5', 'e6', 'e7', 'nope'].map((id) => scheduler.release(id, { outcome: 'completed' })),
      );
      expect(sent).toEqual(['release', 'batch']);
      expect(ends.map((end) => end.was)).toEqual(['granted', 'granted', 'granted', 'unknown']);
      const snapshot = await scheduler.snapshot();
      expect([snapshot.inflight, snapshot.waiting]).toEqual([0, 0]);
    } finally {
      await scheduler.close();
    }
  });

  it('an enqueue made while a batch is open sends the batch first, then itself, at once', async () => {
    const connection = gatewayConnection(redis.url, 5_000);
    const scheduler = await openPool('batch-urgent', 2, connection);
    try {
      await admitted(scheduler, ['u1', 'u2']);
      const sent = countFunctions(scheduler);
      // u1's release leaves alone; u2's opens a batch; the enqueue sends that batch (its
      // release frees the slot the enqueue takes) and itself before the turn ends.
      const first = scheduler.release('u1', { outcome: 'completed' });
      const second = scheduler.release('u2', { outcome: 'completed' });
      expect(sent).toEqual(['release']);
      const third = enqueue(scheduler, 'u3');
      expect(sent).toEqual(['release', 'release', 'enqueue']);
      // Both handed to the kernel already; the socket is corked again for the turn's rest.
      expect(connection.stream.writableLength).toBe(0);
      expect(connection.stream.writableCorked).toBe(1);
      const [a, b, c] = await Promise.all([first, second, third]);
      expect([a.was, b.was, c.status]).toEqual(['granted', 'granted', 'granted']);
      const snapshot = await scheduler.snapshot();
      expect([snapshot.inflight, snapshot.waiting]).toEqual([1, 0]);
    } finally {
      await scheduler.close();
      connection.disconnect();
    }
  });

  it('handovers wait 1 ms for company; a call that is not lazy sends them at the check phase', async () => {
    const scheduler = await openPool('batch-lazy', 8);
    try {
      await admitted(scheduler, ['h1', 'h2', 'h3']);
      const sent = countFunctions(scheduler);
      const handover = (from: string, id: string) =>
        scheduler.handover(
          from,
          { outcome: 'completed' },
          { id, tenant: 'a', band: 0, replica: 'r1' },
        );
      // Made in two turns, on an idle connection: one batch after the 1 ms.
      const first = handover('h1', 'n1');
      await new Promise((resolve) => setImmediate(resolve));
      expect(sent).toEqual([]);
      const second = handover('h2', 'n2');
      const answers = await Promise.all([first, second]);
      expect(sent).toEqual(['batch']);
      expect(answers).toEqual([
        { handedOver: true, pod: 'pod-a', contended: false },
        { handedOver: true, pod: 'pod-a', contended: false },
      ]);
      // A release joining an open lazy batch: both leave at the check phase, in order.
      sent.length = 0;
      const third = handover('h3', 'n3');
      const started = performance.now();
      const released = scheduler.release('n3', { outcome: 'completed' });
      await new Promise((resolve) => setImmediate(resolve));
      expect(sent).toEqual(['batch']);
      expect(await third).toMatchObject({ handedOver: true });
      expect(await released).toEqual({ was: 'granted' });
      expect(performance.now() - started).toBeLessThan(1_000);
      const snapshot = await scheduler.snapshot();
      expect(snapshot.inflight).toBe(2);
      for (const id of ['n1', 'n2']) await scheduler.release(id, { outcome: 'completed' });
    } finally {
      await scheduler.close();
    }
  });

  it('a call awaited alone is sent alone', async () => {
    const scheduler = await openPool('batch-alone', 4);
    try {
      const sent = countFunctions(scheduler);
      for (let i = 0; i < 3; i++) {
        await enqueue(scheduler, `s${i}`);
        await scheduler.release(`s${i}`, { outcome: 'completed' });
      }
      expect(sent).toEqual(['enqueue', 'release', 'enqueue', 'release', 'enqueue', 'release']);
    } finally {
      await scheduler.close();
    }
  });

  it('a call that fails in Redis rejects alone, with the error its own FCALL gives', async () => {
    const scheduler = await openPool('batch-error', 8);
    try {
      // Tenant b's hash made a string: its enqueue fails with WRONGTYPE inside Redis.
      await admin.set(`${poolKeys('batch-error').tenantPrefix}b`, 'not a hash');
      const alone = await enqueue(scheduler, 'b-alone', 'b').catch((error: unknown) => error);
      expect(alone).toBeInstanceOf(ReplyError);
      expect(String((alone as Error).message)).toMatch(/^WRONGTYPE/);

      // Inside a batch: a2's record made a string, its release fails the same way.
      await admitted(scheduler, ['a0', 'a1', 'a2', 'a3']);
      await admin.set(`${poolKeys('batch-error').requestPrefix}a2`, 'not a hash');
      const sent = countFunctions(scheduler);
      const settled = await Promise.allSettled(
        ['a0', 'a1', 'a2', 'a3'].map((id) => scheduler.release(id, { outcome: 'completed' })),
      );
      expect(sent).toEqual(['release', 'batch']);
      expect(settled.map((s) => s.status)).toEqual([
        'fulfilled',
        'fulfilled',
        'rejected',
        'fulfilled',
      ]);
      const reason = (settled[2] as PromiseRejectedResult).reason as Error;
      expect(reason).toBeInstanceOf(ReplyError);
      expect(reason.message).toMatch(/^WRONGTYPE/);
      expect((settled[3] as PromiseFulfilledResult<{ was: string }>).value.was).toBe('granted');
    } finally {
      await scheduler.close();
    }
  });

  it('a batch sent after FUNCTION FLUSH loads the library and runs once', async () => {
    const scheduler = await openPool('batch-flush', 8);
    try {
      await admitted(scheduler, ['w', 'f1', 'f2', 'f3']);
      const warm = scheduler.release('w', { outcome: 'completed' }); // awaited...
      await admin.call('FUNCTION', 'FLUSH');
      // ...so these batch, and the batch finds its function gone.
      const ends = await Promise.all(
        ['f1', 'f2', 'f3'].map((id) => scheduler.release(id, { outcome: 'completed' })),
      );
      await warm.catch(() => {}); // sent before or after the flush: either way it is retried
      expect(ends.map((end) => end.was)).toEqual(['granted', 'granted', 'granted']);
      const snapshot = await scheduler.snapshot();
      expect(snapshot.inflight).toBe(0);
      expect(snapshot.counters.reduce((sum, c) => sum + c.outcomes.completed, 0)).toBe(4);
    } finally {
      await scheduler.close();
    }
  });

  it('a batch that fails whole (timed out) rejects each of its calls', async () => {
    const connection = gatewayConnection(redis.url, 300);
    const scheduler = await openPool('batch-timeout', 8, connection);
    try {
      const sent = countFunctions(scheduler);
      await redis.pause();
      const settled = await Promise.allSettled(
        ['t1', 't2', 't3'].map((id) => scheduler.release(id, { outcome: 'completed' })),
      );
      await redis.resume();
      expect(sent).toEqual(['release', 'batch']);
      expect(settled.map((s) => s.status)).toEqual(['rejected', 'rejected', 'rejected']);
      for (const s of settled) {
        expect(((s as PromiseRejectedResult).reason as Error).message).toBe('Command timed out');
      }
    } finally {
      await redis.resume();
      await scheduler.close();
      connection.disconnect();
    }
  });
});
