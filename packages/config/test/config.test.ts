import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import {
  apiKeyDigest,
  ConfigError,
  ConfigWatcher,
  ModelRoutes,
  parseConfig,
  parseConfigText,
  poolView,
} from '../src/index.js';
import { formatKey, loadConfigFile } from '../src/load.js';

const examplesDir = new URL('../../../examples/', import.meta.url).pathname;
const digest = apiKeyDigest('k1');

function minimal(): Record<string, unknown> {
  return {
    tenants: [{ id: 'a', api_key_sha256: [digest] }],
    pods: [{ name: 'p', url: 'http://127.0.0.1:8001' }],
  };
}

/** A valid `auth.jwt` section (a JWKS by URL). */
function jwt(): Record<string, unknown> {
  return {
    jwks_url: 'https://idp.example/.well-known/jwks.json',
    issuer: 'https://idp.example/',
    audience: 'fairgate',
  };
}

function errorOf(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('expected a ConfigError');
}

describe('example configs', () => {
  const files = readdirSync(examplesDir).filter((f) => f.endsWith('.yaml'));
  it('are three', () => expect(files.length).toBe(3));
  it.each(files)('%s is valid and its development keys match examples/README.md', (file) => {
    const config = loadConfigFile(join(examplesDir, file), {});
    const readme = readdirSync(examplesDir).includes('README.md');
    expect(readme).toBe(true);
    for (const tenant of config.tenants) {
      expect(tenant.api_key_sha256).toContain(apiKeyDigest(`fg-dev-${tenant.id}`));
    }
    expect(config.admin.token_sha256).toBe(apiKeyDigest('fg-dev-admin'));
  });
});

describe('defaults', () => {
  it('fills every section', () => {
    const config = parseConfig(minimal());
    expect(config.tenants[0]).toMatchObject({
      weight: 1,
      queue_max: 100,
      default_class: 'standard',
    });
    expect(config.pods[0]?.cap).toBe(64);
    expect(config.scheduler).toMatchObject({
      budget: 64,
      fairness: 'drr',
      dispatch_order: 'priority',
      queue_ttl_ms: 1000,
      queue_shedding: false,
      inflight_eviction: false,
      fairness_unit: 'requests',
      token_weights: { input: 1, output: 2 },
    });
    expect(config.admission).toEqual({
      policy: 'always-admit',
      tier_shed_threshold: 8,
      tier_shed_min_priority: 3,
    });
    expect(config.saturation).toMatchObject({ gating: false, queue_depth_threshold: 5 });
    expect(config.tenants[0]?.token_bucket).toBeUndefined();
    expect(config.limits.max_body_bytes).toBe(4 * 1024 * 1024);
    expect(config.slo_classes).toMatchObject({ critical: 4, standard: 3, batch: -1 });
    expect(config.redis).toBeUndefined();
  });
});

describe('batch section', () => {
  it('defaults: 16 lines per replica per pool, 50 MiB files, 500 MiB per tenant', () => {
    const config = parseConfig(minimal());
    expect(config.batch).toEqual({
      concurrency: 16,
      max_file_bytes: 50 * 1024 * 1024,
      max_tenant_bytes: 500 * 1024 * 1024,
      max_lines: 50_000,
      retry_base_ms: 1_000,
      retry_max_ms: 30_000,
      line_timeout_ms: 600_000,
      stalled_ms: 30_000,
    });
    expect(config.tenants[0]?.batch_class).toBeUndefined();
  });

  it('a tenant may name its batch class', () => {
    const raw = minimal();
    (raw.tenants as Array<Record<string, unknown>>)[0]!.batch_class = 'sheddable';
    expect(parseConfig(raw).tenants[0]?.batch_class).toBe('sheddable');
  });
});

describe('server and shutdown sections', () => {
  it('default to the documented values', () => {
    const config = parseConfig(minimal());
    expect(config.server).toEqual({
      headers_timeout_ms: 10_000,
      request_timeout_ms: 60_000,
      keep_alive_timeout_ms: 5_000,
      max_connections: 10_000,
    });
    expect(config.shutdown).toEqual({ drain_timeout_s: 30 });
  });

  it('take set values; request_timeout_ms 0 is no limit; a fractional drain timeout is fine', () => {
    const config = parseConfig({
      ...minimal(),
      server: { headers_timeout_ms: 2_000, request_timeout_ms: 0, max_connections: 50 },
      shutdown: { drain_timeout_s: 0.5 },
    });
    expect(config.server).toEqual({
      headers_timeout_ms: 2_000,
      request_timeout_ms: 0,
      keep_alive_timeout_ms: 5_000,
      max_connections: 50,
    });
    expect(config.shutdown.drain_timeout_s).toBe(0.5);
  });

  it('environment overrides reach them', () => {
    const config = parseConfigText(stringify(minimal()), {
      env: { FAIRGATE__SERVER__MAX_CONNECTIONS: '20000', FAIRGATE__SHUTDOWN__DRAIN_TIMEOUT_S: '3' },
    });
    expect(config.server.max_connections).toBe(20_000);
    expect(config.shutdown.drain_timeout_s).toBe(3);
  });
});

