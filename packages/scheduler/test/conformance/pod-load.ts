import { expect, it } from 'vitest';
import { sleep } from '../support/pool.js';
import type { GetPool } from './index.js';

/** reportPodLoad (the leader's scrape), saturation in the snapshot, and leader data. */
export function podLoad(getPool: GetPool): void {
  it('reportPodLoad is fenced, stamps the store clock, skips unknown pods; snapshot shows loads and saturation', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 10 },
      tenants: [{ id: 't' }],
      pods: [
        { name: 'pod-a', cap: 4 },
        { name: 'pod-b', cap: 4 },
      ],
    });
    const s = pool.on();
    let snapshot = await s.snapshot();
    expect(snapshot.pods.map((p) => p.load)).toEqual([null, null]);
    expect(snapshot.saturation).toBe(1);

    const load = { pod: 'pod-a', waiting: 2, running: 3, kvUtilization: 0.4 };
    expect(await s.reportPodLoad({ replica: 'leader', epoch: 1 }, [load])).toBe(false);
    expect((await s.snapshot()).pods[0]?.load).toBeNull();

    const fence = await pool.lead();
    const before = (await s.snapshot()).nowMs;
    expect(
      await s.reportPodLoad(fence, [
        load,
        { pod: 'pod-b', waiting: 0, running: 1, kvUtilization: 0.2 },
        { pod: 'pod-unknown', waiting: 9, running: 9, kvUtilization: 0.9 },
      ]),
    ).toBe(true);
    snapshot = await s.snapshot();
    expect(snapshot.pods.map((p) => p.name)).toEqual(['pod-a', 'pod-b']);
    const [a, b] = snapshot.pods;
    expect(a?.load).toMatchObject({ waiting: 2, running: 3, kvUtilization: 0.4 });
    expect(b?.load).toMatchObject({ waiting: 0, running: 1, kvUtilization: 0.2 });
    expect(a?.load?.scrapedAtMs).toBeGreaterThanOrEqual(before);
    expect(a?.load?.scrapedAtMs).toBeLessThanOrEqual(snapshot.nowMs);
    // mean(max(2/5, 0.4/0.8), max(0/5, 0.2/0.8)) = mean(0.5, 0.25)
    expect(snapshot.saturation).toBe(0.375);

    // Unhealthy pods leave the mean; thresholds come from the settings.
    await s.upsertPods([{ name: 'pod-b', cap: 4, healthy: false }]);
    expect((await s.snapshot()).saturation).toBe(0.5);
    await s.configure({ initialBudget: 10, saturation: { queueDepthThreshold: 1 } });
    expect((await s.snapshot()).saturation).toBe(2);
    // Pods keep their load through an upsert.
    expect((await s.snapshot()).pods[0]?.load?.waiting).toBe(2);
  });

  it('a scrape older than staleMs counts as saturated', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 10, saturation: { staleMs: 150 } },
      tenants: [{ id: 't' }],
    });
    const fence = await pool.lead();
    await pool.report(fence, [{ pod: 'pod-a', waiting: 1 }]);
    expect((await pool.on().snapshot()).saturation).toBeCloseTo(0.2, 12);
    await sleep(250);
    const snapshot = await pool.on().snapshot();
    expect(snapshot.saturation).toBe(1);
    expect(snapshot.pods[0]?.load?.waiting).toBe(1);
  });

  it('reportPodLoad refuses malformed loads naming the pod', async () => {
    const pool = getPool();
    await pool.setup({ tenants: [{ id: 't' }] });
    const fence = await pool.lead();
    await expect(
      pool.on().reportPodLoad(fence, [{ pod: 'pod-a', waiting: -1, running: 0, kvUtilization: 0 }]),
    ).rejects.toThrow(/pod pod-a: waiting/);
  });

  it('leader data: fenced writes, read by anyone, null when never written', async () => {
    const pool = getPool();
    const s = pool.on();
    expect(await s.getLeaderData('tuner')).toBeNull();
    expect(await s.setLeaderData({ replica: 'leader', epoch: 1 }, 'tuner', '{"a":1}')).toBe(false);
    const fence = await pool.lead();
    expect(await s.setLeaderData(fence, 'tuner', '{"alpha":1.5}')).toBe(true);
    expect(await s.setLeaderData(fence, 'other', '')).toBe(true);
    expect(await pool.on('r2').getLeaderData('tuner')).toBe('{"alpha":1.5}');
    expect(await s.getLeaderData('other')).toBe('');
    expect(await s.setLeaderData({ ...fence, epoch: fence.epoch + 1 }, 'tuner', 'x')).toBe(false);
    expect(await s.getLeaderData('tuner')).toBe('{"alpha":1.5}');
    await expect(s.setLeaderData(fence, 'a|b', 'x')).rejects.toThrow(/leader data field/);
  });
}
