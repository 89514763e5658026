import {
  modelDesiredPods,
  modelPodNeed,
  type PodCapacity,
  podCapacity,
  type ResolvedTargets,
  resolveTargets,
  toWorkload,
} from './capacity.js';
import {
  bootstrap,
  type FilterState,
  initialState,
  MEASUREMENT_NOISE,
  type Observation,
  predict,
  relativeStd,
  type UpdateResult,
  update,
} from './ekf.js';
import type { PeriodObservation, SkipReason } from './observations.js';
import { meanBatchOf, type PodParams, type Workload } from './queueing-model.js';

/**
 * The capacity tuner of one pod, one step per period: bootstrap from the first observation
 * (the model is conditioned on the period's measured occupancy, so any load will do), then
 * one EKF update per period; plus the codec of its stored state and the capacity report
 * over all pods. Pure: the leader's loop does the I/O.
 */

/** What a pod's period came to: fairgate_tuner_updates_total's result label. */
export const TUNER_OUTCOMES = [
  'accepted',
  'rejected',
  'reset',
  'bootstrapped',
  'no_observation',
] as const;
export type TunerOutcome = (typeof TUNER_OUTCOMES)[number];

/** One period's outcome with its reason (a rejection's or a skipped period's). */
export interface OutcomeRecord {
  /** Date.now() of the leader when the period ended. */
  at: number;
  outcome: TunerOutcome;
  reason?: string | undefined;
  nis?: number | undefined;
}

/** Most recent rejections, resets and skipped periods kept per pod. */
export const OUTCOME_HISTORY = 10;

export interface PodTunerState {
  filter: FilterState | null;
  /** The pod restarted (a counter went down): the next observation starts a new filter. */
  restarted: boolean;
  /** Times the filter was started afresh (repeated rejections, or a restart it did not explain). */
  resets: number;
  /** Periods per outcome since the state was created. */
  counts: Record<TunerOutcome, number>;
  /** The last OUTCOME_HISTORY periods that were not accepted or bootstrapped, oldest first. */
  history: OutcomeRecord[];
}

export interface PodTunerSettings {
  /** N: the pod's max batch (vLLM max-num-seqs). */
  maxBatch: number;
  /** K: queue positions the model gives the pod beyond the batch. */
  maxQueue: number;
  /** Consecutive NIS rejections after which the filter starts afresh from that period. */
  resetAfter?: number;
}

export const RESET_AFTER = 3;

export type TuneEvent = 'bootstrapped' | 'updated' | 'rejected' | 'reset';

export interface TuneResult {
  state: PodTunerState;
  event: TuneEvent;
  /** The update's result when one ran. */
  update?: UpdateResult;
}

const zeroCounts = (): Record<TunerOutcome, number> =>
  Object.fromEntries(TUNER_OUTCOMES.map((o) => [o, 0])) as Record<TunerOutcome, number>;

export function emptyPodTuner(): PodTunerState {
  return { filter: null, restarted: false, resets: 0, counts: zeroCounts(), history: [] };
}

/**
 * Requests in the pod on average during the period: the gauges' time average when sampled,
 * else Little's law, rate x (TTFT + decode time).
 */
export function requestsInPod(obs: PeriodObservation): number {
  if (obs.occupancy) return meanBatchOf(obs.occupancy) + obs.occupancy.meanQueue;
  const decodes = Math.max(0, obs.meanOutputTokens - 1);
  return (obs.rate * (obs.meanTtftMs + decodes * obs.meanItlMs)) / 1_000;
}

export function filterObservation(obs: PeriodObservation, settings: PodTunerSettings): Observation {
  return {
    ttftMs: obs.meanTtftMs,
    itlMs: obs.meanItlMs,
    rate: obs.rate,
    workload: toWorkload(obs, settings.maxBatch, settings.maxQueue),
    occupancy: obs.occupancy,
    queueMs: obs.meanQueueMs,
    noise: obs.noise,
    elapsedS: obs.periodS,
  };
}

/**
 * `params` x s with s fitted to the observation, when that one factor explains both TTFT and
 * ITL within the observation's noise; null otherwise, and without a measured occupancy. At a
 * measured occupancy the model's ITL and its TTFT beyond the queue are homogeneous of degree 1
 * in the parameters, so each gives s directly.
 */
