export interface LeaderTimerOptions {
  /** The period between runs (ms); read again after every run, so config reloads apply. */
  periodMs: () => number;
  /**
   * What the period is measured from: 'start' of the previous run (the next run starts
   * max(0, period - its duration) after it ended), or its 'end'.
   */
  from: 'start' | 'end';
}

/**
 * The timer of a leader duty: while this replica leads, one run at a time, the next one
 * scheduled when the previous has ended. start() and stop() each begin a new term; a run
 * that ends in an older term (leadership ended, or began again, meanwhile) schedules
 * nothing, so a deposed leader's last run never starts another. Timers are unref'd.
 */
export class LeaderTimer {
  #term = 0;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;

  constructor(private readonly options: LeaderTimerOptions) {}

  /**
   * Starts a term: `run` first after `firstDelayMs`, then every period. `run` should handle
   * its own errors; a rejection is passed to `onError` and the loop goes on.
   */
  start(
    run: () => Promise<unknown>,
    firstDelayMs: number,
    onError?: (error: unknown) => void,
  ): void {
    this.stop();
    const term = this.#term;
    const schedule = (delayMs: number): void => {
      if (term !== this.#term) return;
      this.#timer = setTimeout(() => {
        const started = performance.now();
        this.#running = run()
          .then(
            () => {},
            (error: unknown) => onError?.(error),
          )
          .finally(() => {
            this.#running = undefined;
            if (term !== this.#term) return;
            const elapsed = this.options.from === 'start' ? performance.now() - started : 0;
            schedule(Math.max(0, this.options.periodMs() - elapsed));
          });
      }, delayMs);
      this.#timer.unref();
    };
    schedule(firstDelayMs);
  }

  /** Ends the term: nothing further is scheduled (a run in progress finishes). */
  stop(): void {
    this.#term += 1;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** Resolves when the run in progress, if any, has ended. */
  async settled(): Promise<void> {
    await this.#running;
  }
}
