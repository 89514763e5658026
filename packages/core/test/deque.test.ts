import { describe, expect, it } from 'vitest';
import { Deque } from '../src/deque.js';

describe('Deque', () => {
  it('pushes, shifts, rotates and grows past its initial capacity', () => {
    const deque = new Deque<number>();
    for (let i = 0; i < 20; i += 1) deque.pushBack(i);
    expect(deque.length).toBe(20);
    expect(deque.shift()).toBe(0);
    deque.rotate();
    expect(deque.front()).toBe(2);
    expect(deque.toArray().at(-1)).toBe(1);
    expect(deque.remove(10)).toBe(true);
    expect(deque.remove(10)).toBe(false);
    expect(deque.toArray()).toEqual([
      2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19, 1,
    ]);
  });

  it('is empty-safe', () => {
    const deque = new Deque<string>();
    expect(deque.shift()).toBeUndefined();
    expect(deque.front()).toBeUndefined();
    deque.rotate();
    expect(deque.length).toBe(0);
  });
});
