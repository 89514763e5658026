import { expect, it } from 'vitest';
import type { GetPool } from './index.js';

/** meterUsage and readUsage: hourly buckets that add up across replicas. */
export function usageMetering(getPool: GetPool): void {
  it('adds every replica’s counts to the hour of the store clock, per tenant and model', async () => {
    const pool = getPool();
    await pool.setup({ tenants: [{ id: 't' }] });
    const a = pool.on('r1');
    const b = pool.on('r2');
    const count = { tenant: 't', requests: 1, inputTokens: 10, outputTokens: 4, cachedTokens: 2 };
    await a.meterUsage([{ ...count, model: 'm' }], 3_600, 'f1');
    // A retried flush (same id) counts once.
    await a.meterUsage([{ ...count, model: 'm' }], 3_600, 'f1');
    await b.meterUsage(
      [
        { ...count, model: 'm', requests: 2, inputTokens: 20, outputTokens: 8, cachedTokens: 0 },
        // A model name may hold any non-space character, the separator included.
        { ...count, model: 'org/a|b', cachedTokens: 0 },
      ],
      3_600,
      'f2',
    );
    await a.meterUsage([], 3_600, 'f3');
    const hour = Math.floor((await a.snapshot()).nowMs / 3_600_000) * 3_600;
    const buckets = await b.readUsage(hour - 3_600, hour);
    const sorted = [...buckets].sort((x, y) => x.model.localeCompare(y.model));
    expect(sorted).toEqual([
      {
        hour,
        tenant: 't',
        model: 'm',
        requests: 3,
        inputTokens: 30,
        outputTokens: 12,
        cachedTokens: 2,
      },
      {
        hour,
        tenant: 't',
        model: 'org/a|b',
        requests: 1,
        inputTokens: 10,
        outputTokens: 4,
        cachedTokens: 0,
      },
    ]);
    expect(await a.readUsage(hour + 3_600, hour + 7_200)).toEqual([]);
  });

  it('refuses bad counts and ranges, naming them', async () => {
    const pool = getPool();
    await pool.setup({ tenants: [{ id: 't' }] });
    const s = pool.on();
    const count = {
      tenant: 't',
      model: 'm',
      requests: 1,
      inputTokens: 1,
      outputTokens: 1,
      cachedTokens: 0,
    };
    await expect(s.meterUsage([{ ...count, inputTokens: -1 }], 60, 'x')).rejects.toThrow(
      /inputTokens/,
    );
    await expect(s.meterUsage([{ ...count, tenant: 'a b' }], 60, 'x')).rejects.toThrow(/tenant/);
    await expect(s.meterUsage([{ ...count, model: '' }], 60, 'x')).rejects.toThrow(/model/);
    await expect(s.meterUsage([count], 0, 'x')).rejects.toThrow(/retention/);
    await expect(s.meterUsage([count], 60, 'a b')).rejects.toThrow(/flush id/);
    await expect(s.readUsage(7_200, 3_600)).rejects.toThrow(/toHour/);
    await expect(s.readUsage(100, 3_600)).rejects.toThrow(/multiples of 3600/);
    await expect(s.readUsage(0, 3_600 * 24 * 400)).rejects.toThrow(/at most/);
  });
}
