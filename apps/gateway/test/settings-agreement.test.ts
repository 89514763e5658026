import { parseConfig } from '@fairgate/config';
import {
  checkSetting,
  SCHEDULER_SETTINGS,
  type SchedulerSettings,
  type SettingSpec,
  setSettingAt,
  settingAt,
  yamlValueOf,
} from '@fairgate/core';
import { poolKeys, RedisScheduler } from '@fairgate/scheduler';
import { type RedisHandle, startRedis } from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { library } from '../../../packages/scheduler/src/generated/scripts.js';
import { schedulerSettings } from '../src/scheduler-setup.js';

/**
 * The settings table (packages/core/src/scheduler-settings.ts) against everything derived
 * from it, on a real redis-server: a YAML file setting every key to a value other than its
 * default (and one setting none) is parsed by the config schema, turned into settings by
 * the gateway, written by RedisScheduler.configure, and read back both by decodeSettings (a
 * snapshot) and by the Lua reader the build generates (run as it is in the library). A hash
 * with none of the settings fields but `fairness` reads as the defaults on both sides.
 */

const specs = SCHEDULER_SETTINGS as readonly SettingSpec[];

/**
 * Settings whose other value needs the others at their defaults: `fairnessUnit: tokens` is
 * refused beside `fairness` and `dispatchOrder` other than drr and priority. Each goes
 * through a round trip of its own.
 */
const ALONE = new Set(['fairnessUnit']);

/** A valid value of `spec` other than its default (ceilings: for the class `batch`, band -1). */
function otherValue(spec: SettingSpec): unknown {
  const { check } = spec;
  switch (check.kind) {
    case 'enum':
      return check.values.find((value) => value !== spec.default);
    case 'flag':
      return !spec.default;
    case 'ceilings':
      return { '-1': 0.5 };
    case 'int': {
      const step = spec.yamlForm === 'seconds' ? 1_000 : 1;
      const up = (spec.default as number) + step;
      return check.max === undefined || up <= check.max ? up : (spec.default as number) - step;
    }
    case 'number': {
      const up = (spec.default as number) + 0.5;
      return check.max === undefined || up <= check.max ? up : (spec.default as number) / 2;
    }
  }
}

/** The YAML file's form of `value` (ceilings keyed by class: `batch` is band -1). */
function yamlOf(spec: SettingSpec, value: unknown): unknown {
  if (spec.yamlForm === 'by-class') {
    return Object.fromEntries(
      Object.entries(value as Record<string, number>).map(([band, ceiling]) => [
        band === '-1' ? 'batch' : band,
        ceiling,
      ]),
    );
  }
  return yamlValueOf(spec, value);
}

/** A config file (as parsed YAML) with `values` for every setting that has a key. */
function configFile(values: ReadonlyMap<SettingSpec, unknown>): Record<string, unknown> {
  const file: Record<string, Record<string, unknown> | unknown> = {
    tenants: [{ id: 't', api_key_sha256: ['0'.repeat(64)] }],
    pods: [{ name: 'p', url: 'http://127.0.0.1:1' }],
  };
  for (const [spec, value] of values) {
    if (spec.yaml === null) continue;
    const [section, key, inner] = spec.yaml.split('.') as [string, string, string | undefined];
    const held = (file[section] ?? {}) as Record<string, unknown>;
    const yaml = yamlOf(spec, value);
    file[section] = {
      ...held,
      [key]: inner === undefined ? yaml : { ...(held[key] as object | undefined), [inner]: yaml },
    };
  }
  return file;
}

/** The Lua reader's form of `value`: the engine's config table holds ceilings as JSON. */
const luaFormOf = (spec: SettingSpec, value: unknown): unknown =>
  spec.check.kind === 'ceilings' ? JSON.stringify(value) : value;

/** The generated include as the library holds it, run on the config hash KEYS[1]. */
function luaReaderScript(): string {
  const start = library.content.indexOf('-- >>> generated/settings');
  const end = library.content.indexOf('-- <<< generated/settings');
  if (start < 0 || end < 0) throw new Error('the library has no generated/settings include');
  return `${library.content.slice(start, end)}
local cfg = parseSettings(redis.call('HMGET', KEYS[1], unpack(settingsFields)))
if not cfg then return 'null' end
return cjson.encode(cfg)`;
}

