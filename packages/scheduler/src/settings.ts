import {
  assertInteger,
  assertValidName,
  FAIRNESS_POLICIES,
  type FairnessPolicy,
  type PodName,
  type QueueOrder,
  type TenantId,
} from '@fairgate/core';

/** Pool-wide scheduler settings, shared by all replicas through the store. */
export interface SchedulerSettings {
  /** Fairness across tenants inside a band. */
  fairness: FairnessPolicy;
  /** Order inside a tenant's queue: arrival, or earliest deadline first. */
  order: QueueOrder;
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
}

export const DEFAULT_SETTINGS: Readonly<SchedulerSettings> = {
  fairness: 'drr',
  order: 'fifo',
  quantum: 1,
  bandCapacity: 1_000,
  maxQueueDepth: 10_000,
  queueTtlMs: 1_000,
  leaseTtlMs: 10_000,
  maxGrantsPerPass: 64,
  janitorBatch: 100,
  initialBudget: 32,
};

const ORDERS: readonly QueueOrder[] = ['fifo', 'slo-deadline'];
const DAY_MS = 86_400_000;

/** Fills defaults and validates; a bad value throws an error naming its key. */
export function resolveSettings(input: Partial<SchedulerSettings> = {}): SchedulerSettings {
  const settings = { ...DEFAULT_SETTINGS, ...withoutUndefined(input) };
  if (!FAIRNESS_POLICIES.includes(settings.fairness)) {
    throw new TypeError(
      `scheduler.fairness must be one of ${FAIRNESS_POLICIES.join(', ')}, got ${JSON.stringify(settings.fairness)}`,
    );
  }
  if (!ORDERS.includes(settings.order)) {
    throw new TypeError(
      `scheduler.order must be one of ${ORDERS.join(', ')}, got ${JSON.stringify(settings.order)}`,
    );
  }
  assertInteger('scheduler.quantum', settings.quantum, 1, 1_000_000);
  assertInteger('scheduler.bandCapacity', settings.bandCapacity, 0);
  assertInteger('scheduler.maxQueueDepth', settings.maxQueueDepth, 0);
  assertInteger('scheduler.queueTtlMs', settings.queueTtlMs, 1, DAY_MS);
  assertInteger('scheduler.leaseTtlMs', settings.leaseTtlMs, 1, DAY_MS);
  assertInteger('scheduler.maxGrantsPerPass', settings.maxGrantsPerPass, 1, 10_000);
  assertInteger('scheduler.janitorBatch', settings.janitorBatch, 1, 10_000);
  assertInteger('scheduler.initialBudget', settings.initialBudget, 0);
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
}

export interface ResolvedTenantConfig {
  id: TenantId;
  weight: number;
  queueMax: number | null;
  maxConcurrent: number | null;
  maxKvBlocks: number | null;
}

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
  return {
    id: tenant.id,
    weight,
    queueMax: limit('queueMax', tenant.queueMax),
    maxConcurrent: limit('maxConcurrent', tenant.maxConcurrent),
    maxKvBlocks: limit('maxKvBlocks', tenant.maxKvBlocks),
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
