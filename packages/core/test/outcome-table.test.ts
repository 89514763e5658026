import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  DROP_REASON_HEADER,
  type DropNotice,
  isFlowControlDrop,
  noticeDropCode,
  OUTCOME_TABLE,
  type OutcomeCode,
  outcomeAnswer,
  outcomeRow,
  RejectCode,
  retryOutlook,
} from '../src/index.js';

const context = { tenant: 'acme', sloClass: 'batch', cost: 120 };
const flowHeaders = (code: string, retryAfter: boolean) => ({
  ...(retryAfter ? { 'retry-after': '1', 'retry-after-ms': '1000' } : {}),
  [DROP_REASON_HEADER]: code,
});

/**
 * Every code of the table: status, OpenAI type, message (with `context`), headers, and what
 * sending the request again can do (the Batch API's retry decision).
 */
const EXPECTED: ReadonlyArray<
  [OutcomeCode, number, string, string, Record<string, string>, string]
> = [
  [
    RejectCode.TenantQueueFull,
    429,
    'rate_limit_error',
    "Tenant 'acme' has too many requests waiting",
    flowHeaders('tenant_queue_full', true),
    'after_waiting',
  ],
  [
    RejectCode.BandFull,
    429,
    'rate_limit_error',
    'Too many requests of this priority are waiting',
    flowHeaders('band_full', true),
    'after_waiting',
  ],
  [
    RejectCode.GlobalQueueFull,
    429,
    'rate_limit_error',
    'The gateway queue is full',
    flowHeaders('global_queue_full', true),
    'after_waiting',
  ],
  [
    RejectCode.QuotaConcurrencyNeverFits,
    429,
    'rate_limit_error',
    "Tenant 'acme' has no concurrency quota",
    flowHeaders('quota_concurrency', false),
    'never',
  ],
  [
    RejectCode.QuotaKvBlocksNeverFits,
    429,
    'rate_limit_error',
    "The request needs more KV-cache blocks than tenant 'acme' may hold",
    flowHeaders('quota_kv_blocks', false),
    'never',
  ],
  [
    RejectCode.NoHealthyPod,
    503,
    'service_unavailable_error',
    'No healthy inference pod is available',
    { 'retry-after': '1' },
    'after_waiting',
  ],
  [
    RejectCode.RateLimited,
    429,
    'rate_limit_error',
    "Tenant 'acme' is over its token rate limit (this request costs 120 tokens)",
    flowHeaders('rate_limited', false),
    'never',
  ],
  [
    RejectCode.BudgetExhausted,
    429,
    'rate_limit_error',
    "Tenant 'acme' has spent its token budget for this period",
    flowHeaders('budget_exhausted', false),
    'never',
  ],
  [
    RejectCode.ShedByTier,
    429,
    'rate_limit_error',
    "The pool is overloaded: class 'batch' is shed",
    flowHeaders('shed_by_tier', true),
    'after_waiting',
  ],
  [
    RejectCode.Saturated,
    429,
    'rate_limit_error',
    "The pool is saturated: sheddable class 'batch' is refused",
    flowHeaders('saturated', true),
    'after_waiting',
  ],
  [
    RejectCode.RejectedByPolicy,
    429,
    'rate_limit_error',
    'The gateway admits no requests at the moment (admission policy reject-all)',
    flowHeaders('rejected_by_policy', true),
    'after_waiting',
  ],
  [
    'queue_ttl',
    429,
    'rate_limit_error',
    'The request waited longer than the queue TTL',
    flowHeaders('queue_ttl', true),
    'after_waiting',
  ],
  [
    'evicted',
    429,
    'rate_limit_error',
    'The request was evicted by flow control',
    flowHeaders('evicted', true),
    'after_waiting',
  ],
  [
    'queue_shed',
    429,
    'rate_limit_error',
    'A higher-priority request took this queue slot',
    flowHeaders('queue_shed', true),
    'after_waiting',
  ],
  [
    'upstream_busy',
    429,
    'rate_limit_error',
    'The inference pods are saturated',
    flowHeaders('upstream_busy', true),
    'after_waiting',
  ],
  [
    'scheduler_unavailable',
    503,
    'service_unavailable_error',
    'The scheduler is unavailable (its Redis cannot be reached); retry shortly',
    { 'retry-after': '1' },
    'after_waiting',
  ],
  [
    'draining',
    503,
    'service_unavailable_error',
    'This gateway replica is shutting down; retry on another replica',
    { 'retry-after': '1', connection: 'close' },
    'after_waiting',
  ],
  [
    'replica_unreachable',
    503,
    'service_unavailable_error',
    'The gateway replica cannot be reached',
    { 'retry-after': '1' },
    'after_waiting',
  ],
  ['upstream_error', 502, 'upstream_error', 'The inference pod failed', {}, 'another_try'],
  [
    'upstream_reset',
    502,
    'upstream_error',
    'The inference pod reset the stream',
    {},
    'another_try',
  ],
  [
    'upstream_truncated',
    502,
    'upstream_error',
    'The inference pod ended the stream early',
    {},
    'another_try',
  ],
  [
    'upstream_timeout',
    504,
    'timeout_error',
    'The inference pod did not answer in time',
    {},
    'another_try',
  ],
];

