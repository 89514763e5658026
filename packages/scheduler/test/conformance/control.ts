import { expect, it } from 'vitest';
import { sleep } from '../support/pool.js';
import type { GetPool } from './index.js';

export function controlPlane(getPool: GetPool): void {
  it('leadership: one holder, epochs increase, renew and release need the current fence', async () => {
    const pool = getPool();
    const s = pool.on();
    expect(await s.acquireLeadership('ra', 60_000)).toEqual({ leader: true, epoch: 1 });
    expect(await s.acquireLeadership('ra', 60_000)).toEqual({ leader: true, epoch: 1 });
    const follower = await s.acquireLeadership('rb', 60_000);
    expect(follower).toMatchObject({ leader: false, epoch: 1, holder: 'ra' });
    // What is left of the holder's lease, so a follower can retry the moment it lapses.
    const left = follower.leader ? -1 : follower.expiresInMs;
    expect(left).toBeGreaterThan(55_000);
    expect(left).toBeLessThanOrEqual(60_000);
    expect(await s.renewLeadership({ replica: 'ra', epoch: 1 }, 60_000)).toBe(true);
    expect(await s.renewLeadership({ replica: 'rb', epoch: 1 }, 60_000)).toBe(false);
    expect(await s.releaseLeadership({ replica: 'rb', epoch: 1 })).toBe(false);
    expect(await s.releaseLeadership({ replica: 'ra', epoch: 1 })).toBe(true);
    expect(await s.acquireLeadership('rb', 150)).toEqual({ leader: true, epoch: 2 });
    await sleep(250);
    expect(await s.renewLeadership({ replica: 'rb', epoch: 2 }, 60_000)).toBe(false);
    expect(await s.acquireLeadership('ra', 60_000)).toEqual({ leader: true, epoch: 3 });
    const snapshot = await s.snapshot();
    expect([snapshot.leader, snapshot.epoch]).toEqual(['ra', 3]);
  });

  it('a new leadership starts above the epoch floor the caller has seen (state lost)', async () => {
    const pool = getPool();
    const s = pool.on();
    // [replica, floor, expected epoch]: the epoch never goes back, and a floor at or below
    // the stored epoch changes nothing.
    const steps: Array<[string, number, number]> = [
      ['ra', 7, 8],
      ['rb', 3, 9],
      ['rc', 9, 10],
      ['rd', 20, 21],
    ];
    for (const [replica, floor, epoch] of steps) {
      expect(await s.acquireLeadership(replica, 60_000, floor)).toEqual({ leader: true, epoch });
      // Renewing while holding keeps the epoch whatever the floor.
      expect(await s.acquireLeadership(replica, 60_000, floor + 100)).toEqual({
        leader: true,
        epoch,
      });
      expect(await s.releaseLeadership({ replica, epoch })).toBe(true);
    }
    expect((await s.snapshot()).epoch).toBe(21);
    // A write fenced by a pre-floor epoch of the same replica is refused.
    expect(await s.acquireLeadership('ra', 60_000, 21)).toEqual({ leader: true, epoch: 22 });
    expect(await s.setControl({ replica: 'ra', epoch: 8 }, { budget: 5 })).toBe(false);
    expect(await s.setControl({ replica: 'ra', epoch: 22 }, { budget: 5 })).toBe(true);
  });

  it('configure in seed mode writes only into a pool without settings', async () => {
    const pool = getPool();
    const s = pool.on();
    await s.configure({ initialBudget: 3, quantum: 7 }, { mode: 'seed', configHash: 'a' });
    expect((await s.snapshot()).settings?.quantum).toBe(7);
    await s.configure({ initialBudget: 9, quantum: 9 }, { mode: 'seed', configHash: 'b' });
    const seeded = await s.snapshot();
    expect([seeded.settings?.quantum, seeded.budget]).toEqual([7, 3]);
    await s.configure({ initialBudget: 9, quantum: 9 }, { mode: 'replace', configHash: 'b' });
    const replaced = await s.snapshot();
    expect([replaced.settings?.quantum, replaced.budget]).toEqual([9, 3]);
  });

  it('controller writes are fenced by the epoch; a raised budget dispatches on the next poll', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000 },
      tenants: [{ id: 't' }],
    });
    const s = pool.on();
    await pool.enqueue({ id: 'a', tenant: 't' });
    await pool.enqueue({ id: 'b', tenant: 't' });
    const old = await s.acquireLeadership('ra', 100);
    expect(old.leader).toBe(true);
    await sleep(200);
    const current = await s.acquireLeadership('rb', 60_000);
    expect(current).toEqual({ leader: true, epoch: 2 });
    expect(await s.setControl({ replica: 'ra', epoch: 1 }, { budget: 50 })).toBe(false);
    expect(await s.setControl({ replica: 'ra', epoch: 1 }, { state: '{"cap":9}' })).toBe(false);
    expect(await s.setControl({ replica: 'rb', epoch: 2 }, { budget: 2 })).toBe(true);
    expect(await s.setControl({ replica: 'rb', epoch: 2 }, { state: '{"cap":2}' })).toBe(true);
    const snapshot = await s.snapshot();
    expect([snapshot.budget, snapshot.controllerState]).toEqual([2, '{"cap":2}']);
    expect(await s.poll('r1')).toEqual([{ kind: 'grant', id: 'b', pod: 'pod-a' }]);
    // configure() again (a replica restarting) keeps the controller's budget.
    await s.configure({ initialBudget: 1, queueTtlMs: 60_000 });
    expect((await s.snapshot()).budget).toBe(2);
    await s.release('a', { outcome: 'completed' });
    await s.release('b', { outcome: 'completed' });
  });

  it('setControl writes budget and state together, only for the current fence', async () => {
    const pool = getPool();
    await pool.setup({ settings: { initialBudget: 3 }, tenants: [{ id: 't' }] });
    const s = pool.on();
    const { epoch } = (await s.acquireLeadership('ra', 60_000)) as { epoch: number };
    expect(await s.setControl({ replica: 'rb', epoch }, { budget: 9, state: 'x' })).toBe(false);
    expect(await s.setControl({ replica: 'ra', epoch: epoch + 1 }, { budget: 9 })).toBe(false);
    expect([(await s.snapshot()).budget, (await s.snapshot()).controllerState]).toEqual([3, null]);
    expect(await s.setControl({ replica: 'ra', epoch }, { budget: 12, state: '{"cap":6}' })).toBe(
      true,
    );
    let snapshot = await s.snapshot();
    expect([snapshot.budget, snapshot.controllerState]).toEqual([12, '{"cap":6}']);
    expect(await s.setControl({ replica: 'ra', epoch }, { state: '{"cap":7}' })).toBe(true);
    expect(await s.setControl({ replica: 'ra', epoch }, { budget: 5 })).toBe(true);
    snapshot = await s.snapshot();
    expect([snapshot.budget, snapshot.controllerState]).toEqual([5, '{"cap":7}']);
    await expect(s.setControl({ replica: 'ra', epoch }, { state: '' })).rejects.toThrow(TypeError);
    await expect(s.setControl({ replica: 'ra', epoch }, { budget: -1 })).rejects.toThrow();
  });

  it("a raised budget is granted by the write's own pass, before anyone polls", async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000 },
      tenants: [{ id: 't' }],
    });
    expect(await pool.admit({ id: 'g', tenant: 't' })).toBe('pod-a');
    for (const id of ['w1', 'w2']) expect(await pool.admit({ id, tenant: 't' })).toBe('queued');
    const s = pool.on('rb');
    const { epoch } = (await s.acquireLeadership('rb', 60_000)) as { epoch: number };
    expect(await s.setControl({ replica: 'rb', epoch }, { state: '{"cap":1}' })).toBe(true);
    expect(await pool.popped()).toEqual([]); // no budget written: no pass
    expect(await s.setControl({ replica: 'rb', epoch }, { budget: 2 })).toBe(true);
    expect(await pool.popped()).toEqual(['grant|w1|pod-a']);
  });

  it('takeInflightPeak: the most in flight at once since the last take, fenced', async () => {
    const pool = getPool();
    await pool.setup({ settings: { initialBudget: 10 }, tenants: [{ id: 't' }] });
    const s = pool.on();
    const { epoch } = (await s.acquireLeadership('ra', 60_000)) as { epoch: number };
    const fence = { replica: 'ra', epoch };
    expect(await s.takeInflightPeak(fence)).toBe(0);
    for (const id of ['a', 'b', 'c', 'd']) await pool.enqueue({ id, tenant: 't' });
    await s.release('a', { outcome: 'completed' });
    await s.release('b', { outcome: 'completed' });
    await s.release('c', { outcome: 'completed' });
    // A stale fence reads nothing and resets nothing.
    expect(await s.takeInflightPeak({ replica: 'rb', epoch })).toBeNull();
    expect(await s.takeInflightPeak({ replica: 'ra', epoch: epoch + 1 })).toBeNull();
    expect(await s.takeInflightPeak(fence)).toBe(4);
    // Restarted from the current in-flight (d is still running).
    expect(await s.takeInflightPeak(fence)).toBe(1);
    await pool.enqueue({ id: 'e', tenant: 't' });
    await s.release('d', { outcome: 'completed' });
    await s.release('e', { outcome: 'completed' });
    expect(await s.takeInflightPeak(fence)).toBe(2);
    expect(await s.takeInflightPeak(fence)).toBe(0);
  });

  it('the in-flight peak counts grants made by a dispatch pass too', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000 },
      tenants: [{ id: 't' }],
    });
    const s = pool.on();
    const { epoch } = (await s.acquireLeadership('ra', 60_000)) as { epoch: number };
    const fence = { replica: 'ra', epoch };
    for (const id of ['a', 'b', 'c']) await pool.enqueue({ id, tenant: 't' });
    expect(await s.setControl(fence, { budget: 3 })).toBe(true);
    expect(await pool.pollFor('r1', 2)).toHaveLength(2);
    for (const id of ['a', 'b', 'c']) await s.release(id, { outcome: 'completed' });
    expect(await s.takeInflightPeak(fence)).toBe(3);
  });

  it('latency counts from several flushes merge over the window', async () => {
    const pool = getPool();
    const s = pool.on();
    await s.flushLatency(
      new Map([
        [3, 5],
        [10, 1],
      ]),
    );
    await pool.on('r2').flushLatency(
      new Map([
        [3, 2],
        [42, 7],
        [5, 0],
      ]),
    );
    const window = await s.readLatencyWindow(60);
    expect([...window].sort((a, b) => a[0] - b[0])).toEqual([
      [3, 7],
      [10, 1],
      [42, 7],
    ]);
  });

  it('waitForNotices wakes as soon as another replica frees a slot', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 1, queueTtlMs: 60_000 },
      tenants: [{ id: 't' }],
    });
    await pool.enqueue({ id: 'busy', tenant: 't', replica: 'ra' });
    await pool.enqueue({ id: 'next', tenant: 't', replica: 'rb' });
    const waiting = pool.on('rb').waitForNotices('rb', 5_000);
    await sleep(50);
    await pool.on('ra').release('busy', { outcome: 'completed' });
    expect(await waiting).toEqual([{ kind: 'grant', id: 'next', pod: 'pod-a' }]);
    expect(await pool.on('rb').waitForNotices('rb', 20)).toEqual([]);
    await pool.on('rb').release('next', { outcome: 'completed' });
  });
}
