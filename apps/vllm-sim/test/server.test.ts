import {
  type ChatCompletion,
  type Completion,
  chunkText,
  estimatePromptTokens,
  estimateTextTokens,
  isOpenAIErrorBody,
  isUsageChunk,
} from '@fairgate/openai';
import { describe, expect, it } from 'vitest';
import type { SimConfig } from '../src/config.js';
import { inProcessSims, jsonPost, readSse } from './http.js';

// In-process: Hono's app.request(), no network. Fast timing so each request takes ms.
const FAST: Partial<SimConfig> = { alphaMs: 1, betaMs: 0.001, gammaMs: 0 };
const sim = inProcessSims(FAST);

const chat = (content: string, extra: Record<string, unknown> = {}) => ({
  model: 'fairgate-sim',
  messages: [{ role: 'user' as const, content }],
  ...extra,
});

async function errorOf(response: Response) {
  const body: unknown = await response.json();
  expect(isOpenAIErrorBody(body)).toBe(true);
  return (body as { error: { message: string; type: string; param: string | null; code: string } })
    .error;
}

describe('plain endpoints', () => {
  it('/health answers 200 and /v1/models lists the model with max_model_len', async () => {
    const { app } = sim({ model: 'tiny-llama', maxModelLen: 2048 });
    expect((await app.request('/health')).status).toBe(200);
    const models = (await (await app.request('/v1/models')).json()) as {
      data: Array<{ id: string; max_model_len: number }>;
    };
    expect(models.data).toEqual([
      expect.objectContaining({ id: 'tiny-llama', object: 'model', max_model_len: 2048 }),
    ]);
  });

  it('unknown routes get a 404 in the OpenAI error shape', async () => {
    const response = await sim().app.request('/v2/nothing');
    expect(response.status).toBe(404);
    expect((await errorOf(response)).type).toBe('not_found_error');
  });

  it('records the last traceparent for trace tests', async () => {
    const { app } = sim();
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    await app.request(
      '/v1/chat/completions',
      jsonPost(chat('hi', { max_tokens: 1 }), { traceparent }),
    );
    const seen = await (await app.request('/debug/last-traceparent')).json();
    expect(seen).toMatchObject({ traceparent, path: '/v1/chat/completions' });
  });
});

describe('non-streaming', () => {
  it('chat: usage equals the shared token estimate and max_tokens', async () => {
    const request = chat('Tell me about queueing theory.', { max_tokens: 7 });
    const response = await sim().app.request('/v1/chat/completions', jsonPost(request));
    expect(response.status).toBe(200);
    const body = (await response.json()) as ChatCompletion;
    expect(body.object).toBe('chat.completion');
    expect(body.id).toMatch(/^chatcmpl-/);
    const choice = body.choices[0]!;
    expect(choice).toMatchObject({ index: 0, finish_reason: 'length' });
    expect(choice.message.role).toBe('assistant');
    expect(body.usage).toEqual({
      prompt_tokens: estimatePromptTokens(request),
      completion_tokens: 7,
      total_tokens: estimatePromptTokens(request) + 7,
      prompt_tokens_details: { cached_tokens: 0 },
    });
    // Every pseudo-word is one token of the shared estimate.
    expect(estimateTextTokens(choice.message.content!)).toBe(7);
  });

  it('completions: text choice, default max_tokens 16', async () => {
    const request = { model: 'fairgate-sim', prompt: 'Once upon a time' };
    const response = await sim().app.request('/v1/completions', jsonPost(request));
    const body = (await response.json()) as Completion;
    expect(body.object).toBe('text_completion');
    expect(body.id).toMatch(/^cmpl-/);
    expect(body.usage.prompt_tokens).toBe(estimatePromptTokens(request));
    expect(body.usage.completion_tokens).toBe(16);
    expect(body.choices[0]!.text).toHaveLength(16 * 4);
  });

  it('chat without a limit generates --default-max-tokens, bounded by the context left', async () => {
    const { app } = sim({ defaultMaxTokens: 20, maxModelLen: 64, kvBlocks: 8 });
    const short = chat('hi');
    const body = (await (
      await app.request('/v1/chat/completions', jsonPost(short))
    ).json()) as ChatCompletion;
    expect(body.usage.completion_tokens).toBe(20);

    const long = chat('x'.repeat(4 * 50)); // ~57 prompt tokens: 7 left in a 64-token context
    const bounded = (await (
      await app.request('/v1/chat/completions', jsonPost(long))
    ).json()) as ChatCompletion;
    expect(bounded.usage.completion_tokens).toBe(64 - estimatePromptTokens(long));
  });

  it('text is deterministic for a given --seed', async () => {
    const request = chat('same', { max_tokens: 12 });
    const texts: string[] = [];
    for (const seed of [7, 7, 8]) {
      const body = (await (
        await sim({ seed }).app.request('/v1/chat/completions', jsonPost(request))
      ).json()) as ChatCompletion;
      texts.push(body.choices[0]!.message.content!);
    }
    expect(texts[0]).toBe(texts[1]);
    expect(texts[2]).not.toBe(texts[0]);
  });
});

