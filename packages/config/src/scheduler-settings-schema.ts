import {
  SCHEDULER_SETTINGS,
  type SettingCheck,
  type SettingSpec,
  type SettingValueOf,
  yamlValueOf,
} from '@fairgate/core';
import { z } from 'zod';

/**
 * The zod schema of every scheduler and pool setting the YAML file has a key for, made from
 * the settings table (packages/core/src/scheduler-settings.ts): its range, and its default
 * as the file writes it. Each section's schema in schema.ts spreads its keys from here.
 */

type Spec = (typeof SCHEDULER_SETTINGS)[number];

/** A setting's value as the YAML file writes it. */
type YamlValue<S extends Spec> = S extends { yamlForm: 'on-off' }
  ? 'on' | 'off'
  : SettingValueOf<S['check']>;

/** A setting's key directly in the section (`scheduler.quantum`: `quantum`). */
type KeyIn<S extends Spec, Section extends string> = S['yaml'] extends `${Section}.${infer K}`
  ? K extends `${string}.${string}`
    ? never
    : K
  : never;

/** A sub-object of the section holding settings (`scheduler.token_weights.input`). */
type ObjectIn<S extends Spec, Section extends string> = S extends unknown
  ? S['yaml'] extends `${Section}.${infer O}.${string}`
    ? O
    : never
  : never;

/** A setting's key inside sub-object O of the section. */
type KeyInObject<
  S extends Spec,
  Section extends string,
  O extends string,
> = S['yaml'] extends `${Section}.${O}.${infer K}` ? K : never;

type SettingSchema<S extends Spec> = z.ZodDefault<z.ZodType<YamlValue<S>, YamlValue<S>>>;

/** The zod shape of a section's setting keys (and of its sub-objects of settings). */
export type SettingsShape<Section extends string> = {
  [S in Spec as KeyIn<S, Section>]: SettingSchema<S>;
} & {
  [O in ObjectIn<Spec, Section>]: z.ZodDefault<
    z.ZodObject<{ [S in Spec as KeyInObject<S, Section, O>]: SettingSchema<S> }>
  >;
};

/** The YAML value's schema without its default. */
function valueSchema(spec: SettingSpec): z.ZodType {
  const check: SettingCheck = spec.check;
  switch (check.kind) {
    case 'enum':
      return z.enum(check.values as [string, ...string[]]);
    case 'flag':
      return spec.yamlForm === 'on-off' ? z.enum(['on', 'off']) : z.boolean();
    case 'ceilings':
      // by-class: keyed by SLO class name (schema.ts checks the names are classes).
      return z.record(
        z.string(),
        spec.fileBound?.above === undefined
          ? z.number().min(0)
          : z.number().gt(spec.fileBound.above),
      );
    case 'int': {
      const scale = spec.yamlForm === 'seconds' ? 1_000 : 1;
      const int = z
        .number()
        .int()
        .min(spec.fileBound?.min ?? check.min / scale);
      return check.max === undefined ? int : int.max(check.max / scale);
    }
    case 'number': {
      let number = z.number();
      if (check.min !== undefined) number = number.min(check.min);
      if (check.above !== undefined) number = number.gt(check.above);
      if (check.max !== undefined) number = number.max(check.max);
      return number;
    }
  }
}

/** The setting keys of YAML section `section` (`scheduler`, `admission`, ...), in table order. */
export function settingsShape<Section extends string>(section: Section): SettingsShape<Section> {
  const shape: Record<string, z.ZodType> = {};
  const objects = new Map<string, Record<string, z.ZodType>>();
  for (const spec of SCHEDULER_SETTINGS as readonly SettingSpec[]) {
    const [specSection, key, inner] = (spec.yaml ?? '').split('.');
    if (specSection !== section || key === undefined) continue;
    const schema = valueSchema(spec).default(yamlValueOf(spec, spec.default));
    if (inner === undefined) {
      shape[key] = schema;
      continue;
    }
    const object = objects.get(key) ?? {};
    object[inner] = schema;
    objects.set(key, object);
  }
  // A sub-object's keys each have their default, so the object defaults to {} made whole.
  for (const [key, object] of objects) {
    shape[key] = z.strictObject(object).default(() => z.strictObject(object).parse({}) as never);
  }
  return shape as unknown as SettingsShape<Section>;
}
