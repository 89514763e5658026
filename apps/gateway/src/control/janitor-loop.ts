import type { Scheduler } from '@fairgate/scheduler';
import { LeaderTimer } from './leader-timer.js';

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
  readonly #timer: LeaderTimer;

  constructor(private readonly options: JanitorLoopOptions) {
    this.#timer = new LeaderTimer({ periodMs: options.everyMs, from: 'end' });
  }

  /** The first reclaim runs one period after leadership begins. */
  lead(): void {
    this.#timer.start(
      () => this.options.scheduler.reclaim(),
      this.options.everyMs(),
      this.options.onError,
    );
  }

  stepDown(): void {
    this.#timer.stop();
  }
}
