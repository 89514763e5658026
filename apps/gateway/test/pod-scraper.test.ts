import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseConfig } from '@fairgate/config';
import { type Fence, LocalScheduler } from '@fairgate/scheduler';
import { createGatewayMetrics } from '@fairgate/telemetry';
import { sha256Hex } from '@fairgate/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { LeaderElection } from '../src/control/election.js';
import { fetchMetrics, PodScraper } from '../src/control/pod-scraper.js';

const CONFIG = parseConfig({
  tenants: [{ id: 't', api_key_sha256: [sha256Hex('k')] }],
  pods: [
    { name: 'pod-a', url: 'http://127.0.0.1:1/' },
    { name: 'pod-b', url: 'http://127.0.0.1:2' },
  ],
  scrape: { interval_ms: 20, timeout_ms: 200 },
});

const METRICS_A = [
  '# TYPE vllm:num_requests_running gauge',
  'vllm:num_requests_running{model_name="m"} 7',
  'vllm:num_requests_waiting{model_name="m"} 3',
  'vllm:kv_cache_usage_perc{model_name="m"} 0.25',
  'vllm:time_to_first_token_seconds_sum{model_name="m"} 1.5',
  'vllm:time_to_first_token_seconds_count{model_name="m"} 30',
  // 1,100 blocks of 32 tokens: 2,200 of the gateway's 16-token prompt blocks.
  'vllm:cache_config_info{block_size="32",engine="0",num_gpu_blocks="1100"} 1.0',
].join('\n');

async function leader(scheduler: LocalScheduler, replica = 'r1') {
  const election = new LeaderElection({
    store: scheduler,
    replica,
    leaseTtlMs: 60_000,
    renewMs: 60_000,
  });
  election.start();
  for (let i = 0; i < 500 && !election.fence; i++) await new Promise((r) => setTimeout(r, 2));
  if (!election.fence) throw new Error('not elected');
  return { election, fence: election.fence as Fence };
}

async function pool() {
  const scheduler = new LocalScheduler();
  await scheduler.configure({});
  await scheduler.upsertTenants([{ id: 't' }]);
  await scheduler.upsertPods([
    { name: 'pod-a', cap: 10 },
    { name: 'pod-b', cap: 10 },
  ]);
  return scheduler;
}

describe('pod scraper', () => {
  it('reports the gauges of the pods that answered; a failing pod is left out', async () => {
    const scheduler = await pool();
    const { election, fence } = await leader(scheduler);
    const metrics = createGatewayMetrics({ replica: 'r1' });
    const asked: string[] = [];
    const logs: string[] = [];
    const scraper = new PodScraper({
      store: scheduler,
      election,
      config: () => CONFIG,
      metrics,
      log: (line) => logs.push(line),
      fetcher: async (url, timeoutMs) => {
        asked.push(`${url} ${timeoutMs}`);
        if (url.startsWith('http://127.0.0.1:2')) throw new Error('connect ECONNREFUSED');
        return METRICS_A;
      },
    });
    const scrapes = await scraper.scrapeOnce(fence);
    expect(asked.sort()).toEqual([
      'http://127.0.0.1:1/metrics 200',
      'http://127.0.0.1:2/metrics 200',
    ]);
    expect(scrapes.map((s) => s.pod)).toEqual(['pod-a']);
    expect(scraper.latest('pod-a')!.metrics.ttft).toEqual({ sum: 1.5, count: 30 });
    expect(scraper.latest('pod-b')).toBeUndefined();
    const pods = (await scheduler.snapshot()).pods;
    const a = pods.find((p) => p.name === 'pod-a')!;
    const b = pods.find((p) => p.name === 'pod-b')!;
    expect(a.load).toMatchObject({ waiting: 3, running: 7, kvUtilization: 0.25 });
    expect(a.prefixCapacity).toBe(2_200);
    expect(b.load).toBeNull();
    expect(b.prefixCapacity).toBeNull();
    // One log line per failure streak, not per scrape.
    await scraper.scrapeOnce(fence);
    expect(logs.filter((l) => l.includes('pod-b')).length).toBe(1);
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/fairgate_pod_scrapes_total\{pod="pod-a",result="ok",replica="r1"\} 2/);
    expect(text).toMatch(/fairgate_pod_scrapes_total\{pod="pod-b",result="error",replica="r1"\} 2/);
    await election.stop();
  });

  it('writes nothing without leadership; a stale fence is refused by the store', async () => {
    const scheduler = await pool();
    const { election, fence } = await leader(scheduler);
    const scraper = new PodScraper({
      store: scheduler,
      election,
      config: () => CONFIG,
      metrics: createGatewayMetrics({ replica: 'r1' }),
      log: () => {},
      fetcher: async () => METRICS_A,
    });
    await election.stop(); // hands the lease back
    const scrapes = await scraper.scrapeOnce(fence);
    expect(scrapes.length).toBe(2); // scraped, but not reported
    expect((await scheduler.snapshot()).pods.every((p) => p.load === null)).toBe(true);
    expect(await scheduler.reportPodLoad(fence, [])).toBe(false);
  });

  it('runs every interval while leading and stops on step-down', async () => {
    const scheduler = await pool();
    const { election, fence } = await leader(scheduler);
    let calls = 0;
    const scraper = new PodScraper({
      store: scheduler,
      election,
      config: () => CONFIG,
      metrics: createGatewayMetrics({ replica: 'r1' }),
      log: () => {},
      fetcher: async () => {
        calls++;
        return METRICS_A;
      },
    });
    scraper.lead(fence);
    await new Promise((r) => setTimeout(r, 200));
    await scraper.stop();
    const after = calls;
    expect(after).toBeGreaterThanOrEqual(8); // 2 pods, ~every 20 ms
    await new Promise((r) => setTimeout(r, 60));
    expect(calls).toBe(after);
    await election.stop();
  });
});

describe('fetchMetrics', () => {
  let server: Server | undefined;
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise((r) => server?.close(r));
    server = undefined;
  });

  async function serve(handler: Parameters<typeof createServer>[1]) {
    server = createServer(handler);
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`;
  }

  it('returns the text of a 200', async () => {
    const url = await serve((_req, res) => res.end(METRICS_A));
    expect(await fetchMetrics(url, 1_000)).toBe(METRICS_A);
  });

  it('rejects a non-2xx answer', async () => {
    const url = await serve((_req, res) => {
      res.statusCode = 503;
      res.end('busy');
    });
    await expect(fetchMetrics(url, 1_000)).rejects.toThrow(/503/);
  });

  it('gives up at the timeout', async () => {
    const url = await serve(() => {}); // never answers
    const started = performance.now();
    await expect(fetchMetrics(url, 100)).rejects.toThrow();
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('gives up at the timeout when the body stalls after the headers', async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('vllm:num_requests_running{model_name="m"} 1\n'); // and never ends
    });
    const started = performance.now();
    await expect(fetchMetrics(url, 100)).rejects.toThrow();
    expect(performance.now() - started).toBeLessThan(1_000);
  });
});
