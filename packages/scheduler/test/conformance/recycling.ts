import { expect, it } from 'vitest';
import type { SchedulerSnapshot } from '../../src/index.js';
import type { GetPool } from './index.js';

/** The state a refused handover must leave as it was (the clock and liveness aside). */
function state(snapshot: SchedulerSnapshot) {
  const { nowMs: _now, replicas: _replicas, ...rest } = snapshot;
  return rest;
}

export function slotRecycling(getPool: GetPool): void {
  it('a handover ends the finished request and admits the next into its slot', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1 },
      tenants: [{ id: 't', maxConcurrent: 1, maxKvBlocks: 4 }],
      pods: [{ name: 'pod-a', cap: 1 }],
    });
    expect(await pool.admit({ id: 'a', tenant: 't', kvBlocks: 4 })).toBe('pod-a');
    const usage = { inputTokens: 30, outputTokens: 7 };
    expect(
      await pool.handover(
        'a',
        { id: 'b', tenant: 't', kvBlocks: 4, sloClass: 'batch' },
        {
          outcome: 'completed',
          usage,
        },
      ),
    ).toEqual({ handedOver: true, pod: 'pod-a', contended: false });
    const snapshot = await pool.on().snapshot();
    expect(snapshot.inflight).toBe(1);
    expect(snapshot.pods[0]?.inflight).toBe(1);
    expect(await pool.tenant('t')).toMatchObject({ inflight: 1, kvBlocks: 4, waiting: 0 });
    const byClass = Object.fromEntries(snapshot.counters.map((row) => [row.sloClass, row]));
    expect(byClass.standard).toMatchObject({ admitted: 1, inputTokens: 30, outputTokens: 7 });
    expect(byClass.standard?.outcomes.completed).toBe(1);
    expect(byClass.batch).toMatchObject({ admitted: 1 });
    expect(await pool.on().heartbeat('r1', ['a', 'b'])).toEqual({ lost: ['a'] });
    expect(await pool.on().release('a', { outcome: 'completed' })).toEqual({ was: 'unknown' });
    expect(await pool.on().release('b', { outcome: 'completed' })).toEqual({ was: 'granted' });
  });

  it("without a KV-block quota the next request's KV blocks may differ: the gauge follows", async () => {
    const pool = getPool();
    await pool.setup({ settings: { initialBudget: 1 }, tenants: [{ id: 't' }] });
    expect(await pool.admit({ id: 'a', tenant: 't', kvBlocks: 6 })).toBe('pod-a');
    expect(await pool.handover('a', { id: 'b', tenant: 't', kvBlocks: 2 })).toMatchObject({
      handedOver: true,
    });
    expect(await pool.tenant('t')).toMatchObject({ inflight: 1, kvBlocks: 2 });
    expect(await pool.handover('b', { id: 'c', tenant: 't' })).toMatchObject({ handedOver: true });
    expect(await pool.tenant('t')).toMatchObject({ inflight: 1, kvBlocks: 0 });
    expect(await pool.on().release('c', { outcome: 'completed' })).toEqual({ was: 'granted' });
  });

  it('the slot passes without a dispatch pass, and the reply says a request waits', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000 },
      tenants: [{ id: 't' }, { id: 'u' }],
    });
    expect(await pool.admit({ id: 'a', tenant: 't' })).toBe('pod-a');
    expect(await pool.admit({ id: 'w', tenant: 'u', replica: 'r2' })).toBe('queued');
    expect(await pool.handover('a', { id: 'b', tenant: 't' })).toEqual({
      handedOver: true,
      pod: 'pod-a',
      contended: true,
    });
    expect(await pool.notices('r2')).toEqual([]);
    expect(await pool.releaseAndCollect('b', 'r2')).toEqual(['w']);
    await pool.on('r2').release('w', { outcome: 'completed' });
  });

  it('the reply says contended when the slot should go back to the pool', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 2 },
      tenants: [{ id: 't', maxConcurrent: 2 }],
      pods: [{ name: 'pod-a', cap: 2 }],
    });
    expect(await pool.admit({ id: 'a1', tenant: 't' })).toBe('pod-a');
    expect(await pool.admit({ id: 'a2', tenant: 't' })).toBe('pod-a');
    const contended = async (from: string, id: string) => {
      const result = await pool.handover(from, { id, tenant: 't' });
      if (!result.handedOver) throw new Error(`${from} -> ${id} not handed over`);
      return result.contended;
    };
    expect(await contended('a1', 'b1')).toBe(false);
    // More in flight than the budget (the controller lowered it).
    const fence = await pool.lead();
    expect(await pool.on().setControl(fence, { budget: 1 })).toBe(true);
    expect(await contended('b1', 'c1')).toBe(true);
    expect(await pool.on().setControl(fence, { budget: 2 })).toBe(true);
    expect(await contended('c1', 'd1')).toBe(false);
    // The tenant over its quota (a config reload lowered it).
    await pool.on().upsertTenants([{ id: 't', maxConcurrent: 1 }]);
    expect(await contended('d1', 'e1')).toBe(true);
    await pool.on().upsertTenants([{ id: 't', maxConcurrent: 2 }]);
    // The pod over its cap, then unhealthy.
    await pool.on().upsertPods([{ name: 'pod-a', cap: 1 }]);
    expect(await contended('e1', 'f1')).toBe(true);
    await pool.on().upsertPods([{ name: 'pod-a', cap: 2, healthy: false }]);
    expect(await contended('f1', 'g1')).toBe(true);
    await pool.on().upsertPods([{ name: 'pod-a', cap: 2 }]);
    expect(await contended('g1', 'h1')).toBe(false);
    // The admission policy refuses the request's band.
    await pool.on().configure({ initialBudget: 2, admission: { policy: 'reject-all' } });
    expect(await contended('h1', 'i1')).toBe(true);
    await pool.on().release('i1', { outcome: 'completed' });
    await pool.on().release('a2', { outcome: 'completed' });
  });

  it('a handover that does not fit changes nothing', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000 },
      tenants: [
        { id: 't', maxKvBlocks: 100 },
        { id: 'u' },
        { id: 'bucket', tokenBucket: { capacity: 1_000, refillPerSecond: 10 } },
      ],
    });
    expect(await pool.admit({ id: 'a', tenant: 't', kvBlocks: 2 })).toBe('pod-a');
    expect(await pool.admit({ id: 'q', tenant: 't', kvBlocks: 2 })).toBe('queued');
    const before = state(await pool.on().snapshot());
    const refused = [
      pool.handover('never-seen', { id: 'b1', tenant: 't', kvBlocks: 2 }),
      pool.handover('q', { id: 'b2', tenant: 't', kvBlocks: 2 }),
      pool.handover('a', { id: 'b3', tenant: 't', kvBlocks: 2, replica: 'r2' }),
      pool.handover('a', { id: 'b4', tenant: 'u', kvBlocks: 2 }),
      pool.handover('a', { id: 'b5', tenant: 't', kvBlocks: 2, band: 1 }),
      pool.handover('a', { id: 'b6', tenant: 't', kvBlocks: 3 }), // t has a KV-block quota
      pool.handover('a', { id: 'q', tenant: 't', kvBlocks: 2 }),
    ];
    for (const result of refused) expect(await result).toEqual({ handedOver: false });
    expect(state(await pool.on().snapshot())).toEqual(before);
    expect(await pool.on().cancel('q')).toEqual({ was: 'queued' });
    await pool.on().release('a', { outcome: 'completed' });

    // A request charged to a token bucket keeps its own slot (its true-up comes at release).
    expect(await pool.admit({ id: 'c', tenant: 'bucket', tokens: 10 })).toBe('pod-a');
    const charged = state(await pool.on().snapshot());
    expect(await pool.handover('c', { id: 'c2', tenant: 'bucket' })).toEqual({
      handedOver: false,
    });
    expect(state(await pool.on().snapshot())).toEqual(charged);
    await pool.on().release('c', { outcome: 'completed', actualTokens: 10 });
  });

  it('a handover the engine can never make is a TypeError, and changes nothing', async () => {
    const pool = getPool();
    await pool.setup({ settings: { initialBudget: 1 }, tenants: [{ id: 't' }] });
    expect(await pool.admit({ id: 'a', tenant: 't' })).toBe('pod-a');
    const before = state(await pool.on().snapshot());
    const completed = { outcome: 'completed' } as const;
    await expect(pool.handover('a', { id: 'b', tenant: 't', band: -1 })).rejects.toThrow(
      'handover: request.band must be >= 0, got -1',
    );
    await expect(pool.handover('a', { id: 'b', tenant: 't', tokens: 5 })).rejects.toThrow(
      'handover: request.tokens must be 0',
    );
    await expect(pool.handover('a', { id: 'b', tenant: 't', prefix: ['h1'] })).rejects.toThrow(
      'handover: request.prefix must be empty',
    );
    await expect(
      pool.handover('a', { id: 'b', tenant: 't' }, { ...completed, actualTokens: 3 }),
    ).rejects.toThrow('handover: actualTokens is not allowed');
    await expect(
      pool.handover('a', { id: 'b', tenant: 't' }, { outcome: 'done' as 'completed' }),
    ).rejects.toThrow(TypeError);
    expect(state(await pool.on().snapshot())).toEqual(before);
    await pool.on().release('a', completed);
  });

  it('an enqueue granted by the pass after it queued says the pool is contended', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 4, queueTtlMs: 60_000 },
      tenants: [{ id: 'x', maxConcurrent: 1 }, { id: 'y' }],
    });
    expect(await pool.enqueue({ id: 'x1', tenant: 'x' })).toEqual({
      status: 'granted',
      pod: 'pod-a',
      retried: false,
    });
    expect(await pool.admit({ id: 'x2', tenant: 'x' })).toBe('queued');
    expect(await pool.enqueue({ id: 'y1', tenant: 'y' })).toEqual({
      status: 'granted',
      pod: 'pod-a',
      retried: false,
      contended: true,
    });
    for (const id of ['y1', 'x1']) await pool.on().release(id, { outcome: 'completed' });
    await pool.pollFor('r1', 1);
    await pool.on().release('x2', { outcome: 'completed' });
  });
}
