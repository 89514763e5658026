import { defineConfig } from 'vitest/config';

// Tests import workspace packages from their TypeScript sources through the
// "@fairgate/source" export condition, so `vitest` needs no build of the library
// packages. Child processes (sims, gateways) run the built dist/ entry points,
// which is why `npm test` builds first.
const sourceConditions = ['@fairgate/source', 'node', 'import', 'default'];

/**
 * Suites that judge timing against the wall clock (shares over a window, failover within a
 * bound, p99 against a baseline, memory under load). On two cores they fail when a
 * CPU-bound file (the scheduler differential, the tuner harness) runs beside them, so they
 * run after every other file, one at a time.
 */
const TIMING_SENSITIVE = [
  'test/chaos/local-share.test.ts',
  'test/chaos/sentinel.test.ts',
  'test/dispatch-order.test.ts',
  'test/admission-policies.test.ts',
  'test/controller-closed-loop.test.ts',
  'test/slow-clients.test.ts',
  'test/stream-backpressure.test.ts',
  'test/batch-backfill.test.ts',
  'apps/gateway/test/http-edge.test.ts',
  // TTFT and inter-token gaps within 10% of the sim's model: a CPU-bound file beside it
  // made a 170 ms TTFT read 188 ms in CI.
  'apps/vllm-sim/test/fidelity.test.ts',
];

export default defineConfig({
  resolve: { conditions: sourceConditions },
  ssr: { resolve: { conditions: sourceConditions, externalConditions: ['@fairgate/source'] } },
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      {
        extends: true,
        test: {
          name: 'parallel',
          include: ['{apps,packages,loadtest,test}/**/*.test.ts'],
          exclude: ['**/node_modules/**', '**/dist/**', ...TIMING_SENSITIVE],
          fileParallelism: true,
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'timing',
          include: TIMING_SENSITIVE,
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
