import { DISPATCH_ORDERS } from './scheduler-settings.js';

/**
 * Dispatch order (GIE / BLIS `--dispatch-order`):
 * - `priority`: bands strictly highest first, the fairness policy inside a band, arrival
 *   order inside a tenant queue;
 * - `slo-deadline`: as priority, but earliest absolute deadline first inside a tenant queue;
 * - `fifo`: the globally earliest arrival across all bands and tenants (priority and
 *   fairness ignored for ordering; quotas still skip a tenant).
 *
 * The Redis implementation keeps queues in sorted sets, so the order inside a queue is
 * (score, id) with ids compared bytewise, exactly as ZRANGE returns them; the in-process
 * implementation sorts the same way so both dispatch in the same order.
 */
export type QueueOrder = (typeof DISPATCH_ORDERS)[number];
export { DISPATCH_ORDERS };

export interface OrderKey {
  readonly score: number;
  readonly id: string;
}

export function compareOrderKeys(a: OrderKey, b: OrderKey): number {
  if (a.score !== b.score) return a.score < b.score ? -1 : 1;
  if (a.id === b.id) return 0;
  return a.id < b.id ? -1 : 1;
}

/**
 * The score of a newly waiting request in its tenant queue (the one place the order key is
 * computed; lua/enqueue-1.lua computes the same). priority and fifo: the pool-wide arrival
 * sequence. slo-deadline: the absolute deadline in server milliseconds; a request without one
 * uses its queue expiry, so it still gets served before it would time out instead of starving
 * behind deadlines.
 */
export function queueScore(
  order: QueueOrder,
  arrival: { seq: number; nowMs: number; deadlineInMs: number | undefined; ttlMs: number },
): number {
  if (order !== 'slo-deadline') return arrival.seq;
  return arrival.nowMs + (arrival.deadlineInMs ?? arrival.ttlMs);
}
