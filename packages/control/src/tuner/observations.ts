/**
 * One tuner observation per pod and period, from two scrapes of the pod's vLLM
 * metrics (counters and histogram sums/counts are cumulative; the period's
 * values are their differences).
 *
 *   rate              first tokens per second (the TTFT histogram's count). A
 *                     request is counted when it starts being served, not when it
 *                     ends, so a period shorter than a request still sees it; in a
 *                     steady state this is the arrival rate.
 *   meanTtftMs        TTFT sum / count of the period.
 *   meanItlMs         inter-token sum / count of the period.
 *   meanInputTokens   prompt tokens / first tokens (vLLM counts a request's prompt
 *                     tokens in the step that emits its first token).
 *   meanOutputTokens  from the request_generation_tokens histogram of the requests
 *                     that finished; without it, generation tokens / successes.
 */
export interface SumCount {
  /** Seconds for latency histograms, tokens for token histograms. */
  sum: number;
  count: number;
  /** Cumulative counts by upper bound (le), ascending, +Inf last; when the pod exposes them. */
  buckets?: Array<[le: number, count: number]> | undefined;
}

/** The cumulative values of one scrape that observations are built from. */
export interface PodCounters {
  /** When the scrape was taken, ms on a monotonic clock. */
  atMs: number;
  ttft: SumCount | null;
  itl: SumCount | null;
  promptTokens: number | null;
  generationTokens: number | null;
  requestSuccess: number | null;
  requestGenerationTokens?: SumCount | null;
  /** vllm:request_queue_time_seconds: arrival to first scheduling (it includes the wait for
   * the iteration in progress). */
  queueTime?: SumCount | null;
  /** The leader's samples of the running/waiting gauges, cumulative like a counter. */
  gauges?: GaugeSums | null;
}

/**
 * Cumulative counts over the leader's samples (every scrape.interval_ms) of a pod's
 * vllm:num_requests_running and vllm:num_requests_waiting gauges, like a counter: a period's
 * difference is its occupancy (the time spent at each batch size), which the gateway's
 * queue cannot distort. (Not each interval's tokens at the batch size it ended with: at
 * 100 ms against iterations of 10-30 ms that misattributes tokens and biases gamma.)
 */
export interface GaugeSums {
  samples: number;
  /** running[b]: samples that read b requests running. */
  running: number[];
  /** Sum of the waiting gauge over the samples. */
  waiting: number;
}

export function emptyGaugeSums(): GaugeSums {
  return { samples: 0, running: [], waiting: 0 };
}

/** Adds one sample of the gauges to `sums` (in place). */
export function addGaugeSample(sums: GaugeSums, running: number, waiting: number): GaugeSums {
  const b = Math.max(0, Math.round(running));
  while (sums.running.length <= b) sums.running.push(0);
  sums.samples += 1;
  sums.running[b]! += 1;
  sums.waiting += Math.max(0, waiting);
  return sums;
}

export interface PeriodObservation {
  /** Requests per second. */
  rate: number;
  meanTtftMs: number;
  meanItlMs: number;
  meanInputTokens: number;
  /** Output tokens per request as vLLM counts them (the first one included). */
  meanOutputTokens: number;
  /** First tokens in the period (the sample size). */
  requests: number;
  periodS: number;
  /** The pod's occupancy from the leader's gauge samples, when it has enough of them. */
  occupancy?: Occupancy | undefined;
  /** Mean arrival-to-scheduling time of the period's admissions (ms), when the pod reports it. */
  meanQueueMs?: number | undefined;
  /** Standard deviation of ln mean TTFT and ln mean ITL, from the period's own samples. */
  noise?: readonly [number, number] | undefined;
}

/** Why a pod's period gave no observation (fairgate_tuner_updates_total's no_observation). */
export type SkipReason =
  | 'no_scrape'
  | 'counter_reset'
  | 'metrics_missing'
  | 'too_few_requests'
  | 'no_output_samples';

