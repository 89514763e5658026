/**
 * The study over seeds: each pod of each seed through a traffic shape in virtual time, its
 * observations made by the leader's observePeriod, its filter stepped by the leader's tunePod;
 * then how many pods meet the accuracy bounds and how many periods were accepted.
 */
import {
  emptyPodTuner,
  maxRate,
  observePeriod,
  type PodParams,
  type PodTunerState,
  skipPeriod,
  tunePod,
} from '@fairgate/control';
import { createRng, deriveSeed } from '@fairgate/runtime';
import {
  podPeriods,
  TRAFFIC_GATEWAY,
  TRAFFIC_MAX_BATCH,
  TRAFFIC_PERIOD_S,
  TRAFFIC_PODS,
  TRAFFIC_QUEUE,
  TRAFFIC_TARGETS,
  TRAFFIC_TRUTH,
  TRAFFIC_WORKLOAD,
  type TrafficShape,
  totalRates,
} from './shapes.js';
import { type PodSetup, simulatePodTraffic } from './simulate.js';

export interface PodOutcome {
  params: PodParams | null;
  /** Periods with an observation, and of those the ones the filter took (bootstrap or update). */
  observed: number;
  taken: number;
  events: string[];
  /** The estimate after each period (null before the bootstrap). */
  trajectory: (PodParams | null)[];
  errors: { alpha: number; beta: number; gamma: number; lambda: number } | null;
}

/** lambda* for the mean mix, with the targets scaled by `slower` (a pod k x slower: k x targets). */
export function lambdaStarOf(params: PodParams, slower = 1): number {
  const targets = {
    ttftMs: TRAFFIC_TARGETS.ttftMs * slower,
    itlMs: TRAFFIC_TARGETS.itlMs * slower,
  };
  return maxRate(params, TRAFFIC_WORKLOAD, targets);
}

export function runPod(
  shape: TrafficShape,
  seed: number,
  pod: number,
  setup: Partial<PodSetup> = {},
): PodOutcome {
  const rates = totalRates(shape, createRng(deriveSeed('rates', shape, seed)));
  const periods = podPeriods(rates);
  const truth = setup.truth ?? TRAFFIC_TRUTH;
  const run = simulatePodTraffic(
    { truth, maxBatch: TRAFFIC_MAX_BATCH, gateway: TRAFFIC_GATEWAY, ...setup },
    periods,
    TRAFFIC_PERIOD_S,
    createRng(deriveSeed('pod', shape, seed, pod)),
  );
  let state: PodTunerState = emptyPodTuner();
  let observed = 0;
  let taken = 0;
  const events: string[] = [];
  const trajectory: (PodParams | null)[] = [];
  const estimate = () =>
    state.filter
      ? { alpha: state.filter.x[0], beta: state.filter.x[1], gamma: state.filter.x[2] }
      : null;
  for (let k = 0; k < periods.length; k++) {
    trajectory.push(null);
    const period = observePeriod(run.snapshots[k]!, run.snapshots[k + 1]!, { minRequests: 10 });
    const obs = period.observation;
    if (!obs) {
      state = skipPeriod(state, period.skipped);
      events.push(period.skipped);
      trajectory[k] = estimate();
      continue;
    }
    observed++;
    const result = tunePod(state, obs, { maxBatch: TRAFFIC_MAX_BATCH, maxQueue: TRAFFIC_QUEUE });
    state = result.state;
    events.push(result.event);
    if (result.event === 'updated' || result.event === 'bootstrapped') taken++;
    trajectory[k] = estimate();
  }
  const f = state.filter;
  const params = f ? { alpha: f.x[0], beta: f.x[1], gamma: f.x[2] } : null;
  const final = setup.slowdownAt
    ? {
        alpha: truth.alpha * setup.slowdownAt.factor,
        beta: truth.beta * setup.slowdownAt.factor,
        gamma: truth.gamma * setup.slowdownAt.factor,
      }
    : truth;
  return {
    params,
    observed,
    taken,
    events,
    trajectory,
    errors: params
      ? {
          alpha: params.alpha / final.alpha - 1,
          beta: params.beta / final.beta - 1,
          gamma: params.gamma / final.gamma - 1,
          lambda:
            lambdaStarOf(params, setup.slowdownAt?.factor) /
              lambdaStarOf(final, setup.slowdownAt?.factor) -
            1,
        }
      : null,
  };
}

