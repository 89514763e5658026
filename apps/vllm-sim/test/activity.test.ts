import { type AppHandle, startSim } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

describe('request activity (/debug/stats, /debug/requests)', () => {
  let sim: AppHandle;
  beforeAll(async () => {
    sim = await startSim({ args: { 'alpha-ms': 20 } });
  });
  afterAll(() => sim?.stop());

  const generate = () =>
    fetch(`${sim.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fairgate-sim', prompt: 'abcd', max_tokens: 5 }),
    }).then((r) => r.text());

  it('counts requests, the peak of open ones, and their intervals on one clock', async () => {
    await Promise.all([generate(), generate(), generate()]);
    await generate();
    const stats = (await (await fetch(`${sim.url}/debug/stats`)).json()) as Record<string, number>;
    expect(stats).toEqual({ requests_received: 4, active_requests: 0, max_active_requests: 3 });
    const { intervals } = (await (await fetch(`${sim.url}/debug/requests`)).json()) as {
      intervals: Array<[string, string]>;
    };
    expect(intervals).toHaveLength(4);
    const [a, b, c, d] = intervals.map(([s, e]) => [BigInt(s), BigInt(e)] as const);
    for (const [start, end] of [a!, b!, c!, d!]) expect(end > start).toBe(true);
    // The fourth request started after the first three had all ended.
    const lastOfFirstThree = [a!, b!, c!].reduce((m, [, e]) => (e > m ? e : m), 0n);
    expect(d![0] >= lastOfFirstThree).toBe(true);
  });
});
