import { estimateTextTokens } from '@fairgate/openai';
import { describe, expect, it } from 'vitest';
import type { SimConfig } from '../src/config.js';
import type { SimServer } from '../src/server.js';
import { inProcessSims, jsonPost } from './http.js';

// In-process (app.request(), no network); a fast model so each request takes about a ms.
const sim = inProcessSims({ alphaMs: 1, betaMs: 0.001, gammaMs: 0 });

async function post(server: SimServer, path: string, body: unknown) {
  const response = await server.app.request(path, jsonPost(body));
  return { status: response.status, body: (await response.json()) as Record<string, any> };
}

const norm = (vector: number[]) => Math.sqrt(vector.reduce((sum, x) => sum + x * x, 0));

describe('POST /v1/embeddings (vLLM EmbeddingResponse)', () => {
  it('answers one unit vector per input, with vLLM usage', async () => {
    const { status, body } = await post(sim({ model: 'emb' }), '/v1/embeddings', {
      model: 'emb',
      input: ['hello world', 'x'],
    });
    expect(status).toBe(200);
    expect(body).toMatchObject({ object: 'list', model: 'emb' });
    expect(body.id).toMatch(/^embd-[0-9a-f]{32}$/);
    expect(body.created).toBeTypeOf('number');
    expect(body.data.map((item: any) => [item.index, item.object, item.embedding.length])).toEqual([
      [0, 'embedding', 16],
      [1, 'embedding', 16],
    ]);
    for (const item of body.data) expect(norm(item.embedding)).toBeCloseTo(1, 9);
    const tokens = estimateTextTokens('hello world') + estimateTextTokens('x');
    expect(body.usage).toEqual({
      prompt_tokens: tokens,
      total_tokens: tokens,
      completion_tokens: 0,
      prompt_tokens_details: null,
    });
  });

  it('vectors are a seeded hash of the text: equal across processes, apart across texts and seeds', async () => {
    const embed = async (overrides: Partial<SimConfig>, input: unknown) =>
      (await post(sim(overrides), '/v1/embeddings', { input })).body.data[0].embedding as number[];
    const first = await embed({}, 'the same text');
    expect(await embed({}, 'the same text')).toEqual(first);
    expect(await embed({}, 'another text')).not.toEqual(first);
    expect(await embed({ seed: 7 }, 'the same text')).not.toEqual(first);
    expect(await embed({ embeddingDim: 64 }, 'x')).toHaveLength(64);
  });

  it('base64 is the float32 little-endian of the float vector; dimensions truncate and renormalize', async () => {
    const server = sim();
    const floats = (await post(server, '/v1/embeddings', { input: 'abc' })).body.data[0].embedding;
    const encoded = (
      await post(server, '/v1/embeddings', { input: 'abc', encoding_format: 'base64' })
    ).body.data[0].embedding as string;
    const bytes = Buffer.from(encoded, 'base64');
    const decoded = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
    expect(decoded).toHaveLength(16);
    for (const [i, value] of decoded.entries()) expect(value).toBeCloseTo(floats[i], 6);

    const short = (await post(server, '/v1/embeddings', { input: 'abc', dimensions: 4 })).body
      .data[0].embedding as number[];
    expect(short).toHaveLength(4);
    expect(norm(short)).toBeCloseTo(1, 9);
    expect(short[0]! / short[1]!).toBeCloseTo(floats[0] / floats[1], 9);
  });

  it('token-id inputs: one prompt per list; ids from /tokenize embed like their text', async () => {
    const server = sim();
    const tokenized = (await post(server, '/tokenize', { prompt: 'embed me' })).body;
    const { body } = await post(server, '/v1/embeddings', { input: [tokenized.tokens, [1, 2, 3]] });
    expect(body.usage.prompt_tokens).toBe(tokenized.count + 3);
    const fromText = (await post(server, '/v1/embeddings', { input: 'embed me' })).body.data[0];
    expect(body.data[0].embedding).toEqual(fromText.embedding);
    const single = (await post(server, '/v1/embeddings', { input: [5, 6] })).body;
    expect(single.data).toHaveLength(1);
    expect(single.usage.prompt_tokens).toBe(2);
  });

  it('bad bodies get 400 naming the field; too long an input is vLLM context error', async () => {
    const server = sim({ maxModelLen: 64 });
    const cases: Array<[unknown, string]> = [
      [{}, 'body.input'],
      [{ input: [] }, 'body.input'],
      [{ input: [1, 'a'] }, 'body.input'],
      [{ input: 'a', encoding_format: 'hex' }, 'body.encoding_format'],
      [{ input: 'a', dimensions: 'x' }, 'body.dimensions'],
      [{ input: 'a', dimensions: 17 }, 'dimensions'],
      [{ input: 'x'.repeat(4 * 65) }, 'input'],
    ];
    for (const [request, param] of cases) {
      const { status, body } = await post(server, '/v1/embeddings', request);
      expect(status, JSON.stringify(request)).toBe(400);
      expect(body.error).toMatchObject({ param, code: 400 });
    }
    const bad = await server.app.request('/v1/embeddings', jsonPost('{"input":'));
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as any).error).toMatchObject({ param: 'body', code: 400 });
  });
});

