import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { configSchema } from '../src/schema.js';
import { SETTINGS_TABLE_HEADER, settingsTableRows } from './settings-doc-table.js';

/**
 * docs/config.md against the schema: every key of the config file has a row in the doc's
 * key tables, and a row's default is the schema's. Keys are walked from the zod schema
 * itself (objects are entered, arrays as `[]`, records of objects as `<model>`), so a key
 * added to the schema without a row fails here.
 */

interface Leaf {
  path: string;
  /** The schema's default, when the key has one (a `.default()` on a non-object). */
  hasDefault: boolean;
  defaultValue?: unknown;
}

// zod v4 keeps the definition of every schema under `_zod.def`.
interface Def {
  type: string;
  innerType?: z.ZodType;
  defaultValue?: unknown;
  shape?: Record<string, z.ZodType>;
  element?: z.ZodType;
  valueType?: z.ZodType;
  in?: z.ZodType;
}
const defOf = (schema: z.ZodType): Def => (schema as unknown as { _zod: { def: Def } })._zod.def;

/** The schema under optional / nullable / default / transform wrappers, and its default. */
function unwrap(schema: z.ZodType): { core: z.ZodType; hasDefault: boolean; value?: unknown } {
  let core = schema;
  let hasDefault = false;
  let value: unknown;
  for (;;) {
    const def = defOf(core);
    if (def.type === 'default' && def.innerType) {
      if (!hasDefault) {
        hasDefault = true;
        value = def.defaultValue;
      }
      core = def.innerType;
    } else if ((def.type === 'optional' || def.type === 'nullable') && def.innerType) {
      core = def.innerType;
    } else if (def.type === 'pipe' && def.in) {
      core = def.in;
    } else {
      return { core, hasDefault, value };
    }
  }
}

/**
 * Sections a pool may set for itself reuse the top-level section's schema: documented once,
 * under the top-level key, and as one row under `pools[]`.
 */
const topLevelSections = new Set<z.ZodType>();

function walk(schema: z.ZodType, prefix: string, out: Leaf[]): void {
  const { core, hasDefault, value } = unwrap(schema);
  const def = defOf(core);
  if (prefix.startsWith('pools[].') && topLevelSections.has(core)) {
    out.push({ path: prefix.slice(0, -1), hasDefault, defaultValue: value });
    return;
  }
  if (prefix === '' && def.type === 'object' && def.shape) {
    for (const child of Object.values(def.shape)) topLevelSections.add(unwrap(child).core);
  }
  if (def.type === 'object' && def.shape) {
    for (const [key, child] of Object.entries(def.shape)) walk(child, `${prefix}${key}.`, out);
    return;
  }
  if (def.type === 'array' && def.element && defOf(unwrap(def.element).core).type === 'object') {
    walk(def.element, `${prefix.slice(0, -1)}[].`, out);
    return;
  }
  if (
    def.type === 'record' &&
    def.valueType &&
    defOf(unwrap(def.valueType).core).type === 'object'
  ) {
    walk(def.valueType, `${prefix}<model>.`, out);
    return;
  }
  out.push({ path: prefix.slice(0, -1), hasDefault, defaultValue: value });
}

/** key -> default cell, from every `| key | default | meaning |` row of docs/config.md. */
function documentedDefaults(markdown: string): Map<string, string> {
  const rows = new Map<string, string>();
  for (const line of markdown.split('\n')) {
    if (!line.startsWith('| `')) continue;
    const cells = line.slice(1).split(/\s\|\s/);
    const keys = [...(cells[0] ?? '').matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);
    const defaults = (cells[1] ?? '').split(' / ').map((cell) => cell.trim());
    keys.forEach((key, i) => {
      rows.set(key, (defaults.length === keys.length ? defaults[i] : cells[1])?.trim() ?? '');
    });
  }
  return rows;
}

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const plain = (cell: string) => cell.replaceAll('`', '').trim();

/** Whether a documented default cell states the schema's default value. */
function statesDefault(cell: string, value: unknown): boolean {
  if (typeof value === 'number')
    return plain(cell).replace(/(\d)[_,](\d)/g, '$1$2') === String(value);
  if (typeof value === 'string' || typeof value === 'boolean') return plain(cell) === String(value);
  if (Array.isArray(value) && value.length === 0) return plain(cell) === '[]';
  if (value && typeof value === 'object') {
    const entries = Object.entries(value);
    if (entries.length === 0) return plain(cell) === '{}';
    return entries.every(([k, v]) =>
      new RegExp(`\\b${escapeRegExp(k)}\\b[\\s:]+${escapeRegExp(String(v))}(?![\\d.])`).test(
        plain(cell),
      ),
    );
  }
  return false;
}

const markdown = readFileSync(new URL('../../../docs/config.md', import.meta.url), 'utf8');
const leaves: Leaf[] = [];
walk(configSchema, '', leaves);
const documented = documentedDefaults(markdown);

describe('docs/config.md', () => {
  it('walks the whole schema', () => {
    // A walker that stopped early would make every check below vacuous.
    expect(leaves.length).toBeGreaterThan(80);
    expect(leaves.map((l) => l.path)).toEqual(
      expect.arrayContaining([
        'pool',
        'tenants[].token_bucket.refill_per_second',
        'tuner.models.<model>.queue_size',
        'controller.decrease',
        'shutdown.drain_timeout_s',
        'pools[].scheduler',
        'tenants[].models',
      ]),
    );
  });

  it.each(leaves.map((leaf) => [leaf.path, leaf] as const))('documents %s', (_path, leaf) => {
    const cell = documented.get(leaf.path);
    expect(cell, `no row for \`${leaf.path}\` in docs/config.md`).toBeDefined();
    if (leaf.hasDefault) {
      expect(
        statesDefault(cell ?? '', leaf.defaultValue),
        `\`${leaf.path}\`: docs/config.md says ${JSON.stringify(cell)}, the schema's default is ${JSON.stringify(leaf.defaultValue)}`,
      ).toBe(true);
    } else {
      // No default in the schema: the doc must not name a value as if it were one.
      expect(plain(cell ?? ''), `\`${leaf.path}\` has no default in the schema`).not.toMatch(
        /^(-?\d[\d_.,]*|true|false)$/,
      );
    }
  });

  it('has no row for a key the schema does not have', () => {
    const known = new Set(leaves.map((l) => l.path));
    // Section rows (a whole section or object described at once) are allowed.
    const sections = new Set(
      leaves.flatMap((l) => l.path.split('.').map((_, i, parts) => parts.slice(0, i).join('.'))),
    );
    const unknown = [...documented.keys()].filter((key) => !known.has(key) && !sections.has(key));
    expect(unknown).toEqual([]);
  });

  it('holds the settings table as packages/core/src/scheduler-settings.ts has it', () => {
    // The table starts at its header and runs to the first line that is not a row.
    const lines = markdown.split('\n');
    const start = lines.indexOf(SETTINGS_TABLE_HEADER[0] as string);
    expect(start, 'no settings table header in docs/config.md').toBeGreaterThan(0);
    const end = lines.findIndex((line, i) => i > start && !line.startsWith('|'));
    const expected = [...SETTINGS_TABLE_HEADER, ...settingsTableRows()];
    // On a mismatch: `npx tsx --conditions @fairgate/source packages/config/test/settings-doc-table.ts`
    // prints the table to paste.
    expect(lines.slice(start, end)).toEqual(expected);
  });
});
