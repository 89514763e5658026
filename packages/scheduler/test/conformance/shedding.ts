import { RejectCode } from '@fairgate/core';
import { expect, it } from 'vitest';
import { sleep } from '../support/pool.js';
import type { GetPool } from './index.js';

/** Queue shedding (settings.queueShedding): a full queue replaces a sheddable waiting request. */
export function queueShedding(getPool: GetPool): void {
  it('a full tenant queue sheds its own lowest-band, newest sheddable request below the arrival', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 0, queueTtlMs: 60_000, queueShedding: true },
      tenants: [{ id: 't', queueMax: 3 }, { id: 'u' }],
    });
    expect(await pool.admit({ id: 'a', tenant: 't', band: -1 })).toBe('queued');
    expect(await pool.admit({ id: 'b', tenant: 't', band: -3, replica: 'r2' })).toBe('queued');
    expect(await pool.admit({ id: 'c', tenant: 't', band: -3 })).toBe('queued');
    expect(await pool.admit({ id: 'u1', tenant: 'u', band: -3 })).toBe('queued');
    // Lowest band first, newest first within it: c, then b; never another tenant's u1.
    expect(await pool.admit({ id: 'd', tenant: 't', band: 0 })).toBe('queued');
    expect(await pool.admit({ id: 'e', tenant: 't', band: -2 })).toBe('queued');
    // Nothing below band -2 is left (e is the same band): the arrival is rejected.
    expect(await pool.admit({ id: 'f', tenant: 't', band: -2 })).toBe(RejectCode.TenantQueueFull);
    expect(await pool.admit({ id: 'g', tenant: 't', band: 3 })).toBe('queued');
    expect(await pool.notices('r1')).toEqual(['shed|c', 'shed|e']);
    expect(await pool.notices('r2')).toEqual(['shed|b']);
    const snapshot = await pool.on().snapshot();
    expect(snapshot.waitingByBand).toEqual({ '-3': 1, '-1': 1, '0': 1, '3': 1 });
    expect(await pool.counters('t')).toEqual({
      shed: 3,
      outcomes: { evicted: 3 },
      rejected: { [RejectCode.TenantQueueFull]: 1 },
    });
    expect(await pool.on().cancel('c')).toEqual({ was: 'unknown' });
  });

  it('a full global queue sheds the pool-wide most sheddable request; a full band never sheds', async () => {
    const pool = getPool();
    await pool.setup({
      settings: {
        initialBudget: 0,
        queueTtlMs: 60_000,
        queueShedding: true,
        maxQueueDepth: 3,
        bandCapacity: 2,
      },
      tenants: [{ id: 'p' }, { id: 'q' }],
    });
    expect(await pool.admit({ id: 'p1', tenant: 'p', band: -1 })).toBe('queued');
    expect(await pool.admit({ id: 'q1', tenant: 'q', band: -2 })).toBe('queued');
    expect(await pool.admit({ id: 'p2', tenant: 'p', band: 0 })).toBe('queued');
    expect(await pool.admit({ id: 'q2', tenant: 'q', band: 1 })).toBe('queued');
    expect(await pool.admit({ id: 'p3', tenant: 'p', band: -3 })).toBe(RejectCode.GlobalQueueFull);
    expect(await pool.admit({ id: 'q3', tenant: 'q', band: 0 })).toBe('queued');
    expect(await pool.admit({ id: 'p4', tenant: 'p', band: 0 })).toBe(RejectCode.BandFull);
    expect(await pool.notices()).toEqual(['shed|q1', 'shed|p1']);
    const snapshot = await pool.on().snapshot();
    expect(snapshot.waiting).toBe(3);
    expect(snapshot.waitingByBand).toEqual({ '0': 2, '1': 1 });
    expect(await pool.counters('p')).toEqual({
      shed: 1,
      outcomes: { evicted: 1 },
      rejected: { [RejectCode.GlobalQueueFull]: 1, [RejectCode.BandFull]: 1 },
    });
    expect((await pool.counters('q')).shed).toBe(1);
  });

  it('without queueShedding a full queue rejects the arrival', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 0, queueTtlMs: 60_000 },
      tenants: [{ id: 't', queueMax: 1 }],
    });
    expect(await pool.admit({ id: 'a', tenant: 't', band: -3 })).toBe('queued');
    expect(await pool.admit({ id: 'b', tenant: 't', band: 4 })).toBe(RejectCode.TenantQueueFull);
    expect(await pool.notices()).toEqual([]);
  });

  it('a shed request gets its tokens back; cancelled, expired and granted requests are never victims', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 0, queueTtlMs: 60_000, queueShedding: true },
      tenants: [{ id: 't', queueMax: 3, tokenBucket: { capacity: 100, refillPerSecond: 0 } }],
    });
    const tokens = async () => (await pool.tenant('t')).tokens;
    await pool.enqueue({ id: 's1', tenant: 't', band: -1, tokens: 10 });
    await pool.enqueue({ id: 's2', tenant: 't', band: -1, tokens: 10 });
    await pool.enqueue({ id: 'e1', tenant: 't', band: -1, tokens: 10, ttlMs: 50 });
    expect(await tokens()).toBe(70);
    await pool.on().cancel('s1');
    await sleep(120);
    expect(await pool.notices()).toEqual(['expired|e1']);
    expect(await tokens()).toBe(90);
    for (const id of ['x', 'y', 'w']) {
      expect(await pool.admit({ id, tenant: 't', band: 0, tokens: 10 })).toBe('queued');
    }
    // w found the queue full and shed s2 (the only sheddable one left), refunding its tokens.
    expect(await pool.notices()).toEqual(['shed|s2']);
    expect(await tokens()).toBe(70);
    const fence = await pool.lead();
    await pool.on().setControl(fence, { budget: 2 });
    expect(await pool.notices()).toEqual(['grant|x|pod-a', 'grant|y|pod-a']);
    expect(await pool.admit({ id: 'v', tenant: 't', band: -1, tokens: 10 })).toBe('queued');
    expect(await pool.admit({ id: 'z', tenant: 't', band: 2, tokens: 10 })).toBe('queued');
    expect(await pool.admit({ id: 'zz', tenant: 't', band: 2, tokens: 10 })).toBe('queued');
    expect(await pool.notices()).toEqual(['shed|v']);
    expect((await pool.counters('t')).shed).toBe(2);
  });
}
