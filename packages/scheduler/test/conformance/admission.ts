import { RejectCode } from '@fairgate/core';
import { expect, it } from 'vitest';
import { sleep } from '../support/pool.js';
import type { GetPool } from './index.js';

/** Admission policies at enqueue (settings.admission), both implementations. */
export function admissionPolicies(getPool: GetPool): void {
  it('always-admit (the default) admits every priority, whatever the load', async () => {
    const pool = getPool();
    await pool.setup({ settings: { initialBudget: 10 }, tenants: [{ id: 't' }] });
    expect((await pool.on().snapshot()).settings?.admission.policy).toBe('always-admit');
    const fence = await pool.lead();
    await pool.report(fence, [{ pod: 'pod-a', waiting: 500, running: 500, kvUtilization: 1 }]);
    expect(await pool.admit({ id: 'low', tenant: 't', band: -3 })).toBe('pod-a');
    expect(await pool.admit({ id: 'high', tenant: 't', band: 4 })).toBe('pod-a');
  });

  it('reject-all refuses everything after the no-healthy-pod check, counted by code', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 10, admission: { policy: 'reject-all' } },
      tenants: [{ id: 't' }],
    });
    expect(await pool.admit({ id: 'a', tenant: 't', band: 4 })).toBe(RejectCode.RejectedByPolicy);
    await pool.on().upsertPods([{ name: 'pod-a', cap: 10, healthy: false }]);
    expect(await pool.admit({ id: 'b', tenant: 't', band: 4 })).toBe(RejectCode.NoHealthyPod);
    expect((await pool.counters('t')).rejected).toEqual({
      [RejectCode.RejectedByPolicy]: 1,
      [RejectCode.NoHealthyPod]: 1,
    });
  });

  it('the policy comes before never-fitting quotas and the token bucket, which it leaves alone', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 10, admission: { policy: 'reject-all' } },
      tenants: [
        { id: 'never', maxConcurrent: 0 },
        { id: 'bucket', tokenBucket: { capacity: 10, refillPerSecond: 0 } },
      ],
    });
    expect(await pool.admit({ id: 'n', tenant: 'never' })).toBe(RejectCode.RejectedByPolicy);
    expect(await pool.admit({ id: 'b', tenant: 'bucket', tokens: 50 })).toBe(
      RejectCode.RejectedByPolicy,
    );
    expect((await pool.tenant('bucket')).tokens).toBe(10);
  });

  it('tier-shed: a pod over the threshold (gateway in-flight) sheds priorities below the minimum', async () => {
    const pool = getPool();
    await pool.setup({
      settings: {
        initialBudget: 10,
        queueTtlMs: 60_000,
        admission: { policy: 'tier-shed', tierShedThreshold: 2, tierShedMinPriority: 3 },
      },
      tenants: [{ id: 't' }],
      pods: [
        { name: 'pod-a', cap: 3 },
        { name: 'pod-b', cap: 10 },
      ],
    });
    // Least-loaded placement (in-flight / cap): pod-a 1, pod-b 2; a load of 2 is not above 2.
    for (const id of ['c1', 'c2', 'c3']) {
      expect(await pool.admit({ id, tenant: 't', band: 4 })).not.toBe('queued');
    }
    expect(await pool.admit({ id: 'low1', tenant: 't', band: -1 })).toMatch(/^pod-/);
    // Now a pod holds 3 > 2: below priority 3 is shed, 3 and above pass.
    const shed = await pool.enqueue({ id: 'low2', tenant: 't', band: 2 });
    expect(shed).toEqual({ status: 'rejected', code: RejectCode.ShedByTier });
    expect(await pool.admit({ id: 'batch', tenant: 't', band: -1 })).toBe(RejectCode.ShedByTier);
    expect(await pool.admit({ id: 'std', tenant: 't', band: 3 })).toMatch(/^pod-/);
    const loads = (await pool.on().snapshot()).pods.map((p) => p.inflight);
    expect(Math.max(...loads)).toBeGreaterThan(2);
    for (const id of ['c1', 'c2', 'c3', 'low1', 'std']) {
      await pool.on().release(id, { outcome: 'completed' });
    }
    expect(await pool.admit({ id: 'low3', tenant: 't', band: -3 })).toMatch(/^pod-/);
    expect((await pool.counters('t')).rejected).toEqual({ [RejectCode.ShedByTier]: 2 });
  });

  it('tier-shed reads fresh scrapes (running + waiting) and ignores stale ones', async () => {
    const pool = getPool();
    await pool.setup({
      settings: {
        initialBudget: 10,
        admission: { policy: 'tier-shed', tierShedThreshold: 3, tierShedMinPriority: 0 },
        saturation: { staleMs: 300 },
      },
      tenants: [{ id: 't' }],
    });
    const fence = await pool.lead();
    await pool.report(fence, [{ pod: 'pod-a', waiting: 2, running: 1 }]);
    expect(await pool.admit({ id: 'a', tenant: 't', band: -1 })).toBe('pod-a');
    await pool.on().release('a', { outcome: 'completed' });
    await pool.report(fence, [{ pod: 'pod-a', waiting: 2, running: 2 }]);
    expect(await pool.admit({ id: 'b', tenant: 't', band: -1 })).toBe(RejectCode.ShedByTier);
    expect(await pool.admit({ id: 'c', tenant: 't', band: 0 })).toBe('pod-a');
    await pool.on().release('c', { outcome: 'completed' });
    await sleep(450);
    expect(await pool.admit({ id: 'd', tenant: 't', band: -1 })).toBe('pod-a');
  });

  it('gaie-legacy rejects sheddable requests while saturation >= 1; unknown or stale counts 1', async () => {
    const pool = getPool();
    await pool.setup({
      settings: {
        initialBudget: 10,
        admission: { policy: 'gaie-legacy' },
        saturation: { staleMs: 300 },
      },
      tenants: [{ id: 't' }],
      pods: [
        { name: 'pod-a', cap: 10 },
        { name: 'pod-b', cap: 10 },
      ],
    });
    const admitBoth = async (tag: string) => {
      const sheddable = await pool.admit({ id: `s-${tag}`, tenant: 't', band: -1 });
      const protectedClass = await pool.admit({ id: `p-${tag}`, tenant: 't', band: 0 });
      for (const id of [`s-${tag}`, `p-${tag}`])
        await pool.on().release(id, { outcome: 'completed' });
      return [sheddable, protectedClass];
    };
    // Never scraped: saturation 1.0, so sheddable requests are refused, protected ones pass.
    expect((await pool.on().snapshot()).saturation).toBe(1);
    expect(await admitBoth('unknown')).toEqual([RejectCode.Saturated, 'pod-a']);
    const fence = await pool.lead();
    // mean(max(0/5, 0.4/0.8), max(1/5, 0)) = mean(0.5, 0.2) = 0.35
    await pool.report(fence, [
      { pod: 'pod-a', kvUtilization: 0.4 },
      { pod: 'pod-b', waiting: 1 },
    ]);
    expect(await admitBoth('calm')).toEqual(['pod-a', 'pod-b']);
    // mean(2.0, 0) = 1.0: saturated.
    await pool.report(fence, [
      { pod: 'pod-a', waiting: 10 },
      { pod: 'pod-b', waiting: 0 },
    ]);
    expect(await admitBoth('busy')).toEqual([RejectCode.Saturated, 'pod-a']);
    // An unhealthy pod leaves the mean: only pod-b (0) counts.
    await pool.on().upsertPods([{ name: 'pod-a', cap: 10, healthy: false }]);
    expect(await admitBoth('one-pod')).toEqual(['pod-b', 'pod-b']);
    await pool.on().upsertPods([{ name: 'pod-a', cap: 10, healthy: true }]);
    await sleep(450);
    expect((await pool.on().snapshot()).saturation).toBe(1);
    expect(await admitBoth('stale')).toEqual([RejectCode.Saturated, 'pod-a']);
    expect((await pool.counters('t')).rejected).toEqual({ [RejectCode.Saturated]: 3 });
  });
}
