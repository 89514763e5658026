/**
 * Queueing model of one vLLM pod (the workload-variant-autoscaler's analyzer,
 * made consistent): continuous batching where every iteration costs
 *   T(n) = alpha + n * delta,  delta = beta*(i+o)/(o+1) + gamma*(i + o/2)
 * for a batch of n requests with i input tokens and o decode iterations on
 * average. A request's prefill iteration takes prefill(n) = T(n) + (beta+gamma)*i
 * and each decode step decode(n) = T(n) + beta + gamma*(i + o/2), where n counts
 * the OTHER requests of the batch (its own work is the explicit term).
 *
 * Requests in the pod form a state-dependent birth-death chain on k = 0..N+K
 * (N = max batch, K = queue): arrivals at rate lambda (refused when full),
 * completions at mu(k) = n / (prefill(n-1) + o*decode(n-1)) = n / ((o+1) T(n))
 * with n = min(k,N): the batch serves n requests at once, each needing one
 * prefill and o decodes.
 *
 * One definition of each output is used everywhere (the filter and sizing):
 *   meanBatch  n_bar = E[min(k, N)]
 *   waitMs     = E[queue length] / throughput     (Little's law)
 *   residualMs = what is left of the iteration in progress at arrival
 *   ttftMs     = waitMs + residualMs + prefill(n_bar)
 *   itlMs      = token mean of decode(b - 1) over the batch distribution
 * (A Poisson arrival sees the time-average batch n_bar; an iteration of b requests gives
 * b tokens that gap.) `latencies()` is that definition at any occupancy: the chain's
 * (sizing) or the measured one (the filter). At light load n_bar -> 0 and TTFT -> alpha +
 * (beta+gamma)*i, ITL -> alpha + beta + gamma*(i + o/2), and T(n_bar) follows the
 * closed form alpha/(1-rho) with rho = lambda*(o+1)*delta.
 *
 * In vLLM (and fairgate-sim) the prefill iteration emits the first output token,
 * so a request with m output tokens has o = m - 1 decode iterations: callers
 * pass Workload.outputTokens = m - 1 (toWorkload in capacity.ts does).
 * Times are in milliseconds, rates in requests per second.
 */
export interface PodParams {
  /** Fixed cost of one engine iteration, ms. */
  alpha: number;
  /** Compute per processed token, ms. */
  beta: number;
  /** KV-cache read per token in the context, ms. */
  gamma: number;
}

export interface Workload {
  /** Mean input (prompt) tokens per request. */
  inputTokens: number;
  /** Mean decode iterations per request, o (vLLM: output tokens - 1), >= 0. */
  outputTokens: number;
  /** Max batch (vLLM max-num-seqs). */
  maxBatch: number;
  /** Queue positions beyond the batch (the chain's K). */
  maxQueue: number;
}

export interface ModelResult {
  /** Completed requests per second (arrivals minus refusals). */
  throughput: number;
  /** Fraction of arrivals refused because batch and queue were full. */
  blocking: number;
  meanBatch: number;
  /** Mean requests waiting for a seat, E[max(0, k - N)]. */
  meanQueue: number;
  /** Queueing wait for a seat in the batch (Little's law on the queue), ms. */
  waitMs: number;
  /** Mean remainder of the iteration in progress at arrival, ms. */
  residualMs: number;
  ttftMs: number;
  itlMs: number;
  /** Iteration time at the mean batch, ms. */
  iterationMs: number;
  /** The iteration a token sees (ITL without its own decode work), ms. */
  decodeIterationMs: number;
  /** lambda * (o+1) * delta: the closed form's utilisation. */
  rho: number;
}

export function marginalWork(p: PodParams, w: Workload): number {
  const i = w.inputTokens;
  const o = w.outputTokens;
  return (p.beta * (i + o)) / (o + 1) + p.gamma * (i + o / 2);
}

export function iterationMs(p: PodParams, w: Workload, n: number): number {
  return p.alpha + n * marginalWork(p, w);
}

export function prefillMs(p: PodParams, w: Workload, n: number): number {
  return iterationMs(p, w, n) + (p.beta + p.gamma) * w.inputTokens;
}

export function decodeMs(p: PodParams, w: Workload, n: number): number {
  return iterationMs(p, w, n) + p.beta + p.gamma * (w.inputTokens + w.outputTokens / 2);
}

