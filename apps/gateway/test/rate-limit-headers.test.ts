import { describe, expect, it } from 'vitest';
import { formatDuration, limitMessage, rateLimitHeaders } from '../src/rate-limit-headers.js';

describe('formatDuration (Go durations, as OpenAI prints its resets)', () => {
  it.each([
    [0, '0ms'],
    [-5, '0ms'],
    [20, '20ms'],
    [999, '999ms'],
    [999.6, '1s'],
    [1_000, '1s'],
    [8_640, '8.64s'],
    [59_999, '59.999s'],
    [60_000, '1m0s'],
    [360_000, '6m0s'],
    [3_600_000, '1h0m0s'],
    [3_723_500, '1h2m3.5s'],
    [86_399_999, '23h59m59.999s'],
    [31 * 86_400_000, '744h0m0s'],
    [1_005, '1.005s'],
    [1_050, '1.05s'],
    [1_500, '1.5s'],
    [61_010, '1m1.01s'],
    [3_600_001, '1h0m0.001s'],
  ])('%d ms is %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });
});

describe('rateLimitHeaders', () => {
  it('names each limit the tenant has, and only those', () => {
    expect(
      rateLimitHeaders({
        requests: { limit: 60, remaining: 59, resetMs: 1_000 },
        tokens: { limit: 50_000, remaining: 0, resetMs: 360_000 },
      }),
    ).toEqual({
      'x-ratelimit-limit-requests': '60',
      'x-ratelimit-remaining-requests': '59',
      'x-ratelimit-reset-requests': '1s',
      'x-ratelimit-limit-tokens': '50000',
      'x-ratelimit-remaining-tokens': '0',
      'x-ratelimit-reset-tokens': '6m0s',
    });
    expect(
      rateLimitHeaders({ requests: null, tokens: { limit: 5, remaining: 4, resetMs: 20 } }),
    ).toEqual({
      'x-ratelimit-limit-tokens': '5',
      'x-ratelimit-remaining-tokens': '4',
      'x-ratelimit-reset-tokens': '20ms',
    });
    expect(rateLimitHeaders({ requests: null, tokens: null })).toEqual({});
  });
});

describe('limitMessage', () => {
  const tenant = {
    id: 'acme',
    limits: { tokens_per_day: 50_000, tokens_per_month: 1_000_000, requests_per_minute: 30 },
  } as Parameters<typeof limitMessage>[0];
  const now = Date.UTC(2026, 11, 2, 18, 0, 0, 250);

  it('names the budget and the end of its window (on the minute: skew and trip rounded off)', () => {
    const dayEnd = Date.UTC(2026, 11, 3);
    expect(limitMessage(tenant, 'tokens', dayEnd - now + 1_234, now)).toBe(
      "Tenant 'acme' has spent its token budget (50000 tokens per day, 1000000 tokens per month); it renews at 2026-12-03T00:00:00.000Z",
    );
    expect(limitMessage(tenant, 'requests', 59_750 - 900, now)).toBe(
      "Tenant 'acme' has made its 30 requests of this minute; the next minute starts at 2026-12-02T18:01:00.000Z",
    );
  });
});
