import { defineConfig } from 'vitest/config';

// Tests import workspace packages from their TypeScript sources through the
// "@fairgate/source" export condition, so `vitest` needs no build of the library
// packages. Child processes (sims, gateways) run the built dist/ entry points,
// which is why `npm test` builds first.
const sourceConditions = ['@fairgate/source', 'node', 'import', 'default'];

export default defineConfig({
  resolve: { conditions: sourceConditions },
  ssr: { resolve: { conditions: sourceConditions, externalConditions: ['@fairgate/source'] } },
  test: {
    include: ['{apps,packages,loadtest,test}/**/*.test.ts'],
    exclude: ['**/node_modules/**', '**/dist/**'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Two cores: timing-sensitive suites (sim fidelity, fair shares) must not fight each other.
    fileParallelism: true,
    maxWorkers: 2,
  },
});