export type PeriodResult =
  | { observation: PeriodObservation; skipped?: undefined }
  | { observation: null; skipped: SkipReason };

/**
 * The part of a period's relative error that more samples do not remove: the model's own
 * error against the sim (docs/tuner.md: about 1-3% on TTFT and ITL at a measured occupancy).
 */
export const MODEL_NOISE = 0.02;

/**
 * Variance of one sample from a histogram's period buckets: bucket midpoints plus each
 * bucket's width^2 / 12 (uniform within it); the open +Inf bucket counts at its lower bound.
 */
function bucketVariance(
  next: readonly [number, number][],
  prev: readonly [number, number][] | undefined,
  mean: number,
): number | null {
  if (prev && (prev.length !== next.length || prev.some(([le], k) => le !== next[k]![0]))) {
    return null;
  }
  let total = 0;
  let second = 0;
  let lower = 0;
  let below = 0;
  for (let k = 0; k < next.length; k++) {
    const [le, cumulative] = next[k]!;
    const upTo = cumulative - (prev ? prev[k]![1] : 0);
    const count = upTo - below;
    below = upTo;
    if (count < 0) return null;
    const upper = Number.isFinite(le) ? le : lower;
    const mid = (lower + upper) / 2;
    second += count * (mid * mid + ((upper - lower) * (upper - lower)) / 12);
    total += count;
    lower = upper;
  }
  if (!(total > 0)) return null;
  return Math.max(0, second / total - mean * mean);
}

/**
 * Standard deviation of ln of a period's mean: MODEL_NOISE and the sampling error of the mean
 * of `requests` independent requests, cv^2 / requests, with the per-sample spread taken from the
 * histogram's buckets (requests, not tokens: the tokens of one request share its batches).
 * Undefined when the pod exposes no buckets.
 */
function noiseOfMean(
  next: SumCount,
  prev: SumCount | null | undefined,
  period: SumCount,
  requests: number,
): number | undefined {
  if (!next.buckets || !(period.count > 0)) return undefined;
  const mean = period.sum / period.count;
  const variance = bucketVariance(next.buckets, prev?.buckets, mean);
  if (variance === null || !(mean > 0)) return undefined;
  return Math.sqrt(MODEL_NOISE ** 2 + variance / (mean * mean * requests));
}

/** A request's mean inter-token gap around the period's (at a measured occupancy). */
export const ITL_REQUEST_CV = 0.1;

/** Fewer gauge samples than this in a period: the occupancy is not used (the chain's is). */
export const MIN_GAUGE_SAMPLES = 10;

import type { Occupancy } from './queueing-model.js';

export interface ObservationOptions {
  /** Fewer first tokens than this in the period: no observation (default 10). */
  minRequests?: number;
}

export const DEFAULT_MIN_REQUESTS = 10;

// A series absent from the earlier scrape and present in the later one started from zero
// in between (a pod exposes a labelled histogram only after its first observation).
function delta(next: SumCount | null | undefined, prev: SumCount | null | undefined) {
  if (!next) return null;
  const sum = next.sum - (prev?.sum ?? 0);
  const count = next.count - (prev?.count ?? 0);
  // A counter that went down is a restarted pod: the period is unusable.
  if (!(count >= 0) || !(sum >= 0) || !Number.isFinite(sum)) return null;
  return { sum, count };
}

function counterDelta(next: number | null, prev: number | null): number | null {
  if (next === null) return null;
  const d = next - (prev ?? 0);
  return Number.isFinite(d) && d >= 0 ? d : null;
}

/** The period's share of each batch size in `next` - `prev`; null when it counted nothing. */
function distribution(next: readonly number[], prev: readonly number[] | undefined) {
  const counts = next.map((count, b) => count - (prev?.[b] ?? 0));
  const total = counts.reduce((a, c) => a + c, 0);
  if (!(total > 0) || counts.some((c) => !(c >= 0))) return null;
  return counts.map((c) => c / total);
}

