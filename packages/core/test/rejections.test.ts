import { describe, expect, it } from 'vitest';
import {
  assertValidName,
  conservationViolations,
  emptyOutcomes,
  type FlowCounters,
  isValidName,
  outcomeDropResponse,
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
    [RejectCode.Shed, 429, 'shed'],
    [RejectCode.NoHealthyPod, 503, 'no_healthy_pod'],
  ])('%s -> %i %s', (code, status, dropReason) => {
    expect(rejectionResponse(code)).toEqual({ status, dropReason });
  });

  it('maps flow-control outcomes to drops and leaves the others alone', () => {
    expect(outcomeDropResponse('expired')).toEqual({ status: 429, dropReason: 'queue_ttl' });
    expect(outcomeDropResponse('evicted')).toEqual({ status: 429, dropReason: 'evicted' });
    expect(outcomeDropResponse('completed')).toBeUndefined();
    expect(outcomeDropResponse('upstream_error')).toBeUndefined();
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
  it('fifo uses the arrival sequence, slo-deadline the deadline or else the expiry', () => {
    const arrival = { seq: 7, nowMs: 1000, deadlineInMs: 250, ttlMs: 900 };
    expect(queueScore('fifo', arrival)).toBe(7);
    expect(queueScore('slo-deadline', arrival)).toBe(1250);
    expect(queueScore('slo-deadline', { ...arrival, deadlineInMs: undefined })).toBe(1900);
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
