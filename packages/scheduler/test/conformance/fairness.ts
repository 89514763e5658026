import { expect, it } from 'vitest';
import type { TenantConfig } from '../../src/index.js';
import type { GetPool } from './index.js';

/**
 * Keeps every tenant backlogged and dispatches `dispatches` requests one slot at a time
 * (release the oldest grant, collect what the pass granted, top the tenant up again).
 * Returns each tenant's share of the dispatches made under contention.
 */
async function measureShares(
  getPool: GetPool,
  weights: Record<string, number>,
  dispatches: number,
  quantum = 1,
): Promise<Record<string, number>> {
  const pool = getPool();
  const tenants: TenantConfig[] = Object.entries(weights).map(([id, weight]) => ({ id, weight }));
  const budget = 4;
  await pool.setup({ settings: { initialBudget: budget, quantum, queueTtlMs: 600_000 }, tenants });
  let serial = 0;
  const enqueueFor = async (tenant: string) => {
    serial += 1;
    return pool.enqueue({ id: `${tenant}-${serial}`, tenant });
  };
  const held: string[] = [];
  for (let round = 0; round < 6; round += 1) {
    for (const { id } of tenants) {
      const result = await enqueueFor(id);
      if (result.status === 'granted') held.push(`${id}-${serial}`);
    }
  }
  expect(held).toHaveLength(budget);
  const counts: Record<string, number> = Object.fromEntries(tenants.map((t) => [t.id, 0]));
  for (let made = 0; made < dispatches; made += 1) {
    const granted = await pool.releaseAndCollect(held.shift() as string);
    expect(granted).toHaveLength(1);
    const id = granted[0] as string;
    const tenant = pool.tenantOf.get(id) as string;
    counts[tenant] = (counts[tenant] ?? 0) + 1;
    held.push(id);
    await enqueueFor(tenant);
  }
  return Object.fromEntries(Object.entries(counts).map(([t, n]) => [t, n / dispatches]));
}

function expectShares(shares: Record<string, number>, weights: Record<string, number>): void {
  const total = Object.values(weights).reduce((a, b) => a + b, 0);
  for (const [tenant, weight] of Object.entries(weights)) {
    // Tolerance ±3 percentage points; DRR is exact over whole rounds.
    expect(Math.abs((shares[tenant] ?? 0) - weight / total)).toBeLessThanOrEqual(0.03);
  }
}

/** Holds the only slot (budget 1) with `hold`, queues `arrivals`, then frees one slot at a time. */
export async function grantOrder(
  getPool: GetPool,
  arrivals: { id: string; tenant: string; band?: number; deadlineMs?: number }[],
): Promise<string[]> {
  const pool = getPool();
  expect((await pool.enqueue({ id: 'hold', tenant: 'h' })).status).toBe('granted');
  for (const arrival of arrivals) {
    expect((await pool.enqueue(arrival)).status).toBe('queued');
  }
  const order: string[] = [];
  let holder = 'hold';
  while (order.length < arrivals.length) {
    const granted = await pool.releaseAndCollect(holder);
    expect(granted).toHaveLength(1);
    holder = granted[0] as string;
    order.push(holder);
  }
  await pool.on().release(holder, { outcome: 'completed' });
  return order;
}

const orderTenants: TenantConfig[] = [{ id: 'h' }, { id: 'a', weight: 3 }, { id: 'b' }];
const interleaved = ['a1', 'b1', 'b2', 'a2', 'a3', 'b3', 'b4', 'a4'].map((id) => ({
  id,
  tenant: id.slice(0, 1),
}));