export function rescaled(
  params: PodParams,
  obs: Observation,
): { factor: number; logStd: number } | null {
  // At the chain's occupancy (no gauge samples) the scaling does not hold: the chain moves.
  if (!obs.occupancy) return null;
  const l = predict(params, obs);
  const queue = obs.queueMs ?? l.queueMs;
  const byItl = obs.itlMs / l.itlMs;
  const byTtft = (obs.ttftMs - queue) / (l.ttftMs - l.queueMs);
  if (!(byItl > 0 && byTtft > 0) || !Number.isFinite(byItl) || !Number.isFinite(byTtft)) {
    return null;
  }
  const [noiseTtft, noiseItl] = obs.noise ?? [MEASUREMENT_NOISE, MEASUREMENT_NOISE];
  // The two factors differ by the errors of both measurements (TTFT's relative error grows
  // by TTFT / (TTFT - queue) once the queue is taken off).
  const ttftShare = obs.ttftMs / Math.max(1e-9, obs.ttftMs - queue);
  const spread = Math.hypot(noiseTtft * ttftShare, noiseItl);
  if (Math.abs(Math.log(byItl / byTtft)) > 2 * spread) return null;
  return { factor: Math.sqrt(byItl * byTtft), logStd: spread / 2 };
}

/** Floor of the scale's log std in a rescaled filter (one period's estimate of it). */
export const RESCALE_LOG_STD = 0.05;

/**
 * The old filter moved by one factor: x s, and its covariance (of ln x, so unchanged by the
 * scale) plus the scale's own uncertainty along (1, 1, 1). What the old filter knew about
 * the pod's shape stays: a run of saturated periods after the restart cannot trade alpha
 * against gamma (a fresh covariance let them drift 10-14% in alpha).
 */
function rescaledFilter(old: FilterState, scale: { factor: number; logStd: number }) {
  const x = old.x.map((v) => v * scale.factor) as [number, number, number];
  const v = Math.max(RESCALE_LOG_STD, scale.logStd) ** 2;
  const fresh = initialState({ alpha: x[0], beta: x[1], gamma: x[2] });
  return { ...fresh, P: old.P.map((row) => row.map((p) => p + v)) };
}

/** One period of one pod with an observation. */
export function tunePod(
  state: PodTunerState,
  obs: PeriodObservation,
  settings: PodTunerSettings,
): TuneResult {
  const observation = filterObservation(obs, settings);
  const learned = state.filter ? state.filter.x[2] / state.filter.x[1] : undefined;
  const fresh = () => initialState(bootstrap(observation, learned));
  if (!state.filter) {
    return { state: { ...state, filter: fresh(), restarted: false }, event: 'bootstrapped' };
  }
  if (state.restarted) {
    // The pod restarted, perhaps with other flags or on other hardware: a new filter from
    // this period. Trying the old estimate first was worse: a 2x slower pod can pass the gate
    // by a 10x gamma. When the old parameters scaled by one factor explain this period within
    // its noise, they are the start (the same pod, faster or slower); else the bootstrap,
    // shaped like the old filter (its gamma / beta).
    const old = state.filter;
    const scale = rescaled({ alpha: old.x[0], beta: old.x[1], gamma: old.x[2] }, observation);
    const filter = scale ? rescaledFilter(old, scale) : fresh();
    return {
      state: { ...state, filter, restarted: false, resets: state.resets + 1 },
      event: 'reset',
    };
  }
  const result = update(state.filter, observation);
  if (result.accepted) {
    return {
      state: { ...state, filter: result.state, restarted: false },
      event: 'updated',
      update: result,
    };
  }
  const limit = settings.resetAfter ?? RESET_AFTER;
  if (result.reason === 'nis' && result.state.consecutiveRejections >= limit) {
    // Confident and wrong, or the pod changed: a rejected update restores the covariance,
    // so it never grows back and the filter would reject forever. Start a new filter from
    // this period (the bootstrap follows the pod's current latencies at its occupancy,
    // where a reopened covariance around the old estimate would explain a slower pod by
    // gamma).
    return {
      state: { ...state, filter: fresh(), restarted: false, resets: state.resets + 1 },
      event: 'reset',
      update: result,
    };
  }
  return { state: { ...state, filter: result.state }, event: 'rejected', update: result };
}

/** A period without an observation; a counter that went down marks the pod restarted. */
export function skipPeriod(state: PodTunerState, reason: SkipReason): PodTunerState {
  return reason === 'counter_reset' && state.filter ? { ...state, restarted: true } : state;
}

/** Counts the period's outcome, and keeps it in the history unless it was a good one. */
export function recordOutcome(state: PodTunerState, record: OutcomeRecord): PodTunerState {
  const counts = { ...state.counts, [record.outcome]: state.counts[record.outcome] + 1 };
  const notable = record.outcome !== 'accepted' && record.outcome !== 'bootstrapped';
  const history = notable ? [...state.history, record].slice(-OUTCOME_HISTORY) : state.history;
  return { ...state, counts, history };
}

