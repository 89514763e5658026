import { expect, it } from 'vitest';
import type { GetPool } from './index.js';

const chain = (conversation: string, blocks: number) =>
  Array.from({ length: blocks }, (_, i) => `${conversation}${i}`);

const PODS = [
  { name: 'pod-a', cap: 4 },
  { name: 'pod-b', cap: 4 },
];

/** Prefix-aware pod choice and each pod's index (docs/routing.md). */
export function prefixRouting(getPool: GetPool): void {
  const setup = (prefix: Record<string, unknown> = {}) =>
    getPool().setup({
      settings: {
        initialBudget: 16,
        queueTtlMs: 60_000,
        prefix: { enabled: true, weight: 0.5, pressureWeight: 0, ...prefix },
      },
      tenants: [{ id: 't' }],
      pods: PODS,
    });

  const release = (id: string) => getPool().on().release(id, { outcome: 'completed' });

  /** Grants `id` (on `podHint` when given) and returns its pod. */
  const grant = async (id: string, prefix?: string[], podHint?: string) => {
    const result = await getPool().enqueue({
      id,
      tenant: 't',
      ...(prefix ? { prefix } : {}),
      ...(podHint ? { podHint } : {}),
    });
    expect(result.status).toBe('granted');
    return (result as { pod: string }).pod;
  };

  it('a request goes where its prefix was served while that pod is not much busier', async () => {
    await setup();
    expect(await grant('first', chain('x', 4))).toBe('pod-a');
    await release('first');
    // pod-a one request busier (1/4 of its cap) but holds the prefix: 0.5 - 0.25 > 0.
    await grant('other-a', undefined);
    expect(await grant('again', chain('x', 6))).toBe('pod-a');
    // Another conversation, held nowhere: the least-loaded pod.
    expect(await grant('fresh', chain('y', 4))).toBe('pod-b');
    for (const id of ['other-a', 'again', 'fresh']) await release(id);
  });

  it('load outweighs the prefix past `weight` x cap, and off means least loaded', async () => {
    await setup();
    expect(await grant('first', chain('x', 4))).toBe('pod-a');
    await grant('a2', undefined, 'pod-a');
    // pod-a 2/4 in flight: 0.5 - 2/4 = 0 against 0 - 0 at pod-b, a tie: name order.
    expect(await grant('x-half', chain('x', 4))).toBe('pod-a');
    // pod-a 3/4: 0.5 - 3/4 < 0 at pod-b.
    expect(await grant('x-busy', chain('x', 4))).toBe('pod-b');
    // Half the prefix is worth half: pod-a 3/4 -> 0.25 - 0.75; pod-b (holds x0..x3 now) 1/4.
    expect(await grant('x-longer', chain('x', 8))).toBe('pod-b');
    for (const id of ['first', 'a2', 'x-half', 'x-busy', 'x-longer']) await release(id);
    await getPool()
      .on()
      .configure({ initialBudget: 16, queueTtlMs: 60_000, prefix: { enabled: false } });
    await grant('b1', undefined, 'pod-b');
    expect(await grant('off', chain('x', 4))).toBe('pod-a');
    for (const id of ['b1', 'off']) await release(id);
  });

  it('only a leading run counts: chained hashes match as a prefix', async () => {
    await setup();
    expect(await grant('tail-only', ['q0', 'x1', 'x2', 'x3'])).toBe('pod-a');
    await grant('busy-b', undefined, 'pod-b');
    await grant('busy-b2', undefined, 'pod-b');
    // pod-a holds x1..x3 but not x0: no match anywhere, so the least-loaded pod, pod-a.
    expect(await grant('x', chain('x', 4))).toBe('pod-a');
    // ... and now pod-a holds x0..x3 (two in flight each): 0.5 - 2/4 = 0 > 0 - 2/4.
    expect(await grant('x-again', chain('x', 4))).toBe('pod-a');
    for (const id of ['tail-only', 'busy-b', 'busy-b2', 'x', 'x-again']) await release(id);
  });

  it('a waiting request is granted by its prefix when room frees', async () => {
    const pool = getPool();
    await pool.setup({
      settings: {
        initialBudget: 2,
        queueTtlMs: 60_000,
        prefix: { enabled: true, weight: 0.5, pressureWeight: 0 },
      },
      tenants: [{ id: 't' }],
      pods: PODS,
    });
    expect(await grant('x', chain('x', 3))).toBe('pod-a');
    expect(await grant('y', chain('y', 3))).toBe('pod-b');
    expect((await pool.enqueue({ id: 'y-again', tenant: 't', prefix: chain('y', 5) })).status).toBe(
      'queued',
    );
    // pod-a frees, but the waiting request's prefix is on pod-b: 0.5 - 1/4 > 0 - 0.
    expect(await pool.releaseAndCollect('x')).toEqual(['y-again']);
    const snapshot = await pool.on().snapshot();
    expect(snapshot.pods.map((p) => [p.name, p.inflight])).toEqual([
      ['pod-a', 0],
      ['pod-b', 2],
    ]);
    for (const id of ['y', 'y-again']) await release(id);
  });

  it('the index is bounded: old conversations are forgotten, recent ones kept', async () => {
    await setup({ entriesPerPod: 8 });
    // Nine conversations of 4 blocks, one at a time, all granted on pod-a (its hint).
    for (let i = 0; i <= 8; i += 1) {
      expect(await grant(`c${i}`, chain(`c${i}-`, 4), 'pod-a')).toBe('pod-a');
      await release(`c${i}`);
    }
    // Two generations of 4 entries: c7 and c8 are held, c0 is long gone.
    await grant('busy', undefined, 'pod-a'); // pod-a one request busier than pod-b
    expect(await grant('c0-again', chain('c0-', 4))).toBe('pod-b');
    await release('c0-again');
    expect(await grant('c7-again', chain('c7-', 4))).toBe('pod-a');
    expect(await grant('c8-again', chain('c8-', 4))).toBe('pod-a');
    for (const id of ['busy', 'c7-again', 'c8-again']) await release(id);
  });

  it("index_entries_per_pod 0: a pod's index holds as many keys as its reported cache", async () => {
    await setup({ entriesPerPod: 0 });
    const pool = getPool();
    // pod-a says its cache holds 8 blocks: two generations of 4, as entriesPerPod 8 above.
    await pool.report(await pool.lead(), [{ pod: 'pod-a', prefixCapacity: 8 }]);
    const snapshot = await pool.on().snapshot();
    expect(snapshot.pods.map((p) => [p.name, p.prefixCapacity])).toEqual([
      ['pod-a', 8],
      ['pod-b', null],
    ]);
    for (let i = 0; i <= 8; i += 1) {
      expect(await grant(`c${i}`, chain(`c${i}-`, 4), 'pod-a')).toBe('pod-a');
      await release(`c${i}`);
    }
    await grant('busy', undefined, 'pod-a');
    expect(await grant('c0-again', chain('c0-', 4))).toBe('pod-b');
    await release('c0-again');
    expect(await grant('c7-again', chain('c7-', 4))).toBe('pod-a');
    // A later scrape that does not say keeps what the pod said.
    await pool.report(await pool.lead(), [{ pod: 'pod-a' }]);
    expect((await pool.on().snapshot()).pods[0]?.prefixCapacity).toBe(8);
    for (const id of ['busy', 'c7-again']) await release(id);
  });

  it('a prefix no pod holds goes to the least-loaded pod, among equals the one with fewest keys', async () => {
    await setup();
    // Idle pods: the first conversation to pod-a (a tie, name order), the next to pod-b
    // (pod-a's index now holds keys), the next ones to whichever holds fewer.
    expect(await grant('p', chain('p', 4))).toBe('pod-a');
    await release('p');
    expect(await grant('q', chain('q', 2))).toBe('pod-b');
    await release('q');
    expect(await grant('r', chain('r', 1))).toBe('pod-b'); // 4 keys against 2
    await release('r');
    expect(await grant('s', chain('s', 1))).toBe('pod-b'); // 4 against 3
    await release('s');
    expect(await grant('u', chain('u', 1))).toBe('pod-a'); // 4 each: name order
    await release('u');
    // Load first: pod-a busier, so a new conversation goes to pod-b whatever its keys.
    await grant('busy', undefined, 'pod-a');
    expect(await grant('t', chain('t', 8))).toBe('pod-b');
    for (const id of ['busy', 't']) await release(id);
  });

  it("a release reports the index's prediction; a miss drops the pod's older entries", async () => {
    const pool = getPool();
    await setup({ entriesPerPod: 16 }); // generations of 8 keys
    const end = (id: string, prefixCachedBlocks?: number) =>
      pool.on().release(id, {
        outcome: 'completed',
        ...(prefixCachedBlocks === undefined ? {} : { prefixCachedBlocks }),
      });
    // No prediction without a prefix; 0 for a prefix held nowhere.
    await grant('plain', undefined);
    expect(await end('plain')).toEqual({ was: 'granted' });
    expect(await grant('c0', chain('c0-', 4), 'pod-a')).toBe('pod-a');
    expect(await end('c0', 0)).toEqual({ was: 'granted', predictedBlocks: 0 });
    // A hit (the last block is always computed again: 3 of 4 is one): nothing changes.
    expect(await grant('c0-hit', chain('c0-', 4), 'pod-a')).toBe('pod-a');
    expect(await end('c0-hit', 3)).toEqual({ was: 'granted', predictedBlocks: 4 });
    // c1..c3 on pod-a: its previous generation holds c0 and c1, its current c2 and c3.
    for (const [c, blocks] of [
      ['c1', 4],
      ['c2', 4],
      ['c3', 3],
    ] as const) {
      expect(await grant(c, chain(`${c}-`, blocks), 'pod-a')).toBe('pod-a');
      expect(await end(c, 0)).toEqual({ was: 'granted', predictedBlocks: 0 });
    }
    // The pod restarted unseen: c2 predicted 4, the pod had none. Its current generation
    // (c2, c3) becomes the previous one, c0 and c1 go, c2's keys start a new one.
    expect(await grant('c2-miss', chain('c2-', 4), 'pod-a')).toBe('pod-a');
    expect(await end('c2-miss', 0)).toEqual({ was: 'granted', predictedBlocks: 4 });
    await grant('busy', undefined, 'pod-a'); // pod-a one request busier than pod-b
    expect(await grant('c0-again', chain('c0-', 4))).toBe('pod-b');
    expect(await grant('c1-again', chain('c1-', 4))).toBe('pod-b');
    expect(await grant('c2-again', chain('c2-', 4))).toBe('pod-a');
    expect(await grant('c3-again', chain('c3-', 3))).toBe('pod-a');
    for (const id of ['busy', 'c0-again', 'c1-again', 'c2-again', 'c3-again']) {
      expect((await end(id)).was).toBe('granted');
    }
    // Only a granted request made a prediction: an unknown id reports none.
    expect(await end('c2-miss', 0)).toEqual({ was: 'unknown' });
  });

  it("forgetPrefixes drops a restarted pod's entries", async () => {
    const pool = getPool();
    await setup();
    expect(await grant('x', chain('x', 4))).toBe('pod-a');
    await release('x');
    await grant('busy-a', undefined);
    await pool.on().forgetPrefixes(['pod-a']);
    expect(await grant('x-again', chain('x', 4))).toBe('pod-b');
    for (const id of ['busy-a', 'x-again']) await release(id);
  });
}
