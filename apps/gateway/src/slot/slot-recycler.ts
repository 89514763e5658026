import { RejectCode } from '@fairgate/core';
import {
  canHandOver,
  type EnqueueRequest,
  type EnqueueResult,
  type HandoverResult,
  type LimitsStanding,
  type ReleaseOptions,
  type Scheduler,
} from '@fairgate/scheduler';
import type { HeldLeases } from './held-leases.js';

/**
 * Transitions held → recycled → held (a finished request's slot parked, then taken by the
 * next request) and recycled → released (no request took it in time, or the pool turned
 * contended).
 *
 * Slot recycling (docs/scheduler.md, *Slot recycling*): a slot Redis granted passes from a
 * finished request to this replica's next request of the same tenant and band (and KV
 * blocks, when the tenant has a KV-block quota), instead of being released and granted
 * again. The next request goes to the slot's pod at once, with no Redis call before its
 * forward; the handover (one engine call, batched with the turn's other calls) ends the
 * finished request and registers the next one in its slot, so the budget, the quotas and
 * the pods' caps stay exact.
 *
 * A finished request's slot is parked for `scheduler.recycle_ms` (2 ms by default) and
 * released as usual when no request takes it by then, or at once when the pool turns
 * contended. Nothing is parked while the pool is contended: from an enqueue that queued
 * or was refused (but for the tenant's own bucket or quota), or was granted by a dispatch
 * pass (requests waited), or a handover whose reply said the slot should go back (a request
 * waits, the budget is below what is in flight, a quota, a pod's cap or health, the
 * admission policy or the band's gate), until an enqueue is granted with nothing waiting.
 * Then the waiting get every slot through the ordinary release, in their fair order. A
 * request another replica queued meanwhile is overtaken by the recycled requests of the
 * next ~1 ms and a round trip (until a handover's reply says contended), never by more
 * slots than the budget has.
 *
 * Only requests that Redis would treat alike take part: band >= 0 (a sheddable request's
 * lease is ordered for eviction by its grant), no token-bucket charge (taken before the
 * forward), no prompt prefix (its pod is chosen for its prompt).
 *
 * A tenant with a budget or a rate (its requests carry `budgetTokens`): the handover counts
 * the next request without a check (it already runs on the pod), so its slots are recycled
 * only while the tenant's latest standing on this replica (from an enqueue's or a handover's
 * answer) shows at least RECYCLE_MARGIN requests, and RECYCLE_MARGIN of this request's
 * estimates, left. Closer to its limits, every request of the tenant goes through the
 * enqueue's exact check.
 */
export interface SlotRecyclerOptions {
  scheduler: Scheduler;
  /** The replica's held requests: a parked slot stays held until it is taken or released. */
  leases: HeldLeases;
  /** How long a finished request's slot waits for the next request (0: off). */
  holdMs: () => number;
  /** False while the slots must go back at once (the connection is down, an outage). */
  available: () => boolean;
  /** Whether a pod is healthy in this replica's view. */
  healthy: (pod: string) => boolean;
  onRecycled?: () => void;
  /** Reported on a failed handover or release (the request path goes on). */
  onError?: (operation: string, error: unknown) => void;
}

/** A finished request's slot, held for the next request of its kind. */
interface Parked {
  readonly id: string;
  readonly pod: string;
  /** The finished request's outcome and usage: sent with the handover, or the release. */
  readonly release: ReleaseOptions;
  readonly timer: NodeJS.Timeout;
}

/** Requests' worth a limited tenant must have left for its slots to be recycled. */
export const RECYCLE_MARGIN = 64;

export class SlotRecycler {
  /** Parked slots by kind (kindOf), the latest last. */
  readonly #parked = new Map<string, Parked[]>();
  /** The latest standing of each limited tenant, from this replica's answers. */
  readonly #standing = new Map<string, LimitsStanding>();
  #contended = true;
  #stopped = false;

  constructor(private readonly options: SlotRecyclerOptions) {}

  /** Whether the last answer of the pool said that requests wait (or it refused one). */
  get contended(): boolean {
    return this.#contended;
  }

