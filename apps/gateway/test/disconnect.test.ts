import { decodeSseStream } from '@fairgate/openai';
import { type AppHandle, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningGateway } from '../src/index.js';
import { type GatewayStack, startGatewayStack } from './fixture.js';

async function simRunning(sim: AppHandle): Promise<number> {
  const text = await (await fetch(`${sim.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('vllm:num_requests_running'));
  return Number(line?.split(' ').at(-1) ?? Number.NaN);
}

describe('a client that disconnects mid-stream', () => {
  let stack: GatewayStack;
  let sim: AppHandle;
  let gateway: RunningGateway;

  beforeAll(async () => {
    stack = await startGatewayStack({
      replicaId: 'disconnect',
      simArgs: { 'alpha-ms': 20 },
      withRedis: true,
    });
    ({ sim, gateway } = stack);
  });
  afterAll(() => stack?.close());

  it('closes the upstream within 500 ms and frees the slot', async () => {
    const client = new AbortController();
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'x' }],
        max_tokens: 500,
        stream: true,
      }),
      signal: client.signal,
    });
    let events = 0;
    for await (const _ of decodeSseStream(response.body!)) {
      if (++events === 3) break;
    }
    expect(await simRunning(sim)).toBe(1);
    const abortedAt = performance.now();
    client.abort();
    await expect.poll(() => simRunning(sim), { timeout: 2_000, interval: 10 }).toBe(0);
    const closedMs = performance.now() - abortedAt;
    console.log(`sim saw the disconnect after ${closedMs.toFixed(0)} ms`);
    expect(closedMs).toBeLessThan(500);
    await expect
      .poll(async () => (await gateway.deps.pools.first.scheduler.snapshot()).inflight)
      .toBe(0);
    const counters = (await gateway.deps.pools.first.scheduler.snapshot()).counters;
    expect(counters.some((c) => c.outcomes.cancelled === 1)).toBe(true);
  });
});

describe('a client that disconnects while its request waits for a grant', () => {
  let stack: GatewayStack;
  let gateway: RunningGateway;

  beforeAll(async () => {
    stack = await startGatewayStack({
      replicaId: 'disconnect-queued',
      simArgs: { 'alpha-ms': 20 },
      // One slot: a long request holds it, the next one waits.
      config: { budget: 1, scheduler: { queue_ttl_ms: 30_000 } },
    });
    ({ gateway } = stack);
  });
  afterAll(() => stack?.close());

  const chat = (maxTokens: number, signal?: AbortSignal) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'x' }],
        max_tokens: maxTokens,
      }),
      ...(signal ? { signal } : {}),
    });

  it('cancels the queued request and ends its handler (nothing left in progress)', async () => {
    const holder = chat(100);
    await expect
      .poll(async () => (await gateway.deps.pools.first.scheduler.snapshot()).inflight)
      .toBe(1);
    const client = new AbortController();
    const waiting = chat(4, client.signal).catch(() => 'aborted');
    await expect
      .poll(async () => (await gateway.deps.pools.first.scheduler.snapshot()).waiting)
      .toBe(1);
    client.abort();
    expect(await waiting).toBe('aborted');
    // The queue entry is cancelled at once, and the request's handler ends: the drain
    // counts no request in progress once the holder is done.
    await expect
      .poll(async () => (await gateway.deps.pools.first.scheduler.snapshot()).waiting, {
        timeout: 2_000,
      })
      .toBe(0);
    const held = await holder;
    expect(held.status).toBe(200);
    await held.text();
    await expect.poll(() => gateway.deps.drain.active, { timeout: 2_000 }).toBe(0);
    const counters = (await gateway.deps.pools.first.scheduler.snapshot()).counters;
    expect(counters.reduce((sum, c) => sum + c.outcomes.cancelled, 0)).toBe(1);
  });
});
