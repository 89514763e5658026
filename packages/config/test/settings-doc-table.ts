import { numberRange, SCHEDULER_SETTINGS, type SettingSpec, yamlValueOf } from '@fairgate/core';

/**
 * The scheduler and pool settings table of docs/config.md, rendered from the settings table
 * (packages/core/src/scheduler-settings.ts). docs.test.ts checks the doc holds exactly
 * these rows; `npx tsx --conditions @fairgate/source packages/config/test/settings-doc-table.ts` prints them.
 */

export const SETTINGS_TABLE_HEADER = [
  '| key | default | validation | Redis field | type | meaning |',
  '| --- | --- | --- | --- | --- | --- |',
];

const code = (text: string) => `\`${text}\``;

function defaultCell(spec: SettingSpec): string {
  const value = spec.yaml === null ? spec.default : yamlValueOf(spec, spec.default);
  if (typeof value === 'string') return code(value);
  if (typeof value === 'object') return code(JSON.stringify(value));
  return String(value);
}

const atLeast = (min: number) => `integer >= ${min}`;

/** What the YAML file accepts (and, where it is wider, the scheduler's API). */
function validationCell(spec: SettingSpec): string {
  const { check } = spec;
  const file = spec.yaml !== null;
  switch (check.kind) {
    case 'enum':
      return `one of ${check.values.map(code).join(', ')}`;
    case 'flag':
      return spec.yamlForm === 'on-off' ? `${code('on')} or ${code('off')}` : 'boolean';
    case 'ceilings': {
      const bound = spec.fileBound?.above !== undefined ? `> ${spec.fileBound.above}` : '>= 0';
      return `class -> ceiling ${bound} (API: band -> ceiling >= 0)`;
    }
    case 'int': {
      const scale = file && spec.yamlForm === 'seconds' ? 1_000 : 1;
      const min = check.min / scale;
      const range =
        check.max === undefined ? atLeast(min) : `integer in [${min}, ${check.max / scale}]`;
      const unit = scale === 1 ? '' : ' (s)';
      const fileMin = file ? spec.fileBound?.min : undefined;
      return fileMin === undefined ? `${range}${unit}` : `${atLeast(fileMin)} (API: ${range})`;
    }
    case 'number':
      return `number in ${numberRange(check)}`;
  }
}

const TYPES: Record<SettingSpec['check']['kind'], string> = {
  enum: 'string',
  int: 'integer',
  number: 'number',
  flag: "'1' or '0'",
  ceilings: 'JSON band -> ceiling',
};

export function settingsTableRows(): string[] {
  return (SCHEDULER_SETTINGS as readonly SettingSpec[]).map((spec) => {
    const key = spec.yaml === null ? `— (API \`${spec.path}\`)` : code(spec.yaml);
    const cells = [
      key,
      defaultCell(spec),
      validationCell(spec),
      code(spec.field),
      TYPES[spec.check.kind],
      spec.doc,
    ];
    if (spec.yamlForm === 'seconds') cells[4] = `${cells[4]} (ms)`;
    return `| ${cells.join(' | ')} |`;
  });
}

if (process.argv[1]?.endsWith('settings-doc-table.ts')) {
  console.log([...SETTINGS_TABLE_HEADER, ...settingsTableRows()].join('\n'));
}
