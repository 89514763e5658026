/**
 * Order inside a tenant queue. The Redis implementation keeps queues in sorted sets, so the
 * order is (score, id) with ids compared bytewise, exactly as ZRANGE returns them; the
 * in-process implementation sorts the same way so both dispatch in the same order.
 */
export type QueueOrder = 'fifo' | 'slo-deadline';

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
 * The score of a newly waiting request. fifo: the pool-wide arrival sequence. slo-deadline:
 * the absolute deadline in server milliseconds; a request without one uses its queue expiry,
 * so it still gets served before it would time out instead of starving behind deadlines.
 */
export function queueScore(
  order: QueueOrder,
  arrival: { seq: number; nowMs: number; deadlineInMs: number | undefined; ttlMs: number },
): number {
  if (order === 'fifo') return arrival.seq;
  return arrival.nowMs + (arrival.deadlineInMs ?? arrival.ttlMs);
}
