import { describe, expect, it } from 'vitest';
import { bootstrap, initialState, MAX_NIS, type Observation, update } from '../src/tuner/ekf.js';
import {
  analyze,
  desiredPods,
  marginalWork,
  maxRate,
  type PodParams,
  serviceRate,
  type Workload,
} from '../src/tuner/queueing-model.js';
import { normal, seededRandom } from './prng.js';

const truth: PodParams = { alpha: 8, beta: 0.05, gamma: 0.0001 };
const workload: Workload = { inputTokens: 512, outputTokens: 64, maxBatch: 64, maxQueue: 100 };

describe('queueing model', () => {
  it.each([0.001, 0.005, 0.01, 0.02])(
    'matches alpha/(1-rho) in the light-load limit (rho ~ %s)',
    (targetRho) => {
      const delta = marginalWork(truth, workload);
      const lambda = (targetRho / ((workload.outputTokens + 1) * delta)) * 1_000;
      const r = analyze(truth, workload, lambda);
      const closed = truth.alpha / (1 - r.rho);
      expect(Math.abs(r.iterationMs - closed) / closed).toBeLessThan(0.01);
      expect(r.ttftMs).toBeCloseTo(
        r.iterationMs + (truth.beta + truth.gamma) * workload.inputTokens + r.waitMs,
        9,
      );
    },
  );

  it('tends to the unloaded latencies as the rate goes to zero', () => {
    const r = analyze(truth, workload, 1e-9);
    expect(r.ttftMs).toBeCloseTo(truth.alpha + (truth.beta + truth.gamma) * 512, 6);
    expect(r.itlMs).toBeCloseTo(truth.alpha + truth.beta + truth.gamma * (512 + 32), 6);
  });

  it('latencies and throughput grow with the rate; throughput never exceeds mu(N)', () => {
    let previous = analyze(truth, workload, 0.1);
    const ceiling = serviceRate(truth, workload, workload.maxBatch);
    for (let lambda = 1; lambda < ceiling * 2; lambda += ceiling / 20) {
      const r = analyze(truth, workload, lambda);
      expect(r.ttftMs).toBeGreaterThanOrEqual(previous.ttftMs - 1e-9);
      expect(r.itlMs).toBeGreaterThanOrEqual(previous.itlMs - 1e-9);
      expect(r.throughput).toBeLessThanOrEqual(ceiling * (1 + 1e-9));
      previous = r;
    }
  });

  it('lambda* is monotone in the targets and meets them', () => {
    const rates: number[] = [];
    for (const k of [1.5, 2, 3, 5, 8]) {
      const targets = {
        ttftMs: k * truth.alpha + (truth.beta + truth.gamma) * 512 * 1.2,
        itlMs: k * truth.alpha + 1,
      };
      const lambda = maxRate(truth, workload, targets);
      const r = analyze(truth, workload, lambda);
      expect(r.ttftMs).toBeLessThanOrEqual(targets.ttftMs + 1e-6);
      expect(r.itlMs).toBeLessThanOrEqual(targets.itlMs + 1e-6);
      rates.push(lambda);
    }
    for (let i = 1; i < rates.length; i++) expect(rates[i]).toBeGreaterThanOrEqual(rates[i - 1]!);
    expect(rates[0]).toBeGreaterThan(0);
  });

  it('lambda* is 0 when even an idle pod misses the targets', () => {
    expect(maxRate(truth, workload, { ttftMs: 1, itlMs: 1 })).toBe(0);
  });

  it.each([
    [0, 10, 0],
    [10, 10, 1],
    [10.5, 10, 2],
    [40, 10, 4],
  ])('desired pods for %s req/s at %s per pod: %s', (total, perPod, pods) => {
    expect(desiredPods(total, perPod)).toBe(pods);
  });
});

describe('EKF tuner', () => {
  function observations(seed: number, count: number, noise: number): Observation[] {
    const uniform = seededRandom(seed);
    const gaussian = () => normal(uniform);
    const ceiling = serviceRate(truth, workload, workload.maxBatch);
    return Array.from({ length: count }, () => {
      const w: Workload = {
        ...workload,
        inputTokens: Math.round(128 + uniform() * 1_500),
        outputTokens: Math.round(16 + uniform() * 200),
      };
      const rate = ceiling * (0.05 + uniform() * 0.35);
      const exact = analyze(truth, w, rate);
      return {
        ttftMs: exact.ttftMs * (1 + noise * gaussian()),
        itlMs: exact.itlMs * (1 + noise * gaussian()),
        rate,
        workload: w,
      };
    });
  }

  it('rejects an outlier by NIS and restores state and covariance', () => {
    const light = analyze(truth, workload, 0.05);
    let state = initialState(bootstrap({ ttftMs: light.ttftMs, itlMs: light.itlMs, workload }));
    for (const obs of observations(7, 10, 0.025)) state = update(state, obs).state;
    const rate = serviceRate(truth, workload, workload.maxBatch) * 0.3;
    const exact = analyze(truth, workload, rate);
    const outlier = { ttftMs: exact.ttftMs * 5, itlMs: exact.itlMs * 5, rate, workload };
    const result = update(state, outlier);
    expect(result.accepted).toBe(false);
    expect(result.reason).toBe('nis');
    expect(result.nis).toBeGreaterThanOrEqual(MAX_NIS);
    expect(result.state.x).toEqual(state.x);
    expect(result.state.P).toEqual(state.P);
    expect(result.state.rejected).toBe(state.rejected + 1);
  });

  it('bootstraps from a light-load observation, falling back to defaults', () => {
    const light = analyze(truth, workload, 0.01);
    const start = bootstrap({ ttftMs: light.ttftMs, itlMs: light.itlMs, workload });
    expect(start.alpha).toBeCloseTo(0.9 * light.itlMs, 9);
    expect(start.beta).toBeGreaterThan(0);
    expect(bootstrap({ ttftMs: 1, itlMs: 100, workload })).toEqual({
      alpha: 5,
      beta: 0.05,
      gamma: 0.00005,
    });
  });
});
