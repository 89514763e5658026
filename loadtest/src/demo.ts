#!/usr/bin/env node
/**
 * `npm run demo` — the main job: fairgate on a stack of its own and the noisy_neighbor
 * scenario through it, with the live table, then the summary and the report.
 *
 * It is `fairgate-load noisy_neighbor --stack` (loadtest/src/load, docs/load.md):
 * - a private redis-server when one is installed (else the embedded single-replica
 *   scheduler, and it says so), 2 simulated vLLM pods and 3 gateway replicas (1 when
 *   embedded), all on free 127.0.0.1 ports;
 * - examples/scenarios/noisy_neighbor.yaml: a free tier (weight 1, sheddable class) asking
 *   for more than the pods can serve all along, a paying tenant (weight 2, SLO-protected)
 *   bursting in the middle third, through different replicas;
 * - prints the summary (per tenant: offered, served, drops, TTFT; throughput against the
 *   pods' capacity) and the report's path, then shuts everything down, also on Ctrl-C or
 *   SIGTERM (no orphans: testkit kills every child on those signals).
 *
 * Flags: --seconds N (default 60) and any other fairgate-load flag, e.g. --baseline.
 */
import { runCli } from './load/main.js';

runCli(['noisy_neighbor', '--stack', ...process.argv.slice(2)])
  .then((outcome) => process.exit(outcome.code))
  .catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