describe('the outcome table', () => {
  it.each(EXPECTED)('%s -> %i %s', (code, status, type, message, headers, outlook) => {
    const answer = outcomeAnswer(code, { context });
    expect(answer).toEqual({ status, type, code, message, headers });
    // Header order is part of the answer on the wire.
    expect(Object.keys(answer.headers)).toEqual(Object.keys(headers));
    const retryAfter = 'retry-after' in answer.headers;
    expect(retryOutlook(status, code, retryAfter)).toBe(outlook);
    // Waiting helps exactly when the answer says when to come back.
    expect(retryAfter).toBe(outcomeRow(code)?.waiting === 'fixed');
  });

  it('covers every code, every rejection included, and nothing else', () => {
    expect(Object.keys(OUTCOME_TABLE).sort()).toEqual(EXPECTED.map(([code]) => code).sort());
    for (const code of Object.values(RejectCode)) expect(OUTCOME_TABLE[code]).toBeDefined();
  });

  it('a flow-control drop names itself in the drop-reason header; the others do not', () => {
    for (const [code, row] of Object.entries(OUTCOME_TABLE)) {
      const headers = outcomeAnswer(code as OutcomeCode).headers;
      expect(headers[DROP_REASON_HEADER]).toBe(row.dropReasonHeader ? code : undefined);
      expect(row.dropReasonHeader).toBe(row.status === 429);
      expect(isFlowControlDrop(code)).toBe(row.status === 429);
    }
  });

  it.each([
    [5_000, '5', '5000'],
    [1_200, '2', '1200'],
    [0.4, '1', '1'],
  ])(
    'rate_limited waits for the refill: %s ms -> Retry-After %s, retry-after-ms %s',
    (ms, s, msHeader) => {
      const answer = outcomeAnswer(RejectCode.RateLimited, { refillMs: ms });
      expect(answer.headers).toEqual({
        'retry-after': s,
        'retry-after-ms': msHeader,
        [DROP_REASON_HEADER]: 'rate_limited',
      });
      expect(retryOutlook(429, 'rate_limited', true)).toBe('after_waiting');
    },
  );

  it('rate_limited costing more than the bucket holds (no refill time): no Retry-After, never', () => {
    for (const refillMs of [null, undefined]) {
      const answer = outcomeAnswer(RejectCode.RateLimited, { refillMs });
      expect(answer.headers).toEqual({ [DROP_REASON_HEADER]: 'rate_limited' });
    }
    expect(retryOutlook(429, 'rate_limited', false)).toBe('never');
  });

  it('a fixed row ignores a refill time; a message given replaces the table’s', () => {
    const answer = outcomeAnswer('draining', { refillMs: 9_000, message: 'bye' });
    expect(answer.headers).toEqual({ 'retry-after': '1', connection: 'close' });
    expect(answer.message).toBe('bye');
  });

  it("an answer that is not the table's (a pod's own, a success, another status) is never retried", () => {
    expect(retryOutlook(200, undefined, false)).toBe('never');
    expect(retryOutlook(400, 'invalid_value', false)).toBe('never');
    expect(retryOutlook(429, 'tenant_quota_exceeded', false)).toBe('never');
    // A pod's own 400 whose body happens to use one of our codes.
    expect(retryOutlook(400, 'draining', true)).toBe('never');
    expect(retryOutlook(503, 'no_such_code', true)).toBe('never');
    expect(outcomeRow('toString')).toBeUndefined();
    expect(isFlowControlDrop(undefined)).toBe(false);
    expect(isFlowControlDrop('tenant_quota_exceeded')).toBe(false);
  });

  it.each([
    ['expired', 'queue_ttl'],
    ['evict', 'evicted'],
    ['shed', 'queue_shed'],
  ] as Array<[DropNotice, string]>)('notice %s -> %s', (kind, code) => {
    expect(noticeDropCode(kind)).toBe(code);
  });

  it('drop reasons are distinct, rejection codes included', () => {
    const reasons = [
      ...Object.values(RejectCode),
      ...(['expired', 'evict', 'shed'] as const).map(noticeDropCode),
    ];
    expect(new Set(reasons).size).toBe(reasons.length);
    expect(Object.values(RejectCode)).toHaveLength(11);
  });
});

describe('docs/gateway.md, *Outcomes*', () => {
  it('has one row per code, with its status, type, waiting and drop-reason header', () => {
    const doc = readFileSync(new URL('../../../docs/gateway.md', import.meta.url), 'utf8');
    const section = doc.slice(doc.indexOf('## Outcomes'), doc.indexOf('## Drain'));
    const rows = section
      .split('\n')
      .filter((line) => line.startsWith('| `'))
      .map((line) => line.split('|').map((cell) => cell.trim()));
    const documented = rows.map(([, code, status, type, waiting, header]) => [
      code?.replaceAll('`', ''),
      Number(status),
      type?.replaceAll('`', ''),
      waiting,
      header === 'yes',
    ]);
    const table = Object.entries(OUTCOME_TABLE).map(([code, row]) => [
      code,
      row.status,
      row.type,
      row.waiting,
      row.dropReasonHeader,
    ]);
    expect(documented).toEqual(table);
  });
});
