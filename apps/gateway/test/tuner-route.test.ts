import { TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GatewayStack, startGatewayStack } from './fixture.js';

/**
 * GET /admin/capacity on a gateway leading one real sim: the leader scrapes the sim, tunes
 * it, and the route shows the report (admin token required).
 */
describe('GET /admin/capacity', () => {
  let stack: GatewayStack;
  beforeAll(async () => {
    stack = await startGatewayStack({
      replicaId: 'cap',
      simArgs: { 'max-num-seqs': 32 },
      config: {
        sections: {
          scrape: { interval_ms: 50, timeout_ms: 500 },
          tuner: {
            period_s: 0.5,
            min_requests: 3,
            max_batch: 32,
            models: { 'sim-model': { target_ttft_ms: 200, target_itl_ms: 30 } },
          },
        },
      },
    });
  });
  afterAll(async () => {
    await stack?.close();
  });

  it('needs the admin token', async () => {
    const denied = await fetch(`${stack.gateway.url}/admin/capacity`);
    expect(denied.status).toBe(401);
  });

  it('reports the learned pod, its capacity and desired pods', async () => {
    const body = async () => {
      const res = await fetch(`${stack.gateway.url}/admin/capacity`, {
        headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
      });
      expect(res.status).toBe(200);
      return (await res.json()) as any;
    };
    // Load straight at the sim: the leader reads the sim's own metrics.
    const stopAt = performance.now() + 4_000;
    let report: any;
    const load = (async () => {
      const inflight = new Set<Promise<unknown>>();
      while (performance.now() < stopAt) {
        const p = fetch(`${stack.sim.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim-model', prompt: 'x'.repeat(800), max_tokens: 16 }),
        }).then((r) => r.arrayBuffer());
        inflight.add(p);
        void p.finally(() => inflight.delete(p));
        await new Promise((r) => setTimeout(r, 40));
      }
      await Promise.all(inflight);
    })();
    for (let i = 0; i < 80; i++) {
      await new Promise((r) => setTimeout(r, 100));
      report = await body();
      if (report.pods?.['pod-a']?.capacity_rps > 0) break;
    }
    await load;
    expect(report.source).toBe('leader');
    const pod = report.pods['pod-a'];
    expect(pod.model).toBe('sim-model');
    expect(pod.alpha_ms).toBeGreaterThan(0);
    expect(pod.beta_ms).toBeGreaterThan(0);
    expect(pod.gamma_ms).toBeGreaterThan(0);
    expect(pod.capacity_rps).toBeGreaterThan(0);
    expect(pod.ceiling).toBe(32);
    expect(report.models['sim-model'].targets).toEqual({
      ttft_ms: 200,
      itl_ms: 30,
      source: 'explicit',
    });
    expect(typeof report.desired_pods).toBe('number');
    const metrics = await (await fetch(`${stack.gateway.url}/metrics`)).text();
    expect(metrics).toMatch(/fairgate_tuner_alpha_ms\{pod="pod-a"/);
    expect(metrics).toMatch(/fairgate_capacity_rps\{pod="pod-a"/);
  });
});
