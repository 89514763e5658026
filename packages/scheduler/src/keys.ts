/**
 * The pool keyspace (docs/architecture.md, *Shared state*). Every key starts with the hash tag
 * `{fg:<pool>}` so one pool lives in one Redis Cluster slot; only the pool name is inside
 * the braces, never user text. Data-dependent keys (req:<id>, q:<band>:<tenant>, ...) are
 * built inside the scripts from the *Prefix names below. Engine scripts take the tag as their
 * one KEY and derive the names from it (ENGINE_KEY_NAMES); the others take theirs as KEYS.
 */
const POOL_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;

export function assertValidPool(pool: string): void {
  if (!POOL_PATTERN.test(pool)) {
    throw new TypeError(
      `pool must be 1-64 characters of [A-Za-z0-9._-], got ${JSON.stringify(pool)}`,
    );
  }
}

export interface PoolKeys {
  /** `{fg:<pool>}:`, the start of every key of the pool. */
  readonly tag: string;
  readonly config: string;
  readonly ctl: string;
  readonly pods: string;
  /** Set: the pods discovery listed (lua/syncPods-7.lua), apart from the config's. */
  readonly discovered: string;
  readonly bands: string;
  readonly deficit: string;
  readonly service: string;
  readonly leases: string;
  readonly queueDeadlines: string;
  readonly replicas: string;
  readonly stats: string;
  readonly tenants: string;
  readonly leader: string;
  readonly leaderEpoch: string;
  readonly leaderData: string;
  readonly evictable: string;
  readonly sheddable: string;
  readonly sheddableByTenantPrefix: string;
  readonly requestPrefix: string;
  readonly queuePrefix: string;
  readonly ringPrefix: string;
  readonly tenantPrefix: string;
  readonly noticesPrefix: string;
  readonly waitingByReplicaPrefix: string;
  readonly latencyPrefix: string;
  /** usage:<hour> hashes: what the pods reported at release, per tenant, kind and model. */
  readonly usagePrefix: string;
  /** pxc:<pod> / pxo:<pod> sets: the current / previous generation of a pod's prefix index. */
  readonly prefixCurrentPrefix: string;
  readonly prefixPreviousPrefix: string;
  /** lora:<pod> hashes: the LoRA adapters a pod holds (lua/includes/lora.lua). */
  readonly adaptersPrefix: string;
}

export function poolKeys(pool: string): PoolKeys {
  assertValidPool(pool);
  const tag = `{fg:${pool}}:`;
  return {
    tag,
    config: `${tag}config`,
    ctl: `${tag}ctl`,
    pods: `${tag}pods`,
    discovered: `${tag}discovered`,
    bands: `${tag}bands`,
    deficit: `${tag}deficit`,
    service: `${tag}vtc`,
    leases: `${tag}leases`,
    queueDeadlines: `${tag}qttl`,
    replicas: `${tag}replicas`,
    stats: `${tag}stats`,
    tenants: `${tag}tenants`,
    leader: `${tag}leader`,
    leaderEpoch: `${tag}leader:epoch`,
    leaderData: `${tag}leaderData`,
    evictable: `${tag}evictable`,
    sheddable: `${tag}sheddable`,
    sheddableByTenantPrefix: `${tag}sheddable:`,
    requestPrefix: `${tag}req:`,
    queuePrefix: `${tag}q:`,
    ringPrefix: `${tag}band:`,
    tenantPrefix: `${tag}tenant:`,
    noticesPrefix: `${tag}grants:`,
    waitingByReplicaPrefix: `${tag}queued:`,
    latencyPrefix: `${tag}lat:`,
    usagePrefix: `${tag}usage:`,
    prefixCurrentPrefix: `${tag}pxc:`,
    prefixPreviousPrefix: `${tag}pxo:`,
    adaptersPrefix: `${tag}lora:`,
  };
}

/**
 * The names an engine script derives from its one KEY, the pool's tag, in the order of
 * lua/includes/engineKeys.lua (a test compares the two: same names, same suffixes).
 */
export const ENGINE_KEY_NAMES = [
  'config',
  'ctl',
  'pods',
  'bands',
  'deficit',
  'service',
  'leases',
  'queueDeadlines',
  'replicas',
  'stats',
  'requestPrefix',
  'queuePrefix',
  'ringPrefix',
  'tenantPrefix',
  'noticesPrefix',
  'waitingByReplicaPrefix',
  'evictable',
  'sheddable',
  'sheddableByTenantPrefix',
  'prefixCurrentPrefix',
  'prefixPreviousPrefix',
  'adaptersPrefix',
] as const satisfies readonly (keyof PoolKeys)[];

/** Key families that exist only while a request (or a replica's notices) is live. */
export const PER_REQUEST_PREFIXES = [
  'requestPrefix',
  'queuePrefix',
  'noticesPrefix',
  'waitingByReplicaPrefix',
  'sheddableByTenantPrefix',
] as const satisfies readonly (keyof PoolKeys)[];

/** Pool-wide indexes of live requests: empty whenever nothing is waiting or in flight. */
export const PER_REQUEST_INDEXES = [
  'leases',
  'queueDeadlines',
  'evictable',
  'sheddable',
] as const satisfies readonly (keyof PoolKeys)[];
