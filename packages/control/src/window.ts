import {
  type BucketCounts,
  isBucketIndex,
  mergeCounts,
  quantile,
  totalCount,
} from './histogram.js';

/**
 * What a replica flushes once a second and the leader reads merged over the window: TTFT
 * bucket counts of SLO-protected requests, plus the count of those requests that failed
 * upstream (error status or timeout) before their first token, under a reserved index in
 * the same bucket -> count map, so one flush and one read carry both.
 */
export const ERROR_COUNT_INDEX = 1_000_000;
/**
 * Service TTFT (grant to first token: the gateway's TTFT less its queue wait) of the same
 * requests, under bucket index + this offset. The queue-aware controller reads it to tell
 * latency the pods add from latency the queue adds.
 */
export const SERVICE_INDEX_OFFSET = 2_000_000;

export interface WindowCounts {
  ttft: Map<number, number>;
  /** Service TTFT (t5 - t2) bucket counts; empty from replicas that do not record it. */
  serviceTtft: Map<number, number>;
  errors: number;
}

export function emptyWindow(): WindowCounts {
  return { ttft: new Map(), serviceTtft: new Map(), errors: 0 };
}

/** The flat map for Scheduler.flushLatency. */
export function encodeWindow(window: WindowCounts): Map<number, number> {
  const flat = new Map(window.ttft);
  for (const [index, count] of window.serviceTtft) flat.set(index + SERVICE_INDEX_OFFSET, count);
  if (window.errors > 0) flat.set(ERROR_COUNT_INDEX, window.errors);
  return flat;
}

/** The merged map from Scheduler.readLatencyWindow; indices of no known kind are ignored. */
export function decodeWindow(merged: BucketCounts): WindowCounts {
  const window = emptyWindow();
  for (const [index, count] of merged) {
    if (index === ERROR_COUNT_INDEX) window.errors += count;
    else if (isBucketIndex(index)) mergeCounts(window.ttft, new Map([[index, count]]));
    else if (isBucketIndex(index - SERVICE_INDEX_OFFSET)) {
      mergeCounts(window.serviceTtft, new Map([[index - SERVICE_INDEX_OFFSET, count]]));
    }
  }
  return window;
}

export interface WindowSummary {
  /** TTFT samples in the window. */
  samples: number;
  errors: number;
  /**
   * p99 of the window where every failed request counts as a sample slower than any TTFT
   * (it never produced a first token): NaN for an empty window, +Infinity when failures
   * alone make up more than the top 1%.
   */
  p99S: number;
  /** p99 of the service TTFT samples alone; NaN when there are none. */
  serviceP99S: number;
}

export const P99 = 0.99;

export function summarizeWindow(window: WindowCounts): WindowSummary {
  const samples = totalCount(window.ttft);
  const serviceP99S =
    totalCount(window.serviceTtft) > 0 ? quantile(window.serviceTtft, P99) : Number.NaN;
  const total = samples + window.errors;
  if (total === 0) return { samples, errors: window.errors, p99S: Number.NaN, serviceP99S };
  const rank = P99 * total;
  const p99S = rank > samples ? Number.POSITIVE_INFINITY : quantile(window.ttft, rank / samples);
  return { samples, errors: window.errors, p99S, serviceP99S };
}
