import { estimatePromptTokens, parseChatCompletionRequest } from '@fairgate/openai';
import { sha256Hex, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  expectConserved,
  generate,
  openLoop,
  type Pool,
  SIM_MODEL,
  startPool,
  tally,
} from './support/pool.js';

/**
 * The per-tenant token bucket across two replicas: taken in the enqueue script on the
 * server clock, so the pool-wide rate is exact whichever replica a request enters by.
 */
const CONTENT = 'x'.repeat(36);
const COST = estimatePromptTokens(
  parseChatCompletionRequest({
    model: SIM_MODEL,
    messages: [{ role: 'user', content: CONTENT }],
    max_tokens: 4,
  }),
);
const RATE = 20; // requests per second the refill pays for
const BURST = 10; // requests the capacity holds

describe('token bucket across two replicas', () => {
  let pool: Pool;

  beforeAll(async () => {
    pool = await startPool({
      // Random output lengths, so the true-up of max_tokens is visible.
      sims: [{ 'output-len-mode': 'random' }, { 'output-len-mode': 'random' }],
      budget: 64,
      tenants: [
        {
          id: 'paying',
          api_key_sha256: [sha256Hex(TEST_KEYS.paying)],
          queue_max: 100,
          token_bucket: { capacity: BURST * COST, refill_per_second: RATE * COST },
        },
        {
          // A trickle of refill (1 token/s): a burst sees the capacity alone.
          id: 'burst',
          api_key_sha256: [sha256Hex(TEST_KEYS.extra)],
          queue_max: 100,
          token_bucket: { capacity: BURST * COST, refill_per_second: 1 },
        },
        {
          // No refill: the level moves only by takes and true-ups.
          id: 'free',
          api_key_sha256: [sha256Hex(TEST_KEYS.free)],
          queue_max: 100,
          token_bucket: { capacity: 1_000, refill_per_second: 0, include_max_tokens: true },
        },
      ],
    });
  }, 60_000);

  afterAll(async () => {
    await pool?.stop();
  });

  const via = (i: number) => pool.gateways[i % pool.gateways.length]!.url;

  it('a full bucket admits a burst of exactly its capacity', async () => {
    const results = await Promise.all(
      Array.from({ length: 3 * BURST }, (_, i) =>
        generate(via(i), TEST_KEYS.extra, { content: CONTENT }),
      ),
    );
    const counts = tally(results);
    console.log(`burst of ${3 * BURST}: ${JSON.stringify(counts)} (cost ${COST} tokens each)`);
    expect(counts['200']).toBe(BURST);
    expect(counts['429 rate_limited']).toBe(3 * BURST - (counts['200'] ?? 0));
    const limited = results.find((r) => r.status === 429)!;
    // The shortfall of one request at 1 token/s: about COST seconds.
    expect(Number(limited.retryAfter)).toBeGreaterThanOrEqual(COST - 2);
    expect(Number(limited.retryAfter)).toBeLessThanOrEqual(COST);
  });

  it('sustains the refill rate within 5% over ten 1 s windows', async () => {
    const offered = 2 * RATE;
    const seconds = 11;
    const results = await openLoop(offered, seconds * 1_000, (i) =>
      generate(via(i), TEST_KEYS.paying, { content: CONTENT }),
    );
    const start = Math.min(...results.map((r) => r.sentAt));
    const windows = Array.from({ length: seconds }, () => 0);
    for (const r of results) {
      if (r.status !== 200) {
        expect(r.dropReason).toBe('rate_limited');
        continue;
      }
      const w = Math.floor((r.sentAt - start) / 1_000);
      if (w < seconds) windows[w]!++;
    }
    console.log(`admitted per 1 s window (refill pays ${RATE}/s): ${windows.join(' ')}`);
    // Window 0 spends the refilled burst; the next ten run on the refill alone.
    const steady = windows.slice(1);
    const total = steady.reduce((a, b) => a + b, 0);
    expect(Math.abs(total - RATE * steady.length) / (RATE * steady.length)).toBeLessThanOrEqual(
      0.05,
    );
    for (const count of steady) expect(Math.abs(count - RATE)).toBeLessThanOrEqual(3);
  }, 30_000);

  it('trues up max_tokens to the actual output at release, and refuses what never fits', async () => {
    const before = (await pool.state()).tenants.find((t) => t.tenant === 'free')!.tokens!;
    expect(before).toBe(1_000);
    const result = await generate(via(0), TEST_KEYS.free, { content: CONTENT, maxTokens: 100 });
    expect(result.status).toBe(200);
    const usage = (JSON.parse(result.body) as { usage: { completion_tokens: number } }).usage;
    expect(usage.completion_tokens).toBeLessThan(100); // random length: the estimate was high
    // Charged COST + 100 at enqueue, then given back 100 - completion_tokens.
    await expect
      .poll(async () => (await pool.state(1)).tenants.find((t) => t.tenant === 'free')!.tokens)
      .toBe(1_000 - COST - usage.completion_tokens);

    // Costs more than the whole bucket: 429 without Retry-After (waiting would not help).
    const huge = await generate(via(1), TEST_KEYS.free, { content: CONTENT, maxTokens: 2_000 });
    expect(huge.status).toBe(429);
    expect(huge.dropReason).toBe('rate_limited');
    expect(huge.retryAfter).toBeNull();
    const state = await expectConserved(pool);
    const free = state.counters.find((c) => c.tenant === 'free')!;
    expect(free.rejected.rate_limited).toBe(1);
  });
});
