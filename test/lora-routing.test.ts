import { type AppHandle, sha256Hex, startSim, TEST_KEYS } from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { type Pool, startPool } from './support/pool.js';

/**
 * LoRA adapters go where they are loaded (docs/routing.md, *LoRA adapters*; issue 56,
 * acceptance 3): 4 sims with `--max-loras 2` and 6 adapters, 2 per pod, each adapter on
 * 1-2 pods, behind 2 gateway replicas on one Redis. LORA_REQUESTS requests (10,000 by
 * default) spread evenly over the adapters, LORA_CONCURRENCY (64) at a time, each run once
 * with the adapter-aware choice (`routing.lora: on`, the default) and once with the
 * least-loaded choice (`routing.lora: off`), which the pods answer 404 whenever it picks one
 * without the adapter. Then `routing.lora_load: on`: an adapter no pod holds is loaded on
 * the one pod with a free slot, once, and requests for an adapter on two pods are split
 * within 15% of the mean.
 */
const REQUESTS = Number(process.env.LORA_REQUESTS ?? 10_000);
const CONCURRENCY = Number(process.env.LORA_CONCURRENCY ?? 64);
const SIM = { 'alpha-ms': 1, 'beta-ms': 0, 'gamma-ms': 0, 'max-loras': 2, 'lora-load-ms': 200 };
/** a and d on two pods each, b, c, e, f on one. */
const PLACEMENT = [
  'a=/lora/a b=/lora/b',
  'a=/lora/a c=/lora/c',
  'd=/lora/d e=/lora/e',
  'd=/lora/d f=/lora/f',
];
const ADAPTERS = ['a', 'b', 'c', 'd', 'e', 'f'];
const TENANT = { id: 'paying', api_key_sha256: [sha256Hex(TEST_KEYS.paying)], queue_max: 10_000 };

