import { type EnqueueRequest, LocalScheduler, type Scheduler } from '@fairgate/scheduler';
import { afterEach, describe, expect, it } from 'vitest';
import { HeldLeases } from '../src/slot/held-leases.js';
import {
  RECYCLE_MARGIN,
  SlotRecycler,
  type SlotRecyclerOptions,
} from '../src/slot/slot-recycler.js';

/**
 * The recycler against the real engine (LocalScheduler: the same contract and decisions as
 * the Redis one, test/conformance) and real leases: what a replica parks, what takes a
 * parked slot, and what the scheduler holds after each step.
 */
const completed = { outcome: 'completed' } as const;
const settle = () => new Promise((resolve) => setTimeout(resolve, 5));

interface Setup {
  scheduler: Scheduler;
  leases: HeldLeases;
  recycler: SlotRecycler;
  recycled: () => number;
  healthy: Set<string>;
  /** Enqueues `request` (replica r1, band 0 unless given) and tracks it when granted. */
  admit(request: Partial<EnqueueRequest> & { id: string }): Promise<string>;
}

let open: Setup | undefined;
afterEach(async () => {
  open?.recycler.stop();
  open?.leases.close();
  await open?.scheduler.close();
  open = undefined;
});

async function setup(
  budget = 4,
  overrides: Partial<Pick<SlotRecyclerOptions, 'holdMs' | 'available'>> = {},
): Promise<Setup> {
  const scheduler = new LocalScheduler();
  await scheduler.configure({ initialBudget: budget, queueTtlMs: 60_000 });
  await scheduler.upsertTenants([
    { id: 't' },
    { id: 'u' },
    // RECYCLE_MARGIN + 1 requests a minute: one recycled slot leaves less than the margin.
    { id: 'limited', limits: { requestsPerMinute: RECYCLE_MARGIN + 1, tokensPerDay: 1_000_000 } },
  ]);
  await scheduler.upsertPods([
    { name: 'pod-a', cap: 100 },
    { name: 'pod-b', cap: 100 },
  ]);
  const leases = new HeldLeases({ scheduler, replica: 'r1', heartbeatMs: 60_000 });
  const healthy = new Set(['pod-a', 'pod-b']);
  let recycled = 0;
  const recycler = new SlotRecycler({
    scheduler,
    leases,
    holdMs: () => 50,
    available: () => true,
    healthy: (pod) => healthy.has(pod),
    onRecycled: () => {
      recycled += 1;
    },
    ...overrides,
  });
  const made: Setup = {
    scheduler,
    leases,
    recycler,
    healthy,
    recycled: () => recycled,
    async admit(partial) {
      const request = { tenant: 't', band: 0, replica: 'r1', ...partial };
      const result = await scheduler.enqueue(request);
      recycler.observe(result, request.tenant);
      if (result.status !== 'granted') return result.status;
      leases.track(request.id, result.pod, request);
      return result.pod;
    },
  };
  open = made;
  return made;
}

/** What a request holds as HeldSlot would: taken from a parked slot, then tracked. */
function takeAndTrack(s: Setup, request: EnqueueRequest, kvQuota = false): string | undefined {
  const pod = s.recycler.take(request, kvQuota);
  if (pod !== undefined) s.leases.track(request.id, pod, request);
  return pod;
}

const request = (id: string, extra: Partial<EnqueueRequest> = {}): EnqueueRequest => ({
  id,
  tenant: 't',
  band: 0,
  replica: 'r1',
  ...extra,
});

