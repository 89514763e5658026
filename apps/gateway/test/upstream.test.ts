import { decodeSseStream } from '@fairgate/openai';
import {
  type AppHandle,
  startSim,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { type RunningGateway, startGateway } from '../src/index.js';

const chat = (extra: Record<string, unknown> = {}) => ({
  model: 'sim-model',
  messages: [{ role: 'user', content: 'hi' }],
  max_tokens: 6,
  ...extra,
});

function post(
  gateway: RunningGateway,
  body: unknown,
  path = '/v1/chat/completions',
): Promise<Response> {
  return fetch(`${gateway.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

async function gatewayWith(
  pods: AppHandle[],
  options: { upstream?: Record<string, unknown>; sections?: Record<string, unknown> } = {},
): Promise<RunningGateway> {
  const config = writeGatewayConfig({
    pods: pods.map((sim, i) => ({ name: `pod-${i}`, url: sim.url })),
    ...options,
  });
  return startGateway({
    configPath: config,
    port: 0,
    replicaId: `up-${Math.random()}`.slice(0, 12),
    log: () => {},
  });
}

async function outcomes(gateway: RunningGateway): Promise<Record<string, number>> {
  const totals: Record<string, number> = {};
  for (const row of (await gateway.deps.pools.first.scheduler.snapshot()).counters) {
    for (const [outcome, n] of Object.entries(row.outcomes))
      totals[outcome] = (totals[outcome] ?? 0) + n;
  }
  return totals;
}

describe('upstream failures', () => {
  const gateways: RunningGateway[] = [];
  afterAll(async () => {
    await Promise.all(gateways.map((g) => g.close(500)));
    await stopAll();
  });

  it('retries a failure before the first byte once on another pod', async () => {
    const failing = await startSim({ args: { 'fail-rate': 1, model: 'sim-model' } });
    const healthy = await startSim({ args: { 'alpha-ms': 1, model: 'sim-model' } });
    const gateway = await gatewayWith([failing, healthy]);
    gateways.push(gateway);
    const statuses = await Promise.all(
      Array.from({ length: 12 }, () => post(gateway, chat()).then((r) => r.status)),
    );
    expect(statuses.every((s) => s === 200)).toBe(true);
    const metrics = await (await fetch(`${gateway.url}/metrics`)).text();
    expect(metrics).toMatch(
      /fairgate_upstream_errors_total\{[^}]*pod="pod-0"[^}]*kind="status"[^}]*\} [1-9]/,
    );
  });

  it('retries a request for a LoRA adapter only on a pod that lists it', async () => {
    const lora = { 'max-loras': 2, 'alpha-ms': 1, model: 'sim-model' };
    const failing = await startSim({
      args: { ...lora, 'fail-rate': 1, 'lora-modules': 'x=/lora/x' },
    });
    const without = await startSim({ args: lora });
    const holder = await startSim({ args: { ...lora, 'lora-modules': 'x=/lora/x' } });
    const sims = [failing, without, holder];
    // One request each straight to the pods: vLLM says its adapter slots after a step.
    for (const sim of sims) {
      await fetch(`${sim.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', prompt: 'hi', max_tokens: 1 }),
      }).then((r) => r.arrayBuffer());
    }
    const gateway = await gatewayWith(sims, { sections: { scrape: { interval_ms: 100 } } });
    gateways.push(gateway);
    // The leader has reported the pods' adapters, with the slots of those that stepped (one
    // report carries every pod; pod-0 fails every request, so it never says its slots).
    const { scheduler } = gateway.deps.pools.first;
    const slots = async () => (await scheduler.snapshot()).pods.map((p) => p.loraSlots);
    await expect.poll(slots, { timeout: 10_000 }).toEqual([null, 2, 2]);
    const received = async (sim: AppHandle) =>
      ((await (await fetch(`${sim.url}/debug/stats`)).json()) as { requests_received: number })
        .requests_received;
    const before = await received(without);
    // x is granted on pod-0 or pod-2; pod-0 fails every request before its first byte, and
    // the retry goes to pod-2, never to pod-1 (which would answer 404).
    const statuses = await Promise.all(
      Array.from({ length: 12 }, () => post(gateway, chat({ model: 'x' })).then((r) => r.status)),
    );
    expect(statuses).toEqual(Array(12).fill(200));
    expect(await received(without)).toBe(before);
  });

  it('answers 502 when the only pod fails, and counts upstream_error', async () => {
    const failing = await startSim({ args: { 'fail-rate': 1, model: 'sim-model' } });
    const gateway = await gatewayWith([failing]);
    gateways.push(gateway);
    const response = await post(gateway, chat());
    expect(response.status).toBe(502);
    expect(((await response.json()) as { error: { type: string } }).error.type).toBe(
      'upstream_error',
    );
    await expect.poll(async () => (await outcomes(gateway)).upstream_error).toBe(1);
  });

  it('answers 504 when the pod does not send headers in time', async () => {
    const stalled = await startSim({ args: { 'stall-ms': 2_000, model: 'sim-model' } });
    const gateway = await gatewayWith([stalled], {
      upstream: { headers_timeout_ms: 200, retries: 0 },
    });
    gateways.push(gateway);
    const response = await post(gateway, chat());
    expect(response.status).toBe(504);
  });

  it('ends a stream that breaks after the first byte with an SSE error event', async () => {
    const resetting = await startSim({
      args: { 'reset-after-tokens': 3, 'alpha-ms': 2, model: 'sim-model' },
    });
    const gateway = await gatewayWith([resetting]);
    gateways.push(gateway);
    const response = await post(gateway, chat({ stream: true, max_tokens: 20 }));
    expect(response.status).toBe(200);
    const events: string[] = [];
    for await (const event of decodeSseStream(response.body!)) events.push(event.data);
    const error = events.find((data) => data.includes('"error"'));
    expect(error).toBeDefined();
    expect(JSON.parse(error!).error.type).toBe('upstream_error');
    expect(events.at(-1)).toBe('[DONE]');
    await expect.poll(async () => (await outcomes(gateway)).upstream_error).toBe(1);
    expect((await gateway.deps.pools.first.scheduler.snapshot()).inflight).toBe(0);
  });

  it('ends a Responses stream that breaks with the Responses error event (no [DONE])', async () => {
    const resetting = await startSim({
      args: { 'reset-after-tokens': 3, 'alpha-ms': 2, model: 'sim-model' },
    });
    const gateway = await gatewayWith([resetting]);
    gateways.push(gateway);
    const body = { model: 'sim-model', input: 'hi', max_output_tokens: 20, stream: true };
    const response = await post(gateway, body, '/v1/responses');
    expect(response.status).toBe(200);
    const events: Array<{ event?: string | undefined; data: string }> = [];
    for await (const event of decodeSseStream(response.body!)) events.push(event);
    const last = events.at(-1)!;
    expect(last.event).toBe('error');
    const error = JSON.parse(last.data);
    expect(error).toMatchObject({ type: 'error', code: 'upstream_reset', param: null });
    expect(error.message).toMatch(/^upstream stream failed/);
    // Its sequence number follows the last event the pod sent.
    const before = JSON.parse(events.at(-2)!.data) as { sequence_number: number };
    expect(error.sequence_number).toBe(before.sequence_number + 1);
    expect(events.some((e) => e.data === '[DONE]')).toBe(false);
    await expect.poll(async () => (await outcomes(gateway)).upstream_error).toBe(1);
    // Metered without its usage event: a token per delta the pod sent (3).
    const metrics = await (await fetch(`${gateway.url}/metrics`)).text();
    expect(metrics).toMatch(/^fairgate_tokens_total\{[^}]*direction="output"[^}]*\} 3$/m);
    expect((await gateway.deps.pools.first.scheduler.snapshot()).inflight).toBe(0);
  });

  it('ejects a pod that stops answering health checks and keeps serving on the others', async () => {
    const doomed = await startSim({ args: { 'alpha-ms': 1, model: 'sim-model' } });
    const survivor = await startSim({ args: { 'alpha-ms': 1, model: 'sim-model' } });
    const gateway = await gatewayWith([doomed, survivor]);
    gateways.push(gateway);
    await doomed.kill();
    await expect
      .poll(() => gateway.deps.pools.first.pods.get('pod-0')?.healthy, { timeout: 3_000 })
      .toBe(false);
    const snapshot = await gateway.deps.pools.first.scheduler.snapshot();
    expect(snapshot.pods.find((p) => p.name === 'pod-0')?.healthy).toBe(false);
    const statuses = await Promise.all(
      Array.from({ length: 8 }, () => post(gateway, chat()).then((r) => r.status)),
    );
    expect(statuses).toEqual(Array(8).fill(200));
    expect((await fetch(`${gateway.url}/readyz`)).status).toBe(200);
  });

  it('answers 503 when no pod is healthy', async () => {
    const lonely = await startSim({ args: { model: 'sim-model' } });
    const gateway = await gatewayWith([lonely]);
    gateways.push(gateway);
    await lonely.kill();
    await expect
      .poll(() => gateway.deps.pools.first.pods.get('pod-0')?.healthy, { timeout: 3_000 })
      .toBe(false);
    const response = await post(gateway, chat());
    expect(response.status).toBe(503);
    expect((await fetch(`${gateway.url}/readyz`)).status).toBe(503);
  });
});