/** The outcome label of a tune event. */
export function outcomeOf(event: TuneEvent): TunerOutcome {
  return event === 'updated' ? 'accepted' : event;
}

// ---------------------------------------------------------------------------------------
// Stored state: JSON in the leader's data, one field per pod.

export const TUNER_STATE_VERSION = 2;

export interface StoredPodTuner {
  version: number;
  state: PodTunerState;
}

export function encodePodTuner(state: PodTunerState): string {
  return JSON.stringify({ version: TUNER_STATE_VERSION, state } satisfies StoredPodTuner);
}

const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const isVector3 = (v: unknown, positive: boolean) =>
  Array.isArray(v) && v.length === 3 && v.every((x) => isNumber(x) && (!positive || x > 0));

function validFilter(f: unknown): f is FilterState {
  if (!f || typeof f !== 'object') return false;
  const s = f as Record<string, unknown>;
  return (
    isVector3(s.x, true) &&
    isVector3(s.lower, true) &&
    isVector3(s.upper, true) &&
    Array.isArray(s.P) &&
    s.P.length === 3 &&
    s.P.every((row) => isVector3(row, false)) &&
    isNumber(s.updates) &&
    isNumber(s.rejected) &&
    isNumber(s.consecutiveRejections)
  );
}

function validCounts(c: unknown): c is Record<TunerOutcome, number> {
  if (!c || typeof c !== 'object') return false;
  return TUNER_OUTCOMES.every((o) => isNumber((c as Record<string, unknown>)[o]));
}

function validHistory(h: unknown): h is OutcomeRecord[] {
  return (
    Array.isArray(h) &&
    h.every(
      (r) =>
        r &&
        typeof r === 'object' &&
        isNumber(r.at) &&
        (TUNER_OUTCOMES as readonly unknown[]).includes(r.outcome),
    )
  );
}

/** The stored state, or a fresh one (with the problem) when absent or unreadable. */
export function decodePodTuner(text: string | null): { state: PodTunerState; problem?: string } {
  if (text === null) return { state: emptyPodTuner() };
  const fresh = (problem: string) => ({ state: emptyPodTuner(), problem });
  let root: unknown;
  try {
    root = JSON.parse(text);
  } catch {
    return fresh('stored tuner state is not JSON');
  }
  const stored = root as Partial<StoredPodTuner> | null;
  if (!stored || typeof stored !== 'object') return fresh('stored tuner state is not an object');
  if (stored.version !== TUNER_STATE_VERSION) {
    return fresh(`stored tuner state has version ${String(stored.version)}`);
  }
  const s = stored.state as Partial<PodTunerState> | undefined;
  if (
    !s ||
    !(s.filter === null || validFilter(s.filter)) ||
    typeof s.restarted !== 'boolean' ||
    !isNumber(s.resets) ||
    !validCounts(s.counts) ||
    !validHistory(s.history)
  ) {
    return fresh('stored tuner state has missing or bad fields');
  }
  return { state: s as PodTunerState };
}

// ---------------------------------------------------------------------------------------
// The capacity report over all pods.

export interface ModelTuning {
  maxBatch: number;
  maxQueue: number;
  targetTtftMs?: number | undefined;
  targetItlMs?: number | undefined;
}

export interface PodPeriod {
  pod: string;
  model: string;
  state: PodTunerState;
  /** This period's observation; null when the period was unusable or the pod missing. */
  observation: PeriodObservation | null;
  /** Requests/s the pod served this period even when too few for an observation. */
  rate: number;
  /**
   * The pod's latest observation of an earlier period: the workload its lambda* is sized
   * for when this period has none (too few requests at low load), so the need still
   * follows the rate down. Absent: sized only from this period's.
   */
  lastObservation?: PeriodObservation | null;
  /** NIS of this period's update, when one ran. */
  nis?: number;
  event?: TuneEvent;
}

export interface PodReport extends Partial<PodCapacity> {
  model: string;
  alphaMs: number | null;
  betaMs: number | null;
  gammaMs: number | null;
  /** The filter's relative standard deviation of alpha, beta, gamma. */
  relativeStd: [number, number, number] | null;
  nis: number | null;
  event: TuneEvent | null;
  updates: number;
  rejected: number;
  resets: number;
  /** Periods per outcome, and the last ones not taken with their reasons. */
  counts: Record<TunerOutcome, number>;
  history: OutcomeRecord[];
  observedRate: number;
  observation: PeriodObservation | null;
}

