import { Deque } from './deque.js';
import type { TenantId } from './ids.js';
import { compareOrderKeys, type OrderKey } from './order.js';
import { FAIRNESS_POLICIES } from './scheduler-settings.js';

/**
 * Fairness inside one priority band.
 * - `drr`: weighted deficit round robin. A tenant earns weight x quantum per turn and spends
 *   its requests' cost; with cost 1 it dispatches weight x quantum requests per turn.
 * - `round-robin`: one request per tenant per turn, weights ignored.
 * - `global-strict`: arrival order across all tenants of the band (earliest head first).
 */
export type FairnessPolicy = (typeof FAIRNESS_POLICIES)[number];
export { FAIRNESS_POLICIES };

/** What the dispatch pass finds when it looks at a tenant's queue in the band. */
export type FlowState =
  /** Nothing waits (the queue was emptied by a cancel or an expiry since the tenant joined). */
  | { readonly kind: 'empty' }
  /** The tenant is at its concurrency or KV-block quota: skipped, others proceed. */
  | { readonly kind: 'blocked' }
  /** The head may be dispatched. */
  | { readonly kind: 'ready'; readonly cost: number; readonly head: OrderKey };

/**
 * The ring of one band: the tenants that have (or recently had) waiting requests, and their
 * DRR deficits. Deterministic and free of I/O; the Lua dispatch pass (`lua/includes/
 * selectFlow.lua`) performs exactly the same steps on a Redis list and hash, so both
 * scheduler implementations dispatch in the same order.
 *
 * Invariants:
 * - a tenant is in the ring iff it has a deficit entry (membership and credit live together);
 * - a tenant whose queue has something waiting is in the ring of that band;
 * - a tenant whose queue became empty leaves when the ring next reaches it, and its deficit
 *   resets (removal is lazy so cancels and expiries never scan the ring);
 * - credit is granted when a turn ends (the tenant rotates to the back because its deficit
 *   no longer covers its head) and on joining, so the tenant at the front always holds the
 *   credit of its current turn.
 */
export class FlowRing {
  private readonly order = new Deque<TenantId>();
  private readonly deficits = new Map<TenantId, number>();

  get size(): number {
    return this.order.length;
  }

  tenants(): TenantId[] {
    return this.order.toArray();
  }

  has(tenant: TenantId): boolean {
    return this.deficits.has(tenant);
  }

  deficitOf(tenant: TenantId): number | undefined {
    return this.deficits.get(tenant);
  }

  /** Adds the tenant at the back with one turn of credit; returns false if already a member. */
  join(tenant: TenantId, turnCredit: number): boolean {
    if (this.deficits.has(tenant)) return false;
    this.deficits.set(tenant, turnCredit);
    this.order.pushBack(tenant);
    return true;
  }

  /**
   * Finds the tenant whose head request should be dispatched next, or undefined when the
   * ring is empty or every member is blocked. Costs O(skipped flows): empty members are
   * dropped, blocked ones rotated past once, exhausted ones rotated with fresh credit.
   * `probe` may have side effects (expiring heads) and is called once per visit.
   */
  select(
    policy: FairnessPolicy,
    probe: (tenant: TenantId) => FlowState,
    turnCredit: (tenant: TenantId) => number,
  ): TenantId | undefined {
    if (policy === 'global-strict') return this.selectEarliest(probe);
    let blockedInARow = 0;
    for (;;) {
      const tenant = this.order.front();
      if (tenant === undefined || blockedInARow >= this.order.length) return undefined;
      const state = probe(tenant);
      if (state.kind === 'empty') {
        this.leave(tenant);
        continue;
      }
      if (state.kind === 'blocked') {
        this.order.rotate();
        blockedInARow += 1;
        continue;
      }
      const deficit = this.deficits.get(tenant) ?? 0;
      if (policy === 'drr' && deficit < state.cost) {
        // End of this tenant's turn: it goes to the back holding the credit of its next one.
        this.order.rotate();
        this.deficits.set(tenant, deficit + turnCredit(tenant));
        blockedInARow = 0;
        continue;
      }
      return tenant;
    }
  }

  /**
   * Books the dispatch of `tenant`'s head: drr spends the cost; round-robin ends the turn.
   * A tenant whose queue is now empty leaves the ring and its deficit resets, so credit
   * cannot be hoarded while idle (work-conserving, and idle tenants cost nothing).
   */
  charge(tenant: TenantId, cost: number, policy: FairnessPolicy, queueEmptyNow: boolean): void {
    if (queueEmptyNow) {
      this.leave(tenant);
      return;
    }
    if (policy === 'drr') {
      this.deficits.set(tenant, (this.deficits.get(tenant) ?? 0) - cost);
    } else if (policy === 'round-robin') {
      this.order.rotate();
    }
  }

  private selectEarliest(probe: (tenant: TenantId) => FlowState): TenantId | undefined {
    let best: { tenant: TenantId; head: OrderKey } | undefined;
    for (const tenant of this.order.toArray()) {
      const state = probe(tenant);
      if (state.kind === 'empty') this.leave(tenant);
      else if (state.kind === 'ready') {
        if (best === undefined || compareOrderKeys(state.head, best.head) < 0) {
          best = { tenant, head: state.head };
        }
      }
    }
    return best?.tenant;
  }

  private leave(tenant: TenantId): void {
    if (this.order.front() === tenant) this.order.shift();
    else this.order.remove(tenant);
    this.deficits.delete(tenant);
  }
}
