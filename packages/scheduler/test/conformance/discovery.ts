import { expect, it } from 'vitest';
import type { GetPool } from './index.js';

/** syncPods (the leader's write of the discovered pod set) and setPodHealth. */
export function discoveredPods(getPool: GetPool): void {
  const pods = async (pool: ReturnType<GetPool>) =>
    (await pool.on().snapshot()).pods.map((p) => ({
      name: p.name,
      cap: p.cap,
      healthy: p.healthy,
      leaving: p.leaving,
      inflight: p.inflight,
    }));

  it('syncPods is fenced, adds discovered pods beside the config ones and never touches those', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 100 },
      tenants: [{ id: 't' }],
      pods: [{ name: 'static', cap: 2 }],
    });
    const s = pool.on();
    const listed = [
      { name: '10.0.0.1:8000', cap: 4, healthy: true },
      { name: '10.0.0.2:8000', cap: 4, healthy: false },
    ];
    expect(await s.syncPods({ replica: 'leader', epoch: 1 }, listed)).toBe(false);
    expect((await pods(pool)).map((p) => p.name)).toEqual(['static']);

    const fence = await pool.lead();
    expect(await s.syncPods(fence, listed)).toBe(true);
    expect(await pods(pool)).toEqual([
      { name: '10.0.0.1:8000', cap: 4, healthy: true, leaving: false, inflight: 0 },
      { name: '10.0.0.2:8000', cap: 4, healthy: false, leaving: false, inflight: 0 },
      { name: 'static', cap: 2, healthy: true, leaving: false, inflight: 0 },
    ]);
    // A replica's check turns a known pod healthy; a sync keeps the replicas' health and
    // follows the listed cap.
    await s.setPodHealth([{ name: '10.0.0.2:8000', healthy: true }]);
    expect(
      await s.syncPods(fence, [
        { name: '10.0.0.1:8000', cap: 6, healthy: false },
        { name: '10.0.0.2:8000', cap: 4, healthy: false },
      ]),
    ).toBe(true);
    expect((await pods(pool)).map((p) => [p.name, p.cap, p.healthy])).toEqual([
      ['10.0.0.1:8000', 6, true],
      ['10.0.0.2:8000', 4, true],
      ['static', 2, true],
    ]);
    // An empty listing removes every discovered pod (none holds a request), not the config's.
    expect(await s.syncPods(fence, [])).toBe(true);
    expect((await pods(pool)).map((p) => p.name)).toEqual(['static']);
  });

  it('a pod that leaves loses its LoRA adapters: back under the same name it holds none', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 100, lora: { enabled: true, load: false } },
      tenants: [{ id: 't' }],
      pods: [{ name: 'static', cap: 2 }],
    });
    const s = pool.on();
    const fence = await pool.lead();
    const ip = { name: '10.0.0.1:8000', cap: 4, healthy: true };
    expect(await s.syncPods(fence, [ip])).toBe(true);
    await s.reportPodAdapters([{ pod: ip.name, adapters: ['x'], slots: 2 }], 60_000);
    await s.setPodHealth([{ name: 'static', healthy: true }]);
    const adapterRequest = async (id: string) => {
      const result = await s.enqueue({ id, tenant: 't', band: 0, replica: 'r', adapter: 'x' });
      expect(result.status).toBe('granted');
      await s.release(id, { outcome: 'completed' });
      return (result as { pod: string }).pod;
    };
    // x only on the discovered pod, the busier one.
    await s.enqueue({ id: 'busy', tenant: 't', band: 0, replica: 'r', podHint: ip.name });
    expect(await adapterRequest('x1')).toBe(ip.name);
    await s.release('busy', { outcome: 'completed' });
    // It leaves and comes back: held nowhere now, x goes to the least loaded by name order.
    expect(await s.syncPods(fence, [])).toBe(true);
    expect(await s.syncPods(fence, [ip])).toBe(true);
    await s.enqueue({ id: 'busy-ip', tenant: 't', band: 0, replica: 'r', podHint: ip.name });
    expect(await adapterRequest('x2')).toBe('static');
    await s.release('busy-ip', { outcome: 'completed' });
  });

  it('a pod that leaves gets no new grant, finishes what it holds, then goes; one that comes back serves again', async () => {
    const pool = getPool();
    await pool.setup({ settings: { initialBudget: 100 }, tenants: [{ id: 't' }], pods: [] });
    const s = pool.on();
    const fence = await pool.lead();
    const a = { name: '10.0.0.1:8000', cap: 1, healthy: true };
    const b = { name: '10.0.0.2:8000', cap: 1, healthy: true };
    await s.syncPods(fence, [a, b]);
    const first = await pool.enqueue({ id: 'r1', tenant: 't', podHint: a.name });
    expect(first).toMatchObject({ status: 'granted', pod: a.name });

    await s.syncPods(fence, [b]);
    expect((await pods(pool)).find((p) => p.name === a.name)).toMatchObject({
      leaving: true,
      healthy: false,
      inflight: 1,
    });
    // A replica's health check cannot bring a leaving pod back.
    await s.setPodHealth([{ name: a.name, healthy: true }]);
    expect((await pods(pool)).find((p) => p.name === a.name)?.healthy).toBe(false);
    // b takes the next request, then nothing has room: the third waits.
    expect(await pool.enqueue({ id: 'r2', tenant: 't', podHint: a.name })).toMatchObject({
      status: 'granted',
      pod: b.name,
    });
    expect((await pool.enqueue({ id: 'r3', tenant: 't' })).status).toBe('queued');
    // a's request ends: a is deleted at the next sync, and r2's release grants r3 on b.
    await s.release('r1', { outcome: 'completed' });
    await s.syncPods(fence, [b]);
    expect((await pods(pool)).map((p) => p.name)).toEqual([b.name]);
    expect(await pool.releaseAndCollect('r2')).toEqual(['r3']);

    // a comes back: it joins with the health the listing gives.
    await s.syncPods(fence, [a, b]);
    expect((await pods(pool)).map((p) => [p.name, p.healthy, p.leaving])).toEqual([
      [a.name, true, false],
      [b.name, true, false],
    ]);
    expect(await pool.enqueue({ id: 'r4', tenant: 't' })).toMatchObject({
      status: 'granted',
      pod: a.name,
    });
    await s.release('r3', { outcome: 'completed' });
    await s.release('r4', { outcome: 'completed' });
  });

  it('a leaving pod that is listed again before its requests end stays, healthy and not leaving', async () => {
    const pool = getPool();
    await pool.setup({ settings: { initialBudget: 100 }, tenants: [{ id: 't' }], pods: [] });
    const s = pool.on();
    const fence = await pool.lead();
    const a = { name: '10.0.0.1:8000', cap: 2, healthy: true };
    await s.syncPods(fence, [a]);
    expect((await pool.enqueue({ id: 'r1', tenant: 't' })).status).toBe('granted');
    await s.syncPods(fence, []);
    expect((await pods(pool))[0]).toMatchObject({ leaving: true, inflight: 1 });
    await s.syncPods(fence, [a]);
    expect((await pods(pool))[0]).toMatchObject({ leaving: false, healthy: true, inflight: 1 });
    await s.release('r1', { outcome: 'completed' });
  });

  it('setPodHealth never creates a pod', async () => {
    const pool = getPool();
    await pool.setup({ tenants: [{ id: 't' }], pods: [{ name: 'static', cap: 2 }] });
    const s = pool.on();
    await s.setPodHealth([
      { name: 'static', healthy: false },
      { name: 'unknown', healthy: true },
    ]);
    expect(await pods(pool)).toEqual([
      { name: 'static', cap: 2, healthy: false, leaving: false, inflight: 0 },
    ]);
    await expect(s.setPodHealth([{ name: 'bad name', healthy: true }])).rejects.toThrow(/pod/);
  });
}
