import { expect, it } from 'vitest';
import { sleep } from '../support/pool.js';
import type { GetPool } from './index.js';

export function liveness(getPool: GetPool): void {
  it('heartbeats keep a lease; without them it is evicted and the owner told', async () => {
    const pool = getPool();
    await pool.setup({ settings: { initialBudget: 1, leaseTtlMs: 300 }, tenants: [{ id: 't' }] });
    await pool.enqueue({ id: 'g', tenant: 't' });
    for (let beat = 0; beat < 8; beat += 1) {
      await sleep(75);
      expect(await pool.on().heartbeat('r1', ['g'])).toEqual({ lost: [] });
      await pool.on().reclaim();
    }
    expect((await pool.on().snapshot()).inflight).toBe(1);
    // Alive (it keeps polling) but no longer heartbeating the lease.
    const notices = [];
    const deadline = Date.now() + 5_000;
    while (notices.length === 0 && Date.now() < deadline) {
      notices.push(...(await pool.on().poll('r1')));
      await sleep(25);
    }
    expect(notices).toEqual([{ kind: 'evict', id: 'g' }]);
    expect(await pool.on().heartbeat('r1', ['g'])).toEqual({ lost: ['g'] });
    expect((await pool.on().snapshot()).counters[0]?.outcomes.evicted).toBe(1);
  });

  it('a replica that stops heartbeating loses its leases and queued entries within the lease TTL', async () => {
    const pool = getPool();
    const leaseTtlMs = 800;
    await pool.setup({
      settings: { initialBudget: 2, leaseTtlMs, queueTtlMs: 60_000 },
      tenants: [{ id: 'gone' }, { id: 'stays' }],
    });
    const firstLeaseAt = Date.now();
    await pool.enqueue({ id: 'd1', tenant: 'gone', replica: 'dying' });
    await pool.enqueue({ id: 'd2', tenant: 'gone', replica: 'dying' });
    await pool.enqueue({ id: 'd3', tenant: 'gone', replica: 'dying' });
    const silentSince = Date.now();
    await pool.enqueue({ id: 's1', tenant: 'stays', replica: 'r2' });
    await pool.enqueue({ id: 's2', tenant: 'stays', replica: 'r2' });

    await sleep(leaseTtlMs / 4);
    expect(await pool.on('r2').poll('r2')).toEqual([]);
    expect((await pool.on('r2').snapshot()).inflight).toBe(2);

    const notices = await pool.pollFor('r2', 2, 10 * leaseTtlMs);
    const reclaimedAfter = Date.now() - silentSince;
    expect(notices, `after ${reclaimedAfter} ms`).toEqual([
      { kind: 'grant', id: 's1', pod: 'pod-a' },
      { kind: 'grant', id: 's2', pod: 'pod-a' },
    ]);
    // Not before the first lease lapsed; within the lease TTL of the replica's last call,
    // with polling and scheduling slack for a loaded machine.
    expect(Date.now() - firstLeaseAt).toBeGreaterThanOrEqual(leaseTtlMs);
    expect(reclaimedAfter).toBeLessThan(leaseTtlMs * 3);

    // d3 was either cancelled as the waiting entry of a dead replica, or granted to the
    // replica moments before it was declared dead and evicted with it: never held longer.
    await pool.on('r2').reclaim();
    const snapshot = await pool.on('r2').snapshot();
    const gone = snapshot.counters.find((c) => c.tenant === 'gone');
    expect(gone?.outcomes.evicted).toBeGreaterThanOrEqual(2);
    expect((gone?.outcomes.evicted ?? 0) + (gone?.outcomes.cancelled ?? 0)).toBe(3);
    expect(snapshot.tenants.find((t) => t.tenant === 'gone')).toMatchObject({
      inflight: 0,
      waiting: 0,
    });
    expect(snapshot.replicas.map((r) => r.replica)).toEqual(['r2']);
    expect(await pool.on('dying').heartbeat('dying', ['d1', 'd2', 'd3'])).toEqual({
      lost: ['d1', 'd2', 'd3'],
    });
    await pool.on('r2').release('s1', { outcome: 'completed' });
    await pool.on('r2').release('s2', { outcome: 'completed' });
  });
}
