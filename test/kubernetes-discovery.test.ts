import {
  type AppHandle,
  freePort,
  type RedisHandle,
  startGatewayProcess,
  startRedis,
  startSim,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type EndpointSpec,
  endpointSlice,
  FakeKubeApi,
  writeKubeconfig,
} from './support/fake-kube-api.js';
import {
  type AdminState,
  type GenerateResult,
  generate,
  metricSum,
  SIM_MODEL,
  sleep,
  tally,
} from './support/pool.js';

/**
 * Pods discovered from a Kubernetes Service's EndpointSlices, with real processes: 2 gateway
 * replicas (KUBECONFIG pointing at a fake API server, test/support/fake-kube-api.ts) on one
 * Redis, and sims on 127.0.0.2..4 behind one port as the Service's pods. Each replica lists
 * and watches the slices on its own; the leader writes the shared pod set, and the
 * controller's budget follows it (docs/architecture.md, *Who writes the pod set*). The
 * watch's events alone move the pool: an endpoint turning ready joins and serves, one
 * turning terminating leaves (its requests finish, no new one reaches it), and a watch ended
 * by 410 Gone lists again without changing anything.
 */
const SERVICE = 'vllm';
const NAMESPACE = 'fairgate';
const CAP = 4;
const TICK_S = 0.5;
/** The leader writes the set again this often: what deletes a leaving pod once it drained. */
const REFRESH_MS = 500;
const [A, B, C] = ['127.0.0.2', '127.0.0.3', '127.0.0.4'] as const;
// Every engine step 8 ms whatever the batch: a 12-token answer takes ~100 ms.
const SIM_ARGS = { 'alpha-ms': 8, 'beta-ms': 0, 'gamma-ms': 0, model: SIM_MODEL };

