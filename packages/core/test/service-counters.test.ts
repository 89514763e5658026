import { describe, expect, it } from 'vitest';
import { type CounterFlowState, ServiceCounters } from '../src/service-counters.js';
import { virtualCost } from '../src/token-cost.js';

const BAND = 3;

function counters(setup: (c: ServiceCounters) => void): ServiceCounters {
  const c = new ServiceCounters();
  setup(c);
  return c;
}

const ready = (): CounterFlowState => 'ready';

describe('ServiceCounters.join: the lift', () => {
  it.each([
    {
      name: 'first tenant ever, nothing anywhere: 0',
      setup: () => {},
      tenant: 'a',
      want: 0,
    },
    {
      name: 'a new tenant is lifted to the smallest active counter',
      setup: (c: ServiceCounters) => {
        c.join(BAND, 'a');
        c.charge(BAND, 'a', 5_000, false);
        c.join(BAND, 'b');
        c.charge(BAND, 'b', 9_000, false);
      },
      tenant: 'n',
      want: 5_000,
    },
    {
      name: 'a returning tenant below the active minimum is lifted (idle time is not credit)',
      setup: (c: ServiceCounters) => {
        c.add(BAND, 'r', 1_000);
        c.join(BAND, 'a');
        c.charge(BAND, 'a', 50_000, false);
      },
      tenant: 'r',
      want: 50_000,
    },
    {
      name: 'a returning tenant above the active minimum keeps its counter (a debt is kept)',
      setup: (c: ServiceCounters) => {
        c.add(BAND, 'r', 80_000);
        c.join(BAND, 'a');
        c.charge(BAND, 'a', 50_000, false);
      },
      tenant: 'r',
      want: 80_000,
    },
    {
      name: 'nobody active: lifted to the last leaver',
      setup: (c: ServiceCounters) => {
        c.join(BAND, 'a');
        c.charge(BAND, 'a', 7_000, true);
      },
      tenant: 'n',
      want: 7_000,
    },
    {
      name: 'nobody active, own counter above the last leaver: kept',
      setup: (c: ServiceCounters) => {
        c.add(BAND, 'n', 9_000);
        c.join(BAND, 'b');
        c.charge(BAND, 'b', 2_000, true);
      },
      tenant: 'n',
      want: 9_000,
    },
    {
      name: 'another band does not lift',
      setup: (c: ServiceCounters) => {
        c.join(7, 'a');
        c.charge(7, 'a', 9_000, false);
      },
      tenant: 'n',
      want: 0,
    },
    {
      name: 'idle service (a grant that never waited) counts when it returns',
      setup: (c: ServiceCounters) => {
        c.add(BAND, 'n', 4_000);
      },
      tenant: 'n',
      want: 4_000,
    },
    {
      name: 'a negative counter (a true-up below the estimate) is lifted to the floor',
      setup: (c: ServiceCounters) => {
        c.add(BAND, 'n', -4_000);
      },
      tenant: 'n',
      want: 0,
    },
  ])('$name', ({ setup, tenant, want }) => {
    const c = counters(setup);
    c.join(BAND, tenant);
    expect(c.counterOf(BAND, tenant)).toBe(want);
    expect(c.isBacklogged(BAND, tenant)).toBe(true);
  });

  it('joining twice changes nothing', () => {
    const c = counters((x) => {
      x.join(BAND, 'a');
      x.charge(BAND, 'a', 100, false);
    });
    c.join(BAND, 'a');
    expect(c.counterOf(BAND, 'a')).toBe(100);
  });
});

