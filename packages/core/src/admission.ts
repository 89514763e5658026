/**
 * Admission policies (llm-d / Gateway API Inference Extension semantics): a
 * pure decision per request from its priority and the pool's load signals.
 * Chosen by `admission.policy`; always-admit is the default.
 *
 * - always-admit: admit everything (flow control still queues, caps and TTLs).
 * - tier-shed: under overload — the most loaded pod's in-flight + waiting is
 *   above `tierShedThreshold` — reject classes whose priority is below
 *   `tierShedMinPriority` (default 3: only standard and critical pass).
 * - gaie-legacy: reject sheddable requests (priority < 0) while pool
 *   saturation >= 1.0.
 * - reject-all: reject everything (maintenance, drills).
 */
export const ADMISSION_POLICIES = [
  'always-admit',
  'tier-shed',
  'gaie-legacy',
  'reject-all',
] as const;
export type AdmissionPolicy = (typeof ADMISSION_POLICIES)[number];

export interface AdmissionConfig {
  policy: AdmissionPolicy;
  /** tier-shed: per-pod in-flight + waiting above which the pool counts as overloaded. */
  tierShedThreshold: number;
  /** tier-shed: lowest priority still admitted under overload. */
  tierShedMinPriority: number;
}

export const DEFAULT_ADMISSION: Readonly<AdmissionConfig> = {
  policy: 'always-admit',
  tierShedThreshold: 8,
  tierShedMinPriority: 3,
};

export interface PoolSignals {
  /** max over pods of (in-flight + waiting) as last scraped. */
  maxPodLoad: number;
  /** Pool saturation (see poolSaturation); >= 1 is saturated. */
  saturation: number;
}

export type AdmissionDecision =
  | { admit: true }
  | { admit: false; reason: 'shed_by_tier' | 'saturated' | 'rejected_by_policy' };

export function decideAdmission(
  config: AdmissionConfig,
  priority: number,
  signals: PoolSignals,
): AdmissionDecision {
  switch (config.policy) {
    case 'always-admit':
      return { admit: true };
    case 'reject-all':
      return { admit: false, reason: 'rejected_by_policy' };
    case 'tier-shed':
      if (signals.maxPodLoad > config.tierShedThreshold && priority < config.tierShedMinPriority) {
        return { admit: false, reason: 'shed_by_tier' };
      }
      return { admit: true };
    case 'gaie-legacy':
      if (priority < 0 && signals.saturation >= 1) return { admit: false, reason: 'saturated' };
      return { admit: true };
  }
}

/** One pod's scraped vLLM gauges. */
export interface PodLoad {
  waiting: number;
  running: number;
  /** vllm:kv_cache_usage_perc, 0..1. */
  kvUtilization: number;
  /** When the scrape was taken (ms, same clock as `nowMs`). */
  scrapedAtMs: number;
}

export interface SaturationConfig {
  queueDepthThreshold: number;
  kvCacheUtilThreshold: number;
  /** A scrape older than this counts as saturated (1.0). */
  staleMs: number;
}

export const DEFAULT_SATURATION: Readonly<SaturationConfig> = {
  queueDepthThreshold: 5,
  kvCacheUtilThreshold: 0.8,
  staleMs: 1_000,
};

/**
 * Pool saturation = mean over pods of max(waiting / queueDepthThreshold,
 * kvUtilization / kvCacheUtilThreshold). A pod with no scrape or a stale one
 * counts as 1.0 (unknown is treated as full, so gating fails safe). No pods at
 * all is 1.0.
 */
export function poolSaturation(
  pods: ReadonlyArray<PodLoad | undefined>,
  nowMs: number,
  config: SaturationConfig = DEFAULT_SATURATION,
): number {
  if (pods.length === 0) return 1;
  let sum = 0;
  for (const pod of pods) {
    if (!pod || nowMs - pod.scrapedAtMs > config.staleMs) {
      sum += 1;
      continue;
    }
    sum += Math.max(
      pod.waiting / config.queueDepthThreshold,
      pod.kvUtilization / config.kvCacheUtilThreshold,
    );
  }
  return sum / pods.length;
}

/** max over pods of running + waiting (tier-shed's overload signal); stale pods count as 0. */
export function maxPodLoad(
  pods: ReadonlyArray<PodLoad | undefined>,
  nowMs: number,
  staleMs: number,
): number {
  let max = 0;
  for (const pod of pods) {
    if (!pod || nowMs - pod.scrapedAtMs > staleMs) continue;
    max = Math.max(max, pod.running + pod.waiting);
  }
  return max;
}
