import { sha256Hex, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricSum, type Pool, SIM_MODEL, startPool } from './support/pool.js';

/**
 * A tenant's daily token budget, exact across replicas (docs/tenants.md, *Budgets and
 * rates*): 3 replicas on one Redis, 2 sims; 24 clients of one tenant with a budget of 50,000
 * tokens a day hammer it through all three until it is spent. The tokens the pods counted
 * go over the budget by at most one request's max_tokens per replica; then every replica
 * answers 429 budget_exhausted, with OpenAI's x-ratelimit-* headers and a Retry-After that
 * name the end of the UTC day. Every answer of the tenant carries the headers; a tenant
 * without limits gets none.
 */
const BUDGET = 50_000;
const MAX_TOKENS = 64;
const REPLICAS = 3;
const CLIENTS_PER_REPLICA = 8;
/** Bounds each client's loop (the budget is spent after ~450 requests in all). */
const MOST_REQUESTS_PER_CLIENT = 200;
/** The other tenant's requests per minute. */
const RATE = 30;

interface Answer {
  status: number;
  headers: Headers;
  body: string;
}

async function chat(url: string, key: string, n: number): Promise<Answer> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: SIM_MODEL,
      messages: [{ role: 'user', content: `request ${n}: ${'spend the budget '.repeat(n % 9)}` }],
      max_tokens: MAX_TOKENS,
      stream: n % 3 === 0,
    }),
  });
  return { status: response.status, headers: response.headers, body: await response.text() };
}

/** A Go-style duration (`17h3m0.5s`, `8.64s`, `20ms`) in ms. */
function durationMs(text: string): number {
  const m = /^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:([\d.]+)s)?(?:(\d+)ms)?$/.exec(text);
  if (!m) throw new Error(`not a duration: ${text}`);
  return (
    Number(m[1] ?? 0) * 3_600_000 +
    Number(m[2] ?? 0) * 60_000 +
    Number(m[3] ?? 0) * 1_000 +
    Number(m[4] ?? 0)
  );
}

