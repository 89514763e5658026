import type { Scheduler } from '@fairgate/scheduler';

export interface JanitorLoopOptions {
  scheduler: Pick<Scheduler, 'reclaim'>;
  /** How often the leader reclaims (ms). */
  everyMs: () => number;
  onError?: (error: unknown) => void;
}

/**
 * The leader's janitor: reclaims leases past their expiry and the queues and grants of
 * replicas whose liveness lapsed, on a timer while this replica leads. poll() runs the same
 * janitor, but only while some request waits; without this loop a lease whose release was
 * lost (a replica killed mid-request, a release Redis acknowledged but a failover lost)
 * would hold budget until traffic queued again. reclaim() is idempotent and bounded per
 * call (settings.janitorBatch), so a second leader for a moment does no harm.
 */
export class JanitorLoop {
  #timer: NodeJS.Timeout | undefined;
  /** Bumped by every lead() and stepDown(): a reclaim that ends after them schedules nothing. */
  #term = 0;

  constructor(private readonly options: JanitorLoopOptions) {}

  lead(): void {
    this.stepDown();
    const term = this.#term;
    const run = () => {
      void this.options.scheduler.reclaim().then(
        () => this.#schedule(term, run),
        (error: unknown) => {
          this.options.onError?.(error);
          this.#schedule(term, run);
        },
      );
    };
    this.#schedule(term, run);
  }

  stepDown(): void {
    this.#term += 1;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #schedule(term: number, run: () => void): void {
    if (term !== this.#term) return;
    this.#timer = setTimeout(run, this.options.everyMs());
    this.#timer.unref();
  }
}
