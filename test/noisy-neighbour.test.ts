import { sha256Hex, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectClientsAndSimsAgree, ledger } from './support/ledger.js';
import {
  type GenerateResult,
  generate,
  openLoop,
  type Pool,
  percentile,
  SIM_MODEL,
  startPool,
  tally,
} from './support/pool.js';

/**
 * A paying standard tenant (weight 2, queue_max 8) chatting at about half of the pods'
 * capacity through replica 1, and a free sheddable tenant (weight 1, queue_max 2) flooding
 * at three times capacity through replica 2, with chat requests or with embeddings of long
 * texts (each a 2,000-token prefill). The paying tenant keeps its latency and loses (almost)
 * nothing, the free tier takes all the shedding, and the pods stay busy.
 */
const SEQS_PER_POD = 4;
const MAX_TOKENS = 10;
const TARGET_TTFT_MS = 500;
const PHASE_MS = 8_000;
/** The embeddings flood's text: 2,000 tokens by the shared estimate. */
const LONG_TEXT = 'abcd'.repeat(2_000);

type Flood = 'chat' | 'embeddings';

/** A request of the flood's kind, as sent straight to a sim. */
function floodBody(flood: Flood): unknown {
  return flood === 'chat'
    ? { model: SIM_MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: MAX_TOKENS }
    : { model: SIM_MODEL, input: LONG_TEXT };
}

/**
 * The sims' own capacity for requests of one kind: a closed loop of SEQS_PER_POD requests
 * per sim, straight to the sims.
 */
async function simCapacity(pool: Pool, ms: number, flood: Flood = 'chat'): Promise<number> {
  let completed = 0;
  const deadline = performance.now() + ms;
  const path = flood === 'chat' ? '/v1/chat/completions' : '/v1/embeddings';
  const worker = async (url: string) => {
    while (performance.now() < deadline) {
      const response = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(floodBody(flood)),
      });
      await response.arrayBuffer();
      if (response.ok && performance.now() <= deadline) completed++;
    }
  };
  await Promise.all(
    pool.sims.flatMap((sim) => Array.from({ length: SEQS_PER_POD }, () => worker(sim.url))),
  );
  return (completed * 1_000) / ms;
}

describe.each<Flood>(['chat', 'embeddings'])(
  'noisy neighbour across two replicas, the flood of %s',
  (flood) => {
    let pool: Pool;

    beforeAll(async () => {
      // A prefill costs 0.05 ms a token: the flood's 2,000-token texts weigh on the pods.
      const sim = { 'alpha-ms': 20, 'beta-ms': 0.05, 'max-num-seqs': SEQS_PER_POD };
      pool = await startPool({
        sims: [sim, sim],
        podCap: SEQS_PER_POD,
        budget: 2 * SEQS_PER_POD,
        tenants: [
          {
            id: 'paying',
            api_key_sha256: [sha256Hex(TEST_KEYS.paying)],
            default_class: 'standard',
            weight: 2,
            queue_max: 8,
          },
          {
            id: 'free',
            api_key_sha256: [sha256Hex(TEST_KEYS.free)],
            default_class: 'sheddable',
            weight: 1,
            queue_max: 2,
          },
        ],
        scheduler: { queue_ttl_ms: 1_000 },
      });
    }, 60_000);

    afterAll(async () => pool?.stop());

    it('paying keeps its p99 TTFT and drops <= 1%, free takes the shedding, throughput >= 90%', async () => {
      const capacity = await simCapacity(pool, 3_000);
      const floodCapacity = flood === 'chat' ? capacity : await simCapacity(pool, 3_000, flood);
      const [r1, r2] = pool.gateways.map((g) => g.url) as [string, string];
      const before = await ledger(pool);
      const start = performance.now();
      const [paying, free] = await Promise.all([
        openLoop(capacity / 2, PHASE_MS, () =>
          generate(r1, TEST_KEYS.paying, { maxTokens: MAX_TOKENS, stream: true }),
        ),
        openLoop(floodCapacity * 3, PHASE_MS, () =>
          flood === 'chat'
            ? generate(r2, TEST_KEYS.free, { maxTokens: MAX_TOKENS, stream: true })
            : generate(r2, TEST_KEYS.free, { endpoint: 'embeddings', content: LONG_TEXT }),
        ),
      ]);
      const served = (rs: GenerateResult[]) => rs.filter((r) => r.status === 200);
      const payingTtft = served(paying).map((r) => r.ttftMs!);
      const p99 = percentile(payingTtft, 99);
      const payingDrops = paying.length - served(paying).length;
      // Throughput over the middle of the phase, when both loops are running, as a share of
      // what the pods can do: each kind's completions per second over its own capacity.
      const from = start + 1_000;
      const to = start + PHASE_MS - 500;
      const rate = (rs: GenerateResult[]) =>
        (rs.filter((r) => r.status === 200 && r.endedAt >= from && r.endedAt < to).length * 1_000) /
        (to - from);
      const utilization = rate(paying) / capacity + rate(free) / floodCapacity;
      // Printed, and in every assertion's message (CI's JSON report keeps no console output).
      const picture = [
        `sims' capacity ${capacity.toFixed(1)} chat req/s, ${floodCapacity.toFixed(1)} ${flood} req/s`,
        `paying: offered ${paying.length}, ${JSON.stringify(tally(paying))}, p50 TTFT ${percentile(payingTtft, 50).toFixed(0)} ms, p99 ${p99.toFixed(0)} ms (target ${TARGET_TTFT_MS})`,
        `free: offered ${free.length}, ${JSON.stringify(tally(free))}`,
        `pool throughput: paying ${rate(paying).toFixed(1)} req/s, free ${rate(free).toFixed(1)} req/s = ${(utilization * 100).toFixed(1)}% of capacity`,
      ].join('\n');
      console.log(picture);
      expect(payingDrops / paying.length, picture).toBeLessThanOrEqual(0.01);
      expect(p99, picture).toBeLessThanOrEqual(TARGET_TTFT_MS);
      const freeDrops = free.length - served(free).length;
      expect(freeDrops, picture).toBeGreaterThan(free.length / 2);
      expect(
        free.every((r) => r.status === 200 || r.status === 429),
        picture,
      ).toBe(true);
      expect(utilization, picture).toBeGreaterThanOrEqual(0.9);
      await expectClientsAndSimsAgree(pool, before, [...paying, ...free]);
    }, 60_000);
  },
);
