import {
  type AppHandle,
  DNSMASQ_MISSING_HELP,
  type DnsServerHandle,
  findDnsmasq,
  freePort,
  type RedisHandle,
  startDnsServer,
  startGatewayProcess,
  startRedis,
  startSim,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  type AdminState,
  type GenerateResult,
  generate,
  poolPeakConcurrency,
  SIM_MODEL,
  sleep,
  tally,
} from './support/pool.js';
import { describeWithTools } from './support/required-tools.js';

/**
 * Pods discovered through a real DNS server (dnsmasq), 2 gateway replicas on one Redis:
 * the pool scales 2 -> 4 -> 1 -> 3 pods by DNS edits alone, under steady load, and a pod
 * killed while DNS still lists it is ejected and rejoins (docs/architecture.md, *Who writes
 * the pod set*).
 */
const NAME = 'sim.fairgate.test';
const REFRESH_MS = 1_000;
const CAP = 4;
const TICK_S = 1;
/** Loopback addresses of the pods: one port, one address each, as behind one DNS name. */
const HOSTS = ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5'];
// Every engine step 8 ms whatever the batch: a 12-token answer takes ~100 ms.
const SIM_ARGS = { 'alpha-ms': 8, 'beta-ms': 0, 'gamma-ms': 0, model: SIM_MODEL };

