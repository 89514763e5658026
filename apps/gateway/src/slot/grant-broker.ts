import { setImmediate as checkPhase } from 'node:timers/promises';
import { rejectionResponse } from '@fairgate/core';
import type { OpenAIHttpError } from '@fairgate/openai';
import {
  type EnqueueRequest,
  type Notice,
  type PolledNotices,
  QUIET_MS,
  type Scheduler,
} from '@fairgate/scheduler';
import { flowControlDrop, noticeDrop } from '../errors.js';
import { SchedulerUnavailable } from '../redis-outage.js';
import { SlotAbort } from '../upstream/slot-abort.js';

/**
 * This replica's side of the grant protocol. A request that was queued at
 * enqueue waits here for its notice:
 * - a 1 ms tick calls scheduler.poll(replica) (a dispatch pass + this
 *   replica's notices) while anything waits, and stops when nothing does; when
 *   the poll says the pool is quiet (QUIET_MS: waiting on a full budget with
 *   nothing time-driven due, at most 20 ms) the next tick comes that much later.
 *   That delays no grant of a release (the release's own dispatch pass grants,
 *   and its notice comes through the blocking wait) nor an expiry (the quiet
 *   time ends at the earliest queue TTL, lease or liveness expiry); a budget
 *   raise or a config change reaches the next pass within the quiet time;
 * - a blocking wait on a dedicated connection wakes a waiter at once when a
 *   release on another replica granted it (a release of this replica brings its
 *   pass's grants back in its reply, and the same wait hands them over:
 *   RedisScheduler's BlockingNotices);
 * - a heartbeat every heartbeat_ms keeps the replica alive and extends the
 *   leases of its in-flight requests; ids the scheduler no longer knows are
 *   aborted (the slot was reclaimed).
 * Notices for ids nobody waits for (the client left between enqueue and the
 * grant) are ended at once, so a slot is never leaked.
 */
export interface GrantBrokerOptions {
  scheduler: Scheduler;
  replica: string;
  tickMs: number;
  heartbeatMs: number;
  /** Reported on errors of the background loops (they keep running). */
  onError?: (operation: string, error: unknown) => void;
}

/** Abort reason of an in-flight request whose slot the scheduler took back. */
export class EvictedError extends Error {
  constructor(message = 'evicted by flow control') {
    super(message);
    this.name = 'EvictedError';
  }
}

interface Waiter {
  resolve: (pod: string) => void;
  reject: (error: Error) => void;
  /** Set once the enqueue answered 'queued': what to enqueue again if Redis lost it. */
  queued?: EnqueueRequest;
  /** True once the enqueue answered 'queued' (waitForGrant was called). */
  enqueued?: boolean;
}

/** A granted request of this replica, until it is released. */
export interface Held {
  abort: SlotAbort;
  /** How it was admitted, to register it again in a Redis that lost it (readopt). */
  request: EnqueueRequest | undefined;
  pod: string;
}

export class GrantBroker {
  readonly #waiters = new Map<string, Waiter>();
  /** Granted, not yet released requests of this replica -> abort on eviction. */
  readonly #inflight = new Map<string, Held>();
  #tickTimer: NodeJS.Timeout | undefined;
  #heartbeatTimer: NodeJS.Timeout | undefined;
  #blockingWait = false;
  #polling = false;
  #closed = false;
  /** Set by handBack (the replica drains): the answer of every queued request from then on. */
  #handBack: (() => OpenAIHttpError) | undefined;
  #handedBack = 0;

  constructor(private readonly options: GrantBrokerOptions) {}

  get waiting(): number {
    return this.#waiters.size;
  }

  get inflight(): number {
    return this.#inflight.size;
  }

  /** Queued requests handed back since handBack() (the replica drains). */
  get handedBack(): number {
    return this.#handedBack;
  }

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

  /** Whether `id` is a granted request this broker tracks. */
  holds(id: string): boolean {
    return this.#inflight.has(id);
  }

  /** The granted requests this broker tracks (id, pod, how they were admitted). */
  held(): IterableIterator<[string, Held]> {
    return this.#inflight.entries();
  }

