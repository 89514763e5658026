import { ADMISSION_POLICIES } from './scheduler-settings.js';
import { DEFAULT_SETTINGS, type SchedulerSettings } from './scheduler-settings-values.js';
import { isSheddablePriority } from './slo.js';

/**
 * Admission policies (llm-d / Gateway API Inference Extension semantics): a
 * pure decision per request from its priority and the pool's load signals.
 * Chosen by `admission.policy`; always-admit is the default.
 *
 * - always-admit: admit everything (flow control still queues, caps and TTLs).
 * - tier-shed: under overload — the most loaded pod (maxPodLoad) is above
 *   `tierShedThreshold` — reject classes whose priority is below
 *   `tierShedMinPriority` (at its default only standard and critical pass).
 * - gaie-legacy: reject sheddable requests (priority < 0) while pool
 *   saturation >= 1.0.
 * - reject-all: reject everything (maintenance, drills).
 */
export { ADMISSION_POLICIES };
export type AdmissionPolicy = (typeof ADMISSION_POLICIES)[number];

/** The `admission.*` settings (scheduler-settings.ts: each key's meaning and range). */
export type AdmissionConfig = SchedulerSettings['admission'];

export const DEFAULT_ADMISSION: Readonly<AdmissionConfig> = DEFAULT_SETTINGS.admission;

export interface PoolSignals {
  /** maxPodLoad(): the busiest pod's in-flight or scraped running + waiting. */
  maxPodLoad: number;
  /** poolSaturation(): >= 1 is saturated. */
  saturation: number;
}

export type AdmissionDecision =
  | { admit: true }
  | { admit: false; reason: 'shed_by_tier' | 'saturated' | 'rejected_by_policy' };

/**
 * The policy's verdict for a request of `priority` (its band). The scheduler evaluates the
 * same rules inside its enqueue (lua/includes/admission.lua), reading a signal only when the
 * policy needs it: always-admit reads nothing, tier-shed reads pod loads only for priorities
 * below tierShedMinPriority, gaie-legacy computes saturation only for sheddable priorities.
 */
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
      if (priority < config.tierShedMinPriority && signals.maxPodLoad > config.tierShedThreshold) {
        return { admit: false, reason: 'shed_by_tier' };
      }
      return { admit: true };
    case 'gaie-legacy':
      if (isSheddablePriority(priority) && signals.saturation >= 1)
        return { admit: false, reason: 'saturated' };
      return { admit: true };
  }
}

/** One pod's vLLM gauges as the leader last scraped them, stamped with the store clock. */
export interface ScrapedLoad {
  /** vllm:num_requests_waiting. */
  waiting: number;
  /** vllm:num_requests_running. */
  running: number;
  /** vllm:kv_cache_usage_perc, 0..1. */
  kvUtilization: number;
  /** Store time of the scrape (ms, the clock `nowMs` is on). */
  scrapedAtMs: number;
}

/**
 * What the load signals are computed from, per pod. A scheduler `PodSnapshot` is one, so
 * `poolSaturation(snapshot.pods, snapshot.nowMs, settings.saturation)` works as it is.
 */
export interface PodLoad {
  healthy: boolean;
  /** Requests the gateways hold in flight on the pod (the scheduler's own count). */
  inflight: number;
  /** The last scrape, null when the pod was never scraped. */
  load: ScrapedLoad | null;
}

/**
 * The `saturation.*` settings: queueDepthThreshold (waiting requests per pod at which the
 * queue component reaches 1.0), kvCacheUtilThreshold (KV-cache use at which the memory
 * component does) and staleMs (a scrape older than this counts as saturated).
 */
export type SaturationConfig = SchedulerSettings['saturation'];

export const DEFAULT_SATURATION: Readonly<SaturationConfig> = DEFAULT_SETTINGS.saturation;

/** Whether a pod's scrape may be used at `nowMs` (not older than staleMs). */
export function isFreshLoad(
  load: ScrapedLoad | null | undefined,
  nowMs: number,
  staleMs: number,
): load is ScrapedLoad {
  return load !== null && load !== undefined && nowMs - load.scrapedAtMs <= staleMs;
}

/**
 * Requests queued at a pod, current between scrapes: the scraped waiting count, or the
 * gateways' own in-flight count on the pod less the scraped running count when that is
 * larger (what was dispatched since the scrape and is not running yet is queued there or
 * on its way). Without it a gate that opens on one scrape would let a whole budget through
 * before the next scrape shows the pods' queues.
 */
function queuedAtPod(pod: PodLoad, load: ScrapedLoad): number {
  return Math.max(load.waiting, pod.inflight - load.running);
}

/**
 * Pool saturation = mean over HEALTHY pods of max(queued / queueDepthThreshold,
 * kvUtilization / kvCacheUtilThreshold), queued as queuedAtPod. A healthy pod never scraped, or whose scrape is
 * older than staleMs, counts as 1.0 (unknown is treated as full, so gating fails safe); no
 * healthy pod at all is 1.0. Pods are summed in the order given (the scheduler passes them
 * by name, as lua/includes/saturation.lua does, so both get the same floating-point result).
 */
export function poolSaturation(
  pods: readonly PodLoad[],
  nowMs: number,
  config: SaturationConfig = DEFAULT_SATURATION,
): number {
  let sum = 0;
  let count = 0;
  for (const pod of pods) {
    if (!pod.healthy) continue;
    count += 1;
    sum += podPressure(pod, nowMs, config) ?? 1;
  }
  return count === 0 ? 1 : sum / count;
}

/**
 * One pod's term of poolSaturation: max(queued / queueDepthThreshold, kvUtilization /
 * kvCacheUtilThreshold) from a fresh scrape, undefined without one (podPressure in
 * lua/includes/saturation.lua). Prefix-aware pod choice weighs it against a cache hit.
 */
export function podPressure(
  pod: PodLoad,
  nowMs: number,
  config: SaturationConfig,
): number | undefined {
  if (!isFreshLoad(pod.load, nowMs, config.staleMs)) return undefined;
  return Math.max(
    queuedAtPod(pod, pod.load) / config.queueDepthThreshold,
    pod.load.kvUtilization / config.kvCacheUtilThreshold,
  );
}

/**
 * The newest scrape time among healthy pods, or undefined when none was ever scraped.
 * In-flight eviction for a closed saturation gate evicts at most once per new scrape.
 */
export function newestScrapeMs(pods: readonly PodLoad[]): number | undefined {
  let newest: number | undefined;
  for (const pod of pods) {
    if (!pod.healthy || !pod.load) continue;
    if (newest === undefined || pod.load.scrapedAtMs > newest) newest = pod.load.scrapedAtMs;
  }
  return newest;
}

/**
 * Tier-shed's overload signal: max over pods (all of them) of max(the gateways' in-flight on
 * the pod, scraped running + waiting when the scrape is fresh). The in-flight count keeps the
 * signal live between scrapes and when scraping is off.
 */
export function maxPodLoad(pods: readonly PodLoad[], nowMs: number, staleMs: number): number {
  let max = 0;
  for (const pod of pods) {
    let load = pod.inflight;
    if (isFreshLoad(pod.load, nowMs, staleMs)) {
      load = Math.max(load, pod.load.running + pod.load.waiting);
    }
    max = Math.max(max, load);
  }
  return max;
}
