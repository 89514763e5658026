import type { Engine, Iteration, SequenceListener, SequenceSpec, SequenceView } from './engine.js';

/**
 * Runs the engine in real time.
 *
 * Drift correction: iteration n+1 starts at the *model* end of iteration n (start of the
 * busy period + cumulative model time), not at the moment its timer happened to fire. A
 * timer that overshoots by 1-2 ms shortens the wait for the next one, so over a busy
 * period real time follows the model instead of accumulating setTimeout's overshoot.
 *
 * Arrivals follow model time too: iteration n+1 takes in only requests that arrived by its
 * model start (the model end of n). One that arrived after it — while n's timer was
 * overdue, so it is already queued when n+1 is planned — waits for n+2, as a request
 * arriving during an iteration does in the model; joining n+1 would skip its residual wait.
 *
 * Idle costs nothing: with no work there is no timer; a submit wakes the loop with one
 * deferred call (so requests arriving in the same tick share the first iteration).
 *
 * Falling behind (CPU starvation) is reported, not hidden: every iteration's lateness goes
 * to `onLag`; when the loop is more than `resyncAfterMs` behind, it stops trying to catch
 * up (which would burst many iterations at once), restarts the model clock at the present
 * and reports `onResync`.
 */
export interface TimerHost {
  /** Monotonic milliseconds. */
  now(): number;
  setTimer(callback: () => void, delayMs: number): unknown;
  clearTimer(handle: unknown): void;
  /** Runs `callback` soon, after the current tick (setImmediate). */
  defer(callback: () => void): void;
}

export const realTimerHost: TimerHost = {
  now: () => performance.now(),
  setTimer: (callback, delayMs) => setTimeout(callback, delayMs),
  clearTimer: (handle) => clearTimeout(handle as NodeJS.Timeout),
  defer: (callback) => setImmediate(callback),
};

export interface DriverObserver {
  /** How late the iteration ending at `iteration.endMs` completed (may be < 0: early timer). */
  onLag?(lagMs: number, iteration: Iteration): void;
  /** The loop was `lagMs` behind and restarted its model clock at the present. */
  onResync?(lagMs: number): void;
}

export interface DriverOptions {
  host?: TimerHost;
  observer?: DriverObserver;
  /** Lateness beyond which the loop gives up catching up (default 250 ms). */
  resyncAfterMs?: number;
}

type DriverState = 'idle' | 'waking' | 'busy' | 'stopped';

export class EngineDriver {
  readonly engine: Engine;
  private readonly host: TimerHost;
  private readonly observer: DriverObserver;
  private readonly resyncAfterMs: number;
  private state: DriverState = 'idle';
  private timer: unknown = null;
  /** Model time at which the next iteration starts. */
  private modelNowMs = 0;

  constructor(engine: Engine, options: DriverOptions = {}) {
    this.engine = engine;
    this.host = options.host ?? realTimerHost;
    this.observer = options.observer ?? {};
    this.resyncAfterMs = options.resyncAfterMs ?? 250;
  }

  now(): number {
    return this.host.now();
  }

  get idle(): boolean {
    return this.state === 'idle';
  }

  /** Queues a request (throws the engine's QueueFullError) and wakes the loop. */
  submit(spec: SequenceSpec, listener: SequenceListener): SequenceView {
    if (this.state === 'stopped') throw new Error('engine driver is stopped');
    const seq = this.engine.submit(spec, listener, this.host.now());
    this.wake();
    return seq;
  }

  /** Frees a sequence's seat and blocks at once (see Engine.abort). */
  abort(seq: SequenceView): boolean {
    return this.engine.abort(seq, this.host.now());
  }

  /** Stops the loop and aborts every sequence. */
  stop(): void {
    if (this.timer !== null) this.host.clearTimer(this.timer);
    this.timer = null;
    this.state = 'stopped';
    this.engine.abortAll(this.host.now());
  }

  private wake(): void {
    if (this.state !== 'idle') return;
    this.state = 'waking';
    this.host.defer(() => {
      if (this.state !== 'waking') return;
      // A busy period starts now; from here on iterations follow model time.
      this.modelNowMs = this.host.now();
      this.startIteration();
    });
  }

  /** Plans the iteration starting at modelNowMs; it takes in requests arrived by then. */
  private startIteration(admitArrivedBy = this.modelNowMs): void {
    const iteration =
      this.engine.beginIteration(this.modelNowMs, admitArrivedBy) ?? this.restartAtNextArrival();
    if (!iteration) {
      this.state = 'idle';
      return;
    }
    this.state = 'busy';
    const delayMs = iteration.endMs - this.host.now();
    if (delayMs > 0) {
      this.timer = this.host.setTimer(() => this.finishIteration(iteration), delayMs);
    } else {
      // Already due (zero-cost model, or catching up): next tick, without setTimeout's
      // 1 ms floor, so alpha = 0 runs as fast as the CPU allows instead of falling behind.
      this.host.defer(() => this.finishIteration(iteration));
    }
  }

  /**
   * Nothing runs at modelNowMs, yet requests wait: all arrived after it (while the timer was
   * overdue). The engine was idle in between, so in the model the next busy period starts
   * at the first of those arrivals. Null when nothing waits.
   */
  private restartAtNextArrival(): Iteration | null {
    const arrivalMs = this.engine.nextArrivalMs;
    if (arrivalMs === null) return null;
    this.modelNowMs = Math.max(this.modelNowMs, arrivalMs);
    return this.engine.beginIteration(this.modelNowMs);
  }

  private finishIteration(iteration: Iteration): void {
    this.timer = null;
    if (this.state !== 'busy') return;
    const now = this.host.now();
    const lagMs = now - iteration.endMs;
    this.observer.onLag?.(lagMs, iteration);
    this.engine.completeIteration(now);
    if (lagMs > this.resyncAfterMs) {
      this.observer.onResync?.(lagMs);
      this.modelNowMs = now;
      this.startIteration();
    } else if (lagMs < iteration.durationMs) {
      // On schedule: the next iteration starts at this one's model end and takes in only
      // requests that had arrived by then (see the class comment).
      this.modelNowMs = iteration.endMs;
      this.startIteration();
    } else {
      // A whole iteration or more behind (catching up after a stall, or a model faster than
      // the CPU, e.g. zero cost): the model clock may never reach a new arrival, so whoever
      // has arrived joins now (not exact; the lag histogram shows such periods).
      this.modelNowMs = iteration.endMs;
      this.startIteration(now);
    }
  }
}