export function fairness(getPool: GetPool): void {
  it('weights 2:1 give dispatch shares within ±3% over 3,000 dispatches', async () => {
    const weights = { heavy: 2, light: 1 };
    expectShares(await measureShares(getPool, weights, 3_000), weights);
  });

  it('weights 3:1:1 give dispatch shares within ±3% over 3,000 dispatches', async () => {
    const weights = { big: 3, small1: 1, small2: 1 };
    expectShares(await measureShares(getPool, weights, 3_000), weights);
  });

  it('the quantum scales turns without changing shares', async () => {
    const weights = { heavy: 2, light: 1 };
    expectShares(await measureShares(getPool, weights, 600, 5), weights);
  });

  it('a lone tenant gets the whole budget (work-conserving)', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 6, queueTtlMs: 60_000 },
      tenants: [{ id: 'solo' }, { id: 'idle', weight: 10 }],
    });
    const results = [];
    for (let i = 0; i < 10; i += 1)
      results.push(await pool.enqueue({ id: `s${i}`, tenant: 'solo' }));
    expect(results.filter((r) => r.status === 'granted')).toHaveLength(6);
    const snapshot = await pool.on().snapshot();
    expect(snapshot.inflight).toBe(6);
    expect(snapshot.tenants.find((t) => t.tenant === 'solo')?.inflight).toBe(6);
    expect(await pool.releaseAndCollect('s0')).toEqual(['s6']);
  });

  it('bands have strict priority: every higher band goes before any lower one', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000 },
      tenants: [{ id: 'h' }, { id: 'lo', weight: 100 }, { id: 'hi' }, { id: 'mid' }],
    });
    const order = await grantOrder(getPool, [
      { id: 'l1', tenant: 'lo', band: -2 },
      { id: 'h1', tenant: 'hi', band: 4 },
      { id: 'l2', tenant: 'lo', band: -2 },
      { id: 'm1', tenant: 'mid', band: 3 },
      { id: 'h2', tenant: 'hi', band: 4 },
      { id: 'l3', tenant: 'lo', band: -2 },
      { id: 'h3', tenant: 'hi', band: 4 },
    ]);
    expect(order).toEqual(['h1', 'h2', 'h3', 'm1', 'l1', 'l2', 'l3']);
  });

  const deadlines = [
    { id: 'd900', tenant: 'a', deadlineMs: 900 },
    { id: 'd100', tenant: 'a', deadlineMs: 100 },
    { id: 'd500', tenant: 'a', deadlineMs: 500 },
    { id: 'none', tenant: 'a' },
  ];

  it('priority order serves a tenant queue in arrival order', async () => {
    await getPool().setup({
      settings: { initialBudget: 1, dispatchOrder: 'priority', queueTtlMs: 60_000 },
      tenants: orderTenants,
    });
    expect(await grantOrder(getPool, deadlines)).toEqual(['d900', 'd100', 'd500', 'none']);
  });

  it('slo-deadline serves earliest deadline first, no deadline = queue expiry', async () => {
    await getPool().setup({
      settings: { initialBudget: 1, dispatchOrder: 'slo-deadline', queueTtlMs: 60_000 },
      tenants: orderTenants,
    });
    expect(await grantOrder(getPool, deadlines)).toEqual(['d100', 'd500', 'd900', 'none']);
  });

  it('drr: weight 3 vs 1 takes three turns per one', async () => {
    await getPool().setup({
      settings: { initialBudget: 1, fairness: 'drr', queueTtlMs: 60_000 },
      tenants: orderTenants,
    });
    expect(await grantOrder(getPool, interleaved)).toEqual([
      'a1',
      'a2',
      'a3',
      'b1',
      'a4',
      'b2',
      'b3',
      'b4',
    ]);
  });

  it('round-robin alternates tenants whatever their weights', async () => {
    await getPool().setup({
      settings: { initialBudget: 1, fairness: 'round-robin', queueTtlMs: 60_000 },
      tenants: orderTenants,
    });
    expect(await grantOrder(getPool, interleaved)).toEqual([
      'a1',
      'b1',
      'a2',
      'b2',
      'a3',
      'b3',
      'a4',
      'b4',
    ]);
  });

  it('global-strict follows arrival order across tenants', async () => {
    await getPool().setup({
      settings: { initialBudget: 1, fairness: 'global-strict', queueTtlMs: 60_000 },
      tenants: orderTenants,
    });
    expect(await grantOrder(getPool, interleaved)).toEqual(interleaved.map((a) => a.id));
  });
}