/** Completion rate (requests per second) with n requests in the batch. */
export function serviceRate(p: PodParams, w: Workload, n: number): number {
  if (n <= 0) return 0;
  const batch = Math.min(n, w.maxBatch);
  // A request in a batch of n shares each iteration with n - 1 others: its own work is the
  // explicit prefill/decode term, so prefill(n-1) + o decode(n-1) = (o+1) T(n) (but for
  // gamma o/2), the mean-field n = lambda (o+1) T of the closed form. prefill(n) + o decode(n) would count
  // its own work twice (the model then over-predicts the batch by 8-15% against the sim).
  const others = batch - 1;
  const perRequestMs = prefillMs(p, w, others) + w.outputTokens * decodeMs(p, w, others);
  return (batch / perRequestMs) * 1_000;
}

/**
 * Mean remaining time of the iteration in progress when a request arrives: an
 * engine admits new requests only between iterations. The engine is busy with
 * probability 1 - p0, and then runs n_b = n_bar / (1 - p0) requests on average.
 * A Poisson arrival lands in an iteration picked in proportion to its length, so
 * the mean residual is E[T^2] / (2 E[T]) (renewal theory). Iteration lengths
 * vary mostly with the prefills they carry: each request is in prefill for one of
 * its o+1 iterations, so an iteration carries m = n_b/(o+1) prefills on average,
 * taken as Poisson, each costing (beta+gamma)*i; hence
 * E[T^2] = T(n_b)^2 + m ((beta+gamma) i)^2.
 */
export function residualMs(p: PodParams, w: Workload, meanBatch: number, busy: number): number {
  if (!(busy > 0)) return 0;
  const batch = meanBatch / busy;
  const mean = iterationMs(p, w, batch);
  const prefills = batch / (w.outputTokens + 1);
  const prefillWork = (p.beta + p.gamma) * w.inputTokens;
  return busy * (mean / 2 + (prefills * prefillWork * prefillWork) / (2 * mean));
}

/**
 * What a pod's latencies depend on besides its parameters: how full it is. The chain below
 * predicts it from an arrival rate (sizing); the leader measures it by sampling the pod's
 * running and waiting gauges (the filter), which stays true when the gateway holds the
 * queue and the pod sees a capped, closed system instead of Poisson arrivals.
 */
export interface Occupancy {
  /** batch[b]: the fraction of time with b requests in the batch (sums to 1). */
  batch: readonly number[];
  /** Time-average requests waiting for a seat, E[max(0, k - N)]. */
  meanQueue: number;
  /** Requests started per second. */
  throughput: number;
}

/** Time-average requests in the batch. */
export function meanBatchOf(o: Occupancy): number {
  let mean = 0;
  for (let b = 1; b < o.batch.length; b++) mean += b * o.batch[b]!;
  return mean;
}

export interface Latencies {
  /** Queueing wait for a seat in the batch (Little's law on the queue), ms. */
  waitMs: number;
  /** Mean remainder of the iteration in progress at arrival, ms. */
  residualMs: number;
  /** Arrival to first scheduling: measured (vllm:request_queue_time_seconds) or wait + residual. */
  queueMs: number;
  ttftMs: number;
  itlMs: number;
  /** Iteration time at the mean batch, ms. */
  iterationMs: number;
  /** The iteration a token sees on average: ITL without the request's own decode work. */
  decodeIterationMs: number;
  meanBatch: number;
}

/**
 * Mean ITL over tokens. An iteration of b requests lasts decode(b - 1) and gives b tokens
 * that gap; iterations in state b happen at rate batch[b] / decode(b - 1) per unit time, so
 *   ITL = sum_b batch[b] b / sum_b batch[b] b / decode(b - 1),
 * which weighs the busy moments of a period by the tokens they emit (a mean batch would
 * not: in a period whose load falls, its busy start emits the slow tokens).
 */
function tokenMeanItl(p: PodParams, w: Workload, o: Occupancy): number {
  const batch = o.batch;
  let tokens = 0;
  let iterations = 0;
  for (let b = 1; b < batch.length; b++) {
    const weight = batch[b]! * b;
    if (!(weight > 0)) continue;
    tokens += weight;
    iterations += weight / decodeMs(p, w, b - 1);
  }
  return iterations > 0 ? tokens / iterations : decodeMs(p, w, 0);
}

/**
 * The model's latencies at a given occupancy, the one definition the filter and sizing share:
 *   queueMs = measured queue time, else waitMs + residualMs
 *   ttftMs  = queueMs + prefill(n_bar)     (an arrival sees the time-average batch)
 *   itlMs   = the token mean of decode(b - 1) over the batch distribution
 */
