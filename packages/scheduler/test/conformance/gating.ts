import { expect, it } from 'vitest';
import { sleep } from '../support/pool.js';
import type { GetPool } from './index.js';

/** Saturation gating of dispatch (settings.gating). */
export function saturationGating(getPool: GetPool): void {
  it('a band dispatches only while saturation < its ceiling; closed bands are passed over', async () => {
    const pool = getPool();
    await pool.setup({
      settings: {
        initialBudget: 10,
        queueTtlMs: 60_000,
        gating: { enabled: true, bandCeilings: { '4': 2, '-1': 0.5 } },
      },
      tenants: [{ id: 't' }],
    });
    const fence = await pool.lead();
    await pool.report(fence, [{ pod: 'pod-a', waiting: 7 }]); // saturation 1.4
    expect(await pool.admit({ id: 'crit', tenant: 't', band: 4 })).toBe('pod-a');
    expect(await pool.admit({ id: 'std', tenant: 't', band: 3 })).toBe('queued');
    expect(await pool.admit({ id: 'batch', tenant: 't', band: -1 })).toBe('queued');
    expect(await pool.notices()).toEqual([]);
    await pool.report(fence, [{ pod: 'pod-a', waiting: 3 }]); // 0.6: open for 3, closed for -1
    expect(await pool.notices()).toEqual(['grant|std|pod-a']);
    await pool.report(fence, [{ pod: 'pod-a', waiting: 2 }]); // 0.4: open for everyone
    expect(await pool.notices()).toEqual(['grant|batch|pod-a']);
    // A closed band does not stop the pass: the lower open band is served.
    await pool.report(fence, [{ pod: 'pod-a', waiting: 4 }]); // 0.8
    await pool.on().configure({
      initialBudget: 10,
      queueTtlMs: 60_000,
      gating: { enabled: true, bandCeilings: { '3': 0.5 }, defaultCeiling: 1 },
    });
    expect(await pool.admit({ id: 'std2', tenant: 't', band: 3 })).toBe('queued');
    expect(await pool.admit({ id: 'low2', tenant: 't', band: 0 })).toBe('pod-a');
  });

  it('each grant counts as queued at its pod until a scrape shows it running: the gate closes mid-pass', async () => {
    const pool = getPool();
    await pool.setup({
      settings: { initialBudget: 20, queueTtlMs: 60_000, gating: { enabled: true } },
      tenants: [{ id: 't' }],
    });
    const fence = await pool.lead();
    await pool.report(fence, [{ pod: 'pod-a', waiting: 5 }]); // 1.0: closed
    for (let i = 0; i < 8; i += 1) {
      expect(await pool.admit({ id: `r${i}`, tenant: 't' })).toBe('queued');
    }
    // Open, and 2 running: in-flight 0 -> 7 would be 5 queued (saturation 1.0) -> 7 grants.
    await pool.report(fence, [{ pod: 'pod-a', running: 2 }]);
    expect(await pool.notices()).toHaveLength(7);
    // The scrape catching up (7 running) reopens the gate for the last one.
    await pool.report(fence, [{ pod: 'pod-a', running: 7 }]);
    expect(await pool.notices()).toEqual(['grant|r7|pod-a']);
  });

  it('an unknown or stale load closes a gate of ceiling 1 (fails safe); gating off ignores it', async () => {
    const pool = getPool();
    await pool.setup({
      settings: {
        initialBudget: 10,
        queueTtlMs: 60_000,
        gating: { enabled: true },
        saturation: { staleMs: 150 },
      },
      tenants: [{ id: 't' }],
    });
    expect(await pool.admit({ id: 'a', tenant: 't' })).toBe('queued');
    const fence = await pool.lead();
    await pool.report(fence, [{ pod: 'pod-a' }]);
    expect(await pool.notices()).toEqual(['grant|a|pod-a']);
    expect(await pool.admit({ id: 'b', tenant: 't' })).toBe('pod-a');
    await sleep(250);
    expect(await pool.admit({ id: 'c', tenant: 't' })).toBe('queued');
    await pool.on().configure({ initialBudget: 10, queueTtlMs: 60_000 });
    expect(await pool.notices()).toEqual(['grant|c|pod-a']);
  });

  it('fifo: the gate of the candidate band applies to it and the next candidate goes first', async () => {
    const pool = getPool();
    await pool.setup({
      settings: {
        initialBudget: 1,
        queueTtlMs: 60_000,
        dispatchOrder: 'fifo',
        gating: { enabled: true, bandCeilings: { '-1': 0.5 } },
      },
      tenants: [{ id: 't' }, { id: 'u' }],
    });
    const fence = await pool.lead();
    await pool.report(fence, [{ pod: 'pod-a', waiting: 4 }]); // 0.8
    expect(await pool.admit({ id: 'hold', tenant: 't', band: 3 })).toBe('pod-a');
    expect(await pool.admit({ id: 'l1', tenant: 't', band: -1 })).toBe('queued');
    expect(await pool.admit({ id: 'h1', tenant: 'u', band: 3 })).toBe('queued');
    expect(await pool.admit({ id: 'l2', tenant: 'u', band: -1 })).toBe('queued');
    expect(await pool.releaseAndCollect('hold')).toEqual(['h1']);
    expect(await pool.releaseAndCollect('h1')).toEqual([]);
    await pool.report(fence, [{ pod: 'pod-a', waiting: 1 }]); // 0.2
    expect(await pool.notices()).toEqual(['grant|l1|pod-a']);
    expect(await pool.releaseAndCollect('l1')).toEqual(['l2']);
  });
}
