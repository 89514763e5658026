import { describe, expect, it } from 'vitest';
import {
  inferredTargets,
  modelDesiredPods,
  podCapacity,
  rateAtIterationMultiple,
  resolveTargets,
  toWorkload,
} from '../src/tuner/capacity.js';
import { MAX_NIS } from '../src/tuner/ekf.js';
import { observePeriod, type PodCounters } from '../src/tuner/observations.js';
import {
  analyze,
  maxRate,
  type PodParams,
  serviceRate,
  type Workload,
} from '../src/tuner/queueing-model.js';
import {
  capacityReport,
  decodePodTuner,
  emptyPodTuner,
  encodePodTuner,
  type PodPeriod,
  type PodTunerState,
  requestsInPod,
  tunePod,
} from '../src/tuner/tuner.js';

const truth: PodParams = { alpha: 8, beta: 0.05, gamma: 0.0001 };
const w: Workload = { inputTokens: 512, outputTokens: 63, maxBatch: 64, maxQueue: 100 };

function counters(atMs: number, scale: number): PodCounters {
  return {
    atMs,
    ttft: { sum: 0.05 * scale, count: scale },
    itl: { sum: 0.01 * 63 * scale, count: 63 * scale },
    promptTokens: 512 * scale,
    generationTokens: 64 * scale,
    requestSuccess: scale,
    requestGenerationTokens: { sum: 64 * scale, count: scale },
  };
}

describe('observations from two scrapes', () => {
  it('turns counter deltas into rate, mean latencies and mean lengths', () => {
    const obs = observePeriod(counters(1_000, 100), counters(11_000, 150));
    expect(obs).not.toBeNull();
    expect(obs!.rate).toBeCloseTo(5, 9);
    expect(obs!.meanTtftMs).toBeCloseTo(50, 9);
    expect(obs!.meanItlMs).toBeCloseTo(10, 9);
    expect(obs!.meanInputTokens).toBeCloseTo(512, 9);
    expect(obs!.meanOutputTokens).toBeCloseTo(64, 9);
    expect(obs!.requests).toBe(50);
    expect(obs!.periodS).toBe(10);
  });

  it('falls back to generation tokens per success without the output-length histogram', () => {
    const a = { ...counters(0, 10), requestGenerationTokens: null };
    const b = { ...counters(5_000, 30), requestGenerationTokens: null };
    expect(observePeriod(a, b)!.meanOutputTokens).toBeCloseTo(64, 9);
  });

  it('is null for a period too quiet, reset or without metrics', () => {
    expect(observePeriod(counters(0, 10), counters(1_000, 15))).toBeNull(); // 5 < 10
    expect(observePeriod(counters(0, 10), counters(1_000, 15), { minRequests: 5 })).not.toBeNull();
    expect(observePeriod(counters(0, 100), counters(1_000, 50))).toBeNull(); // restarted pod
    expect(observePeriod(counters(1_000, 10), counters(1_000, 50))).toBeNull(); // no time
    expect(observePeriod(counters(0, 10), { ...counters(1_000, 50), itl: null })).toBeNull();
    // A series that appears between two scrapes started from zero.
    const cold = { ...counters(0, 0), ttft: null, itl: null, requestGenerationTokens: null };
    expect(observePeriod(cold, counters(2_000, 20))!.rate).toBeCloseTo(10, 9);
    const noItl = { ...counters(1_000, 50), itl: counters(0, 10).itl };
    expect(observePeriod(counters(0, 10), noItl)).toBeNull(); // one-token outputs: no ITL
  });
});