describe('output length modes', () => {
  it('random: uniform in [max(1, min_tokens), max_tokens], reproducible per seed', async () => {
    const lengths = async (seed: number) => {
      const { app } = sim({ outputLenMode: 'random', seed });
      const results: Array<{ tokens: number; reason: string | null }> = [];
      for (let index = 0; index < 12; index++) {
        const response = await app.request(
          '/v1/completions',
          jsonPost({ model: 'fairgate-sim', prompt: `p${index}`, max_tokens: 40, min_tokens: 5 }),
        );
        const body = (await response.json()) as Completion;
        results.push({
          tokens: body.usage.completion_tokens,
          reason: body.choices[0]!.finish_reason,
        });
      }
      return results;
    };
    const first = await lengths(3);
    expect(await lengths(3)).toEqual(first);
    for (const { tokens, reason } of first) {
      expect(tokens).toBeGreaterThanOrEqual(5);
      expect(tokens).toBeLessThanOrEqual(40);
      expect(reason).toBe(tokens === 40 ? 'length' : 'stop');
    }
    expect(new Set(first.map((r) => r.tokens)).size).toBeGreaterThan(3);
  });

  it('random: a request seed fixes the length; ignore_eos forces max_tokens', async () => {
    const { app } = sim({ outputLenMode: 'random' });
    const run = async (extra: Record<string, unknown>) => {
      const response = await app.request(
        '/v1/chat/completions',
        jsonPost(chat('q', { max_tokens: 50, ...extra })),
      );
      return ((await response.json()) as ChatCompletion).usage.completion_tokens;
    };
    expect(await run({ seed: 11 })).toBe(await run({ seed: 11 }));
    expect(await run({ ignore_eos: true })).toBe(50);
  });

  it.each([
    { extra: {}, tokens: 7, reason: 'stop' },
    { extra: { max_tokens: 5 }, tokens: 5, reason: 'length' },
    { extra: { min_tokens: 9 }, tokens: 9, reason: 'stop' },
    { extra: { ignore_eos: true }, tokens: 50, reason: 'length' },
  ])('eos-after 7: $extra gives $tokens tokens ($reason)', async ({ extra, tokens, reason }) => {
    const { app } = sim({ eosAfter: 7 });
    const response = await app.request(
      '/v1/chat/completions',
      jsonPost(chat('q', { max_tokens: 50, ...extra })),
    );
    const body = (await response.json()) as ChatCompletion;
    expect(body.usage.completion_tokens).toBe(tokens);
    expect(body.choices[0]!.finish_reason).toBe(reason);
  });
});

