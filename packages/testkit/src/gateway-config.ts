import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';

/** Development API keys of the test tenants (only their digests go into configs). */
export const TEST_KEYS = {
  paying: 'test-key-paying',
  free: 'test-key-free',
  extra: 'test-key-extra',
  admin: 'test-admin',
} as const;

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

export interface GatewayConfigOptions {
  /** The pods of a single-pool config (give `pools` instead for several pools). */
  pods?: Array<{ name: string; url: string; cap?: number }>;
  /** `pools:` entries as written in the file (name, models, pods, per-pool sections). */
  pools?: Array<Record<string, unknown>>;
  redisUrl?: string;
  /** Further keys of the `redis:` section (on_outage, command_timeout_ms, sentinels...). */
  redis?: Record<string, unknown>;
  /** Redis pool name; random by default so tests sharing a Redis never collide. */
  pool?: string;
  budget?: number;
  /** Full tenant entries; default: paying (weight 2) and free (weight 1). */
  tenants?: Array<Record<string, unknown>>;
  scheduler?: Record<string, unknown>;
  upstream?: Record<string, unknown>;
  limits?: Record<string, unknown>;
  /** Further top-level sections, as written in the file (admission, saturation, controller...). */
  sections?: Record<string, unknown>;
}

/** The default test tenants: paying (weight 2, standard..critical) and free (weight 1, batch). */
export function defaultTestTenants(): Array<Record<string, unknown>> {
  return [
    {
      id: 'paying',
      api_key_sha256: [sha256Hex(TEST_KEYS.paying)],
      weight: 2,
      default_class: 'standard',
      max_class: 'critical',
    },
    { id: 'free', api_key_sha256: [sha256Hex(TEST_KEYS.free)], weight: 1, default_class: 'batch' },
  ];
}

/** Writes a gateway config (YAML) to a fresh temp directory and returns its path. */
export function writeGatewayConfig(options: GatewayConfigOptions): string {
  const config = {
    ...(options.pools
      ? { pools: options.pools }
      : {
          pool: options.pool ?? `t${Math.random().toString(36).slice(2, 10)}`,
          pods: options.pods,
        }),
    listen: { host: '127.0.0.1', port: 0 },
    ...(options.redisUrl || options.redis
      ? { redis: { ...(options.redisUrl ? { url: options.redisUrl } : {}), ...options.redis } }
      : {}),
    admin: { token_sha256: sha256Hex(TEST_KEYS.admin) },
    tenants: options.tenants ?? defaultTestTenants(),
    scheduler: { budget: options.budget ?? 16, ...options.scheduler },
    upstream: { health_interval_ms: 200, ...options.upstream },
    ...(options.limits ? { limits: options.limits } : {}),
    ...options.sections,
  };
  const dir = mkdtempSync(join(tmpdir(), 'fairgate-gw-'));
  const path = join(dir, 'gateway.yaml');
  writeFileSync(path, stringify(config));
  return path;
}
