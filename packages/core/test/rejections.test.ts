import { describe, expect, it } from 'vitest';
import { isValidName } from '../src/ids.js';
import {
  assertValidName,
  compareOrderKeys,
  conservationViolations,
  DISPATCH_ORDERS,
  emptyOutcomes,
  type FlowCounters,
  noticeDropResponse,
  type QueueOrder,
  queueScore,
  RejectCode,
  rejectionResponse,
} from '../src/index.js';

describe('rejection -> HTTP', () => {
  it.each([
    [RejectCode.TenantQueueFull, 429, 'tenant_queue_full'],
    [RejectCode.BandFull, 429, 'band_full'],
    [RejectCode.GlobalQueueFull, 429, 'global_queue_full'],
    [RejectCode.QuotaConcurrencyNeverFits, 429, 'quota_concurrency'],
    [RejectCode.QuotaKvBlocksNeverFits, 429, 'quota_kv_blocks'],
    [RejectCode.RateLimited, 429, 'rate_limited'],
    [RejectCode.ShedByTier, 429, 'shed_by_tier'],
    [RejectCode.Saturated, 429, 'saturated'],
    [RejectCode.RejectedByPolicy, 429, 'rejected_by_policy'],
    [RejectCode.NoHealthyPod, 503, 'no_healthy_pod'],
  ])('%s -> %i %s', (code, status, dropReason) => {
    expect(rejectionResponse(code)).toEqual({ status, dropReason });
  });

  it.each([
    ['expired', 'queue_ttl'],
    ['evict', 'evicted'],
    ['shed', 'queue_shed'],
  ] as const)('notice %s -> 429 %s', (kind, dropReason) => {
    expect(noticeDropResponse(kind)).toEqual({ status: 429, dropReason });
  });

  it('drop reasons are distinct, rejection codes included', () => {
    const reasons = [
      ...Object.values(RejectCode),
      ...(['expired', 'evict', 'shed'] as const).map((kind) => noticeDropResponse(kind).dropReason),
    ];
    expect(new Set(reasons).size).toBe(reasons.length);
    expect(Object.values(RejectCode)).toHaveLength(10);
  });
});

describe('names', () => {
  it.each(['tenant-a', 'req_01J:x', 'pod.ns/0', 'a@b'])('accepts %s', (name) => {
    expect(isValidName(name)).toBe(true);
  });
  it.each(['', '{fg}', 'a|b', 'a b', 'x'.repeat(201)])('rejects %j', (name) => {
    expect(isValidName(name)).toBe(false);
    expect(() => assertValidName('tenant', name)).toThrow(/tenant must be/);
  });
});

describe('queueScore', () => {
  const arrival = { seq: 7, nowMs: 1000, deadlineInMs: 250, ttlMs: 900 };
  it.each<[QueueOrder, Partial<typeof arrival>, number]>([
    ['priority', {}, 7],
    ['fifo', {}, 7],
    ['priority', { deadlineInMs: undefined }, 7],
    ['slo-deadline', {}, 1250],
    ['slo-deadline', { deadlineInMs: 0 }, 1000],
    ['slo-deadline', { deadlineInMs: undefined }, 1900],
  ])('%s %j -> %s', (order, patch, expected) => {
    expect(queueScore(order, { ...arrival, ...patch })).toBe(expected);
  });

  it('lists the three dispatch orders', () => {
    expect(DISPATCH_ORDERS).toEqual(['priority', 'fifo', 'slo-deadline']);
  });

  it.each([
    [{ score: 1, id: 'b' }, { score: 2, id: 'a' }, -1],
    [{ score: 2, id: 'a' }, { score: 2, id: 'b' }, -1],
    [{ score: 2, id: 'B' }, { score: 2, id: 'a' }, -1], // bytewise, as sorted sets order
    [{ score: 2, id: 'a' }, { score: 2, id: 'a' }, 0],
    [{ score: 3, id: 'a' }, { score: 2, id: 'z' }, 1],
  ])('compareOrderKeys(%j, %j) = %s', (a, b, expected) => {
    expect(compareOrderKeys(a, b)).toBe(expected);
  });
});

describe('conservationViolations', () => {
  const row = (patch: Partial<FlowCounters>): FlowCounters => ({
    tenant: 't',
    sloClass: 'standard',
    offered: 5,
    admitted: 4,
    rejected: { [RejectCode.TenantQueueFull]: 1 },
    outcomes: { ...emptyOutcomes(), completed: 3, expired: 1 },
    shed: 0,
    inputTokens: 0,
    outputTokens: 0,
    ...patch,
  });

  it('holds for consistent counters', () => {
    expect(conservationViolations([row({})], 0)).toEqual([]);
    expect(
      conservationViolations([row({ outcomes: { ...emptyOutcomes(), completed: 3 } })], 1),
    ).toEqual([]);
  });

  it('names each broken identity', () => {
    expect(conservationViolations([row({ offered: 6 })], 0)).toEqual([
      't/standard: offered 6 != admitted 4 + rejected 1',
    ]);
    expect(conservationViolations([row({})], 2)).toEqual(['pool: admitted 4 != ended 4 + live 2']);
  });
});