/** The accuracy bounds: alpha 10%, beta 15%, lambda* 15% (gamma reported apart). */
export const BOUNDS = { alpha: 0.1, beta: 0.15, gamma: 0.15, lambda: 0.15 };

export function studyShape(shape: TrafficShape, seeds: number, pods = TRAFFIC_PODS): string {
  const outcomes: PodOutcome[] = [];
  for (let seed = 1; seed <= seeds; seed++) {
    for (let pod = 0; pod < pods; pod++) outcomes.push(runPod(shape, seed, pod));
  }
  const within = (o: PodOutcome, k: keyof typeof BOUNDS) =>
    o.errors !== null && Math.abs(o.errors[k]) <= BOUNDS[k];
  const count = (k: keyof typeof BOUNDS) => outcomes.filter((o) => within(o, k)).length;
  const three = outcomes.filter(
    (o) => within(o, 'alpha') && within(o, 'beta') && within(o, 'lambda'),
  ).length;
  const accepted80 = outcomes.filter((o) => o.observed > 0 && o.taken / o.observed >= 0.8).length;
  const observed = outcomes.reduce((a, o) => a + o.observed, 0);
  const taken = outcomes.reduce((a, o) => a + o.taken, 0);
  const stats = (k: keyof typeof BOUNDS) => {
    const v = outcomes.flatMap((o) => (o.errors ? [o.errors[k]] : []));
    const mean = v.reduce((a, b) => a + b, 0) / Math.max(1, v.length);
    const sd = Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, v.length - 1));
    const pct = (x: number) => `${x >= 0 ? '+' : ''}${(100 * x).toFixed(1)}`;
    return `${k} ${pct(Math.min(...v))}..${pct(Math.max(...v))}% (mean ${pct(mean)}%, sd ${(100 * sd).toFixed(1)}%)`;
  };
  const n = outcomes.length;
  return (
    `${shape}: alpha+beta+lambda* within ${three}/${n}; alpha ${count('alpha')}, beta ${count('beta')}, ` +
    `lambda* ${count('lambda')}, gamma ${count('gamma')}; periods taken ${taken}/${observed} ` +
    `(pods with >= 80% taken: ${accepted80}/${n})\n  ${stats('alpha')}, ${stats('beta')}, ${stats('gamma')}, ${stats('lambda')}`
  );
}

/**
 * A slowdown in virtual time: the pod restarts with every parameter doubled at the start of
 * period `at`; is the estimate within the bounds of the new parameters 3 periods later?
 */
export function studySlowdown(
  shape: TrafficShape,
  seeds: number,
  at = 6,
  pods = TRAFFIC_PODS,
): string {
  let followed = 0;
  let total = 0;
  const lines: string[] = [];
  for (let seed = 1; seed <= seeds; seed++) {
    for (let pod = 0; pod < pods; pod++) {
      const o = runPod(shape, seed, pod, { slowdownAt: { period: at, factor: 2 } });
      const p = o.trajectory[at + 2];
      const slow = {
        alpha: TRAFFIC_TRUTH.alpha * 2,
        beta: TRAFFIC_TRUTH.beta * 2,
        gamma: TRAFFIC_TRUTH.gamma * 2,
      };
      total++;
      const ok =
        p !== null &&
        p !== undefined &&
        Math.abs(p.alpha / slow.alpha - 1) <= BOUNDS.alpha &&
        Math.abs(p.beta / slow.beta - 1) <= BOUNDS.beta &&
        Math.abs(lambdaStarOf(p, 2) / lambdaStarOf(slow, 2) - 1) <= BOUNDS.lambda;
      if (ok) followed++;
      else if (lines.length < 5) lines.push(`  seed ${seed} pod ${pod}: ${o.events.join(',')}`);
    }
  }
  return `${shape}, 2x slower from period ${at}: within the bounds of the new parameters 3 periods later in ${followed}/${total}${lines.length ? `\n${lines.join('\n')}` : ''}`;
}
