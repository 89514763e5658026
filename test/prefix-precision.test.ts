import { type AppHandle, sha256Hex, startSim, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricSum, type Pool, startPool, sumByLabels } from './support/pool.js';

/**
 * The prefix index corrected by what the pods report (docs/routing.md, *How precise the
 * index is*): two sims behind two gateway replicas, `routing.prefix: on`, twelve long
 * system prompts. pod-1 restarts and the leader's scrape does not see it (one scrape per 10
 * minutes), so its index still lists the prompts it served before: only the pods' own
 * cached_tokens, checked at release against the index's prediction, can correct it.
 */
const TOPICS = ['legal', 'medical', 'travel', 'code', 'tax', 'music', 'food', 'sport'];
const PROMPTS = [...TOPICS, 'chess', 'garden', 'cars', 'poems'].map((topic) =>
  `You are an assistant for ${topic} questions. `.repeat(60),
);
const SIM_FLAGS = { 'alpha-ms': 2, 'beta-ms': 0.01 };
const PODS = ['pod-0', 'pod-1'] as const;
/** A miss: the pod had at least two blocks fewer than predicted (vLLM recomputes one). */
const MISS_TOKENS = 32;

interface Counts {
  predicted: number;
  cached: number;
}

describe('the prefix index corrected from the pods’ cached tokens', () => {
  let stack: Pool;
  let sims: AppHandle[];
  let gateways: AppHandle[];
  let sent = 0;

  beforeAll(async () => {
    stack = await startPool({
      sims: [SIM_FLAGS, SIM_FLAGS],
      podCap: 8,
      budget: 16,
      tenants: [{ id: 'paying', api_key_sha256: [sha256Hex(TEST_KEYS.paying)], queue_max: 100 }],
      scheduler: { queue_ttl_ms: 30_000 },
      sections: { routing: { prefix: 'on' }, scrape: { interval_ms: 600_000 } },
    });
    ({ sims, gateways } = stack);
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
  });

  /** One question about prompt `p`, through the replicas in turn; its status. */
  const ask = async (p: number): Promise<number> => {
    sent += 1;
    const gateway = gateways[sent % gateways.length] as AppHandle;
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [
          { role: 'system', content: PROMPTS[p] },
          { role: 'user', content: `Question ${sent}: what applies here?` },
        ],
        max_tokens: 2,
      }),
    });
    await response.arrayBuffer();
    return response.status;
  };

  /** Per pod, predicted and cached tokens summed over the replicas. */
  const precision = async (): Promise<Map<string, Counts>> => {
    const texts = await Promise.all(
      gateways.map(async (g) => (await fetch(`${g.url}/metrics`)).text()),
    );
    const counts = new Map<string, Counts>(PODS.map((pod) => [pod, { predicted: 0, cached: 0 }]));
    for (const text of texts) {
      for (const [name, field] of [
        ['fairgate_prefix_predicted_tokens_total', 'predicted'],
        ['fairgate_prefix_cached_tokens_total', 'cached'],
      ] as const) {
        for (const [pod, value] of sumByLabels(text, name, ['pod'])) {
          const entry = counts.get(pod);
          if (entry) entry[field] += value;
        }
      }
    }
    return counts;
  };

  /** Requests each pod's process has served. */
  const served = () =>
    Promise.all(sims.map((sim) => metricSum(sim.url, 'vllm:request_success_total')));

  /**
   * Asks about the prompts in turn, one request at a time, until pod-1 has served `count`
   * more; for each of pod-1's requests, whether the index predicted more than it had.
   */
  const untilPod1Served = async (count: number, from: number): Promise<boolean[]> => {
    const misses: boolean[] = [];
    let before = await served();
    let countsBefore = await precision();
    for (let p = from; misses.length < count && p < from + 20 * count; p += 1) {
      expect(await ask(p % PROMPTS.length)).toBe(200);
      // The release, and so the counters, follows the answer by a moment.
      await new Promise((resolve) => setTimeout(resolve, 50));
      const after = await served();
      const counts = await precision();
      if ((after[1] ?? 0) > (before[1] ?? 0)) {
        const b = countsBefore.get('pod-1') as Counts;
        const a = counts.get('pod-1') as Counts;
        misses.push(a.predicted - b.predicted - (a.cached - b.cached) >= MISS_TOKENS);
      }
      before = after;
      countsBefore = counts;
    }
    expect(misses.length).toBe(count);
    return misses;
  };

  it('a pod restarted unseen is corrected within its next 20 requests', async () => {
    // Every prompt three times: the two pods share them out and cache what they serve.
    for (let round = 0; round < 3; round += 1) {
      for (let p = 0; p < PROMPTS.length; p += 1) expect(await ask(p)).toBe(200);
    }
    const warm = await precision();
    const pod1 = warm.get('pod-1') as Counts;
    expect(pod1.predicted, 'pod-1 served prompts it had cached').toBeGreaterThan(0);
    expect(Math.abs(pod1.cached - pod1.predicted)).toBeLessThanOrEqual(pod1.predicted * 0.1);

    // pod-1's process restarts on its port, its cache empty; no scrape sees it.
    const sim1 = sims[1] as AppHandle;
    await sim1.stop();
    sims[1] = await startSim({ port: sim1.port, args: { ...SIM_FLAGS, model: 'sim-model' } });
    const first = await untilPod1Served(20, 0);
    const missed = first.filter(Boolean).length;
    // The restart was unseen (its first requests missed), and two misses correct the index:
    // the first ends the generation the stale entries were in, the second the one before.
    expect(missed, `pod-1's first 20 requests: ${first.map(Number).join('')}`).toBeGreaterThan(0);
    expect(missed, `pod-1's first 20 requests: ${first.map(Number).join('')}`).toBeLessThanOrEqual(
      2,
    );
    // From then on the index predicts what pod-1 has, within 10%.
    const before = (await precision()).get('pod-1') as Counts;
    const next = await untilPod1Served(20, 5);
    expect(next.filter(Boolean).length).toBe(0);
    const after = (await precision()).get('pod-1') as Counts;
    const predicted = after.predicted - before.predicted;
    const cached = after.cached - before.cached;
    expect(predicted).toBeGreaterThan(0);
    expect(
      Math.abs(cached - predicted),
      `predicted ${predicted}, cached ${cached}`,
    ).toBeLessThanOrEqual(predicted * 0.1);
  }, 120_000);
});
