import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { library, scripts } from '../src/generated/scripts.js';
import { ScriptCode } from '../src/index.js';
import { ENGINE_KEY_NAMES, poolKeys } from '../src/keys.js';
import { ENGINE_CALLS } from '../src/redis/engine-batch.js';

/**
 * Static checks of the flattened scripts: every key a script
 * touches is derived from its KEYS. Together with the Redis suite running on a one-node
 * cluster (where Redis refuses any key outside the declared slot), this covers both "declared"
 * and "one slot".
 *
 * The convention checked: key-valued locals end in `Key` (a key) or `Prefix` (a declared key
 * name that data-dependent keys extend); a Prefix is only ever KEYS[n]; a Key is KEYS[n] or
 * `somePrefix .. suffix`; every redis command's key argument is such a Key; keys never travel
 * as function parameters (so no call site can pass something else).
 */
const KEYLESS_COMMANDS = new Set(['TIME']);
const TWO_KEY_COMMANDS = new Set(['LMOVE', 'RENAME']);

function withoutComments(lua: string): string {
  return lua.replace(/--\[\[[\s\S]*?\]\]/g, '').replace(/--.*$/gm, '');
}

const entries = Object.values(scripts).map((script) => ({
  ...script,
  code: withoutComments(script.content.split('\n').slice(1).join('\n')),
}));

describe.each(entries)('lua script $name-$keys', (script) => {
  it('starts with a #!lua shebang and documents KEYS, ARGV and the output', () => {
    expect(script.content.split('\n')[0]).toMatch(/^#!lua( flags=no-writes)?$/);
    expect(script.content).toMatch(/KEYS\[1\]/);
    expect(script.content).toMatch(/Output:/);
  });

  it('calls Redis only through rcall', () => {
    expect(script.code.match(/redis\.(p?call)/g)).toEqual(['redis.call']);
    expect(script.code).toMatch(/local rcall = redis\.call/);
  });

  it('derives every key from KEYS, within the declared count', () => {
    const prefixes = new Set<string>();
    const keys = new Set<string>();
    for (const [, name, rhs] of script.code.matchAll(
      /(?:local\s+)?(\w+(?:Key|Prefix))\s*=\s*([^\n]+)/g,
    )) {
      const declared = /^KEYS\[(\d+)\]$/.exec((rhs as string).trim());
      // The engine scripts' names: the tag (KEYS[1], the pool's hash tag) and a literal suffix.
      const fromTag = /^tag \.\. '[^']*'/.test((rhs as string).trim());
      if (declared || fromTag) {
        if (declared) expect(Number(declared[1])).toBeLessThanOrEqual(script.keys);
        if (fromTag) expect(script.code).toMatch(/local tag = KEYS\[1\]\n/);
        (name?.endsWith('Prefix') ? prefixes : keys).add(name as string);
        continue;
      }
      expect(name, `${name} = ${rhs}`).toMatch(/Key$/);
      const base = /^(\w+Prefix)\s*\.\./.exec((rhs as string).trim())?.[1];
      expect(base && prefixes.has(base), `${name} = ${rhs}`).toBe(true);
      keys.add(name as string);
    }
    expect(script.code.replace(/=\s*KEYS\[\d+\]/g, '')).not.toMatch(/KEYS\[/);

    const calls = [
      ...script.code.matchAll(/rcall\(\s*'([A-Z]+)'\s*(?:,\s*([^,)]+))?(?:,\s*([^,)]+))?/g),
    ];
    // The batch touches no key itself: the calls it runs do (entryFunctions).
    if (script.name === 'batch') expect(calls).toEqual([]);
    else expect(calls.length).toBeGreaterThan(0);
    for (const [call, command, first, second] of calls) {
      if (KEYLESS_COMMANDS.has(command as string)) continue;
      expect(keys.has((first ?? '').trim()), call).toBe(true);
      if (TWO_KEY_COMMANDS.has(command as string)) {
        expect(keys.has((second ?? '').trim()), call).toBe(true);
      }
    }
  });

  it('never passes keys as function parameters', () => {
    for (const [, params] of script.code.matchAll(/function\s+\w+\(([^)]*)\)/g)) {
      expect(params).not.toMatch(/(Key|Prefix)\b/);
    }
  });
});