describe('ServiceCounters.select', () => {
  it('serves the smallest counter; ties to the bytewise-first tenant', () => {
    const c = counters((x) => {
      for (const t of ['b', 'a', 'c']) x.join(BAND, t);
      x.charge(BAND, 'c', 10, false);
    });
    expect(c.select(BAND, ready)).toBe('a');
    c.charge(BAND, 'a', 20, false);
    expect(c.select(BAND, ready)).toBe('b');
    c.charge(BAND, 'b', 5, false);
    expect(c.select(BAND, ready)).toBe('b');
  });

  it('passes over blocked tenants and drops empty ones (keeping their counters)', () => {
    const c = counters((x) => {
      for (const t of ['a', 'b', 'c']) x.join(BAND, t);
      x.charge(BAND, 'b', 10, false);
      x.charge(BAND, 'c', 20, false);
    });
    const states: Record<string, CounterFlowState> = { a: 'empty', b: 'blocked', c: 'ready' };
    const visited: string[] = [];
    const chosen = c.select(BAND, (t) => {
      visited.push(t);
      return states[t] as CounterFlowState;
    });
    expect(chosen).toBe('c');
    expect(visited).toEqual(['a', 'b', 'c']);
    expect(c.isBacklogged(BAND, 'a')).toBe(false);
    expect(c.counterOf(BAND, 'a')).toBe(0);
    expect(c.backlogged(BAND).map((e) => e.tenant)).toEqual(['b', 'c']);
  });

  it('undefined when all are blocked, or when the band is empty', () => {
    const c = counters((x) => {
      x.join(BAND, 'a');
      x.join(BAND, 'b');
    });
    expect(c.select(BAND, () => 'blocked')).toBeUndefined();
    expect(c.select(9, ready)).toBeUndefined();
    expect(c.select(BAND, () => 'empty')).toBeUndefined();
    expect(c.bands()).toEqual([]);
  });
});

describe('ServiceCounters.charge, add, leave', () => {
  it('a grant that empties the queue leaves with the charged counter, which is the last leaver', () => {
    const c = counters((x) => x.join(BAND, 'a'));
    c.charge(BAND, 'a', 300, true);
    expect(c.isBacklogged(BAND, 'a')).toBe(false);
    expect(c.idleEntries()).toEqual(
      new Map([
        [`${BAND}:a`, 300],
        [`${BAND}:`, 300],
      ]),
    );
  });

  it('add goes to the active counter, else the idle one, and never touches the last leaver', () => {
    const c = counters((x) => {
      x.join(BAND, 'a');
      x.join(BAND, 'b');
      x.charge(BAND, 'b', 50, true);
    });
    c.add(BAND, 'a', 70);
    c.add(BAND, 'b', -20);
    c.add(BAND, 'z', 0);
    expect(c.counterOf(BAND, 'a')).toBe(70);
    expect(c.counterOf(BAND, 'b')).toBe(30);
    expect(c.idleEntries().get(`${BAND}:`)).toBe(50);
    expect(c.idleEntries().has(`${BAND}:z`)).toBe(false);
  });

  it('charging a tenant that waits nowhere is a bug', () => {
    expect(() => new ServiceCounters().charge(BAND, 'a', 1, false)).toThrow(/waits in no band/);
  });
});

/**
 * Two tenants backlogged throughout, each request's cost drawn at random: the gap between
 * their counters stays within the largest single charge (VTC's bound with one server),
 * at every step. Weighted shares follow from the counters' definition (service / weight).
 */
describe('the service gap between backlogged tenants', () => {
  it.each([
    { weights: [1, 1], costs: [[240], [2_600]] },
    { weights: [2, 1], costs: [[240], [2_600]] },
    {
      weights: [1, 3],
      costs: [
        [1, 50, 400],
        [100, 4_000, 9_000],
      ],
    },
    { weights: [5, 7], costs: [[30], [30, 60_000]] },
  ])('weights $weights, costs $costs', ({ weights, costs }) => {
    let seed = 7;
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const tenants = ['a', 'b'];
    const c = new ServiceCounters();
    for (const t of tenants) c.join(BAND, t);
    const largest = Math.max(
      ...tenants.flatMap((_, i) => (costs[i] as number[]).map((k) => virtualCost(k, weights[i]!))),
    );
    const served = [0, 0];
    for (let step = 0; step < 5_000; step += 1) {
      const chosen = c.select(BAND, ready) as string;
      const i = tenants.indexOf(chosen);
      const options = costs[i] as number[];
      const cost = options[Math.floor(random() * options.length)] as number;
      served[i]! += cost;
      c.charge(BAND, chosen, virtualCost(cost, weights[i]!), false);
      const gap = Math.abs((c.counterOf(BAND, 'a') ?? 0) - (c.counterOf(BAND, 'b') ?? 0));
      expect(gap).toBeLessThanOrEqual(largest);
    }
    // The counters are the weighted service divided by the weight, to the rounding of each
    // charge (under 1/1000 of a token).
    for (const [i, t] of tenants.entries()) {
      const exact = (served[i]! * 1_000) / weights[i]!;
      expect((c.counterOf(BAND, t) ?? 0) - exact).toBeGreaterThanOrEqual(0);
      expect((c.counterOf(BAND, t) ?? 0) - exact).toBeLessThan(5_000);
    }
  });
});
