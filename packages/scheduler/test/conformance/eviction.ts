import { expect, it } from 'vitest';
import { sleep } from '../support/pool.js';
import type { GetPool } from './index.js';

/** In-flight eviction (settings.inflightEviction). */
export function inflightEviction(getPool: GetPool): void {
  it('no budget: a waiting non-sheddable request takes the slot of the lowest-band, newest sheddable one', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 3, queueTtlMs: 60_000, inflightEviction: true },
      tenants: [{ id: 'free' }, { id: 'paid' }],
    });
    expect(await pool.admit({ id: 's1', tenant: 'free', band: -1 })).toBe('pod-a');
    expect(await pool.admit({ id: 's2', tenant: 'free', band: -2 })).toBe('pod-a');
    expect(await pool.admit({ id: 's3', tenant: 'free', band: -2, replica: 'r2' })).toBe('pod-a');
    expect(await pool.admit({ id: 'c1', tenant: 'paid', band: 3 })).toBe('pod-a');
    expect(await pool.admit({ id: 'c2', tenant: 'paid', band: 0 })).toBe('pod-a');
    expect(await pool.admit({ id: 'c3', tenant: 'paid', band: 0 })).toBe('pod-a');
    // Nothing sheddable left in flight; a sheddable arrival never evicts.
    expect(await pool.admit({ id: 'c4', tenant: 'paid', band: 0 })).toBe('queued');
    expect(await pool.admit({ id: 'l1', tenant: 'free', band: -1 })).toBe('queued');
    expect(await pool.notices('r2')).toEqual(['evict|s3']);
    expect(await pool.notices('r1')).toEqual(['evict|s2', 'evict|s1']);
    expect((await pool.counters('free')).outcomes).toEqual({ evicted: 3 });
    expect(await pool.on().release('s1', { outcome: 'completed' })).toEqual({ was: 'unknown' });
    const snapshot = await pool.on().snapshot();
    expect([snapshot.inflight, snapshot.waiting]).toEqual([3, 2]);
  });

  it('no pod room: the eviction frees a pod and the waiting request takes it', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 10, queueTtlMs: 60_000, inflightEviction: true },
      tenants: [{ id: 't' }],
      pods: [
        { name: 'pod-a', cap: 1 },
        { name: 'pod-b', cap: 1 },
      ],
    });
    expect(await pool.admit({ id: 's1', tenant: 't', band: -1 })).toBe('pod-a');
    expect(await pool.admit({ id: 'n1', tenant: 't', band: 0 })).toBe('pod-b');
    expect(await pool.admit({ id: 'c1', tenant: 't', band: 4 })).toBe('pod-a');
    expect(await pool.notices()).toEqual(['evict|s1']);
  });

  it('off by default: nothing in flight is evicted', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000 },
      tenants: [{ id: 't' }],
    });
    expect(await pool.admit({ id: 's1', tenant: 't', band: -3 })).toBe('pod-a');
    expect(await pool.admit({ id: 'c1', tenant: 't', band: 4 })).toBe('queued');
    expect(await pool.notices()).toEqual([]);
  });

  it('a closed gate evicts at most one request per new scrape', async () => {
    const pool = getPool();
    await pool.setup({
      settings: {
        initialBudget: 10,
        queueTtlMs: 60_000,
        inflightEviction: true,
        gating: { enabled: true },
      },
      tenants: [{ id: 't' }],
    });
    const fence = await pool.lead();
    await pool.report(fence, [{ pod: 'pod-a' }]);
    for (const id of ['s1', 's2', 's3']) {
      expect(await pool.admit({ id, tenant: 't', band: -1 })).toBe('pod-a');
    }
    await pool.report(fence, [{ pod: 'pod-a', waiting: 10 }]); // saturation 2
    expect(await pool.admit({ id: 'l1', tenant: 't', band: -2 })).toBe('queued');
    expect(await pool.notices()).toEqual([]);
    expect(await pool.admit({ id: 'c1', tenant: 't', band: 3 })).toBe('queued');
    expect(await pool.notices()).toEqual(['evict|s3']);
    expect(await pool.notices()).toEqual([]);
    await sleep(5);
    await pool.report(fence, [{ pod: 'pod-a', waiting: 10 }]);
    expect(await pool.notices()).toEqual(['evict|s2']);
    expect(await pool.notices()).toEqual([]);
    await sleep(5);
    await pool.report(fence, [{ pod: 'pod-a', waiting: 0 }]);
    expect(await pool.notices()).toEqual(['grant|c1|pod-a', 'grant|l1|pod-a']);
  });

  it('at most maxGrantsPerPass evictions per pass', async () => {
    const pool = getPool();
    const settings = { initialBudget: 4, queueTtlMs: 60_000 };
    await pool.setup({ settings, tenants: [{ id: 't' }] });
    for (const id of ['s1', 's2', 's3', 's4']) {
      expect(await pool.admit({ id, tenant: 't', band: -1 })).toBe('pod-a');
    }
    for (const id of ['c1', 'c2', 'c3']) {
      expect(await pool.admit({ id, tenant: 't', band: 0 })).toBe('queued');
    }
    // The write's own pass evicts at most two; the next pass (a poll) the third.
    await pool.on().configure({ ...settings, inflightEviction: true, maxGrantsPerPass: 2 });
    expect(await pool.popped()).toEqual([
      'evict|s4',
      'grant|c1|pod-a',
      'evict|s3',
      'grant|c2|pod-a',
    ]);
    expect(await pool.notices()).toEqual(['evict|s2', 'grant|c3|pod-a']);
  });

  it('fifo: only a non-sheddable next request evicts', async () => {
    const pool = getPool();
    await pool.setup({
      settings: {
        initialBudget: 1,
        queueTtlMs: 60_000,
        inflightEviction: true,
        dispatchOrder: 'fifo',
      },
      tenants: [{ id: 't' }],
    });
    expect(await pool.admit({ id: 's1', tenant: 't', band: -1 })).toBe('pod-a');
    expect(await pool.admit({ id: 'l1', tenant: 't', band: -2 })).toBe('queued');
    // l1 arrived first and is sheddable: the pass stops there, c1 waits behind it.
    expect(await pool.admit({ id: 'c1', tenant: 't', band: 0 })).toBe('queued');
    expect(await pool.notices()).toEqual([]);
    await pool.on().cancel('l1');
    expect(await pool.notices()).toEqual(['evict|s1', 'grant|c1|pod-a']);
  });
}
