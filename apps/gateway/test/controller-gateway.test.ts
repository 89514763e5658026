import { type AppHandle, startSim, TEST_KEYS, writeGatewayConfig } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningGateway, startGateway } from '../src/index.js';

/**
 * One gateway replica (embedded scheduler) with the controller on, in front of real sims:
 * the TTFT window is fed by SLO-protected requests only, upstream failures are a decrease
 * signal, and /admin/state and /metrics show the controller.
 */
const CONTROLLER_ENV = {
  FAIRGATE__CONTROLLER__TARGET_P99_TTFT_S: '2',
  FAIRGATE__CONTROLLER__TICK_S: '0.2',
  FAIRGATE__CONTROLLER__WINDOW_S: '30',
  FAIRGATE__CONTROLLER__CAP_PER_WORKER: '8',
  FAIRGATE__CONTROLLER__MIN_SAMPLES: '3',
};

async function stream(gateway: RunningGateway, apiKey: string): Promise<number> {
  const response = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'sim-model',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 3,
      stream: true,
    }),
  });
  await response.arrayBuffer();
  return response.status;
}

async function adminState(gateway: RunningGateway): Promise<any> {
  const response = await fetch(`${gateway.url}/admin/state`, {
    headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
  });
  return response.json();
}

async function waitFor<T>(probe: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('gateway with the controller on', () => {
  let sim: AppHandle;
  let failingSim: AppHandle;
  const gateways: RunningGateway[] = [];

  beforeAll(async () => {
    [sim, failingSim] = await Promise.all([
      startSim({ args: { 'alpha-ms': 2, model: 'sim-model' } }),
      startSim({ args: { 'alpha-ms': 2, model: 'sim-model', 'fail-rate': 1 } }),
    ]);
  });
  afterAll(async () => {
    await Promise.all(gateways.map((g) => g.close(1_000)));
    await Promise.all([sim?.stop(), failingSim?.stop()]);
  });

  async function gatewayFor(pod: AppHandle, replicaId: string): Promise<RunningGateway> {
    const config = writeGatewayConfig({
      pods: [{ name: 'pod-a', url: pod.url }],
      scheduler: { queue_ttl_ms: 500 },
    });
    const gateway = await startGateway({
      configPath: config,
      port: 0,
      replicaId,
      env: { ...process.env, ...CONTROLLER_ENV },
      log: () => {},
    });
    gateways.push(gateway);
    return gateway;
  }

  it('feeds the window with SLO-protected TTFTs only and shows the controller', async () => {
    const gateway = await gatewayFor(sim, 'ctl-ok');
    // paying is 'standard' (priority 3): protected. free is 'batch' (-1): not.
    for (let i = 0; i < 6; i += 1) expect(await stream(gateway, TEST_KEYS.paying)).toBe(200);
    for (let i = 0; i < 4; i += 1) expect(await stream(gateway, TEST_KEYS.free)).toBe(200);
    const state = await waitFor(async () => {
      const s = await adminState(gateway);
      // A tick that read all six (the replica flushes once a second).
      return s.controller.window.samples === 6 && s.controller.actions[0]?.samples === 6
        ? s
        : undefined;
    });
    expect(state).toMatchObject({ leader: 'ctl-ok', epoch: 1, is_leader: true, budget: 8 });
    expect(state.controller).toMatchObject({
      enabled: true,
      target_p99_ttft_s: 2,
      cap_per_worker: 8,
      budget: 8,
      written_by: { replica: 'ctl-ok', epoch: 1 },
      window: { seconds: 30, samples: 6, errors: 0, p99_from_errors: false },
    });
    expect(state.controller.band_s[0]).toBeCloseTo(1.6);
    expect(state.controller.band_s[1]).toBeCloseTo(2.4);
    expect(state.controller.window.p99_ttft_s).toBeGreaterThan(0);
    expect(state.controller.window.p99_ttft_s).toBeLessThan(1);
    // The pods' own part (grant to first token) is recorded alongside, never above it.
    expect(state.controller.window.p99_service_ttft_s).toBeGreaterThan(0);
    expect(state.controller.window.p99_service_ttft_s).toBeLessThanOrEqual(
      state.controller.window.p99_ttft_s,
    );
    const newest = state.controller.actions[0];
    expect(newest.tick).toBe(state.controller.tick);
    expect(newest.reason).toEqual(expect.any(String));
    expect(state.local.fenced_writes.led_epochs).toEqual([1]);

    const metrics = await (await fetch(`${gateway.url}/metrics`)).text();
    expect(metrics).toMatch(/fairgate_is_leader\{[^}]*\} 1/);
    expect(metrics).toMatch(/fairgate_budget\{[^}]*\} 8/);
    expect(metrics).toMatch(/fairgate_cap_per_worker\{[^}]*\} 8/);
    expect(metrics).toMatch(/fairgate_controller_actions_total\{action="(hold|increase)"/);
    expect(metrics).toMatch(/fairgate_controller_p99_ttft_seconds\{[^}]*\} 0\.\d+/);
  });

  it('counts upstream failures of protected requests as a decrease signal', async () => {
    const gateway = await gatewayFor(failingSim, 'ctl-failing');
    for (let i = 0; i < 4; i += 1) expect(await stream(gateway, TEST_KEYS.paying)).toBe(502);
    const decrease = await waitFor(async () => {
      const s = await adminState(gateway);
      return s.controller.actions.find((a: any) => a.kind === 'decrease');
    });
    // Cut from the one request in flight at the peak (not from the unused 8), so down to
    // the minimum of 4 per worker.
    expect(decrease).toMatchObject({
      code: 'upstream_errors',
      capBefore: 8,
      capAfter: 4,
      budget: 4,
      windowPeak: 1,
      p99S: 'errors',
      errors: 4,
      samples: 0,
    });
    const state = await adminState(gateway);
    expect(state.controller.window).toMatchObject({
      errors: 4,
      p99_ttft_s: null,
      p99_from_errors: true,
    });
  });
});
