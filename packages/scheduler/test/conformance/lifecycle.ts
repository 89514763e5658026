import { expect, it } from 'vitest';
import { sleep } from '../support/pool.js';
import type { GetPool } from './index.js';

export function lifecycle(getPool: GetPool): void {
  it('a request past its queue TTL expires and its owner is told', async () => {
    const pool = getPool();
    await pool.setup({ settings: { initialBudget: 0, queueTtlMs: 150 }, tenants: [{ id: 't' }] });
    expect((await pool.enqueue({ id: 'short', tenant: 't' })).status).toBe('queued');
    expect((await pool.enqueue({ id: 'long', tenant: 't', ttlMs: 60_000 })).status).toBe('queued');
    await sleep(300);
    expect(await pool.on().poll('r1')).toEqual([{ kind: 'expired', id: 'short' }]);
    const snapshot = await pool.on().snapshot();
    expect(snapshot.waiting).toBe(1);
    expect(snapshot.counters[0]?.outcomes.expired).toBe(1);
    expect(await pool.on().cancel('long')).toEqual({ was: 'queued' });
  });

  it('an expired head is dropped when the pass reaches it, before the janitor does', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000 },
      tenants: [{ id: 't' }],
    });
    await pool.enqueue({ id: 'g', tenant: 't' });
    await pool.enqueue({ id: 'stale', tenant: 't', ttlMs: 50 });
    await pool.enqueue({ id: 'fresh', tenant: 't' });
    await sleep(120);
    await pool.on().release('g', { outcome: 'completed' });
    expect(await pool.on().poll('r1')).toEqual([
      { kind: 'expired', id: 'stale' },
      { kind: 'grant', id: 'fresh', pod: 'pod-a' },
    ]);
    await pool.on().release('fresh', { outcome: 'completed' });
  });

  it('cancel ends a queued request, and a granted one whose slot goes to the next', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000 },
      tenants: [{ id: 't' }],
    });
    await pool.enqueue({ id: 'g', tenant: 't' });
    await pool.enqueue({ id: 'q1', tenant: 't' });
    await pool.enqueue({ id: 'q2', tenant: 't' });
    expect(await pool.on().cancel('q1')).toEqual({ was: 'queued' });
    expect(await pool.on().cancel('g')).toEqual({ was: 'granted' });
    expect(await pool.on().poll('r1')).toEqual([{ kind: 'grant', id: 'q2', pod: 'pod-a' }]);
    expect(await pool.on().release('q2', { outcome: 'upstream_error' })).toEqual({
      was: 'granted',
    });
    const [row] = (await pool.on().snapshot()).counters;
    expect(row?.outcomes).toEqual({
      completed: 0,
      expired: 0,
      cancelled: 2,
      evicted: 0,
      upstream_error: 1,
    });
  });

  it('release of an unknown id is a no-op', async () => {
    const pool = getPool();
    await pool.setup({ settings: { initialBudget: 1 }, tenants: [{ id: 't' }] });
    await pool.enqueue({ id: 'g', tenant: 't' });
    const before = await pool.on().snapshot();
    expect(await pool.on().release('never-seen', { outcome: 'completed' })).toEqual({
      was: 'unknown',
    });
    const after = await pool.on().snapshot();
    expect(after.counters).toEqual(before.counters);
    expect(after.inflight).toBe(1);
    await pool.on().release('g', { outcome: 'completed' });
  });

  it('retried enqueue and release never count twice', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000 },
      tenants: [{ id: 't' }],
    });
    const first = await pool.enqueue({ id: 'g', tenant: 't' });
    expect(first).toEqual({ status: 'granted', pod: 'pod-a', retried: false });
    expect(await pool.enqueue({ id: 'g', tenant: 't' })).toEqual({ ...first, retried: true });
    expect(await pool.enqueue({ id: 'q', tenant: 't' })).toEqual({
      status: 'queued',
      retried: false,
    });
    expect(await pool.enqueue({ id: 'q', tenant: 't' })).toEqual({
      status: 'queued',
      retried: true,
    });
    const usage = { inputTokens: 100, outputTokens: 20 };
    expect(await pool.on().release('g', { outcome: 'completed', usage })).toEqual({
      was: 'granted',
    });
    expect(await pool.on().release('g', { outcome: 'completed', usage })).toEqual({
      was: 'unknown',
    });
    await pool.pollFor('r1', 1);
    await pool.on().release('q', { outcome: 'completed' });
    const [row] = (await pool.on().snapshot()).counters;
    expect(row).toMatchObject({ offered: 2, admitted: 2, inputTokens: 100, outputTokens: 20 });
    expect(row?.outcomes.completed).toBe(2);
  });
}
