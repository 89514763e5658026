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
  /** Mean of the running-requests gauge over the period's scrapes, when known. */
  meanRunning?: number;
}

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

/**
 * The period between two scrapes of one pod as a tuner observation, or null when
 * the period is unusable: too few requests, no inter-token samples, a counter
 * reset, or metrics missing.
 */
export function observePeriod(
  prev: PodCounters,
  next: PodCounters,
  options: ObservationOptions = {},
): PeriodObservation | null {
  const minRequests = Math.max(1, options.minRequests ?? DEFAULT_MIN_REQUESTS);
  const periodS = (next.atMs - prev.atMs) / 1_000;
  if (!(periodS > 0)) return null;
  const ttft = delta(next.ttft, prev.ttft);
  const itl = delta(next.itl, prev.itl);
  const prompt = counterDelta(next.promptTokens, prev.promptTokens);
  if (!ttft || !itl || prompt === null) return null;
  if (ttft.count < minRequests || itl.count < 1) return null;
  const finished = delta(next.requestGenerationTokens, prev.requestGenerationTokens);
  let meanOutputTokens: number | null = null;
  if (finished && finished.count > 0) {
    meanOutputTokens = finished.sum / finished.count;
  } else {
    const generated = counterDelta(next.generationTokens, prev.generationTokens);
    const successes = counterDelta(next.requestSuccess, prev.requestSuccess);
    if (generated !== null && successes) meanOutputTokens = generated / successes;
  }
  if (meanOutputTokens === null || !(meanOutputTokens > 1)) return null;
  const meanInputTokens = prompt / ttft.count;
  if (!(meanInputTokens > 0)) return null;
  return {
    rate: ttft.count / periodS,
    meanTtftMs: (ttft.sum / ttft.count) * 1_000,
    meanItlMs: (itl.sum / itl.count) * 1_000,
    meanInputTokens,
    meanOutputTokens,
    requests: ttft.count,
    periodS,
  };
}
