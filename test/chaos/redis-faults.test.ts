import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectConserved, type Pool, sleep, startPool } from '../support/pool.js';
import { chaosPool, type LoadRecord, sentBetween, statuses, steadyLoad } from './support.js';

/**
 * Under steady load through 2 replicas, each fault below in turn:
 * FUNCTION FLUSH, FLUSHALL, CLIENT KILL TYPE normal, and a 5 s stall (SIGSTOP). No request
 * hangs beyond its client timeout, the pool serves again by itself (the last second of the
 * run is all 200), and conservation holds for what Redis still records, with nothing left in
 * flight.
 */
const REQUEST_TIMEOUT_MS = 5_000;

describe('Redis faults under load (2 replicas, reject mode)', () => {
  let pool: Pool;
  let admin: Redis;

  beforeAll(async () => {
    pool = await startPool(chaosPool({ scheduler: { queue_ttl_ms: 3_000 } }));
    admin = new Redis(pool.redis.url, { maxRetriesPerRequest: 0, retryStrategy: () => 50 });
    admin.on('error', () => {});
  }, 60_000);

  afterAll(async () => {
    admin?.disconnect();
    await pool?.redis.resume().catch(() => {});
    await pool?.stop();
  });

  /** Load for `totalMs`, the fault `leadMs` in; returns the records and when the fault hit. */
  async function underLoad(
    fault: () => Promise<void>,
    totalMs = 6_000,
    leadMs = 1_500,
  ): Promise<{ records: LoadRecord[]; faultAt: number; endAt: number }> {
    const load = steadyLoad({
      urls: pool.gateways.map((g) => g.url),
      concurrency: 8,
      maxMs: totalMs + 10_000,
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
    });
    try {
      await sleep(leadMs);
      const faultAt = performance.now();
      await fault();
      await sleep(totalMs - leadMs);
      const endAt = performance.now();
      load.stop();
      return { records: await load.done, faultAt, endAt };
    } finally {
      load.stop();
      await load.done;
    }
  }

  function expectRecovered(
    name: string,
    run: { records: LoadRecord[]; faultAt: number; endAt: number },
  ) {
    const { records, faultAt, endAt } = run;
    const hung = records.filter((r) => r.status === -1 || r.endMs >= REQUEST_TIMEOUT_MS);
    expect(hung, `${name}: requests that hung`).toEqual([]);
    const lastSecond = sentBetween(records, endAt - 1_500, endAt - 500);
    expect(lastSecond.length).toBeGreaterThan(10);
    expect(statuses(lastSecond), `${name}: the last second`).toEqual({ 200: lastSecond.length });
    const afterFault = sentBetween(records, faultAt, endAt);
    const slowest = Math.max(...afterFault.map((r) => r.endMs));
    console.log(
      `[${name}] before ${JSON.stringify(statuses(sentBetween(records, 0, faultAt)))}, from the fault on ${JSON.stringify(statuses(afterFault))}, slowest ${slowest.toFixed(0)} ms`,
    );
    return afterFault;
  }

  it('FUNCTION FLUSH: invisible to clients (the library is loaded again)', async () => {
    const run = await underLoad(async () => {
      await admin.call('FUNCTION', 'FLUSH');
    });
    const afterFault = expectRecovered('FUNCTION FLUSH', run);
    expect(statuses(afterFault)).toEqual({ 200: afterFault.length });
    await expectConserved(pool);
  }, 60_000);

  it('FLUSHALL: the pool restores itself from the replicas config', async () => {
    const run = await underLoad(async () => {
      await admin.flushall();
    });
    const afterFault = expectRecovered('FLUSHALL', run);
    const ok = afterFault.filter((r) => r.status === 200).length;
    expect(ok / afterFault.length).toBeGreaterThan(0.99);
    await expectConserved(pool);
  }, 60_000);

  it('CLIENT KILL TYPE normal: every replica reconnects', async () => {
    const run = await underLoad(async () => {
      await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
    });
    const afterFault = expectRecovered('CLIENT KILL', run);
    const ok = afterFault.filter((r) => r.status === 200).length;
    expect(ok / afterFault.length).toBeGreaterThan(0.9);
    await expectConserved(pool);
  }, 60_000);

  it('a 5 s stall (SIGSTOP): fast 503s during it, service after it, nothing leaked', async () => {
    const run = await underLoad(async () => {
      await pool.redis.pause();
      await sleep(5_000);
      await pool.redis.resume();
    }, 10_000);
    const afterFault = expectRecovered('SIGSTOP 5 s', run);
    // Requests sent while Redis is stopped are answered, fast: 8 clients answered within a
    // second each send many over the 4 s window; a gateway that waits for Redis sends none.
    const stalled = sentBetween(afterFault, run.faultAt + 500, run.faultAt + 4_500);
    const picture = `sent during the stall: ${JSON.stringify(statuses(stalled))}, slowest ${Math.max(0, ...stalled.map((r) => r.endMs)).toFixed(0)} ms`;
    expect(stalled.length, picture).toBeGreaterThanOrEqual(8 * 4);
    expect(
      stalled.filter((r) => r.status !== 503 || r.endMs >= 1_000),
      picture,
    ).toEqual([]);
    await expectConserved(pool);
  }, 60_000);
});
