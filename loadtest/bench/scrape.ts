/**
 * Benchmark: what the leader's scrape of one pod's /metrics costs the gateway.
 *
 *   npm run bench:scrape -w @fairgate/loadtest
 *
 * The leader scrapes every pod every `scrape.interval_ms` (100 ms by default): with 20 pods,
 * 200 scrapes a second, each a stall of the event loop. This measures one scrape of a sim's
 * /metrics as the gateway makes it (`fetchMetrics`: undici's request()) against the global
 * fetch(), in alternating rounds: this process's CPU and wall time per scrape, sequential,
 * after a warm-up, and the ratio of the medians.
 *
 * Environment: BENCH_SCRAPES (per round, 2000), BENCH_ROUNDS (3).
 */
import { fetchMetrics, type MetricsFetcher } from '@fairgate/gateway';
import { startSim } from '@fairgate/testkit';
import { median } from './harness/report.js';
import { envNumber, runBench } from './harness/stack.js';

const SCRAPES = envNumber('BENCH_SCRAPES', 2_000);
const ROUNDS = envNumber('BENCH_ROUNDS', 3);
const WARMUP = 300;
const TIMEOUT_MS = 500;

/** The same scrape through the global fetch(), its web Response and stream. */
const viaFetch: MetricsFetcher = async (url, timeoutMs) => {
  const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  if (!response.ok) {
    await response.body?.cancel();
    throw new Error(`GET ${url}: ${response.status}`);
  }
  return response.text();
};

const WAYS: Array<[string, MetricsFetcher]> = [
  ['fetchMetrics (undici request)', fetchMetrics],
  ['global fetch()', viaFetch],
];

/** CPU and wall µs per scrape over SCRAPES sequential scrapes. */
async function timeScrapes(url: string, scrape: MetricsFetcher) {
  const cpu = process.cpuUsage();
  const started = performance.now();
  for (let i = 0; i < SCRAPES; i++) await scrape(url, TIMEOUT_MS);
  const used = process.cpuUsage(cpu);
  return {
    cpuUs: (used.user + used.system) / SCRAPES,
    wallUs: ((performance.now() - started) * 1_000) / SCRAPES,
  };
}

await runBench(async () => {
  const sim = await startSim();
  const url = new URL('/metrics', sim.url).href;
  const bytes = (await fetchMetrics(url, TIMEOUT_MS)).length;
  for (const [, scrape] of WAYS) for (let i = 0; i < WARMUP; i++) await scrape(url, TIMEOUT_MS);
  const runs = new Map<string, Array<{ cpuUs: number; wallUs: number }>>();
  for (let round = 1; round <= ROUNDS; round++) {
    for (const [name, scrape] of WAYS) {
      const run = await timeScrapes(url, scrape);
      runs.set(name, [...(runs.get(name) ?? []), run]);
      const figures = `${run.cpuUs.toFixed(0)} µs CPU, ${run.wallUs.toFixed(0)} µs wall`;
      console.log(`round ${round}/${ROUNDS} ${name}: ${figures} per scrape`);
    }
  }
  console.log(
    `\nscrape of one pod's /metrics (${bytes} bytes, vllm-sim), ${SCRAPES} sequential scrapes per round, median of ${ROUNDS} rounds`,
  );
  const summary = WAYS.map(([name]) => ({
    name,
    cpuUs: median(runs.get(name)!.map((r) => r.cpuUs)),
    wallUs: median(runs.get(name)!.map((r) => r.wallUs)),
  }));
  for (const { name, cpuUs, wallUs } of summary) {
    const cpu = cpuUs.toFixed(0).padStart(5);
    console.log(`  ${name.padEnd(30)} ${cpu} µs CPU  ${wallUs.toFixed(0).padStart(5)} µs wall`);
  }
  const ratio = (summary[0]!.cpuUs / summary[1]!.cpuUs).toFixed(2);
  console.log(
    `CPU per scrape, fetchMetrics / fetch(): ${ratio} (this process only; the sim runs in its own)`,
  );
});
