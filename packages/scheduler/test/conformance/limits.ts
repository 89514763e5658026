import { RejectCode } from '@fairgate/core';
import { expect, it } from 'vitest';
import type { EnqueueResult, LimitsStanding } from '../../src/index.js';
import type { GetPool } from './index.js';

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

/** The standing without its reset times (checked on their own: they follow the clock). */
function left(result: EnqueueResult | { standing: LimitsStanding | null }) {
  const standing = 'standing' in result ? result.standing : result.limits;
  return {
    requests: standing?.requests ? [standing.requests.limit, standing.requests.remaining] : null,
    tokens: standing?.tokens ? [standing.tokens.limit, standing.tokens.remaining] : null,
  };
}

/** A tenant's budgets (tokens per UTC day or month) and rate (requests per UTC minute). */
export function tenantLimits(getPool: GetPool): void {
  it("requests per minute: the minute's requests pass, the next is rate_limited until the minute ends", async () => {
    const pool = getPool();
    await pool.setup({ tenants: [{ id: 't', limits: { requestsPerMinute: 3 } }] });
    const remaining: number[] = [];
    for (const id of ['a', 'b', 'c']) {
      const result = await pool.enqueue({ id, tenant: 't' });
      expect(result.status).toBe('granted');
      remaining.push(result.status === 'granted' ? result.limits!.requests!.remaining : -1);
      expect(result.status === 'granted' && result.limits?.tokens).toBeNull();
    }
    expect(remaining).toEqual([2, 1, 0]);
    const refused = await pool.enqueue({ id: 'd', tenant: 't' });
    expect(refused).toMatchObject({
      status: 'rejected',
      code: RejectCode.RateLimited,
      limit: 'requests',
    });
    const retryAfterMs = refused.status === 'rejected' ? refused.retryAfterMs! : 0;
    expect(retryAfterMs).toBeGreaterThan(0);
    expect(retryAfterMs).toBeLessThanOrEqual(MINUTE_MS);
    expect(refused.status === 'rejected' && refused.limits?.requests?.resetMs).toBe(retryAfterMs);
    // A release does not give a request back.
    await pool.on().release('a', { outcome: 'completed' });
    expect(await pool.admit({ id: 'e', tenant: 't' })).toBe(RejectCode.RateLimited);
    expect((await pool.counters('t')).rejected).toEqual({ [RejectCode.RateLimited]: 2 });
  });

  it('tokens per day: each admission reserves its estimate, trued up to the usage at release; a spent day is budget_exhausted until it ends', async () => {
    const pool = getPool();
    await pool.setup({ tenants: [{ id: 't', limits: { tokensPerDay: 100 } }] });
    const a = await pool.enqueue({ id: 'a', tenant: 't', budgetTokens: 40 });
    expect(left(a)).toEqual({ requests: null, tokens: [100, 60] });
    await pool.on().release('a', {
      outcome: 'completed',
      usage: { inputTokens: 10, outputTokens: 5 },
    });
    expect(left(await pool.tenant('t'))).toEqual({ requests: null, tokens: [100, 85] });
    // Admitted while anything is left: b leaves 5, c goes over by 5.
    expect(left(await pool.enqueue({ id: 'b', tenant: 't', budgetTokens: 80 }))).toEqual({
      requests: null,
      tokens: [100, 5],
    });
    expect(left(await pool.enqueue({ id: 'c', tenant: 't', budgetTokens: 10 }))).toEqual({
      requests: null,
      tokens: [100, 0],
    });
    const refused = await pool.enqueue({ id: 'd', tenant: 't', budgetTokens: 1 });
    expect(refused).toMatchObject({
      status: 'rejected',
      code: RejectCode.BudgetExhausted,
      limit: 'tokens',
    });
    const retryAfterMs = refused.status === 'rejected' ? refused.retryAfterMs! : 0;
    expect(retryAfterMs).toBeGreaterThan(0);
    expect(retryAfterMs).toBeLessThanOrEqual(DAY_MS);
    // The reset is the end of the UTC day (this clock and Redis's agree to a few seconds).
    expect(
      Math.abs(Date.now() + retryAfterMs - (Math.floor(Date.now() / DAY_MS) + 1) * DAY_MS),
    ).toBeLessThan(5_000);
    // b used less than it reserved: the difference comes back and admits again.
    await pool.on().release('b', {
      outcome: 'completed',
      usage: { inputTokens: 20, outputTokens: 10 },
    });
    expect(left(await pool.tenant('t'))).toEqual({ requests: null, tokens: [100, 45] });
    // Without a usage report the estimate stands.
    await pool.on().release('c', { outcome: 'upstream_error' });
    expect(left(await pool.tenant('t'))).toEqual({ requests: null, tokens: [100, 45] });
    expect(await pool.admit({ id: 'e', tenant: 't', budgetTokens: 50 })).toBe('pod-a');
    expect(left(await pool.tenant('t'))).toEqual({ requests: null, tokens: [100, 0] });
    expect((await pool.counters('t')).rejected).toEqual({ [RejectCode.BudgetExhausted]: 1 });
  });

  it('a request that never gets a slot gives its reservation back; a full queue also gives its request back', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 0, queueTtlMs: 60_000 },
      tenants: [{ id: 't', queueMax: 1, limits: { tokensPerDay: 1_000, requestsPerMinute: 10 } }],
    });
    const queued = await pool.enqueue({ id: 'a', tenant: 't', budgetTokens: 300 });
    expect(queued.status).toBe('queued');
    expect(left(queued)).toEqual({ requests: [10, 9], tokens: [1_000, 700] });
    const full = await pool.enqueue({ id: 'b', tenant: 't', budgetTokens: 200 });
    expect(full).toMatchObject({ status: 'rejected', code: RejectCode.TenantQueueFull });
    expect(left(full)).toEqual({ requests: [10, 9], tokens: [1_000, 700] });
    // A queued request released with usage is given back in full (it never ran).
    await pool.on().release('a', {
      outcome: 'cancelled',
      usage: { inputTokens: 5, outputTokens: 5 },
    });
    expect(left(await pool.tenant('t'))).toEqual({ requests: [10, 9], tokens: [1_000, 1_000] });
    expect(await pool.admit({ id: 'c', tenant: 't', budgetTokens: 400, ttlMs: 50 })).toBe('queued');
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(await pool.notices()).toEqual(['expired|c']);
    expect(left(await pool.tenant('t'))).toEqual({ requests: [10, 8], tokens: [1_000, 1_000] });
  });

  it('the tighter token window binds the standing; a retry of a live id counts nothing', async () => {
    const pool = getPool();
    await pool.setup({
      tenants: [{ id: 't', limits: { tokensPerDay: 1_000, tokensPerMonth: 500 } }],
    });
    const a = await pool.enqueue({ id: 'a', tenant: 't', budgetTokens: 100 });
    expect(left(a)).toEqual({ requests: null, tokens: [500, 400] });
    expect(await pool.enqueue({ id: 'a', tenant: 't', budgetTokens: 100 })).toEqual({
      status: 'granted',
      pod: 'pod-a',
      retried: true,
    });
    const resetMs = a.status === 'granted' ? a.limits!.tokens!.resetMs : 0;
    expect(resetMs).toBeGreaterThan(0);
    expect(resetMs).toBeLessThanOrEqual(31 * DAY_MS);
    await pool.on().release('a', {
      outcome: 'completed',
      usage: { inputTokens: 450, outputTokens: 100 },
    });
    // The month is over by 50: spent, while the day has 450 left.
    expect(left(await pool.tenant('t'))).toEqual({ requests: null, tokens: [500, 0] });
    expect(await pool.admit({ id: 'b', tenant: 't', budgetTokens: 1 })).toBe(
      RejectCode.BudgetExhausted,
    );
  });

  it('a handover settles the finished request and counts the next without a check, answering the standing', async () => {
    const pool = getPool();
    await pool.setup({
      tenants: [{ id: 't', limits: { requestsPerMinute: 2, tokensPerDay: 100 } }],
    });
    expect(await pool.admit({ id: 'a', tenant: 't', budgetTokens: 60 })).toBe('pod-a');
    const b = await pool.handover(
      'a',
      { id: 'b', tenant: 't', budgetTokens: 50 },
      { outcome: 'completed', usage: { inputTokens: 10, outputTokens: 10 } },
    );
    expect(b).toMatchObject({ handedOver: true, pod: 'pod-a', contended: false });
    expect(left({ standing: b.handedOver ? (b.limits ?? null) : null })).toEqual({
      requests: [2, 0],
      tokens: [100, 30],
    });
    // Past the rate and the budget: counted all the same (it already runs on the pod).
    const c = await pool.handover('b', { id: 'c', tenant: 't', budgetTokens: 50 });
    expect(left({ standing: c.handedOver ? (c.limits ?? null) : null })).toEqual({
      requests: [2, 0],
      tokens: [100, 0],
    });
    expect(await pool.admit({ id: 'd', tenant: 't' })).toBe(RejectCode.BudgetExhausted);
    expect(await pool.on().release('c', { outcome: 'completed' })).toEqual({ was: 'granted' });
  });

  it('an update keeps the counts; removing the limits frees the tenant', async () => {
    const pool = getPool();
    await pool.setup({ tenants: [{ id: 't', limits: { requestsPerMinute: 2 } }] });
    expect(await pool.admit({ id: 'a', tenant: 't' })).toBe('pod-a');
    await pool.on().upsertTenants([{ id: 't', limits: { requestsPerMinute: 3 } }]);
    expect(left(await pool.tenant('t'))).toEqual({ requests: [3, 2], tokens: null });
    expect(await pool.admit({ id: 'c', tenant: 't' })).toBe('pod-a');
    expect(await pool.admit({ id: 'd', tenant: 't' })).toBe('pod-a');
    expect(await pool.admit({ id: 'e', tenant: 't' })).toBe(RejectCode.RateLimited);
    await pool.on().upsertTenants([{ id: 't', limits: null }]);
    expect((await pool.tenant('t')).standing).toBeNull();
    const free = await pool.enqueue({ id: 'f', tenant: 't' });
    expect(free).toEqual({ status: 'granted', pod: 'pod-a', retried: false });
    expect((await pool.tenant('t')).limits).toEqual({
      tokensPerDay: null,
      tokensPerMonth: null,
      requestsPerMinute: null,
    });
  });
}
