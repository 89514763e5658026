import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { estimateTextTokens } from '@fairgate/openai';
import { type AppHandle, sha256Hex, TEST_KEYS } from '@fairgate/testkit';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  expectConserved,
  metricSum,
  type Pool,
  SIM_MODEL,
  startPool,
  sumByLabels,
  tenantTotal,
} from './support/pool.js';
import { rssGrowthDuring, settledRss } from './support/proc.js';

/**
 * vLLM's other endpoints through the same stages as a chat (docs/gateway.md, *The endpoint
 * table*): two replicas on one Redis, two sims. Embeddings with the official OpenAI SDK,
 * rerank and score by plain HTTP: each takes a slot, is counted in the scheduler's flow
 * counters and metered by its input tokens. Tokenize and detokenize take none.
 */
const TEXTS = ['What is the capital of France?', 'Paris is the capital.', 'Cats purr.'];

async function post(url: string, path: string, body: unknown): Promise<Response> {
  return fetch(`${url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

/** Input tokens the replicas metered (fairgate_tokens_total, direction input). */
async function meteredInput(pool: Pool): Promise<number> {
  let total = 0;
  for (const gateway of pool.gateways) {
    const text = await (await fetch(`${gateway.url}/metrics`)).text();
    total += sumByLabels(text, 'fairgate_tokens_total', ['direction']).get('input') ?? 0;
  }
  return total;
}

/**
 * The anonymous memory a bare Node HTTP server gains while it reads `body` and drops it (its
 * third upload, settled, as the replica's is measured): what Node itself leaves to its GC.
 */
async function bareServerRssGrowthKb(body: Buffer): Promise<number> {
  const script =
    "require('node:http').createServer(async (q, s) => { for await (const _ of q); s.end(); })" +
    ".listen(0, '127.0.0.1', function () { console.log(this.address().port); });";
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const [line] = (await once(child.stdout, 'data')) as [Buffer];
    const send = () => fetch(`http://127.0.0.1:${String(line).trim()}/`, { method: 'POST', body });
    await (await send()).arrayBuffer();
    await (await send()).arrayBuffer();
    await settledRss(child.pid as number, 'RssAnon');
    const { growthKb } = await rssGrowthDuring(
      child.pid as number,
      async () => (await send()).arrayBuffer(),
      'RssAnon',
    );
    return growthKb;
  } finally {
    child.kill();
  }
}

/** Sequences the sims' engines are running (an audio file is one per 30 seconds). */
async function podsRunning(pool: Pool): Promise<number> {
  const running = await Promise.all(
    pool.sims.map((sim) => metricSum(sim.url, 'vllm:num_requests_running')),
  );
  return running.reduce((a, b) => a + b, 0);
}

/** Requests each sim's engine has served. */
function engineRequests(pool: Pool): Promise<number[]> {
  return Promise.all(pool.sims.map((sim) => metricSum(sim.url, 'vllm:request_success_total')));
}

