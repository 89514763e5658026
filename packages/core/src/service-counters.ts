import type { TenantId } from './ids.js';
import { SortedSet } from './sorted-set.js';

/** What the dispatch pass finds in a tenant's queue (FlowState of drr.ts, without a cost). */
export type CounterFlowState = 'empty' | 'blocked' | 'ready';

/**
 * Fairness in tokens (`fairness_unit: tokens`): the Virtual Token Counter of Sheng et al.,
 * "Fairness in Serving Large Language Models" (OSDI 2024), per priority band.
 *
 * Every tenant has a service counter per band: the weighted tokens it was served there,
 * divided by its weight (virtualCost in token-cost.ts). The band's backlogged tenants (those
 * with a waiting request) are ordered by counter, and the smallest is served next; ties go
 * to the bytewise-first tenant id. A grant adds the request's estimate to its tenant's
 * counter, the release adds the difference between its usage and that estimate (a counter
 * may go down, even below zero).
 *
 * A tenant that starts waiting is lifted to the smallest counter of the band's backlogged
 * tenants, or, when none waits, to the counter of the last tenant that stopped waiting; a
 * counter above that stays (a debt is kept). So time spent idle is never banked as credit,
 * and a returning tenant gets its share at once, and no more.
 *
 * Deterministic and free of I/O. The Lua engine (lua/includes/ring.lua) keeps the same state
 * in a sorted set per band (`band:<band>:vtc`, the backlogged tenants scored by counter) and
 * a hash (`vtc`: `<band>:<tenant>` -> the counter of a tenant while it waits nowhere,
 * `<band>:` -> the last leaver's counter) and takes the same steps; the differential test
 * compares the two.
 *
 * Invariants:
 * - a tenant whose queue in the band has something waiting is in the band's active set;
 * - a tenant whose queue became empty leaves when the pass next reaches it (or at once when
 *   its own grant empties it), and its counter goes to the idle store;
 * - a counter is either active or idle; an idle entry of an active tenant is stale and
 *   unread (the Lua engine does not spend a command to delete it).
 */
export class ServiceCounters {
  private readonly active = new Map<number, SortedSet>();
  private readonly idle = new Map<string, number>();

  /** Bands with at least one backlogged tenant. */
  bands(): number[] {
    return [...this.active.keys()];
  }

  /** The band's backlogged tenants, smallest counter first. */
  backlogged(band: number): { tenant: TenantId; counter: number }[] {
    const set = this.active.get(band);
    if (!set) return [];
    return set.entriesInOrder().map(({ member, score }) => ({ tenant: member, counter: score }));
  }

  /** The idle store, as the Redis hash holds it (`<band>:<tenant>` and `<band>:`). */
  idleEntries(): Map<string, number> {
    return new Map(this.idle);
  }

  isBacklogged(band: number, tenant: TenantId): boolean {
    return this.active.get(band)?.score(tenant) !== undefined;
  }

  /** The tenant's counter in the band (active or idle), undefined when never served there. */
  counterOf(band: number, tenant: TenantId): number | undefined {
    return this.active.get(band)?.score(tenant) ?? this.idle.get(idleField(band, tenant));
  }

  /**
   * The tenant starts waiting in the band: it joins the active set lifted to the smallest
   * active counter (none active: the last leaver's). No-op when already active.
   */
  join(band: number, tenant: TenantId): void {
    let set = this.active.get(band);
    if (set?.score(tenant) !== undefined) return;
    const own = this.idle.get(idleField(band, tenant)) ?? 0;
    const floor = set?.first()?.score ?? this.idle.get(idleField(band, '')) ?? 0;
    if (!set) {
      set = new SortedSet();
      this.active.set(band, set);
    }
    set.add(tenant, Math.max(own, floor));
  }

  /**
   * The tenant whose head should be dispatched next: the smallest counter whose queue is
   * ready. Empty queues leave on the way, blocked ones (at a quota) are passed over. Costs
   * O(skipped tenants). `probe` may have side effects (expiring heads) and is called once
   * per visit.
   */
  select(band: number, probe: (tenant: TenantId) => CounterFlowState): TenantId | undefined {
    const set = this.active.get(band);
    if (!set) return undefined;
    let offset = 0;
    for (;;) {
      const entry = set.at(offset);
      if (!entry) return undefined;
      const state = probe(entry.member);
      if (state === 'empty') this.leave(band, entry.member);
      else if (state === 'blocked') offset += 1;
      else return entry.member;
    }
  }

  /**
   * Books a grant from the tenant's queue: its counter grows by `virtual`; when the grant
   * emptied the queue the tenant leaves the active set.
   */
  charge(band: number, tenant: TenantId, virtual: number, queueEmptyNow: boolean): void {
    const set = this.active.get(band);
    const counter = set?.score(tenant);
    if (!set || counter === undefined)
      throw new Error(`charge: ${tenant} waits in no band ${band}`);
    set.add(tenant, counter + virtual);
    if (queueEmptyNow) this.leave(band, tenant);
  }

  /**
   * Adds `delta` to the tenant's counter wherever it is: a grant that never waited (nothing
   * was queued anywhere), a recycled slot's next request, a release's true-up.
   */
  add(band: number, tenant: TenantId, delta: number): void {
    if (delta === 0) return;
    const set = this.active.get(band);
    const counter = set?.score(tenant);
    if (set && counter !== undefined) {
      set.add(tenant, counter + delta);
      return;
    }
    const field = idleField(band, tenant);
    this.idle.set(field, (this.idle.get(field) ?? 0) + delta);
  }

  /** The tenant leaves the band's active set; its counter is kept, and is the last leaver's. */
  leave(band: number, tenant: TenantId): void {
    const set = this.active.get(band);
    const counter = set?.score(tenant);
    if (!set || counter === undefined) return;
    set.remove(tenant);
    if (set.size === 0) this.active.delete(band);
    this.idle.set(idleField(band, tenant), counter);
    this.idle.set(idleField(band, ''), counter);
  }
}

/** The idle store's field: `<band>:<tenant>`, and `<band>:` for the band's last leaver. */
export function idleField(band: number, tenant: TenantId | ''): string {
  return `${band}:${tenant}`;
}
