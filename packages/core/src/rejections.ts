import type { Outcome } from './outcomes.js';

/**
 * Why a request was refused at enqueue. The string value is the drop reason shown to
 * clients (`x-fairgate-drop-reason`) and used as a metrics label, so values are stable.
 */
export enum RejectCode {
  /** The tenant already has queue_max requests waiting. */
  TenantQueueFull = 'tenant_queue_full',
  /** The request's priority band already holds its capacity of waiting requests. */
  BandFull = 'band_full',
  /** The pool-wide queue depth limit is reached. */
  GlobalQueueFull = 'global_queue_full',
  /** The tenant's max_concurrent is 0: this request could never be dispatched. */
  QuotaConcurrencyNeverFits = 'quota_concurrency',
  /** The request alone needs more KV blocks than the tenant's max_kv_blocks. */
  QuotaKvBlocksNeverFits = 'quota_kv_blocks',
  /** No pod is healthy: waiting could only end in a queue TTL expiry. */
  NoHealthyPod = 'no_healthy_pod',
  /** Reserved for the per-tenant token bucket taken at enqueue (admission issue). */
  RateLimited = 'rate_limited',
  /** Reserved for admission shedding by priority tier or saturation (admission issue). */
  Shed = 'shed',
}

export const REJECT_CODES: readonly RejectCode[] = Object.values(RejectCode);

export function isRejectCode(value: string): value is RejectCode {
  return (REJECT_CODES as readonly string[]).includes(value);
}

/** How a drop is rendered over HTTP: 429 with a drop reason, or 503 for no capacity at all. */
export interface DropResponse {
  status: 429 | 503;
  /** Value of `x-fairgate-drop-reason`. */
  dropReason: string;
}

export function rejectionResponse(code: RejectCode): DropResponse {
  if (code === RejectCode.NoHealthyPod) return { status: 503, dropReason: code };
  return { status: 429, dropReason: code };
}

/**
 * Outcomes decided by flow control after admission that the client sees as a drop.
 * Completed, cancelled (the client left) and upstream errors (502/504) are not drops.
 */
export function outcomeDropResponse(outcome: Outcome): DropResponse | undefined {
  switch (outcome) {
    case 'expired':
      return { status: 429, dropReason: 'queue_ttl' };
    case 'evicted':
      return { status: 429, dropReason: 'evicted' };
    default:
      return undefined;
  }
}
