import { createRng, type Rng, standardNormal } from '@fairgate/runtime';
import { describe, expect, it } from 'vitest';
import { mergeCounts } from '../src/histogram.js';
import { LatencyHistogram, quantile } from '../src/index.js';

/**
 * p99 read from merged buckets vs the exact p99 of the same samples, within
 * 5%, over random distributions. Each case draws its sample count, its distribution's
 * parameters and how many replicas the samples are spread over from a seeded PRNG; a
 * failure prints the seed to replay it.
 */
type Draw = (rng: Rng) => number;

const DISTRIBUTIONS: Record<string, (rng: Rng) => Draw> = {
  uniform: (r) => {
    const low = 0.001 + r.next() * 0.5;
    const high = low + 0.01 + r.next() * 5;
    return (x) => low + x.next() * (high - low);
  },
  exponential: (r) => {
    const mean = 0.01 + r.next() * 2;
    return (x) => -mean * Math.log(1 - x.next());
  },
  lognormal: (r) => {
    const mu = -4 + r.next() * 5;
    const sigma = 0.1 + r.next() * 1.5;
    return (x) => Math.exp(mu + sigma * standardNormal(x));
  },
  bimodal: (r) => {
    const fast = 0.02 + r.next() * 0.2;
    const slow = fast * (3 + r.next() * 30);
    const slowShare = 0.005 + r.next() * 0.1;
    return (x) => Math.abs((x.next() < slowShare ? slow : fast) * (1 + 0.1 * standardNormal(x)));
  },
  pareto: (r) => {
    const scale = 0.005 + r.next() * 0.2;
    const shape = 1.1 + r.next() * 2;
    return (x) => Math.min(500, scale / (1 - x.next()) ** (1 / shape));
  },
  'near-constant': (r) => {
    const value = 0.05 + r.next() * 3;
    return (x) => value * (1 + 1e-4 * (x.next() - 0.5));
  },
};

function exactP99(samples: number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.ceil(0.99 * sorted.length) - 1] as number;
}

const CASES_PER_DISTRIBUTION = 60;

describe('p99 from merged log buckets', () => {
  it.each(Object.keys(DISTRIBUTIONS))('is within 5%% of the exact p99: %s', (name) => {
    const makeDistribution = DISTRIBUTIONS[name]!;
    let worst = 0;
    for (let c = 0; c < CASES_PER_DISTRIBUTION; c += 1) {
      const seed = name.length * 100_003 + c;
      const random = createRng(seed);
      const draw = makeDistribution(random);
      const count = 20 + Math.floor(random.next() * 5_000);
      const replicas = Array.from(
        { length: 1 + Math.floor(random.next() * 5) },
        () => new LatencyHistogram(),
      );
      const samples: number[] = [];
      for (let i = 0; i < count; i += 1) {
        const seconds = draw(random);
        samples.push(seconds);
        replicas[Math.floor(random.next() * replicas.length)]!.observe(seconds);
      }
      const merged = new Map<number, number>();
      for (const replica of replicas) mergeCounts(merged, replica.take());
      const exact = exactP99(samples);
      const estimate = quantile(merged, 0.99);
      const error = Math.abs(estimate - exact) / exact;
      worst = Math.max(worst, error);
      expect(
        error,
        `seed ${seed}: ${count} samples, exact ${exact}, estimate ${estimate}`,
      ).toBeLessThanOrEqual(0.05);
    }
    // The bucket ratio bounds the error at 2^(1/16) - 1 = 4.43%.
    expect(worst).toBeLessThan(0.0443);
  });
});