describe('pods discovered from Kubernetes EndpointSlices', () => {
  let redis: RedisHandle;
  let api: FakeKubeApi;
  let port: number;
  let gateways: AppHandle[];
  const sims = new Map<string, AppHandle>();
  /** Every request sent through the gateways: all must succeed. */
  const results: GenerateResult[] = [];

  /** Slices as the EndpointSlice controller keeps them: .2 and .3 in one, .4 in its own. */
  const slice = (name: string, endpoints: EndpointSpec[]) =>
    endpointSlice({
      name,
      namespace: NAMESPACE,
      service: SERVICE,
      ports: [
        { name: 'http', port },
        { name: 'metrics', port: 9400 },
      ],
      endpoints,
    });
  const FIRST = 'vllm-7xk2p';
  const SECOND = 'vllm-m4n8s';

  const podOf = (host: string) => `${host}:${port}`;
  const state = async (gateway: AppHandle): Promise<AdminState> => {
    const response = await fetch(`${gateway.url}/admin/state`, {
      headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
    });
    return (await response.json()) as AdminState;
  };
  const live = (s: AdminState) =>
    s.pods
      .filter((p) => p.healthy && !p.leaving)
      .map((p) => p.name)
      .sort();
  const received = async (host: string): Promise<number> => {
    const stats = await (await fetch(`${sims.get(host)?.url}/debug/stats`)).json();
    return (stats as { requests_received: number }).requests_received;
  };
  /** When (hrtime ns) a sim's first request started; undefined when it has had none. */
  const firstRequestNs = async (host: string): Promise<bigint | undefined> => {
    const { intervals } = (await (await fetch(`${sims.get(host)?.url}/debug/requests`)).json()) as {
      intervals: Array<[string, string]>;
    };
    const starts = intervals.map(([start]) => BigInt(start));
    return starts.length > 0 ? starts.reduce((a, b) => (a < b ? a : b)) : undefined;
  };
  /** `count` requests at once, over `via` in turn (both replicas by default), all kept. */
  const burst = async (count: number, maxTokens = 12, via = gateways) => {
    const sent = await Promise.all(
      Array.from({ length: count }, (_, i) =>
        generate((via[i % via.length] as AppHandle).url, TEST_KEYS.paying, { maxTokens }),
      ),
    );
    results.push(...sent);
    return sent;
  };
  /** Polls `check` every 25 ms until it returns a value, for `timeoutMs` at most. */
  const until = async <T>(
    what: string,
    check: () => Promise<T | undefined>,
    timeoutMs = 5_000,
    last?: () => string,
  ): Promise<T> => {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const value = await check();
      if (value !== undefined) return value;
      if (performance.now() > deadline) {
        throw new Error(
          `timed out after ${timeoutMs} ms: ${what}${last ? ` (last seen: ${last()})` : ''}`,
        );
      }
      await sleep(25);
    }
  };
  /**
   * Until both replicas show exactly `hosts` as the pool's pods, every one live, the budget
   * cap x their number, and each replica's own discovery lists that many pods.
   */
  const settled = (hosts: readonly string[]) => {
    const want = hosts.map(podOf).sort().join();
    const seen: string[] = [];
    return until(
      `pods ${want}, budget ${CAP * hosts.length}`,
      async () => {
        for (const [i, gateway] of gateways.entries()) {
          const s = await state(gateway);
          const discovered = await metricSum(gateway.url, 'fairgate_discovered_pods');
          const all = s.pods.map((p) => `${p.name}${p.leaving ? ' leaving' : ''}`).sort();
          seen[i] =
            `${gateway.name}: pods [${all.join(', ')}], live [${live(s).join(', ')}], budget ${s.budget}, discovered ${discovered}`;
          if (all.join() !== want || live(s).join() !== want) return undefined;
          if (s.budget !== CAP * hosts.length || discovered !== hosts.length) return undefined;
        }
        return true;
      },
      5_000,
      () => seen.join('; '),
    );
  };
  /** The API server's requests from the `from`th: verb and resourceVersion, lists first. */
  const asked = (from: number) =>
    api.requests
      .slice(from)
      .map((r) => [r.verb, r.query.resourceVersion])
      .sort((a, b) => String(a[0]).localeCompare(String(b[0])));
  const discoveryLogLines = (gateway: AppHandle) =>
    gateway.logs().match(/discovery lists \d+ pods/g)?.length ?? 0;

  beforeAll(async () => {
    port = await freePort();
    [redis, api] = await Promise.all([startRedis(), FakeKubeApi.start()]);
    await Promise.all(
      [A, B, C].map(async (host) => sims.set(host, await startSim({ host, port, args: SIM_ARGS }))),
    );
    api.apply('ADDED', slice(FIRST, [{ address: A }, { address: B }]));
    const config = writeGatewayConfig({
      redisUrl: redis.url,
      budget: CAP * 2,
      scheduler: { heartbeat_ms: 500, queue_ttl_ms: 20_000 },
      sections: {
        discovery: {
          kubernetes: { service: SERVICE, namespace: NAMESPACE, port: 'http' },
          cap: CAP,
          refresh_ms: REFRESH_MS,
        },
        // cap_per_worker pinned: the controller's budget is exactly cap x live pods.
        controller: {
          target_p99_ttft_s: 30,
          tick_s: TICK_S,
          window_s: 1,
          cap_per_worker: CAP,
          cap_per_worker_min: CAP,
          cap_per_worker_max: CAP,
        },
        leader: { lease_ttl_ms: 1_000, renew_ms: 300 },
      },
    });
    const env = { KUBECONFIG: writeKubeconfig(api.url) };
    gateways = await Promise.all(
      [1, 2].map((i) => startGatewayProcess({ config, replicaId: `replica-${i}`, env })),
    );
  }, 60_000);

  afterAll(async () => {
    await stopAll();
    await Promise.all([redis?.stop(), api?.close()]);
  });

  it('the listed ready endpoints are the pods: each replica serves on both', async () => {
    await settled([A, B]);
    // Each replica listed the Service's slices, then watched from the list's version.
    expect(asked(0)).toEqual([
      ['list', undefined],
      ['list', undefined],
      ['watch', api.resourceVersion],
      ['watch', api.resourceVersion],
    ]);
    for (const request of api.requests) {
      expect(request).toMatchObject({
        namespace: NAMESPACE,
        query: { labelSelector: `kubernetes.io/service-name=${SERVICE}` },
      });
    }
    expect(api.openWatches).toBe(2);

    // A new slice whose endpoint is still starting (not ready): no pod yet.
    api.apply('ADDED', slice(SECOND, [{ address: C, ready: false, serving: false }]));
    // 12 at once through one replica, 8 slots of at most 4 per pod: both pods serve.
    for (const gateway of gateways) {
      const before = await Promise.all([A, B].map(received));
      expect(tally(await burst(12, 12, [gateway]))).toEqual({ 200: 12 });
      const after = await Promise.all([A, B].map(received));
      expect(after[0], `${gateway.name} -> ${A}`).toBeGreaterThan(before[0] as number);
      expect(after[1], `${gateway.name} -> ${B}`).toBeGreaterThan(before[1] as number);
    }
    expect(await received(C)).toBe(0);
    await settled([A, B]);
  });

  it('an endpoint turning ready joins, the budget follows, and it serves within 2 s', async () => {
    const editedNs = process.hrtime.bigint();
    const edited = performance.now();
    api.apply('MODIFIED', slice(SECOND, [{ address: C }]));
    const liveAtMs = await until(`${C} live`, async () =>
      live(await state(gateways[0] as AppHandle)).includes(podOf(C))
        ? performance.now() - edited
        : undefined,
    );
    await settled([A, B, C]);
    const settledAtMs = performance.now() - edited;
    // 24 at once, 12 slots of at most 4 per pod: the new pod serves too.
    expect(tally(await burst(24))).toEqual({ 200: 24 });
    const first = await firstRequestNs(C);
    expect(first, `${C} served nothing`).toBeDefined();
    const firstServedMs = Number((first as bigint) - editedNs) / 1e6;
    console.log(
      `kubernetes discovery: ${C} live ${Math.round(liveAtMs)} ms, budget ${CAP * 3} on both replicas ${Math.round(settledAtMs)} ms, first request ${Math.round(firstServedMs)} ms after the event`,
    );
    expect(firstServedMs).toBeLessThan(2_000);
  });

  it('an endpoint turning terminating leaves: its requests finish, no new one reaches it', async () => {
    // Long requests (~800 ms), 4 on each pod, so the pod leaves with requests in flight.
    const long = burst(12, 100);
    await until(`requests in flight on ${A}`, async () => {
      const pod = (await state(gateways[0] as AppHandle)).pods.find((p) => p.name === podOf(A));
      return (pod?.inflight ?? 0) > 0 ? true : undefined;
    });
    const edited = performance.now();
    api.apply(
      'MODIFIED',
      slice(FIRST, [
        { address: A, ready: false, serving: true, terminating: true },
        { address: B },
      ]),
    );
    // Leaving while its requests run: no longer live nor counted, still listed.
    const leaving = await until(`${A} leaving`, async () => {
      const s = await state(gateways[1] as AppHandle);
      const pod = s.pods.find((p) => p.name === podOf(A));
      return pod?.leaving ? { pod, live: live(s), atMs: performance.now() - edited } : undefined;
    });
    expect(leaving.pod).toMatchObject({ healthy: false, leaving: true });
    expect(leaving.pod.inflight).toBeGreaterThan(0);
    expect(leaving.live).toEqual([B, C].map(podOf));
    // Then gone once they ended (the next write of the set), on both replicas; budget 8.
    await settled([B, C]);
    const goneAtMs = performance.now() - edited;
    expect(tally(await long)).toEqual({ 200: 12 });
    console.log(
      `kubernetes discovery: ${A} leaving ${Math.round(leaving.atMs)} ms, gone ${Math.round(goneAtMs)} ms after the event`,
    );

    // Both replicas' discovery dropped it (settled): a burst reaches the two others only.
    const before = await Promise.all([A, B, C].map(received));
    expect(tally(await burst(24))).toEqual({ 200: 24 });
    const after = await Promise.all([A, B, C].map(received));
    expect(after[0], `${A} after it left`).toBe(before[0]);
    expect(after[1]).toBeGreaterThan(before[1] as number);
    expect(after[2]).toBeGreaterThan(before[2] as number);
  });

  it('a watch ended by 410 Gone lists again: the same pods, no error', async () => {
    const logLines = gateways.map(discoveryLogLines);
    const before = api.requests.length;
    // While the watches were away the terminated endpoint left its slice: only a list sees it.
    api.expire([['MODIFIED', slice(FIRST, [{ address: B }])]]);
    const version = api.resourceVersion;
    await until('both replicas listed and watch again', async () => {
      const since = api.requests.slice(before);
      const lists = since.filter((r) => r.verb === 'list').length;
      const watches = since.filter((r) => r.verb === 'watch');
      return lists === 2 && watches.length === 2 && api.openWatches === 2 ? watches : undefined;
    });
    // Each listed, then watched from the new list's version (not the expired one).
    expect(asked(before)).toEqual([
      ['list', undefined],
      ['list', undefined],
      ['watch', version],
      ['watch', version],
    ]);
    await settled([B, C]);
    expect(tally(await burst(24))).toEqual({ 200: 24 });
    await settled([B, C]);
    for (const [i, gateway] of gateways.entries()) {
      expect(await metricSum(gateway.url, 'fairgate_discovery_errors_total')).toBe(0);
      expect(gateway.logs()).not.toMatch(/discovery failed/);
      // No pod joined or left.
      expect(discoveryLogLines(gateway), gateway.name).toBe(logLines[i]);
    }

    // Every request of the file succeeded; the pool's books balance.
    expect(tally(results)).toEqual({ 200: results.length });
    const s = await state(gateways[0] as AppHandle);
    expect(s.conservation_violations).toEqual([]);
  });
});