  /**
   * Registers `id` before its enqueue is sent and returns its grant (the pod), which
   * rejects with a 429 on queue TTL expiry or shedding. The registration must come first:
   * a notice for the request can reach #deliver before the enqueue's own answer does (a
   * poll sent just after the enqueue runs its dispatch pass after it in Redis, and both
   * replies can arrive in one read, the poll's continuation running first); a waiter made
   * later would see its grant released as orphaned or its expiry dropped. Call forget(id) when the enqueue did not queue it, and
   * waitForGrant(id, grant) when it did.
   */
  expect(id: string): Promise<string> {
    const grant = new Promise<string>((resolve, reject) => {
      this.#waiters.set(id, { resolve, reject });
    });
    // Observed by waitForGrant; one forgotten unobserved is no unhandled rejection.
    grant.catch(ignore);
    return grant;
  }

  /** Waits for the grant of a queued request registered with expect() and enqueued as `request`. */
  waitForGrant(id: string, grant: Promise<string>, request?: EnqueueRequest): Promise<string> {
    const waiter = this.#waiters.get(id);
    if (waiter) {
      waiter.queued = request;
      waiter.enqueued = true;
      if (this.#handBack) this.#handBackOne(id, waiter, this.#handBack);
      else this.#ensureLoops();
    }
    return grant;
  }

  /**
   * The replica drains: every request waiting for a grant is cancelled in the scheduler and
   * fails with `answer()` (503 `draining`, so its client retries on another replica), and
   * so does every request queued from now on. A grant that comes meanwhile is released by
   * the cancel, or as orphaned when its notice arrives after it. Returns how many it handed
   * back now.
   */
  handBack(answer: () => OpenAIHttpError): number {
    this.#handBack = answer;
    let handed = 0;
    for (const [id, waiter] of this.#waiters) {
      if (!waiter.enqueued) continue; // its enqueue has not answered: waitForGrant hands it back
      this.#handBackOne(id, waiter, answer);
      handed += 1;
    }
    return handed;
  }

  #handBackOne(id: string, waiter: Waiter, answer: () => OpenAIHttpError): void {
    this.#waiters.delete(id);
    this.#handedBack += 1;
    void this.options.scheduler
      .cancel(id)
      .catch((error) => this.options.onError?.('cancel', error));
    waiter.reject(answer());
  }

  /**
   * Redis is unreachable: no grant will come for the queued requests (their queue is in the
   * Redis this replica cannot reach), so each fails now with SchedulerUnavailable, which the
   * request path turns into the outage mode's answer (503, or the local share), instead of
   * waiting for its queue TTL. If Redis comes back with their entries, a grant nobody waits
   * for is released at once and an expiry is ignored (#deliver), so nothing leaks.
   */
  failWaiters(): void {
    for (const [id, waiter] of this.#waiters) {
      if (!waiter.queued) continue;
      this.#waiters.delete(id);
      waiter.reject(new SchedulerUnavailable('waiting for a grant'));
    }
  }

