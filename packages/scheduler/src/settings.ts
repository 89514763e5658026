import {
  ADMISSION_POLICIES,
  type AdmissionConfig,
  assertInteger,
  assertValidName,
  DEFAULT_ADMISSION,
  DEFAULT_PREFIX_ROUTING,
  DEFAULT_SATURATION,
  DISPATCH_ORDERS,
  FAIRNESS_POLICIES,
  type FairnessPolicy,
  type PodName,
  type PrefixRoutingConfig,
  type QueueOrder,
  type SaturationConfig,
  type TenantId,
} from '@fairgate/core';

/** Saturation gating of dispatch: a band dispatches only while saturation < its ceiling. */
export interface GatingConfig {
  enabled: boolean;
  /** Band (as a string, e.g. '-1') -> ceiling; bands not listed use defaultCeiling. */
  bandCeilings: Record<string, number>;
  defaultCeiling: number;
}

export const DEFAULT_GATING: Readonly<GatingConfig> = {
  enabled: false,
  bandCeilings: {},
  defaultCeiling: 1,
};

/** Pool-wide scheduler settings, shared by all replicas through the store. */
export interface SchedulerSettings {
  /** Fairness across tenants inside a band (ignored by dispatchOrder fifo). */
  fairness: FairnessPolicy;
  /** priority (bands, then fairness, then arrival), slo-deadline, or global fifo. */
  dispatchOrder: QueueOrder;
  /** DRR quantum: a tenant earns weight x quantum cost units per turn. */
  quantum: number;
  /** Most requests waiting in one priority band. */
  bandCapacity: number;
  /** Most requests waiting in the whole pool. */
  maxQueueDepth: number;
  /** Default queue TTL: a request waiting longer leaves with outcome expired. */
  queueTtlMs: number;
  /** Lease TTL of a granted request, and liveness TTL of a replica; heartbeats extend both. */
  leaseTtlMs: number;
  /** Upper bound on grants made by one dispatch pass (bounds a script's run time). */
  maxGrantsPerPass: number;
  /** Upper bound on entries each janitor part reclaims per call. */
  janitorBatch: number;
  /** Budget (pool-wide in-flight limit) used until a controller sets one. */
  initialBudget: number;
  /** Admission policy applied at enqueue. */
  admission: AdmissionConfig;
  /** How pool saturation is computed from the scraped pod loads. */
  saturation: SaturationConfig;
  /** Saturation gating of dispatch, per band. */
  gating: GatingConfig;
  /** A full tenant or global queue sheds a lower-band sheddable waiting request. */
  queueShedding: boolean;
  /** A non-sheddable request that cannot be dispatched evicts a sheddable in-flight one. */
  inflightEviction: boolean;
  /** Prefix-aware pod choice and each pod's index of the prompt blocks it served. */
  prefix: PrefixRoutingConfig;
}

/** What configure() accepts: any subset, nested groups merged with their defaults. */
export type SchedulerSettingsInput = Partial<
  Omit<SchedulerSettings, 'admission' | 'saturation' | 'gating' | 'prefix'>
> & {
  admission?: Partial<AdmissionConfig>;
  saturation?: Partial<SaturationConfig>;
  gating?: Partial<GatingConfig>;
  prefix?: Partial<PrefixRoutingConfig>;
};

export const DEFAULT_SETTINGS: Readonly<SchedulerSettings> = {
  fairness: 'drr',
  dispatchOrder: 'priority',
  quantum: 1,
  bandCapacity: 1_000,
  maxQueueDepth: 10_000,
  queueTtlMs: 1_000,
  leaseTtlMs: 10_000,
  maxGrantsPerPass: 64,
  janitorBatch: 100,
  initialBudget: 32,
  admission: DEFAULT_ADMISSION,
  saturation: DEFAULT_SATURATION,
  gating: DEFAULT_GATING,
  queueShedding: false,
  inflightEviction: false,
  prefix: DEFAULT_PREFIX_ROUTING,
};

const DAY_MS = 86_400_000;
const MAX_BAND = 1_000;
const SETTING_KEYS = Object.keys(DEFAULT_SETTINGS) as (keyof SchedulerSettings)[];

/**
 * Fills defaults and validates; a bad value throws an error naming its key. Unknown keys are
 * dropped, except the replaced `order`, which throws so a stale caller fails loudly.
 */