describe('controller section', () => {
  it('queue_aware lifts the queue-TTL-below-target rule (it never decreases on queue wait)', () => {
    const config = parseConfig({
      ...minimal(),
      scheduler: { queue_ttl_ms: 2_000 },
      controller: { target_p99_ttft_s: 1, queue_aware: true },
    });
    expect(config.controller.queue_aware).toBe(true);
  });

  it('is disabled by default, with the documented defaults', () => {
    const config = parseConfig(minimal());
    expect(config.controller).toEqual({
      enabled: false,
      tick_s: 5,
      window_s: 30,
      cap_per_worker: 32,
      cap_per_worker_min: 4,
      cap_per_worker_max: 256,
      target_band_pct: 0.2,
      cooldown_ticks: 3,
      decrease: { mode: 'multiplicative', factor: 0.75 },
      increase_step: 1,
      min_samples: 10,
      queue_aware: false,
      bootstrap: 'none',
    });
    expect(config.leader).toEqual({ lease_ttl_ms: 3000, renew_ms: 1000 });
  });

  it('a target enables it; enabled: false keeps it off', () => {
    expect(
      parseConfig({ ...minimal(), controller: { target_p99_ttft_s: 2 } }).controller,
    ).toMatchObject({
      enabled: true,
      target_p99_ttft_s: 2,
    });
    expect(
      parseConfig({ ...minimal(), controller: { target_p99_ttft_s: 2, enabled: false } }).controller
        .enabled,
    ).toBe(false);
  });

  it('subtractive decrease takes a step (default 4)', () => {
    const config = parseConfig({
      ...minimal(),
      controller: { target_p99_ttft_s: 2, decrease: { mode: 'subtractive' } },
    });
    expect(config.controller.decrease).toEqual({ mode: 'subtractive', step: 4 });
  });

  it('environment overrides reach controller keys', () => {
    const config = parseConfigText(stringify(minimal()), {
      env: {
        FAIRGATE__CONTROLLER__TARGET_P99_TTFT_S: '2.5',
        FAIRGATE__CONTROLLER__CAP_PER_WORKER: '8',
      },
    });
    expect(config.controller).toMatchObject({
      enabled: true,
      target_p99_ttft_s: 2.5,
      cap_per_worker: 8,
    });
  });
});

describe('redis section', () => {
  it.each([
    [
      { url: 'redis://127.0.0.1:6379' },
      { url: 'redis://127.0.0.1:6379', command_timeout_ms: 250, on_outage: 'reject' },
    ],
    [
      {
        sentinels: ['10.0.0.1:26379', 's2.local:26380'],
        sentinel_name: 'fg',
        on_outage: 'local_share',
      },
      {
        sentinels: [
          { host: '10.0.0.1', port: 26379 },
          { host: 's2.local', port: 26380 },
        ],
        sentinel_name: 'fg',
        command_timeout_ms: 250,
        on_outage: 'local_share',
      },
    ],
    [
      { cluster_nodes: ['127.0.0.1:7000'], password: 'pw', command_timeout_ms: 500 },
      {
        cluster_nodes: [{ host: '127.0.0.1', port: 7000 }],
        password: 'pw',
        command_timeout_ms: 500,
        on_outage: 'reject',
      },
    ],
  ])('%j parses with its defaults', (redis, expected) => {
    expect(parseConfig({ ...minimal(), redis }).redis).toEqual(expected);
  });
});

