import { defaultTestTenants, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  generate,
  metricSum,
  type Pool,
  SIM_MODEL,
  sleep,
  startPool,
  sumByLabels,
} from './support/pool.js';

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
            return sumByLabels(text, 'fairgate_tokens_total', ['direction']).get(direction) ?? 0;
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

  it('meters streams the client abandons mid-way with the usage so far the pod reported', async () => {
    // The sims take 10 ms per token (alpha): a stream of 200 tokens lasts 2 s, and each
    // client leaves after 20 to 59 events (the role chunk and the first tokens).
    const totals = async () => {
      const rows = JSON.parse((await admin('/usage?group_by=tenant')).text).data as Array<
        Record<string, number>
      >;
      const sum = (k: string) => rows.reduce((s, r) => s + Number(r[k]), 0);
      const sims = async (name: string) =>
        (await Promise.all(pool.sims.map((sim) => metricSum(sim.url, name)))).reduce(
          (a, b) => a + b,
          0,
        );
      return {
        requests: sum('requests'),
        input: sum('input_tokens'),
        output: sum('output_tokens'),
        simInput: await sims('vllm:prompt_tokens_total'),
        simOutput: await sims('vllm:generation_tokens_total'),
      };
    };
    const before = await totals();
    const abandon = async (client: number, n: number) => {
      const controller = new AbortController();
      const response = await fetch(`${pool.gateways[n % 2]?.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${client % 2 === 0 ? TEST_KEYS.paying : TEST_KEYS.free}`,
          'content-type': 'application/json',
        },
        body: JSON.stringify({
          model: SIM_MODEL,
          messages: [{ role: 'user', content: `abandon ${client} ${n} `.repeat(1 + (n % 4)) }],
          max_tokens: 200,
          stream: true,
          // Half the clients asked for usage: the gateway meters both the same way.
          ...(client % 4 < 2 ? { stream_options: { include_usage: true } } : {}),
        }),
        signal: controller.signal,
      });
      expect(response.status).toBe(200);
      const leaveAfter = 20 + ((client * 7 + n * 3) % 40);
      let events = 0;
      let text = '';
      const decoder = new TextDecoder();
      try {
        for await (const chunk of response.body!) {
          text += decoder.decode(chunk, { stream: true });
          events = text.split('\n\n').length - 1;
          if (events >= leaveAfter) controller.abort();
        }
      } catch {
        // aborted
      }
      expect(events).toBeGreaterThanOrEqual(leaveAfter);
      expect(text).not.toContain('[DONE]');
      // What the client saw is what vLLM would send it: no usage so far on any chunk.
      expect(text).not.toContain('"usage":{');
      return events;
    };
    await Promise.all(
      Array.from({ length: 8 }, async (_, client) => {
        for (let n = 0; n < 5; n++) await abandon(client, n);
      }),
    );
    await sleep(300); // two flushes
    const after = await totals();
    const input = after.input - before.input;
    const output = after.output - before.output;
    const simInput = after.simInput - before.simInput;
    const simOutput = after.simOutput - before.simOutput;
    expect(after.requests - before.requests).toBe(40);
    expect(input).toBe(simInput);
    // Tokens the pod generated between the last chunk the gateway read and the abort
    // reaching the pod are not seen. Each takes 10 ms, so under a loaded event loop a stream
    // may lose one or two; on average no more than one per stream.
    expect(output).toBeLessThanOrEqual(simOutput);
    expect(simOutput - output).toBeLessThanOrEqual(40);
    console.log(
      `abandoned streams: pods generated ${simOutput} tokens, gateway metered ${output} (gap ${simOutput - output}, ${(((simOutput - output) / simOutput) * 100).toFixed(2)}%)`,
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
