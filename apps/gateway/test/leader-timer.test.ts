import { afterEach, describe, expect, it, vi } from 'vitest';
import { LeaderTimer } from '../src/control/leader-timer.js';

/**
 * The timer every leader duty runs on (controller, tuner, pod scraper, pool gauges,
 * janitor): one run at a time, the next one period after the previous started ('start',
 * minus its duration) or ended ('end'); a term ends at stop() or a new start(), and a run
 * that ends in an older term schedules nothing. Fake timers: every delay is exact.
 */
const fakeClock = () =>
  vi.useFakeTimers({ now: 0, toFake: ['setTimeout', 'clearTimeout', 'Date', 'performance'] });

afterEach(() => {
  vi.useRealTimers();
});

/** A run that takes `durationMs` and records when it started. */
function timedRun(durationMs: number) {
  const starts: number[] = [];
  const run = async () => {
    starts.push(Date.now());
    await new Promise((resolve) => setTimeout(resolve, durationMs));
  };
  return { starts, run };
}

describe('LeaderTimer', () => {
  it.each([
    ['start', [100, 400, 700, 1_000]],
    ['end', [100, 500, 900]],
  ] as const)('period from the %s of a 100 ms run: runs start at %j', async (from, expected) => {
    fakeClock();
    const timer = new LeaderTimer({ periodMs: () => 300, from });
    const { starts, run } = timedRun(100);
    timer.start(run, 100);
    await vi.advanceTimersByTimeAsync(1_050);
    timer.stop();
    expect(starts).toEqual(expected);
  });

  it('a run that ends after stop() schedules nothing', async () => {
    fakeClock();
    const timer = new LeaderTimer({ periodMs: () => 10, from: 'start' });
    const { starts, run } = timedRun(100);
    timer.start(run, 0);
    await vi.advanceTimersByTimeAsync(50);
    timer.stop();
    const settled = timer.settled();
    await vi.advanceTimersByTimeAsync(1_000);
    await settled;
    expect(starts).toEqual([0]);
  });

  it('a new term replaces the old one: the old run ending schedules nothing', async () => {
    fakeClock();
    const timer = new LeaderTimer({ periodMs: () => 1_000, from: 'end' });
    const { starts, run } = timedRun(100);
    timer.start(run, 0);
    await vi.advanceTimersByTimeAsync(50);
    timer.start(run, 500);
    await vi.advanceTimersByTimeAsync(1_400);
    timer.stop();
    // Old term: 0 only. New term: 550, then 1,000 after that run ended (1,650).
    expect(starts).toEqual([0, 550]);
    await vi.advanceTimersByTimeAsync(200);
    expect(starts).toEqual([0, 550]);
  });

  it('a failing run goes to onError and the loop goes on', async () => {
    fakeClock();
    const timer = new LeaderTimer({ periodMs: () => 100, from: 'end' });
    const errors: unknown[] = [];
    let runs = 0;
    timer.start(
      async () => {
        runs += 1;
        throw new Error(`run ${runs}`);
      },
      0,
      (error) => errors.push(error),
    );
    await vi.advanceTimersByTimeAsync(250);
    timer.stop();
    expect(runs).toBe(3);
    expect(errors.map(String)).toEqual(['Error: run 1', 'Error: run 2', 'Error: run 3']);
  });
});
