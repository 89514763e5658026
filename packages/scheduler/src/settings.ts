import {
  type AdmissionConfig,
  assertInteger,
  assertValidName,
  canonicalCeilings,
  checkSetting,
  DEFAULT_SETTINGS,
  defaultSettings,
  fairnessUnitConflict,
  type PodName,
  type PrefixRoutingConfig,
  type SaturationConfig,
  SCHEDULER_SETTINGS,
  type SchedulerSettings,
  SETTING_GROUPS,
  setSettingAt,
  settingAt,
  type TenantId,
  type TenantLimits,
} from '@fairgate/core';

/**
 * The scheduler's settings. Each one's meaning, default, range and Redis field are in the
 * table of packages/core/src/scheduler-settings.ts, which the type and the defaults derive
 * from.
 */
export { DEFAULT_SETTINGS, type SchedulerSettings };

/** Saturation gating of dispatch: a band dispatches only while saturation < its ceiling. */
export type GatingConfig = SchedulerSettings['gating'];

/** What configure() accepts: any subset, nested groups merged with their defaults. */
export type SchedulerSettingsInput = Partial<
  Omit<SchedulerSettings, 'admission' | 'saturation' | 'gating' | 'prefix'>
> & {
  admission?: Partial<AdmissionConfig>;
  saturation?: Partial<SaturationConfig>;
  gating?: Partial<GatingConfig>;
  prefix?: Partial<PrefixRoutingConfig>;
};

/**
 * Fills defaults and validates; a bad value throws an error naming its key. Unknown keys are
 * dropped, except the replaced `order`, which throws so a stale caller fails loudly.
 */
export function resolveSettings(input: SchedulerSettingsInput = {}): SchedulerSettings {
  if ((input as { order?: unknown }).order !== undefined) {
    throw new TypeError('scheduler.order was replaced by scheduler.dispatchOrder');
  }
  for (const name of SETTING_GROUPS) {
    const given = (input as Record<string, unknown>)[name];
    if (
      given !== undefined &&
      (typeof given !== 'object' || given === null || Array.isArray(given))
    ) {
      throw new TypeError(`scheduler.${name} must be an object, got ${JSON.stringify(given)}`);
    }
  }
  const settings = defaultSettings();
  for (const spec of SCHEDULER_SETTINGS) {
    const given = settingAt(input, spec.path);
    if (given === undefined) continue;
    checkSetting(`scheduler.${spec.path}`, spec.check, given);
    setSettingAt(
      settings,
      spec.path,
      spec.check.kind === 'ceilings' ? canonicalCeilings(given as Record<string, number>) : given,
    );
  }
  const conflict = fairnessUnitConflict(settings);
  if (conflict) throw new TypeError(`scheduler.fairnessUnit: ${conflict}`);
  return settings;
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
  /**
   * Budgets and rates over UTC windows (@fairgate/core tenant-limits): integers >= 1, absent
   * or null = none. null = no limits.
   */
  limits?: Partial<TenantLimits> | null;
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
  limits: TenantLimits;
}

/** Largest token count anywhere (bucket capacity, refill, request tokens): exact in Lua. */
export const MAX_TOKENS = 1_000_000_000;
/** Largest budget (tokens per day or month): counters stay exact integers in Lua. */
export const MAX_BUDGET_TOKENS = 1_000_000_000_000;

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
  const windowLimit = (name: keyof TenantLimits, max: number): number | null => {
    const value = tenant.limits?.[name];
    if (value === null || value === undefined) return null;
    assertInteger(field(`limits.${name}`), value, 1, max);
    return value;
  };
  return {
    id: tenant.id,
    weight,
    queueMax: limit('queueMax', tenant.queueMax),
    maxConcurrent: limit('maxConcurrent', tenant.maxConcurrent),
    maxKvBlocks: limit('maxKvBlocks', tenant.maxKvBlocks),
    tokenBucket,
    limits: {
      tokensPerDay: windowLimit('tokensPerDay', MAX_BUDGET_TOKENS),
      tokensPerMonth: windowLimit('tokensPerMonth', MAX_BUDGET_TOKENS),
      requestsPerMinute: windowLimit('requestsPerMinute', MAX_TOKENS),
    },
  };
}

/** An inference pod: the most requests it may run at once, and whether it takes any. */
export interface PodConfig {
  name: PodName;
  cap: number;
  healthy?: boolean;
}

/** A replica's health check of a pod (setPodHealth). */
export interface PodHealth {
  name: PodName;
  healthy: boolean;
}

export function resolvePod(pod: PodConfig): Required<PodConfig> {
  assertValidName('pod.name', pod.name);
  assertInteger(`pod ${pod.name}: cap`, pod.cap, 0);
  return { name: pod.name, cap: pod.cap, healthy: pod.healthy ?? true };
}