describe('lua and TypeScript agree', () => {
  const include = (name: string) =>
    readFileSync(new URL(`../lua/includes/${name}.lua`, import.meta.url), 'utf8');

  it('the Code table equals ScriptCode', () => {
    const lua = Object.fromEntries(
      [...include('codes').matchAll(/(\w+) = (-?\d+)/g)].map(([, name, value]) => [
        name,
        Number(value),
      ]),
    );
    const ts = Object.fromEntries(
      Object.entries(ScriptCode).filter(([, value]) => typeof value === 'number'),
    );
    expect(lua).toEqual(ts);
  });

  it('the engine scripts derive the names of poolKeys from the tag, in ENGINE_KEY_NAMES order', () => {
    const lua = [...include('engineKeys').matchAll(/^\s*(\w+) = tag \.\. '([^']*)'/gm)].map(
      ([, name, suffix]) => [name, suffix],
    );
    const keys = poolKeys('p');
    const ts = ENGINE_KEY_NAMES.map((name) => [
      name.endsWith('Prefix') ? name : `${name}Key`,
      keys[name].slice(keys.tag.length),
    ]);
    expect(lua).toEqual(ts);
    for (const [, suffix] of ts) expect(`${keys.tag}${suffix}`.startsWith('{fg:p}:')).toBe(true);
  });

  it('the batch runs exactly the engine calls EngineBatch sends', () => {
    const batchable = /local batchable = \{([^}]*)\}/.exec(scripts.batch.content)?.[1] ?? '';
    const names = [...batchable.matchAll(/(\w+) = true/g)].map(([, name]) => name);
    expect(names.sort()).toEqual([...ENGINE_CALLS].sort());
    for (const name of names) expect(scripts[name as keyof typeof scripts].keys).toBe(1);
  });

  it('every engine script takes one key, the tag', () => {
    const engine = entries.filter((s) => s.content.includes('>>> includes/engineKeys'));
    expect(engine.map((s) => s.name).sort()).toEqual(
      [
        'configure',
        'enqueue',
        'forgetPrefixes',
        'handover',
        'heartbeat',
        'poll',
        'reclaim',
        'release',
        'setPodAdapters',
      ].sort(),
    );
    for (const script of engine) expect(script.keys, script.name).toBe(1);
  });
});

describe('the function library', () => {
  it('registers every entry script as a function named with the package version', () => {
    for (const script of Object.values(scripts)) {
      expect(script.function).toBe(`${library.name}_${script.name}`);
      expect(library.content).toContain(`function_name = '${script.function}'`);
    }
    expect(library.content.split('\n')[0]).toBe(`#!lua name=${library.name}`);
  });

  it("starts every function by binding rcall and resetting its includes' per-call state", () => {
    const perCall: Record<string, string> = {
      engineKeys: 'bindEngineKeys(KEYS)',
      fence: 'bindFenceKeys(KEYS)',
      serverTime: 'resetServerTime()',
    };
    for (const script of Object.values(scripts)) {
      const registration = library.content
        .split('\n')
        .find((line) => line.includes(`function_name = '${script.function}'`));
      expect(registration, script.name).toMatch(
        new RegExp(`callback = entryFunctions\\.${script.name} }$`),
      );
      const start = library.content.indexOf(`entryFunctions.${script.name} = function(KEYS, ARGV)`);
      expect(start, script.name).toBeGreaterThan(0);
      const head = library.content.slice(start).split('\n').slice(1, 5);
      expect(head[0], script.name).toBe('rcall = redis.call');
      for (const [include, statement] of Object.entries(perCall)) {
        expect(head.includes(statement), `${script.name}: ${statement}`).toBe(
          script.content.includes(`>>> includes/${include}`),
        );
      }
    }
  });
});
