import { describe, expect, it } from 'vitest';
import {
  BUCKETS_PER_DOUBLING,
  bucketBounds,
  bucketOf,
  FINITE_BUCKETS,
  LARGEST_EDGE_S,
  MIN_EDGE_S,
  mergeCounts,
  OVERFLOW_INDEX,
  UNDERFLOW_INDEX,
} from '../src/histogram.js';
import { LatencyHistogram, quantile } from '../src/index.js';

const RATIO = 2 ** (1 / BUCKETS_PER_DOUBLING);

describe('bucket edges', () => {
  it('are geometric with ratio 2^(1/16) from 0.1 ms to about 619 s', () => {
    expect(bucketBounds(1)).toEqual([MIN_EDGE_S, MIN_EDGE_S * RATIO]);
    for (let i = 1; i <= FINITE_BUCKETS; i += 1) {
      const [lower, upper] = bucketBounds(i);
      expect(upper / lower).toBeCloseTo(RATIO, 12);
      if (i > 1) expect(bucketBounds(i - 1)[1]).toBe(lower);
    }
    expect(bucketBounds(FINITE_BUCKETS)[1]).toBe(LARGEST_EDGE_S);
    expect(LARGEST_EDGE_S).toBeGreaterThan(600);
    expect(LARGEST_EDGE_S).toBeLessThan(620);
    expect(bucketBounds(UNDERFLOW_INDEX)).toEqual([0, MIN_EDGE_S]);
    expect(bucketBounds(OVERFLOW_INDEX)).toEqual([LARGEST_EDGE_S, Number.POSITIVE_INFINITY]);
  });

  it.each([
    ['zero', 0, UNDERFLOW_INDEX],
    ['below the first edge', MIN_EDGE_S / 2, UNDERFLOW_INDEX],
    ['exactly the first edge', MIN_EDGE_S, 1],
    ['just below the second edge', MIN_EDGE_S * RATIO * (1 - 1e-12), 1],
    ['the 17th edge (one doubling)', bucketBounds(17)[0], 17],
    ['1 second', 1, bucketOf(1)],
    ['just below the largest edge', LARGEST_EDGE_S * (1 - 1e-12), FINITE_BUCKETS],
    ['the largest edge', LARGEST_EDGE_S, OVERFLOW_INDEX],
    ['an hour', 3_600, OVERFLOW_INDEX],
    ['infinity', Number.POSITIVE_INFINITY, OVERFLOW_INDEX],
  ])('%s -> its bucket', (_name, seconds, index) => {
    expect(bucketOf(seconds)).toBe(index);
    const [lower, upper] = bucketBounds(index);
    expect(seconds).toBeGreaterThanOrEqual(lower);
    if (upper !== Number.POSITIVE_INFINITY) expect(seconds).toBeLessThan(upper);
  });

  it('every edge starts its own bucket', () => {
    for (let i = 1; i <= FINITE_BUCKETS; i += 1) expect(bucketOf(bucketBounds(i)[0])).toBe(i);
  });

  it.each([[-1], [Number.NaN], [Number.NEGATIVE_INFINITY]])('refuses %s', (seconds) => {
    expect(() => bucketOf(seconds)).toThrow(RangeError);
  });
});

describe('quantile', () => {
  const at = (seconds: number) => bucketOf(seconds);

  it('is NaN for an empty window', () => {
    expect(quantile(new Map(), 0.99)).toBeNaN();
    expect(quantile(new Map([[at(1), 0]]), 0.99)).toBeNaN();
  });

  it('interpolates linearly inside the bucket that reaches the rank', () => {
    const bucket = at(1);
    const [lower, upper] = bucketBounds(bucket);
    // 100 samples in one bucket: rank 99 -> 99% of the way through it.
    expect(quantile(new Map([[bucket, 100]]), 0.99)).toBeCloseTo(
      lower + 0.99 * (upper - lower),
      12,
    );
    // 98 fast samples and 2 slow ones: rank 99 is the first of the slow bucket's two.
    const slow = at(2);
    const [slowLower, slowUpper] = bucketBounds(slow);
    const counts = new Map([
      [at(0.1), 98],
      [slow, 2],
    ]);
    expect(quantile(counts, 0.99)).toBeCloseTo(slowLower + 0.5 * (slowUpper - slowLower), 12);
    expect(quantile(counts, 0.5)).toBeLessThan(0.11);
  });

  it('clamps the overflow bucket to the largest finite edge', () => {
    expect(quantile(new Map([[OVERFLOW_INDEX, 5]]), 0.99)).toBe(LARGEST_EDGE_S);
    const mostlyFast = new Map([
      [at(0.1), 50],
      [OVERFLOW_INDEX, 50],
    ]);
    expect(quantile(mostlyFast, 0.99)).toBe(LARGEST_EDGE_S);
    expect(quantile(mostlyFast, 0.5)).toBeLessThan(0.11);
  });

  it('interpolates the underflow bucket from zero', () => {
    expect(quantile(new Map([[UNDERFLOW_INDEX, 10]]), 0.5)).toBeCloseTo(MIN_EDGE_S / 2, 15);
  });

  it.each([[0], [1.5], [-0.1], [Number.NaN]])('refuses q = %s', (q) => {
    expect(() => quantile(new Map([[1, 1]]), q)).toThrow(RangeError);
  });

  it('refuses bucket indices outside the layout', () => {
    expect(() => quantile(new Map([[OVERFLOW_INDEX + 1, 1]]), 0.5)).toThrow(RangeError);
    expect(() => mergeCounts(new Map(), new Map([[-1, 1]]))).toThrow(RangeError);
  });
});

describe('LatencyHistogram', () => {
  it('counts observations, merges added counts and starts empty after take', () => {
    const h = new LatencyHistogram();
    h.observe(0.2);
    h.observe(0.2);
    h.observe(5);
    h.add(new Map([[bucketOf(5), 3]]));
    expect(h.size).toBe(6);
    expect(h.take()).toEqual(
      new Map([
        [bucketOf(0.2), 2],
        [bucketOf(5), 4],
      ]),
    );
    expect(h.size).toBe(0);
    expect(h.take()).toEqual(new Map());
  });
});
