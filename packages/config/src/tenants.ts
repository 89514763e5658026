import type { z } from 'zod';
import { ConfigError, formatKey } from './load.js';
import {
  type FairgateConfig,
  servedModels,
  type TenantConfig,
  tenantProblems,
  tenantSchema,
} from './schema.js';

const runtimeTenantSchema = tenantSchema.omit({ api_key_sha256: true });

/**
 * A tenant created at run time (the admin API): the config file's `tenants[]` entry without
 * `api_key_sha256` (its keys are made by the API), checked against the config in force as a
 * file tenant is (its classes known, its models served). Throws a ConfigError naming the key
 * (`default_class`, `quotas.max_concurrent`, ...).
 */
export function parseRuntimeTenant(config: FairgateConfig, raw: unknown): TenantConfig {
  const result = runtimeTenantSchema.safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0] as z.core.$ZodIssue;
    const key = formatKey(issue.path);
    throw new ConfigError(`${key || 'tenant'}: ${issue.message}`, key);
  }
  const tenant: TenantConfig = { ...result.data, api_key_sha256: [] };
  const [problem] = tenantProblems(config.slo_classes, servedModels(config.pools), tenant);
  if (problem) {
    const key = formatKey(problem.path);
    throw new ConfigError(`${key}: ${problem.message}`, key);
  }
  return tenant;
}