function occupancyOf(
  next: GaugeSums | null | undefined,
  prev: GaugeSums | null | undefined,
  throughput: number,
): Occupancy | undefined {
  if (!next) return undefined;
  const samples = next.samples - (prev?.samples ?? 0);
  if (!(samples >= MIN_GAUGE_SAMPLES)) return undefined;
  const batch = distribution(next.running, prev?.running);
  const meanQueue = (next.waiting - (prev?.waiting ?? 0)) / samples;
  if (!batch || !(Number.isFinite(meanQueue) && meanQueue >= 0)) return undefined;
  return { batch, meanQueue, throughput };
}

/**
 * The period between two scrapes of one pod as a tuner observation, or why it gives none:
 * a counter went down (the pod restarted), metrics missing, too few requests, no
 * inter-token or output samples.
 */
export function observePeriod(
  prev: PodCounters,
  next: PodCounters,
  options: ObservationOptions = {},
): PeriodResult {
  const skip = (skipped: SkipReason): PeriodResult => ({ observation: null, skipped });
  const minRequests = Math.max(1, options.minRequests ?? DEFAULT_MIN_REQUESTS);
  const periodS = (next.atMs - prev.atMs) / 1_000;
  if (!(periodS > 0)) return skip('no_scrape');
  if (!next.ttft || !next.itl || next.promptTokens === null) return skip('metrics_missing');
  const ttft = delta(next.ttft, prev.ttft);
  const itl = delta(next.itl, prev.itl);
  const prompt = counterDelta(next.promptTokens, prev.promptTokens);
  if (!ttft || !itl || prompt === null) return skip('counter_reset');
  if (ttft.count < minRequests) return skip('too_few_requests');
  if (itl.count < 1) return skip('no_output_samples');
  const finished = delta(next.requestGenerationTokens, prev.requestGenerationTokens);
  let meanOutputTokens: number | null = null;
  if (finished && finished.count > 0) {
    meanOutputTokens = finished.sum / finished.count;
  } else {
    const generated = counterDelta(next.generationTokens, prev.generationTokens);
    const successes = counterDelta(next.requestSuccess, prev.requestSuccess);
    if (generated !== null && successes) meanOutputTokens = generated / successes;
  }
  if (meanOutputTokens === null || !(meanOutputTokens > 1)) return skip('no_output_samples');
  const meanInputTokens = prompt / ttft.count;
  if (!(meanInputTokens > 0)) return skip('metrics_missing');
  const rate = ttft.count / periodS;
  const meanTtftMs = (ttft.sum / ttft.count) * 1_000;
  const queue = delta(next.queueTime, prev.queueTime);
  const ttftNoise = noiseOfMean(next.ttft, prev.ttft, ttft, ttft.count);
  // vLLM's ITL buckets are too coarse for a spread (10, 25, 50 ms ...), and most of a period's
  // ITL spread is the batch changing, which the occupancy accounts for: a fixed per-request cv.
  const itlNoise = Math.sqrt(MODEL_NOISE ** 2 + ITL_REQUEST_CV ** 2 / ttft.count);
  const meanQueueMs = queue && queue.count > 0 ? (queue.sum / queue.count) * 1_000 : undefined;
  return {
    observation: {
      rate,
      meanTtftMs,
      meanItlMs: (itl.sum / itl.count) * 1_000,
      meanInputTokens,
      meanOutputTokens,
      requests: ttft.count,
      periodS,
      occupancy: occupancyOf(next.gauges, prev.gauges, rate),
      // The queue's admissions and the first tokens are (nearly) the same requests; a mean
      // queue time at or above the mean TTFT is not (a pod that only queued): left out.
      meanQueueMs: meanQueueMs !== undefined && meanQueueMs < meanTtftMs ? meanQueueMs : undefined,
      noise: ttftNoise !== undefined && itlNoise !== undefined ? [ttftNoise, itlNoise] : undefined,
    },
  };
}
