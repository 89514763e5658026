import { expect, it } from 'vitest';
import { grantOrder } from './fairness.js';
import type { GetPool } from './index.js';

/** settings.dispatchOrder: priority (default), slo-deadline, fifo. */
export function dispatchOrders(getPool: GetPool): void {
  const tenants = [{ id: 'h' }, { id: 'a' }, { id: 'b' }, { id: 'heavy', weight: 100 }];

  it('priority (the default): bands strictly, fairness inside a band, arrival inside a queue', async () => {
    const pool = getPool();
    await pool.setup({ settings: { initialBudget: 1, queueTtlMs: 60_000 }, tenants });
    expect((await pool.on().snapshot()).settings?.dispatchOrder).toBe('priority');
    const order = await grantOrder(getPool, [
      { id: 'a1', tenant: 'a', band: 0 },
      { id: 'a2', tenant: 'a', band: 0 },
      { id: 'b1', tenant: 'b', band: 0 },
      { id: 'a3', tenant: 'a', band: 2 },
    ]);
    expect(order).toEqual(['a3', 'a1', 'b1', 'a2']);
  });

  it('slo-deadline: earliest deadline first inside a tenant queue, bands still strict', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000, dispatchOrder: 'slo-deadline' },
      tenants,
    });
    const order = await grantOrder(getPool, [
      { id: 'x900', tenant: 'a', band: 0, deadlineMs: 900 },
      { id: 'x100', tenant: 'a', band: 0, deadlineMs: 100 },
      { id: 'y5000', tenant: 'b', band: 3, deadlineMs: 5_000 },
      { id: 'y500', tenant: 'b', band: 3, deadlineMs: 500 },
      { id: 'xnone', tenant: 'a', band: 0 },
    ]);
    expect(order).toEqual(['y500', 'y5000', 'x100', 'x900', 'xnone']);
  });

  it('fifo: the globally earliest arrival across bands and tenants; priority and weights ignored', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000, dispatchOrder: 'fifo' },
      tenants,
    });
    const arrivals = [
      { id: 'l1', tenant: 'a', band: -2 },
      { id: 'h1', tenant: 'heavy', band: 4 },
      { id: 'l2', tenant: 'a', band: -2 },
      { id: 'm1', tenant: 'b', band: 3 },
      { id: 'h2', tenant: 'heavy', band: 4 },
      { id: 'h3', tenant: 'heavy', band: 4 },
      { id: 'm2', tenant: 'b', band: 3 },
    ];
    expect(await grantOrder(getPool, arrivals)).toEqual(arrivals.map((a) => a.id));
  });

  it('fifo still skips a tenant at its quota and comes back to it', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000, dispatchOrder: 'fifo' },
      tenants: [{ id: 'h' }, { id: 'a', maxConcurrent: 1 }, { id: 'b' }],
    });
    expect(await pool.admit({ id: 'hold', tenant: 'h' })).toBe('pod-a');
    for (const [id, tenant] of [
      ['a1', 'a'],
      ['a2', 'a'],
      ['b1', 'b'],
      ['b2', 'b'],
    ] as const) {
      expect(await pool.admit({ id, tenant, band: id === 'b2' ? 4 : 0 })).toBe('queued');
    }
    expect(await pool.releaseAndCollect('hold')).toEqual(['a1']);
    const fence = await pool.lead();
    expect(await pool.on().setControl(fence, { budget: 3 })).toBe(true);
    // a2 is earliest but a is at its quota: b1 and b2 go first.
    expect(await pool.notices()).toEqual(['grant|b1|pod-a', 'grant|b2|pod-a']);
    expect(await pool.releaseAndCollect('a1')).toEqual(['a2']);
  });
}
