import { analyze } from '@fairgate/control';
import { createRng } from '@fairgate/runtime';
import { TUNER_TRUTH, tunerPhases, tunerWorkload } from '@fairgate/testkit';
import { describe, expect, it } from 'vitest';
import { lambdaStar, learn, simulatePod } from '../bench/tuner-harness.js';

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

  // The accuracy bounds (alpha 10%, beta and gamma 15%, lambda* 15%) at the default 60 s period, 10 pods with fixed seeds (deterministic: virtual
  // time). docs/tuner.md: over 80 pods, 86% meet all four bounds; alpha, beta and lambda*
  // every time, gamma is what misses.
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
    expect(all).toBeGreaterThanOrEqual(7);
  });
});