describe('bad configs name the key', () => {
  const cases: Array<[string, (c: Record<string, any>) => void, string]> = [
    ['no tenants', (c) => delete c.tenants, 'tenants'],
    ['empty pods', (c) => (c.pods = []), 'pods'],
    ['weight zero', (c) => (c.tenants[0].weight = 0), 'tenants[0].weight'],
    ['weight fractional', (c) => (c.tenants[0].weight = 1.5), 'tenants[0].weight'],
    [
      'digest not hex',
      (c) => (c.tenants[0].api_key_sha256 = ['abc']),
      'tenants[0].api_key_sha256[0]',
    ],
    ['unknown tenant key', (c) => (c.tenants[0].wieght = 2), 'tenants[0]'],
    ['unknown top-level key', (c) => (c.tenantz = []), ''],
    ['bad pod url', (c) => (c.pods[0].url = 'ftp://x'), 'pods[0].url'],
    ['bad redis url', (c) => (c.redis = { url: 'http://x' }), 'redis.url'],
    ['redis without a server', (c) => (c.redis = { on_outage: 'reject' }), 'redis.url'],
    [
      'redis url and cluster',
      (c) => (c.redis = { url: 'redis://x:1', cluster_nodes: ['a:1'] }),
      'redis.cluster_nodes',
    ],
    [
      'sentinels without a name',
      (c) => (c.redis = { sentinels: ['a:26379'] }),
      'redis.sentinel_name',
    ],
    [
      'sentinel name without sentinels',
      (c) => (c.redis = { url: 'redis://x:1', sentinel_name: 'm' }),
      'redis.sentinels',
    ],
    ['bad cluster node', (c) => (c.redis = { cluster_nodes: ['a'] }), 'redis.cluster_nodes[0]'],
    [
      'unknown outage mode',
      (c) => (c.redis = { url: 'redis://x:1', on_outage: 'queue' }),
      'redis.on_outage',
    ],
    [
      'command timeout too small',
      (c) => (c.redis = { url: 'redis://x:1', command_timeout_ms: 1 }),
      'redis.command_timeout_ms',
    ],
    [
      'duplicate tenant',
      (c) => c.tenants.push({ id: 'a', api_key_sha256: [apiKeyDigest('k2')] }),
      'tenants[1].id',
    ],
    [
      'shared key digest',
      (c) => c.tenants.push({ id: 'b', api_key_sha256: [digest] }),
      'tenants[1].api_key_sha256[0]',
    ],
    ['duplicate pod', (c) => c.pods.push({ name: 'p', url: 'http://127.0.0.1:1' }), 'pods[1].name'],
    ['unknown class', (c) => (c.tenants[0].default_class = 'gold'), 'tenants[0].default_class'],
    [
      'default above max',
      (c) => Object.assign(c.tenants[0], { default_class: 'critical', max_class: 'batch' }),
      'tenants[0].default_class',
    ],
    ['bad fairness', (c) => (c.scheduler = { fairness: 'lottery' }), 'scheduler.fairness'],
    ['negative budget', (c) => (c.scheduler = { budget: -1 }), 'scheduler.budget'],
    ['tenant id with braces', (c) => (c.tenants[0].id = 'a{b}'), 'tenants[0].id'],
    [
      'controller enabled without a target',
      (c) => (c.controller = { enabled: true }),
      'controller.target_p99_ttft_s',
    ],
    [
      'controller target not positive',
      (c) => (c.controller = { target_p99_ttft_s: 0 }),
      'controller.target_p99_ttft_s',
    ],
    [
      'controller tick too short',
      (c) => (c.controller = { target_p99_ttft_s: 2, tick_s: 0.01 }),
      'controller.tick_s',
    ],
    [
      'controller window not whole seconds',
      (c) => (c.controller = { target_p99_ttft_s: 2, window_s: 2.5 }),
      'controller.window_s',
    ],
    [
      'controller window shorter than a tick',
      (c) => (c.controller = { target_p99_ttft_s: 2, tick_s: 10, window_s: 5 }),
      'controller.window_s',
    ],
    [
      'controller min above max',
      (c) => (c.controller = { target_p99_ttft_s: 2, cap_per_worker_min: 300 }),
      'controller.cap_per_worker_min',
    ],
    [
      'controller initial cap outside [min, max]',
      (c) => (c.controller = { target_p99_ttft_s: 2, cap_per_worker: 2 }),
      'controller.cap_per_worker',
    ],
    [
      'controller band of 100%',
      (c) => (c.controller = { target_p99_ttft_s: 2, target_band_pct: 1 }),
      'controller.target_band_pct',
    ],
    [
      'controller decrease factor of 1',
      (c) =>
        (c.controller = { target_p99_ttft_s: 2, decrease: { mode: 'multiplicative', factor: 1 } }),
      'controller.decrease.factor',
    ],
    [
      'controller subtractive step fractional',
      (c) =>
        (c.controller = { target_p99_ttft_s: 2, decrease: { mode: 'subtractive', step: 0.5 } }),
      'controller.decrease.step',
    ],
    [
      'controller decrease mode unknown',
      (c) => (c.controller = { target_p99_ttft_s: 2, decrease: { mode: 'halving' } }),
      'controller.decrease.mode',
    ],
    [
      'controller increase step zero',
      (c) => (c.controller = { target_p99_ttft_s: 2, increase_step: 0 }),
      'controller.increase_step',
    ],
    [
      'controller min_samples zero',
      (c) => (c.controller = { target_p99_ttft_s: 2, min_samples: 0 }),
      'controller.min_samples',
    ],
    [
      'controller unknown key',
      (c) => (c.controller = { target_p99_ttft_s: 2, tick: 5 }),
      'controller',
    ],
    [
      'queue TTL as long as the TTFT target',
      (c) => (c.controller = { target_p99_ttft_s: 1 }),
      'scheduler.queue_ttl_ms',
    ],
    [
      'controller queue_aware not a boolean',
      (c) => (c.controller = { target_p99_ttft_s: 2, queue_aware: 'yes' }),
      'controller.queue_aware',
    ],
    [
      'bad dispatch order',
      (c) => (c.scheduler = { dispatch_order: 'lifo' }),
      'scheduler.dispatch_order',
    ],
    ['old order key', (c) => (c.scheduler = { order: 'fifo' }), 'scheduler'],
    [
      'tokens with round-robin',
      (c) => (c.scheduler = { fairness_unit: 'tokens', fairness: 'round-robin' }),
      'scheduler.fairness_unit',
    ],
    [
      'tokens with fifo',
      (c) => (c.scheduler = { fairness_unit: 'tokens', dispatch_order: 'fifo' }),
      'scheduler.fairness_unit',
    ],
    [
      'token weight zero',
      (c) => (c.scheduler = { fairness_unit: 'tokens', token_weights: { input: 0 } }),
      'scheduler.token_weights.input',
    ],
    [
      'token weights unknown key',
      (c) => (c.scheduler = { token_weights: { prefill: 1 } }),
      'scheduler.token_weights',
    ],
    [
      'SLO target for an unknown class',
      (c) => (c.scheduler = { slo_targets_ms: { gold: 100 } }),
      'scheduler.slo_targets_ms.gold',
    ],
    [
      'SLO target not positive',
      (c) => (c.scheduler = { slo_targets_ms: { standard: 0 } }),
      'scheduler.slo_targets_ms.standard',
    ],
    ['unknown admission policy', (c) => (c.admission = { policy: 'lottery' }), 'admission.policy'],
    [
      'tier-shed threshold negative',
      (c) => (c.admission = { policy: 'tier-shed', tier_shed_threshold: -1 }),
      'admission.tier_shed_threshold',
    ],
    [
      'kv threshold above 1',
      (c) => (c.saturation = { kv_cache_util_threshold: 1.5 }),
      'saturation.kv_cache_util_threshold',
    ],
    [
      'queue depth threshold zero',
      (c) => (c.saturation = { queue_depth_threshold: 0 }),
      'saturation.queue_depth_threshold',
    ],
    [
      'band ceiling for an unknown class',
      (c) => (c.saturation = { band_ceilings: { gold: 1.2 } }),
      'saturation.band_ceilings.gold',
    ],
    [
      'token bucket without capacity',
      (c) => (c.tenants[0].token_bucket = { refill_per_second: 10 }),
      'tenants[0].token_bucket.capacity',
    ],
    [
      'token bucket refill fractional',
      (c) => (c.tenants[0].token_bucket = { capacity: 100, refill_per_second: 0.5 }),
      'tenants[0].token_bucket.refill_per_second',
    ],
    [
      'leader renewal above half the lease',
      (c) => (c.leader = { lease_ttl_ms: 3000, renew_ms: 2000 }),
      'leader.renew_ms',
    ],
    [
      'headers timeout too small',
      (c) => (c.server = { headers_timeout_ms: 10 }),
      'server.headers_timeout_ms',
    ],
    [
      'headers timeout fractional',
      (c) => (c.server = { headers_timeout_ms: 1500.5 }),
      'server.headers_timeout_ms',
    ],
    [
      'request timeout below the headers timeout',
      (c) => (c.server = { headers_timeout_ms: 10_000, request_timeout_ms: 5_000 }),
      'server.request_timeout_ms',
    ],
    [
      'request timeout negative',
      (c) => (c.server = { request_timeout_ms: -1 }),
      'server.request_timeout_ms',
    ],
    [
      'keep-alive timeout zero',
      (c) => (c.server = { keep_alive_timeout_ms: 0 }),
      'server.keep_alive_timeout_ms',
    ],
    ['max connections zero', (c) => (c.server = { max_connections: 0 }), 'server.max_connections'],
    [
      'max connections not a number',
      (c) => (c.server = { max_connections: 'many' }),
      'server.max_connections',
    ],
    ['unknown server key', (c) => (c.server = { idle_timeout_ms: 5 }), 'server'],
    [
      'drain timeout negative',
      (c) => (c.shutdown = { drain_timeout_s: -1 }),
      'shutdown.drain_timeout_s',
    ],
    [
      'drain timeout above an hour',
      (c) => (c.shutdown = { drain_timeout_s: 4_000 }),
      'shutdown.drain_timeout_s',
    ],
    ['unknown shutdown key', (c) => (c.shutdown = { grace_s: 5 }), 'shutdown'],
    ['batch concurrency negative', (c) => (c.batch = { concurrency: -1 }), 'batch.concurrency'],
    [
      'batch file limit above 512 MiB',
      (c) => (c.batch = { max_file_bytes: 600 * 1024 * 1024 }),
      'batch.max_file_bytes',
    ],
    ['batch max lines zero', (c) => (c.batch = { max_lines: 0 }), 'batch.max_lines'],
    [
      'batch retry max below base',
      (c) => (c.batch = { retry_base_ms: 5_000, retry_max_ms: 1_000 }),
      'batch.retry_max_ms',
    ],
    ['batch stalled too short', (c) => (c.batch = { stalled_ms: 10 }), 'batch.stalled_ms'],
    ['unknown batch key', (c) => (c.batch = { workers: 4 }), 'batch'],
    [
      'unknown batch class',
      (c) => (c.tenants[0].batch_class = 'overnight'),
      'tenants[0].batch_class',
    ],
    ['no pods and no discovery', (c) => (c.pods = []), 'pods'],
    [
      'discovery with neither dns nor kubernetes',
      (c) => (c.discovery = { refresh_ms: 1_000 }),
      'discovery',
    ],
    [
      'discovery with both dns and kubernetes',
      (c) => (c.discovery = { dns: { name: 'sim', port: 8000 }, kubernetes: { service: 'v' } }),
      'discovery',
    ],
    [
      'dns discovery without a port',
      (c) => (c.discovery = { dns: { name: 'sim' } }),
      'discovery.dns.port',
    ],
    [
      'dns discovery refresh too short',
      (c) => (c.discovery = { dns: { name: 'sim', port: 80 }, refresh_ms: 10 }),
      'discovery.refresh_ms',
    ],
    [
      'kubernetes discovery without a service',
      (c) => (c.discovery = { kubernetes: { port: 'http' } }),
      'discovery.kubernetes.service',
    ],
    [
      'discovery with an unknown scheme',
      (c) => (c.discovery = { dns: { name: 'sim', port: 80, scheme: 'grpc' } }),
      'discovery.dns.scheme',
    ],
    [
      'jwt with neither jwks_url nor jwks_file',
      (c) => (c.auth = { jwt: { issuer: 'i', audience: 'a' } }),
      'auth.jwt.jwks_url',
    ],
    [
      'jwt with both jwks_url and jwks_file',
      (c) => (c.auth = { jwt: { ...jwt(), jwks_file: '/etc/jwks.json' } }),
      'auth.jwt.jwks_file',
    ],
    [
      'jwt jwks_url not http',
      (c) => (c.auth = { jwt: { ...jwt(), jwks_url: 'file:///etc/jwks.json' } }),
      'auth.jwt.jwks_url',
    ],
    [
      'jwt without an issuer',
      (c) => (c.auth = { jwt: { jwks_url: 'https://idp/jwks', audience: 'a' } }),
      'auth.jwt.issuer',
    ],
    [
      'jwt without an audience',
      (c) => (c.auth = { jwt: { jwks_url: 'https://idp/jwks', issuer: 'i' } }),
      'auth.jwt.audience',
    ],
    [
      'jwt empty audience list',
      (c) => (c.auth = { jwt: { ...jwt(), audience: [] } }),
      'auth.jwt.audience',
    ],
    [
      'jwt algorithm none',
      (c) => (c.auth = { jwt: { ...jwt(), algorithms: ['RS256', 'none'] } }),
      'auth.jwt.algorithms[1]',
    ],
    [
      'jwt HMAC algorithm',
      (c) => (c.auth = { jwt: { ...jwt(), algorithms: ['HS256'] } }),
      'auth.jwt.algorithms[0]',
    ],
    [
      'jwt empty tenant claim',
      (c) => (c.auth = { jwt: { ...jwt(), tenant_claim: '' } }),
      'auth.jwt.tenant_claim',
    ],
    [
      'jwt clock tolerance negative',
      (c) => (c.auth = { jwt: { ...jwt(), clock_tolerance_s: -1 } }),
      'auth.jwt.clock_tolerance_s',
    ],
    ['jwt unknown key', (c) => (c.auth = { jwt: { ...jwt(), leeway: 5 } }), 'auth.jwt'],
    ['unknown auth key', (c) => (c.auth = { oidc: {} }), 'auth'],
  ];
  it.each(cases)('%s -> %s', (_name, mutate, key) => {
    const raw = minimal();
    mutate(raw);
    const error = errorOf(() => parseConfig(raw));
    expect(error.key).toBe(key);
    if (key) expect(error.message).toContain(key);
  });

  it('bad YAML is a ConfigError', () => {
    expect(errorOf(() => parseConfigText('tenants: [')).message).toMatch(/invalid YAML/);
  });

  it('a missing file is a ConfigError naming the path', () => {
    expect(errorOf(() => loadConfigFile('/nonexistent/fairgate.yaml')).message).toContain(
      '/nonexistent',
    );
  });
});

