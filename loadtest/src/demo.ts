#!/usr/bin/env node
/**
 * `npm run demo` — the main job, for now: a small fairgate stack on this
 * machine and a short contended run through it.
 *
 * - a private redis-server when one is installed (else the embedded
 *   single-replica scheduler, and it says so), 2 simulated vLLM pods and 3
 *   gateway replicas (1 when embedded), all on free loopback ports;
 * - examples/two-tenants.yaml: tenant `paying` (weight 2) and tenant `free`
 *   (weight 1), sent through different replicas, both asking for more than the
 *   budget at the same SLO class;
 * - prints what each tenant got, the shares, the gateway-measured TTFT, and the
 *   pool state, then shuts everything down (also on Ctrl-C: no orphans).
 *
 * Flags: --seconds N (default 15). The load generator issue replaces the load
 * loop with scenarios, live tables and reports.
 */
import { parseArgs } from 'node:util';
import {
  type AppHandle,
  findRedisServer,
  type RedisHandle,
  repoRoot,
  startGatewayProcess,
  startRedis,
  startSim,
  stopAll,
} from '@fairgate/testkit';

const KEYS = { paying: 'fg-dev-paying', free: 'fg-dev-free', admin: 'fg-dev-admin' } as const;
const CONCURRENCY_PER_TENANT = 24;

interface TenantStats {
  ok: number;
  dropped: number;
  failed: number;
  ttftMs: number[];
}

async function streamOnce(url: string, apiKey: string, stats: TenantStats): Promise<void> {
  const started = performance.now();
  try {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${apiKey}`,
        'content-type': 'application/json',
        'x-slo-class': 'batch',
      },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'Summarize fair queueing in one line.' }],
        max_tokens: 24,
        stream: true,
      }),
    });
    if (response.status === 429) {
      stats.dropped++;
      await response.arrayBuffer();
      await new Promise((resolve) => setTimeout(resolve, 50));
      return;
    }
    if (!response.ok || !response.body) {
      stats.failed++;
      await response.arrayBuffer();
      return;
    }
    let first = true;
    for await (const _chunk of response.body) {
      if (first) {
        stats.ttftMs.push(performance.now() - started);
        first = false;
      }
    }
    stats.ok++;
  } catch {
    stats.failed++;
  }
}

function percentile(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { seconds: { type: 'string', default: '15' } } });
  const seconds = Number(values.seconds);
  if (!Number.isFinite(seconds) || seconds <= 0 || seconds > 3_600)
    throw new Error('--seconds must be 1..3600');

  let redis: RedisHandle | undefined;
  if (findRedisServer() || process.env.REDIS_URL) {
    redis = await startRedis();
    console.log(`redis:    ${redis.url} (${redis.source})`);
  } else {
    console.log(
      'redis:    redis-server not installed: running ONE replica on the embedded scheduler',
    );
  }
  const sims = await Promise.all(
    [0, 1].map(() =>
      startSim({
        args: { 'alpha-ms': 12, 'beta-ms': 0.02, 'max-num-seqs': 16, model: 'sim-model' },
      }),
    ),
  );
  console.log(`pods:     ${sims.map((s) => s.url).join(', ')}`);
  const config = `${repoRoot}examples/two-tenants.yaml`;
  const env: Record<string, string> = {
    FAIRGATE__PODS__0__URL: sims[0]!.url,
    FAIRGATE__PODS__1__URL: sims[1]!.url,
    FAIRGATE__PODS__0__CAP: '12',
    FAIRGATE__PODS__1__CAP: '12',
    FAIRGATE__SCHEDULER__BUDGET: '16',
    FAIRGATE__SCHEDULER__QUEUE_TTL_MS: '5000',
    ...(redis ? { FAIRGATE__REDIS__URL: redis.url, FAIRGATE__POOL: `demo${process.pid}` } : {}),
  };
  if (!redis) env.FAIRGATE__REDIS = 'null';
  const replicas = redis ? 3 : 1;
  const gateways: AppHandle[] = [];
  for (let n = 1; n <= replicas; n++) {
    gateways.push(await startGatewayProcess({ config, replicaId: `demo-replica-${n}`, env }));
  }
  console.log(`gateways: ${gateways.map((g) => g.url).join(', ')}`);
  const [viaPaying, viaFree] = [gateways[0]!, gateways[Math.min(1, gateways.length - 1)]!];
  console.log(
    `\nrunning ${seconds}s: tenant paying (weight 2) via ${viaPaying.url}, tenant free (weight 1) via ${viaFree.url},` +
      ` ${CONCURRENCY_PER_TENANT} streams each, budget 16\n`,
  );

  const stats = {
    paying: { ok: 0, dropped: 0, failed: 0, ttftMs: [] } as TenantStats,
    free: { ok: 0, dropped: 0, failed: 0, ttftMs: [] } as TenantStats,
  };
  const deadline = Date.now() + seconds * 1_000;
  const loop = async (url: string, key: string, s: TenantStats) => {
    while (Date.now() < deadline) await streamOnce(url, key, s);
  };
  const progress = setInterval(() => {
    process.stdout.write(
      `\r  paying: ${String(stats.paying.ok).padStart(5)} served   free: ${String(stats.free.ok).padStart(5)} served`,
    );
  }, 1_000);
  await Promise.all([
    ...Array.from({ length: CONCURRENCY_PER_TENANT }, () =>
      loop(viaPaying.url, KEYS.paying, stats.paying),
    ),
    ...Array.from({ length: CONCURRENCY_PER_TENANT }, () =>
      loop(viaFree.url, KEYS.free, stats.free),
    ),
  ]);
  clearInterval(progress);

  const total = stats.paying.ok + stats.free.ok;
  console.log('\n\ntenant   served  share   dropped  failed  p50 TTFT  p99 TTFT');
  for (const [name, s] of Object.entries(stats)) {
    console.log(
      `${name.padEnd(8)} ${String(s.ok).padStart(6)}  ${((100 * s.ok) / Math.max(1, total)).toFixed(1).padStart(5)}%` +
        `  ${String(s.dropped).padStart(7)}  ${String(s.failed).padStart(6)}` +
        `  ${percentile(s.ttftMs, 0.5).toFixed(0).padStart(6)}ms  ${percentile(s.ttftMs, 0.99).toFixed(0).padStart(6)}ms`,
    );
  }
  const state = (await (
    await fetch(`${viaPaying.url}/admin/state`, {
      headers: { authorization: `Bearer ${KEYS.admin}` },
    })
  ).json()) as { budget: number; inflight: number; replicas: unknown[]; mode: string };
  console.log(
    `\npool: ${state.mode} scheduler, budget ${state.budget}, in flight now ${state.inflight}, ` +
      `${state.replicas.length} replica(s) registered; weights 2:1 -> expected paying share 66.7%`,
  );
}

let stopping = false;
async function shutdown(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    await stopAll();
  }
  process.exit(code);
}
process.once('SIGINT', () => void shutdown(130));
process.once('SIGTERM', () => void shutdown(143));

main()
  .then(() => shutdown(0))
  .catch(async (error: unknown) => {
    console.error(error);
    await shutdown(1);
  });
