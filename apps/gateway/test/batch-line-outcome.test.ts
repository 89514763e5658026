import { describe, expect, it } from 'vitest';
import {
  errorLine,
  type LineAnswer,
  lineOutcome,
  UPSTREAM_TRIES,
} from '../src/batch/line-outcome.js';
import { retryDelayMs } from '../src/batch/line-queue.js';

/** An answer of `status` whose OpenAI error body has `code` (a 200's body otherwise). */
const answer = (status: number, code?: string, extra: Partial<LineAnswer> = {}): LineAnswer => ({
  status,
  requestId: 'req-1',
  body: JSON.stringify(
    code === undefined ? { object: 'chat.completion' } : { error: { code, message: 'm' } },
  ),
  retryAfter: false,
  ...extra,
});
const waitable = { retryAfter: true };

describe('lineOutcome: what one try of a batch line came to', () => {
  it.each<[string, LineAnswer, number, string, string | undefined]>([
    ['200: the output file', answer(200), 0, 'output', undefined],
    ['201: the output file', answer(201), 0, 'output', undefined],
    ['429 evicted: tried again', answer(429, 'evicted', waitable), 0, 'retry', 'evicted'],
    ['429 queue_ttl: tried again', answer(429, 'queue_ttl', waitable), 0, 'retry', 'queue_ttl'],
    ['429 queue_shed: tried again', answer(429, 'queue_shed', waitable), 0, 'retry', 'queue_shed'],
    [
      '429 tenant_queue_full: tried again',
      answer(429, 'tenant_queue_full', waitable),
      0,
      'retry',
      'tenant_queue_full',
    ],
    [
      '429 rate_limited with Retry-After (the bucket refills): tried again',
      answer(429, 'rate_limited', waitable),
      0,
      'retry',
      'rate_limited',
    ],
    [
      '429 rate_limited without Retry-After (costs more than the bucket holds): the error file',
      answer(429, 'rate_limited'),
      0,
      'error',
      undefined,
    ],
    [
      '429 quota_kv_blocks (can never fit): the error file',
      answer(429, 'quota_kv_blocks'),
      0,
      'error',
      undefined,
    ],
    [
      '429 quota_concurrency (can never fit), even with a Retry-After: the error file',
      answer(429, 'quota_concurrency', waitable),
      0,
      'error',
      undefined,
    ],
    [
      '429 tenant_quota_exceeded (not a drop): the error file',
      answer(429, 'tenant_quota_exceeded'),
      0,
      'error',
      undefined,
    ],
    [
      '503 no_healthy_pod: tried again',
      answer(503, 'no_healthy_pod', waitable),
      0,
      'retry',
      'no_healthy_pod',
    ],
    ['503 draining: tried again however often', answer(503, 'draining'), 99, 'retry', 'draining'],
    [
      '503 replica_unreachable: tried again',
      answer(503, 'replica_unreachable'),
      0,
      'retry',
      'replica_unreachable',
    ],
    [
      '503 without a JSON body: the error file',
      answer(503, undefined, { body: 'down' }),
      0,
      'error',
      undefined,
    ],
    [
      '502, first failure: tried again',
      answer(502, 'upstream_error'),
      0,
      'retry',
      'upstream_error',
    ],
    [
      '504, second failure: tried again',
      answer(504, 'upstream_timeout'),
      UPSTREAM_TRIES - 2,
      'retry',
      'upstream_timeout',
    ],
    [
      '502, last allowed failure: the error file',
      answer(502, 'upstream_error'),
      UPSTREAM_TRIES - 1,
      'error',
      undefined,
    ],
    ['400: the error file', answer(400, 'invalid_value'), 0, 'error', undefined],
    ['404 model_not_found: the error file', answer(404, 'model_not_found'), 0, 'error', undefined],
    ['413: the error file', answer(413, 'payload_too_large'), 0, 'error', undefined],
    ['500: the error file', answer(500, 'internal_error'), 0, 'error', undefined],
  ])('%s', (_name, given, upstreamFailures, kind, reason) => {
    const outcome = lineOutcome('c-1', given, upstreamFailures);
    expect(outcome.kind).toBe(kind);
    if (outcome.kind === 'retry') expect(outcome.reason).toBe(reason);
  });

  it('409 batch_cancelled (cancelled while it waited): skipped, in neither file', () => {
    const cancelled = answer(409, 'batch_cancelled');
    expect(lineOutcome('c-1', cancelled, 0)).toEqual({ kind: 'skipped' });
    expect(lineOutcome('c-1', answer(409, 'conflict'), 0).kind).toBe('error');
  });

  it("writes OpenAI's output line: id, custom_id, response {status_code, request_id, body}, error null", () => {
    const outcome = lineOutcome('c-7', answer(200), 0);
    if (outcome.kind !== 'output') throw new Error(outcome.kind);
    const line = JSON.parse(outcome.line);
    expect(line).toEqual({
      id: expect.stringMatching(/^batch_req_[0-9a-f]{24}$/),
      custom_id: 'c-7',
      response: { status_code: 200, request_id: 'req-1', body: { object: 'chat.completion' } },
      error: null,
    });
  });

  it("writes a request's error answer with its status and body", () => {
    const outcome = lineOutcome('c-8', answer(400, 'invalid_value'), 0);
    if (outcome.kind !== 'error') throw new Error(outcome.kind);
    expect(JSON.parse(outcome.line).response).toEqual({
      status_code: 400,
      request_id: 'req-1',
      body: { error: { code: 'invalid_value', message: 'm' } },
    });
  });

  it('writes a line that never ran with response null and its error code', () => {
    expect(JSON.parse(errorLine('c-9', 'batch_expired', 'too late'))).toEqual({
      id: expect.stringMatching(/^batch_req_/),
      custom_id: 'c-9',
      response: null,
      error: { code: 'batch_expired', message: 'too late' },
    });
  });
});

describe('retryDelayMs: the wait before a line is tried again', () => {
  it.each([
    [1, 1_000, 30_000, 1_000],
    [2, 1_000, 30_000, 2_000],
    [3, 1_000, 30_000, 4_000],
    [5, 1_000, 30_000, 16_000],
    [6, 1_000, 30_000, 30_000],
    [60, 1_000, 30_000, 30_000],
    [0, 200, 2_000, 200],
  ])('try %i (base %i, max %i): %i ms +-25%%', (attempts, base, max, expected) => {
    for (let i = 0; i < 50; i++) {
      const delay = retryDelayMs(attempts, base, max);
      expect(delay).toBeGreaterThanOrEqual(expected * 0.75 - 1);
      expect(delay).toBeLessThanOrEqual(expected * 1.25 + 1);
    }
  });
});