describeWithTools(
  'pods discovered by DNS',
  { dnsmasq: findDnsmasq() },
  DNSMASQ_MISSING_HELP,
  () => {
    let redis: RedisHandle;
    let dns: DnsServerHandle;
    let port: number;
    let gateways: AppHandle[];
    const sims = new Map<string, AppHandle>();

    const startPod = async (host: string) => {
      const sim = await startSim({ host, port, args: SIM_ARGS });
      sims.set(host, sim);
      return sim;
    };
    const state = async (gateway: AppHandle): Promise<AdminState> => {
      const response = await fetch(`${gateway.url}/admin/state`, {
        headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
      });
      return (await response.json()) as AdminState;
    };
    const live = (s: AdminState) =>
      s.pods.filter((p) => p.healthy && !p.leaving).map((p) => p.name);
    const podOf = (host: string) => `${host}:${port}`;
    /** When (hrtime ns) each sim's first request started; undefined when it has none. */
    const firstRequestNs = async (sim: AppHandle): Promise<bigint | undefined> => {
      const { intervals } = (await (await fetch(`${sim.url}/debug/requests`)).json()) as {
        intervals: Array<[string, string]>;
      };
      const starts = intervals.map(([start]) => BigInt(start));
      return starts.length > 0 ? starts.reduce((a, b) => (a < b ? a : b)) : undefined;
    };

    /**
     * Edits DNS to `hosts`, then follows replica 1's state every 25 ms until the live pods
     * are exactly those and the budget is cap x their number. Returns when (ms after the
     * edit) the pod set changed and when the budget followed.
     */
    const scaleTo = async (hosts: readonly string[]) => {
      const editedNs = process.hrtime.bigint();
      const edited = performance.now();
      await dns.setRecords(NAME, hosts);
      const want = hosts.map(podOf).sort();
      let setAtMs: number | undefined;
      let last: AdminState | undefined;
      while (performance.now() - edited < 15_000) {
        last = await state(gateways[0] as AppHandle);
        const now = performance.now() - edited;
        if (setAtMs === undefined && live(last).sort().join() === want.join()) setAtMs = now;
        if (setAtMs !== undefined && last.budget === CAP * want.length) {
          return { setAtMs, budgetAtMs: now, editedNs };
        }
        await sleep(25);
      }
      throw new Error(
        `after 15 s: live ${JSON.stringify(last && live(last))}, budget ${last?.budget}, want ${want.length} pods`,
      );
    };

    beforeAll(async () => {
      port = await freePort();
      [redis, dns] = await Promise.all([startRedis(), startDnsServer()]);
      await Promise.all(HOSTS.map(startPod));
      await dns.setRecords(NAME, HOSTS.slice(0, 2));
      const config = writeGatewayConfig({
        redisUrl: redis.url,
        budget: CAP * 2,
        scheduler: { heartbeat_ms: 500, queue_ttl_ms: 20_000 },
        sections: {
          discovery: {
            dns: { name: NAME, port, servers: [dns.server] },
            refresh_ms: REFRESH_MS,
            cap: CAP,
          },
          // cap_per_worker pinned: the controller's budget is exactly cap x live pods.
          controller: {
            target_p99_ttft_s: 30,
            tick_s: TICK_S,
            window_s: 2,
            cap_per_worker: CAP,
            cap_per_worker_min: CAP,
            cap_per_worker_max: CAP,
          },
          leader: { lease_ttl_ms: 1_000, renew_ms: 300 },
        },
      });
      gateways = await Promise.all(
        [1, 2].map((i) => startGatewayProcess({ config, replicaId: `replica-${i}` })),
      );
    }, 60_000);

    afterAll(async () => {
      await stopAll();
      await Promise.all([redis?.stop(), dns?.stop()]);
    });

    it('scales 2 -> 4 -> 1 -> 3 pods by DNS edits: new pods serve within 2 refreshes, none fails, none above its cap, the budget follows', async () => {
      await scaleTo(HOSTS.slice(0, 2));
      // Steady load at ~70% of two pods: 8 slots of ~100 ms requests take 80 requests/s;
      // 56/s arrive, open loop, over both replicas (bounded: 60 s at most).
      let running = true;
      const sent: Promise<GenerateResult>[] = [];
      const arrivals = (async () => {
        const start = performance.now();
        for (let i = 0; running && i < 56 * 60; i++) {
          const wait = start + (i * 1_000) / 56 - performance.now();
          if (wait > 0) await sleep(wait);
          const key = i % 2 === 0 ? TEST_KEYS.paying : TEST_KEYS.free;
          sent.push(generate((gateways[i % 2] as AppHandle).url, key, { maxTokens: 12 }));
        }
      })();
      await sleep(1_000);

      const timings: Record<string, { setAtMs: number; budgetAtMs: number }> = {};
      const firstServedMs: Record<string, number> = {};
      // 2 -> 4: the two new pods serve their first request within 2 x refresh_ms.
      const up = await scaleTo(HOSTS);
      timings['4 pods'] = up;
      await sleep(500);
      for (const host of HOSTS.slice(2)) {
        const first = await firstRequestNs(sims.get(host) as AppHandle);
        expect(first, `${host} served nothing`).toBeDefined();
        const afterEditMs = Number((first as bigint) - up.editedNs) / 1e6;
        firstServedMs[host] = Math.round(afterEditMs);
        expect(afterEditMs, `${host}'s first request after the DNS edit`).toBeLessThan(
          2 * REFRESH_MS,
        );
      }
      await sleep(1_000);

      // 4 -> 1: three pods leave with requests in flight; they finish them.
      const removed = HOSTS.slice(1);
      const receivedBefore = new Map<string, number>();
      timings['1 pod'] = await scaleTo(HOSTS.slice(0, 1));
      // Once every replica has seen the shared set, a removed pod gets nothing new.
      await sleep(2 * REFRESH_MS);
      for (const host of removed) {
        const stats = await (await fetch(`${sims.get(host)?.url}/debug/stats`)).json();
        receivedBefore.set(host, (stats as { requests_received: number }).requests_received);
      }
      await sleep(1_500);
      for (const host of removed) {
        const stats = await (await fetch(`${sims.get(host)?.url}/debug/stats`)).json();
        expect((stats as { requests_received: number }).requests_received, host).toBe(
          receivedBefore.get(host),
        );
      }

      // 1 -> 3.
      timings['3 pods'] = await scaleTo(HOSTS.slice(0, 3));
      await sleep(1_500);
      running = false;
      await arrivals;
      const results = await Promise.all(sent);

      expect(tally(results)).toEqual({ 200: results.length });
      expect(results.length).toBeGreaterThan(200);
      for (const [host, sim] of sims) {
        expect(
          await poolPeakConcurrency([sim]),
          `${host}'s most requests at once`,
        ).toBeLessThanOrEqual(CAP);
      }
      console.log(
        `discovery: ${results.length} requests, first request on a new pod ${JSON.stringify(firstServedMs)} ms after the DNS edit; pod set / budget after the edit (ms): ${Object.entries(
          timings,
        )
          .map(([step, t]) => `${step} ${Math.round(t.setAtMs)} / ${Math.round(t.budgetAtMs)}`)
          .join(', ')}`,
      );
      // The budget follows the live pods within two controller ticks.
      for (const [step, t] of Object.entries(timings)) {
        expect(t.budgetAtMs - t.setAtMs, `${step}: budget after the pod set`).toBeLessThanOrEqual(
          2 * TICK_S * 1_000 + 100,
        );
      }
      const [a, b] = await Promise.all(gateways.map(state));
      expect(a?.conservation_violations).toEqual([]);
      expect(b?.pods.map((p) => p.name)).toEqual(HOSTS.slice(0, 3).map(podOf).sort());
    }, 90_000);

    it('a pod killed while DNS still lists it is ejected, and rejoins when it answers again', async () => {
      const host = HOSTS[2] as string;
      await sims.get(host)?.kill();
      const deadline = performance.now() + 10_000;
      let s = await state(gateways[1] as AppHandle);
      while (live(s).includes(podOf(host)) && performance.now() < deadline) {
        await sleep(50);
        s = await state(gateways[1] as AppHandle);
      }
      expect(live(s)).not.toContain(podOf(host));
      expect(s.pods.find((p) => p.name === podOf(host))).toMatchObject({
        healthy: false,
        leaving: false,
      });

      const sim = await startPod(host);
      while (!live(s).includes(podOf(host)) && performance.now() < deadline + 10_000) {
        await sleep(50);
        s = await state(gateways[1] as AppHandle);
      }
      expect(live(s)).toContain(podOf(host));
      // It serves again: a burst over both replicas reaches it.
      const burst = await Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          generate((gateways[i % 2] as AppHandle).url, TEST_KEYS.paying, { maxTokens: 12 }),
        ),
      );
      expect(tally(burst)).toEqual({ 200: 24 });
      expect(await firstRequestNs(sim)).toBeDefined();
    }, 40_000);
  },
);
