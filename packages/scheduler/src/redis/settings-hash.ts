import {
  defaultSettings,
  SCHEDULER_SETTINGS,
  type SchedulerSettings,
  type SettingSpec,
  setSettingAt,
  settingAt,
} from '@fairgate/core';

/**
 * The settings as the pool's config hash holds them, one field per row of the settings
 * table (packages/core/src/scheduler-settings.ts): enums as they are, numbers in decimal,
 * flags '1' | '0', band ceilings as a JSON object. lua/includes/config.lua reads the same
 * fields through the include the Lua build generates from that table.
 */

/** field -> encoded value of every setting: configure's one argument (as JSON). */
export function encodeSettings(settings: SchedulerSettings): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const spec of SCHEDULER_SETTINGS) {
    fields[spec.field] = encodeValue(spec, settingAt(settings, spec.path));
  }
  return fields;
}

function encodeValue(spec: SettingSpec, value: unknown): string {
  switch (spec.check.kind) {
    case 'flag':
      return value ? '1' : '0';
    case 'ceilings':
      return JSON.stringify(value);
    default:
      return String(value);
  }
}

/**
 * The settings a config hash holds; null for a pool never configured (no `fairness`). A
 * field the hash lacks (written by a release before it existed) reads as its default.
 */
export function decodeSettings(config: Map<string, string>): SchedulerSettings | null {
  if (config.get('fairness') === undefined) return null;
  const settings = defaultSettings();
  for (const spec of SCHEDULER_SETTINGS) {
    const raw = config.get(spec.field);
    if (raw === undefined || raw === '') continue;
    const value = decodeValue(spec, raw);
    if (value !== undefined) setSettingAt(settings, spec.path, value);
  }
  return settings;
}

/** The value `raw` encodes; undefined (the default then) for an enum value it does not know. */
function decodeValue(spec: SettingSpec, raw: string): unknown {
  const { check } = spec;
  switch (check.kind) {
    case 'enum':
      return check.values.includes(raw) ? raw : undefined;
    case 'flag':
      return raw === '1';
    case 'ceilings':
      return JSON.parse(raw) as Record<string, number>;
    default:
      return Number(raw);
  }
}
