/**
 * The capacity tuner against the sim's own engine in virtual time: no processes, no
 * clocks, so a study of many seeds takes seconds. Each pod is one `Engine` (the code
 * fairgate-sim runs) fed open-loop Poisson arrivals, one operating point per tuner period;
 * the engine's events feed cumulative counters the way the sim's /metrics histograms count
 * them (TTFT and prompt tokens at the first token, inter-token gaps at each later token,
 * output tokens at finish), each period's observation is the leader's `observePeriod` over
 * the counters at its two ends, and the filter steps exactly as on the leader.
 *
 *   npm run bench:tuner-harness -w @fairgate/loadtest -- [--seeds 20] [--period-s 10,30,60]
 *     [--pods 2]
 *   npm run bench:tuner-harness -w @fairgate/loadtest -- --shapes below,peaks,overload --seeds 40
 *
 * With --shapes: production-like traffic instead (tuner-study/: the gateway's cap and queue in
 * front of each pod, rates changing every 10 s period, mixed lengths), 13 periods per pod,
 * and a pod that restarts 2x slower (docs/tuner.md, "Traffic shapes").
 *
 * The periods are the benchmark's (tunerPhases in @fairgate/testkit: a light bootstrap period,
 * then 9 operating points). Prints, per period length, how many pods meet the accuracy
 * bounds after those 10 periods (alpha within 10%, beta and gamma within 15%, lambda* within
 * 15% of the true-parameter lambda*) and the error ranges. docs/tuner.md has the results.
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
import { createRng, type Rng } from '@fairgate/runtime';
import {
  TUNER_MAX_BATCH as MAX_BATCH,
  type TunerPhase as Phase,
  TUNER_QUEUE as QUEUE,
  TUNER_TRUTH as TRUTH,
  TUNER_SWEEP_WORKLOAD,
  TUNER_TARGETS,
  tunerPhases,
} from '@fairgate/testkit';
import { TRAFFIC_SHAPES, type TrafficShape } from './tuner-study/shapes.js';
import { simulatePodTraffic } from './tuner-study/simulate.js';
import { studyShape, studySlowdown } from './tuner-study/study.js';

/**
 * One pod through the phases, one phase per period of `periodS`, open loop (no gateway in
 * front), as tuner-study/simulate.ts runs it: the leader's gauge samples, queue time and
 * histogram buckets included. Returns each period's observation as the leader makes it
 * (null when it had fewer than `minRequests` first tokens); lengths uniform within +-50%
 * of the phase's means.
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
  const settings = { maxBatch: MAX_BATCH, maxQueue: QUEUE };
  let state: PodTunerState = emptyPodTuner();
  for (const obs of periods) if (obs) state = tunePod(state, obs, settings).state;
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

function flag(name: string, fallback: string): string {
  const index = process.argv.indexOf(`--${name}`);
  return index >= 0 ? process.argv[index + 1]! : fallback;
}

/** The accuracy bounds: alpha 10%, beta and gamma 15%, lambda* 15%. */
const BOUNDS = [0.1, 0.15, 0.15, 0.15];

function study(periodS: number, seeds: number, pods: number): string {
  const phases = tunerPhases();
  const trueLambda = lambdaStar(TRUTH);
  const errors: number[][] = [];
  let updates = 0;
  let rejected = 0;
  let resets = 0;
  for (let seed = 1; seed <= seeds; seed++) {
    const rng = createRng(seed * 7919 + periodS);
    for (let pod = 0; pod < pods; pod++) {
      const r = learn(simulatePod(TRUTH, phases, periodS, rng));
      updates += r.updates;
      rejected += r.rejected;
      resets += r.resets;
      const p = r.params;
      errors.push(
        p
          ? [
              p.alpha / TRUTH.alpha - 1,
              p.beta / TRUTH.beta - 1,
              p.gamma / TRUTH.gamma - 1,
              lambdaStar(p) / trueLambda - 1,
            ]
          : [Number.NaN, Number.NaN, Number.NaN, Number.NaN],
      );
    }
  }
  const within = (e: number[], j: number) => Math.abs(e[j]!) <= BOUNDS[j]!;
  const count = (j: number) => errors.filter((e) => within(e, j)).length;
  const all = errors.filter((e) => BOUNDS.every((_, j) => within(e, j))).length;
  const range = (j: number) => {
    const v = errors.map((e) => e[j]!).filter(Number.isFinite);
    const pct = (x: number, digits = 0) => `${x >= 0 ? '+' : ''}${(100 * x).toFixed(digits)}`;
    const mean = v.reduce((a, b) => a + b, 0) / v.length;
    const sd = Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, v.length - 1));
    // The mean tells a bias of the model from the noise of the periods (the sd).
    return `${pct(Math.min(...v))}..${pct(Math.max(...v))}% (mean ${pct(mean, 1)}%, sd ${(100 * sd).toFixed(1)}%)`;
  };
  return (
    `period ${periodS} s: all four within ${all}/${errors.length}; alpha ${count(0)}, beta ${count(1)}, ` +
    `gamma ${count(2)}, lambda* ${count(3)}; updates ${updates}, rejected ${rejected}, resets ${resets}; ` +
    `errors alpha ${range(0)}, beta ${range(1)}, gamma ${range(2)}, lambda* ${range(3)}`
  );
}

function main(): void {
  const seeds = Number(flag('seeds', '20'));
  const pods = Number(flag('pods', '2'));
  const shapes = flag('shapes', '');
  if (shapes) {
    // Production-like traffic (issue 16): tuner-study/shapes.ts, 13 periods of 10 s.
    for (const shape of shapes.split(',') as TrafficShape[]) {
      if (!TRAFFIC_SHAPES.includes(shape)) throw new Error(`unknown shape ${shape}`);
      console.log(studyShape(shape, seeds, pods));
    }
    console.log(studySlowdown('below', seeds, 6, pods));
    return;
  }
  for (const periodS of flag('period-s', '10,30,60').split(',').map(Number)) {
    console.log(study(periodS, seeds, pods));
  }
}

if (import.meta.url === `file://${process.argv[1]}`) main();
