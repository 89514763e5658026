import { expect, it } from 'vitest';
import type { PodAdapterReport } from '../../src/contract.js';
import type { GetPool } from './index.js';

const PODS = [
  { name: 'pod-a', cap: 2 },
  { name: 'pod-b', cap: 2 },
  { name: 'pod-c', cap: 2 },
];

/** A minute: a claim made in the test is younger than that whatever the clock. */
const KEEP_CLAIMS_MS = 60_000;

/** LoRA-aware pod choice: adapters go where they are held (docs/routing.md, *LoRA adapters*). */
export function loraRouting(getPool: GetPool): void {
  const setup = async (lora: Record<string, unknown> = {}, reports?: PodAdapterReport[]) => {
    await getPool().setup({
      settings: {
        initialBudget: 16,
        queueTtlMs: 60_000,
        lora: { enabled: true, load: false, ...lora },
      },
      tenants: [{ id: 't' }, { id: 'u' }],
      pods: PODS,
    });
    await getPool()
      .on()
      .reportPodAdapters(
        reports ?? [
          { pod: 'pod-a', adapters: ['x', 'y'], slots: 2 },
          { pod: 'pod-b', adapters: ['x'], slots: 2 },
          { pod: 'pod-c', adapters: [], slots: 2 },
        ],
        KEEP_CLAIMS_MS,
      );
  };

  const release = (id: string) => getPool().on().release(id, { outcome: 'completed' });
  const releaseAll = async (ids: string[]) => {
    for (const id of ids) await release(id);
  };

  /** Enqueues `id` and returns its pod, or 'queued'. */
  const enqueue = async (id: string, adapter?: string, tenant = 't', podHint?: string) => {
    const result = await getPool().enqueue({
      id,
      tenant,
      ...(adapter ? { adapter } : {}),
      ...(podHint ? { podHint } : {}),
    });
    if (result.status === 'queued') return 'queued';
    expect(result.status).toBe('granted');
    return (result as { pod: string }).pod;
  };

  it('a request for an adapter goes only to pods that hold it, the least loaded of them', async () => {
    await setup();
    // y is on pod-a alone, however busy pod-a is against the others.
    expect(await enqueue('y1', 'y')).toBe('pod-a');
    expect(await enqueue('y2', 'y')).toBe('pod-a');
    // x is on pod-a (full now) and pod-b.
    expect(await enqueue('x1', 'x')).toBe('pod-b');
    // A request for the base model: the least-loaded pod of all.
    expect(await enqueue('base', undefined)).toBe('pod-c');
    await releaseAll(['y1', 'y2', 'x1', 'base']);
    // x on two idle pods: least loaded, ties by name; then the other one.
    expect(await enqueue('x2', 'x')).toBe('pod-a');
    expect(await enqueue('x3', 'x')).toBe('pod-b');
    expect(await enqueue('x4', 'x')).toBe('pod-a');
    await releaseAll(['x2', 'x3', 'x4']);
  });

  it('routing.lora off: adapters are ignored, the least-loaded pod', async () => {
    await setup({ enabled: false });
    expect(await enqueue('busy-a', undefined, 't', 'pod-a')).toBe('pod-a');
    expect(await enqueue('y1', 'y')).toBe('pod-b');
    await releaseAll(['busy-a', 'y1']);
  });

  it('waits while no pod holding it has room, without holding up other flows', async () => {
    const pool = getPool();
    await setup();
    expect(await enqueue('y1', 'y')).toBe('pod-a');
    expect(await enqueue('y2', 'y')).toBe('pod-a');
    // pod-a is full: the next y waits though pod-b and pod-c have room.
    expect(await enqueue('y3', 'y')).toBe('queued');
    // Other tenants' requests take the room meanwhile, ahead of the waiting y3 in the ring.
    expect(await enqueue('u1', undefined, 'u')).toBe('pod-b');
    expect(await enqueue('u2', 'x', 'u')).toBe('pod-b');
    expect(await enqueue('u3', undefined, 'u')).toBe('pod-c');
    expect(await pool.notices()).toEqual([]);
    // A pod other than pod-a frees: y3 still waits, u's next request takes it.
    expect(await enqueue('u4', undefined, 'u')).toBe('pod-c');
    expect(await enqueue('u5', undefined, 'u')).toBe('queued');
    expect(await pool.releaseAndCollect('u1')).toEqual(['u5']);
    // pod-a frees: y3 goes there.
    expect(await pool.releaseAndCollect('y1')).toEqual(['y3']);
    const snapshot = await pool.on().snapshot();
    expect(snapshot.pods.map((p) => [p.name, p.inflight])).toEqual([
      ['pod-a', 2],
      ['pod-b', 2],
      ['pod-c', 2],
    ]);
    await releaseAll(['y2', 'y3', 'u2', 'u3', 'u4', 'u5']);
  });

  it('an adapter no pod holds: the least-loaded pod with lora.load off', async () => {
    await setup();
    expect(await enqueue('busy-a', undefined, 't', 'pod-a')).toBe('pod-a');
    expect(await enqueue('busy-c', undefined, 't', 'pod-c')).toBe('pod-c');
    expect(await enqueue('z1', 'z')).toBe('pod-b');
    // Nothing was claimed: the next z goes by load alone.
    expect(await enqueue('z2', 'z')).toBe('pod-a');
    await releaseAll(['busy-a', 'busy-c', 'z1', 'z2']);
  });

  it('with lora.load on: a pod with a free slot, claimed for the requests that follow', async () => {
    const pool = getPool();
    await setup({ load: true }, [
      { pod: 'pod-a', adapters: ['x', 'y'], slots: 2 },
      { pod: 'pod-b', adapters: ['x', 'w'], slots: 2 },
      { pod: 'pod-c', adapters: ['v'], slots: 2 },
    ]);
    // pod-c has the only free slot.
    expect(await enqueue('z1', 'z')).toBe('pod-c');
    // z is claimed on pod-c: the next z goes there too, busier or not ...
    expect(await enqueue('z2', 'z')).toBe('pod-c');
    // The snapshot lists what each pod holds, the claim included.
    const held = async () =>
      (await pool.on().snapshot()).pods.map((p) => [p.name, p.adapters, p.loraSlots]);
    expect(await held()).toEqual([
      ['pod-a', ['x', 'y'], 2],
      ['pod-b', ['w', 'x'], 2],
      ['pod-c', ['v', 'z'], 2],
    ]);
    // A report listing it (a request for it runs) and then not keeps the young claim.
    await pool.on().reportPodAdapters([{ pod: 'pod-c', adapters: ['v', 'z'] }], KEEP_CLAIMS_MS);
    await pool.on().reportPodAdapters([{ pod: 'pod-c', adapters: ['v'] }], KEEP_CLAIMS_MS);
    // ... and waits while pod-c is full.
    expect(await enqueue('z3', 'z')).toBe('queued');
    expect(await pool.releaseAndCollect('z1')).toEqual(['z3']);
    // A report that does not list it yet keeps the claim ...
    await pool
      .on()
      .reportPodAdapters([{ pod: 'pod-c', adapters: ['v'], slots: 2 }], KEEP_CLAIMS_MS);
    await releaseAll(['z2', 'z3']);
    expect(await enqueue('busy-c', undefined, 't', 'pod-c')).toBe('pod-c');
    expect(await enqueue('z4', 'z')).toBe('pod-c');
    await releaseAll(['busy-c', 'z4']);
    // ... until it is older than keepClaimsMs; a failed load drops it at once.
    await pool.on().reportPodAdapters([{ pod: 'pod-c', adapters: ['v'] }], 0);
    expect(await enqueue('busy-c2', undefined, 't', 'pod-c')).toBe('pod-c');
    expect(await enqueue('z5', 'z')).toBe('pod-c'); // claimed again: the only free slot
    await pool.on().dropPodAdapter('pod-c', 'z');
    expect((await held())[2]).toEqual(['pod-c', ['v'], 2]);
    // Every pod's slots full now.
    await pool.on().reportPodAdapters([{ pod: 'pod-c', adapters: ['v', 'u'] }], 0);
    // No healthy pod has a free slot: the least-loaded pod with room, claimed there.
    expect(await enqueue('q1', 'q')).toBe('pod-a');
    expect(await enqueue('q2', 'q')).toBe('pod-a');
    await releaseAll(['busy-c2', 'z5', 'q1', 'q2']);
  });

  it('with lora.load on: waits while the pods with a free slot are full', async () => {
    const pool = getPool();
    await setup({ load: true }, [
      { pod: 'pod-a', adapters: ['x', 'y'], slots: 2 },
      { pod: 'pod-b', adapters: ['x', 'w'], slots: 2 },
      { pod: 'pod-c', adapters: ['v'], slots: 2 },
    ]);
    expect(await enqueue('c1', undefined, 'u', 'pod-c')).toBe('pod-c');
    expect(await enqueue('c2', undefined, 'u', 'pod-c')).toBe('pod-c');
    expect(await enqueue('z1', 'z')).toBe('queued');
    expect(await enqueue('u1', undefined, 'u')).toBe('pod-a');
    expect(await pool.releaseAndCollect('c1')).toEqual(['z1']);
    expect((await pool.on().snapshot()).pods.find((p) => p.name === 'pod-c')?.inflight).toBe(2);
    await releaseAll(['c2', 'z1', 'u1']);
  });

  it('with prefix routing: the prefix score chooses among the pods that hold the adapter', async () => {
    await getPool().setup({
      settings: {
        initialBudget: 16,
        queueTtlMs: 60_000,
        prefix: { enabled: true, weight: 0.5, pressureWeight: 0 },
      },
      tenants: [{ id: 't' }],
      pods: PODS,
    });
    await getPool()
      .on()
      .reportPodAdapters(
        [
          { pod: 'pod-a', adapters: ['x'] },
          { pod: 'pod-b', adapters: ['x'] },
        ],
        KEEP_CLAIMS_MS,
      );
    const prefix = ['p0', 'p1', 'p2'];
    // The prompt is served on pod-c first (no adapter).
    const first = await getPool().enqueue({ id: 'plain', tenant: 't', prefix, podHint: 'pod-c' });
    expect(first).toMatchObject({ pod: 'pod-c' });
    await release('plain');
    // pod-c holds the prefix but not the adapter: pod-a (tie by name), then by its prefix.
    const x1 = await getPool().enqueue({ id: 'x1', tenant: 't', prefix, adapter: 'x' });
    expect(x1).toMatchObject({ pod: 'pod-a' });
    await release('x1');
    await enqueue('busy-a', undefined, 't', 'pod-a');
    const x2 = await getPool().enqueue({ id: 'x2', tenant: 't', prefix, adapter: 'x' });
    expect(x2).toMatchObject({ pod: 'pod-a' }); // 0.5 - 1/2 = 0 ties 0 at pod-b: name order
    await releaseAll(['busy-a', 'x2']);
  });

  it('an unhealthy pod holds nothing; reports skip pods not configured', async () => {
    await setup();
    await getPool()
      .on()
      .setPodHealth([{ name: 'pod-b', healthy: false }]);
    await getPool()
      .on()
      .reportPodAdapters([{ pod: 'pod-zz', adapters: ['x'] }], KEEP_CLAIMS_MS);
    expect(await enqueue('x1', 'x')).toBe('pod-a');
    expect(await enqueue('x2', 'x')).toBe('pod-a');
    expect(await enqueue('x3', 'x')).toBe('queued');
    await releaseAll(['x1', 'x2', 'x3']);
  });

  it('validates adapter names and reports', async () => {
    await setup();
    await expect(getPool().enqueue({ id: 'bad', tenant: 't', adapter: 'a b' })).rejects.toThrow(
      /request.adapter/,
    );
    getPool().ids.delete('bad');
    await expect(
      getPool()
        .on()
        .reportPodAdapters([{ pod: 'pod-a', adapters: ['x,y'] }], 0),
    ).rejects.toThrow(/adapter/);
    await expect(getPool().on().reportPodAdapters([], -1)).rejects.toThrow(/keepClaimsMs/);
  });
}
