import { describe, expect, it } from 'vitest';
import { SlotAbort } from '../src/upstream/slot-abort.js';

describe('SlotAbort', () => {
  it('runs each listener once, with the reason set, and only the first abort counts', () => {
    const slot = new SlotAbort();
    const seen: unknown[] = [];
    slot.addEventListener('abort', () => seen.push(slot.reason));
    const first = new Error('client closed the connection');
    slot.abort(first);
    slot.abort(new Error('second'));
    expect([slot.aborted, slot.reason, seen]).toEqual([true, first, [first]]);
  });

  it('does not run a removed listener, nor one added after the abort', () => {
    const slot = new SlotAbort();
    let calls = 0;
    const listener = () => {
      calls += 1;
    };
    slot.addEventListener('abort', listener);
    slot.removeEventListener('abort', listener);
    slot.abort(new Error('gone'));
    slot.addEventListener('abort', listener);
    expect(calls).toBe(0);
  });
});
