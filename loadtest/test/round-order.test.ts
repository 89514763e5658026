import { describe, expect, it } from 'vitest';
import { roundOrder } from '../bench/harness/rounds.js';

const twinOf = (path: string) =>
  path === 'redis' || path === 'embedded' ? `${path}@compare` : undefined;
const withCompare = ['direct', 'redis', 'embedded', 'node', 'redis@compare', 'embedded@compare'];

describe('roundOrder', () => {
  it.each([
    [1, ['direct', 'redis', 'redis@compare', 'embedded', 'embedded@compare', 'node']],
    [2, ['direct', 'redis@compare', 'redis', 'embedded@compare', 'embedded', 'node']],
    [3, ['direct', 'redis', 'redis@compare', 'embedded', 'embedded@compare', 'node']],
    [4, ['direct', 'redis@compare', 'redis', 'embedded@compare', 'embedded', 'node']],
  ])('round %i puts each tree next to its twin, first in turn', (round, expected) => {
    expect(roundOrder(withCompare, round, twinOf)).toEqual(expected);
  });

  it('keeps the order of paths without a twin in the run', () => {
    const paths = ['direct', 'redis', 'embedded', 'node', 'nginx'];
    expect(roundOrder(paths, 1, twinOf)).toEqual(paths);
    expect(roundOrder(paths, 2, twinOf)).toEqual(paths);
  });

  it('measures every path exactly once per round', () => {
    for (let round = 1; round <= 4; round++) {
      expect([...roundOrder(withCompare, round, twinOf)].sort()).toEqual([...withCompare].sort());
    }
  });
});
