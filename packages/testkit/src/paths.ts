import { fileURLToPath } from 'node:url';

/**
 * The repository root. This file lives at packages/testkit/{src,dist}/paths.*,
 * so the root is three levels up from both the source and the built copy.
 */
export const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** Absolute path of a built app entry point, e.g. appEntry('vllm-sim'). */
export function appEntry(app: string, file = 'main.js'): string {
  return fileURLToPath(new URL(`../../../apps/${app}/dist/${file}`, import.meta.url));
}
