import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
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

/**
 * The first executable `name` in the PATH's directories, then in `extraDirs`; undefined
 * when there is none.
 */
export function findExecutable(
  name: string,
  extraDirs: readonly string[] = [],
): string | undefined {
  const dirs = (process.env.PATH ?? '').split(delimiter).concat(extraDirs).filter(Boolean);
  for (const dir of dirs) {
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // keep looking
    }
  }
  return undefined;
}
