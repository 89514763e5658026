import { setImmediate as checkPhase } from 'node:timers/promises';
import type { ReplicaId } from '@fairgate/core';
import { type GrantSource, type Notice, type PolledNotices, QUIET_MS } from './contract.js';

export interface GrantChannelOptions {
  replica: ReplicaId;
  /** The poll tick while a request waits (scheduler.tick_ms); a quiet hint stretches it. */
  tickMs: number;
  /** Whether a request of the replica still waits for a notice: the loops stop when none does. */
  waiting: () => boolean;
  /** Takes every notice of the replica, once, whatever carried it. */
  deliver: (notices: readonly Notice[]) => void;
  /** Reported on a failed poll or wait (the loops keep running). */
  onError?: (operation: 'poll' | 'waitForNotices', error: unknown) => void;
}

/**
 * The one way a replica's notices (grant, expired, shed, evict) reach it after its enqueue
 * answered 'queued'. A request granted in the enqueue's own reply never waits, so never
 * comes here; every later notice comes by one of two loops over a GrantSource (RedisScheduler
 * and LocalScheduler are both one), which run while a request waits:
 * - a tick every tickMs calls source.poll(replica) (a dispatch pass and the replica's
 *   notices). When the answer says the pool is quiet (QUIET_MS: waiting on a full budget
 *   with nothing time-driven due, at most MAX_QUIET_MS, 250 ms) the next tick comes that much
 *   later. That delays no grant of a release (the release's own dispatch pass grants, and its
 *   notice comes through the blocking wait) nor an expiry (the quiet time ends at the
 *   earliest queue TTL, lease or liveness expiry); a budget raise or a config change reaches
 *   the next pass within the quiet time;
 * - a blocking wait (source.waitForNotices) wakes a waiter at once: on RedisScheduler a
 *   BLMPOP of the replica's notice list on a dedicated connection, which also hands over the
 *   grants a release of this process popped in its own reply (redis/blocking-notices.ts).
 * Every notice is delivered once, by whichever loop took it first.
 */
export class GrantChannel {
  #tickTimer: NodeJS.Timeout | undefined;
  #blockingWait = false;
  #polling = false;
  #closed = false;

  constructor(
    private readonly source: GrantSource,
    private readonly options: GrantChannelOptions,
  ) {}

  /** A request waits: starts the loops that are not running. */
  open(): void {
    if (this.#closed) return;
    if (!this.#tickTimer) this.#scheduleTick(this.options.tickMs);
    if (!this.#blockingWait) void this.#blockingLoop();
  }

  /** Stops both loops (an outstanding wait ends with its timeout; its notices are dropped). */
  close(): void {
    this.#closed = true;
    if (this.#tickTimer) clearTimeout(this.#tickTimer);
  }

  #scheduleTick(delayMs: number): void {
    this.#tickTimer = setTimeout(() => this.#tick(), delayMs);
  }

  async #tick(): Promise<void> {
    this.#tickTimer = undefined;
    const { options } = this;
    if (!options.waiting() || this.#closed) return;
    let quietMs = 0;
    if (!this.#polling) {
      this.#polling = true;
      try {
        const notices: PolledNotices = await this.source.poll(options.replica);
        quietMs = notices[QUIET_MS] ?? 0;
        options.deliver(notices);
      } catch (error) {
        options.onError?.('poll', error);
      } finally {
        this.#polling = false;
      }
    }
    if (options.waiting() && !this.#closed && !this.#tickTimer) {
      this.#scheduleTick(Math.max(options.tickMs, quietMs));
    }
  }

  async #blockingLoop(): Promise<void> {
    this.#blockingWait = true;
    const { options } = this;
    try {
      while (options.waiting() && !this.#closed) {
        try {
          const notices = await this.source.waitForNotices(options.replica, 1_000);
          options.deliver(notices);
          // The granted requests go to their pods first (their continuations run before the
          // check phase; the pod write is synchronous): the next wait's write to Redis, when
          // its BLMPOP ended, comes after them, not before. Notices meanwhile stay in the
          // list (or with the scheduler) for that wait.
          if (notices.length > 0) await checkPhase();
        } catch (error) {
          if (this.#closed) break;
          options.onError?.('waitForNotices', error);
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      }
    } finally {
      this.#blockingWait = false;
    }
  }
}