describe('environment overrides', () => {
  it.each([
    [
      'FAIRGATE__REDIS__URL',
      'redis://127.0.0.1:7000',
      (c: any) => c.redis.url,
      'redis://127.0.0.1:7000',
    ],
    ['FAIRGATE__SCHEDULER__BUDGET', '12', (c: any) => c.scheduler.budget, 12],
    ['FAIRGATE__TENANTS__0__WEIGHT', '3', (c: any) => c.tenants[0].weight, 3],
    [
      'FAIRGATE__PODS__0__URL',
      'http://127.0.0.1:9',
      (c: any) => c.pods[0].url,
      'http://127.0.0.1:9',
    ],
  ])('%s=%s', (name, value, read, expected) => {
    const config = parseConfigText(stringify(minimal()), { env: { [name]: value } });
    expect(read(config)).toBe(expected);
  });

  it('a bad override is refused naming the key', () => {
    const error = errorOf(() =>
      parseConfigText(stringify(minimal()), { env: { FAIRGATE__SCHEDULER__BUDGET: 'lots' } }),
    );
    expect(error.key).toBe('scheduler.budget');
  });
});

describe('formatKey', () => {
  it.each([
    [[], ''],
    [['a'], 'a'],
    [['a', 0, 'b'], 'a[0].b'],
    [['a', 1, 2], 'a[1][2]'],
  ])('%j -> %s', (path, key) => expect(formatKey(path)).toBe(key));
});

