import { repoRoot } from '@fairgate/testkit';

/**
 * Built-in scenarios: YAML files under examples/scenarios/ (copy one to start your own).
 */
export const BUILT_IN_NAMES = [
  'steady',
  'burst',
  'mixed_priority',
  'noisy_neighbor',
  'shared_prefix',
  'batch_backfill',
  'sweep',
  'autoscale',
  'unequal_sizes',
  'documents',
];

export function builtInPath(name: string): string | undefined {
  return BUILT_IN_NAMES.includes(name) ? `${repoRoot}examples/scenarios/${name}.yaml` : undefined;
}