describe('every endpoint vLLM serves, under the same flow control', () => {
  let pool: Pool;
  const admitted = async () =>
    tenantTotal(await pool.state(), 'paying', (row) => row.outcomes.completed);

  beforeAll(async () => {
    pool = await startPool({
      tenants: [{ id: 'paying', api_key_sha256: [sha256Hex(TEST_KEYS.paying)], queue_max: 100 }],
    });
  }, 60_000);

  afterAll(async () => pool?.stop());

  it('embeddings.create (OpenAI SDK), rerank and score through both replicas: one slot each, metered', async () => {
    const before = { completed: await admitted(), input: await meteredInput(pool) };
    let usage = 0;
    for (const [i, gateway] of pool.gateways.entries()) {
      const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: TEST_KEYS.paying });
      const embedded = await client.embeddings.create({ model: SIM_MODEL, input: TEXTS });
      expect(embedded.data.map((d) => d.index)).toEqual([0, 1, 2]);
      expect(embedded.data.every((d) => d.embedding.length > 0)).toBe(true);
      const expected = TEXTS.reduce((n, t) => n + estimateTextTokens(t), 0);
      expect(embedded.usage.prompt_tokens, `replica ${i}`).toBe(expected);
      usage += embedded.usage.prompt_tokens;

      const reranked = await post(gateway.url, '/v1/rerank', {
        model: SIM_MODEL,
        query: TEXTS[0],
        documents: TEXTS.slice(1),
      });
      expect(reranked.status).toBe(200);
      const rerank = (await reranked.json()) as {
        results: { index: number; relevance_score: number }[];
        usage: { total_tokens: number };
      };
      expect(rerank.results.map((r) => r.index).sort()).toEqual([0, 1]);
      usage += rerank.usage.total_tokens;

      const scored = await post(gateway.url, '/v1/score', {
        model: SIM_MODEL,
        text_1: TEXTS[0],
        text_2: TEXTS.slice(1),
      });
      expect(scored.status).toBe(200);
      const score = (await scored.json()) as {
        data: { index: number; score: number }[];
        usage: { prompt_tokens: number };
      };
      expect(score.data.map((d) => d.index)).toEqual([0, 1]);
      usage += score.usage.prompt_tokens;
    }
    await expectConserved(pool);
    // Six requests (three per replica), each admitted and completed once; the input tokens
    // the pods reported are metered, once.
    expect((await admitted()) - before.completed).toBe(6);
    await expect.poll(async () => (await meteredInput(pool)) - before.input).toBe(usage);
  }, 30_000);

  it('responses.create (OpenAI SDK), streaming and not, through both replicas: a slot each, metered', async () => {
    const before = { completed: await admitted(), input: await meteredInput(pool) };
    let input = 0;
    for (const gateway of pool.gateways) {
      const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: TEST_KEYS.paying });
      const answer = await client.responses.create({
        model: SIM_MODEL,
        instructions: 'Answer briefly.',
        input: TEXTS[0] as string,
        max_output_tokens: 8,
      });
      expect(answer.output_text.length).toBeGreaterThan(0);
      expect(answer.usage?.output_tokens).toBe(8);
      input += answer.usage?.input_tokens ?? 0;

      const stream = await client.responses.create({
        model: SIM_MODEL,
        input: [{ role: 'user', content: TEXTS[1] as string }],
        max_output_tokens: 6,
        stream: true,
      });
      const types: string[] = [];
      let deltas = '';
      let usage: { input_tokens: number; output_tokens: number } | undefined;
      for await (const event of stream) {
        types.push(event.type);
        if (event.type === 'response.output_text.delta') deltas += event.delta;
        if (event.type === 'response.completed' || event.type === 'response.incomplete') {
          usage = event.response.usage ?? undefined;
        }
      }
      // vLLM's events, in order, kept by the relay: opened, 6 deltas, closed.
      expect(types[0]).toBe('response.created');
      expect(types.filter((t) => t === 'response.output_text.delta')).toHaveLength(6);
      expect(types.at(-1)).toMatch(/^response\.(completed|incomplete)$/);
      expect(deltas.length).toBeGreaterThan(0);
      expect(usage?.output_tokens).toBe(6);
      input += usage?.input_tokens ?? 0;
    }
    await expectConserved(pool);
    expect((await admitted()) - before.completed).toBe(4);
    await expect.poll(async () => (await meteredInput(pool)) - before.input).toBe(input);
  }, 30_000);

  it('audio.transcriptions.create (OpenAI SDK) of a 5 MB file: the replica grows under 2 MB meanwhile; a slot, metered', async () => {
    const [gateway] = pool.gateways as [AppHandle];
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: TEST_KEYS.paying });
    const audio = Buffer.alloc(5 * 1024 * 1024, 7);
    const transcribe = async () =>
      client.audio.transcriptions.create({
        model: SIM_MODEL,
        file: await toFile(audio, 'speech.wav', { type: 'audio/wav' }),
      });
    // Two uploads first, and the replica settled: what it allocates once (the code an upload
    // makes hot, compiled; the heap at its working size) is not what an upload holds.
    await transcribe();
    await transcribe();
    await expectConserved(pool); // the first ones' releases counted
    const before = { completed: await admitted(), input: await meteredInput(pool) };
    await settledRss(gateway.pid, 'RssAnon');
    // Its anonymous memory (the pages of node's own executable that new code paths bring in
    // are shared, and are not what an upload holds), while the upload comes in and goes on to
    // the pod: until the pod runs it. The transcription after that is the pod's work.
    let transcription: ReturnType<typeof transcribe> | undefined;
    const { baselineKb, growthKb } = await rssGrowthDuring(
      gateway.pid,
      async () => {
        transcription = transcribe();
        await expect
          .poll(() => podsRunning(pool), { interval: 5, timeout: 10_000 })
          .toBeGreaterThan(0);
      },
      'RssAnon',
    );
    const answer = await (transcription as ReturnType<typeof transcribe>);
    expect(answer.text.length).toBeGreaterThan(0);
    // The upload is written to a file as it comes and read from it as the pod takes it, its
    // read buffers collected every 256 KiB (buffer-collection.ts). A bare Node server that
    // leaves them to V8 holds most of the upload in dead buffers until its next collection.
    const bare = await bareServerRssGrowthKb(audio);
    console.log(
      `audio upload of ${audio.length} bytes: the replica's anonymous RSS ${baselineKb} kB, +${growthKb} kB at its peak; a bare Node server that only reads the same upload: +${bare} kB`,
    );
    expect(growthKb, `anonymous RSS ${baselineKb} kB, +${growthKb} kB`).toBeLessThan(2048);
    await expectConserved(pool);
    expect((await admitted()) - before.completed).toBe(1);
    // The pod's usage is seconds of audio, metered as the encoder tokens they amount to.
    const { seconds } = (answer as unknown as { usage: { seconds: number } }).usage;
    await expect
      .poll(async () => (await meteredInput(pool)) - before.input)
      .toBe(Math.ceil(seconds * 50));
    // The file the upload was written to is gone with its answer.
    await expect
      .poll(() => readdirSync(tmpdir()).filter((name) => name.startsWith('fairgate-upload-')))
      .toEqual([]);
  }, 60_000);

  it('a streamed transcription (OpenAI SDK, stream: true): chunks as the pod sends them, metered from the usage the gateway asks for', async () => {
    const [, gateway] = pool.gateways as [AppHandle, AppHandle];
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: TEST_KEYS.paying });
    // 64,000 bytes: 100 audio tokens (640 bytes each), 7 text tokens.
    const audio = Buffer.alloc(64_000, 5);
    const transcribe = async (extra: Record<string, unknown>) => {
      const stream = await client.audio.transcriptions.create({
        model: SIM_MODEL,
        file: await toFile(audio, 'speech.wav', { type: 'audio/wav' }),
        stream: true,
        ...extra,
      } as OpenAI.Audio.TranscriptionCreateParamsStreaming);
      const chunks: Array<{ choices: Array<{ delta: { content: string } }>; usage?: unknown }> = [];
      for await (const chunk of stream) chunks.push(chunk as unknown as (typeof chunks)[number]);
      return chunks;
    };
    const before = { completed: await admitted(), input: await meteredInput(pool) };
    // The client did not ask for the usage: the gateway asked the pod, metered it, and kept
    // the usage chunk from the client.
    const chunks = await transcribe({});
    expect(chunks.map((c) => c.choices[0]?.delta.content).join('').length).toBeGreaterThan(0);
    expect(chunks).toHaveLength(7);
    expect(chunks.filter((c) => c.usage !== undefined)).toEqual([]);
    await expect.poll(async () => (await meteredInput(pool)) - before.input).toBe(100);
    // Asked for (vLLM's form field), it reaches the client.
    const withUsage = await transcribe({ stream_include_usage: true });
    expect(withUsage.at(-1)?.usage).toEqual({
      prompt_tokens: 100,
      completion_tokens: 7,
      total_tokens: 107,
    });
    await expectConserved(pool);
    expect((await admitted()) - before.completed).toBe(2);
    await expect.poll(async () => (await meteredInput(pool)) - before.input).toBe(200);
  });

  it('an upload over the limit without a Content-Length: 413 once the limit is passed, the connection closed, no file left', async () => {
    const [gateway] = pool.gateways as [AppHandle];
    const before = await admitted();
    const boundary = 'fairgate-test-boundary';
    const head = Buffer.from(
      `--${boundary}\r\ncontent-disposition: form-data; name="model"\r\n\r\n${SIM_MODEL}\r\n` +
        `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="a.wav"\r\n\r\n`,
    );
    // 1 MiB pieces, at most 40 (the limit is 25 MiB): a chunked body, its size unknown ahead.
    let pieces = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (pieces === 0) controller.enqueue(head);
        if (pieces === 40) controller.close();
        else controller.enqueue(Buffer.alloc(1 << 20, pieces++));
      },
    });
    const response = await fetch(`${gateway.url}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_KEYS.paying}`,
        'content-type': `multipart/form-data; boundary=${boundary}`,
      },
      body,
      duplex: 'half',
    } as RequestInit);
    expect(response.status).toBe(413);
    expect(response.headers.get('connection')).toBe('close');
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe(
      'payload_too_large',
    );
    expect(pieces).toBeLessThan(40); // the client stopped when the answer came
    expect(await admitted()).toBe(before);
    await expect
      .poll(() => readdirSync(tmpdir()).filter((name) => name.startsWith('fairgate-upload-')))
      .toEqual([]);
  });

  it('tokenize and detokenize need no slot', async () => {
    const before = await pool.state();
    const servedBefore = await engineRequests(pool);
    const [gateway] = pool.gateways;
    const tokenized = await post(gateway!.url, '/tokenize', { model: SIM_MODEL, prompt: TEXTS[0] });
    expect(tokenized.status).toBe(200);
    const tokens = (await tokenized.json()) as { count: number; tokens: number[] };
    expect(tokens.count).toBe(estimateTextTokens(TEXTS[0] as string));
    const detokenized = await post(gateway!.url, '/detokenize', {
      model: SIM_MODEL,
      tokens: tokens.tokens,
    });
    expect(detokenized.status).toBe(200);
    expect(((await detokenized.json()) as { prompt: string }).prompt).toBe(TEXTS[0]);
    // Nothing offered to the scheduler, nothing sent to a pod's engine.
    const after = await pool.state();
    const offered = (state: typeof before) => tenantTotal(state, 'paying', (row) => row.offered);
    expect(offered(after)).toBe(offered(before));
    expect(await engineRequests(pool)).toEqual(servedBefore);
  }, 30_000);
});