export function latencies(p: PodParams, w: Workload, o: Occupancy, queueMs?: number): Latencies {
  const meanBatch = meanBatchOf(o);
  const busy = 1 - (o.batch[0] ?? 0);
  const waitMs = o.throughput > 0 ? (o.meanQueue / o.throughput) * 1_000 : 0;
  const residual = residualMs(p, w, meanBatch, busy);
  const queue = queueMs ?? waitMs + residual;
  const itlMs = tokenMeanItl(p, w, o);
  return {
    waitMs,
    residualMs: residual,
    queueMs: queue,
    ttftMs: queue + prefillMs(p, w, meanBatch),
    itlMs,
    iterationMs: iterationMs(p, w, meanBatch),
    decodeIterationMs: itlMs - (decodeMs(p, w, 0) - p.alpha),
    meanBatch,
  };
}

/** The chain's stationary occupancy at arrival rate `lambda` (requests/s), and its blocking. */
export function chainOccupancy(
  p: PodParams,
  w: Workload,
  lambda: number,
): Occupancy & { blocking: number } {
  const states = w.maxBatch + w.maxQueue;
  // Unnormalised probabilities in log space: products of lambda/mu can overflow.
  const logWeights = new Float64Array(states + 1);
  let maxLog = 0;
  for (let k = 1; k <= states; k++) {
    logWeights[k] = logWeights[k - 1]! + Math.log(lambda) - Math.log(serviceRate(p, w, k));
    if (logWeights[k]! > maxLog) maxLog = logWeights[k]!;
  }
  let total = 0;
  const probs = new Float64Array(states + 1);
  for (let k = 0; k <= states; k++) {
    probs[k] = Math.exp(logWeights[k]! - maxLog);
    total += probs[k]!;
  }
  const batch = new Array<number>(w.maxBatch + 1).fill(0);
  let meanQueue = 0;
  for (let k = 0; k <= states; k++) {
    probs[k] = probs[k]! / total;
    batch[Math.min(k, w.maxBatch)]! += probs[k]!;
    meanQueue += Math.max(0, k - w.maxBatch) * probs[k]!;
  }
  const blocking = probs[states]!;
  return { batch, meanQueue, throughput: lambda * (1 - blocking), blocking };
}

/** Stationary analysis of the chain at arrival rate `lambda` (requests/s). */
export function analyze(p: PodParams, w: Workload, lambda: number): ModelResult {
  const occupancy = chainOccupancy(p, w, lambda);
  const l = latencies(p, w, occupancy);
  return {
    throughput: occupancy.throughput,
    blocking: occupancy.blocking,
    meanBatch: l.meanBatch,
    meanQueue: occupancy.meanQueue,
    waitMs: l.waitMs,
    residualMs: l.residualMs,
    ttftMs: l.ttftMs,
    itlMs: l.itlMs,
    iterationMs: l.iterationMs,
    decodeIterationMs: l.decodeIterationMs,
    rho: (lambda / 1_000) * (w.outputTokens + 1) * marginalWork(p, w),
  };
}

export interface LatencyTargets {
  ttftMs: number;
  itlMs: number;
}

/**
 * lambda*: the largest arrival rate (requests/s) at which the model's TTFT and
 * ITL both meet the targets, by bisection over [mu(1)*0.001, mu(N)*0.999]
 * (both latencies grow with the rate). 0 when even the lowest rate misses.
 */
export function maxRate(
  p: PodParams,
  w: Workload,
  targets: LatencyTargets,
  iterations = 60,
): number {
  const meets = (lambda: number) => {
    const r = analyze(p, w, lambda);
    return r.ttftMs <= targets.ttftMs && r.itlMs <= targets.itlMs;
  };
  let low = serviceRate(p, w, 1) * 0.001;
  let high = serviceRate(p, w, w.maxBatch) * 0.999;
  if (!meets(low)) return 0;
  if (meets(high)) return high;
  for (let n = 0; n < iterations; n++) {
    const mid = (low + high) / 2;
    if (meets(mid)) low = mid;
    else high = mid;
  }
  return low;
}

/** Pods needed for `totalRate` requests/s when one pod takes `perPodRate`. */
export function desiredPods(totalRate: number, perPodRate: number): number {
  if (totalRate <= 0) return 0;
  if (perPodRate <= 0) return Number.POSITIVE_INFINITY;
  return Math.ceil(totalRate / perPodRate);
}
