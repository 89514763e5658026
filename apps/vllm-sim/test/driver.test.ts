import { describe, expect, it } from 'vitest';
import { Engine, EngineDriver, type TimerHost } from '../src/index.js';
import { BASE_CONFIG, Recorder, spec } from './helpers.js';

/** A manual clock: timers fire only when the test says, as late as the test says. */
class FakeHost implements TimerHost {
  time = 1_000;
  private timers: Array<{ at: number; callback: () => void; handle: number }> = [];
  private deferred: Array<() => void> = [];
  private nextHandle = 1;

  now(): number {
    return this.time;
  }

  setTimer(callback: () => void, delayMs: number): unknown {
    const handle = this.nextHandle++;
    this.timers.push({ at: this.time + delayMs, callback, handle });
    return handle;
  }

  clearTimer(handle: unknown): void {
    this.timers = this.timers.filter((timer) => timer.handle !== handle);
  }

  defer(callback: () => void): void {
    this.deferred.push(callback);
  }

  get pending(): number {
    return this.timers.length + this.deferred.length;
  }

  /** Runs deferred callbacks, then fires the earliest timer `lateMs` after its due time. */
  fire(lateMs = 0): number {
    for (const callback of this.deferred.splice(0)) callback();
    this.timers.sort((a, b) => a.at - b.at);
    const timer = this.timers.shift();
    if (!timer) throw new Error('no timer pending');
    this.time = Math.max(this.time, timer.at + lateMs);
    timer.callback();
    return timer.at;
  }

  flushDeferred(): void {
    for (const callback of this.deferred.splice(0)) callback();
  }
}

const A = BASE_CONFIG.alphaMs;
const B = BASE_CONFIG.betaMs;
const G = BASE_CONFIG.gammaMs;

describe('EngineDriver', () => {
  it('schedules iterations on model time, so timer overshoot does not accumulate', () => {
    const host = new FakeHost();
    const lags: number[] = [];
    const driver = new EngineDriver(new Engine(BASE_CONFIG), {
      host,
      observer: { onLag: (lag) => lags.push(lag) },
    });
    const recorder = new Recorder();
    driver.submit(spec('a', 100, 6), recorder);
    const start = host.time;

    // Every timer fires 2 ms late.
    const dueTimes: number[] = [];
    while (host.pending > 0) dueTimes.push(host.fire(2));

    // Model schedule: the k-th iteration is due at start + cumulative model time,
    // independent of the 2 ms overshoot of each previous timer.
    let modelEnd = start + A + (B + G) * 100;
    const expected = [modelEnd];
    for (let k = 1; k < 6; k++) {
      modelEnd += A + B + G * (100 + k);
      expected.push(modelEnd);
    }
    expect(dueTimes).toEqual(expected.map((time) => expect.closeTo(time, 9)));
    // Tokens come out 2 ms after their model time, not 2 ms more per token.
    expect(recorder.of('a').map((token) => token.at)).toEqual(
      expected.map((time) => expect.closeTo(time + 2, 9)),
    );
    expect(lags).toEqual(Array(6).fill(expect.closeTo(2, 9)));
  });

  it('costs nothing when idle: no timer is left once the work is done', () => {
    const host = new FakeHost();
    const driver = new EngineDriver(new Engine(BASE_CONFIG), { host });
    expect(host.pending).toBe(0);
    driver.submit(spec('a', 10, 2), new Recorder());
    driver.submit(spec('b', 10, 2), new Recorder()); // same tick: one wake-up
    expect(host.pending).toBe(1);
    while (host.pending > 0) host.fire();
    expect(driver.idle).toBe(true);
    expect(host.pending).toBe(0);
  });

  it('starts a busy period at the arrival, not at the end of the previous one', () => {
    const host = new FakeHost();
    const driver = new EngineDriver(new Engine(BASE_CONFIG), { host });
    const recorder = new Recorder();
    driver.submit(spec('a', 10, 1), recorder);
    while (host.pending > 0) host.fire();
    host.time += 500; // idle gap
    const arrival = host.time;
    driver.submit(spec('b', 10, 1), recorder);
    host.fire();
    expect(recorder.of('b')[0]!.at).toBeCloseTo(arrival + A + (B + G) * 10, 9);
  });

  it('runs an iteration that is already due on the next tick, not after a timer', () => {
    const host = new FakeHost();
    const zeroCost = { ...BASE_CONFIG, alphaMs: 0, betaMs: 0, gammaMs: 0 };
    const lags: number[] = [];
    const driver = new EngineDriver(new Engine(zeroCost), {
      host,
      observer: { onLag: (lag) => lags.push(lag) },
    });
    const recorder = new Recorder();
    driver.submit(spec('a', 10, 50), recorder);
    host.flushDeferred(); // wake-up: the first iteration is due at once
    for (let tick = 0; tick < 50; tick++) host.flushDeferred();
    expect(recorder.of('a')).toHaveLength(50);
    expect(lags.every((lag) => lag === 0)).toBe(true); // never behind, so never a resync
    expect(driver.idle).toBe(true);
  });

  it('reports falling far behind and restarts the model clock instead of bursting', () => {
    const host = new FakeHost();
    const resyncs: number[] = [];
    const driver = new EngineDriver(new Engine(BASE_CONFIG), {
      host,
      resyncAfterMs: 100,
      observer: { onResync: (lag) => resyncs.push(lag) },
    });
    driver.submit(spec('a', 10, 3), new Recorder());
    host.fire(300); // the process was starved for 300 ms
    expect(resyncs).toEqual([expect.closeTo(300, 9)]);
    const resumedAt = host.time;
    const nextDue = host.fire();
    expect(nextDue).toBeCloseTo(resumedAt + A + B + G * 11, 9);
  });

  it('abort frees the sequence at once; stop aborts everything and cancels the timer', () => {
    const host = new FakeHost();
    const engine = new Engine(BASE_CONFIG);
    const driver = new EngineDriver(engine, { host });
    const seq = driver.submit(spec('a', 100, 5), new Recorder());
    driver.submit(spec('b', 100, 5), new Recorder());
    host.flushDeferred(); // iteration in flight
    expect(engine.numRunning).toBe(2);
    expect(driver.abort(seq)).toBe(true);
    expect(engine.numRunning).toBe(1);
    driver.stop();
    expect(engine.numRunning).toBe(0);
    expect(engine.pool.usedCount).toBe(0);
    expect(host.pending).toBe(0);
    expect(() => driver.submit(spec('c', 10, 1), new Recorder())).toThrow(/stopped/);
  });
});