describe('streaming (vLLM format)', () => {
  it('chat with include_usage: role chunk, content chunks with usage null, usage chunk, [DONE]', async () => {
    const request = chat('stream me', {
      max_tokens: 5,
      stream: true,
      stream_options: { include_usage: true },
    });
    const response = await sim().app.request('/v1/chat/completions', jsonPost(request));
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const { data, chunks } = await readSse(response);

    expect(data.at(-1)).toBe('[DONE]');
    const first = chunks[0]!;
    expect(first.object).toBe('chat.completion.chunk');
    expect(first.choices[0]).toMatchObject({ delta: { role: 'assistant' } });
    const content = chunks.slice(0, -1);
    for (const chunk of content) {
      expect(chunk.usage).toBeNull();
      expect(chunk.id).toBe(first.id);
    }
    const tokens = content.slice(1);
    expect(tokens).toHaveLength(5);
    expect(tokens.map((chunk) => chunk.choices[0]!.finish_reason)).toEqual([
      null,
      null,
      null,
      null,
      'length',
    ]);
    const usageChunk = chunks.at(-1)!;
    expect(isUsageChunk(usageChunk)).toBe(true);
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.usage).toMatchObject({
      prompt_tokens: estimatePromptTokens(request),
      completion_tokens: 5,
    });
  });

  it('without include_usage there is no usage anywhere', async () => {
    const request = chat('no usage', { max_tokens: 3, stream: true });
    const { chunks } = await readSse(
      await sim().app.request('/v1/chat/completions', jsonPost(request)),
    );
    expect(chunks).toHaveLength(4);
    for (const chunk of chunks) expect('usage' in chunk).toBe(false);
  });

  it('completions stream text chunks', async () => {
    const request = {
      model: 'fairgate-sim',
      prompt: 'abc',
      max_tokens: 4,
      stream: true,
      stream_options: { include_usage: true },
    };
    const { chunks } = await readSse(await sim().app.request('/v1/completions', jsonPost(request)));
    expect(chunks.map((chunk) => chunk.object)).toEqual(Array(5).fill('text_completion'));
    expect(chunks.slice(0, 4).map(chunkText).join('')).toHaveLength(16);
    expect(chunks[4]!.usage).toMatchObject({ prompt_tokens: 1, completion_tokens: 4 });
  });

  it('continuous_usage_stats: every chunk carries the usage so far, in vLLM field order', async () => {
    const request = chat('count me', {
      max_tokens: 4,
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    });
    const prompt = estimatePromptTokens(request);
    const { data, chunks } = await readSse(
      await sim().app.request('/v1/chat/completions', jsonPost(request)),
    );
    expect(data.at(-1)).toBe('[DONE]');
    // The role chunk (no completion token yet), one chunk per token, the usage chunk.
    expect(chunks).toHaveLength(6);
    const soFar = (completion: number) =>
      `"usage":{"prompt_tokens":${prompt},"total_tokens":${prompt + completion},"completion_tokens":${completion}}}`;
    for (const [index, raw] of data.slice(0, 5).entries())
      expect(raw.endsWith(soFar(index))).toBe(true);
    const final = chunks.at(-1)!;
    expect(isUsageChunk(final)).toBe(true);
    expect(final.usage).toMatchObject({ prompt_tokens: prompt, completion_tokens: 4 });

    const completions = await readSse(
      await sim().app.request(
        '/v1/completions',
        jsonPost({
          model: 'fairgate-sim',
          prompt: 'abc',
          max_tokens: 3,
          stream: true,
          stream_options: { include_usage: true, continuous_usage_stats: true },
        }),
      ),
    );
    expect(completions.chunks.slice(0, 3).map((chunk) => chunk.usage)).toEqual(
      [1, 2, 3].map((n) => ({
        prompt_tokens: 1,
        total_tokens: 1 + n,
        completion_tokens: n,
      })),
    );
    expect(isUsageChunk(completions.chunks[3]!)).toBe(true);
  });

  it('continuous_usage_stats without include_usage changes nothing (as in vLLM)', async () => {
    const request = chat('no usage', {
      max_tokens: 3,
      stream: true,
      stream_options: { continuous_usage_stats: true },
    });
    const { chunks } = await readSse(
      await sim().app.request('/v1/chat/completions', jsonPost(request)),
    );
    expect(chunks).toHaveLength(4);
    for (const chunk of chunks) expect('usage' in chunk).toBe(false);
  });
});

describe('errors in the OpenAI shape', () => {
  it('bad JSON -> 400 invalid_json', async () => {
    const response = await sim().app.request('/v1/chat/completions', jsonPost('{"model":'));
    expect(response.status).toBe(400);
    expect(await errorOf(response)).toMatchObject({
      type: 'invalid_request_error',
      code: 'invalid_json',
    });
  });

  it('schema violation -> 400 naming the field', async () => {
    const response = await sim().app.request(
      '/v1/chat/completions',
      jsonPost({ model: 'fairgate-sim', messages: [] }),
    );
    expect(response.status).toBe(400);
    expect((await errorOf(response)).param).toBe('messages');
  });

  it('prompt + max_tokens beyond max_model_len -> 400 like vLLM', async () => {
    const { app } = sim({ maxModelLen: 100, kvBlocks: 8 });
    const tooMany = await app.request(
      '/v1/completions',
      jsonPost({ model: 'fairgate-sim', prompt: 'x'.repeat(40), max_tokens: 95 }),
    );
    expect(tooMany.status).toBe(400);
    expect(await errorOf(tooMany)).toMatchObject({
      param: 'max_tokens',
      code: 'context_length_exceeded',
    });
    expect(
      (
        await errorOf(
          await app.request(
            '/v1/completions',
            jsonPost({ model: 'fairgate-sim', prompt: 'x'.repeat(400) }),
          ),
        )
      ).code,
    ).toBe('context_length_exceeded');
    const fits = await app.request(
      '/v1/completions',
      jsonPost({ model: 'fairgate-sim', prompt: 'x'.repeat(40), max_tokens: 90 }),
    );
    expect(fits.status).toBe(200);
  });

  it('n > 1 is refused, not silently ignored', async () => {
    const response = await sim().app.request('/v1/chat/completions', jsonPost(chat('x', { n: 2 })));
    expect(response.status).toBe(400);
    expect((await errorOf(response)).param).toBe('n');
  });

  it('a full waiting queue -> 429 rate_limit_error', async () => {
    const response = await sim({ maxWaiting: 0 }).app.request(
      '/v1/chat/completions',
      jsonPost(chat('x')),
    );
    expect(response.status).toBe(429);
    expect(response.headers.get('retry-after')).toBe('1');
    expect(await errorOf(response)).toMatchObject({ type: 'rate_limit_error', code: 'queue_full' });
  });
});
