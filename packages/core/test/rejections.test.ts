import { describe, expect, it } from 'vitest';
import { isValidName } from '../src/ids.js';
import {
  assertValidName,
  compareOrderKeys,
  conservationViolations,
  DISPATCH_ORDERS,
  emptyOutcomes,
  type FlowCounters,
  type QueueOrder,
  queueScore,
  RejectCode,
} from '../src/index.js';

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
