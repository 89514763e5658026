/**
 * Benchmark: what the leader's scrape of one pod's /metrics costs the gateway.
 *
 *   npm run bench:scrape -w @fairgate/loadtest
 *
 * The leader scrapes every pod every `scrape.interval_ms` (100 ms by default), so a
 * gateway leading a pool of 20 pods makes 200 scrapes a second, each a stall of the event
 * loop every request of that replica may wait behind. This measures one scrape of a
 * simulated vLLM pod (apps/vllm-sim in its own process, its real /metrics text) as the
 * gateway makes it (`fetchMetrics`: undici's request()) against the same scrape with the
 * global fetch() (what the scraper used before), in alternating rounds of the same run:
 * this process's CPU (user + system, /proc via process.cpuUsage) and the wall time per
 * scrape, sequential, after a warm-up; the ratio is the summary.
 *
 * Environment: BENCH_SCRAPES (per round, default 2,000), BENCH_ROUNDS (default 3).
 */
import { fetchMetrics, type MetricsFetcher } from '@fairgate/gateway';
import { startSim } from '@fairgate/testkit';
import { percentile } from '../src/load/stats.js';

const SCRAPES = Number(process.env.BENCH_SCRAPES ?? 2_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WARMUP = 300;
const TIMEOUT_MS = 500;

/** The scrape as it was made before: the global fetch(), its web Response and stream. */
const viaFetch: MetricsFetcher = async (url, timeoutMs) => {
  const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  if (!response.ok) {
    await response.body?.cancel();
    throw new Error(`GET ${url}: ${response.status}`);
  }
  return response.text();
};

const ways: Array<[string, MetricsFetcher]> = [
  ['fetchMetrics (undici request)', fetchMetrics],
  ['global fetch()', viaFetch],
];

const sim = await startSim();
try {
  const url = new URL('/metrics', sim.url).href;
  const bytes = (await fetchMetrics(url, TIMEOUT_MS)).length;
  const results = new Map<string, Array<{ cpuUs: number; wallUs: number }>>();
  for (const [name, scrape] of ways) {
    for (let i = 0; i < WARMUP; i++) await scrape(url, TIMEOUT_MS);
    results.set(name, []);
  }
  for (let round = 1; round <= ROUNDS; round++) {
    for (const [name, scrape] of ways) {
      const cpu = process.cpuUsage();
      const started = performance.now();
      for (let i = 0; i < SCRAPES; i++) await scrape(url, TIMEOUT_MS);
      const wallUs = ((performance.now() - started) * 1_000) / SCRAPES;
      const used = process.cpuUsage(cpu);
      const cpuUs = (used.user + used.system) / SCRAPES;
      results.get(name)?.push({ cpuUs, wallUs });
      console.log(
        `round ${round}/${ROUNDS} ${name}: ${cpuUs.toFixed(0)} µs CPU, ${wallUs.toFixed(0)} µs wall per scrape`,
      );
    }
  }
  console.log(
    `\nscrape of one pod's /metrics (${bytes} bytes, vllm-sim), ${SCRAPES} sequential scrapes per round, median of ${ROUNDS} rounds`,
  );
  const summary = ways.map(([name]) => {
    const rows = results.get(name) ?? [];
    return {
      name,
      cpuUs: percentile(
        rows.map((r) => r.cpuUs),
        0.5,
      ),
      wallUs: percentile(
        rows.map((r) => r.wallUs),
        0.5,
      ),
    };
  });
  for (const row of summary) {
    console.log(
      `  ${row.name.padEnd(30)} ${row.cpuUs.toFixed(0).padStart(5)} µs CPU  ${row.wallUs.toFixed(0).padStart(5)} µs wall`,
    );
  }
  const [used, before] = summary as [(typeof summary)[0], (typeof summary)[0]];
  console.log(
    `CPU per scrape, fetchMetrics / fetch(): ${(used.cpuUs / before.cpuUs).toFixed(2)} (this process only; the sim runs in its own)`,
  );
} finally {
  await sim.stop();
}
