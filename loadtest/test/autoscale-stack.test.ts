import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findDnsmasq, findRedisServer, stopAll } from '@fairgate/testkit';
import { afterAll, expect, it } from 'vitest';
import { describeWithTools } from '../../test/support/required-tools.js';
import { writeRunReport } from '../src/load/report.js';
import { runScenario } from '../src/load/runner.js';
import { DEV_ADMIN_TOKEN, parseScenario } from '../src/load/scenario.js';
import {
  createScaler,
  type Infra,
  SIM_MODEL,
  startGateways,
  startInfra,
} from '../src/load/stack.js';

/**
 * The autoscale scenario scaled down, against a real stack: dnsmasq, redis-server, sims the
 * local scaler starts and stops from desired_pods, two gateway replicas that find the pods
 * only through DNS (built dist/: `npm run build` first). One tenant at 2 req/s, 14 req/s
 * (about three times one pod's SLO capacity at these lengths) from 6 s to 18 s, then 2
 * again (well inside one pod, so the release does not hang on the headroom even when the
 * machine is busy and the pods slower), with 2 s tuner periods: the pods must rise to at
 * least 2 while the load is high and be released after it falls, with no failed request.
 * The full scenario's figures: docs/load.md.
 */
describeWithTools(
  'the autoscale stack: desired_pods drives a local scaler through DNS',
  { 'redis-server': findRedisServer(), dnsmasq: findDnsmasq() },
  'apt-get install -y redis-server dnsmasq-base',
  () => {
    let infra: Infra | undefined;
    afterAll(async () => {
      await infra?.stop();
      await stopAll();
    });

    it('adds pods under load and releases them when it falls', async () => {
      const scenario = parseScenario({
        name: 'autoscale_short',
        duration_s: 30,
        seed: 3,
        target_p99_ttft_s: 0.5,
        tenants: [
          {
            name: 'app',
            key_ref: 'paying',
            slo_class: 'standard',
            arrival: { kind: 'burst', base_rate: 2, rate: 14, at_s: 6, duration_s: 12 },
            prompt_tokens: { median: 500, sigma: 0.3, min: 100, max: 1500 },
            output_tokens: { median: 32, sigma: 0.3, min: 8, max: 64 },
          },
        ],
        gateway: {
          scheduler: { queue_ttl_ms: 5_000 },
          controller: {
            target_p99_ttft_s: 10,
            tick_s: 0.5,
            window_s: 2,
            cap_per_worker: 8,
            cap_per_worker_min: 8,
            cap_per_worker_max: 8,
          },
          scrape: { interval_ms: 200, timeout_ms: 500 },
          tuner: {
            period_s: 2,
            max_batch: 8,
            scale_down_periods: 2,
            models: { [SIM_MODEL]: { target_ttft_ms: 67, target_itl_ms: 16.6 } },
          },
        },
        stack: {
          pods: 1,
          replicas: 2,
          pod_cap: 8,
          sim: { alpha_ms: 8, beta_ms: 0.05, gamma_ms: 0.0005, max_num_seqs: 8 },
          autoscale: { min_pods: 1, max_pods: 4, poll_ms: 500, drain_s: 10, refresh_ms: 500 },
        },
      });
      infra = await startInfra(scenario.stack, () => {});
      const gateways = await startGateways(
        scenario,
        infra,
        { kind: 'fairgate' },
        () => {},
        'autoscale',
      );
      const scaler = createScaler(infra, gateways.urls[0] as string, () => {});
      expect(scaler).toBeDefined();
      scaler?.start();
      let result: Awaited<ReturnType<typeof runScenario>>;
      try {
        result = await runScenario({
          scenario,
          targets: gateways.urls,
          adminToken: DEV_ADMIN_TOKEN,
          model: SIM_MODEL,
          label: 'fairgate',
        });
        result.scaler = scaler?.timeline ?? [];
      } finally {
        await scaler?.stop();
        await gateways.stop();
      }

      const timeline = result.scaler;
      const podsAt = (from: number, to: number) =>
        timeline.filter((s) => s.t >= from && s.t < to).map((s) => s.pods);
      const picture = JSON.stringify(timeline.map((s) => [Math.round(s.t), s.desired, s.pods]));
      // One pod before the step; more while the load is high; fewer again at the end.
      expect(Math.max(...podsAt(0, 6)), picture).toBe(1);
      const peak = Math.max(...podsAt(6, 22));
      expect(peak, picture).toBeGreaterThanOrEqual(2);
      expect(timeline.at(-1)?.pods, picture).toBeLessThan(peak);
      // The pods the gateways granted to followed the scaler (discovered through DNS).
      expect(Math.max(...result.admin.map((s) => s.livePods ?? 0))).toBeGreaterThanOrEqual(2);
      // Pods came and went without a failed request (queue drops under the overload are
      // flow control, not failures).
      expect(result.requests.filter((r) => r.outcome === 'error')).toEqual([]);
      const served = result.requests.filter((r) => r.outcome === 'ok');
      expect(served.length).toBeGreaterThan(120);
      // The gateway's metered usage after the run: every served request, once.
      expect(result.usage).toEqual([
        expect.objectContaining({ tenant: 'app', requests: served.length }),
      ]);

      const dir = mkdtempSync(join(tmpdir(), 'fairgate-load-autoscale-'));
      const report = writeRunReport(dir, [result], { title: 'autoscale_short' });
      expect(report.charts.map((c) => c.slice(dir.length + 1))).toContain('autoscale.svg');
    }, 90_000);
  },
);
