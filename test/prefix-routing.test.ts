import { type AppHandle, sha256Hex, startSim, TEST_KEYS } from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricSum, type Pool, startPool } from './support/pool.js';

/**
 * Prefix-aware pod choice across replicas (docs/routing.md): two sims behind two gateway
 * replicas sharing one Redis, `routing.prefix: on`. Four long system prompts, each asked
 * with a different user turn in every round, through alternating replicas. The sims'
 * usage.prompt_tokens_details.cached_tokens is the ground truth: with one index shared by
 * the replicas, only a prompt's first request misses the pods' prefix caches.
 */
const SYSTEM_PROMPTS = ['legal', 'medical', 'travel', 'code'].map((topic) =>
  `You are an assistant for ${topic} questions. `.repeat(80),
);
const ROUNDS = 6;
const SIM_FLAGS = { 'alpha-ms': 2, 'beta-ms': 0.01 };

interface Answer {
  status: number;
  cached: number;
  prompt: number;
}

async function ask(gateway: AppHandle, system: string, user: string): Promise<Answer> {
  const response = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'sim-model',
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: user },
      ],
      max_tokens: 4,
    }),
  });
  const body = (await response.json()) as {
    usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens: number } };
  };
  return {
    status: response.status,
    cached: body.usage?.prompt_tokens_details?.cached_tokens ?? 0,
    prompt: body.usage?.prompt_tokens ?? 0,
  };
}

describe('prefix-aware routing with one index shared by the replicas', () => {
  let stack: Pool;
  let sims: AppHandle[];
  let gateways: AppHandle[];

  beforeAll(async () => {
    stack = await startPool({
      sims: [SIM_FLAGS, SIM_FLAGS],
      podCap: 8,
      budget: 16,
      tenants: [{ id: 'paying', api_key_sha256: [sha256Hex(TEST_KEYS.paying)], queue_max: 100 }],
      scheduler: { queue_ttl_ms: 30_000 },
      sections: { routing: { prefix: 'on' }, scrape: { interval_ms: 100 } },
    });
    ({ sims, gateways } = stack);
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
  });

  it('only the first request of each system prompt misses, through either replica', async () => {
    const answers: Answer[] = [];
    for (let round = 0; round < ROUNDS; round += 1) {
      // Every prompt once per round, at once, in a different order each round.
      const order = SYSTEM_PROMPTS.map((_, i) => (i + round) % SYSTEM_PROMPTS.length);
      answers.push(
        ...(await Promise.all(
          order.map((p, i) =>
            ask(
              gateways[(round + i) % 2] as AppHandle,
              SYSTEM_PROMPTS[p] as string,
              `Question ${round}.${p}: what applies here?`,
            ),
          ),
        )),
      );
    }
    expect(answers.every((a) => a.status === 200)).toBe(true);
    // A hit serves at least the system prompt's blocks from the cache.
    const systemTokens = Math.floor((SYSTEM_PROMPTS[0] as string).length / 4);
    const misses = answers.filter((a) => a.cached < systemTokens - 32);
    expect(misses.length).toBeLessThanOrEqual(SYSTEM_PROMPTS.length);
    // The prompts are spread over both pods (every prompt's first request is sent at once).
    const served = await Promise.all(
      sims.map((sim) => metricSum(sim.url, 'vllm:request_success_total')),
    );
    expect(served.every((n) => n > 0)).toBe(true);
  }, 60_000);

  it("drops a restarted pod's entries from the index in Redis", async () => {
    const keys = new Redis(stack.redis.url);
    const { pool } = await stack.state();
    try {
      const indexed = async (pod: string) =>
        (await keys.scard(`{fg:${pool}}:pxc:${pod}`)) +
        (await keys.scard(`{fg:${pool}}:pxo:${pod}`));
      const before = await Promise.all(['pod-0', 'pod-1'].map(indexed));
      // Both pods hold entries (the first test spread the prompts over both): the one that
      // restarts has entries to lose, the other has entries to keep.
      expect(before[0], `entries before the restart: ${before}`).toBeGreaterThan(0);
      expect(before[1], `entries before the restart: ${before}`).toBeGreaterThan(0);
      // pod-1's process restarts on its port: the leader's scrape sees its counters reset.
      const [, sim1] = sims as [AppHandle, AppHandle];
      await sim1.stop();
      sims[1] = await startSim({ port: sim1.port, args: { ...SIM_FLAGS, model: 'sim-model' } });
      await expect.poll(() => indexed('pod-1'), { timeout: 10_000 }).toBe(0);
      expect(await indexed('pod-0')).toBe(before[0]);
    } finally {
      keys.disconnect();
    }
  }, 30_000);
});
