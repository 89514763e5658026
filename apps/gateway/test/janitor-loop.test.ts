import { describe, expect, it } from 'vitest';
import { JanitorLoop } from '../src/control/janitor-loop.js';

/**
 * The leader's janitor loop: reclaims every `everyMs` while leading, and nothing once it
 * stepped down, not even when a reclaim that was running at the step-down ends afterwards.
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function slowReclaim(ms: number) {
  const calls: number[] = [];
  return {
    calls,
    reclaim: async () => {
      calls.push(performance.now());
      await sleep(ms);
      return { expired: 0, evicted: 0, cancelled: 0 };
    },
  };
}

describe('JanitorLoop', () => {
  it('reclaims on its period while leading', async () => {
    const scheduler = slowReclaim(0);
    const loop = new JanitorLoop({ scheduler, everyMs: () => 10 });
    loop.lead();
    await sleep(120);
    loop.stepDown();
    expect(scheduler.calls.length).toBeGreaterThanOrEqual(4);
  });

  it('schedules nothing after a step-down, even when a running reclaim ends later', async () => {
    const scheduler = slowReclaim(50);
    const loop = new JanitorLoop({ scheduler, everyMs: () => 5 });
    loop.lead();
    await sleep(20); // the first reclaim is running
    expect(scheduler.calls).toHaveLength(1);
    loop.stepDown();
    await sleep(150);
    expect(scheduler.calls).toHaveLength(1);
  });

  it('leading again keeps one loop, not two', async () => {
    const scheduler = slowReclaim(30);
    const loop = new JanitorLoop({ scheduler, everyMs: () => 5 });
    loop.lead();
    await sleep(10); // a reclaim is running
    loop.lead();
    await sleep(200);
    loop.stepDown();
    // One loop: a reclaim (30 ms) + the period (5 ms) each turn, so at most ~7 in 210 ms;
    // two loops would make about twice as many.
    expect(scheduler.calls.length).toBeLessThanOrEqual(8);
  });

  it('keeps going after a failed reclaim and reports it', async () => {
    const errors: unknown[] = [];
    let calls = 0;
    const loop = new JanitorLoop({
      scheduler: {
        reclaim: async () => {
          calls += 1;
          throw new Error('Redis away');
        },
      },
      everyMs: () => 5,
      onError: (error) => errors.push(error),
    });
    loop.lead();
    await sleep(60);
    loop.stepDown();
    expect(calls).toBeGreaterThanOrEqual(3);
    expect(errors).toHaveLength(calls);
  });
});
