import { createHash } from 'node:crypto';
import type { FairgateConfig, RedisSectionConfig } from '@fairgate/config';
import {
  SCHEDULER_SETTINGS,
  type SettingSpec,
  setSettingAt,
  settingValueOfYaml,
} from '@fairgate/core';
import {
  createRedisConnection,
  LocalScheduler,
  RedisScheduler,
  type RedisTopology,
  type Scheduler,
  type PodConfig as SchedulerPod,
  type SchedulerSettingsInput,
  type TenantConfig as SchedulerTenant,
} from '@fairgate/scheduler';

export interface CreatedScheduler {
  /** The scheduler itself: LocalScheduler, or RedisScheduler without any resilience. */
  scheduler: Scheduler;
  mode: 'redis' | 'embedded';
  /** Closes the scheduler and the connection made for it. */
  close(): Promise<void>;
  /**
   * Whether the connection is up right now (always for the embedded scheduler). It drops
   * the moment the socket closes (Redis killed, a failover), before any call times out.
   */
  connected(): boolean;
}

/** Where `redis:` says the pool's Redis is. */
export function redisTopology(redis: RedisSectionConfig): RedisTopology {
  const password = redis.password ? { password: redis.password } : {};
  if (redis.sentinels && redis.sentinel_name) {
    return { kind: 'sentinel', sentinels: redis.sentinels, name: redis.sentinel_name, ...password };
  }
  if (redis.cluster_nodes) return { kind: 'cluster', nodes: redis.cluster_nodes, ...password };
  return { kind: 'standalone', url: redis.url as string };
}

/**
 * The embedded LocalScheduler without `redis:`; RedisScheduler (shared by all
 * replicas) with it. The Redis connection does not use ioredis
 * auto-pipelining: it would join the calls of one event-loop tick in one write,
 * but it keeps one pipeline in flight per connection, so a request's enqueue
 * (its critical path) waits behind whatever pipeline is out, and it builds a
 * Pipeline per batch. Measured with loadtest/bench/overhead.ts (wrk, same run):
 * off, c=1 added p50 0.51 ms and c=16 3,112 req/s; on, 0.63 ms and 3,323 req/s
 * (0.58 ms / 3,231 with releases on a second connection). The latency at low
 * load is what a gateway is judged by; at c=16 both settings clear 3,000 req/s.
 * Every command fails within redis.command_timeout_ms while Redis is away
 * (createRedisConnection), and connection errors go to `onConnectionError`.
 */
export function createScheduler(
  config: FairgateConfig,
  onConnectionError: (error: Error) => void = () => {},
): CreatedScheduler {
  if (!config.redis) {
    const scheduler = new LocalScheduler();
    return { scheduler, mode: 'embedded', close: () => scheduler.close(), connected: () => true };
  }
  const connection = createRedisConnection({
    topology: redisTopology(config.redis),
    commandTimeoutMs: config.redis.command_timeout_ms,
    onError: onConnectionError,
  });
  const scheduler = new RedisScheduler({ pool: config.pool, connection });
  return {
    scheduler,
    mode: 'redis',
    close: async () => {
      await scheduler.close();
      connection.disconnect();
    },
    connected: () => connection.status === 'ready',
  };
}

/**
 * The pool settings the config file sets: every row of the settings table with a YAML key
 * (packages/core/src/scheduler-settings.ts), read from the file's top-level sections and
 * turned into the scheduler's form (ms, booleans, bands). Settings without a key keep their
 * defaults.
 */
export function schedulerSettings(config: FairgateConfig): SchedulerSettingsInput {
  const settings: SchedulerSettingsInput = {};
  const sections = config as unknown as Record<string, Record<string, unknown>>;
  for (const spec of SCHEDULER_SETTINGS as readonly SettingSpec[]) {
    if (spec.yaml === null) continue;
    const [section, key, inner] = spec.yaml.split('.') as [string, string, string | undefined];
    const held = sections[section]?.[key];
    const value =
      inner === undefined ? held : (held as Record<string, unknown> | undefined)?.[inner];
    const converted = settingValueOfYaml(spec, value, (name) => config.slo_classes[name]);
    setSettingAt(settings, spec.path, converted);
  }
  return settings;
}

export function schedulerTenants(config: FairgateConfig): SchedulerTenant[] {
  return config.tenants.map((t) => ({
    id: t.id,
    weight: t.weight,
    queueMax: t.queue_max,
    maxConcurrent: t.quotas.max_concurrent ?? null,
    maxKvBlocks: t.quotas.max_kv_blocks ?? null,
    tokenBucket: t.token_bucket
      ? { capacity: t.token_bucket.capacity, refillPerSecond: t.token_bucket.refill_per_second }
      : null,
    limits: t.limits
      ? {
          tokensPerDay: t.limits.tokens_per_day ?? null,
          tokensPerMonth: t.limits.tokens_per_month ?? null,
          requestsPerMinute: t.limits.requests_per_minute ?? null,
        }
      : null,
  }));
}

export function schedulerPods(
  config: FairgateConfig,
  healthy: (pod: string) => boolean,
): SchedulerPod[] {
  return config.pods.map((p) => ({ name: p.name, cap: p.cap, healthy: healthy(p.name) }));
}

/** A short digest of the config file's contents that the pool's settings came from. */
export function configHash(config: FairgateConfig): string {
  return createHash('sha256').update(JSON.stringify(config)).digest('hex').slice(0, 16);
}

/**
 * Writes settings, tenants and pods of `config` into the (shared) scheduler state. `replace`
 * (start, reload) writes the settings always; `seed` (restoring state Redis lost) only when
 * the pool has none, so the first replica to restore them wins and replicas with another
 * config version do not overwrite each other back and forth.
 */
export async function applyConfig(
  scheduler: Scheduler,
  config: FairgateConfig,
  healthy: (pod: string) => boolean,
  mode: 'replace' | 'seed' = 'replace',
): Promise<void> {
  // Settings last: their presence is what tells every replica the pool is configured, so
  // none sees settings without the tenants and pods (a rejection for no pod, say).
  await scheduler.upsertPods(schedulerPods(config, healthy));
  await scheduler.upsertTenants(schedulerTenants(config));
  await scheduler.configure(schedulerSettings(config), { mode, configHash: configHash(config) });
}