interface ReadBack {
  /** The settings the config schema and the gateway made of the file. */
  fromYaml: Record<string, unknown>;
  /** decodeSettings of the config hash (a snapshot). */
  decoded: SchedulerSettings | null;
  /** The Lua reader's config table, by hash field. */
  lua: Record<string, unknown>;
}

let redis: RedisHandle;
let admin: Redis;
let pools = 0;

/** Writes `values` through the file, the gateway and configure; reads them back each way. */
async function roundTrip(values: ReadonlyMap<SettingSpec, unknown>): Promise<ReadBack> {
  const fromYaml = schedulerSettings(parseConfig(configFile(values))) as Record<string, unknown>;
  const input = structuredClone(fromYaml);
  for (const [spec, value] of values) if (spec.yaml === null) setSettingAt(input, spec.path, value);
  pools += 1;
  const pool = `agreement-${pools}`;
  const scheduler = new RedisScheduler({ pool, connection: redis.url });
  try {
    await scheduler.configure(input);
    const decoded = (await scheduler.snapshot()).settings;
    return { fromYaml, decoded, lua: await readByLua(poolKeys(pool).config) };
  } finally {
    await scheduler.close();
  }
}

async function readByLua(configKey: string): Promise<Record<string, unknown>> {
  const reply = (await admin.eval(luaReaderScript(), 1, configKey)) as string;
  return JSON.parse(reply) as Record<string, unknown>;
}

beforeAll(async () => {
  redis = await startRedis();
  admin = new Redis(redis.url);
}, 30_000);

afterAll(async () => {
  admin?.disconnect();
  await redis?.stop();
});

const rows = specs.map((spec) => [spec.path, spec] as const);

describe('the settings table', () => {
  it.each(rows)('%s: its default passes its own check', (_path, spec) => {
    expect(() => checkSetting(spec.path, spec.check, spec.default)).not.toThrow();
    expect(otherValue(spec)).not.toEqual(spec.default);
    expect(() => checkSetting(spec.path, spec.check, otherValue(spec))).not.toThrow();
  });

  it('names each Redis field and YAML key once', () => {
    const fields = specs.map((s) => s.field);
    const keys = specs.flatMap((s) => (s.yaml === null ? [] : [s.yaml]));
    expect(new Set(fields).size).toBe(fields.length);
    expect(new Set(keys).size).toBe(keys.length);
  });
});

describe('schema, TypeScript settings and the Lua reader agree', () => {
  let others: ReadBack;
  let defaults: ReadBack;
  let fallbacks: { decoded: SchedulerSettings | null; lua: Record<string, unknown> };
  const alone = new Map<string, ReadBack>();

  beforeAll(async () => {
    others = await roundTrip(
      new Map(specs.filter((s) => !ALONE.has(s.path)).map((spec) => [spec, otherValue(spec)])),
    );
    for (const spec of specs.filter((s) => ALONE.has(s.path))) {
      alone.set(spec.path, await roundTrip(new Map([[spec, otherValue(spec)]])));
    }
    defaults = await roundTrip(new Map());
    const bare = poolKeys('agreement-bare').config;
    await admin.hset(bare, 'fairness', 'drr');
    const scheduler = new RedisScheduler({ pool: 'agreement-bare', connection: redis.url });
    try {
      fallbacks = { decoded: (await scheduler.snapshot()).settings, lua: await readByLua(bare) };
    } finally {
      await scheduler.close();
    }
  }, 30_000);

  it.each(rows)('%s: a value other than the default', (_path, spec) => {
    const value = otherValue(spec);
    const read = alone.get(spec.path) ?? others;
    if (spec.yaml !== null) expect(settingAt(read.fromYaml, spec.path)).toEqual(value);
    expect(settingAt(read.decoded ?? {}, spec.path)).toEqual(value);
    expect(read.lua[spec.field]).toEqual(luaFormOf(spec, value));
  });

  it.each(rows)('%s: the default, from a file that sets nothing', (_path, spec) => {
    if (spec.yaml !== null) expect(settingAt(defaults.fromYaml, spec.path)).toEqual(spec.default);
    expect(settingAt(defaults.decoded ?? {}, spec.path)).toEqual(spec.default);
    expect(defaults.lua[spec.field]).toEqual(luaFormOf(spec, spec.default));
  });

  it.each(rows)('%s: the default, for a hash without its field', (_path, spec) => {
    expect(settingAt(fallbacks.decoded ?? {}, spec.path)).toEqual(spec.default);
    expect(fallbacks.lua[spec.field]).toEqual(luaFormOf(spec, spec.default));
  });
});
