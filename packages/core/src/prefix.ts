import { DEFAULT_SETTINGS, type SchedulerSettings } from './scheduler-settings-values.js';

/**
 * Prefix-aware pod choice (docs/routing.md): a request carries the chained hashes of its
 * prompt's first blocks; each pod has an index of the block hashes it recently served. A
 * pod's score weighs the share of the request's blocks it holds (its leading run: chained
 * hashes match only as a prefix) against its load. The same arithmetic, in the same order,
 * runs in lua/includes/prefix.lua, so both scheduler implementations choose alike.
 */
/**
 * The `prefix.*` settings: enabled (off: the least-loaded pod, as without prefixes), weight
 * (what a request's whole prefix on a pod is worth, in units of that pod's whole cap in
 * flight: a pod holding the prefix wins while it carries less than `weight` x cap more than
 * the others), pressureWeight (of the pod's scraped pressure: its saturation term, 0 without
 * a fresh scrape), entriesPerPod (prefixGenerationSize: two generations, an approximate LRU) and
 * ttlMs (a generation is dropped this long after its first entry).
 */
export type PrefixRoutingConfig = SchedulerSettings['prefix'];

export const DEFAULT_PREFIX_ROUTING: Readonly<PrefixRoutingConfig> = DEFAULT_SETTINGS.prefix;

/** Most block hashes a request may carry (bounds the work of one pod choice). */
export const MAX_PREFIX_BLOCKS = 512;

/** A generation of a pod that does not say how much its KV cache holds (entriesPerPod 0). */
export const DEFAULT_PREFIX_GENERATION = 32_768;

/**
 * Entries of one generation of a pod's index: the index holds at most two of them (plus one
 * request's blocks). entriesPerPod N > 0: N / 2 for every pod; 0: half the blocks the pod's
 * KV cache holds (`podCapacity`, from its scrape), so the index holds no more than the pod
 * can; DEFAULT_PREFIX_GENERATION until it says.
 */
export function prefixGenerationSize(
  config: PrefixRoutingConfig,
  podCapacity: number | null,
): number {
  if (config.entriesPerPod > 0) return Math.ceil(config.entriesPerPod / 2);
  return podCapacity === null ? DEFAULT_PREFIX_GENERATION : Math.ceil(podCapacity / 2);
}

/**
 * A pod's score for a request of `total` blocks of which it holds the first `matched`:
 * weight x matched / total - inflight / cap - pressureWeight x pressure. Higher is better.
 */
export function prefixScore(
  config: PrefixRoutingConfig,
  matched: number,
  total: number,
  inflight: number,
  cap: number,
  pressure: number,
): number {
  return (config.weight * matched) / total - inflight / cap - config.pressureWeight * pressure;
}

/** How many of `hashes`, from the first, `holds` answers yes for. */
export function leadingRun(hashes: readonly string[], holds: (hash: string) => boolean): number {
  let run = 0;
  while (run < hashes.length && holds(hashes[run] as string)) run += 1;
  return run;
}