describe('ConfigWatcher', () => {
  it('reloads a good change and refuses a bad one, keeping the old config', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairgate-config-'));
    const file = join(dir, 'gateway.yaml');
    writeFileSync(file, stringify(minimal()));
    const reloads: number[] = [];
    const refused: string[] = [];
    const watcher = new ConfigWatcher(file, {
      onReload: (config) => reloads.push(config.tenants[0]!.weight),
      onRejected: (error) => refused.push(error.key),
    });
    watcher.start(20);
    try {
      const next = minimal();
      (next.tenants as any[])[0].weight = 5;
      writeFileSync(file, stringify(next));
      await expect.poll(() => reloads, { timeout: 3000 }).toEqual([5]);
      (next.tenants as any[])[0].weight = -1;
      writeFileSync(file, `${stringify(next)}\n`);
      await expect.poll(() => refused, { timeout: 3000 }).toEqual(['tenants[0].weight']);
      expect(watcher.current.tenants[0]?.weight).toBe(5);
      await sleep(50);
      expect(reloads).toEqual([5]);
    } finally {
      watcher.stop();
    }
  });
});

describe('discovery', () => {
  it('a pool may have discovered pods only, or both; defaults filled', () => {
    const raw = minimal();
    delete raw.pods;
    raw.discovery = { dns: { name: 'sim', port: 8000 } };
    const config = parseConfig(raw);
    expect(config.pods).toEqual([]);
    expect(config.pools[0]?.discovery).toEqual({
      dns: { name: 'sim', port: 8000, srv: false, scheme: 'http' },
      refresh_ms: 5_000,
      cap: 64,
    });
    expect(poolView(config, config.pool).discovery?.dns?.name).toBe('sim');
    const both = parseConfig({ ...minimal(), discovery: { kubernetes: { service: 'vllm' } } });
    expect(both.pods.map((p) => p.name)).toEqual(['p']);
    expect(both.pools[0]?.discovery?.kubernetes).toEqual({ service: 'vllm', scheme: 'http' });
    // SRV records carry the port.
    expect(() =>
      parseConfig({ ...minimal(), discovery: { dns: { name: '_http._tcp.v', srv: true } } }),
    ).not.toThrow();
  });

  it('a reload cannot change where pods are discovered', () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairgate-config-'));
    const file = join(dir, 'gateway.yaml');
    writeFileSync(file, stringify({ ...minimal(), discovery: { dns: { name: 'a', port: 80 } } }));
    const refused: string[] = [];
    const watcher = new ConfigWatcher(file, { onRejected: (error) => refused.push(error.key) });
    writeFileSync(file, stringify({ ...minimal(), discovery: { dns: { name: 'b', port: 80 } } }));
    expect(watcher.reload()).toBe(false);
    expect(refused).toEqual(['discovery']);
    expect(watcher.current.pools[0]?.discovery?.dns?.name).toBe('a');
  });
});

