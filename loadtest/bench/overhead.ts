/**
 * Benchmark: what one gateway replica adds on top of a pod.
 *
 *   npm run bench:overhead -w @fairgate/loadtest
 *
 * A zero-latency sim (alpha = beta = gamma = 0) on loopback, reached directly
 * (the baseline) and through one gateway replica with Redis, non-streaming
 * chat completions of 1 token, at concurrency 1 and 16. Prints p50/p99
 * latency, req/s, the added latency and the throughput ratio, all measured in
 * this run. Each phase is bounded by a request count and a time limit.
 */
import {
  type AppHandle,
  startGatewayProcess,
  startRedis,
  startSim,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { Pool } from 'undici';

const WARMUP = 500;
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 6_000);
const TIME_LIMIT_MS = 15_000;

const body = JSON.stringify({
  model: 'sim-model',
  messages: [{ role: 'user', content: 'hi' }],
  max_tokens: 1,
});

interface PhaseResult {
  p50: number;
  p99: number;
  rps: number;
  errors: number;
}

async function phase(
  url: string,
  concurrency: number,
  count: number,
  auth: boolean,
): Promise<PhaseResult> {
  const pool = new Pool(url, { connections: concurrency, pipelining: 1 });
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (auth) headers.authorization = `Bearer ${TEST_KEYS.paying}`;
  const latencies: number[] = [];
  let errors = 0;
  let issued = 0;
  const deadline = performance.now() + TIME_LIMIT_MS;
  const started = performance.now();
  const worker = async () => {
    while (issued < count && performance.now() < deadline) {
      issued++;
      const t0 = performance.now();
      try {
        const response = await pool.request({
          method: 'POST',
          path: '/v1/chat/completions',
          headers,
          body,
        });
        await response.body.dump();
        if (response.statusCode !== 200) errors++;
      } catch {
        errors++;
      }
      latencies.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const elapsed = performance.now() - started;
  await pool.close();
  latencies.sort((a, b) => a - b);
  const at = (q: number) =>
    latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? Number.NaN;
  return { p50: at(0.5), p99: at(0.99), rps: (latencies.length / elapsed) * 1_000, errors };
}

async function measure(url: string, concurrency: number, auth: boolean): Promise<PhaseResult> {
  await phase(url, concurrency, WARMUP, auth);
  return phase(url, concurrency, REQUESTS, auth);
}

async function main(): Promise<void> {
  const redis = await startRedis();
  let sim: AppHandle | undefined;
  try {
    sim = await startSim({
      args: { 'alpha-ms': 0, 'beta-ms': 0, 'gamma-ms': 0, model: 'sim-model' },
    });
    const pods = [{ name: 'pod-a', url: sim.url, cap: 64 }];
    // Each gateway runs in its own process (built dist/), as deployed.
    const withRedis = await startGatewayProcess({
      config: writeGatewayConfig({ redisUrl: redis.url, budget: 64, pods }),
      replicaId: 'bench-redis',
    });
    const embedded = await startGatewayProcess({
      config: writeGatewayConfig({ budget: 64, pods }),
      replicaId: 'bench-embedded',
    });
    const rows: string[] = [];
    const fmt = (n: number) => n.toFixed(3).padStart(7);
    rows.push(
      'c  | path              | p50 ms  | p99 ms  | added p50 | added p99 | req/s | vs direct',
    );
    for (const concurrency of [1, 16]) {
      const direct = await measure(sim.url, concurrency, false);
      const line = (name: string, r: PhaseResult) =>
        `${String(concurrency).padEnd(2)} | ${name.padEnd(17)} | ${fmt(r.p50)} | ${fmt(r.p99)} |` +
        ` ${fmt(r.p50 - direct.p50)}   | ${fmt(r.p99 - direct.p99)}   | ${r.rps.toFixed(0).padStart(5)} |` +
        ` ${(r.rps / direct.rps).toFixed(2)}${r.errors > 0 ? `  (${r.errors} errors)` : ''}`;
      rows.push(line('direct to sim', direct));
      rows.push(line('gateway, Redis', await measure(withRedis.url, concurrency, true)));
      rows.push(line('gateway, embedded', await measure(embedded.url, concurrency, true)));
    }
    console.log(
      `\noverhead benchmark: ${REQUESTS} non-streaming requests per phase, zero-latency sim\n`,
    );
    console.log(rows.join('\n'));
    console.log('\ngoals: added p50 <= 0.5 ms; gateway >= 3,000 req/s at c=16');
  } finally {
    await stopAll();
    await redis.stop();
  }
}

process.once('SIGINT', () => void stopAll().then(() => process.exit(130)));
await main();
