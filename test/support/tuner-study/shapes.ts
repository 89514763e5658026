/**
 * Production-like traffic for the capacity tuner: pods of alpha 12 ms, beta 0.08 ms, gamma
 * 0.0004 ms, max-num-seqs 32, 2 pods behind the gateway, Poisson arrivals whose rate changes
 * every period, prompts of 20..320 words (the sim's words are one token each) and max_tokens
 * 16..128. The same shapes drive the virtual-time study (study.ts, bench:tuner-harness and
 * loadtest/test/tuner-harness.test.ts) and the run with real processes (bench:tuner-traffic).
 */
import { analyze, type PodParams, type Workload } from '@fairgate/control';
import type { Rng } from '@fairgate/runtime';
import type { TrafficPeriod } from './simulate.js';

export const TRAFFIC_TRUTH: PodParams = { alpha: 12, beta: 0.08, gamma: 0.0004 };
export const TRAFFIC_MAX_BATCH = 32;
/** The model's K (tuner.queue_size). */
export const TRAFFIC_QUEUE = 100;
export const TRAFFIC_PODS = 2;
export const TRAFFIC_PERIODS = 13;
export const TRAFFIC_PERIOD_S = 10;
export const TRAFFIC_INPUT: readonly [number, number] = [20, 320];
export const TRAFFIC_OUTPUT: readonly [number, number] = [16, 128];
/** The gateway's default cap per pod with budget 64 over 2 pods, and queue_max 100. */
export const TRAFFIC_GATEWAY = { cap: 32, queue: 50 };

/** The mean mix as the model's workload (o = output tokens - 1). */
export const TRAFFIC_WORKLOAD: Workload = {
  inputTokens: (TRAFFIC_INPUT[0] + TRAFFIC_INPUT[1]) / 2,
  outputTokens: (TRAFFIC_OUTPUT[0] + TRAFFIC_OUTPUT[1]) / 2 - 1,
  maxBatch: TRAFFIC_MAX_BATCH,
  maxQueue: TRAFFIC_QUEUE,
};

/** SLO targets for lambda*: twice the unloaded TTFT and ITL of the mean mix. */
export const TRAFFIC_TARGETS = (() => {
  const idle = analyze(TRAFFIC_TRUTH, TRAFFIC_WORKLOAD, 1e-9);
  return { ttftMs: Math.round(idle.ttftMs * 2), itlMs: Math.round(idle.itlMs * 2 * 10) / 10 };
})();

export const TRAFFIC_SHAPES = ['below', 'peaks', 'overload'] as const;
export type TrafficShape = (typeof TRAFFIC_SHAPES)[number];

/**
 * The total request rate (all pods) of each period:
 *   below     6..36 req/s, uniform, every period (always below capacity);
 *   peaks     the same with two periods at 45 and 50 req/s (periods 5 and 9);
 *   overload  10..75 req/s, uniform (above capacity about half the time).
 */
export function totalRates(shape: TrafficShape, rng: Rng, periods = TRAFFIC_PERIODS): number[] {
  const [low, high] = shape === 'overload' ? [10, 75] : [6, 36];
  const rates = Array.from({ length: periods }, () => low + (high - low) * rng.next());
  if (shape === 'peaks') {
    rates[Math.min(5, periods - 1)] = 45;
    rates[Math.min(9, periods - 1)] = 50;
  }
  return rates;
}

/** One pod's share of each period (the gateway spreads load evenly over the pods). */
export function podPeriods(rates: readonly number[], pods = TRAFFIC_PODS): TrafficPeriod[] {
  return rates.map((rate) => ({ rate: rate / pods, input: TRAFFIC_INPUT, output: TRAFFIC_OUTPUT }));
}
