import {
  analyze,
  desiredPods,
  type LatencyTargets,
  maxRate,
  type PodParams,
  serviceRate,
  type Workload,
} from './queueing-model.js';

/**
 * Sizing from learned parameters: SLO targets, lambda* per pod, desired pods and
 * the controller's concurrency suggestion. Every number here comes from
 * analyze() in queueing-model.ts, the function the filter fits: one TTFT
 * definition and one queue size (the workload's maxQueue) for both.
 */

/** Cold-start targets: observed x 1.5, capped (the WVA analyzer's defaults). */
export const OBSERVED_HEADROOM = 1.5;
export const MAX_FALLBACK_TTFT_MS = 10_000;
export const MAX_FALLBACK_ITL_MS = 500;
export const DEFAULT_SLO_MULTIPLIER = 3;

export interface TokenMeans {
  meanInputTokens: number;
  /** Output tokens per request as vLLM counts them (the first one included). */
  meanOutputTokens: number;
}

/** The model's workload for observed token means: o = output tokens - 1 decode iterations. */
export function toWorkload(means: TokenMeans, maxBatch: number, maxQueue: number): Workload {
  return {
    inputTokens: means.meanInputTokens,
    outputTokens: Math.max(0, means.meanOutputTokens - 1),
    maxBatch,
    maxQueue,
  };
}

export type TargetSource = 'explicit' | 'inferred' | 'observed';

export interface ResolvedTargets extends LatencyTargets {
  source: TargetSource;
}

/**
 * The rate at which the iteration a token sees (decodeIterationMs, ITL without the
 * request's own work) reaches k x alpha (utilisation about 1 - 1/k), by bisection; the
 * top of the search range when the batch limit is reached first.
 */
export function rateAtIterationMultiple(p: PodParams, w: Workload, k: number): number {
  const target = k * p.alpha;
  let low = serviceRate(p, w, 1) * 0.001;
  let high = serviceRate(p, w, w.maxBatch) * 0.999;
  if (analyze(p, w, high).decodeIterationMs <= target) return high;
  if (analyze(p, w, low).decodeIterationMs > target) return low;
  for (let n = 0; n < 60; n++) {
    const mid = (low + high) / 2;
    if (analyze(p, w, mid).decodeIterationMs <= target) low = mid;
    else high = mid;
  }
  return low;
}

/**
 * Targets inferred from learned parameters with the SLO multiplier k: the
 * model's TTFT and ITL at the rate where the mean iteration time is k x alpha.
 * With the WVA analyzer's TTFT (T_iter + (beta+gamma) i) these are exactly its
 * formulas TTFT = k alpha + (beta+gamma) i and ITL = k alpha + beta + gamma (i +
 * (o+1)/2); this model's TTFT also counts the queue and the iteration in progress
 * at arrival, and taking the WVA formula literally would put the TTFT target at
 * a lower utilisation than the ITL target (about 1 - 1.5/k instead of 1 - 1/k).
 */
export function inferredTargets(p: PodParams, w: Workload, k: number): LatencyTargets {
  const r = analyze(p, w, rateAtIterationMultiple(p, w, k));
  return { ttftMs: r.ttftMs, itlMs: r.itlMs };
}

export function observedTargets(observed: { meanTtftMs: number; meanItlMs: number }) {
  return {
    ttftMs: Math.min(observed.meanTtftMs * OBSERVED_HEADROOM, MAX_FALLBACK_TTFT_MS),
    itlMs: Math.min(observed.meanItlMs * OBSERVED_HEADROOM, MAX_FALLBACK_ITL_MS),
  };
}

export interface TargetInputs {
  /** Both or neither (validated by the config). */
  explicit?: { ttftMs?: number | undefined; itlMs?: number | undefined };
  /** Learned parameters of every tuned pod of the model, with that pod's workload. */
  learned: readonly { params: PodParams; workload: Workload }[];
  /** Rate-weighted observed latencies of the model's pods this period. */
  observed: { meanTtftMs: number; meanItlMs: number } | null;
  sloMultiplier: number;
}

/**
 * One SLO per model: explicit targets; else inferred from learned parameters (the
 * largest over the model's pods); else observed x 1.5 while the filter is cold;
 * null when there is nothing to go by.
 */
export function resolveTargets(inputs: TargetInputs): ResolvedTargets | null {
  const { explicit } = inputs;
  if (explicit?.ttftMs !== undefined && explicit.itlMs !== undefined) {
    return { ttftMs: explicit.ttftMs, itlMs: explicit.itlMs, source: 'explicit' };
  }
  if (inputs.learned.length > 0) {
    let ttftMs = 0;
    let itlMs = 0;
    for (const pod of inputs.learned) {
      const t = inferredTargets(pod.params, pod.workload, inputs.sloMultiplier);
      ttftMs = Math.max(ttftMs, t.ttftMs);
      itlMs = Math.max(itlMs, t.itlMs);
    }
    return { ttftMs, itlMs, source: 'inferred' };
  }
  if (inputs.observed) return { ...observedTargets(inputs.observed), source: 'observed' };
  return null;
}

export interface PodCapacity {
  /** lambda*: the most requests/s the pod takes within the targets. */
  lambdaStar: number;
  /** Requests in the pod (batch + queue) at lambda*: the controller's starting cap. */
  concurrency: number;
  /** Most requests worth sending the pod at once: the batch (more only queue in it). */
  ceiling: number;
  /** The model's TTFT and ITL at lambda*. */
  ttftMs: number;
  itlMs: number;
}

export function podCapacity(p: PodParams, w: Workload, targets: LatencyTargets): PodCapacity {
  const lambdaStar = maxRate(p, w, targets);
  const r = analyze(p, w, Math.max(lambdaStar, Number.MIN_VALUE));
  return {
    lambdaStar,
    concurrency: lambdaStar > 0 ? r.meanBatch + r.meanQueue : 0,
    ceiling: w.maxBatch,
    ttftMs: r.ttftMs,
    itlMs: r.itlMs,
  };
}

/**
 * Pods a model needs: its pods' total observed rate over the mean lambda* of its
 * tuned pods (they run the same model on, presumably, the same hardware).
 */
export function modelDesiredPods(totalRate: number, lambdaStars: readonly number[]): number | null {
  if (lambdaStars.length === 0) return null;
  const mean = lambdaStars.reduce((a, b) => a + b, 0) / lambdaStars.length;
  return desiredPods(totalRate, mean);
}

/** The same need unrounded (pods, fractional): what the scale signal's hysteresis reads. */
export function modelPodNeed(totalRate: number, lambdaStars: readonly number[]): number | null {
  if (lambdaStars.length === 0) return null;
  const mean = lambdaStars.reduce((a, b) => a + b, 0) / lambdaStars.length;
  if (totalRate <= 0) return 0;
  return mean > 0 ? totalRate / mean : null;
}
