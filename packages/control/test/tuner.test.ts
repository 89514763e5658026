import { createRng, standardNormal } from '@fairgate/runtime';
import { describe, expect, it } from 'vitest';
import {
  BOOTSTRAP_GAMMA_RATIO,
  bootstrap,
  DEFAULT_PARAMS,
  INITIAL_LOG_STD,
  initialState,
  MAX_NIS,
  type Observation,
  predict,
  update,
} from '../src/tuner/ekf.js';
import {
  analyze,
  chainOccupancy,
  decodeMs,
  desiredPods,
  iterationMs,
  latencies,
  marginalWork,
  maxRate,
  type Occupancy,
  type PodParams,
  prefillMs,
  residualMs,
  serviceRate,
  type Workload,
} from '../src/tuner/queueing-model.js';
import { rescaled } from '../src/tuner/tuner.js';

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
      // TTFT = queue wait + rest of the iteration in progress + prefill at the mean batch.
      expect(r.ttftMs).toBeCloseTo(
        r.waitMs + r.residualMs + r.iterationMs + (truth.beta + truth.gamma) * 512,
        9,
      );
      // ITL at the iteration a token sees: the token mean of decode(b - 1), whose iteration
      // part (b - 1 companions of a size-biased batch, harmonically weighted) is within 1%
      // of the iteration at n_bar here (slightly below it).
      expect(r.itlMs).toBeCloseTo(r.decodeIterationMs + truth.beta + truth.gamma * (512 + 32), 9);
      expect(Math.abs(r.decodeIterationMs / r.iterationMs - 1)).toBeLessThan(0.01);
      expect(Math.abs(r.decodeIterationMs - closed) / closed).toBeLessThan(0.01);
    },
  );

  it('tends to the unloaded latencies as the rate goes to zero', () => {
    const r = analyze(truth, workload, 1e-9);
    expect(r.ttftMs).toBeCloseTo(truth.alpha + (truth.beta + truth.gamma) * 512, 6);
    expect(r.itlMs).toBeCloseTo(truth.alpha + truth.beta + truth.gamma * (512 + 32), 6);
    expect(r.residualMs).toBeLessThan(1e-6);
  });

  it('serves a full batch at n / ((o+1) T(n)): each request shares iterations with n-1 others', () => {
    for (const n of [1, 2, 16, 64]) {
      const expected = (n / ((workload.outputTokens + 1) * iterationMs(truth, workload, n))) * 1e3;
      // Exact but for decode's gamma*(i + o/2) against the mean gamma*(i + (o+1)/2).
      expect(Math.abs(serviceRate(truth, workload, n) / expected - 1)).toBeLessThan(1e-5);
    }
    expect(serviceRate(truth, workload, 200)).toBe(serviceRate(truth, workload, 64));
  });

  it('the residual iteration is about half an iteration once the engine is always busy', () => {
    const heavy = analyze(truth, { ...workload, inputTokens: 16 }, 200);
    expect(heavy.residualMs / heavy.iterationMs).toBeGreaterThan(0.45);
    expect(heavy.residualMs / heavy.iterationMs).toBeLessThan(0.7);
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
    const random = createRng(11);
    for (let trial = 0; trial < 20; trial++) {
      const w = {
        ...workload,
        inputTokens: 64 + random.next() * 2_000,
        outputTokens: 8 + random.next() * 400,
      };
      const unloaded = analyze(truth, w, 1e-9);
      const rates: number[] = [];
      for (const k of [1.1, 1.5, 2, 3, 5, 8, 20]) {
        const targets = { ttftMs: unloaded.ttftMs * k, itlMs: unloaded.itlMs * k };
        const lambda = maxRate(truth, w, targets);
        const r = analyze(truth, w, lambda);
        expect(r.ttftMs).toBeLessThanOrEqual(targets.ttftMs + 1e-6);
        expect(r.itlMs).toBeLessThanOrEqual(targets.itlMs + 1e-6);
        rates.push(lambda);
      }
      for (let i = 1; i < rates.length; i++) {
        expect(rates[i]).toBeGreaterThanOrEqual(rates[i - 1]!);
      }
      expect(rates[0]).toBeGreaterThan(0);
      // Loosening only one target never lowers lambda* either.
      const base = { ttftMs: unloaded.ttftMs * 2, itlMs: unloaded.itlMs * 2 };
      const atBase = maxRate(truth, w, base);
      expect(maxRate(truth, w, { ...base, ttftMs: base.ttftMs * 2 })).toBeGreaterThanOrEqual(
        atBase,
      );
      expect(maxRate(truth, w, { ...base, itlMs: base.itlMs * 2 })).toBeGreaterThanOrEqual(atBase);
    }
  });

  it('lambda* is 0 when even an idle pod misses the targets', () => {
    expect(maxRate(truth, workload, { ttftMs: 1, itlMs: 1 })).toBe(0);
  });

  describe('latencies at a measured occupancy', () => {
    const d = (b: number) => decodeMs(truth, workload, b - 1);
    const prefill = (n: number) => prefillMs(truth, workload, n);
    it.each<[string, Occupancy, number | undefined, number, number]>([
      // [name, occupancy, measured queue ms, expected TTFT, expected ITL]
      [
        'idle: decode(0), prefill alone',
        { batch: [1], meanQueue: 0, throughput: 0 },
        undefined,
        prefill(0),
        decodeMs(truth, workload, 0),
      ],
      [
        'time fractions: b tokens per iteration of decode(b - 1)',
        { batch: [0, 0.5, 0.5], meanQueue: 0, throughput: 2 },
        3,
        3 + prefill(1.5),
        (0.5 * 1 + 0.5 * 2) / ((0.5 * 1) / d(1) + (0.5 * 2) / d(2)),
      ],
      [
        'a period that emptied: the busy part sets the ITL, the time mean the TTFT',
        { batch: [0.6, 0, 0, 0, 0.4], meanQueue: 3, throughput: 10 },
        120,
        120 + prefill(1.6),
        d(4),
      ],
    ])('%s', (_name, occupancy, queueMs, ttftMs, itlMs) => {
      const l = latencies(truth, workload, occupancy, queueMs);
      expect(l.ttftMs).toBeCloseTo(ttftMs, 9);
      expect(l.itlMs).toBeCloseTo(itlMs, 9);
      expect(l.decodeIterationMs).toBeCloseTo(
        itlMs - (decodeMs(truth, workload, 0) - truth.alpha),
        9,
      );
      expect(l.meanBatch).toBeCloseTo(
        occupancy.batch.reduce((a, p, b) => a + p * b, 0),
        12,
      );
      expect(l.iterationMs).toBeCloseTo(iterationMs(truth, workload, l.meanBatch), 9);
      if (queueMs !== undefined) expect(l.queueMs).toBe(queueMs);
    });

    it("without a measured queue: Little's law on the queue plus the residual iteration", () => {
      const occupancy: Occupancy = { batch: [0.2, 0.3, 0.5], meanQueue: 0.4, throughput: 8 };
      const l = latencies(truth, workload, occupancy);
      expect(l.waitMs).toBeCloseTo((0.4 / 8) * 1_000, 9);
      expect(l.residualMs).toBeCloseTo(residualMs(truth, workload, 1.3, 0.8), 9);
      expect(l.queueMs).toBeCloseTo(l.waitMs + l.residualMs, 9);
      expect(l.ttftMs).toBeCloseTo(l.queueMs + prefill(1.3), 9);
    });

    it("analyze() is latencies() at the chain's occupancy", () => {
      for (const rate of [0.5, 5, 15, 24]) {
        const r = analyze(truth, workload, rate);
        const l = latencies(truth, workload, chainOccupancy(truth, workload, rate));
        expect(r.ttftMs).toBe(l.ttftMs);
        expect(r.itlMs).toBe(l.itlMs);
        expect(r.decodeIterationMs).toBe(l.decodeIterationMs);
        // A measured queue time that equals the chain's wait + residual changes nothing.
        const given = latencies(
          truth,
          workload,
          chainOccupancy(truth, workload, rate),
          r.waitMs + r.residualMs,
        );
        expect(given.ttftMs).toBeCloseTo(r.ttftMs, 9);
      }
    });
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
    const uniform = createRng(seed);
    const gaussian = () => standardNormal(uniform);
    return Array.from({ length: count }, () => {
      const w: Workload = {
        ...workload,
        inputTokens: Math.round(128 + uniform.next() * 2_872),
        outputTokens: Math.round(16 + uniform.next() * 484),
      };
      const rate = serviceRate(truth, w, w.maxBatch) * (0.1 + uniform.next() * 0.8);
      const exact = analyze(truth, w, rate);
      return {
        ttftMs: exact.ttftMs * (1 + noise * gaussian()),
        itlMs: exact.itlMs * (1 + noise * gaussian()),
        rate,
        workload: w,
      };
    });
  }

  function converged(seed: number, noise: number) {
    const lightRate = serviceRate(truth, workload, 64) * 0.02;
    const light = analyze(truth, workload, lightRate);
    let state = initialState(
      bootstrap({ ttftMs: light.ttftMs, itlMs: light.itlMs, rate: lightRate, workload }),
    );
    for (const obs of observations(seed, 10, noise)) state = update(state, obs).state;
    return state;
  }

  it('rejects an outlier by NIS and restores state and covariance', () => {
    const state = converged(7, 0.025);
    expect(state.updates).toBeGreaterThan(5);
    const rate = serviceRate(truth, workload, workload.maxBatch) * 0.3;
    const exact = analyze(truth, workload, rate);
    for (const factor of [5, 0.2]) {
      const outlier = {
        ttftMs: exact.ttftMs * factor,
        itlMs: exact.itlMs * factor,
        rate,
        workload,
      };
      const result = update(state, outlier);
      expect(result.accepted).toBe(false);
      expect(result.reason).toBe('nis');
      expect(result.nis).toBeGreaterThanOrEqual(MAX_NIS);
      expect(result.state.x).toEqual(state.x);
      expect(result.state.P).toEqual(state.P);
      expect(result.state.updates).toBe(state.updates);
      expect(result.state.rejected).toBe(state.rejected + 1);
      expect(result.state.consecutiveRejections).toBe(state.consecutiveRejections + 1);
    }
    // A consistent observation right after is accepted.
    const good = update(state, { ttftMs: exact.ttftMs, itlMs: exact.itlMs, rate, workload });
    expect(good.accepted).toBe(true);
    expect(good.nis).toBeLessThan(MAX_NIS);
    expect(good.state.consecutiveRejections).toBe(0);
  });

  it('rejects invalid observations without touching the state', () => {
    const state = converged(3, 0);
    for (const bad of [
      { ttftMs: Number.NaN, itlMs: 10, rate: 1, workload },
      { ttftMs: 10, itlMs: 10, rate: 0, workload },
      { ttftMs: 10, itlMs: 10, rate: 1, workload: { ...workload, maxBatch: 0 } },
    ]) {
      const result = update(state, bad);
      expect(result.accepted).toBe(false);
      expect(result.reason).toBe('invalid-observation');
      expect(result.state.x).toEqual(state.x);
    }
  });

  it('keeps every estimate within the bounds stored at bootstrap', () => {
    const start = initialState({ alpha: 8, beta: 0.05, gamma: 0.0001 });
    for (const [j, v] of [0.08, 0.0005, 0.000001].entries()) {
      expect(start.lower[j]).toBeCloseTo(v, 12);
    }
    for (const [j, v] of [800, 5, 0.01].entries()) expect(start.upper[j]).toBeCloseTo(v, 9);
    // Observations only a far larger gamma explains pin it at the upper bound.
    let state = start;
    const w = { ...workload, inputTokens: 3_000, outputTokens: 400 };
    const params = { alpha: 8, beta: 0.05, gamma: 0.05 };
    for (let k = 0; k < 10; k++) {
      const r = analyze(params, w, 0.2);
      state = update(state, { ttftMs: r.ttftMs, itlMs: r.itlMs, rate: 0.2, workload: w }).state;
      for (let j = 0; j < 3; j++) {
        expect(state.x[j]).toBeGreaterThanOrEqual(state.lower[j]! * (1 - 1e-12));
        expect(state.x[j]).toBeLessThanOrEqual(state.upper[j]! * (1 + 1e-12));
      }
    }
  });

  const observed = (params: PodParams, rate: number, measured: boolean, w = workload) => {
    const r = analyze(params, w, rate);
    return {
      ttftMs: r.ttftMs,
      itlMs: r.itlMs,
      rate,
      workload: w,
      ...(measured
        ? { occupancy: chainOccupancy(params, w, rate), queueMs: r.waitMs + r.residualMs }
        : {}),
    } satisfies Observation;
  };

  it("bootstraps by solving the model at the observation's occupancy, falling back to defaults", () => {
    const light = observed(truth, 0.01, false);
    const start = bootstrap(light);
    // No 0.9 x ITL rule: alpha and beta solve TTFT and ITL exactly when gamma / beta is the
    // assumed BOOTSTRAP_GAMMA_RATIO (0.002, the truth's here).
    expect(truth.gamma / truth.beta).toBeCloseTo(BOOTSTRAP_GAMMA_RATIO, 12);
    expect(start.alpha).toBeCloseTo(truth.alpha, 6);
    expect(start.beta).toBeCloseTo(truth.beta, 9);
    expect(start.gamma / start.beta).toBeCloseTo(BOOTSTRAP_GAMMA_RATIO, 12);
    const fit = predict(start, light);
    expect(fit.ttftMs).toBeCloseTo(light.ttftMs, 6);
    expect(fit.itlMs).toBeCloseTo(light.itlMs, 6);
    expect(bootstrap({ ...light, ttftMs: 1, itlMs: 100 })).toEqual(DEFAULT_PARAMS);
    expect(DEFAULT_PARAMS).toEqual({ alpha: 5, beta: 0.05, gamma: 0.00005 });
    const state = initialState(start);
    expect(state.P.map((row, j) => Math.sqrt(row[j]!))).toEqual([...INITIAL_LOG_STD]);
  });

  it.each([
    // [gamma / beta of the pod, the ratio given, load as a fraction of mu(N), measured occupancy]
    [0.01, 0.01, 0.02, false],
    [0.01, 0.01, 0.5, true],
    [0.01, 0.01, 0.9, true],
    [0.0004, 0.0004, 0.7, true],
  ])(
    'a pod of gamma / beta %s bootstrapped with ratio %s at %s of mu(N) (measured: %s) is found',
    (podRatio, ratio, load, measured) => {
      const pod = { alpha: 12, beta: 0.08, gamma: 0.08 * podRatio };
      const w = { ...workload, inputTokens: 1_500, outputTokens: 200 };
      const obs = observed(pod, serviceRate(pod, w, w.maxBatch) * load, measured, w);
      const start = bootstrap(obs, ratio);
      expect(start.gamma / start.beta).toBeCloseTo(ratio, 12);
      // Exact but for the fixed-point rounds (3e-5 at 90% of mu(N)).
      expect(Math.abs(start.alpha / pod.alpha - 1)).toBeLessThan(1e-4);
      expect(Math.abs(start.beta / pod.beta - 1)).toBeLessThan(1e-4);
    },
  );

  it('a wrong gamma / beta still fits the observation: the error goes to alpha and beta', () => {
    const obs = observed(truth, serviceRate(truth, workload, 64) * 0.5, true);
    const start = bootstrap(obs, 0.01);
    expect(start.gamma / start.beta).toBeCloseTo(0.01, 12);
    const fit = predict(start, obs);
    expect(fit.ttftMs / obs.ttftMs).toBeCloseTo(1, 3);
    expect(fit.itlMs / obs.itlMs).toBeCloseTo(1, 3);
    // Invalid ratios fall back to the default.
    for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(bootstrap(obs, bad)).toEqual(bootstrap(obs));
    }
  });
});

