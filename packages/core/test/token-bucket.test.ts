import { describe, expect, it } from 'vitest';
import { type BucketConfig, fullBucket, refill, take, trueUp } from '../src/index.js';

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

describe('token bucket with a fractional refill rate', () => {
  it('refills even when polled every millisecond', () => {
    const slow: BucketConfig = { capacity: 10, refillPerSecond: 0.5 };
    let state = { levelMilli: 0, updatedAtMs: 0 };
    for (let t = 1; t <= 4_000; t++) state = refill(state, slow, t);
    expect(state.levelMilli).toBeCloseTo(2_000, 6);
  });
});
