import {
  estimatePromptTokens,
  isOpenAIErrorBody,
  parseChatCompletionRequest,
} from '@fairgate/openai';
import {
  type AppHandle,
  type RedisHandle,
  sha256Hex,
  startRedis,
  startSim,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningGateway, startGateway } from '../src/index.js';
import { type GatewayStack, startGatewayStack } from './fixture.js';

/**
 * The OpenAI SDK against one gateway replica in front of a real sim, on both
 * schedulers: the embedded default (no Redis) and Redis.
 */
describe.each(['embedded', 'redis'] as const)(
  'OpenAI API through the gateway (%s scheduler)',
  (mode) => {
    let sim: AppHandle;
    let redis: RedisHandle | undefined;
    let gateway: RunningGateway;
    let client: OpenAI;

    beforeAll(async () => {
      sim = await startSim({
        args: { 'alpha-ms': 2, 'beta-ms': 0.01, 'gamma-ms': 0.0001, model: 'sim-model' },
      });
      if (mode === 'redis') redis = await startRedis();
      const config = writeGatewayConfig({
        pods: [{ name: 'pod-a', url: sim.url }],
        ...(redis ? { redisUrl: redis.url } : {}),
      });
      gateway = await startGateway({
        configPath: config,
        port: 0,
        replicaId: `api-${mode}`,
        log: () => {},
      });
      client = new OpenAI({
        baseURL: `${gateway.url}/v1`,
        apiKey: TEST_KEYS.paying,
        maxRetries: 0,
      });
    });
    afterAll(async () => {
      await gateway?.close(1_000);
      await sim?.stop();
      await redis?.stop();
    });

    it('streams a chat completion with exact usage', async () => {
      const body = {
        model: 'sim-model',
        messages: [{ role: 'user' as const, content: 'hello there, gateway' }],
        max_tokens: 12,
      };
      const stream = await client.chat.completions.create({
        ...body,
        stream: true,
        stream_options: { include_usage: true },
      });
      let text = '';
      let usage: OpenAI.CompletionUsage | undefined | null;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta?.content ?? '';
        if (chunk.usage) usage = chunk.usage;
      }
      expect(text.length).toBeGreaterThan(0);
      expect(usage?.completion_tokens).toBe(12);
      expect(usage?.prompt_tokens).toBe(estimatePromptTokens(parseChatCompletionRequest(body)));
    });

    it('hides the usage chunk from a stream that did not ask for it', async () => {
      const response = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_KEYS.paying}`,
          'content-type': 'application/json',
        },
        body: JSON.stringify({
          model: 'sim-model',
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 4,
          stream: true,
        }),
      });
      expect(response.status).toBe(200);
      const wire = await response.text();
      expect(wire).not.toContain('"usage"');
      expect(wire.trimEnd().endsWith('data: [DONE]')).toBe(true);
      expect(response.headers.get('x-request-id')).toBeTruthy();
      expect(Number(response.headers.get('x-fairgate-queue-ms'))).toBeGreaterThanOrEqual(0);
    });

    it('answers non-streaming chat and completions', async () => {
      const chat = await client.chat.completions.create({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'one' }],
        max_tokens: 5,
      });
      expect(chat.usage?.completion_tokens).toBe(5);
      expect(chat.choices[0]?.message.content?.length).toBeGreaterThan(0);
      const completion = await client.completions.create({
        model: 'sim-model',
        prompt: 'abcdefgh',
        max_tokens: 3,
      });
      expect(completion.usage).toMatchObject({ prompt_tokens: 2, completion_tokens: 3 });
    });

    it('streams completions', async () => {
      const stream = await client.completions.create({
        model: 'sim-model',
        prompt: 'abcd',
        max_tokens: 4,
        stream: true,
      });
      let chunks = 0;
      for await (const chunk of stream) if (chunk.choices[0]?.text) chunks++;
      expect(chunks).toBe(4);
    });

    it('forwards unknown vLLM fields untouched', async () => {
      const chat = await client.chat.completions.create({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'x' }],
        max_tokens: 2,
        // @ts-expect-error vLLM extras are not in the SDK's types
        top_k: 5,
        repetition_penalty: 1.1,
        guided_choice: ['a', 'b'],
      });
      expect(chat.usage?.completion_tokens).toBe(2);
    });

    it('maps 401 to AuthenticationError and 400 to BadRequestError', async () => {
      const stranger = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'nope', maxRetries: 0 });
      await expect(
        stranger.chat.completions.create({
          model: 'sim-model',
          messages: [{ role: 'user', content: 'x' }],
        }),
      ).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
      await expect(
        client.chat.completions.create({
          model: 'sim-model',
          messages: [{ role: 'user', content: 'x' }],
          max_tokens: 'ten' as unknown as number, // deliberately wrong type
        }),
      ).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    });

    it('lists the pool models', async () => {
      const models = await client.models.list();
      expect(models.data.map((m) => m.id)).toEqual(['sim-model']);
    });

    it('serves /healthz, /readyz, /metrics and /admin/state', async () => {
      expect((await fetch(`${gateway.url}/healthz`)).status).toBe(200);
      expect((await fetch(`${gateway.url}/readyz`)).status).toBe(200);
      const metrics = await (await fetch(`${gateway.url}/metrics`)).text();
      expect(metrics).toContain('fairgate_requests_total');
      expect(metrics).toContain('fairgate_ttft_seconds_bucket');
      const denied = await fetch(`${gateway.url}/admin/state`);
      expect(denied.status).toBe(401);
      expect(isOpenAIErrorBody(await denied.json())).toBe(true);
      const state = await fetch(`${gateway.url}/admin/state`, {
        headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
      });
      expect(state.status).toBe(200);
      const body = (await state.json()) as {
        mode: string;
        budget: number;
        inflight: number;
        pods: unknown[];
      };
      expect(body).toMatchObject({ mode, budget: 16 });
      expect(body.pods).toHaveLength(1);
    });

    it('settles in-flight to zero after the requests above', async () => {
      await expect
        .poll(async () => {
          const state = await fetch(`${gateway.url}/admin/state`, {
            headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
          });
          return ((await state.json()) as { inflight: number }).inflight;
        })
        .toBe(0);
    });
  },
);

describe('flow-control drops', () => {
  let gateway: RunningGateway;

  let stack: GatewayStack;

  beforeAll(async () => {
    // A slow pod and a budget of 1 with no queue: a second concurrent request is dropped.
    stack = await startGatewayStack({
      replicaId: 'drops',
      simArgs: { 'alpha-ms': 100 },
      config: {
        budget: 1,
        tenants: [{ id: 'paying', api_key_sha256: [sha256Hex(TEST_KEYS.paying)], queue_max: 0 }],
      },
    });
    gateway = stack.gateway;
  });
  afterAll(() => stack?.close());

  it('is a RateLimitError with Retry-After, which the SDK honours on retry', async () => {
    const noRetry = new OpenAI({
      baseURL: `${gateway.url}/v1`,
      apiKey: TEST_KEYS.paying,
      maxRetries: 0,
    });
    const request = {
      model: 'sim-model',
      messages: [{ role: 'user' as const, content: 'x' }],
      max_tokens: 4,
    };
    const first = noRetry.chat.completions.create(request); // ~500 ms on the slow pod
    await new Promise((resolve) => setTimeout(resolve, 50));
    const dropped = await noRetry.chat.completions.create(request).catch((error: unknown) => error);
    expect(dropped).toBeInstanceOf(OpenAI.RateLimitError);
    const rateLimit = dropped as InstanceType<typeof OpenAI.RateLimitError>;
    expect(rateLimit.headers.get('retry-after')).toBe('1');
    expect(rateLimit.headers.get('x-fairgate-drop-reason')).toBe('tenant_queue_full');

    await first;
    const retrying = new OpenAI({
      baseURL: `${gateway.url}/v1`,
      apiKey: TEST_KEYS.paying,
      maxRetries: 2,
    });
    const third = noRetry.chat.completions.create(request);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const started = performance.now();
    const retried = await retrying.chat.completions.create(request);
    expect(retried.usage?.completion_tokens).toBe(4);
    expect(performance.now() - started).toBeGreaterThanOrEqual(900); // waited the Retry-After
    await third;
  });
});

describe('queue wait', () => {
  let stack: GatewayStack;
  let gateway: RunningGateway;

  beforeAll(async () => {
    stack = await startGatewayStack({
      replicaId: 'queue-wait',
      simArgs: { 'alpha-ms': 100 },
      config: { budget: 1 },
    });
    gateway = stack.gateway;
  });
  afterAll(() => stack?.close());

  it('is reported in x-fairgate-queue-ms for a request that waited for the budget', async () => {
    const send = (stream: boolean) =>
      fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_KEYS.paying}`,
          'content-type': 'application/json',
        },
        body: JSON.stringify({
          model: 'sim-model',
          messages: [{ role: 'user', content: 'x' }],
          max_tokens: 3,
          stream,
        }),
      });
    for (const [firstStreams, secondStreams] of [
      [false, true],
      [true, false],
    ]) {
      const first = send(firstStreams!);
      await new Promise((resolve) => setTimeout(resolve, 30));
      const [a, b] = await Promise.all([first, send(secondStreams!)]);
      await Promise.all([a.text(), b.text()]);
      expect(Number(a.headers.get('x-fairgate-queue-ms'))).toBeLessThan(100);
      // The second waited for the first (3 tokens at ~100 ms per iteration) to finish.
      expect(Number(b.headers.get('x-fairgate-queue-ms'))).toBeGreaterThan(150);
    }
  });
});