describe('rescaled (a restarted pod)', () => {
  const old = { alpha: 12, beta: 0.08, gamma: 0.0004 };
  const w: Workload = { inputTokens: 170, outputTokens: 71, maxBatch: 32, maxQueue: 100 };
  const occupancy = chainOccupancy(old, w, 10);
  const observe = (truth: typeof old) => {
    const l = latencies(truth, w, occupancy, 15);
    return { ttftMs: l.ttftMs, itlMs: l.itlMs, rate: 10, workload: w, occupancy, queueMs: 15 };
  };
  it.each([
    ['2x slower', { alpha: 24, beta: 0.16, gamma: 0.0008 }, 2],
    ['1.5x faster', { alpha: 8, beta: 0.08 / 1.5, gamma: 0.0004 / 1.5 }, 1 / 1.5],
    ['unchanged', old, 1],
  ])('takes the old parameters x one factor when that explains the period: %s', (_, truth, s) => {
    const r = rescaled(old, observe(truth))!;
    expect(r.factor).toBeCloseTo(s, 6);
    expect(r.logStd).toBeLessThan(0.05);
  });
  it.each([
    ['only alpha doubled', { ...old, alpha: 24 }],
    ['only beta doubled', { ...old, beta: 0.16 }],
  ])('refuses a change of shape: %s', (_, truth) => {
    expect(rescaled(old, observe(truth))).toBeNull();
  });
});
