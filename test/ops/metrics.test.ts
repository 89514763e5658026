import { parseConfig } from '@fairgate/config';
import { emptyGaugeSums, TUNER_OUTCOMES } from '@fairgate/control';
import { type Fence, LocalScheduler } from '@fairgate/scheduler';
import { createGatewayMetrics, type GatewayMetrics } from '@fairgate/telemetry';
import { sha256Hex } from '@fairgate/testkit';
import { describe, expect, it } from 'vitest';
import { configGaugeValues } from '../../apps/gateway/src/control/control-plane.js';
import { PodScraper } from '../../apps/gateway/src/control/pod-scraper.js';
import { PoolGauges } from '../../apps/gateway/src/control/pool-gauges.js';
import { TunerLoop } from '../../apps/gateway/src/control/tuner-loop.js';
import { OutageMonitor, SchedulerUnavailable } from '../../apps/gateway/src/redis-outage.js';
import { resilientScheduler } from '../../apps/gateway/src/resilient-scheduler.js';

/**
 * The metrics the dashboard and the alert rules read, at their sources, without
 * processes: test/ops/prometheus.test.ts then shows them on a real Prometheus.
 */
const RAW_CONFIG = {
  tenants: [{ id: 't', api_key_sha256: [sha256Hex('k')] }],
  pods: [
    { name: 'pod-a', url: 'http://127.0.0.1:1/' },
    { name: 'pod-b', url: 'http://127.0.0.1:2' },
  ],
  scheduler: { budget: 2, slo_targets_ms: { critical: 250 } },
  controller: { target_p99_ttft_s: 2, cap_per_worker_min: 3, cap_per_worker: 8 },
};
const CONFIG = parseConfig(RAW_CONFIG);

const LEADING = { holds: () => true };
const FENCE: Fence = { replica: 'r1', epoch: 1 };

/** `name{labels} value` lines of the registry's text for one metric name. */
async function samples(metrics: GatewayMetrics, name: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const line of (await metrics.registry.metrics()).split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const at = line.lastIndexOf(' ');
    const labels = line
      .slice(name.length, at)
      .replace(/,?replica="r1"/, '')
      .replace('{,', '{');
    out[labels === '{}' ? '' : labels] = Number(line.slice(at + 1));
  }
  return out;
}

async function localPool(): Promise<LocalScheduler> {
  const scheduler = new LocalScheduler();
  await scheduler.configure({ initialBudget: 2, queueTtlMs: 60_000 });
  await scheduler.upsertTenants([{ id: 't' }]);
  await scheduler.upsertPods([
    { name: 'pod-a', cap: 10 },
    { name: 'pod-b', cap: 10 },
  ]);
  return scheduler;
}

