import type { OpenAIHttpError } from '@fairgate/openai';
import {
  type EnqueueRequest,
  GrantChannel,
  type Notice,
  type Scheduler,
} from '@fairgate/scheduler';
import { noticeDrop, outcomeError } from '../errors.js';
import { SchedulerUnavailable } from '../redis-outage.js';
import type { HeldLeases } from './held-leases.js';

/**
 * Transition queued → granted: this replica's side of the grant protocol. A request that
 * was queued at enqueue waits here for its notice, which the scheduler's GrantChannel brings
 * (the poll tick with its quiet hint, at most MAX_QUIET_MS = 250 ms, and the blocking wait
 * that also hands over grants a release's reply carried). A grant resolves the waiter with
 * its pod; an expiry or a shed rejects it with a 429; an evict aborts the held request
 * (HeldLeases) and rejects a waiter. Notices for ids nobody waits for (the client left
 * between enqueue and the grant) are ended at once, so a slot is never leaked.
 */
export interface GrantBrokerOptions {
  scheduler: Scheduler;
  /** The replica's held requests: a grant for one of them is its own (readopted) slot. */
  leases: HeldLeases;
  replica: string;
  tickMs: number;
  /** Reported on errors of the background loops (they keep running). */
  onError?: (operation: string, error: unknown) => void;
}

interface Waiter {
  resolve: (pod: string) => void;
  reject: (error: Error) => void;
  /** Set once the enqueue answered 'queued': what to enqueue again if Redis lost it. */
  queued?: EnqueueRequest;
  /** True once the enqueue answered 'queued' (waitForGrant was called). */
  enqueued?: boolean;
}

export class GrantBroker {
  readonly #waiters = new Map<string, Waiter>();
  readonly #channel: GrantChannel;
  /** Set by handBack (the replica drains): the answer of every queued request from then on. */
  #handBack: (() => OpenAIHttpError) | undefined;
  #handedBack = 0;

  constructor(private readonly options: GrantBrokerOptions) {
    this.#channel = new GrantChannel(options.scheduler, {
      replica: options.replica,
      tickMs: options.tickMs,
      waiting: () => this.#waiters.size > 0,
      deliver: (notices) => this.#deliver(notices),
      ...(options.onError ? { onError: options.onError } : {}),
    });
  }

  get waiting(): number {
    return this.#waiters.size;
  }

  /** Queued requests handed back since handBack() (the replica drains). */
  get handedBack(): number {
    return this.#handedBack;
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
      else this.#channel.open();
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
   * Registers this replica's granted and queued requests again in a Redis that lost them
   * (restarted empty, flushed, failed over), through `scheduler` (the inner one, not the
   * self-healing wrapper that calls this): the granted ones first (HeldLeases.readopt), then
   * each queued one takes its place in the queue again.
   */
  async readopt(scheduler: Scheduler): Promise<void> {
    const again = this.options.leases.readopt(scheduler);
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
                outcomeError(result.code, {
                  message: 'Dropped by flow control when the scheduler state was rebuilt',
                  refillMs: result.retryAfterMs,
                }),
              );
          },
          () => {},
        ),
      );
    }
    await Promise.all(again);
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

  #deliver(notices: readonly Notice[]): void {
    for (const notice of notices) {
      const waiter = this.#waiters.get(notice.id);
      if (notice.kind === 'grant') {
        if (waiter) {
          this.#waiters.delete(notice.id);
          waiter.resolve(notice.pod);
        } else if (!this.options.leases.holds(notice.id)) {
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
        this.options.leases.evict(notice.id);
        if (waiter) {
          this.#waiters.delete(notice.id);
          waiter.reject(noticeDrop('evict'));
        }
      }
    }
  }

  close(): void {
    this.#channel.close();
  }
}

/** Marks a promise's rejection handled (one function for every request). */
function ignore(): void {}
