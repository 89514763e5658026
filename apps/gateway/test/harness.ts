import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { apiKeyDigest } from '@fairgate/config';
import { stringify } from 'yaml';

/** Development keys of the test tenants (only digests go into configs). */
export const KEYS = {
  paying: 'test-key-paying',
  free: 'test-key-free',
  admin: 'test-admin',
} as const;

export interface TestConfigOptions {
  pods: Array<{ name: string; url: string; cap?: number }>;
  redisUrl?: string;
  pool?: string;
  budget?: number;
  tenants?: Array<Record<string, unknown>>;
  scheduler?: Record<string, unknown>;
  upstream?: Record<string, unknown>;
  limits?: Record<string, unknown>;
}

/** Writes a gateway config to a temp file and returns its path. */
export function writeTestConfig(options: TestConfigOptions): string {
  const config = {
    pool: options.pool ?? `t${Math.random().toString(36).slice(2, 10)}`,
    listen: { host: '127.0.0.1', port: 0 },
    ...(options.redisUrl ? { redis: { url: options.redisUrl } } : {}),
    admin: { token_sha256: apiKeyDigest(KEYS.admin) },
    tenants: options.tenants ?? [
      {
        id: 'paying',
        api_key_sha256: [apiKeyDigest(KEYS.paying)],
        weight: 2,
        default_class: 'standard',
        max_class: 'critical',
      },
      { id: 'free', api_key_sha256: [apiKeyDigest(KEYS.free)], weight: 1, default_class: 'batch' },
    ],
    pods: options.pods,
    scheduler: { budget: options.budget ?? 16, ...options.scheduler },
    upstream: { health_interval_ms: 200, ...options.upstream },
    ...(options.limits ? { limits: options.limits } : {}),
  };
  const dir = mkdtempSync(join(tmpdir(), 'fairgate-gw-'));
  const path = join(dir, 'gateway.yaml');
  writeFileSync(path, stringify(config));
  return path;
}

/** Number of generation requests a sim has received so far. */
export async function simRequestCount(simUrl: string): Promise<number> {
  const response = await fetch(`${simUrl}/debug/last-traceparent`);
  const body = (await response.json()) as { requests_received?: number };
  if (typeof body.requests_received !== 'number')
    throw new Error('sim does not report requests_received');
  return body.requests_received;
}
