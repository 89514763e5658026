import {
  type AppHandle,
  type RedisHandle,
  sha256Hex,
  startGatewayProcess,
  startRedis,
  startSim,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * Pools on one Redis, each its own model on its own sim (`--model`), behind two gateway
 * replicas: tenant `both` may use every model, tenant `one` only model-a. Each pool has
 * its own budget, queues and leader under its own hash tag; the request's model picks the
 * pool (docs/config.md, *Pools and models*). Pools A and B name their models; pool C serves
 * whatever its pod lists in its GET /v1/models (`discover_models`).
 */
const BUDGET_A = 4;
const BUDGET_B = 4;
const tag = Math.random().toString(36).slice(2, 8);
const POOL_A = `a${tag}`;
const POOL_B = `b${tag}`;
const POOL_C = `c${tag}`;

interface PoolState {
  pool: string;
  pools: string[];
  budget: number;
  inflight: number;
  waiting: number;
}

async function poolState(gateway: AppHandle, pool: string): Promise<PoolState> {
  const response = await fetch(`${gateway.url}/admin/state?pool=${pool}`, {
    headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
  });
  expect(response.status).toBe(200);
  return (await response.json()) as PoolState;
}

function client(gateway: AppHandle, apiKey: string): OpenAI {
  return new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey, maxRetries: 0 });
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
};