async function start(placement: string[], routing: Record<string, unknown>): Promise<Pool> {
  const stack = await startPool({
    sims: placement.map((modules) => ({ ...SIM, 'lora-modules': modules })),
    podCap: 16,
    budget: 64,
    tenants: [TENANT],
    scheduler: { queue_ttl_ms: 30_000 },
    sections: { routing, scrape: { interval_ms: 100 } },
  });
  // A pod says its adapter slots (vllm:lora_requests_info) once its engine stepped: one
  // request each, straight to the pods. The leader has reported every pod's adapters and
  // slots once the pods hash has an lslots field of each.
  for (const sim of stack.sims) {
    await fetch(`${sim.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: 'hi', max_tokens: 1 }),
    }).then((response) => response.arrayBuffer());
  }
  const redis = new Redis(stack.redis.url);
  try {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const keys = await redis.keys('*lora:pod-*');
      const [podsKey] = await redis.keys('*}:pods');
      const pods = podsKey ? await redis.hkeys(podsKey) : [];
      const slots = pods.filter((field) => field.startsWith('lslots:')).length;
      if (keys.length >= placement.length && slots >= placement.length) break;
      if (Date.now() > deadline) throw new Error(`adapters never reported: ${keys.join(', ')}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    redis.disconnect();
  }
  return stack;
}

async function ask(gateway: AppHandle, model: string): Promise<number> {
  const response = await fetch(`${gateway.url}/v1/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'hi', max_tokens: 1 }),
  });
  await response.arrayBuffer();
  return response.status;
}

/** `count` requests for `models` in turn, `CONCURRENCY` at a time, through both replicas. */
async function run(stack: Pool, models: string[], count: number): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < count; i = next++) {
      const status = await ask(
        stack.gateways[i % 2] as AppHandle,
        models[i % models.length] as string,
      );
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return statuses;
}

async function received(sims: AppHandle[]): Promise<number[]> {
  return Promise.all(
    sims.map(async (sim) => {
      const stats = (await (await fetch(`${sim.url}/debug/stats`)).json()) as {
        requests_received: number;
      };
      return stats.requests_received;
    }),
  );
}

async function listed(sim: AppHandle): Promise<string[]> {
  const body = (await (await fetch(`${sim.url}/v1/models`)).json()) as { data: { id: string }[] };
  return body.data.map((entry) => entry.id);
}

/** The largest distance from the mean, as a fraction of it. */
const spread = (counts: number[]) => {
  const mean = counts.reduce((a, b) => a + b, 0) / counts.length;
  return Math.max(...counts.map((c) => Math.abs(c - mean))) / mean;
};

describe('LoRA adapters go where they are loaded', () => {
  let stack: Pool | undefined;
  afterAll(async () => {
    await stack?.stop();
  });

  it(`${REQUESTS} requests over 6 adapters: no 404 with the adapter-aware choice`, async () => {
    const counts: Record<string, Map<number, number>> = {};
    for (const lora of ['on', 'off']) {
      stack = await start(PLACEMENT, { lora });
      const started = performance.now();
      counts[lora] = await run(stack, ADAPTERS, REQUESTS);
      const seconds = (performance.now() - started) / 1_000;
      console.log(
        `routing.lora: ${lora}: ${REQUESTS} requests in ${seconds.toFixed(1)} s, statuses ${JSON.stringify(Object.fromEntries(counts[lora] as Map<number, number>))}`,
      );
      await stack.stop();
      stack = undefined;
    }
    expect(counts.on?.get(200)).toBe(REQUESTS);
    expect(counts.on?.get(404) ?? 0).toBe(0);
    // The least-loaded choice sends an adapter held by one pod of four elsewhere most times.
    expect(counts.off?.get(404) ?? 0).toBeGreaterThan(REQUESTS / 4);
  }, 120_000);

  it('lora_load on: an adapter on no pod is loaded once, on the pod with a free slot; load is split evenly', async () => {
    // pod-3 holds one adapter of its two slots.
    const placement = [...PLACEMENT.slice(0, 3), 'd=/lora/d'];
    stack = await start(placement, { lora_load: 'on', lora_paths: { g: '/lora/g' } });
    const statuses = await run(stack, ['g'], 400);
    expect(Object.fromEntries(statuses)).toEqual({ 200: 400 });
    const holders = [];
    for (const [i, sim] of stack.sims.entries())
      if ((await listed(sim)).includes('g')) holders.push(i);
    expect(holders).toEqual([3]);

    // a on pod-0 and pod-1, d on pod-2 and pod-3: each pair's share of its adapter's requests.
    const before = await received(stack.sims);
    const split = await run(stack, ['a', 'd'], 2_000);
    expect(Object.fromEntries(split)).toEqual({ 200: 2_000 });
    const after = await received(stack.sims);
    const served = after.map((n, i) => n - (before[i] as number));
    console.log(
      `lora_load: requests per pod for a (pod-0, pod-1) and d (pod-2, pod-3): ${served.join('/')}`,
    );
    expect(spread(served.slice(0, 2))).toBeLessThanOrEqual(0.15);
    expect(spread(served.slice(2, 4))).toBeLessThanOrEqual(0.15);

    // pod-3 restarts: g, loaded at run time, is gone. The requests it answers 404 drop g
    // there (each replica's lists and the scheduler), so g is loaded again.
    const sim3 = stack.sims[3] as AppHandle;
    await sim3.stop();
    stack.sims[3] = await startSim({
      port: sim3.port,
      args: { ...SIM, 'lora-modules': 'd=/lora/d', model: 'sim-model' },
    });
    const again = await run(stack, ['g'], 400);
    console.log(
      `lora_load: 400 requests for g after pod-3 restarted: ${JSON.stringify(Object.fromEntries(again))}`,
    );
    expect(again.get(404) ?? 0).toBeLessThanOrEqual(2 * CONCURRENCY);
    expect(Object.fromEntries(await run(stack, ['g'], 200))).toEqual({ 200: 200 });
  }, 60_000);
});
