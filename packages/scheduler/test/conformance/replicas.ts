import { expect, it } from 'vitest';
import { sleep } from '../support/pool.js';
import type { GetPool } from './index.js';

export function replicas(getPool: GetPool): void {
  it('three replicas, one tenant each: global weight shares within ±3%, budget never exceeded', async () => {
    const pool = getPool();
    const budget = 6;
    const weights: Record<string, number> = { gold: 3, silver: 2, bronze: 1 };
    const replicaOf: Record<string, string> = { gold: 'ra', silver: 'rb', bronze: 'rc' };
    const tenants = Object.keys(weights);
    await pool.setup({
      settings: { initialBudget: budget, queueTtlMs: 600_000 },
      tenants: tenants.map((id) => ({ id, weight: weights[id] })),
    });
    const target = 3_000;
    const counts: Record<string, number> = { gold: 0, silver: 0, bronze: 0 };
    const granted: Record<string, string[]> = { gold: [], silver: [], bronze: [] };
    let dispatched = 0;
    let heldByClients = 0;
    let maxHeld = 0;
    let serial = 0;

    const received = (tenant: string, id: string, counted: boolean) => {
      heldByClients += 1;
      maxHeld = Math.max(maxHeld, heldByClients);
      granted[tenant]?.push(id);
      if (counted) {
        counts[tenant] = (counts[tenant] ?? 0) + 1;
        dispatched += 1;
      }
    };
    const enqueueOne = async (tenant: string, counted: boolean) => {
      serial += 1;
      const id = `${tenant}-${serial}`;
      const replica = replicaOf[tenant] as string;
      const result = await pool.enqueue({ id, tenant, replica });
      if (result.status === 'granted') received(tenant, id, counted);
    };

    // Backlog first, 20 per tenant for 6 slots, so every dispatch below is contended and no
    // queue runs dry while its replica is busy (a dry queue leaves the ring: work-conserving).
    for (let round = 0; round < 20; round += 1) {
      for (const tenant of tenants) await enqueueOne(tenant, false);
    }

    // Each replica completes what it was granted, tops its tenant up, and polls for more.
    const runReplica = async (tenant: string) => {
      const replica = replicaOf[tenant] as string;
      const scheduler = pool.on(replica);
      const mine = granted[tenant] as string[];
      while (dispatched < target) {
        for (const id of mine.splice(0)) {
          // Counted free from the moment the release is sent: received minus releases sent
          // never exceeds what Redis holds, so it exceeding the budget would be an over-grant.
          heldByClients -= 1;
          await scheduler.release(id, { outcome: 'completed' });
          await enqueueOne(tenant, true);
        }
        const notices = await scheduler.poll(replica);
        for (const notice of notices) {
          expect(notice.kind).toBe('grant');
          received(tenant, notice.id, true);
        }
        if (notices.length === 0) await sleep(1);
      }
    };
    const sampler = async () => {
      while (dispatched < target) {
        expect((await pool.on().snapshot()).inflight).toBeLessThanOrEqual(budget);
        await sleep(20);
      }
    };
    await Promise.all([...tenants.map(runReplica), sampler()]);

    expect(maxHeld).toBeLessThanOrEqual(budget);
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    expect(total).toBeGreaterThanOrEqual(target);
    for (const tenant of tenants) {
      const share = (counts[tenant] ?? 0) / total;
      expect(Math.abs(share - (weights[tenant] as number) / 6)).toBeLessThanOrEqual(0.03);
    }
  });
}