describe('pools of their own models, discovered models, per-tenant allow-lists', () => {
  let redis: RedisHandle;
  let gateways: AppHandle[];
  let simC: AppHandle;

  beforeAll(async () => {
    redis = await startRedis();
    // 20 ms per step: a request of 8 tokens holds its pod slot ~0.2 s.
    const [simA, simB] = await Promise.all(
      ['model-a', 'model-b'].map((model) =>
        startSim({ args: { 'alpha-ms': 20, 'beta-ms': 0.01, model } }),
      ),
    );
    simC = await startSim({ args: { 'alpha-ms': 5, model: 'model-c' } });
    const config = writeGatewayConfig({
      redisUrl: redis.url,
      upstream: { models_refresh_ms: 200 },
      tenants: [
        { id: 'both', api_key_sha256: [sha256Hex(TEST_KEYS.paying)], queue_max: 200 },
        {
          id: 'one',
          api_key_sha256: [sha256Hex(TEST_KEYS.free)],
          queue_max: 200,
          models: ['model-a'],
        },
      ],
      pools: [
        {
          name: POOL_A,
          models: [{ name: 'model-a', aliases: ['a-latest'] }],
          pods: [{ name: `${POOL_A}-0`, url: simA?.url, cap: 16 }],
          scheduler: { budget: BUDGET_A, queue_ttl_ms: 30_000 },
        },
        {
          name: POOL_B,
          models: ['model-b'],
          pods: [{ name: `${POOL_B}-0`, url: simB?.url, cap: 16 }],
          scheduler: { budget: BUDGET_B, queue_ttl_ms: 30_000 },
        },
        {
          name: POOL_C,
          discover_models: true,
          pods: [{ name: `${POOL_C}-0`, url: simC.url }],
        },
      ],
    });
    gateways = await Promise.all(
      [1, 2].map((n) => startGatewayProcess({ config, replicaId: `pools-${n}` })),
    );
  }, 60_000);

  afterAll(async () => {
    await stopAll();
    await redis?.stop();
  });

  it('the official SDK reaches each model on its pool; an alias reaches its model', async () => {
    const [r1, r2] = gateways as [AppHandle, AppHandle];
    const both = client(r1, TEST_KEYS.paying);
    for (const model of ['model-a', 'model-b', 'a-latest']) {
      const completion = await both.chat.completions.create({
        model,
        messages: [{ role: 'user', content: 'hello' }],
        max_tokens: 4,
      });
      expect(completion.model).toBe(model === 'a-latest' ? 'model-a' : model);
      expect(completion.choices[0]?.message.content).toBeTruthy();
    }
    const stream = await client(r2, TEST_KEYS.paying).chat.completions.create({
      model: 'model-b',
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 4,
      stream: true,
    });
    const models = new Set<string>();
    for await (const chunk of stream) models.add(chunk.model);
    expect([...models]).toEqual(['model-b']);
  });

  it("an alias reaches its model on every endpoint: an upload's model field is rewritten on the way", async () => {
    const both = client(gateways[1] as AppHandle, TEST_KEYS.paying);
    const embedded = await both.embeddings.create({ model: 'a-latest', input: 'hello' });
    expect(embedded.model).toBe('model-a');
    // The pod knows no `a-latest` (it answers 404): the field reaches it as `model-a`, the
    // fields after the file as they were sent.
    const transcription = await both.audio.transcriptions.create({
      model: 'a-latest',
      file: await toFile(Buffer.alloc(64_000, 3), 'speech.wav', { type: 'audio/wav' }),
      response_format: 'verbose_json',
      language: 'de',
    });
    expect(transcription.text.length).toBeGreaterThan(0);
    expect((transcription as { language?: string }).language).toBe('de');
  });

  it('a model the tenant may not use, or no pool serves, is 404 model_not_found', async () => {
    const one = client(gateways[0] as AppHandle, TEST_KEYS.free);
    const ok = await one.chat.completions.create({
      model: 'model-a',
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 4,
    });
    expect(ok.model).toBe('model-a');
    for (const model of ['model-b', 'model-c']) {
      const error = await one.chat.completions
        .create({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(OpenAI.NotFoundError);
      const notFound = error as InstanceType<typeof OpenAI.NotFoundError>;
      expect(notFound.code).toBe('model_not_found');
      expect(notFound.param).toBe('model');
      expect(notFound.message).toContain(model);
    }
  });

  it('GET /v1/models lists what each tenant may use', async () => {
    const ids = async (key: string) =>
      (await client(gateways[1] as AppHandle, key).models.list()).data.map((m) => m.id).sort();
    expect(await ids(TEST_KEYS.paying)).toEqual(['model-a', 'model-b', 'model-c']);
    expect(await ids(TEST_KEYS.free)).toEqual(['model-a']);
  });

  it('a pool with discover_models serves what its pod lists, as the list changes', async () => {
    const both = client(gateways[0] as AppHandle, TEST_KEYS.paying);
    const ask = (model: string) =>
      both.chat.completions
        .create({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 2 })
        .then(
          (completion) => completion.model,
          (error: unknown) => (error instanceof OpenAI.APIError ? error.status : error),
        );
    expect(await ask('model-c')).toBe('model-c');
    expect(await ask('model-c-lora')).toBe(404);
    // The pod comes back serving another model (an adapter loaded, the base one gone).
    await simC.stop();
    simC = await startSim({ port: simC.port, args: { 'alpha-ms': 5, model: 'model-c-lora' } });
    await expect.poll(() => ask('model-c-lora'), { timeout: 10_000 }).toBe('model-c-lora');
    expect(await ask('model-c')).toBe(404);
  });

  it('/metrics carries the pool on every pool series, each metric family once', async () => {
    const text = await (await fetch(`${(gateways[0] as AppHandle).url}/metrics`)).text();
    const types = text.split('\n').filter((line) => line.startsWith('# TYPE '));
    expect(new Set(types).size).toBe(types.length);
    for (const pool of [POOL_A, POOL_B]) {
      expect(text).toMatch(new RegExp(`fairgate_budget\\{[^}]*pool="${pool}"[^}]*\\} \\d`));
      expect(text).toMatch(
        new RegExp(`fairgate_requests_total\\{[^}]*outcome="completed"[^}]*pool="${pool}"`),
      );
    }
    // Series of the replica's edge carry no pool; none of a pool lacks it.
    for (const line of text.split('\n')) {
      if (line.startsWith('fairgate_budget') || line.startsWith('fairgate_requests_total')) {
        expect(line).toContain('pool="');
      }
    }
  });

  it('each pool has its own state; a flood on pool A does not slow pool B', async () => {
    const [r1, r2] = gateways as [AppHandle, AppHandle];
    const [a, b] = await Promise.all([poolState(r1, POOL_A), poolState(r2, POOL_B)]);
    expect([a.pool, a.budget, b.pool, b.budget]).toEqual([POOL_A, BUDGET_A, POOL_B, BUDGET_B]);
    expect(a.pools).toEqual([POOL_A, POOL_B, POOL_C]);

    const both = client(r2, TEST_KEYS.paying);
    const timeB = async (rounds: number) => {
      const ms: number[] = [];
      for (let i = 0; i < rounds; i++) {
        const started = performance.now();
        await both.chat.completions.create({
          model: 'model-b',
          messages: [{ role: 'user', content: 'hello' }],
          max_tokens: 8,
        });
        ms.push(performance.now() - started);
      }
      return ms;
    };
    const quiet = median(await timeB(10));

    // The flood: 48 open requests on pool A through both replicas (budget 4).
    const flood = {
      stop: false,
      deadline: Date.now() + 20_000,
      done: 0,
      failed: 0,
      queueMs: [] as number[],
    };
    /** One request on model-a; resolves with its x-fairgate-queue-ms. */
    const onA = async (gateway: AppHandle, key: string) => {
      const { response } = await client(gateway, key)
        .chat.completions.create({
          model: 'model-a',
          messages: [{ role: 'user', content: 'x' }],
          max_tokens: 8,
        })
        .withResponse();
      return Number(response.headers.get('x-fairgate-queue-ms'));
    };
    const flooder = async (gateway: AppHandle) => {
      while (!flood.stop && Date.now() < flood.deadline) {
        await onA(gateway, TEST_KEYS.free).then(
          (queueMs) => {
            flood.done++;
            flood.queueMs.push(queueMs);
          },
          () => flood.failed++,
        );
      }
    };
    const flooders = Array.from({ length: 48 }, (_, i) => flooder(i % 2 ? r1 : r2));
    try {
      await expect
        .poll(async () => (await poolState(r1, POOL_A)).waiting, { timeout: 5_000 })
        .toBeGreaterThan(20);
      const during = await timeB(10);
      const [floodedA, stateB] = await Promise.all([poolState(r2, POOL_A), poolState(r1, POOL_B)]);
      // Pool A is full and queues; pool B's budget is its own and nobody waits in it.
      expect(floodedA.inflight).toBe(BUDGET_A);
      expect(floodedA.waiting).toBeGreaterThan(20);
      expect(stateB.waiting).toBe(0);
      expect(stateB.inflight).toBeLessThanOrEqual(BUDGET_B);
      // Within 50% (and 30 ms) of the quiet median: two loopback processes on shared cores.
      expect(median(during)).toBeLessThan(Math.max(quiet * 1.5, quiet + 30));
      // Fairness inside pool A: tenant both, one request at a time, is served at its DRR
      // turn while tenant one's flood waits behind its own queue.
      const bothQueueMs: number[] = [];
      for (let i = 0; i < 6; i += 1) bothQueueMs.push(await onA(r1, TEST_KEYS.paying));
      expect(median(bothQueueMs)).toBeLessThan(median(flood.queueMs) / 3);
    } finally {
      flood.stop = true;
      await Promise.all(flooders);
    }
    expect(flood.failed).toBe(0);
    expect(flood.done).toBeGreaterThan(0);
    await expect.poll(async () => (await poolState(r1, POOL_A)).inflight).toBe(0);
  }, 60_000);
});