describe('POST /pooling, /score, /rerank (vLLM shapes)', () => {
  it('pooling answers the embedding as `data`', async () => {
    const server = sim();
    const { body } = await post(server, '/pooling', { input: 'pool me' });
    const embedding = (await post(server, '/v1/embeddings', { input: 'pool me' })).body.data[0];
    expect(body.id).toMatch(/^pool-/);
    expect(body.data).toEqual([{ index: 0, object: 'pooling', data: embedding.embedding }]);
    expect(body.usage.prompt_tokens).toBe(2);
  });

  it('score pairs 1:N and N:N with deterministic scores in [0, 1]; other lengths are 400', async () => {
    const server = sim();
    for (const path of ['/score', '/v1/score']) {
      const { body } = await post(server, path, { text_1: 'query', text_2: ['a doc', 'b doc'] });
      expect(body).toMatchObject({ object: 'list', model: 'fairgate-sim' });
      expect(body.id).toMatch(/^score-/);
      expect(body.data.map((item: any) => [item.index, item.object])).toEqual([
        [0, 'score'],
        [1, 'score'],
      ]);
      for (const item of body.data) expect(item.score).toBeGreaterThanOrEqual(0);
      for (const item of body.data) expect(item.score).toBeLessThanOrEqual(1);
      // Each pair is one cross-encoder sequence of both texts.
      expect(body.usage.prompt_tokens).toBe(2 * 2 + 2 + 2);
      const pairwise = await post(server, path, {
        text_1: ['query', 'query'],
        text_2: ['a doc', 'b doc'],
      });
      expect(pairwise.body.data.map((item: any) => item.score)).toEqual(
        body.data.map((item: any) => item.score),
      );
    }
    const mismatched = await post(server, '/score', {
      text_1: ['a', 'b'],
      text_2: ['c', 'd', 'e'],
    });
    expect(mismatched.status).toBe(400);
  });

  it('rerank sorts by relevance, keeps top_n, answers on its three paths', async () => {
    const server = sim();
    const documents = ['alpha', 'bravo', 'charlie', 'delta'];
    const scores = (await post(server, '/score', { text_1: 'q', text_2: documents })).body.data.map(
      (item: any) => item.score,
    );
    for (const path of ['/rerank', '/v1/rerank', '/v2/rerank']) {
      const { status, body } = await post(server, path, { query: 'q', documents, top_n: 3 });
      expect(status).toBe(200);
      expect(Object.keys(body)).toEqual(['id', 'model', 'usage', 'results']);
      expect(body.id).toMatch(/^rerank-/);
      expect(body.results).toHaveLength(3);
      const relevance = body.results.map((result: any) => result.relevance_score);
      expect(relevance).toEqual([...relevance].sort((a, b) => b - a));
      for (const result of body.results) {
        expect(result.document).toEqual({ text: documents[result.index] });
        expect(result.relevance_score).toBe(scores[result.index]);
      }
      expect(body.usage).toEqual({ total_tokens: 4 * (1 + 2) });
    }
    const all = await post(server, '/rerank', { query: 'q', documents });
    expect(all.body.results).toHaveLength(4);
    expect((await post(server, '/rerank', { documents })).body.error.param).toBe('body.query');
  });
});

describe('POST /tokenize and /detokenize', () => {
  it('tokenize answers vLLM fields and the shared estimate; detokenize inverts it', async () => {
    const server = sim({ maxModelLen: 2048 });
    for (const prompt of ['Hello, world!', 'Grüße, 世界 — ok', 'a']) {
      const { body } = await post(server, '/tokenize', { prompt, return_token_strs: true });
      expect(body.count).toBe(estimateTextTokens(prompt));
      expect(body.max_model_len).toBe(2048);
      expect(body.tokens).toHaveLength(body.count);
      expect(body.token_strs.join('')).toBe(prompt);
      expect((await post(server, '/detokenize', { tokens: body.tokens })).body).toEqual({ prompt });
    }
    const plain = (await post(server, '/tokenize', { prompt: 'abcd' })).body;
    expect(plain).toEqual({
      count: 1,
      max_model_len: 2048,
      tokens: plain.tokens,
      token_strs: null,
    });
  });

  it('ASCII ids are the same in every process; chat messages tokenize like chat', async () => {
    const ids = async () => (await post(sim(), '/tokenize', { prompt: 'same ids' })).body.tokens;
    expect(await ids()).toEqual(await ids());
    const chat = await post(sim(), '/tokenize', { messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.body.count).toBe(estimateTextTokens('<|user|>\nhi\n<|assistant|>\n'));
  });

  it('an id never handed out, and bad bodies, are 400', async () => {
    const server = sim();
    expect((await post(server, '/detokenize', { tokens: [1] })).body.error).toMatchObject({
      param: 'tokens',
      code: 400,
    });
    expect((await post(server, '/detokenize', { tokens: 'x' })).body.error.param).toBe(
      'body.tokens',
    );
    expect((await post(server, '/tokenize', {})).body.error.param).toBe('body.prompt');
  });
});
