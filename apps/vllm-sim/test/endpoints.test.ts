import { describe, expect, it } from 'vitest';
import type { SimConfig } from '../src/config.js';
import type { SimServer } from '../src/server.js';
import { inProcessSims, jsonPost, metricValue, metricValues } from './http.js';

// What every endpoint shares: the model check, the engine (its cost, queue and metrics).
const sim = inProcessSims({ alphaMs: 1, betaMs: 0.001, gammaMs: 0 });

function audioForm(model: string, bytes: number): FormData {
  const form = new FormData();
  form.set('model', model);
  form.set('file', new Blob([new Uint8Array(bytes)]), 'speech.wav');
  return form;
}

/** One valid request per endpoint, naming `model`. */
function requests(model: string): Array<[string, RequestInit]> {
  const json = (path: string, body: object): [string, RequestInit] => [
    path,
    jsonPost({ model, ...body }),
  ];
  return [
    json('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
    json('/v1/completions', { prompt: 'hi', max_tokens: 1 }),
    json('/v1/embeddings', { input: 'hi' }),
    json('/pooling', { input: 'hi' }),
    json('/score', { text_1: 'a', text_2: 'b' }),
    json('/v1/score', { text_1: 'a', text_2: 'b' }),
    json('/rerank', { query: 'a', documents: ['b'] }),
    json('/v1/rerank', { query: 'a', documents: ['b'] }),
    json('/v2/rerank', { query: 'a', documents: ['b'] }),
    json('/tokenize', { prompt: 'hi' }),
    json('/detokenize', { tokens: [] }),
    json('/v1/responses', { input: 'hi', max_output_tokens: 1 }),
    ['/v1/audio/transcriptions', { method: 'POST', body: audioForm(model, 640) }],
    ['/v1/audio/translations', { method: 'POST', body: audioForm(model, 640) }],
  ];
}

describe('the model is checked on every endpoint, as vLLM checks it', () => {
  const configs: Array<[string, Partial<SimConfig>]> = [
    ['LoRA off', {}],
    ['LoRA on', { maxLoras: 1, loraModules: [{ name: 'adapter', path: '/a' }] }],
  ];
  for (const [name, config] of configs) {
    it(`${name}: an unknown model is 404 NotFoundError, the served model is 200`, async () => {
      const server = sim({ model: 'served', ...config });
      for (const [path, init] of requests('unknown')) {
        const response = await server.app.request(path, init);
        expect(response.status, path).toBe(404);
        expect(await response.json(), path).toEqual({
          error: {
            message: 'The model `unknown` does not exist.',
            type: 'NotFoundError',
            param: 'model',
            code: 404,
          },
        });
      }
      for (const [path, init] of requests('served')) {
        expect((await server.app.request(path, init)).status, path).toBe(200);
      }
    });
  }

  it('a registered adapter is served and named in the answer', async () => {
    const server = sim({ maxLoras: 1, loraModules: [{ name: 'adapter', path: '/a' }] });
    const response = await server.app.request(
      '/v1/embeddings',
      jsonPost({ model: 'adapter', input: 'hi' }),
    );
    expect(((await response.json()) as { model: string }).model).toBe('adapter');
  });
});

describe('metrics before and after', () => {
  it('histograms show their model_name series at zero before the first request', async () => {
    const text = await (await sim({ model: 'fresh' }).app.request('/metrics')).text();
    for (const name of [
      'vllm:time_to_first_token_seconds',
      'vllm:inter_token_latency_seconds',
      'vllm:e2e_request_latency_seconds',
      'vllm:request_queue_time_seconds',
      'vllm:request_prompt_tokens',
      'vllm:request_generation_tokens',
    ]) {
      expect(metricValues(text, `${name}_count`), name).toEqual(
        new Map([['{model_name="fresh"}', 0]]),
      );
      expect(metricValues(text, `${name}_sum`).get('{model_name="fresh"}'), name).toBe(0);
      const buckets = metricValues(text, `${name}_bucket`);
      expect(buckets.size, name).toBeGreaterThan(1);
      expect([...buckets.values()].every((count) => count === 0)).toBe(true);
    }
    const cache = [...metricValues(text, 'vllm:cache_config_info').keys()];
    expect(cache).toHaveLength(1);
    expect(cache[0]).toContain('block_size="16"');
    expect(cache[0]).toContain('num_gpu_blocks="8192"');
  });

  it('pooling requests count prompt tokens, a request each, and no generated token', async () => {
    const server = sim();
    await server.app.request(
      '/v1/embeddings',
      jsonPost({ input: ['x'.repeat(40), 'y'.repeat(8)] }),
    );
    const text = await (await server.app.request('/metrics')).text();
    expect(metricValue(text, 'vllm:prompt_tokens_total')).toBe(12);
    expect(metricValue(text, 'vllm:generation_tokens_total')).toBe(0);
    expect(metricValue(text, 'vllm:e2e_request_latency_seconds_count')).toBe(2);
    expect(metricValue(text, 'vllm:time_to_first_token_seconds_count')).toBe(2);
    expect(metricValue(text, 'vllm:request_generation_tokens_sum')).toBe(0);
  });
});

describe('engine time', () => {
  /** Wall time of a request and the sim's own e2e latency sum after it, in ms. */
  async function timed(server: SimServer, path: string, init: RequestInit) {
    const started = performance.now();
    const response = await server.app.request(path, init);
    await response.arrayBuffer();
    const wallMs = performance.now() - started;
    const metrics = await (await server.app.request('/metrics')).text();
    return { status: response.status, wallMs, metrics };
  }

  it('an embedding of N tokens takes the model prefill: alpha + (beta + gamma) * N', async () => {
    const [alpha, beta, gamma] = [5, 0.5, 0.01];
    const server = sim({ alphaMs: alpha, betaMs: beta, gammaMs: gamma });
    const tokens = 400;
    const { status, wallMs, metrics } = await timed(
      server,
      '/v1/embeddings',
      jsonPost({ input: 'x'.repeat(4 * tokens) }),
    );
    expect(status).toBe(200);
    const modelMs = alpha + (beta + gamma) * tokens; // 209 ms
    expect(wallMs).toBeGreaterThan(modelMs * 0.97);
    expect(wallMs).toBeLessThan(modelMs * 1.25 + 15);
    const e2eMs = metricValue(metrics, 'vllm:e2e_request_latency_seconds_sum') * 1000;
    expect(e2eMs).toBeGreaterThan(modelMs * 0.97);
    expect(e2eMs).toBeLessThan(modelMs * 1.25 + 15);
  });

  it('pooling requests queue behind --max-num-seqs like chat', async () => {
    const server = sim({ alphaMs: 5, betaMs: 0.5, gammaMs: 0, maxNumSeqs: 1 });
    const body = jsonPost({ input: 'x'.repeat(4 * 200) }); // 105 ms each
    const started = performance.now();
    const both = Promise.all([
      server.app.request('/v1/embeddings', body),
      server.app.request('/v1/embeddings', jsonPost({ input: 'y'.repeat(4 * 200) })),
    ]);
    await new Promise((resolve) => setTimeout(resolve, 40));
    const during = await (await server.app.request('/metrics')).text();
    expect(metricValue(during, 'vllm:num_requests_running')).toBe(1);
    expect(metricValue(during, 'vllm:num_requests_waiting')).toBe(1);
    await both;
    expect(performance.now() - started).toBeGreaterThan(2 * 105 * 0.97);
    const after = await (await server.app.request('/metrics')).text();
    expect(metricValue(after, 'vllm:request_queue_time_seconds_sum')).toBeGreaterThan(0.09);
  });

  it('a transcription prefills its audio tokens and decodes its text', async () => {
    const server = sim({ audioBytesPerToken: 640 });
    const form = audioForm('fairgate-sim', 64_000); // 100 audio tokens, 2 s
    const response = await server.app.request('/v1/audio/transcriptions', {
      method: 'POST',
      body: form,
    });
    const body = (await response.json()) as { text: string; usage: object };
    expect(body.usage).toEqual({ type: 'duration', seconds: 2 });
    expect(body.text).toHaveLength(4 * Math.ceil(100 / 16));
    const metrics = await (await server.app.request('/metrics')).text();
    expect(metricValue(metrics, 'vllm:prompt_tokens_total')).toBe(100);
    expect(metricValue(metrics, 'vllm:generation_tokens_total')).toBe(7);
  });

  it('a streamed transcription sends its windows in order, the usage when asked, then [DONE]', async () => {
    // 2,000 audio tokens: a window of 1,500 and one of 500, run at once.
    const form = () => audioForm('fairgate-sim', 2_000 * 640);
    // Two sims alike: each one's first request draws the same text.
    const whole = (await (
      await sim({ audioBytesPerToken: 640 }).app.request('/v1/audio/transcriptions', {
        method: 'POST',
        body: form(),
      })
    ).json()) as { text: string };
    const server = sim({ audioBytesPerToken: 640 });
    const streamed = form();
    streamed.set('stream', 'true');
    streamed.set('stream_include_usage', 'true');
    const response = await server.app.request('/v1/audio/transcriptions', {
      method: 'POST',
      body: streamed,
    });
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const data = (await response.text())
      .split('\n\n')
      .filter((event) => event.startsWith('data: '))
      .map((event) => event.slice(6));
    expect(data.at(-1)).toBe('[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    const usage = chunks.at(-1);
    expect(usage).toMatchObject({ object: 'transcription.chunk', choices: [] });
    const deltas = chunks.slice(0, -1);
    // One chunk per token, each window's last with its finish_reason; the same text as the
    // answer that is not streamed.
    expect(deltas).toHaveLength(Math.ceil(1_500 / 16) + Math.ceil(500 / 16));
    expect(deltas.filter((c) => c.choices[0].finish_reason === 'stop')).toHaveLength(2);
    expect(deltas.map((c) => c.choices[0].delta.content).join('')).toBe(whole.text);
    expect(usage.usage).toEqual({
      prompt_tokens: 2_000,
      completion_tokens: deltas.length,
      total_tokens: 2_000 + deltas.length,
    });
    // Without stream_include_usage, no usage chunk.
    const plain = form();
    plain.set('stream', 'true');
    const text = await (
      await server.app.request('/v1/audio/transcriptions', { method: 'POST', body: plain })
    ).text();
    expect(text).not.toContain('"usage"');
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
  });
});