describe('capacity', () => {
  it('maps vLLM output tokens to decode iterations (the prefill emits the first)', () => {
    expect(toWorkload({ meanInputTokens: 100, meanOutputTokens: 64 }, 8, 4)).toEqual({
      inputTokens: 100,
      outputTokens: 63,
      maxBatch: 8,
      maxQueue: 4,
    });
  });

  it('infers targets at the rate where the iteration takes k x alpha', () => {
    for (const k of [1.5, 2, 3]) {
      const rate = rateAtIterationMultiple(truth, w, k);
      expect(analyze(truth, w, rate).iterationMs).toBeCloseTo(k * truth.alpha, 6);
      const targets = inferredTargets(truth, w, k);
      // ITL is the k alpha + beta + gamma (i + o/2) at that point ...
      expect(targets.itlMs).toBeCloseTo(
        k * truth.alpha + truth.beta + truth.gamma * (512 + 31.5),
        6,
      );
      // ... and lambda* for those targets is that rate: sizing and targets agree.
      expect(maxRate(truth, w, targets) / rate).toBeCloseTo(1, 6);
    }
    // A batch limit reached before k x alpha: the top of the range, mu(N) x 0.999.
    const top = rateAtIterationMultiple(truth, w, 10);
    expect(analyze(truth, w, top).iterationMs).toBeLessThan(10 * truth.alpha);
    expect(top).toBeCloseTo(serviceRate(truth, w, 64) * 0.999, 9);
  });

  it('resolves explicit, then inferred (max over pods), then observed x 1.5 capped', () => {
    const learned = [
      { params: truth, workload: w },
      { params: { ...truth, alpha: 10 }, workload: w },
    ];
    const observed = { meanTtftMs: 100, meanItlMs: 400 };
    expect(
      resolveTargets({ explicit: { ttftMs: 300, itlMs: 40 }, learned, observed, sloMultiplier: 3 }),
    ).toEqual({ ttftMs: 300, itlMs: 40, source: 'explicit' });
    const inferred = resolveTargets({ learned, observed, sloMultiplier: 3 })!;
    expect(inferred.source).toBe('inferred');
    expect(inferred.ttftMs).toBeCloseTo(inferredTargets({ ...truth, alpha: 10 }, w, 3).ttftMs, 9);
    expect(resolveTargets({ learned: [], observed, sloMultiplier: 3 })).toEqual({
      ttftMs: 150,
      itlMs: 500,
      source: 'observed',
    });
    expect(resolveTargets({ learned: [], observed: null, sloMultiplier: 3 })).toBeNull();
  });

  it('reports lambda*, the concurrency there and the batch ceiling', () => {
    const targets = inferredTargets(truth, w, 3);
    const c = podCapacity(truth, w, targets);
    expect(c.lambdaStar).toBeCloseTo(maxRate(truth, w, targets), 9);
    const r = analyze(truth, w, c.lambdaStar);
    expect(c.concurrency).toBeCloseTo(r.meanBatch + r.meanQueue, 9);
    expect(c.ceiling).toBe(64);
    expect(modelDesiredPods(3 * c.lambdaStar * 0.99, [c.lambdaStar])).toBe(3);
    expect(modelDesiredPods(10, [])).toBeNull();
  });
});

function period(rate: number, params = truth, workload = w) {
  const r = analyze(params, workload, rate);
  return {
    rate,
    meanTtftMs: r.ttftMs,
    meanItlMs: r.itlMs,
    meanInputTokens: workload.inputTokens,
    meanOutputTokens: workload.outputTokens + 1,
    requests: 100,
    periodS: 10,
  };
}