describe('a daily token budget hammered through 3 replicas', () => {
  let pool: Pool;
  const url = (replica: number) => pool.gateways[replica % REPLICAS]!.url;

  beforeAll(async () => {
    pool = await startPool({
      replicas: REPLICAS,
      tenants: [
        {
          id: 'paying',
          api_key_sha256: [sha256Hex(TEST_KEYS.paying)],
          queue_max: 1_000,
          limits: { tokens_per_day: BUDGET },
        },
        { id: 'free', api_key_sha256: [sha256Hex(TEST_KEYS.free)] },
        {
          id: 'extra',
          api_key_sha256: [sha256Hex(TEST_KEYS.extra)],
          queue_max: 1_000,
          limits: { requests_per_minute: RATE },
        },
      ],
    });
  }, 60_000);
  afterAll(() => pool?.stop());

  it('goes over by at most one max_tokens per replica, then 429 budget_exhausted until the day ends', async () => {
    const answers: Answer[] = [];
    await Promise.all(
      Array.from({ length: REPLICAS * CLIENTS_PER_REPLICA }, async (_, client) => {
        for (let n = 0; n < MOST_REQUESTS_PER_CLIENT; n++) {
          const answer = await chat(url(client), TEST_KEYS.paying, client * 1_000 + n);
          answers.push(answer);
          if (answer.status !== 200) return;
        }
      }),
    );
    // Reservations of the last requests in flight may have come back: spend what is left one
    // request at a time, each settled before the next.
    let served = answers.filter((a) => a.status === 200).length;
    for (let n = 0; n < 100; n++) {
      const answer = await chat(url(n), TEST_KEYS.paying, n);
      answers.push(answer);
      if (answer.status !== 200) break;
      served += 1;
    }
    const refusals = answers.filter((a) => a.status !== 200);
    expect(new Set(refusals.map((a) => a.status))).toEqual(new Set([429]));
    expect(new Set(refusals.map((a) => JSON.parse(a.body).error.code))).toEqual(
      new Set(['budget_exhausted']),
    );

    const simSum = async (name: string) =>
      (await Promise.all(pool.sims.map((sim) => metricSum(sim.url, name)))).reduce(
        (a, b) => a + b,
        0,
      );
    const used =
      (await simSum('vllm:prompt_tokens_total')) + (await simSum('vllm:generation_tokens_total'));
    console.log(
      `tenant-budgets: ${served} requests served, ${used} tokens used of ${BUDGET} (over by ${used - BUDGET}; bound ${REPLICAS * MAX_TOKENS}), ${refusals.length} refused`,
    );
    expect(used).toBeGreaterThanOrEqual(BUDGET);
    expect(used - BUDGET).toBeLessThanOrEqual(REPLICAS * MAX_TOKENS);

    // Every answer carried the headers: the budget, and what was left after it.
    for (const answer of answers) {
      expect(answer.headers.get('x-ratelimit-limit-tokens')).toBe(String(BUDGET));
      expect(Number(answer.headers.get('x-ratelimit-remaining-tokens'))).toBeGreaterThanOrEqual(0);
      expect(answer.headers.get('x-ratelimit-limit-requests')).toBeNull();
    }
    const remaining = answers
      .filter((a) => a.status === 200)
      .map((a) => Number(a.headers.get('x-ratelimit-remaining-tokens')));
    expect(Math.max(...remaining)).toBeLessThan(BUDGET);

    // Every replica refuses now, and names the end of the UTC day.
    const dayEnd = (Math.floor(Date.now() / 86_400_000) + 1) * 86_400_000;
    for (let replica = 0; replica < REPLICAS; replica++) {
      const answer = await chat(url(replica), TEST_KEYS.paying, replica);
      expect(answer.status).toBe(429);
      const { error } = JSON.parse(answer.body);
      expect(error.code).toBe('budget_exhausted');
      expect(error.type).toBe('rate_limit_error');
      expect(error.message).toContain(`${BUDGET} tokens per day`);
      expect(error.message).toContain(new Date(dayEnd).toISOString());
      expect(answer.headers.get('x-fairgate-drop-reason')).toBe('budget_exhausted');
      expect(answer.headers.get('x-ratelimit-remaining-tokens')).toBe('0');
      const reset = durationMs(answer.headers.get('x-ratelimit-reset-tokens')!);
      expect(Math.abs(Date.now() + reset - dayEnd)).toBeLessThan(5_000);
      const retryAfterS = Number(answer.headers.get('retry-after'));
      expect(Math.abs(Date.now() + retryAfterS * 1_000 - dayEnd)).toBeLessThan(5_000);
    }

    // The pool's state shows the standing; a tenant without limits is served, with no headers.
    const state = await pool.state(1);
    const paying = state.tenants.find((t) => t.tenant === 'paying');
    expect(paying?.standing).toMatchObject({
      requests: null,
      tokens: { limit: BUDGET, remaining: 0 },
    });
    const free = await chat(url(2), TEST_KEYS.free, 1);
    expect(free.status).toBe(200);
    expect([...free.headers.keys()].filter((h) => h.startsWith('x-ratelimit'))).toEqual([]);
  }, 120_000);

  it('requests per minute: one minute admits exactly its rate across the replicas, the rest get 429 rate_limited until the minute ends', async () => {
    // Well inside one minute: at least 15 s of it left.
    const intoMinute = Date.now() % 60_000;
    if (intoMinute > 45_000) await new Promise((r) => setTimeout(r, 60_500 - intoMinute));
    const answers = await Promise.all(
      Array.from({ length: RATE + 15 }, (_, n) => chat(url(n), TEST_KEYS.extra, n)),
    );
    const minuteEnd = (Math.floor(Date.now() / 60_000) + 1) * 60_000;
    expect(answers.filter((a) => a.status === 200)).toHaveLength(RATE);
    const refused = answers.filter((a) => a.status !== 200);
    expect(refused).toHaveLength(15);
    for (const answer of refused) {
      expect(answer.status).toBe(429);
      expect(JSON.parse(answer.body).error.code).toBe('rate_limited');
      expect(JSON.parse(answer.body).error.message).toContain(
        `its ${RATE} requests of this minute`,
      );
      expect(answer.headers.get('x-ratelimit-remaining-requests')).toBe('0');
      const reset = durationMs(answer.headers.get('x-ratelimit-reset-requests')!);
      expect(Math.abs(Date.now() + reset - minuteEnd)).toBeLessThan(2_000);
      expect(Number(answer.headers.get('retry-after'))).toBeLessThanOrEqual(60);
    }
    // The served answers counted down from RATE - 1 to 0, each value once.
    const left = answers
      .filter((a) => a.status === 200)
      .map((a) => Number(a.headers.get('x-ratelimit-remaining-requests')))
      .sort((a, b) => a - b);
    expect(left).toEqual(Array.from({ length: RATE }, (_, i) => i));
    for (const answer of answers) {
      expect(answer.headers.get('x-ratelimit-limit-requests')).toBe(String(RATE));
      expect(answer.headers.get('x-ratelimit-limit-tokens')).toBeNull();
    }
  }, 90_000);
});
