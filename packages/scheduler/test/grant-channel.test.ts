import { waitUntil } from '@fairgate/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  GrantChannel,
  type GrantSource,
  LocalScheduler,
  type Notice,
  type PolledNotices,
  QUIET_MS,
  RedisScheduler,
  type Scheduler,
} from '../src/index.js';
import { startClusterCheckedRedis, type TestRedis } from './support/cluster-redis.js';
import { sleep } from './support/pool.js';

/**
 * GrantChannel: whatever carries a replica's notice (a poll's dispatch pass or janitor, a
 * BLMPOP woken by another replica's release, a release of this process that popped it in
 * its reply), the channel delivers it once, and on both schedulers alike.
 */
let redis: TestRedis | undefined;
beforeAll(async () => {
  redis = await startClusterCheckedRedis();
});
afterAll(async () => {
  await redis?.stop();
});

const open: Array<{ close(): unknown }> = [];
afterEach(async () => {
  for (const item of open.splice(0).reverse()) await item.close();
});

/** A channel for `replica` over `source` that records every delivered notice. */
function channelOn(source: GrantSource, replica: string, tickMs = 1) {
  const delivered: string[] = [];
  let waiting = true;
  const channel = new GrantChannel(source, {
    replica,
    tickMs,
    waiting: () => waiting,
    deliver: (notices) => {
      for (const notice of notices) delivered.push(`${notice.kind}|${notice.id}`);
    },
  });
  open.push(channel);
  return {
    channel,
    delivered,
    stopWaiting: () => {
      waiting = false;
    },
    until: (notice: string) =>
      waitUntil(`${notice} delivered`, async () => delivered.includes(notice), {
        timeoutMs: 5_000,
        intervalMs: 2,
      }),
  };
}

let poolCounter = 0;
const schedulers: Record<string, () => { a: Scheduler; b: Scheduler }> = {
  local: () => {
    const scheduler = new LocalScheduler();
    open.push(scheduler);
    return { a: scheduler, b: scheduler };
  },
  redis: () => {
    poolCounter += 1;
    const pool = `channel${poolCounter}-${process.pid}`;
    const url = redis?.handle.url ?? '';
    // Two processes' handles: each its own connection (and BLMPOP connection).
    const a = new RedisScheduler({ pool, connection: url });
    const b = new RedisScheduler({ pool, connection: url });
    open.push(a, b);
    return { a, b };
  },
};

async function configure(scheduler: Scheduler, queueTtlMs = 60_000): Promise<void> {
  await scheduler.configure({ initialBudget: 1, queueTtlMs });
  await scheduler.upsertTenants([{ id: 't' }]);
  await scheduler.upsertPods([{ name: 'pod-a', cap: 100 }]);
}

const enqueue = (scheduler: Scheduler, id: string, replica: string, ttlMs?: number) =>
  scheduler.enqueue({ id, tenant: 't', band: 0, replica, ...(ttlMs ? { ttlMs } : {}) });

describe.each(Object.keys(schedulers))('GrantChannel on the %s scheduler', (kind) => {
  const make = () => (schedulers[kind] as () => { a: Scheduler; b: Scheduler })();

  it("delivers once a grant made by another replica's release", async () => {
    const { a, b } = make();
    await configure(a);
    expect((await enqueue(a, 'busy', 'ra')).status).toBe('granted');
    expect((await enqueue(b, 'next', 'rb')).status).toBe('queued');
    const rb = channelOn(b, 'rb');
    rb.channel.open();
    await sleep(20);
    await a.release('busy', { outcome: 'completed' });
    await rb.until('grant|next');
    await sleep(30);
    expect(rb.delivered).toEqual(['grant|next']);
  });

  it("delivers once a grant made by the pass of this process's own release", async () => {
    const { a } = make();
    await configure(a);
    expect((await enqueue(a, 'first', 'r1')).status).toBe('granted');
    expect((await enqueue(a, 'second', 'r1')).status).toBe('queued');
    const r1 = channelOn(a, 'r1');
    r1.channel.open();
    await sleep(20); // the blocking wait is outstanding: the release's reply carries the grant
    await a.release('first', { outcome: 'completed' });
    await r1.until('grant|second');
    await sleep(30);
    expect(r1.delivered).toEqual(['grant|second']);
  });

  it('delivers a queue TTL expiry (a poll runs the janitor)', async () => {
    const { a } = make();
    await configure(a);
    expect((await enqueue(a, 'busy', 'r1')).status).toBe('granted');
    expect((await enqueue(a, 'short', 'r1', 50)).status).toBe('queued');
    const r1 = channelOn(a, 'r1');
    r1.channel.open();
    await r1.until('expired|short');
    expect(r1.delivered).toEqual(['expired|short']);
  });

  it('stops polling when nothing waits, and after close', async () => {
    const { a } = make();
    await configure(a);
    let polls = 0;
    const counted: GrantSource = {
      poll: (replica) => {
        polls += 1;
        return a.poll(replica);
      },
      waitForNotices: (replica, timeoutMs) => a.waitForNotices(replica, timeoutMs),
    };
    const r1 = channelOn(counted, 'r1');
    r1.channel.open();
    await sleep(30);
    expect(polls).toBeGreaterThan(0);
    r1.stopWaiting();
    await sleep(20);
    const stopped = polls;
    await sleep(30);
    expect(polls).toBe(stopped);
  });
});

describe('GrantChannel tick', () => {
  /** A source whose polls answer [] with a quiet hint, and whose waits never wake. */
  function quietSource(quietMs: number) {
    const polledAt: number[] = [];
    const source: GrantSource = {
      poll: async () => {
        polledAt.push(performance.now());
        const notices: PolledNotices = [];
        Object.defineProperty(notices, QUIET_MS, { value: quietMs, enumerable: false });
        return notices;
      },
      waitForNotices: () => new Promise<Notice[]>(() => {}),
    };
    return { source, polledAt };
  }

  it('waits the quiet hint before the next poll, the tick when there is none', async () => {
    const quiet = quietSource(100);
    channelOn(quiet.source, 'r1', 1).channel.open();
    await sleep(350);
    // One poll per ~100 ms, not one per 1 ms tick.
    expect(quiet.polledAt.length).toBeGreaterThanOrEqual(2);
    expect(quiet.polledAt.length).toBeLessThanOrEqual(5);
    for (let i = 1; i < quiet.polledAt.length; i += 1) {
      expect((quiet.polledAt[i] ?? 0) - (quiet.polledAt[i - 1] ?? 0)).toBeGreaterThanOrEqual(95);
    }

    const busy = quietSource(0);
    channelOn(busy.source, 'r2', 5).channel.open();
    await sleep(200);
    expect(busy.polledAt.length).toBeGreaterThan(5);
  });

  it('opens no second loop while one runs, and none after close', async () => {
    const quiet = quietSource(0);
    const r1 = channelOn(quiet.source, 'r1', 20);
    r1.channel.open();
    r1.channel.open();
    await sleep(110);
    expect(quiet.polledAt.length).toBeLessThanOrEqual(6);
    r1.channel.close();
    const closedAt = quiet.polledAt.length;
    r1.channel.open();
    await sleep(60);
    expect(quiet.polledAt.length).toBe(closedAt);
  });
});
