import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findRedisServer, stopAll } from '@fairgate/testkit';
import { afterAll, expect, it } from 'vitest';
import { describeWithTools } from '../../test/support/required-tools.js';
import { writeRunReport } from '../src/load/report.js';
import { computeBatchSeries } from '../src/load/report-data.js';
import { runScenario } from '../src/load/runner.js';
import { DEV_ADMIN_TOKEN, parseScenario } from '../src/load/scenario.js';
import { type Infra, SIM_MODEL, startGateways, startInfra } from '../src/load/stack.js';

/**
 * batch_backfill scaled down, against a real stack: redis-server, two simulated pods, two
 * gateway replicas (built dist/: `npm run build` first). A diurnal interactive tenant for
 * 10 s and a 300-line batch of another tenant submitted at 2 s; the run waits for the batch
 * (at most 10 + 30 s), which must complete with every custom_id once in its output, and the
 * report must have the Batch backfill panel's series. The Batch API needs Redis: skipped
 * without a redis-server (or REDIS_URL), and failed so under CI=true.
 */
const LINES = 300;
describeWithTools(
  'a batch through the load generator against a real stack',
  { 'redis-server': findRedisServer() ?? process.env.REDIS_URL },
  'apt-get install -y redis-server, or set REDIS_URL',
  () => {
    let infra: Infra | undefined;
    afterAll(async () => {
      await infra?.stop();
      await stopAll();
    });

    it('submits, polls and checks the batch, and reports it', async () => {
      const scenario = parseScenario({
        name: 'backfill_short',
        duration_s: 10,
        seed: 2,
        target_p99_ttft_s: 1,
        tenants: [
          {
            name: 'interactive',
            key_ref: 'paying',
            weight: 2,
            slo_class: 'standard',
            arrival: { kind: 'diurnal', base_rate: 2, peak_rate: 10, period_s: '50%' },
            output_tokens: { median: 16, sigma: 0.3, max: 32 },
          },
          { name: 'backfill', key_ref: 'free', slo_class: 'batch' },
        ],
        batch: {
          tenant: 'backfill',
          lines: LINES,
          at_s: 2,
          output_tokens: { median: 6, sigma: 0.3, max: 12 },
          poll_ms: 250,
          drain_s: 30,
          via_replica: 1,
        },
        gateway: {
          scheduler: { queue_ttl_ms: 5_000, inflight_eviction: true },
          batch: { concurrency: 16, retry_base_ms: 100, retry_max_ms: 1_000 },
        },
        stack: {
          pods: 2,
          replicas: 2,
          pod_cap: 8,
          sim: { alpha_ms: 10, beta_ms: 0.5, max_num_seqs: 8 },
        },
      });
      infra = await startInfra(scenario.stack, () => {});
      const gateways = await startGateways(
        scenario,
        infra,
        { kind: 'fairgate' },
        () => {},
        'backfill',
      );
      const started = Date.now();
      const result = await runScenario({
        scenario,
        targets: gateways.urls,
        adminToken: DEV_ADMIN_TOKEN,
        model: SIM_MODEL,
        label: 'fairgate',
      });
      await gateways.stop();
      // Bounded: the duration plus the batch's drain at most.
      expect(Date.now() - started).toBeLessThan(42_000);

      const batch = result.batch!;
      expect(batch.errors).toEqual([]);
      expect(batch).toMatchObject({
        tenant: 'backfill',
        lines: LINES,
        status: 'completed',
        timedOut: false,
        cancelledByRunner: false,
        target: 1,
        requestCounts: { total: LINES, completed: LINES, failed: 0 },
      });
      expect(batch.id).toMatch(/^batch_/);
      expect(batch.submittedS).toBeCloseTo(2, 0);
      expect(batch.statusSeenS.in_progress).toBeGreaterThanOrEqual(batch.submittedS!);
      expect(batch.endedS).toBeGreaterThan(batch.statusSeenS.in_progress!);
      // Every custom_id exactly once in the output (none in an error file).
      expect(batch.output).toMatchObject({
        ok: true,
        exactlyOnce: LINES,
        outputLines: LINES,
        errorLines: 0,
      });
      // Polls every 250 ms: counts never go down.
      const counts = batch.samples.map((s) => s.completed);
      expect(counts).toEqual([...counts].sort((a, b) => a - b));
      expect(batch.samples.length).toBeGreaterThanOrEqual(2);

      // The live requests ran beside it.
      expect(result.requests.length).toBeGreaterThan(30);
      expect(result.requests.filter((r) => r.outcome !== 'ok')).toEqual([]);
      expect(result.admin.every((s) => s.podCap === 16)).toBe(true);

      // The panel's series: lines per second add up to the batch, the pods were busy.
      const series = computeBatchSeries(result, 1)!;
      expect(series.batchCompletedPerS.reduce((a, b) => a + b, 0)).toBeCloseTo(LINES, 6);
      expect(series.interactiveCompletedPerS.reduce((a, b) => a + b, 0)).toBe(
        result.requests.length,
      );
      expect(series.busyPct.length).toBe(result.admin.length);
      expect(Math.max(...series.busyPct.map((p) => p[1]))).toBeGreaterThan(50);

      const dir = mkdtempSync(join(tmpdir(), 'fairgate-load-batch-'));
      const report = writeRunReport(dir, [result], { title: 'backfill_short' });
      expect(report.charts.map((c) => c.slice(dir.length + 1))).toEqual([
        'tenant-interactive.svg',
        'pool.svg',
        'controller.svg',
        'ttft.svg',
        'throughput.svg',
        'batch.svg',
      ]);
      expect(readFileSync(report.html, 'utf8')).toContain('Batch backfill');
      const json = JSON.parse(readFileSync(report.json, 'utf8'));
      const summary = json.summaries[0].batch;
      expect(summary).toMatchObject({ status: 'completed', completed: LINES, failed: 0 });
      expect(summary.durationS).toBeGreaterThan(0);
      expect(summary.meanBusyPct).toBeGreaterThan(0);
      expect(summary.interactive.during.completed).toBeGreaterThan(0);
      expect(json.results[0].batch.output.ok).toBe(true);
    }, 60_000);
  },
);
