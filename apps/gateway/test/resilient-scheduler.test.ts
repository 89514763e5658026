import {
  createRedisConnection,
  RedisScheduler,
  type Scheduler,
  SchedulerError,
} from '@fairgate/scheduler';
import { type RedisHandle, startRedis } from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isUnavailable, OutageMonitor, SchedulerUnavailable } from '../src/redis-outage.js';
import { resilientScheduler } from '../src/resilient-scheduler.js';

/**
 * The gateway's view of the shared scheduler against a real redis-server that is flushed,
 * killed and restarted empty: state restored once for all callers, answers within the
 * command timeout during the outage, no Redis call for an enqueue while down, releases sent
 * again when Redis is back.
 */
const COMMAND_TIMEOUT_MS = 250;

let redis: RedisHandle;
let admin: Redis;

beforeAll(async () => {
  redis = await startRedis();
  admin = new Redis(redis.url, { maxRetriesPerRequest: 0, retryStrategy: () => 50 });
  admin.on('error', () => {});
});

afterAll(async () => {
  admin.disconnect();
  await redis.stop();
});

interface Rig {
  scheduler: Scheduler;
  monitor: OutageMonitor;
  reseeds: number;
  events: string[];
  close(): Promise<void>;
}

function rig(pool: string): Rig {
  const connection = createRedisConnection({
    topology: { kind: 'standalone', url: redis.url },
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
  });
  const inner = new RedisScheduler({ pool, connection });
  const events: string[] = [];
  const state = { reseeds: 0 };
  const monitor = new OutageMonitor({
    mode: 'reject',
    probe: () => scheduler.heartbeat('r1'),
    probeEveryMs: 50,
    onEnter: () => events.push('enter'),
    onLeave: () => events.push('leave'),
  });
  const scheduler = resilientScheduler(inner, {
    monitor,
    reseed: async () => {
      state.reseeds += 1;
      await inner.configure({ initialBudget: 4 }, { mode: 'seed' });
      await inner.upsertTenants([{ id: 't' }]);
      await inner.upsertPods([{ name: 'pod-a', cap: 8 }]);
    },
  });
  return {
    scheduler,
    monitor,
    get reseeds() {
      return state.reseeds;
    },
    events,
    async close() {
      monitor.close();
      await inner.close();
      connection.disconnect();
    },
  };
}

const request = (id: string) => ({ id, tenant: 't', band: 0, replica: 'r1' });

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 5_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('resilientScheduler', () => {
  it('restores a flushed pool once for all concurrent callers and retries their calls', async () => {
    const r = rig('heal');
    try {
      // Never configured: the first calls find no settings and restore them.
      const first = await Promise.all(
        Array.from({ length: 20 }, (_, i) => r.scheduler.enqueue(request(`a${i}`))),
      );
      expect(first.filter((x) => x.status === 'granted')).toHaveLength(4);
      expect(r.reseeds).toBe(1);
      await admin.flushall();
      const second = await Promise.all(
        Array.from({ length: 10 }, (_, i) => r.scheduler.enqueue(request(`b${i}`))),
      );
      expect(second.filter((x) => x.status === 'granted')).toHaveLength(4);
      expect(r.reseeds).toBe(2);
      // FUNCTION FLUSH: the library is loaded again by the runner, invisibly.
      await admin.call('FUNCTION', 'FLUSH');
      expect((await r.scheduler.heartbeat('r1')).lost).toEqual([]);
      expect(r.events).toEqual([]);
    } finally {
      await r.close();
    }
  });

  it('a refusal that is not missing state is passed through unchanged', async () => {
    const r = rig('bad');
    try {
      await r.scheduler.upsertTenants([{ id: 't' }]).catch(() => {});
      await expect(r.scheduler.enqueue({ ...request('x'), tenant: 'nobody' })).rejects.toSatisfy(
        (error) => error instanceof SchedulerError,
      );
      await expect(r.scheduler.enqueue({ ...request('bad id with spaces') })).rejects.toThrow(
        TypeError,
      );
      expect(r.monitor.down).toBe(false);
    } finally {
      await r.close();
    }
  });

  it('answers within the command timeout while Redis is down, then heals when it is back', async () => {
    const r = rig('outage');
    try {
      const granted = await r.scheduler.enqueue(request('held'));
      expect(granted.status).toBe('granted');
      await redis.kill();

      const started = performance.now();
      const failure = await r.scheduler.enqueue(request('during')).catch((error) => error);
      const firstMs = performance.now() - started;
      expect(failure).toBeInstanceOf(SchedulerUnavailable);
      expect(firstMs).toBeLessThan(COMMAND_TIMEOUT_MS + 200);
      expect(r.monitor.down).toBe(true);
      expect(r.events).toEqual(['enter']);

      // While down: no Redis call at all for an enqueue.
      const fast = performance.now();
      await expect(r.scheduler.enqueue(request('fast'))).rejects.toBeInstanceOf(
        SchedulerUnavailable,
      );
      expect(performance.now() - fast).toBeLessThan(20);
      // A release that cannot be sent now is kept for later.
      const release = await r.scheduler
        .release('held', { outcome: 'completed' })
        .catch((error) => error);
      expect(isUnavailable(release)).toBe(true);

      await redis.restart();
      const back = performance.now();
      await until('the outage to end', () => !r.monitor.down);
      expect(performance.now() - back).toBeLessThan(3_000);
      expect(r.events).toEqual(['enter', 'leave']);
      // Restarted empty: the next call restores the pool and is served.
      expect((await r.scheduler.enqueue(request('after'))).status).toBe('granted');
      const snapshot = await r.scheduler.snapshot();
      expect(snapshot.inflight).toBe(1);
    } finally {
      await r.close();
    }
  });

  it('isUnavailable tells Redis being away from a bad call', () => {
    expect(isUnavailable(new Error('Command timed out'))).toBe(true);
    expect(isUnavailable(new Error('Connection is closed.'))).toBe(true);
    expect(isUnavailable(new SchedulerUnavailable('x'))).toBe(true);
    expect(isUnavailable(new TypeError('bad id'))).toBe(false);
    expect(isUnavailable(new SchedulerError(-20, 'enqueue: not configured'))).toBe(false);
  });
});