export interface ModelReport {
  targets: ResolvedTargets | null;
  /** Sum of the model's pods' observed rates. */
  totalRate: number;
  desiredPods: number | null;
  /** totalRate over the mean lambda*, unrounded (null while no pod is sized). */
  need: number | null;
  pods: string[];
}

export interface CapacityReport {
  pods: Record<string, PodReport>;
  models: Record<string, ModelReport>;
  /** Sum over models; null while no model can be sized. */
  desiredPods: number | null;
  /** Sum of the models' unrounded needs (scale-signal.ts makes the signal from it). */
  need: number | null;
  /** For controller.bootstrap: model — per worker, the smallest over sized pods. */
  controller: { startCap: number; ceilingCap: number } | null;
}

/**
 * Sizes every model from its pods' learned parameters. The workload a pod is
 * sized for is its latest observation's token means (the mix it is serving).
 */
export function capacityReport(
  periods: readonly PodPeriod[],
  tuning: (model: string) => ModelTuning,
  sloMultiplier: number,
): CapacityReport {
  const pods: Record<string, PodReport> = {};
  const models: Record<string, ModelReport> = {};
  const byModel = new Map<string, PodPeriod[]>();
  for (const period of periods) {
    const list = byModel.get(period.model) ?? [];
    list.push(period);
    byModel.set(period.model, list);
  }
  let desiredTotal: number | null = null;
  let needTotal: number | null = null;
  let startCap = Number.POSITIVE_INFINITY;
  let ceilingCap = Number.POSITIVE_INFINITY;
  for (const [model, list] of byModel) {
    const t = tuning(model);
    const sized = list.flatMap((p) => {
      const f = p.state.filter;
      const obs = p.observation ?? p.lastObservation ?? null;
      if (!f || !obs) return [];
      const params: PodParams = { alpha: f.x[0], beta: f.x[1], gamma: f.x[2] };
      const workload: Workload = toWorkload(obs, t.maxBatch, t.maxQueue);
      return [{ period: p, params, workload }];
    });
    const observed = list.filter((p) => p.observation);
    const weight = observed.reduce((a, p) => a + p.observation!.rate, 0);
    const targets = resolveTargets({
      explicit: { ttftMs: t.targetTtftMs, itlMs: t.targetItlMs },
      learned: sized.map(({ params, workload }) => ({ params, workload })),
      observed:
        weight > 0
          ? {
              meanTtftMs:
                observed.reduce((a, p) => a + p.observation!.rate * p.observation!.meanTtftMs, 0) /
                weight,
              meanItlMs:
                observed.reduce((a, p) => a + p.observation!.rate * p.observation!.meanItlMs, 0) /
                weight,
            }
          : null,
      sloMultiplier,
    });
    const lambdaStars: number[] = [];
    for (const p of list) {
      const f = p.state.filter;
      const entry = sized.find((s) => s.period === p);
      const capacity = entry && targets ? podCapacity(entry.params, entry.workload, targets) : null;
      if (capacity) {
        lambdaStars.push(capacity.lambdaStar);
        if (capacity.lambdaStar > 0) {
          startCap = Math.min(startCap, Math.max(1, Math.ceil(capacity.concurrency)));
          ceilingCap = Math.min(ceilingCap, capacity.ceiling);
        }
      }
      pods[p.pod] = {
        model,
        alphaMs: f ? f.x[0] : null,
        betaMs: f ? f.x[1] : null,
        gammaMs: f ? f.x[2] : null,
        relativeStd: f ? relativeStd(f) : null,
        nis: p.nis ?? null,
        event: p.event ?? null,
        updates: f?.updates ?? 0,
        rejected: f?.rejected ?? 0,
        resets: p.state.resets,
        counts: p.state.counts,
        history: p.state.history,
        observedRate: p.rate,
        observation: p.observation,
        ...(capacity ?? {}),
      };
    }
    const totalRate = list.reduce((a, p) => a + p.rate, 0);
    const desired = modelDesiredPods(totalRate, lambdaStars);
    const finite = desired !== null && Number.isFinite(desired) ? desired : null;
    if (finite !== null) desiredTotal = (desiredTotal ?? 0) + finite;
    const need = modelPodNeed(totalRate, lambdaStars);
    if (need !== null) needTotal = (needTotal ?? 0) + need;
    models[model] = {
      targets,
      totalRate,
      desiredPods: finite,
      need,
      pods: list.map((p) => p.pod),
    };
  }
  return {
    pods,
    models,
    desiredPods: desiredTotal,
    need: needTotal,
    controller: Number.isFinite(startCap)
      ? { startCap: Math.min(startCap, ceilingCap), ceilingCap }
      : null,
  };
}
