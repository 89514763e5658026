import { describe, expect, it } from 'vitest';
import { KvBlockPool } from '../src/kv.js';

describe('KvBlockPool', () => {
  it('counts blocks in use; freed blocks return to the pool', () => {
    const pool = new KvBlockPool(8);
    const blocks = pool.allocate(3);
    expect(pool.usedCount).toBe(3);
    expect(pool.usage).toBeCloseTo(3 / 8, 12);
    pool.release(blocks);
    expect(pool.freeCount).toBe(8);
    expect(() => pool.release(blocks)).toThrow(/released twice/);
    expect(() => pool.allocate(9)).toThrow(RangeError);
  });

  it('keeps a freed prompt block cached until its block is handed out again (LRU)', () => {
    const pool = new KvBlockPool(3);
    const [a, b, c] = pool.allocate(3);
    pool.cache(a!, 'A');
    pool.cache(b!, 'B');
    pool.release([a!]); // free queue: a
    pool.release([b!]); // free queue: a, b
    expect(pool.lookup(['A'], 1)).toEqual([a]);
    pool.allocate(1); // takes a, the least recently freed: A is evicted
    expect(pool.lookup(['A'], 1)).toEqual([]);
    expect(pool.lookup(['B'], 1)).toEqual([b]);
    pool.release([c!]);
  });

  it('reference-counts shared hits and revives free cached blocks', () => {
    const pool = new KvBlockPool(4);
    const [first] = pool.allocate(1);
    pool.cache(first!, 'H');
    const hits = pool.lookup(['H'], 1);
    expect(pool.freeBlocksNeeded(hits, 2)).toBe(2); // in use: sharing costs no free block
    pool.acquire(hits);
    expect(first!.refCount).toBe(2);
    pool.release([first!]);
    expect(pool.usedCount).toBe(1);
    pool.release([first!]);
    expect(pool.usedCount).toBe(0);

    const revived = pool.lookup(['H'], 1);
    expect(pool.freeBlocksNeeded(revived, 2)).toBe(3); // a free cached block leaves the queue
    pool.acquire(revived);
    expect(pool.freeCount).toBe(3);
  });

  it('lookup stops at the first miss and at maxBlocks', () => {
    const pool = new KvBlockPool(4);
    const blocks = pool.allocate(3);
    for (const [index, block] of blocks.entries()) pool.cache(block, `h${index}`);
    expect(pool.lookup(['h0', 'h1', 'h2'], 2)).toHaveLength(2);
    expect(pool.lookup(['h0', 'x', 'h2'], 3)).toHaveLength(1);
  });
});
