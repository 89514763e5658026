import type { EnqueueRequest, Scheduler } from '@fairgate/scheduler';
import { SlotAbort } from '../upstream/slot-abort.js';

/**
 * Transition granted → held, and what keeps a held slot alive until it is released or
 * recycled: the granted requests of this replica, by id. A heartbeat every heartbeat_ms
 * keeps the replica alive and extends their leases; an id the scheduler no longer knows is
 * aborted (the slot was reclaimed), and so is one the scheduler evicts (GrantBroker hands
 * the evict notice here). A Redis that lost them gets them back (readopt, adopt).
 */
export interface HeldLeasesOptions {
  scheduler: Scheduler;
  replica: string;
  heartbeatMs: number;
  /** Reported on a failed heartbeat (the loop keeps running). */
  onError?: (operation: string, error: unknown) => void;
}

/** Abort reason of an in-flight request whose slot the scheduler took back. */
export class EvictedError extends Error {
  constructor(message = 'evicted by flow control') {
    super(message);
    this.name = 'EvictedError';
  }
}

/** A granted request of this replica, until it is released. */
export interface Held {
  abort: SlotAbort;
  /** How it was admitted, to register it again in a Redis that lost it (readopt). */
  request: EnqueueRequest | undefined;
  pod: string;
}

export class HeldLeases {
  /** Granted, not yet released requests of this replica -> abort on eviction. */
  readonly #inflight = new Map<string, Held>();
  #heartbeatTimer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(private readonly options: HeldLeasesOptions) {}

  get size(): number {
    return this.#inflight.size;
  }

  /** Starts the heartbeat. */
  start(): void {
    const beat = async () => {
      try {
        const { lost } = await this.options.scheduler.heartbeat(this.options.replica, [
          ...this.#inflight.keys(),
        ]);
        for (const id of lost) this.#inflight.get(id)?.abort.abort(new EvictedError('lease lost'));
      } catch (error) {
        this.options.onError?.('heartbeat', error);
      }
      if (!this.#closed) this.#heartbeatTimer = setTimeout(beat, this.options.heartbeatMs).unref();
    };
    void beat();
  }

  /** Registers a granted request so heartbeats extend its lease; returns its abort signal. */
  track(id: string, pod: string, request?: EnqueueRequest): SlotAbort {
    const controller = new SlotAbort();
    this.#inflight.set(id, { abort: controller, request, pod });
    return controller;
  }

  untrack(id: string): void {
    if (this.#inflight.delete(id)) this.onUntrack?.(id);
  }

  /** Called when a tracked request is untracked (the local share mirrors releases with it). */
  onUntrack: ((id: string) => void) | undefined;

  /** Whether `id` is a granted request tracked here. */
  holds(id: string): boolean {
    return this.#inflight.has(id);
  }

  /** The granted requests tracked here (id, pod, how they were admitted). */
  held(): IterableIterator<[string, Held]> {
    return this.#inflight.entries();
  }

  /** The scheduler took `id`'s slot back: its upstream call is aborted. */
  evict(id: string): void {
    this.#inflight.get(id)?.abort.abort(new EvictedError());
  }

  /**
   * Registers every granted request again in a Redis that lost them (restarted empty,
   * flushed, failed over), through `scheduler` (the inner one, not the self-healing wrapper
   * that calls this). A granted request keeps running on its pod and takes its slot back (or
   * waits for one: a grant that then comes is taken as its own, GrantBroker). Without this
   * the lost leases would be free budget while the pods still serve them, and the heartbeat
   * would abort them all. Returns the enqueues, sent now.
   */
  readopt(scheduler: Scheduler): Array<Promise<void>> {
    const again: Array<Promise<void>> = [];
    for (const [id, held] of this.#inflight) again.push(this.#adopt(scheduler, id, held));
    return again;
  }

  /**
   * Registers the granted request `id`, which runs on its pod, in the scheduler as readopt
   * does (slot recycling: a handover Redis did not make). No-op once it ended.
   */
  adopt(id: string): Promise<void> {
    const held = this.#inflight.get(id);
    return held ? this.#adopt(this.options.scheduler, id, held) : Promise.resolve();
  }

  /**
   * Enqueues a running request again with its pod as the hint: it takes its slot back, or
   * waits for one (a grant that then comes is taken as its own).
   */
  #adopt(scheduler: Scheduler, id: string, held: Held): Promise<void> {
    if (!held.request) return Promise.resolve();
    return scheduler.enqueue({ ...held.request, podHint: held.pod }).then(
      (result) => {
        // Refused (e.g. its quota shrank): it runs to its end unregistered.
        if (result.status === 'rejected') this.#inflight.delete(id);
      },
      () => {},
    );
  }

  close(): void {
    this.#closed = true;
    if (this.#heartbeatTimer) clearTimeout(this.#heartbeatTimer);
  }
}