describe('SlotRecycler', () => {
  it("passes a completed request's slot to the next request of its kind, with no pass", async () => {
    const s = await setup();
    expect(await s.admit({ id: 'a', kvBlocks: 2 })).toBe('pod-a');
    expect(s.recycler.contended).toBe(false);
    const usage = { inputTokens: 5, outputTokens: 3 };
    expect(
      s.recycler.park(request('a', { kvBlocks: 2 }), 'pod-a', { ...completed, usage }, true),
    ).toBe(true);
    expect(s.recycler.parked).toBe(1);
    expect(takeAndTrack(s, request('b', { kvBlocks: 2 }), true)).toBe('pod-a');
    expect(s.recycler.parked).toBe(0);
    expect(s.recycled()).toBe(1);
    expect(s.leases.holds('a')).toBe(false);
    await settle();
    const snapshot = await s.scheduler.snapshot();
    expect(snapshot.inflight).toBe(1);
    expect(snapshot.tenants.find((t) => t.tenant === 't')).toMatchObject({
      inflight: 1,
      kvBlocks: 2,
    });
    expect(snapshot.counters[0]).toMatchObject({ admitted: 2, inputTokens: 5, outputTokens: 3 });
    expect(snapshot.counters[0]?.outcomes.completed).toBe(1);
    expect(await s.scheduler.heartbeat('r1', ['b'])).toEqual({ lost: [] });
    expect(s.recycler.contended).toBe(false);
  });

  it.each([
    ['another tenant', request('b', { tenant: 'u' }), false],
    ['another band', request('b', { band: 1 }), false],
    ['other KV blocks under a KV-block quota', request('b', { kvBlocks: 1 }), true],
    ['a token-bucket charge', request('b', { tokens: 3 }), false],
    ['a prompt prefix', request('b', { prefix: ['h1'] }), false],
  ])('a request with %s does not take the slot', async (_what, next, kvQuota) => {
    const s = await setup();
    await s.admit({ id: 'a' });
    expect(s.recycler.park(request('a'), 'pod-a', completed, kvQuota)).toBe(true);
    expect(s.recycler.take(next, kvQuota)).toBeUndefined();
    expect(s.recycler.parked).toBe(1);
  });

  it('without a KV-block quota a request with other KV blocks takes the slot', async () => {
    const s = await setup();
    await s.admit({ id: 'a', kvBlocks: 3 });
    expect(s.recycler.park(request('a', { kvBlocks: 3 }), 'pod-a', completed, false)).toBe(true);
    expect(takeAndTrack(s, request('b', { kvBlocks: 5 }))).toBe('pod-a');
    await settle();
    expect((await s.scheduler.snapshot()).tenants.find((t) => t.tenant === 't')).toMatchObject({
      inflight: 1,
      kvBlocks: 5,
    });
  });

  it.each([
    ['a sheddable band', request('a', { band: -1 })],
    ['a token-bucket charge', request('a', { tokens: 3 })],
    ['a prompt prefix', request('a', { prefix: ['h1'] })],
  ])('the slot of a request with %s is never parked', async (_what, finished) => {
    const s = await setup();
    await s.admit({ id: 'x' });
    expect(s.recycler.park(finished, 'pod-a', completed, false)).toBe(false);
  });

  it.each([
    ['recycle_ms is 0', { holdMs: () => 0 }],
    ['Redis is unreachable', { available: () => false }],
  ])('nothing is parked while %s', async (_what, overrides) => {
    const s = await setup(4, overrides);
    await s.admit({ id: 'a' });
    expect(s.recycler.park(request('a'), 'pod-a', completed, false)).toBe(false);
  });

  it("recycles a limited tenant's slots while its standing shows the margin; the handover counts the next request", async () => {
    const s = await setup();
    const limited = (id: string) => request(id, { tenant: 'limited', budgetTokens: 10 });
    // No standing seen yet on this replica: the exact check of the enqueue first.
    expect(s.recycler.take(limited('x'), false)).toBeUndefined();
    expect(await s.admit({ id: 'a', tenant: 'limited', budgetTokens: 10 })).toBe('pod-a');
    expect(s.recycler.standingOf('limited')?.requests).toMatchObject({
      remaining: RECYCLE_MARGIN,
    });
    const usage = { inputTokens: 4, outputTokens: 2 };
    expect(s.recycler.park(limited('a'), 'pod-a', { ...completed, usage }, false)).toBe(true);
    expect(takeAndTrack(s, limited('b'))).toBe('pod-a');
    await settle();
    // Counted by the handover: a's reservation trued up to 6, b's 10 reserved, one request.
    const row = (await s.scheduler.snapshot()).tenants.find((t) => t.tenant === 'limited');
    expect(row?.standing).toMatchObject({
      requests: { remaining: RECYCLE_MARGIN - 1 },
      tokens: { remaining: 1_000_000 - 16 },
    });
    expect(s.recycler.standingOf('limited')).toMatchObject({
      requests: { remaining: RECYCLE_MARGIN - 1 },
      tokens: { remaining: 1_000_000 - 16 },
    });
    // Below the margin now: b's slot is released, not parked; the next request enqueues.
    expect(s.recycler.park(limited('b'), 'pod-a', completed, false)).toBe(false);
    expect(s.recycler.take(limited('c'), false)).toBeUndefined();
    await s.scheduler.release('b', completed);
  });

  it('learns from each enqueue whether the pool is contended', async () => {
    const s = await setup(1);
    expect(s.recycler.contended).toBe(true); // until the pool said otherwise
    expect(await s.admit({ id: 'a' })).toBe('pod-a');
    expect(s.recycler.contended).toBe(false);
    expect(await s.admit({ id: 'q' })).toBe('queued');
    expect(s.recycler.contended).toBe(true);
    expect(s.recycler.park(request('a'), 'pod-a', completed, false)).toBe(false);
    await s.scheduler.cancel('q');
    await s.scheduler.release('a', completed);
    expect(await s.admit({ id: 'c' })).toBe('pod-a');
    expect(s.recycler.contended).toBe(false);
  });

  it('an enqueue that queues releases the parked slots at once, for whoever waits', async () => {
    const s = await setup(2);
    await s.admit({ id: 'a' });
    await s.admit({ id: 'x', tenant: 'u' });
    expect(s.recycler.park(request('a'), 'pod-a', completed, false)).toBe(true);
    // Another tenant's request on this replica finds the budget full (a's slot is parked).
    expect(await s.admit({ id: 'q', tenant: 'u' })).toBe('queued');
    expect(s.recycler.parked).toBe(0);
    await settle();
    expect(await s.scheduler.poll('r1')).toEqual([{ kind: 'grant', id: 'q', pod: 'pod-a' }]);
    for (const id of ['x', 'q']) await s.scheduler.release(id, completed);
  });

  it.each([
    ['its token bucket', { id: 'r', tenant: 'bucket', tokens: 50 }, false],
    ['a quota it can never fit', { id: 'r', tenant: 'never' }, false],
    ['the admission policy', { id: 'r' }, true],
  ])('a refusal by %s: contended %s', async (what, refused, contended) => {
    const s = await setup();
    await s.scheduler.upsertTenants([
      { id: 'bucket', tokenBucket: { capacity: 10, refillPerSecond: 1 } },
      { id: 'never', maxConcurrent: 0 },
    ]);
    await s.admit({ id: 'a' });
    expect(s.recycler.contended).toBe(false);
    if (what === 'the admission policy') {
      await s.scheduler.configure({ initialBudget: 4, admission: { policy: 'reject-all' } });
    }
    expect(await s.admit(refused)).toBe('rejected');
    expect(s.recycler.contended).toBe(contended);
  });

  it('a handover whose reply says a request waits stops the parking', async () => {
    const s = await setup(1);
    expect(await s.admit({ id: 'a' })).toBe('pod-a');
    // Another replica's request waits; this replica has not heard of it yet.
    expect((await s.scheduler.enqueue(request('w', { tenant: 'u', replica: 'r2' }))).status).toBe(
      'queued',
    );
    expect(s.recycler.park(request('a'), 'pod-a', completed, false)).toBe(true);
    expect(takeAndTrack(s, request('b'))).toBe('pod-a');
    await settle();
    expect(s.recycler.contended).toBe(true);
    expect(s.recycler.park(request('b'), 'pod-a', completed, false)).toBe(false);
    // The ordinary release hands the slot to the waiting request.
    s.leases.untrack('b');
    await s.scheduler.release('b', completed);
    expect(await s.scheduler.poll('r2')).toEqual([{ kind: 'grant', id: 'w', pod: 'pod-a' }]);
    await s.scheduler.release('w', completed);
  });

  it('a slot nobody takes is released after recycle_ms', async () => {
    const s = await setup(4, { holdMs: () => 10 });
    await s.admit({ id: 'a' });
    expect(s.recycler.park(request('a'), 'pod-a', completed, false)).toBe(true);
    expect((await s.scheduler.snapshot()).inflight).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 40));
    expect(s.recycler.parked).toBe(0);
    expect(s.leases.holds('a')).toBe(false);
    const snapshot = await s.scheduler.snapshot();
    expect(snapshot.inflight).toBe(0);
    expect(snapshot.counters[0]?.outcomes.completed).toBe(1);
  });

  it('a pod that turned unhealthy gets its parked slot back, and nobody takes it', async () => {
    const s = await setup();
    await s.admit({ id: 'a' });
    expect(s.recycler.park(request('a'), 'pod-a', completed, false)).toBe(true);
    s.healthy.delete('pod-a');
    expect(s.recycler.take(request('b'), false)).toBeUndefined();
    await settle();
    expect((await s.scheduler.snapshot()).inflight).toBe(0);
    expect(s.recycler.park(request('c'), 'pod-a', completed, false)).toBe(false);
  });

  it('a handover Redis does not make ends the finished request and registers the next', async () => {
    const s = await setup();
    await s.admit({ id: 'a' });
    expect(s.recycler.park(request('a'), 'pod-b', completed, false)).toBe(true);
    // The finished request's lease is gone meanwhile (e.g. reclaimed).
    await s.scheduler.release('a', { outcome: 'evicted' });
    expect(takeAndTrack(s, request('b'))).toBe('pod-b');
    await settle();
    expect(s.recycler.contended).toBe(true);
    const snapshot = await s.scheduler.snapshot();
    expect(snapshot.inflight).toBe(1);
    expect(snapshot.pods.find((pod) => pod.name === 'pod-b')?.inflight).toBe(1);
    expect(await s.scheduler.heartbeat('r1', ['b'])).toEqual({ lost: [] });
    expect(snapshot.counters[0]?.outcomes).toMatchObject({ evicted: 1, completed: 0 });
  });

  it('stop releases every parked slot and parks none from then on', async () => {
    const s = await setup();
    await s.admit({ id: 'a' });
    await s.admit({ id: 'b', tenant: 'u' });
    expect(s.recycler.park(request('a'), 'pod-a', completed, false)).toBe(true);
    expect(s.recycler.park(request('b', { tenant: 'u' }), 'pod-b', completed, false)).toBe(true);
    s.recycler.stop();
    expect(s.recycler.parked).toBe(0);
    await settle();
    expect((await s.scheduler.snapshot()).inflight).toBe(0);
    expect(s.recycler.park(request('c'), 'pod-a', completed, false)).toBe(false);
  });
});
