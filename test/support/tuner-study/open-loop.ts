/**
 * The benchmark's design in virtual time: one pod through tunerPhases (@fairgate/testkit),
 * open loop (no gateway in front), its observations made by the leader's observePeriod and
 * its filter stepped by the leader's tunePod. Shared by loadtest/test/tuner-harness.test.ts
 * and bench:tuner-harness.
 */
import {
  emptyPodTuner,
  maxRate,
  observePeriod,
  type PeriodObservation,
  type PodParams,
  type PodTunerState,
  tunePod,
} from '@fairgate/control';
import type { Rng } from '@fairgate/runtime';
import {
  TUNER_MAX_BATCH as MAX_BATCH,
  type TunerPhase as Phase,
  TUNER_QUEUE as QUEUE,
  TUNER_SWEEP_WORKLOAD,
  TUNER_TARGETS,
} from '@fairgate/testkit';
import { simulatePodTraffic } from './simulate.js';

/**
 * One pod through the phases, one phase per period of `periodS`: each period's observation
 * as the leader makes it (null when it had fewer than `minRequests` first tokens); lengths
 * uniform within +-50% of the phase's means.
 */
export function simulatePod(
  truth: PodParams,
  phases: readonly Phase[],
  periodS: number,
  rng: Rng,
  minRequests = 10,
): (PeriodObservation | null)[] {
  const spread = (mean: number): [number, number] => [mean * 0.5, mean * 1.5];
  const run = simulatePodTraffic(
    { truth, maxBatch: MAX_BATCH },
    phases.map((p) => ({ rate: p.rate, input: spread(p.input), output: spread(p.output) })),
    periodS,
    rng,
  );
  return phases.map(
    (_, k) => observePeriod(run.snapshots[k]!, run.snapshots[k + 1]!, { minRequests }).observation,
  );
}

export interface RunResult {
  params: PodParams | null;
  updates: number;
  rejected: number;
  resets: number;
}

/** One pod's filter over its periods, stepped as the leader steps it. */
export function learn(periods: readonly (PeriodObservation | null)[]): RunResult {
  let state: PodTunerState = emptyPodTuner();
  for (const obs of periods) {
    if (obs) state = tunePod(state, obs, { maxBatch: MAX_BATCH, maxQueue: QUEUE }).state;
  }
  const f = state.filter;
  return {
    params: f ? { alpha: f.x[0], beta: f.x[1], gamma: f.x[2] } : null,
    updates: f?.updates ?? 0,
    rejected: f?.rejected ?? 0,
    resets: state.resets,
  };
}

/** lambda* at the benchmark's workload and targets (those of test/tuner.test.ts). */
export function lambdaStar(params: PodParams): number {
  return maxRate(params, TUNER_SWEEP_WORKLOAD, TUNER_TARGETS);
}
