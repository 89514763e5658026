import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { configSchema, type FairgateConfig } from './schema.js';

/** A configuration that cannot be used; the message names the exact key. */
export class ConfigError extends Error {
  constructor(
    message: string,
    /** The offending key as written, e.g. `tenants[1].weight`; '' for the whole file. */
    readonly key: string,
  ) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** `['tenants', 1, 'weight']` -> `tenants[1].weight`. */
export function formatKey(path: readonly PropertyKey[]): string {
  let key = '';
  for (const part of path) {
    if (typeof part === 'number') key += `[${part}]`;
    else key += key ? `.${String(part)}` : String(part);
  }
  return key;
}

function toConfigError(error: z.ZodError, source: string): ConfigError {
  const lines = error.issues.map((issue) => {
    const key = formatKey(issue.path);
    return `  ${key || '(root)'}: ${issue.message}`;
  });
  const first = error.issues[0];
  const key = first ? formatKey(first.path) : '';
  return new ConfigError(`invalid config ${source}:\n${lines.join('\n')}`, key);
}

export const ENV_PREFIX = 'FAIRGATE__';

/**
 * Environment overrides: `FAIRGATE__<KEY>__<KEY>=value` sets a nested key
 * (lower-cased; numeric segments index arrays), e.g.
 * `FAIRGATE__REDIS__URL=redis://127.0.0.1:6379`,
 * `FAIRGATE__SCHEDULER__BUDGET=32`, `FAIRGATE__TENANTS__0__WEIGHT=3`.
 * Values are read as YAML scalars, so numbers and booleans keep their type.
 */
export function applyEnvOverrides(raw: unknown, env: NodeJS.ProcessEnv): unknown {
  const root: Record<string, unknown> =
    raw && typeof raw === 'object' ? structuredClone(raw as Record<string, unknown>) : {};
  const names = Object.keys(env)
    .filter((name) => name.startsWith(ENV_PREFIX))
    .sort();
  for (const name of names) {
    const path = name.slice(ENV_PREFIX.length).toLowerCase().split('__').filter(Boolean);
    if (path.length === 0) continue;
    let node: Record<string, unknown> | unknown[] = root;
    for (const [depth, segment] of path.entries()) {
      const key: string | number = /^\d+$/.test(segment) ? Number(segment) : segment;
      const last = depth === path.length - 1;
      const container = node as Record<string | number, unknown>;
      if (last) {
        container[key] = parseYaml(env[name] ?? '');
        break;
      }
      let next = container[key];
      if (next === undefined) {
        next = /^\d+$/.test(path[depth + 1] ?? '') ? [] : {};
        container[key] = next;
      }
      if (next === null || typeof next !== 'object') {
        throw new ConfigError(
          `environment override ${name}: '${formatKey(path.slice(0, depth + 1))}' is not a section`,
          formatKey(path.slice(0, depth + 1)),
        );
      }
      node = next as Record<string, unknown>;
    }
  }
  return root;
}

/** Validates an already parsed document (after env overrides). */
export function parseConfig(raw: unknown, source = '(inline)'): FairgateConfig {
  const result = configSchema.safeParse(raw);
  if (!result.success) throw toConfigError(result.error, source);
  return result.data;
}

/** Parses YAML text, applies env overrides and validates. */
export function parseConfigText(
  text: string,
  options: { source?: string; env?: NodeJS.ProcessEnv } = {},
): FairgateConfig {
  const source = options.source ?? '(inline)';
  let raw: unknown;
  try {
    raw = parseYaml(text, { prettyErrors: true });
  } catch (cause) {
    throw new ConfigError(`invalid YAML in ${source}: ${(cause as Error).message}`, '');
  }
  return parseConfig(applyEnvOverrides(raw, options.env ?? {}), source);
}

/** Reads and validates a config file; throws ConfigError naming the key. */
export function loadConfigFile(path: string, env: NodeJS.ProcessEnv = process.env): FairgateConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new ConfigError(`cannot read config ${path}: ${(cause as Error).message}`, '');
  }
  return parseConfigText(text, { source: path, env });
}
