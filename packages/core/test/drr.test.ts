import { describe, expect, it } from 'vitest';
import { type FairnessPolicy, FlowRing, type FlowState } from '../src/index.js';

/**
 * A miniature band: tenant queues of request ids (arrival order across tenants is the
 * numeric suffix), weights, and quota-blocked tenants. `run` dispatches `count` requests
 * through FlowRing exactly as the scheduler's pass does and returns the dispatched ids.
 */
interface Band {
  queues: Record<string, string[]>;
  weights?: Record<string, number>;
  blocked?: string[];
  costs?: Record<string, number>;
}

function run(policy: FairnessPolicy, quantum: number, band: Band, count: number): string[] {
  const ring = new FlowRing();
  const queues = new Map(Object.entries(band.queues).map(([t, q]) => [t, [...q]]));
  const credit = (tenant: string) => (band.weights?.[tenant] ?? 1) * quantum;
  for (const tenant of queues.keys()) ring.join(tenant, credit(tenant));
  const arrival = (id: string) => Number(id.replace(/^\D+/, ''));
  const probe = (tenant: string): FlowState => {
    const head = queues.get(tenant)?.[0];
    if (head === undefined) return { kind: 'empty' };
    if (band.blocked?.includes(tenant)) return { kind: 'blocked' };
    return {
      kind: 'ready',
      cost: band.costs?.[tenant] ?? 1,
      head: { score: arrival(head), id: head },
    };
  };
  const dispatched: string[] = [];
  while (dispatched.length < count) {
    const tenant = ring.select(policy, probe, credit);
    if (tenant === undefined) break;
    const queue = queues.get(tenant)!;
    dispatched.push(queue.shift()!);
    ring.charge(tenant, band.costs?.[tenant] ?? 1, policy, queue.length === 0);
  }
  return dispatched;
}

const many = (prefix: string, from: number, n: number) =>
  Array.from({ length: n }, (_, i) => `${prefix}${from + i * 10}`);

describe('FlowRing dispatch order', () => {
  it.each<[string, FairnessPolicy, number, Band, number, string[]]>([
    [
      'drr weights 2:1, quantum 1',
      'drr',
      1,
      { queues: { a: many('a', 1, 6), b: many('b', 2, 6) }, weights: { a: 2, b: 1 } },
      9,
      ['a1', 'a11', 'b2', 'a21', 'a31', 'b12', 'a41', 'a51', 'b22'],
    ],
    [
      'drr weights 3:1:1',
      'drr',
      1,
      { queues: { a: many('a', 1, 9), b: many('b', 2, 3), c: many('c', 3, 3) }, weights: { a: 3 } },
      10,
      ['a1', 'a11', 'a21', 'b2', 'c3', 'a31', 'a41', 'a51', 'b12', 'c13'],
    ],
    [
      'quantum multiplies the turn',
      'drr',
      2,
      { queues: { a: many('a', 1, 6), b: many('b', 2, 6) }, weights: { a: 2, b: 1 } },
      9,
      ['a1', 'a11', 'a21', 'a31', 'b2', 'b12', 'a41', 'a51', 'b22'],
    ],
    [
      'cost larger than a turn accumulates credit over turns',
      'drr',
      1,
      { queues: { a: many('a', 1, 3), b: many('b', 2, 6) }, costs: { a: 3 } },
      6,
      ['b2', 'b12', 'a1', 'b22', 'b32', 'b42'],
    ],
    [
      'a blocked tenant is skipped, others proceed',
      'drr',
      1,
      { queues: { a: many('a', 1, 3), b: many('b', 2, 3) }, blocked: ['a'] },
      6,
      ['b2', 'b12', 'b22'],
    ],
    [
      'all blocked: nothing dispatched',
      'drr',
      1,
      { queues: { a: many('a', 1, 3), b: many('b', 2, 3) }, blocked: ['a', 'b'] },
      6,
      [],
    ],
    [
      'an emptied tenant leaves, the other takes everything (work-conserving)',
      'drr',
      1,
      { queues: { a: many('a', 1, 1), b: many('b', 2, 4) }, weights: { a: 5 } },
      5,
      ['a1', 'b2', 'b12', 'b22', 'b32'],
    ],
    [
      'round-robin ignores weights',
      'round-robin',
      1,
      { queues: { a: many('a', 1, 3), b: many('b', 2, 3) }, weights: { a: 3 } },
      6,
      ['a1', 'b2', 'a11', 'b12', 'a21', 'b22'],
    ],
    [
      'round-robin skips blocked tenants',
      'round-robin',
      1,
      { queues: { a: many('a', 1, 2), b: many('b', 2, 2), c: many('c', 3, 2) }, blocked: ['b'] },
      6,
      ['a1', 'c3', 'a11', 'c13'],
    ],
    [
      'global-strict follows arrival order across tenants',
      'global-strict',
      1,
      { queues: { a: ['a1', 'a2', 'a9'], b: ['b3', 'b4'], c: ['c5'] }, weights: { a: 9 } },
      6,
      ['a1', 'a2', 'b3', 'b4', 'c5', 'a9'],
    ],
    [
      'global-strict skips blocked tenants',
      'global-strict',
      1,
      { queues: { a: ['a1', 'a2'], b: ['b3'] }, blocked: ['a'] },
      3,
      ['b3'],
    ],
  ])('%s', (_name, policy, quantum, band, count, expected) => {
    expect(run(policy, quantum, band, count)).toEqual(expected);
  });

  it.each<[number[], number]>([
    [[2, 1], 3000],
    [[3, 1, 1], 3000],
    [[5, 3, 2, 1], 5500],
  ])('long-run shares follow weights %j exactly', (weights, count) => {
    const queues = Object.fromEntries(weights.map((_, i) => [`t${i}`, many(`t${i}x`, i, count)]));
    const named = Object.fromEntries(weights.map((w, i) => [`t${i}`, w]));
    const dispatched = run('drr', 1, { queues, weights: named }, count);
    const total = weights.reduce((a, b) => a + b, 0);
    weights.forEach((weight, i) => {
      const share = dispatched.filter((id) => id.startsWith(`t${i}x`)).length / count;
      expect(share).toBeCloseTo(weight / total, 3);
    });
  });
});

describe('FlowRing membership', () => {
  it('a tenant joins once and its deficit resets when it leaves empty', () => {
    const ring = new FlowRing();
    expect(ring.join('a', 2)).toBe(true);
    expect(ring.join('a', 2)).toBe(false);
    expect(ring.deficitOf('a')).toBe(2);
    const probe = (): FlowState => ({ kind: 'ready', cost: 1, head: { score: 1, id: 'x' } });
    expect(ring.select('drr', probe, () => 2)).toBe('a');
    ring.charge('a', 1, 'drr', false);
    expect(ring.deficitOf('a')).toBe(1);
    ring.charge('a', 1, 'drr', true);
    expect(ring.has('a')).toBe(false);
    expect(ring.deficitOf('a')).toBeUndefined();
    expect(ring.size).toBe(0);
  });

  it('a member whose queue was emptied elsewhere is dropped when reached', () => {
    const ring = new FlowRing();
    ring.join('a', 1);
    ring.join('b', 1);
    const probe = (tenant: string): FlowState =>
      tenant === 'a' ? { kind: 'empty' } : { kind: 'ready', cost: 1, head: { score: 2, id: 'b1' } };
    expect(ring.select('drr', probe, () => 1)).toBe('b');
    expect(ring.tenants()).toEqual(['b']);
  });
});
