import { RejectCode } from '@fairgate/core';
import { expect, it } from 'vitest';
import { SchedulerError, ScriptCode } from '../../src/index.js';
import type { GetPool } from './index.js';

/** Deterministic pseudo-random numbers (LCG) so both implementations see the same run. */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
    return state / 2_147_483_648;
  };
}

export function capsAndQuotas(getPool: GetPool): void {
  it('quotas are never exceeded at any instant, and a tenant at quota does not block others', async () => {
    const pool = getPool();
    const budget = 8;
    await pool.setup({
      settings: { initialBudget: budget, queueTtlMs: 60_000 },
      tenants: [{ id: 'conc', maxConcurrent: 3 }, { id: 'kv', maxKvBlocks: 10 }, { id: 'free' }],
    });
    const limits = {
      conc: { inflight: 3, kvBlocks: Infinity },
      kv: { inflight: Infinity, kvBlocks: 10 },
    };
    const next = random(7);
    const held: string[] = [];
    let serial = 0;
    let freeGrantedWhileOthersBlocked = false;
    for (let step = 0; step < 240; step += 1) {
      const roll = next();
      if (roll < 0.55 || held.length === 0) {
        serial += 1;
        const tenant = (['conc', 'kv', 'free'] as const)[Math.floor(next() * 3)] as string;
        const id = `${tenant}-${serial}`;
        const result = await pool.enqueue({ id, tenant, kvBlocks: tenant === 'kv' ? 4 : 1 });
        if (result.status === 'granted') held.push(id);
      } else {
        const index = Math.floor(next() * held.length);
        const [id] = held.splice(index, 1);
        held.push(...(await pool.releaseAndCollect(id as string)));
      }
      const snapshot = await pool.on().snapshot();
      expect(snapshot.inflight).toBeLessThanOrEqual(budget);
      for (const tenant of snapshot.tenants) {
        const limit = limits[tenant.tenant as keyof typeof limits];
        if (!limit) continue;
        expect(tenant.inflight).toBeLessThanOrEqual(limit.inflight);
        expect(tenant.kvBlocks).toBeLessThanOrEqual(limit.kvBlocks);
      }
      const byId = Object.fromEntries(snapshot.tenants.map((t) => [t.tenant, t]));
      if (
        byId.conc?.inflight === 3 &&
        byId.kv?.kvBlocks === 8 &&
        byId.free &&
        byId.free.inflight > 0
      ) {
        freeGrantedWhileOthersBlocked = true;
      }
    }
    expect(freeGrantedWhileOthersBlocked).toBe(true);
  });

  it('a tenant at quota is skipped and the next flow is served at once', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 10, queueTtlMs: 60_000 },
      tenants: [{ id: 'capped', maxConcurrent: 1 }, { id: 'other' }],
    });
    expect((await pool.enqueue({ id: 'c1', tenant: 'capped' })).status).toBe('granted');
    expect((await pool.enqueue({ id: 'c2', tenant: 'capped' })).status).toBe('queued');
    expect((await pool.enqueue({ id: 'o1', tenant: 'other' })).status).toBe('granted');
    expect(await pool.releaseAndCollect('c1')).toEqual(['c2']);
    await pool.on().release('c2', { outcome: 'completed' });
    await pool.on().release('o1', { outcome: 'completed' });
  });

  it('each cap rejects with its own code and counts it', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 0, bandCapacity: 3, maxQueueDepth: 5, queueTtlMs: 60_000 },
      tenants: [
        { id: 'small', queueMax: 2 },
        { id: 'big' },
        { id: 'never', maxConcurrent: 0 },
        { id: 'kv', maxKvBlocks: 8 },
      ],
    });
    const codeOf = async (id: string, tenant: string, band = 0, kvBlocks = 0) => {
      const result = await pool.enqueue({ id, tenant, band, kvBlocks });
      return result.status === 'rejected' ? result.code : result.status;
    };
    expect(await codeOf('s1', 'small')).toBe('queued');
    expect(await codeOf('s2', 'small')).toBe('queued');
    expect(await codeOf('s3', 'small')).toBe(RejectCode.TenantQueueFull);
    expect(await codeOf('b1', 'big')).toBe('queued');
    expect(await codeOf('b2', 'big')).toBe(RejectCode.BandFull);
    expect(await codeOf('b3', 'big', 1)).toBe('queued');
    expect(await codeOf('b4', 'big', 2)).toBe('queued');
    expect(await codeOf('b5', 'big', 3)).toBe(RejectCode.GlobalQueueFull);
    expect(await codeOf('n1', 'never')).toBe(RejectCode.QuotaConcurrencyNeverFits);
    expect(await codeOf('k1', 'kv', 5, 9)).toBe(RejectCode.QuotaKvBlocksNeverFits);

    const snapshot = await pool.on().snapshot();
    expect(snapshot.waiting).toBe(5);
    expect(snapshot.waitingByBand).toEqual({ '0': 3, '1': 1, '2': 1 });
    const rejected = Object.fromEntries(snapshot.counters.map((c) => [c.tenant, c.rejected]));
    expect(rejected).toEqual({
      small: { [RejectCode.TenantQueueFull]: 1 },
      big: { [RejectCode.BandFull]: 1, [RejectCode.GlobalQueueFull]: 1 },
      never: { [RejectCode.QuotaConcurrencyNeverFits]: 1 },
      kv: { [RejectCode.QuotaKvBlocksNeverFits]: 1 },
    });
    // Offered is derived (admitted + rejected): every call above is counted exactly once.
    const counted = Object.fromEntries(
      snapshot.counters.map((c) => [c.tenant, [c.offered, c.admitted]]),
    );
    expect(counted).toEqual({ small: [3, 2], big: [5, 3], never: [1, 0], kv: [1, 0] });
  });

  it('caps bound waiting requests only: a request granted at once never hits them', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, bandCapacity: 0, maxQueueDepth: 0 },
      tenants: [{ id: 'a', queueMax: 0 }],
    });
    expect((await pool.enqueue({ id: 'a1', tenant: 'a' })).status).toBe('granted');
    const second = await pool.enqueue({ id: 'a2', tenant: 'a' });
    expect(second).toEqual({ status: 'rejected', code: RejectCode.TenantQueueFull });
    await pool.on().release('a1', { outcome: 'completed' });
  });

  it('no healthy pod rejects at once; pods fill least-loaded first, within caps', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 10, queueTtlMs: 60_000 },
      tenants: [{ id: 't' }],
      pods: [
        { name: 'pod-b', cap: 1 },
        { name: 'pod-a', cap: 2 },
        { name: 'pod-c', cap: 5, healthy: false },
      ],
    });
    const pods: string[] = [];
    for (const id of ['p1', 'p2', 'p3', 'p4']) {
      const result = await pool.enqueue({ id, tenant: 't' });
      pods.push(result.status === 'granted' ? result.pod : result.status);
    }
    // Ties in load go to the first name; pod-c is unhealthy; caps stop the fourth.
    expect(pods).toEqual(['pod-a', 'pod-b', 'pod-a', 'queued']);
    const snapshot = await pool.on().snapshot();
    expect(snapshot.pods.map((p) => [p.name, p.inflight])).toEqual([
      ['pod-a', 2],
      ['pod-b', 1],
      ['pod-c', 0],
    ]);
    expect(await pool.releaseAndCollect('p2')).toEqual(['p4']);

    await pool.on().upsertPods([
      { name: 'pod-a', cap: 2, healthy: false },
      { name: 'pod-b', cap: 1, healthy: false },
    ]);
    expect(await pool.enqueue({ id: 'p5', tenant: 't' })).toEqual({
      status: 'rejected',
      code: RejectCode.NoHealthyPod,
    });
  });

  it('a preferred pod is used while it has room', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 10 },
      tenants: [{ id: 't' }],
      pods: [
        { name: 'pod-a', cap: 4 },
        { name: 'pod-b', cap: 1 },
      ],
    });
    const pod = async (id: string, podHint?: string) => {
      const result = await pool.enqueue({ id, tenant: 't', ...(podHint ? { podHint } : {}) });
      return result.status === 'granted' ? result.pod : result.status;
    };
    expect(await pod('h1', 'pod-b')).toBe('pod-b');
    expect(await pod('h2', 'pod-b')).toBe('pod-a');
    expect(await pod('h3', 'pod-zzz')).toBe('pod-a');
  });

  it('configuration errors throw one error type with a code, and count nothing', async () => {
    const pool = getPool();
    const scheduler = pool.on();
    const notConfigured = await scheduler
      .enqueue({ id: 'x', tenant: 't', band: 0, replica: 'r1' })
      .catch((error: unknown) => error);
    expect(notConfigured).toBeInstanceOf(SchedulerError);
    expect((notConfigured as SchedulerError).code).toBe(ScriptCode.NotConfigured);
    await pool.setup({ tenants: [{ id: 't' }] });
    const unknown = await scheduler
      .enqueue({ id: 'x', tenant: 'nobody', band: 0, replica: 'r1' })
      .catch((error: unknown) => error);
    expect((unknown as SchedulerError).code).toBe(ScriptCode.UnknownTenant);
    expect((await scheduler.snapshot()).counters).toEqual([]);
    await expect(
      scheduler.enqueue({ id: '{bad}', tenant: 't', band: 0, replica: 'r1' }),
    ).rejects.toThrow(/request.id must be/);
  });
}
