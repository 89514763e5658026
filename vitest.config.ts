import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

// Tests import workspace packages from their TypeScript sources through the
// "@fairgate/source" export condition, so `vitest` needs no build of the library
// packages. Child processes (sims, gateways) run the built dist/ entry points,
// which is why `npm test` builds first.
const sourceConditions = ['@fairgate/source', 'node', 'import', 'default'];

/**
 * Suites that judge timing against the wall clock (shares over a window, failover within a
 * bound, p99 against a baseline, memory under load). On two cores they fail when a
 * CPU-bound file (the scheduler differential, the tuner harness) runs beside them, so they
 * run after every other file, two at a time: each spends well under one core (the tuner
 * ~15%, the batch backfill and the closed loop ~30-50% of two), so a pair leaves the
 * machine idle enough for the other's timers.
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
  // Paying's p99 TTFT against its 500 ms target (~190 ms alone): beside a CPU-bound file a
  // CI run read 502 ms.
  'test/noisy-neighbour.test.ts',
  // A new pod's first request within 2 x discovery.refresh_ms of the DNS edit, the budget
  // within 2 controller ticks: beside CPU-bound files a first request read 926 ms against
  // an 800 ms bound (refresh_ms 400).
  'test/discovery.test.ts',
  // TTFT and inter-token gaps within 10% of the sim's model: a CPU-bound file beside it
  // made a 170 ms TTFT read 188 ms in CI.
  'apps/vllm-sim/test/fidelity.test.ts',
  // alpha, beta and lambda* within 10/15/15% of the sims' truth: the sims' latencies are the
  // filter's input, and beside the parallel files a CI run read beta +15.3%.
  'test/tuner.test.ts',
];

/**
 * The parallel project's longest files, longest first (seconds in one full run on a 2-core
 * VM). The workers take files in order; a clean clone has no duration cache, so vitest
 * would order them by file size, and a long file started late runs alone at the end.
 * Started first, the rest packs around them.
 */
const LONGEST_FIRST = [
  'test/token-fairness.test.ts', // 130, four 25 s runs of 3 replicas and 4 sims
  'packages/scheduler/test/differential.test.ts', // 20-30, CPU-bound
  'loadtest/test/tuner-harness.test.ts', // 16-28, CPU-bound
  'test/chaos/redis-restart.test.ts', // 48
  'test/ops/prometheus.test.ts', // 45
  'packages/scheduler/test/cluster.test.ts', // 45
  'test/multi-replica.test.ts', // 39
  'loadtest/test/autoscale-stack.test.ts', // 33, mostly waiting
  'loadtest/test/unequal-sizes.test.ts', // 35, two runs of 3 replicas and 4 sims
  'test/chaos/redis-faults.test.ts', // 34
  'test/drain.test.ts', // 28
  'test/flow-control.test.ts', // 27
  'packages/scheduler/test/redis.test.ts', // 24
  'loadtest/test/batch-stack.test.ts', // 14-20
  'loadtest/test/shutdown.test.ts', // 16-18
  'test/controller-failover.test.ts', // 15
  // The timing group's, on its own two workers: the backfill beside the tuner, then beside
  // the closed loop.
  'test/batch-backfill.test.ts', // 105
  'test/tuner.test.ts', // 66
  'test/controller-closed-loop.test.ts', // 57
];

/** vitest's own order (groups, then its cache or file size), the files above first. */
class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (file: TestSpecification) => {
      const at = LONGEST_FIRST.findIndex((path) => file.moduleId.endsWith(`/${path}`));
      return at === -1 ? LONGEST_FIRST.length : at;
    };
    const group = (file: TestSpecification) => file.project.config.sequence.groupOrder;
    // Array.prototype.sort is stable: ties keep vitest's order.
    return (await super.sort(files)).sort((a, b) => group(a) - group(b) || rank(a) - rank(b));
  }
}

export default defineConfig({
  resolve: { conditions: sourceConditions },
  ssr: { resolve: { conditions: sourceConditions, externalConditions: ['@fairgate/source'] } },
  test: {
    sequence: { sequencer: LongestFirst },
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
          // Three: the group keeps two cores ~95% busy (two left them ~80% busy while
          // files waited on restarts, failovers and load phases).
          maxWorkers: 3,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'timing',
          include: TIMING_SENSITIVE,
          fileParallelism: true,
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
