/**
 * Every scheduler and pool setting, once: where it sits in the scheduler's settings, its
 * field in the pool's Redis config hash, its key in the YAML file, its default, its
 * validation and its type. Everything else derives from this table:
 * - the settings type and DEFAULT_SETTINGS (scheduler-settings-values.ts);
 * - the zod schema of these keys (packages/config/src/scheduler-settings-schema.ts);
 * - resolveSettings' validation, configure's one encoded argument and decodeSettings
 *   (packages/scheduler/src/settings.ts, settings-hash.ts);
 * - the Lua reader's field list and fallbacks (packages/scheduler/scripts/build-lua.mjs
 *   emits them as the include `generated/settings`);
 * - the table in docs/config.md (its test renders the rows from here).
 *
 * This module imports nothing: the Lua build loads it from source.
 *
 * Redis field names never change: during a rolling deploy two versions share one hash.
 */

export const FAIRNESS_POLICIES = ['drr', 'round-robin', 'global-strict'] as const;
export const FAIRNESS_UNITS = ['requests', 'tokens'] as const;
export const DISPATCH_ORDERS = ['priority', 'fifo', 'slo-deadline'] as const;
export const ADMISSION_POLICIES = [
  'always-admit',
  'tier-shed',
  'gaie-legacy',
  'reject-all',
] as const;

const DAY_MS = 86_400_000;
/** Largest band magnitude (a priority of slo_classes is within [-100, 100]). */
export const MAX_BAND = 1_000;

/**
 * A setting's type and the values it accepts. Its hash encoding follows from the kind:
 * enum as is, int and number in decimal, flag '1' | '0', ceilings as a JSON object.
 */
export type SettingCheck =
  | { readonly kind: 'enum'; readonly values: readonly string[] }
  | { readonly kind: 'int'; readonly min: number; readonly max?: number }
  | {
      readonly kind: 'number';
      readonly min?: number;
      readonly above?: number;
      readonly max?: number;
    }
  | { readonly kind: 'flag' }
  /** Band (an integer in [-MAX_BAND, MAX_BAND], as a string) -> ceiling >= 0. */
  | { readonly kind: 'ceilings' };

/**
 * How the YAML file writes a setting the scheduler holds otherwise: `seconds` (the file in
 * whole seconds, the scheduler in ms), `on-off` ('on' | 'off' for a boolean), `by-class`
 * (ceilings keyed by SLO class name instead of band).
 */
export type YamlForm = 'seconds' | 'on-off' | 'by-class';

export interface SettingSpec {
  /** Where it sits in the settings: `quantum`, or `group.key` inside a group. */
  readonly path: string;
  /** Its field in the pool's config hash (`{fg:<pool>}:config`). */
  readonly field: string;
  /** `section.key` in the YAML file; null when the file has no key for it. */
  readonly yaml: string | null;
  readonly yamlForm?: YamlForm;
  /** As the scheduler holds it (ms, booleans, bands). */
  readonly default: string | number | boolean | Readonly<Record<string, number>>;
  readonly check: SettingCheck;
  /**
   * A stricter lower bound for the YAML file than the scheduler's own (for a ceiling: of
   * each ceiling): a file that sets 0 there would refuse every request, a mistake rather
   * than a setting, while tests drive the scheduler with 0.
   */
  readonly fileBound?: { readonly min?: number; readonly above?: number };
  /** What it does, for docs/config.md. */
  readonly doc: string;
}

