import { defaultTestTenants, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate, metricSum, type Pool, SIM_MODEL, sleep, startPool } from './support/pool.js';

/**
 * Usage metering across replicas (docs/tenants.md, *Usage*): 2 gateway replicas on one
 * Redis, 2 sims; streamed and plain requests of two tenants through both replicas. What
 * GET /admin/usage reports equals what the sims counted (their own vllm:prompt_tokens_total
 * and vllm:generation_tokens_total), and what the replicas' fairgate_tokens_total add up to.
 */
describe('usage metering', () => {
  let pool: Pool;
  const admin = async (path: string, replica = 0) => {
    const response = await fetch(`${pool.gateways[replica]?.url}/admin${path}`, {
      headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
    });
    return {
      status: response.status,
      type: response.headers.get('content-type'),
      text: await response.text(),
    };
  };

  beforeAll(async () => {
    pool = await startPool({
      tenants: defaultTestTenants(),
      sections: { usage: { flush_ms: 50 } },
    });
  }, 60_000);
  afterAll(() => pool?.stop());

  it('reports per tenant and model exactly what the pods counted, and what Prometheus counted', async () => {
    const sent = await Promise.all(
      Array.from({ length: 8 }, async (_, client) => {
        const results = [];
        for (let n = 0; n < 40; n++) {
          const key = client % 2 === 0 ? TEST_KEYS.paying : TEST_KEYS.free;
          results.push(
            await generate(pool.gateways[n % 2]?.url as string, key, {
              stream: n % 3 === 0,
              maxTokens: 4 + (n % 7),
              content: `client ${client} request ${n} `.repeat(1 + (n % 5)),
            }),
          );
        }
        return results;
      }),
    );
    const statuses = new Set(sent.flat().map((r) => r.status));
    expect(statuses).toEqual(new Set([200]));
    await sleep(300); // two flushes

    const usage = JSON.parse((await admin('/usage?group_by=tenant,model', 1)).text);
    const rows = usage.data as Array<Record<string, number | string>>;
    expect(rows.map((r) => [r.tenant, r.model])).toEqual([
      ['free', SIM_MODEL],
      ['paying', SIM_MODEL],
    ]);
    const total = (k: string) => rows.reduce((sum, r) => sum + Number(r[k]), 0);
    expect(total('requests')).toBe(320);
    const simSum = async (name: string) =>
      (await Promise.all(pool.sims.map((sim) => metricSum(sim.url, name)))).reduce(
        (a, b) => a + b,
        0,
      );
    expect(total('input_tokens')).toBe(await simSum('vllm:prompt_tokens_total'));
    expect(total('output_tokens')).toBe(await simSum('vllm:generation_tokens_total'));
    const promSum = async (direction: string) =>
      (
        await Promise.all(
          pool.gateways.map(async (g) => {
            const text = await (await fetch(`${g.url}/metrics`)).text();
            return text
              .split('\n')
              .filter(
                (l) =>
                  l.startsWith('fairgate_tokens_total{') && l.includes(`direction="${direction}"`),
              )
              .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
          }),
        )
      ).reduce((a, b) => a + b, 0);
    expect(await promSum('input')).toBe(total('input_tokens'));
    expect(await promSum('output')).toBe(total('output_tokens'));
    expect(await promSum('cached')).toBe(total('cached_tokens'));

    // By hour and pool, and as CSV: the same totals.
    const hourly = JSON.parse((await admin('/usage?group_by=hour,pool&tenant=paying')).text);
    expect(hourly.data.every((r: { hour: string }) => r.hour.endsWith(':00:00.000Z'))).toBe(true);
    const csv = await admin('/usage?group_by=tenant&format=csv');
    expect(csv.type).toMatch(/^text\/csv/);
    const lines = csv.text.trim().split('\n');
    expect(lines[0]).toBe('tenant,requests,input_tokens,output_tokens,cached_tokens');
    expect(lines.slice(1).map((l) => l.split(',')[0])).toEqual(['free', 'paying']);
    expect(lines.slice(1).reduce((sum, l) => sum + Number(l.split(',')[2]), 0)).toBe(
      total('input_tokens'),
    );
  });

  it('refuses bad queries, naming the parameter', async () => {
    for (const [query, param] of [
      ['from=yesterday', 'from'],
      ['to=soon', 'to'],
      ['from=2000&to=1000', 'from'],
      ['group_by=region', 'group_by'],
      ['format=xml', 'format'],
      ['from=0&to=99999999999', 'from'],
    ]) {
      const answer = await admin(`/usage?${query}`);
      expect(answer.status, query).toBe(400);
      expect(JSON.parse(answer.text).error.param, query).toBe(param);
    }
  });
});