export function resolveSettings(input: SchedulerSettingsInput = {}): SchedulerSettings {
  if ((input as { order?: unknown }).order !== undefined) {
    throw new TypeError('scheduler.order was replaced by scheduler.dispatchOrder');
  }
  const given = withoutUndefined(input) as SchedulerSettingsInput;
  const settings = { ...DEFAULT_SETTINGS } as SchedulerSettings;
  for (const key of SETTING_KEYS) {
    if (given[key] !== undefined)
      (settings as unknown as Record<string, unknown>)[key] = given[key];
  }
  settings.admission = group('admission', DEFAULT_ADMISSION, given.admission);
  settings.saturation = group('saturation', DEFAULT_SATURATION, given.saturation);
  settings.gating = group('gating', DEFAULT_GATING, given.gating);
  settings.prefix = group('prefix', DEFAULT_PREFIX_ROUTING, given.prefix);
  oneOf('scheduler.fairness', settings.fairness, FAIRNESS_POLICIES);
  oneOf('scheduler.dispatchOrder', settings.dispatchOrder, DISPATCH_ORDERS);
  assertInteger('scheduler.quantum', settings.quantum, 1, 1_000_000);
  assertInteger('scheduler.bandCapacity', settings.bandCapacity, 0);
  assertInteger('scheduler.maxQueueDepth', settings.maxQueueDepth, 0);
  assertInteger('scheduler.queueTtlMs', settings.queueTtlMs, 1, DAY_MS);
  assertInteger('scheduler.leaseTtlMs', settings.leaseTtlMs, 1, DAY_MS);
  assertInteger('scheduler.maxGrantsPerPass', settings.maxGrantsPerPass, 1, 10_000);
  assertInteger('scheduler.janitorBatch', settings.janitorBatch, 1, 10_000);
  assertInteger('scheduler.initialBudget', settings.initialBudget, 0);

  const { admission, saturation, gating } = settings;
  oneOf('scheduler.admission.policy', admission.policy, ADMISSION_POLICIES);
  assertInteger('scheduler.admission.tierShedThreshold', admission.tierShedThreshold, 0, 1e9);
  assertInteger(
    'scheduler.admission.tierShedMinPriority',
    admission.tierShedMinPriority,
    -MAX_BAND,
    MAX_BAND,
  );
  assertNumber('scheduler.saturation.queueDepthThreshold', saturation.queueDepthThreshold, {
    above: 0,
  });
  assertNumber('scheduler.saturation.kvCacheUtilThreshold', saturation.kvCacheUtilThreshold, {
    above: 0,
    max: 1,
  });
  assertInteger('scheduler.saturation.staleMs', saturation.staleMs, 1, DAY_MS);
  assertBoolean('scheduler.gating.enabled', gating.enabled);
  assertNumber('scheduler.gating.defaultCeiling', gating.defaultCeiling, { min: 0 });
  const ceilings = gating.bandCeilings as unknown;
  if (typeof ceilings !== 'object' || ceilings === null || Array.isArray(ceilings)) {
    throw new TypeError('scheduler.gating.bandCeilings must be an object of band -> ceiling');
  }
  const bandCeilings: Record<string, number> = {};
  for (const [band, ceiling] of Object.entries(ceilings as Record<string, unknown>)) {
    const number = Number(band);
    if (!/^-?\d+$/.test(band.trim()) || !Number.isInteger(number) || Math.abs(number) > MAX_BAND) {
      throw new TypeError(
        `scheduler.gating.bandCeilings keys must be integer bands in [-${MAX_BAND}, ${MAX_BAND}], got ${JSON.stringify(band)}`,
      );
    }
    assertNumber(`scheduler.gating.bandCeilings.${band}`, ceiling, { min: 0 });
    bandCeilings[String(number)] = ceiling as number;
  }
  settings.gating = { ...gating, bandCeilings };
  assertBoolean('scheduler.queueShedding', settings.queueShedding);
  assertBoolean('scheduler.inflightEviction', settings.inflightEviction);
  const { prefix } = settings;
  assertBoolean('scheduler.prefix.enabled', prefix.enabled);
  assertNumber('scheduler.prefix.weight', prefix.weight, { min: 0, max: 1_000 });
  assertNumber('scheduler.prefix.pressureWeight', prefix.pressureWeight, { min: 0, max: 1_000 });
  assertInteger('scheduler.prefix.entriesPerPod', prefix.entriesPerPod, 2, 100_000_000);
  assertInteger('scheduler.prefix.ttlMs', prefix.ttlMs, 1_000, 30 * DAY_MS);
  return settings;
}