describe('auth.jwt', () => {
  it('defaults the claim, the algorithms (asymmetric only) and the clock tolerance', () => {
    const config = parseConfig({ ...minimal(), auth: { jwt: jwt() } });
    expect(config.auth?.jwt).toEqual({
      jwks_url: 'https://idp.example/.well-known/jwks.json',
      issuer: 'https://idp.example/',
      audience: 'fairgate',
      tenant_claim: 'tenant',
      algorithms: [
        'RS256',
        'RS384',
        'RS512',
        'PS256',
        'PS384',
        'PS512',
        'ES256',
        'ES384',
        'ES512',
        'EdDSA',
        'Ed25519',
      ],
      clock_tolerance_s: 30,
    });
    const file = parseConfig({
      ...minimal(),
      auth: {
        jwt: {
          jwks_file: '/etc/fairgate/jwks.json',
          issuer: 'i',
          audience: ['a', 'b'],
          tenant_claim: 'org',
          algorithms: ['ES256'],
          clock_tolerance_s: 0,
        },
      },
    });
    expect(file.auth?.jwt).toMatchObject({
      audience: ['a', 'b'],
      tenant_claim: 'org',
      algorithms: ['ES256'],
      clock_tolerance_s: 0,
    });
    expect(parseConfig(minimal()).auth).toBeUndefined();
  });

  it('a reload cannot change it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairgate-config-'));
    const file = join(dir, 'gateway.yaml');
    writeFileSync(file, stringify({ ...minimal(), auth: { jwt: jwt() } }));
    const refused: string[] = [];
    const watcher = new ConfigWatcher(file, { onRejected: (error) => refused.push(error.key) });
    writeFileSync(
      file,
      stringify({ ...minimal(), auth: { jwt: { ...jwt(), audience: 'other' } } }),
    );
    expect(watcher.reload()).toBe(false);
    writeFileSync(file, stringify(minimal()));
    expect(watcher.reload()).toBe(false);
    expect(refused).toEqual(['auth.jwt', 'auth.jwt']);
    expect(watcher.current.auth?.jwt?.audience).toBe('fairgate');
    // The same section with another tenant change reloads.
    const next: Record<string, any> = { ...minimal(), auth: { jwt: jwt() } };
    next.tenants[0].weight = 4;
    writeFileSync(file, stringify(next));
    expect(watcher.reload()).toBe(true);
    expect(watcher.current.tenants[0]?.weight).toBe(4);
  });
});

