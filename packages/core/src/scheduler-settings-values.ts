import { assertInteger } from './ids.js';
import {
  MAX_BAND,
  SCHEDULER_SETTINGS,
  type SettingCheck,
  type SettingSpec,
} from './scheduler-settings.js';

/**
 * What follows from the settings table (scheduler-settings.ts): the settings type, the
 * defaults, reading and writing a setting by its path, and checking a value.
 */

type Spec = (typeof SCHEDULER_SETTINGS)[number];

/** The value a setting of check C holds. */
export type SettingValueOf<C> = C extends { kind: 'enum'; values: readonly (infer V)[] }
  ? V
  : C extends { kind: 'flag' }
    ? boolean
    : C extends { kind: 'ceilings' }
      ? Record<string, number>
      : number;

type GroupOf<P> = P extends `${infer G}.${string}` ? G : never;
type Simplify<T> = { [K in keyof T]: T[K] } & {};

/** Pool-wide scheduler settings, shared by all replicas through the store. */
export type SchedulerSettings = Simplify<
  {
    [S in Spec as S['path'] extends `${string}.${string}` ? never : S['path']]: SettingValueOf<
      S['check']
    >;
  } & {
    [G in GroupOf<Spec['path']>]: {
      [S in Spec as S['path'] extends `${G}.${infer K}` ? K : never]: SettingValueOf<S['check']>;
    };
  }
>;

/** A setting's path: `quantum` or `admission.policy`. */
export type SettingPath = Spec['path'];

/** The value at `path` of a settings-shaped object (undefined when absent). */
export function settingAt(settings: object, path: string): unknown {
  const [head, key] = path.split('.') as [string, string | undefined];
  const value = (settings as Record<string, unknown>)[head];
  if (key === undefined) return value;
  return value && typeof value === 'object' ? (value as Record<string, unknown>)[key] : undefined;
}

/** Sets the value at `path`, making its group when missing. */
export function setSettingAt(settings: object, path: string, value: unknown): void {
  const [head, key] = path.split('.') as [string, string | undefined];
  const target = settings as Record<string, unknown>;
  if (key === undefined) {
    target[head] = value;
    return;
  }
  target[head] = { ...((target[head] as object | undefined) ?? {}), [key]: value };
}

/** A copy of a default (ceilings are objects: each settings object gets its own). */
const copyOf = (value: SettingSpec['default']): unknown =>
  typeof value === 'object' ? { ...value } : value;

/** The settings with every value at its default. */
export function defaultSettings(): SchedulerSettings {
  const settings = {};
  for (const spec of SCHEDULER_SETTINGS) setSettingAt(settings, spec.path, copyOf(spec.default));
  return settings as SchedulerSettings;
}

export const DEFAULT_SETTINGS: Readonly<SchedulerSettings> = defaultSettings();

/** The settings groups: `admission`, `saturation`, `gating`, `prefix`. */
export const SETTING_GROUPS: readonly string[] = [
  ...new Set(
    SCHEDULER_SETTINGS.flatMap((s) =>
      s.path.includes('.') ? [s.path.split('.')[0] as string] : [],
    ),
  ),
];

/** Throws a TypeError naming `name` when `value` is not one `check` accepts. */
export function checkSetting(name: string, check: SettingCheck, value: unknown): void {
  switch (check.kind) {
    case 'enum':
      if (!check.values.includes(value as string)) {
        throw new TypeError(
          `${name} must be one of ${check.values.join(', ')}, got ${JSON.stringify(value)}`,
        );
      }
      return;
    case 'int':
      assertInteger(name, value, check.min, check.max);
      return;
    case 'number':
      assertNumber(name, value, check);
      return;
    case 'flag':
      if (typeof value !== 'boolean') {
        throw new TypeError(`${name} must be a boolean, got ${JSON.stringify(value)}`);
      }
      return;
    case 'ceilings':
      assertCeilings(name, value);
  }
}

function assertNumber(
  name: string,
  value: unknown,
  range: { min?: number; above?: number; max?: number },
): void {
  const ok =
    typeof value === 'number' &&
    Number.isFinite(value) &&
    (range.min === undefined || value >= range.min) &&
    (range.above === undefined || value > range.above) &&
    (range.max === undefined || value <= range.max);
  if (!ok) {
    throw new TypeError(
      `${name} must be a finite number in ${numberRange(range)}, got ${String(value)}`,
    );
  }
}

/** `[0, 1000]`, `(0, 1]`, `(0, Infinity)`: the interval a number check accepts. */
export function numberRange(range: { min?: number; above?: number; max?: number }): string {
  const low =
    range.above !== undefined ? `(${range.above}` : `[${range.min ?? Number.NEGATIVE_INFINITY}`;
  const high = range.max !== undefined ? `${range.max}]` : 'Infinity)';
  return `${low}, ${high}`;
}

function assertCeilings(name: string, value: unknown): void {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError(`${name} must be an object of band -> ceiling`);
  }
  for (const [band, ceiling] of Object.entries(value)) {
    const number = Number(band);
    if (!/^-?\d+$/.test(band.trim()) || !Number.isInteger(number) || Math.abs(number) > MAX_BAND) {
      throw new TypeError(
        `${name} keys must be integer bands in [-${MAX_BAND}, ${MAX_BAND}], got ${JSON.stringify(band)}`,
      );
    }
    assertNumber(`${name}.${band}`, ceiling, { min: 0 });
  }
}

/** Ceilings with each band written as the integer it is (' 01' -> '1'). */
export function canonicalCeilings(ceilings: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [band, ceiling] of Object.entries(ceilings)) out[String(Number(band))] = ceiling;
  return out;
}

/** The setting's value as the YAML file writes it (its default, say). */
export function yamlValueOf(spec: SettingSpec, value: unknown): unknown {
  if (spec.yamlForm === 'seconds') return (value as number) / 1_000;
  if (spec.yamlForm === 'on-off') return value ? 'on' : 'off';
  return value;
}

/**
 * The setting's value as the scheduler holds it, from the YAML file's value; `bandOf` turns
 * a class name into its band (ceilings `by-class`; a class without a band is dropped).
 */
export function settingValueOfYaml(
  spec: SettingSpec,
  value: unknown,
  bandOf: (className: string) => number | undefined,
): unknown {
  if (spec.yamlForm === 'seconds') return (value as number) * 1_000;
  if (spec.yamlForm === 'on-off') return value === 'on';
  if (spec.yamlForm === 'by-class') {
    const byBand: Record<string, number> = {};
    for (const [name, ceiling] of Object.entries(value as Record<string, number>)) {
      const band = bandOf(name);
      if (band !== undefined) byBand[String(band)] = ceiling;
    }
    return byBand;
  }
  return value;
}

/**
 * Why these settings cannot go together, or undefined. Fairness in tokens orders a band's
 * tenants by service counters, which only the weighted policy (`drr`) and a per-band order
 * use: `round-robin` and `global-strict` ignore weights and costs, and `fifo` serves in
 * arrival order across bands.
 */
export function fairnessUnitConflict(settings: {
  fairnessUnit: string;
  fairness: string;
  dispatchOrder: string;
}): string | undefined {
  if (settings.fairnessUnit !== 'tokens') return undefined;
  if (settings.fairness !== 'drr') {
    return `tokens needs fairness drr: ${settings.fairness} does not share by what tenants are served`;
  }
  if (settings.dispatchOrder === 'fifo') {
    return 'tokens needs dispatch order priority or slo-deadline: fifo serves in arrival order, not by service';
  }
  return undefined;
}