function group<T extends object>(name: string, defaults: Readonly<T>, given: unknown): T {
  if (given === undefined) return { ...defaults };
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw new TypeError(`scheduler.${name} must be an object, got ${JSON.stringify(given)}`);
  }
  const merged = { ...defaults } as Record<string, unknown>;
  for (const key of Object.keys(defaults)) {
    const value = (given as Record<string, unknown>)[key];
    if (value !== undefined) merged[key] = value;
  }
  return merged as T;
}

function oneOf<T extends string>(key: string, value: unknown, allowed: readonly T[]): void {
  if (!(allowed as readonly unknown[]).includes(value)) {
    throw new TypeError(
      `${key} must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}`,
    );
  }
}

function assertBoolean(key: string, value: unknown): void {
  if (typeof value !== 'boolean') {
    throw new TypeError(`${key} must be a boolean, got ${JSON.stringify(value)}`);
  }
}

function assertNumber(
  key: string,
  value: unknown,
  range: { min?: number; above?: number; max?: number },
): void {
  const ok =
    typeof value === 'number' &&
    Number.isFinite(value) &&
    (range.min === undefined || value >= range.min) &&
    (range.above === undefined || value > range.above) &&
    (range.max === undefined || value <= range.max);
  if (!ok) {
    const low =
      range.above !== undefined ? `(${range.above}` : `[${range.min ?? Number.NEGATIVE_INFINITY}`;
    const high = range.max !== undefined ? `${range.max}]` : 'Infinity)';
    throw new TypeError(`${key} must be a finite number in ${low}, ${high}, got ${String(value)}`);
  }
}

/** A tenant's share and limits. `null` (or absent) limits are unlimited. */
export interface TenantConfig {
  id: TenantId;
  /** DRR weight, integer >= 1 (default 1). */
  weight?: number;
  /** Most requests of this tenant waiting at once. */
  queueMax?: number | null;
  /** Most requests of this tenant in flight at once (0 rejects everything). */
  maxConcurrent?: number | null;
  /** Most KV-cache blocks held by this tenant's in-flight requests. */
  maxKvBlocks?: number | null;
  /**
   * Token bucket taken at enqueue (cost = EnqueueRequest.tokens), trued up at release.
   * Integers: capacity >= 1 (also the burst), refillPerSecond >= 0. null = no bucket.
   */
  tokenBucket?: TokenBucketConfig | null;
}

export interface TokenBucketConfig {
  capacity: number;
  refillPerSecond: number;
}

export interface ResolvedTenantConfig {
  id: TenantId;
  weight: number;
  queueMax: number | null;
  maxConcurrent: number | null;
  maxKvBlocks: number | null;
  tokenBucket: TokenBucketConfig | null;
}

/** Largest token count anywhere (bucket capacity, refill, request tokens): exact in Lua. */
export const MAX_TOKENS = 1_000_000_000;

export function resolveTenant(tenant: TenantConfig): ResolvedTenantConfig {
  assertValidName('tenant.id', tenant.id);
  const field = (name: string) => `tenant ${tenant.id}: ${name}`;
  const limit = (name: string, value: number | null | undefined): number | null => {
    if (value === null || value === undefined) return null;
    assertInteger(field(name), value, 0);
    return value;
  };
  const weight = tenant.weight ?? 1;
  assertInteger(field('weight'), weight, 1, 1_000_000);
  let tokenBucket: TokenBucketConfig | null = null;
  if (tenant.tokenBucket !== null && tenant.tokenBucket !== undefined) {
    const { capacity, refillPerSecond } = tenant.tokenBucket;
    assertInteger(field('tokenBucket.capacity'), capacity, 1, MAX_TOKENS);
    assertInteger(field('tokenBucket.refillPerSecond'), refillPerSecond, 0, MAX_TOKENS);
    tokenBucket = { capacity, refillPerSecond };
  }
  return {
    id: tenant.id,
    weight,
    queueMax: limit('queueMax', tenant.queueMax),
    maxConcurrent: limit('maxConcurrent', tenant.maxConcurrent),
    maxKvBlocks: limit('maxKvBlocks', tenant.maxKvBlocks),
    tokenBucket,
  };
}

/** An inference pod: the most requests it may run at once, and whether it takes any. */
export interface PodConfig {
  name: PodName;
  cap: number;
  healthy?: boolean;
}

export function resolvePod(pod: PodConfig): Required<PodConfig> {
  assertValidName('pod.name', pod.name);
  assertInteger(`pod ${pod.name}: cap`, pod.cap, 0);
  return { name: pod.name, cap: pod.cap, healthy: pod.healthy ?? true };
}

function withoutUndefined<T extends object>(input: T): Partial<T> {
  return Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)) as Partial<T>;
}