describe('pod tuner', () => {
  const settings = { maxBatch: 64, maxQueue: 100 };

  it('bootstraps at once from a light period', () => {
    const light = period(0.5);
    expect(requestsInPod(light)).toBeLessThan(4);
    const r = tunePod(emptyPodTuner(), light, settings);
    expect(r.event).toBe('bootstrapped');
    expect(r.update).toBeUndefined();
    expect(r.state.filter!.x[0]).toBeCloseTo(0.9 * light.meanItlMs, 9);
  });

  it('waits for a light period, then bootstraps from the lightest and updates with the latest', () => {
    const busy = [period(14), period(16)];
    expect(busy.every((p) => requestsInPod(p) > 4)).toBe(true);
    let r = tunePod(emptyPodTuner(), busy[0]!, settings);
    expect(r.event).toBe('waiting');
    expect(r.state.candidate).toBe(busy[0]);
    r = tunePod(r.state, busy[1]!, settings);
    expect(r.event).toBe('bootstrapped');
    expect(r.update).toBeDefined(); // from busy[0], updated with busy[1]
    expect(r.state.candidate).toBeNull();
    expect(r.state.waited).toBe(0);
  });

  it('reopens the covariance after repeated NIS rejections and learns the changed pod', () => {
    let state: PodTunerState = tunePod(emptyPodTuner(), period(0.5), settings).state;
    for (let k = 0; k < 8; k++) state = tunePod(state, period(2 + k * 2), settings).state;
    expect(state.filter!.updates).toBeGreaterThan(4);
    const slower = { alpha: 20, beta: 0.1, gamma: 0.0003 };
    const events: string[] = [];
    const mixes: [number, number][] = [
      [512, 63],
      [2_000, 40],
      [200, 300],
      [1_000, 150],
      [3_000, 20],
    ];
    for (let k = 0; k < 14; k++) {
      const [input, output] = mixes[k % mixes.length]!;
      const w2 = { ...w, inputTokens: input, outputTokens: output };
      const r = tunePod(
        state,
        period(serviceRate(slower, w2, 64) * (0.1 + 0.15 * (k % 4)), slower, w2),
        settings,
      );
      events.push(r.event);
      if (r.event === 'rejected') expect(r.update!.nis).toBeGreaterThanOrEqual(MAX_NIS);
      state = r.state;
    }
    expect(events.slice(0, 4)).toEqual(['rejected', 'rejected', 'rejected', 'reset']);
    expect(state.resets).toBe(1);
    expect(Math.abs(state.filter!.x[0] / slower.alpha - 1)).toBeLessThan(0.1);
    expect(Math.abs(state.filter!.x[1] / slower.beta - 1)).toBeLessThan(0.1);
    expect(Math.abs(state.filter!.x[2] / slower.gamma - 1)).toBeLessThan(0.2);
  });

  it('stores and restores its state; unreadable state starts fresh', () => {
    const state = tunePod(emptyPodTuner(), period(0.5), settings).state;
    const text = encodePodTuner(state);
    expect(decodePodTuner(text)).toEqual({ state });
    expect(decodePodTuner(null)).toEqual({ state: emptyPodTuner() });
    expect(decodePodTuner('{').problem).toMatch(/not JSON/);
    expect(decodePodTuner('{"version":99,"state":{}}').problem).toMatch(/version 99/);
    const broken = JSON.parse(text);
    broken.state.filter.x = [1, -1, 1];
    expect(decodePodTuner(JSON.stringify(broken)).problem).toMatch(/bad fields/);
  });
});

describe('capacity report', () => {
  const tuning = () => ({ maxBatch: 64, maxQueue: 100, targetTtftMs: 120, targetItlMs: 30 });

  function tuned(rate: number): PodPeriod {
    let state = tunePod(emptyPodTuner(), period(0.5), { maxBatch: 64, maxQueue: 100 }).state;
    for (let k = 0; k < 10; k++) {
      state = tunePod(state, period(2 + k * 1.5), { maxBatch: 64, maxQueue: 100 }).state;
    }
    return { pod: 'p', model: 'm', state, observation: period(rate), rate };
  }

  it('sizes each pod and the model; desired pods follow the offered load', () => {
    const one = tuned(10);
    const report = capacityReport(
      [
        { ...one, pod: 'a' },
        { ...one, pod: 'b' },
      ],
      tuning,
      3,
    );
    const lambda = report.pods.a!.lambdaStar!;
    expect(lambda).toBeGreaterThan(0);
    expect(report.models.m!.targets).toEqual({ ttftMs: 120, itlMs: 30, source: 'explicit' });
    expect(report.models.m!.totalRate).toBe(20);
    expect(report.desiredPods).toBe(Math.ceil(20 / lambda));
    expect(report.controller!.ceilingCap).toBe(64);
    expect(report.controller!.startCap).toBe(Math.ceil(report.pods.a!.concurrency!));

    const at = (rate: number) =>
      capacityReport(
        [
          { ...one, pod: 'a', rate },
          { ...one, pod: 'b', rate },
        ],
        tuning,
        3,
      ).desiredPods!;
    const base = lambda * 1.5;
    expect(at(base * 2)).toBeGreaterThan(at(base));
    expect(at(base / 2)).toBeLessThan(at(base));
  });

  it('reports cold pods without capacity and no desired pods until one is tuned', () => {
    const cold: PodPeriod = {
      pod: 'c',
      model: 'm',
      state: emptyPodTuner(),
      observation: period(10),
      rate: 10,
    };
    const report = capacityReport([cold], () => ({ maxBatch: 64, maxQueue: 100 }), 3);
    expect(report.pods.c!.alphaMs).toBeNull();
    expect(report.pods.c!.lambdaStar).toBeUndefined();
    expect(report.models.m!.targets!.source).toBe('observed');
    expect(report.desiredPods).toBeNull();
    expect(report.controller).toBeNull();
  });
});
