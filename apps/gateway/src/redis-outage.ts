import { SchedulerError } from '@fairgate/scheduler';
import { ReplyError } from 'ioredis';

export type OutageMode = 'reject' | 'local_share';

/** A scheduler call that failed because Redis could not be reached in time. */
export class SchedulerUnavailable extends Error {
  /**
   * Whether the call was sent to Redis (then it may have run, e.g. an enqueue whose reply
   * timed out), or refused before sending because the replica is in an outage.
   */
  readonly sent: boolean;

  constructor(operation: string, cause?: unknown, sent = true) {
    super(
      `Redis is unreachable (${operation}${cause instanceof Error ? `: ${cause.message}` : ''})`,
    );
    this.name = 'SchedulerUnavailable';
    this.sent = sent;
  }
}

/**
 * Replies that mean "this server cannot serve the pool right now", not "the call was wrong":
 * a primary still loading its data, a demoted primary (READONLY) during a Sentinel failover,
 * a cluster without a majority or a slot owner.
 */
const UNAVAILABLE_REPLY = /^(LOADING|READONLY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|BUSY)\b/;

/**
 * Whether `error`, as a RedisScheduler call threw it, says Redis was unreachable (timeout,
 * refused or closed connection, a failover in progress) rather than a bad call or a script's
 * refusal. Only for raw scheduler errors: the resilient scheduler turns every such error into
 * SchedulerUnavailable, which is what the rest of the gateway tests for.
 */
export function isUnavailable(error: unknown): boolean {
  if (error instanceof SchedulerUnavailable) return true;
  if (error instanceof SchedulerError) return false;
  if (error instanceof ReplyError) return UNAVAILABLE_REPLY.test((error as Error).message);
  return error instanceof Error && !(error instanceof TypeError || error instanceof RangeError);
}

export interface OutageMonitorOptions {
  mode: OutageMode;
  /** A cheap scheduler call that proves Redis is back (its success ends the outage). */
  probe: () => Promise<unknown>;
  probeEveryMs?: number;
  onEnter?: (reason: string) => void;
  onLeave?: (outageMs: number) => void;
}

/**
 * This replica's view of Redis: up, or in an outage since a call failed to reach it. While
 * down it probes every probeEveryMs and leaves the outage on the first success of the probe
 * or of any other call. Entering and leaving each happen once per outage, and the hooks
 * (log line, metric, failing the waiters, the local share) hang off them.
 */
export class OutageMonitor {
  #downSince: number | undefined;
  #probeTimer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(private readonly options: OutageMonitorOptions) {}

  get mode(): OutageMode {
    return this.options.mode;
  }

  get down(): boolean {
    return this.#downSince !== undefined;
  }

  /** A call reached Redis. */
  reachable(): void {
    if (this.#downSince === undefined) return;
    const outageMs = performance.now() - this.#downSince;
    this.#downSince = undefined;
    if (this.#probeTimer) clearTimeout(this.#probeTimer);
    this.#probeTimer = undefined;
    this.options.onLeave?.(outageMs);
  }

  /** A call failed to reach Redis. */
  unreachable(reason: string): void {
    if (this.#downSince !== undefined || this.#closed) return;
    this.#downSince = performance.now();
    this.options.onEnter?.(reason);
    this.#scheduleProbe();
  }

  close(): void {
    this.#closed = true;
    if (this.#probeTimer) clearTimeout(this.#probeTimer);
  }

  #scheduleProbe(): void {
    if (this.#closed || this.#downSince === undefined) return;
    this.#probeTimer = setTimeout(() => {
      this.options.probe().then(
        () => this.reachable(),
        () => this.#scheduleProbe(),
      );
    }, this.options.probeEveryMs ?? 100);
    this.#probeTimer.unref();
  }
}