describe('operations metrics', () => {
  it('times every resilient scheduler call by operation; not the blocking wait, not an enqueue refused during an outage', async () => {
    const metrics = createGatewayMetrics({ replica: 'r1' });
    const inner = await localPool();
    const monitor = new OutageMonitor({ mode: 'reject', probe: async () => {} });
    const asked: string[] = [];
    const scheduler = resilientScheduler(inner, {
      monitor,
      reseed: async () => {},
      callTimer: (operation) => {
        asked.push(operation);
        return metrics.redisCall.labels({ operation });
      },
    });
    expect(asked).not.toContain('waitForNotices');
    expect(asked).toContain('enqueue');
    await scheduler.snapshot();
    await scheduler.snapshot();
    await scheduler.enqueue({ id: 'a', tenant: 't', band: 3, replica: 'r1' });
    await scheduler.waitForNotices('r1', 1);
    monitor.unreachable('test');
    await expect(
      scheduler.enqueue({ id: 'b', tenant: 't', band: 3, replica: 'r1' }),
    ).rejects.toBeInstanceOf(SchedulerUnavailable);
    monitor.close();
    expect(await samples(metrics, 'fairgate_redis_call_seconds_count')).toEqual({
      '{operation="snapshot"}': 2,
      '{operation="enqueue"}': 1,
    });
  });

  it('exports class priorities, p99 targets and the cap range from the current config at each scrape', async () => {
    const metrics = createGatewayMetrics({ replica: 'r1' });
    let config = CONFIG;
    metrics.readConfigFrom(() => configGaugeValues(config));
    // critical: its own target; standard: the controller's; sheddable classes: none.
    expect(await samples(metrics, 'fairgate_ttft_target_seconds')).toEqual({
      '{class="critical"}': 0.25,
      '{class="standard"}': 2,
    });
    expect(await samples(metrics, 'fairgate_slo_class_priority')).toEqual({
      '{class="critical"}': 4,
      '{class="standard"}': 3,
      '{class="batch"}': -1,
      '{class="sheddable"}': -2,
      '{class="background"}': -3,
    });
    expect(await samples(metrics, 'fairgate_cap_per_worker_min')).toEqual({ '': 3 });
    expect(await samples(metrics, 'fairgate_cap_per_worker_max')).toEqual({ '': 256 });
    // A reload without a controller: no targets but critical's own, no cap range.
    config = parseConfig({
      tenants: CONFIG.tenants.map((t) => ({ ...t })),
      pods: [{ name: 'pod-a', url: 'http://127.0.0.1:1' }],
      scheduler: { slo_targets_ms: { critical: 250 } },
    });
    expect(await samples(metrics, 'fairgate_ttft_target_seconds')).toEqual({
      '{class="critical"}': 0.25,
    });
    // prom-client always exports a gauge without labels: 0 means "no controller".
    expect(await samples(metrics, 'fairgate_cap_per_worker_min')).toEqual({ '': 0 });
  });

  it('the leader exports the pool per band, its counters as deltas, and clears them on step-down', async () => {
    const metrics = createGatewayMetrics({ replica: 'r1' });
    const scheduler = await localPool();
    const gauges = new PoolGauges({
      scheduler,
      election: LEADING,
      config: () => CONFIG,
      metrics,
    });
    for (let i = 0; i < 5; i++) {
      await scheduler.enqueue({ id: `s${i}`, tenant: 't', band: 3, replica: 'r1' });
    }
    await scheduler.enqueue({ id: 'b0', tenant: 't', band: -1, replica: 'r1', sloClass: 'batch' });
    await gauges.refresh(FENCE);
    const waiting = await samples(metrics, 'fairgate_pool_waiting');
    expect(waiting).toMatchObject({ '{band="3"}': 3, '{band="-1"}': 1, '{band="4"}': 0 });
    expect(await samples(metrics, 'fairgate_pool_inflight')).toEqual({ '': 2 });
    expect(await samples(metrics, 'fairgate_budget')).toEqual({ '': 2 });
    expect(await samples(metrics, 'fairgate_pool_offered_total')).toEqual({
      '{tenant="t",class="standard"}': 5,
      '{tenant="t",class="batch"}': 1,
    });
    await scheduler.enqueue({ id: 's5', tenant: 't', band: 3, replica: 'r1' });
    await gauges.refresh(FENCE);
    await gauges.refresh(FENCE);
    expect(await samples(metrics, 'fairgate_pool_admitted_total')).toMatchObject({
      '{tenant="t",class="standard"}': 6,
    });
    const saturation = await samples(metrics, 'fairgate_pod_saturation');
    // Never scraped: unknown counts as saturated.
    expect(saturation).toEqual({ '{pod="pod-a"}': 1, '{pod="pod-b"}': 1 });
    gauges.stepDown();
    expect(await samples(metrics, 'fairgate_pool_waiting')).toEqual({});
    expect(await samples(metrics, 'fairgate_pool_offered_total')).toEqual({});
    // A refresh that ends after leadership was lost exports nothing.
    const lost = new PoolGauges({
      scheduler,
      election: { holds: () => false },
      config: () => CONFIG,
      metrics,
    });
    await lost.refresh(FENCE);
    expect(await samples(metrics, 'fairgate_pool_inflight')).toEqual({ '': 0 });
    expect(await samples(metrics, 'fairgate_pool_offered_total')).toEqual({});
  });

  it("the pod scraper exports each pod's scraped gauges, drops a failing pod's, clears them on step-down", async () => {
    const metrics = createGatewayMetrics({ replica: 'r1' });
    const scheduler = await localPool();
    let failB = false;
    const scraper = new PodScraper({
      store: scheduler,
      election: LEADING,
      config: () => CONFIG,
      metrics,
      log: () => {},
      fetcher: async (url) => {
        if (failB && url.startsWith('http://127.0.0.1:2')) throw new Error('ECONNREFUSED');
        const waiting = url.startsWith('http://127.0.0.1:2') ? 1 : 3;
        return [
          `vllm:num_requests_running{model_name="m"} 7`,
          `vllm:num_requests_waiting{model_name="m"} ${waiting}`,
          `vllm:kv_cache_usage_perc{model_name="m"} 0.25`,
        ].join('\n');
      },
    });
    await scraper.scrapeOnce(FENCE);
    expect(await samples(metrics, 'fairgate_pod_requests_waiting')).toEqual({
      '{pod="pod-a"}': 3,
      '{pod="pod-b"}': 1,
    });
    expect(await samples(metrics, 'fairgate_pod_requests_running')).toMatchObject({
      '{pod="pod-a"}': 7,
    });
    expect(await samples(metrics, 'fairgate_pod_kv_cache_usage_ratio')).toMatchObject({
      '{pod="pod-a"}': 0.25,
    });
    failB = true;
    await scraper.scrapeOnce(FENCE);
    expect(await samples(metrics, 'fairgate_pod_requests_waiting')).toEqual({
      '{pod="pod-a"}': 3,
    });
    scraper.stepDown();
    expect(await samples(metrics, 'fairgate_pod_requests_waiting')).toEqual({});
  });

  it('the tuner counts each period per pod by result, from 0 at election', async () => {
    const metrics = createGatewayMetrics({ replica: 'r1' });
    const scheduler = await localPool();
    const config = parseConfig({
      ...RAW_CONFIG,
      tuner: { period_s: 3_600 },
    });
    let counter = 0;
    // A fresh scrape each time, with no requests in between: never an observation.
    const scrape = (pod: string) => ({
      pod,
      atMs: ++counter * 1_000,
      metrics: {
        models: ['m'],
        waiting: 0,
        running: 0,
        kvCacheUsage: 0,
      } as unknown as import('@fairgate/openai').VllmMetrics,
      gauges: emptyGaugeSums(),
    });
    const tuner = new TunerLoop({
      store: scheduler,
      election: LEADING,
      config: () => config,
      metrics,
      scrapes: { latest: (pod) => scrape(pod) },
      log: () => {},
    });
    // The tuner's writes are fenced: it needs a real lease.
    const lease = await scheduler.acquireLeadership('r1', 60_000);
    const fence: Fence = { replica: 'r1', epoch: lease.epoch };
    tuner.lead(fence);
    const zero = await samples(metrics, 'fairgate_tuner_updates_total');
    expect(Object.keys(zero)).toHaveLength(2 * TUNER_OUTCOMES.length);
    expect(Object.values(zero).every((v) => v === 0)).toBe(true);
    await tuner.tick(fence); // baselines only
    await tuner.tick(fence);
    await tuner.tick(fence);
    const counted = await samples(metrics, 'fairgate_tuner_updates_total');
    expect(counted['{pod="pod-a",result="no_observation"}']).toBe(2);
    expect(counted['{pod="pod-b",result="no_observation"}']).toBe(2);
    expect(counted['{pod="pod-a",result="accepted"}']).toBe(0);
    // Each period not taken is also counted with its reason (no TTFT histogram: metrics_missing).
    const unused = await samples(metrics, 'fairgate_tuner_unused_periods_total');
    expect(unused['{pod="pod-a",result="no_observation",reason="metrics_missing"}']).toBe(2);
    tuner.stepDown();
  });
});
