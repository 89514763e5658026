import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stopAll } from '@fairgate/testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { writeRunReport } from '../src/load/report.js';
import { runScenario } from '../src/load/runner.js';
import { DEV_ADMIN_TOKEN, parseScenario } from '../src/load/scenario.js';
import { type Infra, SIM_MODEL, startGateways, startInfra } from '../src/load/stack.js';

/**
 * One short real run: redis-server (or the embedded scheduler), one simulated pod, two
 * gateway replicas (built dist/: `npm run build` first), 4 s of streaming load from two
 * tenants through different replicas, then the report.
 */
describe('a short real run against a real stack', () => {
  let infra: Infra | undefined;
  afterAll(async () => {
    await infra?.stop();
    await stopAll();
  });

  it('measures every request and writes the report', async () => {
    const scenario = parseScenario({
      name: 'short',
      duration_s: 4,
      seed: 3,
      target_p99_ttft_s: 2,
      tenants: [
        {
          name: 'paying',
          key_ref: 'paying',
          weight: 2,
          slo_class: 'standard',
          arrival: { kind: 'poisson', rate: 6 },
          output_tokens: { median: 8, sigma: 0.3, max: 16 },
          via_replica: 0,
        },
        {
          name: 'free',
          key_ref: 'free',
          slo_class: 'batch',
          arrival: { kind: 'poisson', rate: 4 },
          output_tokens: { median: 8, sigma: 0.3, max: 16 },
          stream: false,
          via_replica: 1,
        },
      ],
      gateway: {
        scheduler: { budget: 16, queue_ttl_ms: 1000 },
        controller: { target_p99_ttft_s: 2, tick_s: 0.5, window_s: 2 },
      },
      stack: {
        pods: 1,
        replicas: 2,
        pod_cap: 16,
        sim: { alpha_ms: 5, beta_ms: 0.1, max_num_seqs: 16 },
      },
    });
    infra = await startInfra(scenario.stack, () => {});
    const gateways = await startGateways(scenario, infra, { kind: 'fairgate' }, () => {}, 'short');
    const ticks: number[] = [];
    const result = await runScenario({
      scenario,
      targets: gateways.urls,
      adminToken: DEV_ADMIN_TOKEN,
      model: SIM_MODEL,
      label: 'fairgate',
      onTick: (p) => ticks.push(p.elapsedS),
    });
    await gateways.stop();
    expect(result.requests.length).toBeGreaterThan(15);
    const bad = result.requests.filter((r) => r.outcome !== 'ok');
    expect(bad, JSON.stringify(bad.slice(0, 3))).toEqual([]);
    for (const r of result.requests) {
      expect(r.status).toBe(200);
      expect(r.ttftMs).toBeGreaterThan(0);
      expect(r.e2eMs).toBeGreaterThanOrEqual(r.ttftMs!);
      expect(r.outputTokens).toBe(r.maxTokens);
      expect(r.queueMs).toBeGreaterThanOrEqual(0);
    }
    const streamed = result.requests.filter((r) => r.tenant === 0);
    expect(streamed.some((r) => r.itlMs !== undefined && r.itlMs > 0)).toBe(true);
    // Tenants went through their own replica.
    expect(new Set(streamed.map((r) => r.target))).toEqual(new Set([0]));
    expect(new Set(result.requests.filter((r) => r.tenant === 1).map((r) => r.target))).toEqual(
      new Set([gateways.urls.length > 1 ? 1 : 0]),
    );
    expect(ticks.length).toBeGreaterThanOrEqual(3);
    expect(result.admin.length).toBeGreaterThanOrEqual(3);
    expect(result.admin.at(-1)?.budget).toBeGreaterThan(0);
    if (!infra.embedded) expect(result.admin.at(-1)?.leader).toMatch(/^short-/);
    expect(result.actions.length).toBeGreaterThan(0);

    const dir = mkdtempSync(join(tmpdir(), 'fairgate-load-report-'));
    const report = writeRunReport(dir, [result], { title: 'short' });
    expect(existsSync(report.html)).toBe(true);
    expect(report.charts).toHaveLength(6);
    for (const chart of report.charts) expect(readFileSync(chart, 'utf8')).toMatch(/^<svg/);
    const html = readFileSync(report.html, 'utf8');
    expect(html.match(/<svg/g)?.length).toBe(6);
    const json = JSON.parse(readFileSync(report.json, 'utf8'));
    expect(json.results[0].requests).toHaveLength(result.requests.length);
    const fromS = json.summaries[0].fromS as number;
    expect(json.summaries[0].total.completed).toBe(
      result.requests.filter((r) => r.startS >= fromS).length,
    );
  }, 60_000);
});
