import { describe, expect, it } from 'vitest';
import { chance, createRng, deriveSeed, pick, uniformInt } from '../src/index.js';

describe('createRng', () => {
  // Pinned: the load generator's arrival streams and the recorded studies depend on these
  // exact numbers; a change to the algorithm must show up here first.
  it('gives the same sequence as it always has for a seed and a stream label', () => {
    const plain = createRng(42);
    expect([plain.next(), plain.next(), plain.next()]).toEqual([
      0.18420576537027955, 0.14644761197268963, 0.05299818585626781,
    ]);
    const labelled = createRng(42, 'arrivals:alpha');
    expect([labelled.next(), labelled.next()]).toEqual([0.2339910960290581, 0.4976505758240819]);
  });

  it('stays in [0, 1) with a mean near one half', () => {
    const rng = createRng(7);
    let sum = 0;
    let low = 1;
    let high = 0;
    for (let i = 0; i < 100_000; i++) {
      const x = rng.next();
      sum += x;
      low = Math.min(low, x);
      high = Math.max(high, x);
    }
    expect(low).toBeGreaterThanOrEqual(0);
    expect(high).toBeLessThan(1);
    expect(Math.abs(sum / 100_000 - 0.5)).toBeLessThan(0.005);
  });
});

describe('helpers', () => {
  it('derives different seeds from different parts, the same from the same', () => {
    expect(deriveSeed(1, 'length', 3)).toBe(deriveSeed(1, 'length', 3));
    expect(deriveSeed(1, 'length', 3)).not.toBe(deriveSeed(1, 'length', 4));
    expect(deriveSeed(1, 'length', 3)).not.toBe(deriveSeed(1, 'fault', 3));
  });

  it('draws integers over the whole inclusive range and nothing outside it', () => {
    const rng = createRng(3);
    const seen = new Set<number>();
    for (let i = 0; i < 1_000; i++) seen.add(uniformInt(rng, 2, 5));
    expect([...seen].sort()).toEqual([2, 3, 4, 5]);
  });

  it('picks every item and takes a chance at about its probability', () => {
    const rng = createRng(5);
    const picked = new Set<string>();
    let hits = 0;
    for (let i = 0; i < 10_000; i++) {
      picked.add(pick(rng, ['a', 'b', 'c']));
      if (chance(rng, 0.25)) hits++;
    }
    expect([...picked].sort()).toEqual(['a', 'b', 'c']);
    expect(Math.abs(hits / 10_000 - 0.25)).toBeLessThan(0.02);
  });
});
