import { poolKeys } from '@fairgate/scheduler';
import {
  type AppHandle,
  type RedisClusterHandle,
  type RedisHandle,
  sha256Hex,
  startGatewayProcess,
  startRedis,
  startRedisCluster,
  startSim,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate, poolPeakConcurrency } from './support/pool.js';

/**
 * Three gateway processes share one Redis (a redis-server, then a 3-master Redis Cluster)
 * and two sims. Tenant paying (weight 2) sends only through replica 1, tenant free
 * (weight 1) only through replica 2; replica 3 serves nobody but takes part in the shared
 * state. Both tenants offer more than the budget, so grants follow the weights across
 * replicas.
 */
const BUDGET = 8;
/**
 * Four times the budget per tenant: at twice it, a loaded 2-core CI VM slowed the paying
 * replica's clients enough that its queue ran dry now and then, and a work-conserving pool
 * rightly gave its turns to the free tier (paying shares of 60.1% and 55.1% in one run).
 */
const CONCURRENCY_PER_TENANT = 4 * BUDGET;
/**
 * The window the shares are counted over: with 32 clients a tenant, the cluster variant
 * granted 578 in 8 s in one CI run (72/s), under the 600 the test asks for.
 */
const CONTENTION_MS = 10_000;

interface Counter {
  completed: number;
  failed: number;
  /** Why requests failed: HTTP status and error code, or the fetch error, with counts. */
  failures: Record<string, number>;
}