export const SCHEDULER_SETTINGS = [
  {
    path: 'fairness',
    field: 'fairness',
    yaml: 'scheduler.fairness',
    default: 'drr',
    check: { kind: 'enum', values: FAIRNESS_POLICIES },
    doc: 'fairness across tenants inside a band (ignored by `fifo`)',
  },
  {
    path: 'dispatchOrder',
    field: 'dispatchOrder',
    yaml: 'scheduler.dispatch_order',
    default: 'priority',
    check: { kind: 'enum', values: DISPATCH_ORDERS },
    doc: '`priority` (highest band first, fairness inside it, arrival order per tenant), `slo-deadline` (the same, earliest deadline first per tenant) or `fifo` (globally earliest arrival: the plain-FIFO baseline)',
  },
  {
    path: 'quantum',
    field: 'quantum',
    yaml: 'scheduler.quantum',
    default: 1,
    check: { kind: 'int', min: 1, max: 1_000_000 },
    doc: 'DRR quantum (credit per turn = weight x quantum)',
  },
  {
    path: 'fairnessUnit',
    field: 'fairnessUnit',
    yaml: 'scheduler.fairness_unit',
    default: 'requests',
    check: { kind: 'enum', values: FAIRNESS_UNITS },
    doc: 'what fairness counts: `requests` (DRR, each request costs 1) or `tokens` (service counters in weighted tokens, the smallest served first: docs/scheduler.md, *Fairness in tokens*); `tokens` needs `fairness: drr` and an order other than `fifo`',
  },
  {
    path: 'tokenWeights.input',
    field: 'tokenWeightInput',
    yaml: 'scheduler.token_weights.input',
    default: 1,
    check: { kind: 'int', min: 1, max: 1_000 },
    doc: 'with `fairness_unit: tokens`, what one input (prompt) token costs',
  },
  {
    path: 'tokenWeights.output',
    field: 'tokenWeightOutput',
    yaml: 'scheduler.token_weights.output',
    default: 2,
    check: { kind: 'int', min: 1, max: 1_000 },
    doc: 'with `fairness_unit: tokens`, what one output (generated) token costs',
  },
  {
    path: 'bandCapacity',
    field: 'bandCapacity',
    yaml: 'scheduler.band_capacity',
    default: 5_000,
    check: { kind: 'int', min: 0 },
    fileBound: { min: 1 },
    doc: 'waiting limit per priority band (429 `band_full`)',
  },
  {
    path: 'maxQueueDepth',
    field: 'maxQueueDepth',
    yaml: 'scheduler.max_queue_depth',
    default: 10_000,
    check: { kind: 'int', min: 0 },
    fileBound: { min: 1 },
    doc: 'pool-wide waiting limit (429 `global_queue_full`)',
  },
  {
    path: 'queueTtlMs',
    field: 'queueTtlMs',
    yaml: 'scheduler.queue_ttl_ms',
    default: 1_000,
    check: { kind: 'int', min: 1, max: DAY_MS },
    doc: 'longest wait for a grant (429 `queue_ttl` after it)',
  },
  {
    path: 'leaseTtlMs',
    field: 'leaseTtlMs',
    yaml: 'scheduler.lease_ttl_ms',
    default: 30_000,
    check: { kind: 'int', min: 1, max: DAY_MS },
    doc: 'lease of a granted request / liveness of a replica; heartbeats extend both',
  },
  {
    path: 'maxGrantsPerPass',
    field: 'maxGrantsPerPass',
    yaml: null,
    default: 64,
    check: { kind: 'int', min: 1, max: 10_000 },
    doc: 'most grants one dispatch pass makes (bounds a script run)',
  },
  {
    path: 'janitorBatch',
    field: 'janitorBatch',
    yaml: null,
    default: 100,
    check: { kind: 'int', min: 1, max: 10_000 },
    doc: 'most entries each janitor part reclaims per call',
  },
  {
    path: 'initialBudget',
    field: 'initialBudget',
    yaml: 'scheduler.budget',
    default: 64,
    check: { kind: 'int', min: 0 },
    fileBound: { min: 1 },
    doc: "initial global concurrency budget (the controller's leader replaces it with cap x healthy pods on its first tick)",
  },
  {
    path: 'admission.policy',
    field: 'admissionPolicy',
    yaml: 'admission.policy',
    default: 'always-admit',
    check: { kind: 'enum', values: ADMISSION_POLICIES },
    doc: 'admission policy at enqueue (docs/admission.md)',
  },
  {
    path: 'admission.tierShedThreshold',
    field: 'tierShedThreshold',
    yaml: 'admission.tier_shed_threshold',
    default: 8,
    check: { kind: 'int', min: 0, max: 1_000_000_000 },
    doc: "tier-shed: overloaded when some pod's in-flight + waiting exceeds this",
  },
  {
    path: 'admission.tierShedMinPriority',
    field: 'tierShedMinPriority',
    yaml: 'admission.tier_shed_min_priority',
    default: 3,
    check: { kind: 'int', min: -100, max: 100 },
    doc: 'tier-shed: under overload, lower priorities get 429 `shed_by_tier`',
  },
  {
    path: 'saturation.queueDepthThreshold',
    field: 'queueDepthThreshold',
    yaml: 'saturation.queue_depth_threshold',
    default: 5,
    check: { kind: 'number', above: 0 },
    doc: 'requests queued at a pod (scraped waiting, or in flight − scraped running) at which it counts as saturated',
  },
  {
    path: 'saturation.kvCacheUtilThreshold',
    field: 'kvCacheUtilThreshold',
    yaml: 'saturation.kv_cache_util_threshold',
    default: 0.8,
    check: { kind: 'number', above: 0, max: 1 },
    doc: 'KV-cache use at which a pod counts as saturated',
  },
  {
    path: 'saturation.staleMs',
    field: 'staleMs',
    yaml: 'saturation.stale_ms',
    default: 1_000,
    check: { kind: 'int', min: 1, max: DAY_MS },
    doc: 'a pod scrape older than this counts as saturation 1.0',
  },
  {
    path: 'gating.enabled',
    field: 'gatingEnabled',
    yaml: 'saturation.gating',
    default: false,
    check: { kind: 'flag' },
    doc: 'dispatch a band only while pool saturation is below its ceiling',
  },
  {
    path: 'gating.defaultCeiling',
    field: 'gatingDefaultCeiling',
    yaml: null,
    default: 1,
    check: { kind: 'number', min: 0 },
    doc: 'gate ceiling of a band without its own',
  },
  {
    path: 'gating.bandCeilings',
    field: 'gatingBandCeilings',
    yaml: 'saturation.band_ceilings',
    yamlForm: 'by-class',
    default: {},
    check: { kind: 'ceilings' },
    fileBound: { above: 0 },
    doc: 'per-class gate ceiling (the file keys it by class, the scheduler by band)',
  },
  {
    path: 'queueShedding',
    field: 'queueShedding',
    yaml: 'scheduler.queue_shedding',
    default: false,
    check: { kind: 'flag' },
    doc: "a full queue removes the newest waiting request of the lowest sheddable band below the arrival's (429 `queue_shed`) instead of refusing the arrival",
  },
  {
    path: 'inflightEviction',
    field: 'inflightEviction',
    yaml: 'scheduler.inflight_eviction',
    default: false,
    check: { kind: 'flag' },
    doc: 'a non-sheddable request that cannot be dispatched evicts the newest in-flight request of the lowest sheddable band (429 `evicted`, or an SSE error event once streaming)',
  },
  {
    path: 'prefix.enabled',
    field: 'prefixEnabled',
    yaml: 'routing.prefix',
    yamlForm: 'on-off',
    default: false,
    check: { kind: 'flag' },
    doc: "`on`: a granted request goes to the pod that recently served the most of its prompt's first blocks, weighed against load (docs/routing.md); `off`: the least-loaded pod",
  },
  {
    path: 'prefix.weight',
    field: 'prefixWeight',
    yaml: 'routing.prefix_weight',
    default: 0.5,
    check: { kind: 'number', min: 0, max: 1_000 },
    doc: "what a request's whole prefix on a pod is worth, in units of that pod's cap in flight: the pod holding it wins while it carries less than `prefix_weight` x cap more than another",
  },
  {
    path: 'prefix.pressureWeight',
    field: 'prefixPressureWeight',
    yaml: 'routing.pressure_weight',
    default: 0.25,
    check: { kind: 'number', min: 0, max: 1_000 },
    doc: "weight of a pod's scraped pressure (max(queued / `saturation.queue_depth_threshold`, KV use / `saturation.kv_cache_util_threshold`); 0 without a fresh scrape)",
  },
  {
    path: 'prefix.entriesPerPod',
    field: 'prefixEntriesPerPod',
    yaml: 'routing.index_entries_per_pod',
    default: 0,
    check: { kind: 'int', min: 0, max: 100_000_000 },
    doc: "0: each pod's index is sized from the pod, at most as many block hashes as its KV cache holds blocks, in two generations of half each (`vllm:cache_config_info`; 32,768 each while the pod does not say); N > 0 overrides: at most N per pod, two generations of half each (an approximate LRU). The index's Redis memory is bounded by pods x twice a generation (docs/routing.md)",
  },
  {
    path: 'prefix.ttlMs',
    field: 'prefixTtlMs',
    yaml: 'routing.index_ttl_s',
    yamlForm: 'seconds',
    default: 3_600_000,
    check: { kind: 'int', min: 1_000, max: 30 * DAY_MS },
    doc: "a generation of a pod's index is dropped this long after its first entry",
  },
  {
    path: 'lora.enabled',
    field: 'loraEnabled',
    yaml: 'routing.lora',
    yamlForm: 'on-off',
    default: true,
    check: { kind: 'flag' },
    doc: '`on`: a request for a LoRA adapter goes only to the pods that hold it (their `/v1/models` and `vllm:lora_requests_info`), the least-loaded of them with room, and waits without holding up others while none of them has room (docs/routing.md, *LoRA adapters*); `off`: adapters are ignored in the choice',
  },
  {
    path: 'lora.load',
    field: 'loraLoad',
    yaml: 'routing.lora_load',
    yamlForm: 'on-off',
    default: false,
    check: { kind: 'flag' },
    doc: '`on`: a request for an adapter no pod holds goes to the least-loaded pod with room and a free adapter slot (adapters held < `max_lora`), and the gateway loads it there (`POST /v1/load_lora_adapter`, path from `routing.lora_paths` or a pod that listed it) before the forward; `off`: it goes to the least-loaded pod',
  },
] as const satisfies readonly SettingSpec[];
