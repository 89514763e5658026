import { describe, expect, it } from 'vitest';
import { EngineDriver, type TimerHost } from '../src/driver.js';
import { Engine } from '../src/engine.js';
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

  /** When the earliest timer is due (Infinity when none is set). */
  get nextDue(): number {
    return Math.min(...this.timers.map((timer) => timer.at));
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

describe('EngineDriver: arrivals while a timer is overdue', () => {
  // A long stream decodes alone; a probe (50 prompt tokens, 1 output) arrives `offsetMs`
  // after the model end E of the decode iteration in flight, and every timer fires `lateMs`
  // late. In the model, iteration n+1 runs over [E, E + D1] (the stream's next decode): a
  // probe arriving at E + u (0 <= u < D1) arrived while it ran, so it waits for its end and
  // joins n+2 (prefill + the stream's decode, D2): TTFT = D1 - u + D2, and the sim emits
  // that token lateMs late. A probe handled while E's timer is overdue (u < lateMs) must not
  // join n+1, which started at E, before it arrived (that would give TTFT D2 + lateMs - u).
  const D1 = A + B + G * 105; // the stream's decode with 5 tokens generated
  const D2 = A + (B + G) * 50 + B + G * 106;

  function probe(offsetMs: number, lateMs: number) {
    const host = new FakeHost();
    const queueTimes: number[] = [];
    const joined: Array<{ startMs: number; arrivalMs: number }> = [];
    const engine = new Engine(BASE_CONFIG, {
      onAdmit: (seq, now) => {
        if (seq.spec.id === 'probe') queueTimes.push(now - seq.arrivalMs);
      },
      onIteration: (iteration) => {
        for (const seq of iteration.batch) {
          if (seq.spec.id === 'probe' && seq.generated === 0)
            joined.push({ startMs: iteration.startMs, arrivalMs: seq.arrivalMs });
        }
      },
    });
    const driver = new EngineDriver(engine, { host });
    driver.submit(spec('long', 100, 200), new Recorder());
    for (let k = 0; k < 4; k++) host.fire(lateMs); // 4 tokens out, the 5th in flight
    const dueMs = engine.inFlight!.endMs; // E: the iteration in flight ends here (model)
    const arrivalMs = dueMs + offsetMs;
    expect(offsetMs).toBeLessThan(D1);
    if (arrivalMs >= dueMs + lateMs) host.fire(lateMs); // E's timer fired before the probe came
    host.time = Math.max(host.time, arrivalMs);
    const seq = driver.submit(spec('probe', 50, 1), new Recorder());
    while (seq.firstTokenMs === null) host.fire(lateMs);
    driver.stop();
    return { ttftMs: seq.firstTokenMs - seq.arrivalMs, queueTimes, joined };
  }

  it('a probe handled while the timer is overdue waits for the running iteration (TTFT as the model)', () => {
    const { ttftMs, queueTimes, joined } = probe(0.5, 1);
    // Never joins an iteration that started before it arrived; queue time is never negative.
    expect(joined).toHaveLength(1);
    expect(joined[0]!.startMs).toBeGreaterThanOrEqual(joined[0]!.arrivalMs);
    expect(queueTimes).toEqual([expect.closeTo(D1 - 0.5, 9)]);
    // Its wait for the running iteration to end counts: the model's TTFT, plus the 1 ms the
    // token's own timer fired late.
    expect(ttftMs).toBeCloseTo(D1 - 0.5 + D2 + 1, 9);
  });

  it('mean residual wait over arrivals spread across an iteration matches the model (D1 / 2)', () => {
    const lateMs = 2;
    const points = 40;
    const offsets = Array.from({ length: points }, (_, index) => ((index + 0.5) / points) * D1);
    const ttfts = offsets.map((offsetMs) => probe(offsetMs, lateMs).ttftMs);
    // Residual: TTFT minus the probe's own iteration and its timer's overshoot.
    const residuals = ttfts.map((ttftMs) => ttftMs - D2 - lateMs);
    const meanResidual = residuals.reduce((sum, value) => sum + value, 0) / points;
    const model = D1 / 2;
    console.log(
      `overdue-timer probe: mean residual ${meanResidual.toFixed(3)} ms, ` +
        `model ${model.toFixed(3)} ms (iteration ${D1.toFixed(2)} ms, timers ${lateMs} ms late)`,
    );
    expect(meanResidual).toBeCloseTo(model, 9);
    offsets.forEach((offsetMs, index) => {
      expect(residuals[index], `arrival at E + ${offsetMs.toFixed(2)} ms`).toBeCloseTo(
        D1 - offsetMs,
        9,
      );
    });
  });

  it('a request arriving after the last sequence finished (timer overdue) starts a busy period at its arrival', () => {
    const host = new FakeHost();
    const engine = new Engine(BASE_CONFIG);
    const driver = new EngineDriver(engine, { host });
    driver.submit(spec('short', 100, 2), new Recorder());
    host.fire(); // prefill; the last decode is in flight
    const dueMs = host.nextDue;
    host.time = dueMs + 0.5; // the timer is overdue: the engine is idle in the model since dueMs
    const seq = driver.submit(spec('probe', 50, 1), new Recorder());
    host.fire(); // 'short' finishes
    expect(seq.firstAdmittedMs).toBeCloseTo(dueMs + 0.5, 9); // not at dueMs, before it came
    while (seq.firstTokenMs === null) host.fire();
    expect(seq.firstTokenMs - seq.arrivalMs).toBeCloseTo(A + (B + G) * 50, 9); // alone: D
    expect(driver.idle).toBe(true);
    expect(host.pending).toBe(0);
  });

  it('a zero-cost model still admits a new arrival on the next tick (the model clock never advances)', () => {
    const host = new FakeHost();
    const zeroCost = { ...BASE_CONFIG, alphaMs: 0, betaMs: 0, gammaMs: 0 };
    const driver = new EngineDriver(new Engine(zeroCost), { host });
    driver.submit(spec('stream', 10, 1000), new Recorder());
    for (let tick = 0; tick < 20; tick++) {
      host.time += 0.05; // every iteration costs real CPU time
      host.flushDeferred();
    }
    const seq = driver.submit(spec('late', 10, 1), new Recorder());
    for (let tick = 0; tick < 2; tick++) {
      host.time += 0.05;
      host.flushDeferred();
    }
    expect(seq.generated).toBe(1);
    driver.stop();
  });
});