/** Closed-loop client: keeps `concurrency` requests open until `stop` is set. */
async function closedLoop(
  url: string,
  apiKey: string,
  concurrency: number,
  control: { stop: boolean; deadline: number },
  counter: Counter,
): Promise<void> {
  const worker = async () => {
    while (!control.stop && Date.now() < control.deadline) {
      const response = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'sim-model',
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 4,
        }),
      }).catch((error: Error) => error);
      if (!(response instanceof Error) && response.ok) {
        counter.completed++;
        await response.arrayBuffer().catch(() => undefined);
        continue;
      }
      counter.failed++;
      const reason =
        response instanceof Error
          ? `fetch: ${(response.cause as Error | undefined)?.message ?? response.message}`
          : `${response.status} ${await response.text().catch(() => '')}`.slice(0, 120);
      counter.failures[reason] = (counter.failures[reason] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

async function adminState(
  gateway: AppHandle,
): Promise<{ inflight: number; tenants: Array<{ tenant: string; inflight: number }> }> {
  const response = await fetch(`${gateway.url}/admin/state`, {
    headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
  });
  return (await response.json()) as {
    inflight: number;
    tenants: Array<{ tenant: string; inflight: number }>;
  };
}

/**
 * The Cluster variants' Redis call timeout. Both have failed requests in full runs on a
 * 2-core VM (68 in one, non-200 answers in another) and never alone or under busy loops; a
 * call past the default 250 ms counts as Redis unreachable, and three cluster nodes beside
 * a CPU-bound test file are the likeliest to stall that long (a guess: the failures now
 * print their statuses and bodies). These tests judge fairness and sharding, not Redis
 * latency (test/chaos does).
 */
const CLUSTER_TIMEOUT = { command_timeout_ms: 2_000 };

describe.each(['standalone', 'cluster'] as const)(
  'three gateway replicas on one Redis (%s)',
  (topology) => {
    let redis: RedisHandle | undefined;
    let cluster: RedisClusterHandle | undefined;
    let sims: AppHandle[];
    let gateways: AppHandle[];

    beforeAll(async () => {
      if (topology === 'cluster') cluster = await startRedisCluster();
      else redis = await startRedis();
      sims = await Promise.all(
        ['a', 'b'].map(() =>
          startSim({ args: { 'alpha-ms': 10, 'beta-ms': 0.01, model: 'sim-model' } }),
        ),
      );
      const config = writeGatewayConfig({
        ...(cluster
          ? {
              redis: {
                ...CLUSTER_TIMEOUT,
                cluster_nodes: cluster.nodes.map((n) => `${n.host}:${n.port}`),
              },
            }
          : { redisUrl: redis?.url }),
        budget: BUDGET,
        pods: sims.map((sim, i) => ({ name: `pod-${i}`, url: sim.url, cap: BUDGET })),
        // Queues deep enough that nobody is dropped; TTL long enough for the whole run.
        scheduler: { queue_ttl_ms: 30_000 },
        // Same SLO class, so both wait in one band and only the weights decide.
        tenants: [
          {
            id: 'paying',
            api_key_sha256: [sha256Hex(TEST_KEYS.paying)],
            weight: 2,
            queue_max: 100,
          },
          { id: 'free', api_key_sha256: [sha256Hex(TEST_KEYS.free)], weight: 1, queue_max: 100 },
        ],
      });
      gateways = await Promise.all(
        [1, 2, 3].map((n) => startGatewayProcess({ config, replicaId: `replica-${n}` })),
      );
    }, 60_000);

    afterAll(async () => {
      await stopAll();
      await redis?.stop();
      await cluster?.stop();
    });

    it('grants 2:1 across replicas within ±5%, never exceeds the budget, and gives A everything when B stops', async () => {
      const [r1, r2] = gateways as [AppHandle, AppHandle, AppHandle];
      const paying: Counter = { completed: 0, failed: 0, failures: {} };
      const free: Counter = { completed: 0, failed: 0, failures: {} };
      const payingControl = { stop: false, deadline: Date.now() + 30_000 };
      const freeControl = { stop: false, deadline: Date.now() + 30_000 };
      const payingLoop = closedLoop(
        r1.url,
        TEST_KEYS.paying,
        CONCURRENCY_PER_TENANT,
        payingControl,
        paying,
      );
      const freeLoop = closedLoop(
        r2.url,
        TEST_KEYS.free,
        CONCURRENCY_PER_TENANT,
        freeControl,
        free,
      );

      // Measure shares over a window where both are saturated (skip the ramp-up).
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const start = { paying: paying.completed, free: free.completed };
      await new Promise((resolve) => setTimeout(resolve, CONTENTION_MS));
      const served = { paying: paying.completed - start.paying, free: free.completed - start.free };
      const share = served.paying / (served.paying + served.free);
      console.log(
        `granted: paying ${served.paying}, free ${served.free}, paying share ${(share * 100).toFixed(1)}%`,
      );
      expect(served.paying + served.free).toBeGreaterThan(600);
      expect(Math.abs(share - 2 / 3)).toBeLessThanOrEqual(0.05);

      // B stops: A alone fills the whole budget.
      freeControl.stop = true;
      await freeLoop;
      await expect
        .poll(
          async () => (await adminState(r1)).tenants.find((t) => t.tenant === 'paying')?.inflight,
          {
            timeout: 5_000,
            interval: 50,
          },
        )
        .toBe(BUDGET);
      payingControl.stop = true;
      await payingLoop;
      expect(
        paying.failed + free.failed,
        `failed requests: paying ${JSON.stringify(paying.failures)}, free ${JSON.stringify(free.failures)}`,
      ).toBe(0);

      const peak = await poolPeakConcurrency(sims);
      console.log(`pool-wide peak of requests open at the sims: ${peak} (budget ${BUDGET})`);
      expect(peak).toBeGreaterThan(0);
      expect(peak).toBeLessThanOrEqual(BUDGET);
      await expect.poll(async () => (await adminState(r1)).inflight).toBe(0);
    }, 60_000);

    it.runIf(topology === 'cluster')(
      'two pools land on different shards and both serve',
      async () => {
        const shards = cluster as RedisClusterHandle;
        // Pool names whose hash tags {fg:<pool>} live on two different masters.
        const byMaster = new Map<number, string>();
        for (let i = 0; byMaster.size < 2 && i < 100; i++) {
          const pool = `shard${i}`;
          const master = await shards.masterForKey(poolKeys(pool).config);
          if (!byMaster.has(master)) byMaster.set(master, pool);
        }
        expect(byMaster.size).toBe(2);
        const deployments = await Promise.all(
          [...byMaster].map(async ([master, pool]) => {
            const sim = await startSim({ args: { 'alpha-ms': 5, model: 'sim-model' } });
            const config = writeGatewayConfig({
              pool,
              redis: {
                ...CLUSTER_TIMEOUT,
                cluster_nodes: shards.nodes.map((n) => `${n.host}:${n.port}`),
              },
              budget: 4,
              pods: [{ name: 'pod-0', url: sim.url }],
            });
            const gateway = await startGatewayProcess({ config, replicaId: `${pool}-1` });
            return { master, pool, gateway };
          }),
        );
        for (const { master, pool, gateway } of deployments) {
          const answers = await Promise.all(
            Array.from({ length: 12 }, () => generate(gateway.url, TEST_KEYS.paying)),
          );
          // Every answer 200; on a failure the diff shows each other answer's status and body.
          expect(
            answers.map((a) => (a.status === 200 ? 200 : `${a.status} ${a.body.slice(0, 200)}`)),
          ).toEqual(answers.map(() => 200));
          // The pool's state is on its own master, and only there.
          for (const node of shards.nodes) {
            const direct = new Redis(node.port, node.host);
            const exists = await direct.exists(poolKeys(pool).config).catch(() => 0);
            direct.disconnect();
            expect([node.port, exists]).toEqual([node.port, node.port === master ? 1 : 0]);
          }
        }
      },
      60_000,
    );
  },
);
