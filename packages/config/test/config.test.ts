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
  formatKey,
  loadConfigFile,
  parseConfig,
  parseConfigText,
} from '../src/index.js';

const examplesDir = new URL('../../../examples/', import.meta.url).pathname;
const digest = apiKeyDigest('k1');

function minimal(): Record<string, unknown> {
  return {
    tenants: [{ id: 'a', api_key_sha256: [digest] }],
    pods: [{ name: 'p', url: 'http://127.0.0.1:8001' }],
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
      order: 'fifo',
      queue_ttl_ms: 1000,
    });
    expect(config.limits.max_body_bytes).toBe(4 * 1024 * 1024);
    expect(config.slo_classes).toMatchObject({ critical: 4, standard: 3, batch: -1 });
    expect(config.redis).toBeUndefined();
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
