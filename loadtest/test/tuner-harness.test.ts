import { analyze } from '@fairgate/control';
import { createRng } from '@fairgate/runtime';
import { TUNER_TRUTH, tunerPhases, tunerWorkload } from '@fairgate/testkit';
import { describe, expect, it } from 'vitest';
import { lambdaStar, learn, simulatePod } from '../../test/support/tuner-study/open-loop.js';
import { TRAFFIC_SHAPES, TRAFFIC_TRUTH } from '../../test/support/tuner-study/shapes.js';
import { BOUNDS, runPod } from '../../test/support/tuner-study/study.js';

/**
 * The virtual-time study of the capacity tuner (bench/tuner-harness.ts): the sim's engine,
 * Poisson arrivals, observations as the sim's /metrics count them, the leader's filter step.
 */
describe('tuner harness', () => {
  it('observes what the model predicts at a steady operating point', () => {
    const phase = { input: 500, output: 64, rate: 4 };
    const periods = simulatePod(TUNER_TRUTH, [phase, phase, phase, phase], 120, createRng(7));
    const obs = periods[3]!;
    const model = analyze(
      TUNER_TRUTH,
      tunerWorkload(obs.meanInputTokens, obs.meanOutputTokens),
      obs.rate,
    );
    // Poisson: 1,920 arrivals expected over the 4 periods, a standard deviation of 2.3%.
    const arrivals = periods.reduce((sum, p) => sum + p!.requests, 0);
    expect(Math.abs(arrivals / (phase.rate * 480) - 1)).toBeLessThan(0.07);
    expect(Math.abs(obs.meanInputTokens / 500 - 1)).toBeLessThan(0.05);
    expect(Math.abs(obs.meanTtftMs / model.ttftMs - 1)).toBeLessThan(0.05);
    expect(Math.abs(obs.meanItlMs / model.itlMs - 1)).toBeLessThan(0.03);
  });

  it('drops a period with fewer first tokens than the minimum', () => {
    const quiet = { input: 500, output: 64, rate: 0.05 };
    expect(simulatePod(TUNER_TRUTH, [quiet], 10, createRng(1))).toEqual([null]);
  });

  // The accuracy bounds (alpha 10%, beta 15%, lambda* 15%) at the default 60 s period, 10
  // pods with fixed seeds (deterministic: virtual time). docs/tuner.md: over 80 pods alpha,
  // beta and lambda* every time; gamma, biased about -14% by the model on this
  // prefill-heavy open-loop design, within 15% in 51 of 80 (5 of these 10).
  it('learns within the accuracy bounds after 10 periods of 60 s in most pods', () => {
    const truthLambda = lambdaStar(TUNER_TRUTH);
    let all = 0;
    for (let seed = 1; seed <= 5; seed++) {
      const rng = createRng(seed);
      for (let pod = 0; pod < 2; pod++) {
        const { params } = learn(simulatePod(TUNER_TRUTH, tunerPhases(), 60, rng));
        expect(params).not.toBeNull();
        const p = params!;
        const alpha = Math.abs(p.alpha / TUNER_TRUTH.alpha - 1);
        const beta = Math.abs(p.beta / TUNER_TRUTH.beta - 1);
        const gamma = Math.abs(p.gamma / TUNER_TRUTH.gamma - 1);
        const lambda = Math.abs(lambdaStar(p) / truthLambda - 1);
        expect(alpha).toBeLessThanOrEqual(0.1);
        expect(beta).toBeLessThanOrEqual(0.15);
        expect(lambda).toBeLessThanOrEqual(0.15);
        if (gamma <= 0.15) all++;
      }
    }
    expect(all).toBeGreaterThanOrEqual(5);
  }, 180_000);
});

/**
 * Production-like traffic (docs/tuner.md "Traffic shapes"): the gateway's cap and
 * queue in front of each pod, the rate changing every 10 s period, mixed lengths. A few
 * deterministic seeds of the study `npm run bench:tuner-harness -- --shapes ...` runs on 40.
 */
describe('tuner harness, traffic shapes', () => {
  it.each(TRAFFIC_SHAPES)(
    'learns alpha, beta and lambda* on %s traffic',
    { timeout: 120_000 },
    (shape) => {
      // One seed, both pods (CPU time: this file runs beside timing-sensitive suites in CI).
      let within = 0;
      for (let seed = 1; seed <= 1; seed++) {
        for (let pod = 0; pod < 2; pod++) {
          const o = runPod(shape, seed, pod);
          // At least 80% of the periods with an observation are taken by the filter.
          expect(o.taken / o.observed).toBeGreaterThanOrEqual(0.8);
          const e = o.errors!;
          if (
            Math.abs(e.alpha) <= BOUNDS.alpha &&
            Math.abs(e.beta) <= BOUNDS.beta &&
            Math.abs(e.lambda) <= BOUNDS.lambda
          ) {
            within++;
          }
        }
      }
      expect(within).toBe(2);
    },
  );

  it('follows a pod that restarts 2x slower within 3 periods', { timeout: 60_000 }, () => {
    const o = runPod('below', 1, 0, { slowdownAt: { period: 6, factor: 2 } });
    expect(o.events[6]).toBe('counter_reset');
    expect(o.events[7]).toBe('reset');
    const p = o.trajectory[8]!;
    expect(Math.abs(p.alpha / (2 * TRAFFIC_TRUTH.alpha) - 1)).toBeLessThanOrEqual(BOUNDS.alpha);
    expect(Math.abs(p.beta / (2 * TRAFFIC_TRUTH.beta) - 1)).toBeLessThanOrEqual(BOUNDS.beta);
  });
});
