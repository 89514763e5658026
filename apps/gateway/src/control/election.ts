import type { Fence, Scheduler } from '@fairgate/scheduler';

export type LeaseStore = Pick<
  Scheduler,
  'acquireLeadership' | 'renewLeadership' | 'releaseLeadership'
>;

export interface ElectionOptions {
  store: LeaseStore;
  replica: string;
  leaseTtlMs: number;
  renewMs: number;
  onElected?: (fence: Fence) => void;
  onDeposed?: (fence: Fence, reason: string) => void;
  /** A renewal the store refused: this replica's epoch is over. */
  onStaleRenewal?: () => void;
  onError?: (operation: string, error: unknown) => void;
}

/**
 * Every replica runs this loop; one holds the lease. A follower tries to acquire every
 * renewMs, or as soon as the holder's lease lapses if that is sooner; the leader renews
 * every renewMs. Each acquire increments the epoch, and every controller write is fenced by
 * it in its script, so correctness never rests on this process's view of time.
 *
 * The local view is still kept conservative: the lease is taken as valid only until
 * (send time of the last successful acquire/renew) + TTL on this process's monotonic clock,
 * which is never later than the store's expiry. A paused process (GC, SIGSTOP) therefore
 * wakes up knowing it may have lost the lease and starts no new work under it; its first
 * renewal is then refused (counted) and it becomes a follower.
 */
export class LeaderElection {
  #fence: Fence | null = null;
  /**
   * The highest epoch this replica has seen (its own or another leader's). Passed to every
   * acquire, so a store that lost its data starts the next epoch above it: the replicas
   * carry the epoch across the loss, and a write fenced before it is never accepted again.
   */
  #epochFloor = 0;
  #validUntil = 0;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #stopped = true;

  constructor(private readonly options: ElectionOptions) {}

  /** The fence while this replica holds a lease it knows to be live, else null. */
  get fence(): Fence | null {
    return this.#fence && performance.now() < this.#validUntil ? this.#fence : null;
  }

  /** Whether `fence` is still this replica's live leadership (checked between awaits). */
  holds(fence: Fence): boolean {
    return this.fence?.epoch === fence.epoch;
  }

  start(): void {
    if (!this.#stopped) return;
    this.#stopped = false;
    this.#schedule(0);
  }

  /** Stops the loop and gives the lease up, so another replica leads at once. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#running;
    const fence = this.#fence;
    if (!fence) return;
    this.#depose(fence, 'shutting down');
    try {
      await this.options.store.releaseLeadership(fence);
    } catch (error) {
      this.options.onError?.('releaseLeadership', error);
    }
  }

  #schedule(delayMs: number): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#running = this.#attempt().finally(() => {
        this.#running = undefined;
      });
    }, delayMs);
    this.#timer.unref();
  }

  #depose(fence: Fence, reason: string): void {
    if (this.#fence?.epoch !== fence.epoch) return;
    this.#fence = null;
    this.#validUntil = 0;
    this.options.onDeposed?.(fence, reason);
  }

  async #attempt(): Promise<void> {
    const { store, replica, leaseTtlMs, renewMs } = this.options;
    const sentAt = performance.now();
    const held = this.#fence;
    if (held) {
      try {
        if (await store.renewLeadership(held, leaseTtlMs)) {
          this.#validUntil = sentAt + leaseTtlMs;
          this.#schedule(renewMs);
          return;
        }
        this.options.onStaleRenewal?.();
        this.#depose(held, 'renewal refused: the lease lapsed and another epoch began');
      } catch (error) {
        this.options.onError?.('renewLeadership', error);
        if (performance.now() >= this.#validUntil) {
          this.#depose(held, 'the lease lapsed while the store was unreachable');
        }
        this.#schedule(renewMs);
        return;
      }
    }
    try {
      const result = await store.acquireLeadership(replica, leaseTtlMs, this.#epochFloor);
      this.#epochFloor = Math.max(this.#epochFloor, result.epoch);
      if (result.leader) {
        this.#fence = { replica, epoch: result.epoch };
        this.#validUntil = sentAt + leaseTtlMs;
        this.options.onElected?.(this.#fence);
        this.#schedule(renewMs);
      } else {
        // Retry the moment the holder's lease lapses, if that is before the next period.
        this.#schedule(Math.min(renewMs, result.expiresInMs + 2));
      }
    } catch (error) {
      this.options.onError?.('acquireLeadership', error);
      this.#schedule(renewMs);
    }
  }
}
