import { describe, expect, it } from 'vitest';
import {
  type BucketConfig,
  currentBucket,
  fullBucket,
  refill,
  take,
  trueUp,
  wholeTokens,
} from '../src/index.js';

const config: BucketConfig = { capacity: 100, refillPerSecond: 10 };

describe('token bucket', () => {
  it('starts full and refills at the configured rate, capped at capacity', () => {
    const start = { levelMilli: 0, updatedAtMs: 0 };
    expect(refill(start, config, 1_000).levelMilli).toBe(10_000);
    expect(refill(start, config, 5_500).levelMilli).toBe(55_000);
    expect(refill(start, config, 60_000).levelMilli).toBe(100_000);
    expect(fullBucket(config, 0).levelMilli).toBe(100_000);
  });

  it('never refills backwards when the clock steps back', () => {
    expect(refill({ levelMilli: 5, updatedAtMs: 1_000 }, config, 500)).toEqual({
      levelMilli: 5,
      updatedAtMs: 1_000,
    });
  });

  it.each([
    // level, cost, ok, retryAfterMs
    [100, 100, true, 0],
    [100, 30, true, 0],
    [20, 30, false, 1_000],
    [0, 5, false, 500],
    [-10, 5, false, 1_500],
  ])('level %s, cost %s -> ok %s, retry after %s ms', (level, cost, ok, retryAfterMs) => {
    const result = take({ levelMilli: level * 1_000, updatedAtMs: 0 }, config, cost, 0);
    expect(result.ok).toBe(ok);
    if (result.ok) expect(result.state.levelMilli).toBe((level - cost) * 1_000);
    else {
      expect(result.retryAfterMs).toBe(retryAfterMs);
      expect(result.state.levelMilli).toBe(level * 1_000); // a refusal takes nothing
    }
  });

  it('a cost above capacity can never fit', () => {
    const result = take(fullBucket(config, 0), config, 101, 0);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.neverFits).toBe(true);
  });

  it('sustains exactly the refill rate over many windows, with bursts up to capacity', () => {
    let state = fullBucket(config, 0);
    let served = 0;
    for (let t = 0; t <= 60_000; t += 10) {
      const result = take(state, config, 1, t);
      state = result.state;
      if (result.ok) served++;
    }
    // capacity (the initial burst) + 60 s x 10/s
    expect(served).toBe(100 + 600);
  });

  it('true-up returns over-estimates and charges under-estimates', () => {
    const after = take(fullBucket(config, 0), config, 50, 0);
    expect(after.ok).toBe(true);
    if (!after.ok) return;
    expect(trueUp(after.state, config, 50, 20, 0).levelMilli).toBe(80_000);
    expect(trueUp(after.state, config, 50, 90, 0).levelMilli).toBe(10_000);
    expect(trueUp({ levelMilli: 95_000, updatedAtMs: 0 }, config, 50, 0, 0).levelMilli).toBe(
      100_000,
    );
  });
});

describe('token bucket rules the scheduler adds', () => {
  it('a bucket without state is full; a stored one refills', () => {
    expect(currentBucket(null, config, 5_000)).toEqual({ levelMilli: 100_000, updatedAtMs: 5_000 });
    expect(currentBucket({ levelMilli: 0, updatedAtMs: 4_000 }, config, 5_000).levelMilli).toBe(
      10_000,
    );
  });

  it('a lowered capacity clamps the level at the next refill', () => {
    const lowered = { capacity: 20, refillPerSecond: 10 };
    expect(refill({ levelMilli: 90_000, updatedAtMs: 0 }, lowered, 0).levelMilli).toBe(20_000);
  });

  it('a refund is a true-up with actual 0, capped at capacity', () => {
    expect(trueUp({ levelMilli: 10_000, updatedAtMs: 0 }, config, 30, 0, 0).levelMilli).toBe(
      40_000,
    );
    expect(trueUp({ levelMilli: 90_000, updatedAtMs: 0 }, config, 30, 0, 0).levelMilli).toBe(
      100_000,
    );
  });

  it.each([
    [100_000, 100],
    [1_999, 1],
    [0, 0],
    [-1, -1],
    [-2_500, -3],
  ])('%s milli-tokens are %s whole tokens', (levelMilli, tokens) => {
    expect(wholeTokens({ levelMilli, updatedAtMs: 0 })).toBe(tokens);
  });

  it('retry-after is the time the shortfall takes to refill, rounded up', () => {
    const slow = { capacity: 10, refillPerSecond: 3 };
    const result = take({ levelMilli: 0, updatedAtMs: 0 }, slow, 1, 0);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.retryAfterMs).toBe(334);
    const never = take(
      { levelMilli: 0, updatedAtMs: 0 },
      { capacity: 10, refillPerSecond: 0 },
      1,
      0,
    );
    if (!never.ok) expect(never.retryAfterMs).toBe(Number.POSITIVE_INFINITY);
  });
});

describe('token bucket with a fractional refill rate', () => {
  it('refills even when polled every millisecond', () => {
    const slow: BucketConfig = { capacity: 10, refillPerSecond: 0.5 };
    let state = { levelMilli: 0, updatedAtMs: 0 };
    for (let t = 1; t <= 4_000; t++) state = refill(state, slow, t);
    expect(state.levelMilli).toBeCloseTo(2_000, 6);
  });
});