  /**
   * Registers this replica's queued and granted requests again in a Redis that lost them
   * (restarted empty, flushed, failed over), through `scheduler` (the inner one, not the
   * self-healing wrapper that calls this). A granted request keeps running on its pod and
   * takes its slot back (or waits for one: a grant that then comes is taken as its own); a
   * queued one takes its place in the queue again. Without this the lost leases would be
   * free budget while the pods still serve them, and the heartbeat would abort them all.
   */
  async readopt(scheduler: Scheduler): Promise<void> {
    const again: Array<Promise<void>> = [];
    for (const [id, held] of this.#inflight) again.push(this.#adopt(scheduler, id, held));
    for (const [id, waiter] of this.#waiters) {
      const request = waiter.queued;
      if (!request) continue;
      again.push(
        scheduler.enqueue(request).then(
          (result) => {
            if (result.status === 'queued' || this.#waiters.get(id) !== waiter) return;
            this.#waiters.delete(id);
            if (result.status === 'granted') waiter.resolve(result.pod);
            else
              waiter.reject(
                flowControlDrop(
                  rejectionResponse(result.code).dropReason,
                  'Dropped by flow control when the scheduler state was rebuilt',
                ),
              );
          },
          () => {},
        ),
      );
    }
    await Promise.all(again);
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
   * waits for one (a grant that then comes is taken as its own, #deliver).
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

  /**
   * Stops waiting for `id` (the caller then cancels it in the scheduler). With `reason`, a
   * caller still awaiting the grant is woken with it, so its request ends instead of
   * waiting for a grant that will never be delivered.
   */
  forget(id: string, reason?: Error): void {
    const waiter = this.#waiters.get(id);
    this.#waiters.delete(id);
    if (waiter && reason) waiter.reject(reason);
  }

  #ensureLoops(): void {
    if (!this.#tickTimer && !this.#closed) this.#scheduleTick(this.options.tickMs);
    if (!this.#blockingWait && !this.#closed) void this.#blockingLoop();
  }

  #scheduleTick(delayMs: number): void {
    this.#tickTimer = setTimeout(() => this.#tick(), delayMs);
  }

  async #tick(): Promise<void> {
    this.#tickTimer = undefined;
    if (this.#waiters.size === 0 || this.#closed) return;
    let quietMs = 0;
    if (!this.#polling) {
      this.#polling = true;
      try {
        const notices: PolledNotices = await this.options.scheduler.poll(this.options.replica);
        quietMs = notices[QUIET_MS] ?? 0;
        this.#deliver(notices);
      } catch (error) {
        this.options.onError?.('poll', error);
      } finally {
        this.#polling = false;
      }
    }
    if (this.#waiters.size > 0 && !this.#closed && !this.#tickTimer) {
      this.#scheduleTick(Math.max(this.options.tickMs, quietMs));
    }
  }

  async #blockingLoop(): Promise<void> {
    this.#blockingWait = true;
    try {
      while (this.#waiters.size > 0 && !this.#closed) {
        try {
          const notices = await this.options.scheduler.waitForNotices(this.options.replica, 1_000);
          this.#deliver(notices);
          // The granted requests go to their pods first (their continuations run before the
          // check phase; the pod write is synchronous): the next wait's write to Redis, when
          // its BLMPOP ended, comes after them, not before. Notices meanwhile stay in the
          // list (or with the scheduler) for that wait.
          if (notices.length > 0) await checkPhase();
        } catch (error) {
          if (this.#closed) break;
          this.options.onError?.('waitForNotices', error);
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      }
    } finally {
      this.#blockingWait = false;
    }
  }

  #deliver(notices: readonly Notice[]): void {
    for (const notice of notices) {
      const waiter = this.#waiters.get(notice.id);
      if (notice.kind === 'grant') {
        if (waiter) {
          this.#waiters.delete(notice.id);
          waiter.resolve(notice.pod);
        } else if (!this.#inflight.has(notice.id)) {
          // Nobody waits any more (client left): give the slot back at once. (An in-flight
          // request readopted into a queue gets its slot back this way: nothing to do.)
          void this.options.scheduler
            .release(notice.id, { outcome: 'cancelled' })
            .catch((error) => this.options.onError?.('release', error));
        }
      } else if (notice.kind === 'expired') {
        if (waiter) {
          this.#waiters.delete(notice.id);
          waiter.reject(noticeDrop('expired'));
        }
      } else if (notice.kind === 'shed') {
        if (waiter) {
          this.#waiters.delete(notice.id);
          waiter.reject(noticeDrop('shed'));
        }
      } else {
        this.#inflight.get(notice.id)?.abort.abort(new EvictedError());
        if (waiter) {
          this.#waiters.delete(notice.id);
          waiter.reject(noticeDrop('evict'));
        }
      }
    }
  }

  close(): void {
    this.#closed = true;
    if (this.#tickTimer) clearTimeout(this.#tickTimer);
    if (this.#heartbeatTimer) clearTimeout(this.#heartbeatTimer);
  }
}

/** Marks a promise's rejection handled (one function for every request). */
function ignore(): void {}
