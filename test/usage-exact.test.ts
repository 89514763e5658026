import { defaultTestTenants, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricSum, type Pool, SIM_MODEL, sleep, startPool, sumByLabels } from './support/pool.js';

/**
 * Usage metering under churn (docs/tenants.md, *Usage*): 20,000 requests of two tenants
 * through 3 replicas — plain and streamed, one stream in five abandoned by its client after
 * its first chunks, and one replica killed with SIGKILL part-way. The input and output tokens
 * /admin/usage reports equal the sims' own vllm:prompt_tokens_total and
 * vllm:generation_tokens_total within 0.5%, and per tenant what the replicas'
 * fairgate_tokens_total counted (the killed one's as scraped just before the kill).
 */
const REQUESTS = 20_000;
const CLIENTS = 48;
const REPLICAS = 3;
const KILL_AFTER = 8_000;
const TOLERANCE = 0.005;

type Kind = 'plain' | 'stream' | 'abandoned';

function kindOf(n: number): Kind {
  if (n % 2 === 0) return 'plain';
  return n % 5 === 1 ? 'abandoned' : 'stream';
}

/** fairgate_tokens_total of one replica's /metrics text, by tenant and direction. */
const tokensByTenant = (text: string) =>
  sumByLabels(text, 'fairgate_tokens_total', ['tenant', 'direction']);

describe('usage metering: 20,000 requests, abandoned streams and a replica killed', () => {
  let pool: Pool;

  beforeAll(async () => {
    pool = await startPool({
      replicas: REPLICAS,
      budget: 64,
      sims: [{ 'alpha-ms': 4 }, { 'alpha-ms': 4 }],
      tenants: defaultTestTenants(),
    });
  }, 60_000);
  afterAll(() => pool?.stop());

  it('meters what the pods counted, within 0.5%, and once', async () => {
    const dead = new Set<number>();
    let next = 0;
    let killedScrape: Map<string, number> | undefined;
    const tally = { ok: 0, abandoned: 0, failed: 0 };
    const one = async (n: number) => {
      let replica = n % REPLICAS;
      if (dead.has(replica)) replica = (replica + 1) % REPLICAS;
      const kind = kindOf(n);
      const controller = new AbortController();
      try {
        const response = await fetch(`${pool.gateways[replica]!.url}/v1/chat/completions`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${n % 3 === 0 ? TEST_KEYS.free : TEST_KEYS.paying}`,
            'content-type': 'application/json',
          },
          body: JSON.stringify({
            model: SIM_MODEL,
            messages: [
              { role: 'user', content: `request ${n} ${'of many words '.repeat(n % 11)}` },
            ],
            max_tokens: kind === 'abandoned' ? 48 : 16 + (n % 33),
            stream: kind !== 'plain',
          }),
          signal: controller.signal,
        });
        if (kind === 'abandoned' && response.body) {
          let chunks = 0;
          for await (const _ of response.body) {
            chunks += 1;
            if (chunks === 4) {
              controller.abort();
              break;
            }
          }
          tally.abandoned += 1;
          return;
        }
        await response.text();
        if (response.status === 200) tally.ok += 1;
        else tally.failed += 1;
      } catch {
        if (kind === 'abandoned' && controller.signal.aborted) tally.abandoned += 1;
        else tally.failed += 1;
      }
    };
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (next < REQUESTS) {
          const n = next;
          next += 1;
          if (n === KILL_AFTER) {
            const victim = pool.gateways[REPLICAS - 1]!;
            killedScrape = tokensByTenant(await (await fetch(`${victim.url}/metrics`)).text());
            dead.add(REPLICAS - 1);
            await victim.kill();
          }
          await one(n);
        }
      }),
    );
    await sleep(500); // the live replicas' last flushes

    const usage = (await (
      await fetch(`${pool.gateways[0]!.url}/admin/usage?group_by=tenant`, {
        headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
      })
    ).json()) as { data: unknown };
    const rows = usage.data as Array<{
      tenant: string;
      input_tokens: number;
      output_tokens: number;
      requests: number;
    }>;
    const total = (k: 'input_tokens' | 'output_tokens' | 'requests') =>
      rows.reduce((sum, r) => sum + r[k], 0);
    const simSum = async (name: string) =>
      (await Promise.all(pool.sims.map((sim) => metricSum(sim.url, name)))).reduce(
        (a, b) => a + b,
        0,
      );
    const simInput = await simSum('vllm:prompt_tokens_total');
    const simOutput = await simSum('vllm:generation_tokens_total');
    const gap = (metered: number, pods: number) => Math.abs(metered - pods) / pods;
    console.log(
      `usage-exact: ${JSON.stringify(tally)}; metered ${total('requests')} requests, input ${total('input_tokens')} / sims ${simInput} (gap ${(gap(total('input_tokens'), simInput) * 100).toFixed(3)}%), output ${total('output_tokens')} / sims ${simOutput} (gap ${(gap(total('output_tokens'), simOutput) * 100).toFixed(3)}%)`,
    );
    expect(tally.ok + tally.abandoned + tally.failed).toBe(REQUESTS);
    expect(tally.abandoned).toBeGreaterThan(1_000);
    expect(gap(total('input_tokens'), simInput)).toBeLessThanOrEqual(TOLERANCE);
    expect(gap(total('output_tokens'), simOutput)).toBeLessThanOrEqual(TOLERANCE);

    // Per tenant, the same as the replicas' Prometheus counters (the dead one's last scrape).
    const scrapes = [
      ...(await Promise.all(
        pool.gateways
          .slice(0, REPLICAS - 1)
          .map(async (g) => tokensByTenant(await (await fetch(`${g.url}/metrics`)).text())),
      )),
      killedScrape!,
    ];
    for (const row of rows) {
      for (const [direction, field] of [
        ['input', 'input_tokens'],
        ['output', 'output_tokens'],
      ] as const) {
        const counted = scrapes.reduce(
          (sum, s) => sum + (s.get(`${row.tenant}|${direction}`) ?? 0),
          0,
        );
        expect(gap(row[field], counted), `${row.tenant} ${direction}`).toBeLessThanOrEqual(
          TOLERANCE,
        );
      }
    }
  }, 300_000);
});
