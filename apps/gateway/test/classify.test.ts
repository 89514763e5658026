import { configSchema, DEFAULT_SLO_CLASSES, type TenantConfig } from '@fairgate/config';
import {
  ENDPOINTS,
  OpenAIHttpError,
  parseApiRequest,
  parseChatCompletionRequest,
  parseCompletionRequest,
} from '@fairgate/openai';
import { describe, expect, it } from 'vitest';
import { actualBucketTokens, classify } from '../src/classify.js';

const digest = 'a'.repeat(64);
function tenant(overrides: Partial<TenantConfig> = {}): TenantConfig {
  const config = configSchema.parse({
    tenants: [{ id: 't', api_key_sha256: [digest], ...overrides }],
    pods: [{ name: 'p', url: 'http://127.0.0.1:1' }],
  });
  return config.tenants[0]!;
}

const chat = parseChatCompletionRequest({
  model: 'm',
  messages: [{ role: 'user', content: 'x'.repeat(100) }],
  max_tokens: 50,
});

function run(
  t: TenantConfig,
  classHeader?: string,
  ttftHeader?: string,
  sloTargetsMs: Record<string, number> = {},
) {
  return classify({
    tenant: t,
    sloClasses: DEFAULT_SLO_CLASSES,
    sloTargetsMs,
    spec: ENDPOINTS.chat,
    request: chat,
    classHeader,
    ttftHeader,
    nowMs: 1_000,
    blockSize: 16,
    defaultMaxTokens: 256,
  });
}

/** Every input but the endpoint and the request. */
const base = {
  tenant: tenant(),
  sloClasses: DEFAULT_SLO_CLASSES,
  sloTargetsMs: {},
  classHeader: undefined,
  ttftHeader: undefined,
  nowMs: 0,
  blockSize: 16,
  defaultMaxTokens: 256,
};

describe('SLO class resolution', () => {
  it.each([
    // default, max, header -> class
    ['standard', undefined, undefined, 'standard'],
    ['standard', 'critical', undefined, 'standard'],
    ['standard', 'critical', 'critical', 'critical'],
    ['standard', undefined, 'critical', 'standard'], // cannot raise above max (= default)
    ['standard', undefined, 'batch', 'batch'], // may lower
    ['batch', 'batch', 'standard', 'batch'],
    ['batch', 'standard', 'sheddable', 'sheddable'],
    ['critical', 'critical', ' background ', 'background'],
  ])('default %s, max %s, header %s -> %s', (dflt, max, header, expected) => {
    const result = run(tenant({ default_class: dflt, ...(max ? { max_class: max } : {}) }), header);
    expect(result.sloClass).toBe(expected);
    expect(result.priority).toBe(DEFAULT_SLO_CLASSES[expected]);
  });

  it('an unknown class is a 400 naming the header', () => {
    expect(() => run(tenant(), 'platinum')).toThrowError(OpenAIHttpError);
    try {
      run(tenant(), 'platinum');
    } catch (error) {
      expect((error as OpenAIHttpError).param).toBe('x-slo-class');
      expect((error as OpenAIHttpError).status).toBe(400);
    }
  });
});

describe('deadline', () => {
  it.each([
    [undefined, undefined],
    ['250', 1_250],
    [' 40 ', 1_040],
  ])('x-slo-ttft-ms %s -> %s', (header, deadline) => {
    expect(run(tenant(), undefined, header).deadlineMs).toBe(deadline);
  });

  it.each([
    // class header, ttft header -> deadline (targets: standard 500, batch 5000)
    [undefined, undefined, 1_500],
    [undefined, '250', 1_250], // the header wins over the class target
    ['batch', undefined, 6_000],
    ['sheddable', undefined, undefined], // no target for the class
  ])('class %s, x-slo-ttft-ms %s with class targets -> %s', (cls, header, deadline) => {
    const targets = { standard: 500, batch: 5_000 };
    expect(run(tenant(), cls, header, targets).deadlineMs).toBe(deadline);
  });

  it.each(['0', '-5', '1.5', 'soon', ''])('rejects x-slo-ttft-ms %j', (header) => {
    expect(() => run(tenant(), undefined, header)).toThrowError(/x-slo-ttft-ms/);
  });
});

describe('size estimates', () => {
  it('uses the shared token estimate and KV blocks of input + max_tokens', () => {
    const result = run(tenant());
    // '<|user|>\n' + 100 x + '\n<|assistant|>\n' = 9 + 100 + 15 = 124 chars -> 31 tokens
    expect(result.inputTokens).toBe(31);
    expect(result.maxTokens).toBe(50);
    expect(result.kvBlocks).toBe(Math.ceil((31 + 50) / 16));
  });

  it.each([
    // bucket, include_max_tokens -> cost (31 input tokens, max_tokens 50)
    [false, false, 0],
    [true, false, 31],
    [true, true, 81],
  ])('token bucket %s, include_max_tokens %s -> cost %s', (bucket, includeMax, cost) => {
    const t = tenant(
      bucket
        ? {
            token_bucket: {
              capacity: 1_000,
              refill_per_second: 10,
              include_max_tokens: includeMax,
            },
          }
        : {},
    );
    expect(run(t).bucketTokens).toBe(cost);
    expect(actualBucketTokens(t, { prompt_tokens: 30, completion_tokens: 7 })).toBe(
      bucket ? (includeMax ? 37 : 30) : 0,
    );
  });

  it('falls back to the default output budget for chat without max_tokens, 16 for completions', () => {
    const noMax = parseChatCompletionRequest({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(classify({ ...base, spec: ENDPOINTS.chat, request: noMax }).maxTokens).toBe(256);
    const completion = parseCompletionRequest({ model: 'm', prompt: 'abcd' });
    expect(classify({ ...base, spec: ENDPOINTS.completions, request: completion }).maxTokens).toBe(
      16,
    );
  });

  it.each([
    // endpoint, body -> input tokens (the shared estimate: ceil(chars / 4), an id is one)
    ['embeddings', { input: 'x'.repeat(100) }, 25],
    ['embeddings', { input: ['abcd', 'abcdefgh', 'a'] }, 4],
    ['embeddings', { input: [[1, 2, 3], [4]] }, 4],
    ['pooling', { input: 'abcdabcd' }, 2],
    // the query is in each of the two pairs' prefill
    ['rerank', { query: 'abcdabcd', documents: ['abcd', { text: 'abcdabcdabcd' }] }, 8],
    ['score', { text_1: 'abcd', text_2: ['abcd', 'abcd', 'abcd'] }, 6],
    ['score', { text_1: ['abcd', 'abcd'], text_2: ['abcd', 'abcd'] }, 4],
  ] as const)('%s %j: %i input tokens, no output', (endpoint, body, tokens) => {
    const spec = ENDPOINTS[endpoint];
    const request = parseApiRequest(spec, { model: 'm', ...body });
    const result = classify({ ...base, spec, request });
    expect([result.inputTokens, result.maxTokens, result.kvBlocks]).toEqual([
      tokens,
      0,
      Math.ceil(tokens / 16),
    ]);
  });
});