  /** Parked slots right now. */
  get parked(): number {
    let count = 0;
    for (const slots of this.#parked.values()) count += slots.length;
    return count;
  }

  /** The latest standing of a limited tenant on this replica (undefined: none yet). */
  standingOf(tenant: string): LimitsStanding | undefined {
    return this.#standing.get(tenant);
  }

  /**
   * Learns from an enqueue's answer whether the pool is contended, and the standing of a
   * limited tenant.
   */
  observe(result: EnqueueResult, tenant: string): void {
    if (result.limits) this.#standing.set(tenant, result.limits);
    if (result.status === 'queued') this.#contend();
    else if (result.status === 'rejected') {
      // A refusal that is the tenant's own (its bucket, a quota it can never fit) says
      // nothing of the pool; every other one (queues full, policy, no pod) does.
      if (!TENANT_REFUSALS.has(result.code)) this.#contend();
    } else if (result.contended) this.#contend();
    else if (!result.retried) this.#contended = false;
  }

  /** The pool is contended: the parked slots go back now, for whoever waits. */
  #contend(): void {
    this.#contended = true;
    if (this.#parked.size > 0) this.releaseAll();
  }

  /**
   * Parks a finished request's slot for the next request of its kind; false when it must be
   * released as usual (the caller then untracks and releases it). A parked slot stays
   * tracked in the leases: heartbeats keep its lease, and a Redis that restarted empty
   * gets it back (readopt) like any granted request.
   */
  park(request: EnqueueRequest, pod: string, release: ReleaseOptions, kvQuota: boolean): boolean {
    const holdMs = this.options.holdMs();
    if (
      holdMs <= 0 ||
      this.#contended ||
      this.#stopped ||
      !canHandOver(request) ||
      !this.#roomFor(request) ||
      !this.options.available() ||
      !this.options.healthy(pod)
    ) {
      return false;
    }
    const key = kindOf(request, kvQuota);
    const parked: Parked = {
      id: request.id,
      pod,
      release,
      // Expired at the check phase after the timer: requests already read in that turn's
      // poll phase take their slots first (a busy replica's turn can outlast recycle_ms).
      timer: setTimeout(() => setImmediate(() => this.#expire(key, parked)), holdMs),
    };
    const slots = this.#parked.get(key);
    if (slots) slots.push(parked);
    else this.#parked.set(key, [parked]);
    return true;
  }

  /**
   * Takes a parked slot for `request` and sends the handover; returns the slot's pod, or
   * undefined when none fits (the request is then enqueued as usual). The caller tracks
   * `request` in the leases before its next turn (HeldSlot does), so the handover, sent
   * first, reaches Redis before any heartbeat that names it.
   */
  take(request: EnqueueRequest, kvQuota: boolean): string | undefined {
    if (this.#contended || !canHandOver(request) || !this.#roomFor(request)) return undefined;
    if (!this.options.available()) {
      this.releaseAll();
      return undefined;
    }
    const key = kindOf(request, kvQuota);
    const slots = this.#parked.get(key);
    let parked = slots?.pop();
    while (parked && !this.options.healthy(parked.pod)) {
      this.#drop(parked);
      parked = slots?.pop();
    }
    if (slots?.length === 0) this.#parked.delete(key);
    if (!parked) return undefined;
    clearTimeout(parked.timer);
    this.options.leases.untrack(parked.id);
    const { scheduler } = this.options;
    scheduler.handover(parked.id, parked.release, request).then(
      (result) => this.#handedOver(result, parked, request),
      (error: unknown) => {
        this.options.onError?.('handover', error);
        this.#handOverAnyway(parked, request);
      },
    );
    this.options.onRecycled?.();
    return parked.pod;
  }

  /** Releases every parked slot, and parks none from now on (the replica drains or closes). */
  stop(): void {
    this.#stopped = true;
    this.releaseAll();
  }

  /** Releases every parked slot now (Redis went away: nothing may wait on one). */
  releaseAll(): void {
    for (const slots of this.#parked.values()) {
      for (const parked of slots) {
        clearTimeout(parked.timer);
        this.#drop(parked);
      }
    }
    this.#parked.clear();
  }

  /** Whether a limited tenant's request may take or leave a slot (RECYCLE_MARGIN). */
  #roomFor(request: EnqueueRequest): boolean {
    if (!request.budgetTokens) return true;
    const standing = this.#standing.get(request.tenant);
    if (!standing) return false;
    const { requests, tokens } = standing;
    return (
      (!requests || requests.remaining >= RECYCLE_MARGIN) &&
      (!tokens || tokens.remaining >= RECYCLE_MARGIN * request.budgetTokens)
    );
  }

  #handedOver(result: HandoverResult, parked: Parked, request: EnqueueRequest): void {
    if (result.handedOver && result.limits) this.#standing.set(request.tenant, result.limits);
    if (!result.handedOver) this.#handOverAnyway(parked, request);
    else if (result.contended) this.#contend();
    else this.#contended = false;
  }

  /**
   * Redis made no handover (the finished request's lease was gone, it refused), or its fate
   * is unknown (the call failed: it may have run). The finished request ends with its
   * release (sent again when Redis is back; a no-op if the handover ran), and the next one,
   * which already runs on the pod, is registered as a request readopted after a Redis
   * restart is (HeldLeases.adopt: an enqueue with its pod as the hint, a retry if the
   * handover ran). If Redis is unreachable for that too, its heartbeat later finds it
   * unknown and aborts it, unless a reseed readopted it: no slot is held by nobody.
   */
  #handOverAnyway(parked: Parked, request: EnqueueRequest): void {
    this.#contend();
    this.#release(parked);
    this.options.leases.adopt(request.id);
  }

  #expire(key: string, parked: Parked): void {
    const slots = this.#parked.get(key);
    const at = slots?.indexOf(parked) ?? -1;
    if (at < 0) return;
    slots?.splice(at, 1);
    if (slots?.length === 0) this.#parked.delete(key);
    this.#drop(parked);
  }

  /** A parked slot goes back to the pool: untracked, then released as usual. */
  #drop(parked: Parked): void {
    this.options.leases.untrack(parked.id);
    this.#release(parked);
  }

  /** The finished request's ordinary release, with its outcome and usage. */
  #release(parked: Parked): void {
    void this.options.scheduler
      .release(parked.id, parked.release)
      .catch((error: unknown) => this.options.onError?.('release', error));
  }
}

/** Refusals that concern the tenant alone, not whether the pool is contended. */
const TENANT_REFUSALS: ReadonlySet<RejectCode> = new Set([
  RejectCode.RateLimited,
  RejectCode.BudgetExhausted,
  RejectCode.QuotaConcurrencyNeverFits,
  RejectCode.QuotaKvBlocksNeverFits,
]);

/**
 * What a request must share with a finished one to take its slot: its tenant and band, and
 * its KV blocks when its tenant has a KV-block quota (`kvQuota`; without one Redis moves the
 * tenant's KV-block gauge by the difference).
 */
function kindOf(request: EnqueueRequest, kvQuota: boolean): string {
  const kind = `${request.tenant}\u0000${request.band}`;
  return kvQuota ? `${kind}\u0000${request.kvBlocks ?? 0}` : kind;
}