describe('pools and models', () => {
  const twoPools = (): Record<string, any> => ({
    tenants: [
      { id: 'a', api_key_sha256: [digest] },
      { id: 'b', api_key_sha256: [apiKeyDigest('k2')], models: ['small'] },
    ],
    scheduler: { budget: 8 },
    pools: [
      {
        name: 'big',
        models: [{ name: 'org/big-70b', aliases: ['big'] }],
        pods: [{ name: 'big-0', url: 'http://127.0.0.1:8001' }],
        scheduler: { budget: 4 },
      },
      {
        name: 'small',
        models: ['small', 'small-lora'],
        pods: [{ name: 'small-0', url: 'http://127.0.0.1:8002' }],
      },
    ],
  });

  it('a single-pool config is one pool that takes every model', () => {
    const config = parseConfig(minimal());
    expect(config.pools.map((p) => [p.name, p.models, p.pods.length])).toEqual([
      ['default', [], 1],
    ]);
    expect(new ModelRoutes(config.pools).route('anything')).toEqual({
      pool: 'default',
      model: 'anything',
    });
    expect(poolView(config, 'default').scheduler).toBe(config.scheduler);
  });

  it('pools: each pool with its models, its own sections or the top-level ones', () => {
    const config = parseConfig(twoPools());
    expect(config.pool).toBe('big');
    expect(config.pods.map((p) => p.name)).toEqual(['big-0', 'small-0']);
    const big = poolView(config, 'big');
    const small = poolView(config, 'small');
    expect([big.pool, big.scheduler.budget, big.pods.map((p) => p.name)]).toEqual([
      'big',
      4,
      ['big-0'],
    ]);
    expect([small.pool, small.scheduler.budget, small.pods.map((p) => p.name)]).toEqual([
      'small',
      8,
      ['small-0'],
    ]);
    expect(poolView(config, 'big')).toBe(big); // built once per config
    expect(config.tenants[1]?.models).toEqual(['small']);
  });

  it('a pool may take its models from its pods, and allow-lists may then name any model', () => {
    const raw = twoPools();
    raw.pools[1].models = [];
    raw.pools[1].discover_models = true;
    raw.tenants[1].models = ['small-lora-loaded-later'];
    const config = parseConfig(raw);
    expect(config.pools.map((p) => [p.name, p.discoverModels])).toEqual([
      ['big', false],
      ['small', true],
    ]);
    // Discovered models are routed by the gateway; the config routes only what it names.
    expect(new ModelRoutes(config.pools).route('small')).toBeUndefined();
  });

  it.each([
    ['org/big-70b', { pool: 'big', model: 'org/big-70b' }],
    ['big', { pool: 'big', model: 'org/big-70b' }],
    ['small-lora', { pool: 'small', model: 'small-lora' }],
    ['unknown', undefined],
  ])('routes %s', (model, expected) => {
    expect(new ModelRoutes(parseConfig(twoPools()).pools).route(model)).toEqual(expected);
  });

  const cases: Array<[string, (c: Record<string, any>) => void, string]> = [
    ['pods and pools', (c) => (c.pods = [{ name: 'x', url: 'http://127.0.0.1:1' }]), 'pools'],
    ['neither pods nor pools', (c) => delete c.pools, 'pods'],
    ['models beside pools', (c) => (c.models = ['m']), 'models'],
    ['duplicate pool', (c) => (c.pools[1].name = 'big'), 'pools[1].name'],
    ['pool without models', (c) => delete c.pools[0].models, 'pools[0].models'],
    ['pool without pods', (c) => (c.pools[0].pods = []), 'pools[0].pods'],
    ['pod in two pools', (c) => (c.pools[1].pods[0].name = 'big-0'), 'pools[1].pods[0].name'],
    ['model in two pools', (c) => c.pools[1].models.push('org/big-70b'), 'pools[1].models[2].name'],
    ['alias of another model', (c) => c.pools[1].models.push('big'), 'pools[1].models[2].name'],
    ['model name with a space', (c) => (c.pools[1].models[0] = 'a b'), 'pools[1].models[0]'],
    [
      'tenant allowed an unknown model',
      (c) => (c.tenants[1].models = ['nope']),
      'tenants[1].models[0]',
    ],
    ['empty allow-list', (c) => (c.tenants[1].models = []), 'tenants[1].models'],
    [
      'bad pool section',
      (c) => (c.pools[0].scheduler = { budget: 0 }),
      'pools[0].scheduler.budget',
    ],
    [
      "a pool's queue TTL against its controller",
      (c) => (c.pools[0].controller = { target_p99_ttft_s: 0.5 }),
      'pools[0].scheduler.queue_ttl_ms',
    ],
    [
      'an inherited section is named at the top level',
      (c) => {
        delete c.pools[0].scheduler;
        c.controller = { target_p99_ttft_s: 0.5 };
      },
      'scheduler.queue_ttl_ms',
    ],
    [
      'unknown class in a pool section',
      (c) => (c.pools[1].saturation = { band_ceilings: { gold: 1 } }),
      'pools[1].saturation.band_ceilings.gold',
    ],
  ];
  it.each(cases)('%s -> %s', (_name, mutate, key) => {
    const raw = twoPools();
    mutate(raw);
    const error = errorOf(() => parseConfig(raw));
    expect(error.key).toBe(key);
    expect(error.message).toContain(key);
  });
});
